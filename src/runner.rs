//! The runner: a fixed pool of worker threads that execute calls, the recovery
//! thread that finds calls nobody is executing, and the `Notifier` that wakes
//! requests waiting (`?wait=`) for a call to finish.
//!
//! A worker runs one attempt: `claim` (the lease; the worker waits for it to
//! commit, so no tool runs without a durable lease) → run the tool outside any
//! transaction → hand `succeed`/`fail` (fenced by the lease's attempt) to the
//! store's writer without waiting, and take the next call. Behind a quick call
//! (any tool but `sleep`, no chaos hook) a worker takes a second waiting call
//! and claims both in one operation: the claim round trip is what bounds how
//! many calls eight workers finish per commit, and the second call's tool still
//! starts within moments of its lease. The in-flight
//! map only stops the same call being queued twice in this process; it is an
//! optimisation, never a guarantee — the claim's conditional `UPDATE` is what
//! keeps two executors apart, in one process or several.
//!
//! The recovery thread also applies key retention: about once a second it
//! purges terminal calls older than `--key-ttl`, in small batches, and tells
//! the API which keys to forget (`on_purged`), so no cache answers for a
//! purged call. A purge never touches a `pending` or `running` call (the
//! store's conditional `DELETE` decides).

//! Three rules keep real tools from hurting each other or the guarantees:
//! - a retryable failure with attempts left goes back to `pending` with a
//!   not-before time (`retry_scheduled`); no worker waits for it: the
//!   recovery thread queues it once it is due;
//! - a tool's `max_concurrency` is enforced before a worker is involved
//!   (`admission`): calls over the cap wait in memory, `pending`, so a slow
//!   downstream cannot take every worker;
//! - while a tool runs, its lease is extended every third of the lease
//!   (`lease_keeper`), through the same fence as a completion.

mod retention;

pub use retention::OnPurged;
use retention::PURGE_EVERY;

use crate::chaos;
use crate::log;
use crate::metrics::{Metrics, ToolOutcome};
use crate::store::{
    owner_name, CallStore, Completion, Lease, NewEffect, StoreError, HEARTBEAT_EVERY,
};
use crate::sync::lock;
use crate::tools::{
    self, Effect, Outcome, Prepared, RunContext, ToolError, ToolErrorCode, ToolRegistry, ToolSpec,
};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

mod admission;
mod lease_keeper;
mod notifier;

pub use notifier::Notifier;

use admission::Admission;
use lease_keeper::LeaseKeeper;

/// How the runner behaves; filled from the command line.
#[derive(Debug, Clone)]
pub struct RunnerOptions {
    pub workers: usize,
    /// How long a claim lets a worker execute before others may take over;
    /// extended every third of it while the tool runs (`lease_keeper`).
    pub lease: Duration,
    pub recover_interval: Duration,
    /// Honour chaos hooks stored in a call's args.
    pub chaos: bool,
}

/// One call queued for a worker; `generation` tells whose in-flight entry it is.
struct Task {
    call_id: String,
    /// Its tool, whose concurrency cap it is admitted under.
    tool: String,
    generation: u64,
    /// Known to run at once: another call may be claimed along with it.
    quick: bool,
}

/// Calls queued or executing in this process, each with the generation of the
/// submission that owns the entry, and the queue they are sent on (gone once
/// the runner stops).
#[derive(Default)]
struct InFlight {
    calls: HashMap<String, u64>,
    next_generation: u64,
    queue: Option<mpsc::Sender<Task>>,
}

/// The worker pool and the recovery loop around one store.
pub struct Runner {
    store: Arc<CallStore>,
    options: RunnerOptions,
    /// The tools calls are run with (the built-ins, or the `--tools` file).
    tools: Arc<ToolRegistry>,
    /// Per-tool concurrency caps, and the calls waiting for a slot.
    admission: Admission<Task>,
    /// The leases of tools running now, extended by the heartbeat.
    keeper: LeaseKeeper,
    in_flight: Mutex<InFlight>,
    /// The leases whose tools are running right now, so that a stop can
    /// release the ones still running when its grace period ends.
    running: Mutex<HashMap<String, Lease>>,
    notifier: Arc<Notifier>,
    metrics: Arc<Metrics>,
    on_purged: OnPurged,
    /// Set once by `stop`: workers take no new call, recovery ends.
    stopping: AtomicBool,
    /// Dropped by `stop` to wake the recovery thread at once.
    recovery_wake: Mutex<Option<mpsc::Sender<()>>>,
    workers: Mutex<Vec<JoinHandle<()>>>,
    recovery: Mutex<Option<JoinHandle<()>>>,
}

impl Runner {
    /// Start `options.workers` workers and the recovery thread.
    pub fn start(
        store: Arc<CallStore>,
        options: RunnerOptions,
        notifier: Arc<Notifier>,
        tools: Arc<ToolRegistry>,
        metrics: Arc<Metrics>,
        on_purged: OnPurged,
    ) -> std::io::Result<Arc<Runner>> {
        let (queue, tasks) = mpsc::channel::<Task>();
        let (recovery_wake, recovery_sleep) = mpsc::channel::<()>();
        let runner = Arc::new(Runner {
            store,
            options,
            admission: Admission::new(&tools),
            tools,
            keeper: LeaseKeeper::default(),
            in_flight: Mutex::new(InFlight {
                queue: Some(queue),
                ..InFlight::default()
            }),
            running: Mutex::new(HashMap::new()),
            notifier,
            metrics,
            on_purged,
            stopping: AtomicBool::new(false),
            recovery_wake: Mutex::new(Some(recovery_wake)),
            workers: Mutex::new(Vec::new()),
            recovery: Mutex::new(None),
        });
        let tasks = Arc::new(Mutex::new(tasks));
        for n in 0..runner.options.workers.max(1) {
            let (worker, tasks) = (Arc::clone(&runner), Arc::clone(&tasks));
            let handle = spawn_named(format!("worker-{n}"), move || worker.work(&tasks));
            match handle {
                Ok(handle) => lock(&runner.workers).push(handle),
                Err(e) => {
                    runner.stop(Duration::ZERO);
                    return Err(e);
                }
            }
        }
        let recovery = Arc::clone(&runner);
        let handle = spawn_named("recovery".into(), move || {
            recovery.recover_until_stopped(&recovery_sleep)
        });
        match handle {
            Ok(handle) => *lock(&runner.recovery) = Some(handle),
            Err(e) => {
                runner.stop(Duration::ZERO);
                return Err(e);
            }
        }
        Ok(runner)
    }

    /// Stop: no new call is taken (calls waiting for a concurrency slot stay
    /// `pending`), recovery ends, and each worker finishes the tool it is
    /// running and hands its completion to the store; their leases are still
    /// extended meanwhile. Workers still running a tool after `grace` have
    /// their leases released (the call goes back to `pending`, audited
    /// `released`, for the next process to run) and are left to end with the
    /// process. Returns the released call ids. Idempotent.
    pub fn stop(&self, grace: Duration) -> Vec<String> {
        self.stopping.store(true, Ordering::SeqCst);
        drop(self.lock_in_flight().queue.take());
        self.admission.drop_waiting();
        let deadline = Instant::now() + grace;
        let workers = std::mem::take(&mut *lock(&self.workers));
        while Instant::now() < deadline && workers.iter().any(|w| !w.is_finished()) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let released = self.release_running();
        // Only now: the heartbeat thread kept the leases of the tools that
        // finished during the grace period alive until they did.
        drop(lock(&self.recovery_wake).take());
        if let Some(recovery) = lock(&self.recovery).take() {
            let _ = recovery.join();
        }
        for worker in workers.into_iter().filter(|w| w.is_finished()) {
            let _ = worker.join();
        }
        released
    }

    /// Give back the leases of tools still running, so that another process
    /// may run their calls at once instead of waiting for the leases to expire.
    fn release_running(&self) -> Vec<String> {
        let leases: Vec<Lease> = lock(&self.running).drain().map(|(_, l)| l).collect();
        let mut released = Vec::new();
        for lease in leases {
            match self.store.release(&lease) {
                Ok(Completion::Applied) => {
                    log::info("lease released by a stopping process")
                        .event("released")
                        .call_id(&lease.call_id)
                        .attempt(lease.attempt)
                        .transition("running", "pending")
                        .emit();
                    released.push(lease.call_id)
                }
                Ok(Completion::Stale) => {}
                Err(e) => log::error("could not release a lease")
                    .event("release_failed")
                    .call_id(&lease.call_id)
                    .cause(&e)
                    .emit(),
            }
        }
        released
    }

    fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Queue a call of `tool` unless this process already has it queued,
    /// waiting for a concurrency slot, or running. `quick`: its tool is known
    /// to return at once (see `ToolSpec::is_quick`) and it carries no chaos
    /// hook; say `false` when unsure.
    pub fn submit(&self, call_id: &str, tool: &str, quick: bool) {
        let mut in_flight = self.lock_in_flight();
        if in_flight.calls.contains_key(call_id) || in_flight.queue.is_none() {
            // Stopped: the call stays `pending` in the database, the safe place
            // for it, and the next process runs it.
            return;
        }
        in_flight.next_generation += 1;
        let generation = in_flight.next_generation;
        in_flight.calls.insert(call_id.to_string(), generation);
        drop(in_flight);
        let task = Task {
            call_id: call_id.to_string(),
            tool: tool.to_string(),
            generation,
            quick,
        };
        if let Some(task) = self.admission.admit(tool, task) {
            self.enqueue(task);
        }
    }

    /// Hand an admitted task to the workers; gone with the queue once stopped
    /// (the call stays `pending`).
    fn enqueue(&self, task: Task) {
        let queue = self.lock_in_flight().queue.clone();
        if let Some(queue) = queue {
            self.metrics.queued_calls.inc();
            let _ = queue.send(task);
        }
    }

    /// One pass of recovery: expired leases back to `pending`, then every
    /// pending call that is due (no retry scheduled for later) and not already
    /// in flight queued. Also what runs at start-up.
    pub fn recover_once(&self) {
        match self.store.recover() {
            Ok(recovered) => {
                self.metrics.recoveries.inc_by(recovered.len() as u64);
                let mut in_flight = self.lock_in_flight();
                for call_id in &recovered {
                    // Its old executor (if in this process) is stalled past its lease;
                    // forget it so the call can be queued again. The fence discards
                    // whatever that executor completes later.
                    in_flight.calls.remove(call_id);
                    log::info("call recovered")
                        .event("recover")
                        .call_id(call_id)
                        .transition("running", "pending")
                        .emit();
                }
            }
            Err(e) => log::error("recovery failed")
                .event("recovery_failed")
                .cause(&e)
                .emit(),
        }
        match self.store.due_calls(1_000) {
            Ok(due) => due
                .iter()
                .for_each(|call| self.submit(&call.call_id, &call.tool, false)),
            Err(e) => log::error("could not list pending calls")
                .event("recovery_failed")
                .cause(&e)
                .emit(),
        }
    }

    /// Recover every `recover_interval` (which also queues retries once they
    /// are due) until `stop` drops the other end of `sleep`, which wakes this
    /// thread at once. This thread also writes the process's heartbeat, so
    /// other processes know its leases are held by a live owner, and extends
    /// the leases of running tools every third of the lease; both go on while
    /// a stop's grace period lets running tools finish.
    fn recover_until_stopped(&self, sleep: &mpsc::Receiver<()>) {
        let mut last_heartbeat = Instant::now();
        let mut last_purge = Instant::now();
        let mut last_extension = Instant::now();
        let extend_every = self.options.lease / 3;
        let interval = self
            .options
            .recover_interval
            .min(HEARTBEAT_EVERY)
            .min(extend_every)
            // A lease of a few milliseconds (tests) must not spin this thread.
            .max(Duration::from_millis(10));
        while let Err(mpsc::RecvTimeoutError::Timeout) = sleep.recv_timeout(interval) {
            if last_heartbeat.elapsed() >= HEARTBEAT_EVERY {
                if let Err(e) = self.store.heartbeat() {
                    log::warn("heartbeat not written")
                        .event("heartbeat_failed")
                        .cause(&e)
                        .emit();
                }
                last_heartbeat = Instant::now();
            }
            if last_extension.elapsed() >= extend_every {
                last_extension = Instant::now();
                self.keeper.extend_all(&self.store, self.options.lease);
            }
            if !self.is_stopping() {
                self.recover_once();
                if last_purge.elapsed() >= PURGE_EVERY {
                    self.purge_expired();
                    last_purge = Instant::now();
                }
            }
        }
    }

    fn work(self: &Arc<Self>, tasks: &Mutex<mpsc::Receiver<Task>>) {
        while let Some(taken) = next_tasks(tasks) {
            self.metrics.queued_calls.add(-(taken.len() as f64));
            if self.is_stopping() {
                // Left `pending` in the database for the next process.
                return taken.iter().for_each(|task| self.finish(task));
            }
            self.execute(taken);
        }
    }

    /// The call has left this worker: its in-flight entry goes (unless a newer
    /// submission owns it), its tool's concurrency slot passes to the next
    /// waiting call of that tool, if any, and waiters re-check.
    fn finish(&self, task: &Task) {
        let mut in_flight = self.lock_in_flight();
        if in_flight.calls.get(&task.call_id) == Some(&task.generation) {
            in_flight.calls.remove(&task.call_id);
        }
        drop(in_flight);
        if let Some(next) = self.admission.release(&task.tool) {
            self.enqueue(next);
        }
        self.notifier.notify();
    }

    /// Claim the tasks in one operation, then run each one won, in order. Every
    /// failure here leaves a call where recovery finds it: `pending`, or
    /// `running` with a lease that will expire.
    fn execute(self: &Arc<Self>, tasks: Vec<Task>) {
        let owner = owner_name(
            self.store.instance(),
            std::thread::current().name().unwrap_or("unnamed"),
        );
        let ids: Vec<String> = tasks.iter().map(|t| t.call_id.clone()).collect();
        let leases = match self.store.claim_many(&ids, &owner, self.options.lease) {
            Ok(leases) => leases,
            Err(e) => {
                log::error("claim failed")
                    .event("claim_failed")
                    .number("calls", ids.len() as u64)
                    .cause(&e)
                    .emit();
                return tasks.iter().for_each(|task| self.finish(task));
            }
        };
        for (task, lease) in tasks.into_iter().zip(leases) {
            match lease {
                Some(lease) => {
                    self.metrics.claims.inc();
                    log::debug("call claimed")
                        .event("claimed")
                        .call_id(&lease.call_id)
                        .attempt(lease.attempt)
                        .owner(&owner)
                        .transition("pending", "running")
                        .emit();
                    self.run_claimed(task, lease)
                }
                None => self.finish(&task), // held elsewhere, or already terminal
            }
        }
    }

    /// Run one claimed call's tool and hand its completion to the store.
    fn run_claimed(self: &Arc<Self>, task: Task, lease: Lease) {
        lock(&self.running).insert(lease.call_id.clone(), lease.clone());
        self.metrics.busy_workers.inc();
        let (prepared, args, hooks) = match parse_stored_args(&self.tools, &lease) {
            Ok(parsed) => parsed,
            Err(message) => {
                let error = ToolError::new(ToolErrorCode::BadArgs, message);
                return self.complete(task, lease, Outcome::failed(error), None, false);
            }
        };
        let hooks = if self.options.chaos && lease.attempt == 1 {
            hooks
        } else {
            chaos::Hooks::default()
        };
        let started = Instant::now();
        let outcome = {
            // Extended while the tool runs, and only then (see `lease_keeper`).
            let _kept = self.keeper.keep(&lease);
            prepared.spec.run(&RunContext {
                call_id: &lease.call_id,
                effect_id: &lease.effect_id,
                attempt: lease.attempt,
                tool: &lease.tool,
                args: &args,
            })
        };
        self.metrics
            .observe_tool_run(&lease.tool, tool_outcome(&outcome), started.elapsed());
        let retry = retry_delay(&prepared.spec, &lease, &outcome);
        if let Some(stall) = hooks.stall {
            std::thread::sleep(stall);
        }
        if hooks.crash_before_commit {
            chaos::crash("after the tool ran, before its completion committed");
        }
        self.complete(task, lease, outcome, retry, hooks.crash_after_commit);
    }

    /// Queue the fenced completion without waiting for its commit: the worker
    /// takes its next call while this one is grouped with other writes. The
    /// task is finished (and waiters woken) only once the commit is known. A
    /// failure with a `retry` delay goes back to `pending` until then instead
    /// of ending the call; no worker waits for it.
    fn complete(
        self: &Arc<Self>,
        task: Task,
        lease: Lease,
        outcome: Outcome,
        retry: Option<Duration>,
        crash_after_commit: bool,
    ) {
        self.metrics.busy_workers.dec();
        if lock(&self.running).remove(&lease.call_id).is_none() && self.is_stopping() {
            // The stop's grace period ended and released this lease: the call
            // is `pending` again; completing it would only be discarded.
            return self.finish(&task);
        }
        let runner = Arc::clone(self);
        let (call_id, attempt) = (lease.call_id.clone(), lease.attempt);
        let (to, writes_effect) = match (&outcome, retry) {
            (Outcome::Succeeded { effect, .. }, _) => ("succeeded", effect.is_some()),
            (Outcome::Failed { .. }, Some(_)) => ("retry_scheduled", false),
            (Outcome::Failed { .. }, None) => ("failed", false),
        };
        let then = Box::new(move |committed: Result<Completion, StoreError>| {
            match committed {
                Ok(Completion::Applied) => {
                    if writes_effect {
                        runner.metrics.effects_written.inc();
                    }
                    if to == "retry_scheduled" {
                        runner.metrics.retries_scheduled.inc();
                    }
                    log::debug("call completed")
                        .event(to)
                        .call_id(&call_id)
                        .attempt(attempt)
                        .transition(
                            "running",
                            if to == "retry_scheduled" {
                                "pending"
                            } else {
                                to
                            },
                        )
                        .emit();
                    if crash_after_commit {
                        chaos::crash("after the completion committed, before any response");
                    }
                }
                Ok(Completion::Stale) => {
                    runner.metrics.stale_completions.inc();
                    log::warn("stale completion discarded: the lease was lost")
                        .event("stale_completion")
                        .call_id(&call_id)
                        .attempt(attempt)
                        .emit()
                }
                // The lease will expire and recovery will run the call again with
                // the same effect_id, which the downstream (and `effects`) deduplicate.
                Err(e) => log::error("completion not committed; recovery will run the call again")
                    .event("complete_failed")
                    .call_id(&call_id)
                    .attempt(attempt)
                    .cause(&e)
                    .emit(),
            }
            runner.finish(&task);
        });
        match &outcome {
            Outcome::Succeeded { result, effect } => {
                self.store
                    .succeed_then(&lease, result, effect.as_ref().map(effect_record), then)
            }
            Outcome::Failed { error, .. } => match retry {
                Some(delay) => self
                    .store
                    .retry_later_then(&lease, &error.to_json(), delay, then),
                None => self.store.fail_then(&lease, &error.to_json(), then),
            },
        }
    }

    fn lock_in_flight(&self) -> std::sync::MutexGuard<'_, InFlight> {
        lock(&self.in_flight)
    }
}

/// The metrics label of a tool run's outcome.
fn tool_outcome(outcome: &Outcome) -> ToolOutcome {
    match outcome {
        Outcome::Succeeded { .. } => ToolOutcome::Succeeded,
        Outcome::Failed { error, .. } if error.retryable => ToolOutcome::RetryableFailure,
        Outcome::Failed { .. } => ToolOutcome::PermanentFailure,
    }
}

/// The next task, and with it a second one when the first is quick and another
/// is already waiting. `None` once the queue is gone. The lock is held only
/// while waiting for the first.
fn next_tasks(tasks: &Mutex<mpsc::Receiver<Task>>) -> Option<Vec<Task>> {
    let queue = lock(tasks);
    let first = queue.recv().ok()?;
    let second = if first.quick {
        queue.try_recv().ok()
    } else {
        None
    };
    Some(std::iter::once(first).chain(second).collect())
}

/// Whether a failed attempt is retried automatically, and after how long: a
/// retryable failure before the tool's last attempt, after its backoff (or the
/// downstream's `Retry-After`). A call a same-key POST reset after its last
/// attempt gets one attempt per reset.
fn retry_delay(spec: &ToolSpec, lease: &Lease, outcome: &Outcome) -> Option<Duration> {
    match outcome {
        Outcome::Failed { error, retry_after }
            if error.retryable && lease.attempt < i64::from(spec.max_attempts) =>
        {
            let failed_attempt = u32::try_from(lease.attempt).unwrap_or(u32::MAX);
            Some(
                spec.backoff
                    .delay(failed_attempt, *retry_after, tools::jitter()),
            )
        }
        _ => None,
    }
}

/// The stored args as the tool will see them (chaos hooks split off), checked
/// against the tool as this process knows it: a call stored by a process with
/// another tools file may name a tool this one lacks.
fn parse_stored_args(
    tools: &ToolRegistry,
    lease: &Lease,
) -> Result<(Prepared, Map<String, Value>, chaos::Hooks), String> {
    let args: Map<String, Value> =
        serde_json::from_str(&lease.args_json).map_err(|e| format!("stored args: {e}"))?;
    let (args, hooks) = chaos::split(&args).map_err(|e| e.to_string())?;
    let prepared = tools
        .prepare(&lease.tool, &args)
        .map_err(|e| e.to_string())?;
    Ok((prepared, args, hooks))
}

/// The `effects` row the store writes for a tool's effect: the runner is
/// where tools and the store meet, so neither depends on the other.
fn effect_record(effect: &Effect) -> NewEffect {
    NewEffect {
        amount: effect.amount,
        detail: effect.detail.clone(),
    }
}

fn spawn_named(
    name: String,
    body: impl FnOnce() + Send + 'static,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name(name).spawn(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(call_id: &str, quick: bool) -> Task {
        Task {
            call_id: call_id.to_string(),
            tool: "charge".to_string(),
            generation: 0,
            quick,
        }
    }

    fn taken_ids(queue: &Mutex<mpsc::Receiver<Task>>) -> Vec<String> {
        next_tasks(queue)
            .expect("a task")
            .into_iter()
            .map(|t| t.call_id)
            .collect()
    }

    /// A worker takes a second waiting call only behind a quick one, never waits
    /// for a second, and stops when the queue is gone.
    #[test]
    fn a_second_call_rides_only_behind_a_quick_one() {
        let (tx, rx) = mpsc::channel();
        let queue = Mutex::new(rx);
        for t in [
            task("quick-1", true),
            task("slow-2", false),
            task("slow-3", false),
            task("quick-4", true),
            task("quick-5", true),
            task("quick-6", true),
        ] {
            tx.send(t).unwrap();
        }
        assert_eq!(taken_ids(&queue), ["quick-1", "slow-2"]);
        assert_eq!(taken_ids(&queue), ["slow-3"]);
        assert_eq!(taken_ids(&queue), ["quick-4", "quick-5"]);
        assert_eq!(taken_ids(&queue), ["quick-6"]);
        drop(tx);
        assert!(next_tasks(&queue).is_none());
    }
}
