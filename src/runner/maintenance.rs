//! The maintenance ticker: one thread, named `maintenance`, that runs the
//! runner's periodic jobs (`Chore`s), each a small struct holding what it
//! needs, at its own interval:
//! - lease extension (`LeaseExtension`, every third of the lease, per
//!   lease): the leases of tools running now, in one fenced write, each
//!   with its tool's last progress report (so every node can show it);
//! - the instance heartbeat (`Heartbeat`, `HEARTBEAT_EVERY`): other
//!   processes on the file see this one alive, so its leases are held by a
//!   live owner;
//! - recover (`Recovery`, `--recover-interval-ms`, see `recovery`): expired
//!   leases back to `pending`, then as many due calls (retries included) as
//!   there are free workers claimed in one operation and handed to them;
//! - key purge (`Purge`, `PURGE_EVERY`, see `retention`);
//! - the check for cancels of the calls running here (`CancelCheck`,
//!   `HEARTBEAT_EVERY`, see `cancels`);
//! - the paused tools read again (`PauseRefresh`, `HEARTBEAT_EVERY`, see
//!   `paused`);
//! - a batch of the bulk job this process works (`BulkWork`, see `bulk`).
//! - approval expiry (`ApprovalExpiry`, every second, see
//!   `approval_expiry`): requests whose time is over end `denied`.
//!
//! It sleeps until the next job is due, polls at once when its `Doorbell`
//! rings (the last poll filled what it could claim, and a completion has
//! since freed a worker or a slot; or a call of a tool whose limits the
//! database holds was created) and when a rate that held calls back has a
//! token again (`Dispatch::scheduled_poll_in`), and ends at once when the
//! doorbell is silenced (`Ticker`'s drop). During a stop's grace period only
//! the heartbeat, lease extension and the cancel check go on, so the tools
//! still running keep their leases while they finish (or are stopped). It
//! never decides who executes a call.

use super::approval_expiry::ApprovalExpiry;
use super::bulk::BulkWork;
use super::cancels::CancelCheck;
use super::chore::{Chore, Doorbell};
use super::dispatch::Dispatch;
use super::paused::PauseRefresh;
use super::recovery::Recovery;
use super::retention::Purge;
use super::tasks::TaskTable;
use crate::log::{self, Repeats, BACKGROUND_FAILURE_EVERY};
use crate::store::{CallProgress, CallStore, Lease, HEARTBEAT_EVERY};
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

/// The jobs, in the order a tick runs the due ones.
///
/// Lease extension comes first: when the writer stalls past a lease (a slow
/// disk, another process holding the write lock), the first write this
/// thread makes once it moves again renews the leases of the tools still
/// running here, shortening the time other processes can see them lapsed.
/// (This process's own recovery never takes them back: it is told which
/// leases its workers still hold, `TaskTable::extended_leases`.)
pub(super) fn chores(
    extension: LeaseExtension,
    heartbeat: Heartbeat,
    recovery: Recovery,
    purge: Purge,
    cancels: CancelCheck,
    extra: Extra,
) -> Vec<Box<dyn Chore>> {
    vec![
        Box::new(extension),
        Box::new(heartbeat),
        Box::new(recovery),
        Box::new(purge),
        Box::new(cancels),
        Box::new(extra.pauses),
        Box::new(extra.bulk),
        Box::new(extra.expiry),
    ]
}

/// The chores after the call path's: the paused tools read again
/// (`paused`), bulk jobs worked a batch at a time (`bulk`), and approval
/// requests whose time is over ended (`approval_expiry`).
pub(super) struct Extra {
    pub(super) pauses: PauseRefresh,
    pub(super) bulk: BulkWork,
    pub(super) expiry: ApprovalExpiry,
}

/// The running ticker; dropping it ends the thread and joins it.
pub(super) struct Ticker {
    doorbell: Arc<Doorbell>,
    thread: Option<JoinHandle<()>>,
}

impl Ticker {
    /// Run `chores` on their intervals, and the poll whenever `doorbell`
    /// rings, until it is silenced.
    pub(super) fn start(
        dispatch: Arc<Dispatch>,
        chores: Vec<Box<dyn Chore>>,
        doorbell: Arc<Doorbell>,
        listener: mpsc::Receiver<()>,
    ) -> std::io::Result<Ticker> {
        let mut scheduled: Vec<Scheduled> = chores.into_iter().map(Scheduled::new).collect();
        let thread = std::thread::Builder::new()
            .name("maintenance".into())
            .spawn(move || tick_until_silenced(&dispatch, &mut scheduled, &listener))?;
        Ok(Ticker {
            doorbell,
            thread: Some(thread),
        })
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.doorbell.silence();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A chore and when it is next due.
struct Scheduled {
    every: Duration,
    next: Instant,
    chore: Box<dyn Chore>,
}

impl Scheduled {
    fn new(chore: Box<dyn Chore>) -> Scheduled {
        let every = chore.every().max(MIN_INTERVAL);
        Scheduled {
            every,
            next: Instant::now() + every,
            chore,
        }
    }
}

/// Run each chore when it is due until the doorbell is silenced.
fn tick_until_silenced(
    dispatch: &Dispatch,
    scheduled: &mut [Scheduled],
    listener: &mpsc::Receiver<()>,
) {
    loop {
        let next = scheduled.iter().map(|s| s.next).min().expect("eight jobs");
        let mut idle = next.saturating_duration_since(Instant::now());
        if let Some(token) = dispatch.scheduled_poll_in() {
            idle = idle.min(token);
        }
        match listener.recv_timeout(idle) {
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
            Ok(()) if !dispatch.is_stopping() => {
                dispatch.claim_due_work();
            }
            Err(mpsc::RecvTimeoutError::Timeout)
                if dispatch.take_scheduled_poll() && !dispatch.is_stopping() =>
            {
                dispatch.claim_due_work();
            }
            Ok(()) | Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        let now = Instant::now();
        for due in scheduled.iter_mut().filter(|s| s.next <= now) {
            due.next = now + due.every;
            if due.chore.while_stopping() || !dispatch.is_stopping() {
                due.chore.run();
            }
        }
    }
}

/// The leases of the tools running here, extended every third of the lease.
pub(super) struct LeaseExtension {
    pub(super) dispatch: Arc<Dispatch>,
    pub(super) store: Arc<CallStore>,
    /// How long each extension lets a lease run from now.
    pub(super) lease: Duration,
}

impl Chore for LeaseExtension {
    fn every(&self) -> Duration {
        extension_interval(self.lease)
    }

    fn while_stopping(&self) -> bool {
        true
    }

    fn run(&self) {
        let horizon = Instant::now() + extension_interval(self.lease);
        extend_due_leases(self.dispatch.tasks(), &self.store, self.lease, horizon)
    }
}

/// This process's instance heartbeat.
pub(super) struct Heartbeat {
    pub(super) store: Arc<CallStore>,
}

impl Chore for Heartbeat {
    fn every(&self) -> Duration {
        HEARTBEAT_EVERY
    }

    fn while_stopping(&self) -> bool {
        true
    }

    fn run(&self) {
        if let Err(e) = self.store.heartbeat() {
            log::warn("heartbeat not written")
                .event("heartbeat_failed")
                .cause(&e)
                .emit_or_count(&HEARTBEAT_FAILED);
        }
    }
}

/// Half of the third of the lease each lease is extended at, so every lease
/// is extended within a third of the lease of its last extension.
fn extension_interval(lease: Duration) -> Duration {
    lease / 6
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
    // Each tool's last progress report rides on the same write.
    let progress: Vec<Option<CallProgress>> = leases.iter().map(last_report).collect();
    let held = match store.extend_reporting(&leases, &progress, lease) {
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

/// What a lease's tool last reported in this process, to store with the call.
fn last_report(lease: &Lease) -> Option<CallProgress> {
    let report = crate::tools::progress::board().latest(&lease.call_id)?;
    Some(CallProgress {
        attempt: lease.attempt,
        progress: report.progress,
        total: report.total,
        message: report.message,
        at: report.at,
    })
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
            gate: None,
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
            assert!(tasks.claimed(&task, &lease, None));
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
