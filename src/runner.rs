//! The runner: a fixed pool of worker threads that execute calls, a
//! maintenance ticker for the periodic jobs, a completer that records what
//! the store's writer committed, and the `Notifier` that wakes requests
//! waiting (`?wait=`) for a call to finish.
//!
//! A worker runs one attempt: `claim` (the lease; the worker waits for it to
//! commit, so no tool runs without a durable lease) → run the tool outside any
//! transaction → hand `succeed`/`fail` (fenced by the lease's attempt) to the
//! store's writer without waiting, and take the next call. Behind a quick call
//! (any tool but `sleep`, no chaos hook) a worker takes a second waiting call
//! and claims both in one operation: the claim round trip is what bounds how
//! many calls eight workers finish per commit, and the second call's tool still
//! starts within moments of its lease. Due calls this process did not submit
//! (a crash's, a retry's, another node's) arrive already claimed: the poll
//! (`claim`) claims as many as there are free workers in one store operation
//! and a worker runs each lease as it comes, with no second claim. A new
//! call whose worker a request reserved arrives claimed too (created `running`);
//! a quick one may be reserved past the free workers while only quick work is
//! ahead of it (`claim::Capacity`), so under load most quick calls need no
//! claim of their own.
//!
//! Where each call is in this process — queued, waiting for its tool's slot,
//! claiming, running under a lease and when that lease is next extended,
//! completing — is one entry of the task table (`tasks`), under one lock. The
//! table only stops the same call being taken on twice in this process; it is
//! an optimisation, never a guarantee — the claim's conditional `UPDATE` is
//! what keeps two executors apart, in one process or several.
//!
//! Three rules keep real tools from hurting each other or the guarantees:
//! - a retryable failure with attempts left goes back to `pending` with a
//!   not-before time (`retry_scheduled`); no worker waits for it: the
//!   maintenance ticker's poll claims it once it is due;
//! - a tool's `max_concurrency` is enforced before a worker is involved: calls
//!   over the cap wait in the task table, `pending`, so a slow downstream
//!   cannot take every worker;
//! - while a tool runs, its lease is extended every third of the lease
//!   (`maintenance`), through the same fence as a completion, and never after
//!   the tool has returned.
//!
//! Threads: `worker-N` (`pool`), `maintenance`, `completer` (`completion`);
//! the poll runs on `maintenance`, and on a PostgreSQL node's wake-up thread.
//! `stop` ends and joins all of them, except workers still inside a tool when
//! the grace period ends.
//!
//! A claimed call's stored args are re-checked against this process's tools
//! before its tool starts (`stored_args`): a failure there is the call's
//! `bad_args`, never a worker's panic.

mod claim;
mod completion;
mod maintenance;
mod notifier;
mod pool;
mod retention;
mod stored_args;
mod tasks;

pub use claim::Reservation;
pub use notifier::Notifier;
pub use retention::OnPurged;

use crate::chaos;
use crate::log::{self, Repeats, BACKGROUND_FAILURE_EVERY};
use crate::metrics::{Metrics, ToolOutcome};
use crate::store::{owner_name, CallStore, Completion, Lease, NewEffect};
use crate::sync::lock;
use crate::tools::{
    self, Effect, Outcome, RunContext, ToolError, ToolErrorCode, ToolRegistry, ToolSpec,
};
use claim::{Capacity, Job};
use completion::{Completions, Handed, Transition};
use maintenance::Ticker;
use pool::WorkerPool;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, PoisonError, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use stored_args::parse_stored_args;
use tasks::{Task, TaskTable};

/// Fails again on every pass while the fault lasts: one line per interval.
static RECOVERY_FAILED: Repeats = Repeats::every(BACKGROUND_FAILURE_EVERY);

/// How the runner behaves; filled from the command line.
#[derive(Debug, Clone)]
pub struct RunnerOptions {
    pub workers: usize,
    /// How long a claim lets a worker execute before others may take over;
    /// extended every third of it while the tool runs (`maintenance`).
    pub lease: Duration,
    pub recover_interval: Duration,
    /// Honour chaos hooks stored in a call's args.
    pub chaos: bool,
}

/// The worker pool, the maintenance ticker and the completer around one store.
pub struct Runner {
    store: Arc<CallStore>,
    options: RunnerOptions,
    /// The tools calls are run with (the built-ins, or the `--tools` file).
    tools: Arc<ToolRegistry>,
    /// Every call this process has taken on, and the per-tool slots; holds
    /// the completer's channel until a stop closes it.
    tasks: TaskTable<Completions>,
    /// The workers; taken out (closed) by `stop`, after which nothing is queued.
    pool: RwLock<Option<WorkerPool<Job>>>,
    /// How many workers are spoken for; what a poll may claim is the rest.
    capacity: Capacity,
    /// The last poll claimed all it was allowed (every free worker, or every
    /// free slot of a capped tool), so more calls may be due: the completer
    /// asks for a poll once a completion frees a worker or a slot, instead
    /// of leaving them idle until the next interval.
    more_due: AtomicBool,
    notifier: Arc<Notifier>,
    metrics: Arc<Metrics>,
    on_purged: OnPurged,
    /// Set once by `stop`: workers claim no new call, recovery and purge end.
    stopping: AtomicBool,
    /// Taken and dropped (joined) by `stop`, after the grace period: the
    /// heartbeats go on while running tools finish.
    ticker: Mutex<Option<Ticker>>,
    /// Joined by `stop` once every completion already handed to the store is
    /// recorded.
    completer: Mutex<Option<JoinHandle<()>>>,
}

impl Runner {
    /// Start `options.workers` workers, the completer and the maintenance
    /// ticker.
    pub fn start(
        store: Arc<CallStore>,
        options: RunnerOptions,
        notifier: Arc<Notifier>,
        tools: Arc<ToolRegistry>,
        metrics: Arc<Metrics>,
        on_purged: OnPurged,
    ) -> std::io::Result<Arc<Runner>> {
        let (completions, handoffs) = mpsc::channel();
        let runner = Arc::new(Runner {
            store,
            tasks: TaskTable::new(&tools, options.lease, completions),
            capacity: Capacity::new(options.workers),
            more_due: AtomicBool::new(false),
            options,
            tools,
            pool: RwLock::new(None),
            notifier,
            metrics,
            on_purged,
            stopping: AtomicBool::new(false),
            ticker: Mutex::new(None),
            completer: Mutex::new(None),
        });
        if let Err(e) = runner.start_threads(handoffs) {
            runner.stop(Duration::ZERO);
            return Err(e);
        }
        Ok(runner)
    }

    fn start_threads(
        self: &Arc<Self>,
        handoffs: mpsc::Receiver<completion::Handoff>,
    ) -> std::io::Result<()> {
        *lock(&self.completer) = Some(completion::start(Arc::clone(self), handoffs)?);
        let worker = Arc::clone(self);
        let pool = WorkerPool::start(
            self.options.workers,
            "worker",
            |job: &Job| job.task().quick,
            move |taken| worker.work(taken),
        )?;
        *self.pool.write().unwrap_or_else(PoisonError::into_inner) = Some(pool);
        *lock(&self.ticker) = Some(Ticker::start(Arc::clone(self))?);
        Ok(())
    }

    /// Stop: no new call is taken (calls waiting for a concurrency slot stay
    /// `pending`), recovery ends, and each worker finishes the tool it is
    /// running and hands its completion to the store; their leases are still
    /// extended meanwhile. Workers still running a tool after `grace` have
    /// their leases released (the call goes back to `pending`, audited
    /// `released`, for the next process to run) and are left to end with the
    /// process. Returns once every completion handed to the store is
    /// recorded, with the released call ids. Idempotent.
    pub fn stop(&self, grace: Duration) -> Vec<String> {
        let deadline = Instant::now() + grace;
        self.stopping.store(true, Ordering::SeqCst);
        let mut pool = self
            .pool
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(pool) = &mut pool {
            pool.close();
            pool.wait_until_idle(deadline);
        }
        let released = self.release_held(self.tasks.close());
        self.end_threads(pool);
        released
    }

    /// After the grace period: the ticker ends (only now: it kept the leases
    /// of the tools that finished during the grace period alive until they
    /// did), workers still inside a tool are let go and the others joined,
    /// and the completer ends once the writer has answered every completion
    /// handed to it.
    fn end_threads(&self, pool: Option<WorkerPool<Job>>) {
        let ticker = lock(&self.ticker).take();
        drop(ticker); // joined outside the lock: `poll_soon` takes it
        if let Some(mut pool) = pool {
            let busy = pool.detach_busy();
            if busy > 0 {
                log::warn("workers still running a tool are left to end with the process")
                    .event("workers_detached")
                    .number("workers", busy as u64)
                    .emit();
            }
        }
        if let Some(completer) = lock(&self.completer).take() {
            let _ = completer.join();
        }
    }

    /// Give back the leases of tools still running, so that another process
    /// may run their calls at once instead of waiting for the leases to expire.
    fn release_held(&self, leases: Vec<Lease>) -> Vec<String> {
        leases
            .into_iter()
            .filter(|lease| self.release(lease))
            .map(|lease| lease.call_id)
            .collect()
    }

    /// Give one lease back; `true` if the call went back to `pending`.
    fn release(&self, lease: &Lease) -> bool {
        match self.store.release(lease) {
            Ok(Completion::Applied) => {
                log::info("lease released by a stopping process")
                    .event("released")
                    .call_id(&lease.call_id)
                    .attempt(lease.attempt)
                    .transition("running", "pending")
                    .emit();
                true
            }
            Ok(Completion::Stale) => false,
            Err(e) => {
                log::error("could not release a lease")
                    .event("release_failed")
                    .call_id(&lease.call_id)
                    .cause(&e)
                    .emit();
                false
            }
        }
    }

    fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Queue a call of `tool` unless this process already has it queued,
    /// waiting for a concurrency slot, or running. `quick`: its tool is known
    /// to return at once (see `ToolSpec::is_quick`) and it carries no chaos
    /// hook; say `false` when unsure.
    pub fn submit(&self, call_id: &str, tool: &str, quick: bool) {
        if self.is_stopping() {
            // The call stays `pending` in the database, the safe place for
            // it, and the next process runs it.
            return;
        }
        if let Some(task) = self.tasks.submit(call_id, tool, quick) {
            self.enqueue(task);
        }
    }

    /// Hand an admitted task to the workers. Once they are gone (a stop) the
    /// task is finished unsent — the call stays `pending` — and the slot it
    /// held passes on, to the same end.
    fn enqueue(&self, task: Task) {
        let mut next = Some(task);
        while let Some(task) = next.take() {
            let pool = self.pool.read().unwrap_or_else(PoisonError::into_inner);
            let unsent = match pool.as_ref() {
                Some(pool) => {
                    // Counted before the send: a worker may finish it first.
                    let quick = task.quick;
                    self.capacity.queued(quick);
                    let unsent = pool.send(Job::Claim(task)).err();
                    if unsent.is_some() {
                        self.capacity.release(1, usize::from(!quick));
                    }
                    unsent
                }
                None => Some(Job::Claim(task)),
            };
            drop(pool);
            match unsent {
                None => self.metrics.queued_calls.inc(),
                Some(job) => next = self.tasks.finish(job.task()),
            }
        }
    }

    /// One pass of recovery: expired leases back to `pending` (but never one
    /// this process's workers still run and extend), then as many due calls
    /// (no retry scheduled for later) as there are free workers claimed in
    /// one operation and run (`claim_due_work`). Also what runs at start-up.
    pub fn recover_once(&self) {
        match self.store.recover(&self.tasks.extended_leases()) {
            Ok(recovered) => {
                self.metrics.recoveries.inc_by(recovered.len() as u64);
                for call_id in &recovered {
                    // Its old executor (if in this process) is stalled past its
                    // lease; forget it so the call can be taken on again. The
                    // fence discards whatever that executor completes later.
                    self.tasks.forget(call_id);
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
                .emit_or_count(&RECOVERY_FAILED),
        }
        self.claim_due_work();
    }

    /// A worker's batch: run the calls that came claimed, claim the tasks
    /// still this submission's, finish the others. A stopping runner starts
    /// nothing: the calls stay (or go back to) `pending` in the database for
    /// the next process.
    fn work(self: &Arc<Self>, taken: Vec<Job>) {
        let jobs = taken.len();
        let slow = taken.iter().filter(|job| !job.task().quick).count();
        self.metrics.queued_calls.add(-(jobs as f64));
        let mut to_claim = Vec::new();
        for job in taken {
            match job {
                Job::Claim(task) if !self.is_stopping() && self.tasks.take(&task) => {
                    to_claim.push(task)
                }
                Job::Run(task, lease) if !self.is_stopping() && self.tasks.starts(&task) => {
                    self.run_claimed(task, lease)
                }
                Job::Run(task, lease) => {
                    self.finish(&task);
                    if self.is_stopping() {
                        self.release(&lease);
                    }
                }
                Job::Claim(task) => self.finish(&task),
            }
        }
        if !to_claim.is_empty() {
            self.execute(to_claim);
        }
        self.capacity.release(jobs, slow);
    }

    /// Ask the maintenance thread to poll now (see `more_due`).
    fn poll_soon(&self) {
        if let Some(ticker) = lock(&self.ticker).as_ref() {
            ticker.poll_now();
        }
    }

    /// The call has left this worker without a completion: its entry goes,
    /// its tool's slot passes on, and its waiters re-check.
    fn finish(&self, task: &Task) {
        self.pass_slot_on(task);
        self.notifier.notify([task.call_id.as_str()]);
    }

    /// The task is done in this process: its entry goes (unless a newer
    /// submission owns it), and its tool's slot goes to the next waiting call.
    fn pass_slot_on(&self, task: &Task) {
        if let Some(next) = self.tasks.finish(task) {
            self.enqueue(next);
        }
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
            let Some(lease) = lease else {
                self.finish(&task); // held elsewhere, or already terminal
                continue;
            };
            self.metrics.claims.inc();
            log_claimed(&lease.call_id, lease.attempt, &owner);
            if self.tasks.claimed(&task, &lease) {
                self.run_claimed(task, lease);
            } else {
                // A stop closed the table while this claim committed: give
                // the lease back rather than run a tool nobody tracks.
                self.release(&lease);
                self.finish(&task);
            }
        }
    }

    /// Run one claimed call's tool and hand its completion to the store.
    fn run_claimed(self: &Arc<Self>, task: Task, lease: Lease) {
        self.metrics.busy_workers.inc();
        let (prepared, args, hooks) = match parse_stored_args(&self.tools, &lease) {
            Ok(parsed) => parsed,
            Err(why) => {
                let error = ToolError::new(ToolErrorCode::BadArgs, why.to_string());
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
            // Its lease is extended until the tool returns (or panics).
            let _runs = tasks::ToolRuns::new(&self.tasks, &task);
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

    /// Hand the fenced completion to the store without waiting for its
    /// commit: the worker takes its next call while this one is grouped with
    /// other writes, and the completer records it once the commit is known.
    /// A failure with a `retry` delay goes back to `pending` until then
    /// instead of ending the call; no worker waits for it.
    fn complete(
        &self,
        task: Task,
        lease: Lease,
        outcome: Outcome,
        retry: Option<Duration>,
        crash_after_commit: bool,
    ) {
        self.metrics.busy_workers.dec();
        let Some(completions) = self.tasks.completing(&task) else {
            // A stop's grace period ended and released this lease: the call
            // is `pending` again; completing it would only be discarded.
            return self.finish(&task);
        };
        let (transition, writes_effect) = match (&outcome, retry) {
            (Outcome::Succeeded { effect, .. }, _) => (Transition::Succeeded, effect.is_some()),
            (Outcome::Failed { .. }, Some(_)) => (Transition::RetryScheduled, false),
            (Outcome::Failed { .. }, None) => (Transition::Failed, false),
        };
        let handed = Handed {
            task,
            attempt: lease.attempt,
            transition,
            writes_effect,
            crash_after_commit,
            finish: Arc::new(Finish {
                lease,
                outcome,
                retry,
            }),
            tries: 1,
        };
        self.hand_to_store(handed, completions);
    }

    /// Submit a completion to the store's writer, its outcome to be sent
    /// through `completions`: the first time, and again when a commit
    /// failed for a reason that may pass (`completion`).
    fn hand_to_store(&self, handed: Handed, completions: Completions) {
        let finish = Arc::clone(&handed.finish);
        let Finish {
            lease,
            outcome,
            retry,
        } = &*finish;
        let then = completion::hand_back(completions, handed);
        match outcome {
            Outcome::Succeeded { result, effect } => {
                self.store
                    .succeed_then(lease, result, effect.as_ref().map(effect_record), then)
            }
            Outcome::Failed { error, .. } => match retry {
                Some(delay) => self
                    .store
                    .retry_later_then(lease, &error.to_json(), *delay, then),
                None => self.store.fail_then(lease, &error.to_json(), then),
            },
        }
    }
}

/// What a worker asks the store to record when its tool returns: kept with
/// the completion until it is committed or fenced off, so that a commit
/// that failed can be asked for again.
struct Finish {
    lease: Lease,
    outcome: Outcome,
    retry: Option<Duration>,
}

/// The metrics label of a tool run's outcome.
fn tool_outcome(outcome: &Outcome) -> ToolOutcome {
    match outcome {
        Outcome::Succeeded { .. } => ToolOutcome::Succeeded,
        Outcome::Failed { error, .. } if error.retryable => ToolOutcome::RetryableFailure,
        Outcome::Failed { .. } => ToolOutcome::PermanentFailure,
    }
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

/// The `effects` row the store writes for a tool's effect: the runner is
/// where tools and the store meet, so neither depends on the other.
fn effect_record(effect: &Effect) -> NewEffect {
    NewEffect {
        amount: effect.amount,
        detail: effect.detail.clone(),
    }
}

/// The debug line of a claim, whoever made it (a worker's by id, the poll's).
/// A won claim, at `debug`: by a worker, the poll, or a request that
/// created its call already claimed (`Calls::submit`).
pub(crate) fn log_claimed(call_id: &str, attempt: i64, owner: &str) {
    log::debug("call claimed")
        .event("claimed")
        .call_id(call_id)
        .attempt(attempt)
        .owner(owner)
        .transition("pending", "running")
        .emit();
}
