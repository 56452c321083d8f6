//! The runner: a fixed pool of worker threads that execute calls, the recovery
//! thread that finds calls nobody is executing, and the `Notifier` that wakes
//! requests waiting (`?wait=`) for a call to finish.
//!
//! A worker runs one attempt: `claim` (the lease; the worker waits for it to
//! commit, so no tool runs without a durable lease) → run the tool outside any
//! transaction → hand `succeed`/`fail` (fenced by the lease's attempt) to the
//! store's writer without waiting, and take the next call. The in-flight
//! map only stops the same call being queued twice in this process; it is an
//! optimisation, never a guarantee — the claim's conditional `UPDATE` is what
//! keeps two executors apart, in one process or several.

use crate::chaos;
use crate::store::{CallStore, Completion, Lease, StoreError};
use crate::tools::{Outcome, Tool};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How the runner behaves; filled from the command line.
#[derive(Debug, Clone)]
pub struct RunnerOptions {
    pub workers: usize,
    /// How long a claim lets a worker execute before others may take over. Must
    /// exceed the longest tool run, or a healthy attempt is taken over.
    pub lease: Duration,
    pub recover_interval: Duration,
    /// Honour chaos hooks stored in a call's args.
    pub chaos: bool,
}

/// One call queued for a worker; `generation` tells whose in-flight entry it is.
struct Task {
    call_id: String,
    generation: u64,
}

/// Calls queued or executing in this process, each with the generation of the
/// submission that owns the entry.
#[derive(Default)]
struct InFlight {
    calls: HashMap<String, u64>,
    next_generation: u64,
}

/// The worker pool and the recovery loop around one store.
pub struct Runner {
    store: Arc<CallStore>,
    options: RunnerOptions,
    queue: mpsc::Sender<Task>,
    in_flight: Mutex<InFlight>,
    notifier: Arc<Notifier>,
}

impl Runner {
    /// Start `options.workers` workers and the recovery thread.
    pub fn start(
        store: Arc<CallStore>,
        options: RunnerOptions,
        notifier: Arc<Notifier>,
    ) -> std::io::Result<Arc<Runner>> {
        let (queue, tasks) = mpsc::channel::<Task>();
        let runner = Arc::new(Runner {
            store,
            options,
            queue,
            in_flight: Mutex::new(InFlight::default()),
            notifier,
        });
        let tasks = Arc::new(Mutex::new(tasks));
        for n in 0..runner.options.workers.max(1) {
            let (runner, tasks) = (Arc::clone(&runner), Arc::clone(&tasks));
            spawn_named(format!("worker-{n}"), move || runner.work(&tasks))?;
        }
        let recovery = Arc::clone(&runner);
        spawn_named("recovery".into(), move || recovery.recover_forever())?;
        Ok(runner)
    }

    /// Queue a call unless this process already has it queued or running.
    pub fn submit(&self, call_id: &str) {
        let mut in_flight = self.lock_in_flight();
        if in_flight.calls.contains_key(call_id) {
            return;
        }
        in_flight.next_generation += 1;
        let generation = in_flight.next_generation;
        in_flight.calls.insert(call_id.to_string(), generation);
        drop(in_flight);
        let task = Task {
            call_id: call_id.to_string(),
            generation,
        };
        // The workers never stop while the process runs; if they somehow did, the
        // call stays `pending` in the database, which is the safe place for it.
        let _ = self.queue.send(task);
    }

    /// One pass of recovery: expired leases back to `pending`, then every pending
    /// call not already in flight queued. Also what runs at start-up.
    pub fn recover_once(&self) {
        match self.store.recover() {
            Ok(recovered) => {
                let mut in_flight = self.lock_in_flight();
                for call_id in &recovered {
                    // Its old executor (if in this process) is stalled past its lease;
                    // forget it so the call can be queued again. The fence discards
                    // whatever that executor completes later.
                    in_flight.calls.remove(call_id);
                }
            }
            Err(e) => eprintln!("recovery: {e}"),
        }
        match self.store.pending_ids(1_000) {
            Ok(ids) => ids.iter().for_each(|id| self.submit(id)),
            Err(e) => eprintln!("recovery: {e}"),
        }
    }

    fn recover_forever(&self) {
        loop {
            std::thread::sleep(self.options.recover_interval);
            self.recover_once();
        }
    }

    fn work(self: &Arc<Self>, tasks: &Mutex<mpsc::Receiver<Task>>) {
        loop {
            // The lock is held only while waiting for the next task.
            let task = match tasks.lock().unwrap_or_else(|p| p.into_inner()).recv() {
                Ok(task) => task,
                Err(_) => return,
            };
            self.execute(task);
        }
    }

    /// The call has left this worker: its in-flight entry goes (unless a newer
    /// submission owns it) and waiters re-check.
    fn finish(&self, task: &Task) {
        let mut in_flight = self.lock_in_flight();
        if in_flight.calls.get(&task.call_id) == Some(&task.generation) {
            in_flight.calls.remove(&task.call_id);
        }
        drop(in_flight);
        self.notifier.notify();
    }

    /// Claim, run, hand the completion to the store. Every failure here leaves
    /// the call where recovery finds it: `pending`, or `running` with a lease
    /// that will expire.
    fn execute(self: &Arc<Self>, task: Task) {
        let owner = owner_name();
        let lease = match self.store.claim(&task.call_id, &owner, self.options.lease) {
            Ok(Some(lease)) => lease,
            Ok(None) => return self.finish(&task), // held elsewhere, or already terminal
            Err(e) => {
                eprintln!("claim {}: {e}", task.call_id);
                return self.finish(&task);
            }
        };
        let (tool, hooks) = match parse_stored_args(&lease) {
            Ok(parsed) => parsed,
            Err(message) => {
                let error =
                    serde_json::json!({"code": "bad_args", "message": message, "retryable": false});
                return self.complete(task, lease, Outcome::Failed { error }, false);
            }
        };
        let hooks = if self.options.chaos && lease.attempt == 1 {
            hooks
        } else {
            chaos::Hooks::default()
        };
        let outcome = tool.run(lease.attempt, &lease.effect_id);
        if let Some(stall) = hooks.stall {
            std::thread::sleep(stall);
        }
        if hooks.crash_before_commit {
            chaos::crash("after the tool ran, before its completion committed");
        }
        self.complete(task, lease, outcome, hooks.crash_after_commit);
    }

    /// Queue the fenced completion without waiting for its commit: the worker
    /// takes its next call while this one is grouped with other writes. The
    /// task is finished (and waiters woken) only once the commit is known.
    fn complete(
        self: &Arc<Self>,
        task: Task,
        lease: Lease,
        outcome: Outcome,
        crash_after_commit: bool,
    ) {
        let runner = Arc::clone(self);
        let (call_id, attempt) = (lease.call_id.clone(), lease.attempt);
        let then = Box::new(move |committed: Result<Completion, StoreError>| {
            match committed {
                Ok(Completion::Applied) => {
                    if crash_after_commit {
                        chaos::crash("after the completion committed, before any response");
                    }
                }
                Ok(Completion::Stale) => {
                    eprintln!("worker: stale completion of {call_id} attempt {attempt} discarded")
                }
                // The lease will expire and recovery will run the call again with
                // the same effect_id, which the downstream (and `effects`) deduplicate.
                Err(e) => eprintln!("complete {call_id}: {e}"),
            }
            runner.finish(&task);
        });
        match &outcome {
            Outcome::Succeeded { result, effect } => {
                self.store
                    .succeed_then(&lease, result, effect.as_ref().map(|e| e.amount), then)
            }
            Outcome::Failed { error } => self.store.fail_then(&lease, error, then),
        }
    }

    fn lock_in_flight(&self) -> std::sync::MutexGuard<'_, InFlight> {
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn parse_stored_args(lease: &Lease) -> Result<(Tool, chaos::Hooks), String> {
    let args: Map<String, Value> =
        serde_json::from_str(&lease.args_json).map_err(|e| format!("stored args: {e}"))?;
    let (args, hooks) = chaos::split(&args)?;
    Ok((Tool::parse(&lease.tool, &args)?, hooks))
}

/// `pid:thread`, so a row's owner tells which process and worker held it.
fn owner_name() -> String {
    let thread = std::thread::current();
    format!(
        "{}:{}",
        std::process::id(),
        thread.name().unwrap_or("unnamed")
    )
}

fn spawn_named(
    name: String,
    body: impl FnOnce() + Send + 'static,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name(name).spawn(body)
}

/// Wakes requests that wait for a call to reach a terminal state.
#[derive(Default)]
pub struct Notifier {
    completions: Mutex<u64>,
    changed: Condvar,
}

/// How often a waiter re-reads the database even without a wake-up: another
/// process on the same file may complete the call.
const WAIT_RECHECK: Duration = Duration::from_millis(100);

impl Notifier {
    pub fn notify(&self) {
        *self.completions.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        self.changed.notify_all();
    }

    /// Call `check` until it returns `Some` or `deadline` passes; `check` runs
    /// again after every completion in this process and at least every 100 ms.
    pub fn wait_for<T>(
        &self,
        deadline: Instant,
        mut check: impl FnMut() -> Option<T>,
    ) -> Option<T> {
        loop {
            let seen = *self.completions.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(found) = check() {
                return Some(found);
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            let guard = self.completions.lock().unwrap_or_else(|p| p.into_inner());
            if *guard == seen {
                let timeout = (deadline - now).min(WAIT_RECHECK);
                let _ = self.changed.wait_timeout(guard, timeout);
            }
        }
    }
}
