//! The maintenance ticker: one thread, named `maintenance`, that runs the
//! runner's periodic jobs, each in its own function at its own interval:
//! - recover (`--recover-interval-ms`): expired leases back to `pending`,
//!   then as many due calls (retries included) as there are free workers
//!   claimed in one operation and handed to them (`claim`);
//! - the instance heartbeat (`HEARTBEAT_EVERY`): other processes on the file
//!   see this one alive, so its leases are held by a live owner;
//! - lease extension (every third of the lease, per lease): the leases of
//!   tools running now, in one fenced write;
//! - key purge (`PURGE_EVERY`, see `retention`).
//!
//! It sleeps until the next job is due, polls at once when asked
//! (`poll_now`: the last poll filled what it could claim, and a completion
//! has since freed a worker or a slot), and ends at once when the runner
//! drops its wake-up channel. During a stop's grace period only the
//! heartbeat and lease extension go on, so the tools still running keep
//! their leases while they finish. It never decides who executes a call.

use super::tasks::TaskTable;
use super::Runner;
use crate::log::{self, Repeats, BACKGROUND_FAILURE_EVERY};
use crate::store::{CallStore, Lease, HEARTBEAT_EVERY};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Fails again on every pass while the fault lasts: one line per interval.
static HEARTBEAT_FAILED: Repeats = Repeats::every(BACKGROUND_FAILURE_EVERY);

/// Fails again on every pass while the fault lasts: one line per interval.
static LEASE_EXTENSION_FAILED: Repeats = Repeats::every(BACKGROUND_FAILURE_EVERY);

/// No job runs more often than this: a lease of a few milliseconds (tests)
/// must not spin the thread.
const MIN_INTERVAL: Duration = Duration::from_millis(10);

/// The running ticker; dropping it (or `stop`) ends the thread and joins it.
pub(super) struct Ticker {
    /// Sent to: poll now. Dropped: wake the thread at once and end it.
    wake: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// One periodic job.
struct Job {
    every: Duration,
    next: Instant,
    /// Runs during a stop's grace period too.
    while_stopping: bool,
    run: fn(&Runner),
}

impl Job {
    fn new(every: Duration, while_stopping: bool, run: fn(&Runner)) -> Job {
        let every = every.max(MIN_INTERVAL);
        let next = Instant::now() + every;
        Job {
            every,
            next,
            while_stopping,
            run,
        }
    }
}

impl Ticker {
    pub(super) fn start(runner: Arc<Runner>) -> std::io::Result<Ticker> {
        let (wake, sleep) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("maintenance".into())
            .spawn(move || tick_until_stopped(&runner, &sleep))?;
        Ok(Ticker {
            wake: Some(wake),
            thread: Some(thread),
        })
    }
}

impl Ticker {
    /// Run the poll (`Runner::claim_due_work`) now rather than at its next
    /// interval.
    pub(super) fn poll_now(&self) {
        if let Some(wake) = &self.wake {
            let _ = wake.send(());
        }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        drop(self.wake.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The jobs and their intervals, in the order a tick runs the due ones.
///
/// Lease extension comes first: when the writer stalls past a lease (a slow
/// disk, another process holding the write lock), the first write this
/// thread makes once it moves again renews the leases of the tools still
/// running here, shortening the time other processes can see them lapsed.
/// (This process's own recovery never takes them back: it is told which
/// leases its workers still hold, `TaskTable::extended_leases`.)
fn jobs(runner: &Runner) -> [Job; 4] {
    [
        Job::new(extension_interval(runner.options.lease), true, |r| {
            let horizon = Instant::now() + extension_interval(r.options.lease);
            extend_due_leases(&r.tasks, &r.store, r.options.lease, horizon)
        }),
        Job::new(HEARTBEAT_EVERY, true, write_instance_heartbeat),
        Job::new(runner.options.recover_interval, false, |r| r.recover_once()),
        Job::new(super::retention::PURGE_EVERY, false, |r| r.purge_expired()),
    ]
}

/// Run each job when it is due until `sleep`'s sender is dropped.
fn tick_until_stopped(runner: &Runner, sleep: &mpsc::Receiver<()>) {
    let mut jobs = jobs(runner);
    loop {
        let next = jobs.iter().map(|job| job.next).min().expect("four jobs");
        let idle = next.saturating_duration_since(Instant::now());
        match sleep.recv_timeout(idle) {
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
            Ok(()) if !runner.is_stopping() => {
                runner.claim_due_work();
            }
            Ok(()) | Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        let now = Instant::now();
        for job in jobs.iter_mut().filter(|job| job.next <= now) {
            job.next = now + job.every;
            if job.while_stopping || !runner.is_stopping() {
                (job.run)(runner);
            }
        }
    }
}

/// Half of the third of the lease each lease is extended at, so every lease
/// is extended within a third of the lease of its last extension.
fn extension_interval(lease: Duration) -> Duration {
    lease / 6
}

fn write_instance_heartbeat(runner: &Runner) {
    if let Err(e) = runner.store.heartbeat() {
        log::warn("heartbeat not written")
            .event("heartbeat_failed")
            .cause(&e)
            .emit_or_count(&HEARTBEAT_FAILED);
    }
}

/// Extend, in one write, every running lease due before `horizon` to `lease`
/// from now, through the same fence as a completion. A lease the store
/// reports lost (it expired and was taken over, or was released) is never
/// extended again; its completion will be discarded by the fence.
fn extend_due_leases<H: Clone>(
    tasks: &TaskTable<H>,
    store: &CallStore,
    lease: Duration,
    horizon: Instant,
) {
    let (leases, generations): (Vec<Lease>, Vec<u64>) =
        tasks.leases_due(horizon).into_iter().unzip();
    if leases.is_empty() {
        return;
    }
    let held = match store.extend(&leases, lease) {
        Ok(held) => held,
        Err(e) => {
            return log::warn("leases not extended")
                .event("lease_extension_failed")
                .cause(&e)
                .emit_or_count(&LEASE_EXTENSION_FAILED)
        }
    };
    for ((lease, generation), held) in leases.iter().zip(generations).zip(held) {
        if !held && tasks.lost(lease, generation) {
            log::warn("lease lost; no longer extended, its completion will be discarded")
                .event("lease_lost")
                .call_id(&lease.call_id)
                .attempt(lease.attempt)
                .emit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::tasks::State;
    use crate::store::{NewCall, StoreOptions};
    use crate::temp::TempDb;
    use crate::tools::ToolRegistry;

    fn new_call(key: &str) -> NewCall {
        NewCall {
            tenant: crate::auth::ANONYMOUS.into(),
            idem_key: key.into(),
            fingerprint: "fp".into(),
            tool: "sleep".into(),
            args_json: "{}".into(),
            client_id: None,
            seq: None,
        }
    }

    /// A running lease moves forward; a lease taken over is reported lost and
    /// never extended again; a returned tool's lease is left to expire.
    #[test]
    fn running_leases_are_extended_and_lost_ones_dropped() {
        let db = TempDb::new("maintenance");
        let store = CallStore::open(db.path(), StoreOptions::default()).unwrap();
        let id = |key: &str| match store.create_or_get(new_call(key)).unwrap() {
            crate::store::Created::New(call) => call.call_id,
            other => panic!("{other:?}"),
        };
        let short = Duration::from_millis(1);
        let tasks = TaskTable::new(&ToolRegistry::builtins(), short * 3, ());
        let [a, b, c] = ["a", "b", "c"].map(|key| {
            let call_id = id(key);
            let task = tasks.submit(&call_id, "sleep", false).unwrap();
            assert!(tasks.take(&task));
            let lease = store.claim(&call_id, "1:w@i", short).unwrap().unwrap();
            assert!(tasks.claimed(&task, &lease));
            task
        });
        tasks.returned(&c);
        std::thread::sleep(Duration::from_millis(5));
        // b's lease expired and someone else took it: attempt 2.
        assert!(store
            .claim(&b.call_id, "2:w@j", Duration::from_secs(30))
            .unwrap()
            .is_some());
        let horizon = Instant::now() + Duration::from_secs(60);
        extend_due_leases(&tasks, &store, Duration::from_secs(60), horizon);
        let until = |call_id: &str| store.get(call_id).unwrap().unwrap().lease_until.unwrap();
        assert!(
            until(&a.call_id) > crate::store::now() + 50.0,
            "a was extended"
        );
        assert!(until(&c.call_id) < crate::store::now(), "c's tool returned");
        assert!(
            matches!(
                tasks.state(&b.call_id),
                Some(State::Running {
                    next_heartbeat: None,
                    ..
                })
            ),
            "b was lost and is never extended again"
        );
        let later = Instant::now() + Duration::from_secs(120);
        let due: Vec<String> = tasks
            .leases_due(later)
            .into_iter()
            .map(|(l, _)| l.call_id)
            .collect();
        assert_eq!(due, [a.call_id.as_str()]);
        store.stop();
    }
}
