//! `Dispatch`: how work reaches the workers, and the accounting that keeps
//! it within them. It owns the task table (`tasks`: every call this process
//! has taken on, and the per-tool slots), the workers' queue, and
//! `Capacity` (how many workers are spoken for). Everything that hands a call
//! to a worker, or takes one back, goes through it:
//! - a submitted call (`submit`) is admitted by the task table (its tool's
//!   slot taken, or it waits for one) and queued for a worker that claims it;
//! - work that arrives already claimed: the poll (`claim_due_work`) claims as
//!   many due calls as this process has room for in ONE store operation
//!   (`CallStore::claim_due_within`) and hands each lease straight to a
//!   worker, which runs it without a second claim; `reserve` + `adopt` do
//!   the same for one call whose lease was won elsewhere in this process (a
//!   request that created its call already claimed);
//! - a call that has left its worker (`finish`) gives its tool's slot to
//!   the oldest call waiting for one.
//!
//! Room is two things, both reserved BEFORE a claim so that a claim never
//! takes a call this process cannot start at once: a worker not already
//! spoken for (`Capacity`: queued, claiming or running work, or reserved),
//! and, for a tool with `max_concurrency`, one of its slots. What the claim
//! did not use is given back.
//!
//! It never decides who executes a call — the claim's conditional `UPDATE`
//! does — never holds a lock across a store operation, and never runs a
//! tool: the workers do (`worker`).

use super::capacity::Capacity;
use super::chore::Doorbell;
use super::handed::Completions;
use super::limited::{LimitedTools, Split};
use super::notifier::Notifier;
use super::paused_set::PausedSet;
use super::pool::WorkerPool;
use super::tasks::{Task, TaskTable};
use crate::log::{self, Repeats, BACKGROUND_FAILURE_EVERY};
use crate::metrics::Metrics;
use crate::store::{owner_name, CallStore, Completion, DueLimits, Lease, ToolAtRelease};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

/// Fails again on every pass while the fault lasts: one line per interval.
static CLAIM_DUE_FAILED: Repeats = Repeats::every(BACKGROUND_FAILURE_EVERY);

/// What a worker is handed.
pub(super) enum Assignment {
    /// A submitted call: the worker claims it first.
    Claim(Task),
    /// A call already claimed under this lease: the worker runs it.
    Run(Task, Lease),
}

impl Assignment {
    pub(super) fn task(&self) -> &Task {
        match self {
            Assignment::Claim(task) | Assignment::Run(task, _) => task,
        }
    }
}

/// The task table, the workers' queue and the count of workers spoken for.
pub(super) struct Dispatch {
    /// Every call this process has taken on, and the per-tool slots; holds
    /// the completer's channel until a stop closes it.
    tasks: TaskTable<Completions>,
    /// The workers' queue; taken out (closed) by a stop, after which nothing
    /// is queued.
    pool: RwLock<Option<WorkerPool<Assignment>>>,
    /// How many workers are spoken for; what a poll may claim is the rest.
    capacity: Capacity,
    /// The tools whose limits the database holds: claimed by the poll alone.
    limited: LimitedTools,
    /// The tools paused now, as this process knows: their calls are not
    /// queued, reserved or polled for (the store refuses their claims
    /// anyway, `store::paused`).
    paused: Arc<PausedSet>,
    /// Rung to poll at once (a new call of a limited tool).
    doorbell: Arc<Doorbell>,
    /// The last poll claimed all it was allowed (every free worker, or every
    /// free slot of a capped tool), so more calls may be due: the completer
    /// asks for a poll once a completion frees a worker or a slot, instead
    /// of leaving them idle until the next interval.
    more_due: AtomicBool,
    /// Set once by a stop: nothing new is claimed, started or purged.
    stopping: AtomicBool,
    /// How long a claim lets a worker execute before others may take over.
    lease: Duration,
    store: Arc<CallStore>,
    notifier: Arc<Notifier>,
    metrics: Arc<Metrics>,
}

impl Dispatch {
    pub(super) fn new(
        tasks: TaskTable<Completions>,
        workers: usize,
        lease: Duration,
        store: Arc<CallStore>,
        (notifier, doorbell): (Arc<Notifier>, Arc<Doorbell>),
        metrics: Arc<Metrics>,
        paused: Arc<PausedSet>,
    ) -> Dispatch {
        Dispatch {
            tasks,
            pool: RwLock::new(None),
            capacity: Capacity::new(workers),
            limited: LimitedTools::new(&store.limits_in_database(), &metrics),
            paused,
            doorbell,
            more_due: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            lease,
            store,
            notifier,
            metrics,
        }
    }

    pub(super) fn tasks(&self) -> &TaskTable<Completions> {
        &self.tasks
    }

    /// How long a claim's lease runs (`RunnerOptions::lease`).
    pub(super) fn lease(&self) -> Duration {
        self.lease
    }

    /// Hand work to these workers from now on.
    pub(super) fn open(&self, pool: WorkerPool<Assignment>) {
        *self.pool.write().unwrap_or_else(PoisonError::into_inner) = Some(pool);
    }

    /// A stop: claim, start and purge nothing new, and take the workers out
    /// (for the caller to close and wait for); nothing is queued after this.
    pub(super) fn stop(&self) -> Option<WorkerPool<Assignment>> {
        self.stopping.store(true, Ordering::SeqCst);
        self.pool
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    pub(super) fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Whether the last poll left calls due (and forget it): a completion
    /// has freed a worker or a slot since, so another poll may claim them.
    pub(super) fn take_more_due(&self) -> bool {
        self.more_due.swap(false, Ordering::SeqCst)
    }

    /// Queue a call of `tool` unless this process already has it queued,
    /// waiting for a concurrency slot, or running. `quick`: its tool is known
    /// to return at once (see `ToolSpec::is_quick`) and it carries no chaos
    /// hook; say `false` when unsure.
    pub(super) fn submit(&self, call_id: &str, tool: &str, quick: bool) {
        if self.is_stopping() {
            // The call stays `pending` in the database, the safe place for
            // it, and the next process runs it.
            return;
        }
        if self.paused.is_paused(tool) {
            // It waits `pending`; the poll after the resume claims it.
            return;
        }
        if self.limited.holds(tool) {
            // Claimed by the poll alone, under its limit (`limited`).
            return self.request_poll();
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
                    let unsent = pool.send(Assignment::Claim(task)).err();
                    if unsent.is_some() {
                        self.capacity.release(1, usize::from(!quick));
                    }
                    unsent
                }
                None => Some(Assignment::Claim(task)),
            };
            drop(pool);
            match unsent {
                None => self.metrics.queued_calls.inc(),
                Some(assignment) => next = self.tasks.finish(assignment.task()),
            }
        }
    }

    /// A worker has worked off `n` assignments, `slow` of them not quick.
    pub(super) fn worked_off(&self, n: usize, slow: usize) {
        self.capacity.release(n, slow);
    }

    /// The call has left its worker without a completion: its entry goes,
    /// its tool's slot passes on, and its waiters re-check.
    pub(super) fn finish(&self, task: &Task) {
        self.pass_slot_on(task);
        self.notifier.notify([task.call_id.as_str()]);
    }

    /// The task is done in this process: its entry goes (unless a newer
    /// submission owns it), and its tool's slot goes to the next waiting call.
    pub(super) fn pass_slot_on(&self, task: &Task) {
        if let Some(next) = self.tasks.finish(task) {
            self.enqueue(next);
        }
    }

    /// Give one lease back, saying what was done to its `tool`; `true` if
    /// the call went back to `pending`.
    pub(super) fn release(&self, lease: &Lease, tool: &ToolAtRelease) -> bool {
        match self.store.release(lease, tool) {
            Ok(Completion::Applied) => {
                log::info("lease released by a stopping process")
                    .event("released")
                    .call_id(&lease.call_id)
                    .attempt(lease.attempt)
                    .transition("running", "pending")
                    .emit();
                true
            }
            Ok(Completion::Cancelled) => {
                log::info("a stopping process ended a call whose cancel was asked")
                    .event("cancelled")
                    .call_id(&lease.call_id)
                    .attempt(lease.attempt)
                    .transition("running", "cancelled")
                    .emit();
                false
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

    /// A stop's grace period is over: ask every tool still running here to
    /// stop (a command's group gets SIGTERM, then SIGKILL; an http request
    /// is abandoned; a sleep woken). Each worker then hands its lease to
    /// the stop instead of recording a cancel. Returns how many were asked.
    pub(super) fn halt_running(&self) -> usize {
        let running = self.tasks.running_stops();
        for (stop, run) in &running {
            stop.request_for_shutdown(*run);
        }
        running.len()
    }

    /// A call's cancel was asked (of `attempt`, when known): if its tool runs
    /// here, ask its worker's `Stop`, which halts it (the worker then
    /// records the fenced `cancelled` completion); if it is about to start
    /// here, it never starts. `true` when a running tool was asked to stop.
    pub(super) fn stop_running(&self, call_id: &str, attempt: Option<i64>) -> bool {
        let Some((stop, run)) = self.tasks.cancel(call_id, attempt) else {
            return false;
        };
        stop.request(run);
        log::info("a cancelled call's tool asked to stop")
            .event("cancel_stop")
            .call_id(call_id)
            .emit();
        true
    }

    /// Hold a free worker and a slot of `tool` for a call this process is
    /// about to claim itself (e.g. create it already `running`). `None` when
    /// every worker is spoken for, the tool is at its `max_concurrency`, or
    /// a stop has begun: claim nothing then, and `submit` instead.
    /// `quick`: as for `submit`.
    pub(super) fn reserve(&self, tool: &str, quick: bool) -> Option<Reservation<'_>> {
        if self.is_stopping()
            || self.limited.holds(tool)
            || self.paused.is_paused(tool)
            || self.capacity.reserve(1, quick) == 0
        {
            return None;
        }
        if !self.tasks.reserve_slot(tool) {
            self.capacity.release(1, usize::from(!quick));
            return None;
        }
        Some(Reservation {
            dispatch: self,
            tool: tool.to_string(),
            quick,
            held: true,
        })
    }

    /// Run a call this process has already claimed: `lease` (for the
    /// reserved tool) goes straight to the reserved worker, which runs the
    /// tool with no second claim. From now on the call is running here like
    /// any other: its lease is extended every third of the lease, its tool's
    /// slot is held until its completion is recorded, completions are fenced
    /// by the lease's attempt, and a stop gives the lease back. If a stop
    /// begins before a worker starts it, the lease is given back (the call
    /// returns to `pending` for the next process).
    pub(super) fn adopt(&self, mut reservation: Reservation<'_>, lease: Lease) {
        reservation.held = false;
        debug_assert_eq!(reservation.tool, lease.tool, "reserved for its tool");
        self.adopt_reserved(lease, reservation.quick);
    }

    /// Take on a claimed call whose worker and slot are reserved, and queue it.
    fn adopt_reserved(&self, lease: Lease, quick: bool) {
        self.metrics.claims.inc();
        match self.tasks.adopt(&lease, quick) {
            Some(task) => self.send_claimed(task, lease),
            None => {
                self.release(&lease, &ToolAtRelease::Idle);
                self.give_back(1, usize::from(!quick), [lease.tool.as_str()]);
            }
        }
    }

    /// The poll: claim, in one store operation, as many due calls as this
    /// process has free workers for — no more of a capped tool than its free
    /// slots — and hand each lease to a worker. Returns how many were
    /// claimed. When the claim took all it was allowed (every free worker,
    /// or a capped tool's every free slot), more may be due: the next
    /// completion asks for another poll (`take_more_due`). Tools whose limits
    /// the database holds are claimed first, by a claim of their own
    /// (`CallStore::claim_limited`, see `limited`); the rest of the workers
    /// go to the others' one-statement claim, which passes them over.
    pub(super) fn claim_due_work(&self) -> usize {
        if self.is_stopping() {
            return 0;
        }
        self.limited.poll_started();
        let workers = self.capacity.reserve(usize::MAX, false);
        if workers == 0 {
            return 0;
        }
        let reserved = self.tasks.reserve_free_slots(workers);
        let split = self.without_paused(self.limited.split(&reserved, workers));
        let owner = owner_name(self.store.instance(), "poll");
        let (mut leases, mut filled) = self.claim_limited(split.limited, workers, &owner);
        let left = workers - leases.len().min(workers);
        if left > 0 {
            let limits = DueLimits {
                total: left,
                per_tool: split.others,
            };
            let others = self.claim_due(&limits, &owner);
            filled |= others.len() == left;
            leases.extend(others);
        }
        let claimed = leases.len();
        filled |= claimed == workers;
        let mut slots: HashMap<String, usize> = reserved.into_iter().collect();
        let mut unused_workers = workers;
        for lease in leases {
            match slots.get_mut(&lease.tool) {
                Some(0) => {
                    // The statement cannot do this; should it ever, the call
                    // goes back rather than break the tool's cap.
                    log::error("claim exceeded a tool's free slots; lease given back")
                        .event("claim_failed")
                        .call_id(&lease.call_id)
                        .emit();
                    self.release(&lease, &ToolAtRelease::Idle);
                    continue;
                }
                Some(free) => {
                    *free -= 1;
                    filled |= *free == 0;
                }
                None => {}
            }
            unused_workers -= 1;
            log_claimed(&lease.call_id, lease.attempt, &owner);
            self.adopt_reserved(lease, false);
        }
        let unused_slots = slots
            .iter()
            .flat_map(|(tool, free)| std::iter::repeat_n(tool.as_str(), *free));
        self.give_back(unused_workers, unused_workers, unused_slots);
        if filled {
            self.more_due.store(true, Ordering::SeqCst);
        }
        claimed
    }

    /// The claim of the tools whose limits the database holds, each within
    /// its share of this poll (`per_tool`); the leases, and whether due
    /// calls of them were left. Nothing, and no store operation, when no
    /// such tool has room here.
    fn claim_limited(
        &self,
        per_tool: Vec<(String, usize)>,
        total: usize,
        owner: &str,
    ) -> (Vec<Lease>, bool) {
        if per_tool.iter().all(|(_, free)| *free == 0) {
            return (Vec::new(), false);
        }
        let limits = DueLimits { total, per_tool };
        match self.store.claim_limited(&limits, owner, self.lease) {
            Ok(claim) => {
                self.limited.record(&claim, &self.metrics);
                (claim.leases, claim.more_due)
            }
            Err(e) => {
                log::error("could not claim due calls of limited tools")
                    .event("recovery_failed")
                    .cause(&e)
                    .emit_or_count(&CLAIM_DUE_FAILED);
                (Vec::new(), false)
            }
        }
    }

    /// The one-statement claim of every other due call, within `limits`.
    fn claim_due(&self, limits: &DueLimits, owner: &str) -> Vec<Lease> {
        self.store
            .claim_due_within(limits, owner, self.lease)
            .unwrap_or_else(|e| {
                log::error("could not claim due calls")
                    .event("recovery_failed")
                    .cause(&e)
                    .emit_or_count(&CLAIM_DUE_FAILED);
                Vec::new()
            })
    }

    /// `split` with every paused tool at zero in both claims, so a poll
    /// spends no room on calls the store would not let it claim.
    fn without_paused(&self, mut split: Split) -> Split {
        for paused in self.paused.all() {
            for (tool, free) in split.limited.iter_mut().chain(split.others.iter_mut()) {
                if *tool == paused.tool {
                    *free = 0;
                }
            }
            if !split.others.iter().any(|(tool, _)| *tool == paused.tool) {
                split.others.push((paused.tool, 0));
            }
        }
        split
    }

    /// Calls ended elsewhere than a worker (a bulk job cancelled them): the
    /// requests waiting for them re-read them now.
    pub(super) fn notify_ended(&self, call_ids: &[String]) {
        self.notifier.notify(call_ids.iter().map(String::as_str));
    }

    /// Poll soon (on the maintenance thread): a paused tool was resumed, or
    /// calls were sent back to `pending` here.
    pub(super) fn poll_soon(&self) {
        self.doorbell.ring();
    }

    /// Poll at once (on the maintenance thread): once however many ask
    /// before the poll starts.
    fn request_poll(&self) {
        if self.limited.want_poll() {
            self.doorbell.ring();
        }
    }

    /// How long until a poll scheduled for a rate's next token is due.
    pub(super) fn scheduled_poll_in(&self) -> Option<Duration> {
        self.limited.poll_due_in()
    }

    /// Take the scheduled poll if it is due.
    pub(super) fn take_scheduled_poll(&self) -> bool {
        self.limited.take_due_poll()
    }

    /// Queue an adopted task on the worker its reservation holds. Once the
    /// workers are gone (a stop) its entry goes and the lease is given back.
    fn send_claimed(&self, task: Task, lease: Lease) {
        let pool = self.pool.read().unwrap_or_else(PoisonError::into_inner);
        let unsent = match pool.as_ref() {
            Some(pool) => pool.send(Assignment::Run(task, lease)).err(),
            None => Some(Assignment::Run(task, lease)),
        };
        drop(pool);
        match unsent {
            None => self.metrics.queued_calls.inc(),
            Some(assignment) => {
                self.capacity
                    .release(1, usize::from(!assignment.task().quick));
                self.finish(assignment.task());
                if let Assignment::Run(_, lease) = assignment {
                    self.release(&lease, &ToolAtRelease::Idle);
                }
            }
        }
    }

    /// Give back `workers` reserved workers (`slow` of them reserved for work
    /// not known to be quick) and one slot of each tool named in `slots`; a
    /// slot a call was waiting for goes to it.
    fn give_back<'t>(&self, workers: usize, slow: usize, slots: impl IntoIterator<Item = &'t str>) {
        self.capacity.release(workers, slow);
        for tool in slots {
            if let Some(next) = self.tasks.give_back_slot(tool) {
                self.enqueue(next);
            }
        }
    }
}

/// A free worker and (for a capped tool) one of its tool's slots, held for a
/// call this process is about to claim itself. Hand it to `Runner::adopt`
/// with the lease once the claim is won; dropped unused, both are given back.
#[must_use = "dropping a reservation gives its worker and slot back"]
pub struct Reservation<'r> {
    dispatch: &'r Dispatch,
    tool: String,
    quick: bool,
    /// Cleared when `adopt` takes the worker and slot over.
    held: bool,
}

impl Reservation<'_> {
    /// The tool whose slot is held: the adopted lease must be for it.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// How long the lease for it should run (`RunnerOptions::lease`): the
    /// worker extends it from there like any claim's.
    pub fn lease(&self) -> Duration {
        self.dispatch.lease
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.held {
            let slow = usize::from(!self.quick);
            self.dispatch.give_back(1, slow, [self.tool.as_str()]);
        }
    }
}

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
