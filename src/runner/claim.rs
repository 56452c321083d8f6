//! Work that arrives already claimed: the runner's poll claims as many due
//! calls as this process has room for in ONE store operation
//! (`CallStore::claim_due_within`) and hands each lease straight to a worker,
//! which runs it without a second claim; `Runner::reserve` + `Runner::adopt`
//! do the same for one call whose lease was won elsewhere in this process.
//!
//! Room is two things, both reserved BEFORE the claim so that a claim never
//! takes a call this process cannot start at once: a worker not already
//! spoken for (`Capacity`: queued, claiming or running work, or reserved),
//! and, for a tool with `max_concurrency`, one of its slots (the task
//! table's). What the claim did not use is given back.
//!
//! It never decides who executes a call — the claim's conditional `UPDATE`
//! does — and never holds a lock across a store operation.

use super::tasks::Task;
use super::{log_claimed, Runner};
use crate::log::{self, Repeats, BACKGROUND_FAILURE_EVERY};
use crate::store::{owner_name, DueLimits, Lease};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::PoisonError;
use std::time::Duration;

/// Fails again on every pass while the fault lasts: one line per interval.
static CLAIM_DUE_FAILED: Repeats = Repeats::every(BACKGROUND_FAILURE_EVERY);

/// What a worker is handed.
pub(super) enum Job {
    /// A submitted call: the worker claims it first.
    Claim(Task),
    /// A call already claimed under this lease: the worker runs it.
    Run(Task, Lease),
}

impl Job {
    pub(super) fn task(&self) -> &Task {
        match self {
            Job::Claim(task) | Job::Run(task, _) => task,
        }
    }
}

/// How many jobs a worker may have spoken for at once when all of them are
/// quick: a quick attempt takes a worker microseconds, so eight of them ahead
/// of a call delay its tool by well under a millisecond, far inside any lease.
pub(super) const QUICK_JOBS_PER_WORKER: usize = 8;

/// How many workers are spoken for: jobs sent to the queue and not yet
/// worked off, plus reservations. It may exceed the workers (the direct
/// path queues without asking); only reservations are refused then.
///
/// A quick call (see `ToolSpec::is_quick`) may be reserved past the free
/// workers, up to `QUICK_JOBS_PER_WORKER` per worker, while nothing slow is
/// spoken for: it is then created already claimed and waits in the queue only
/// behind other quick work, which saves the writer a separate claim. Behind
/// slow work it is not: it would wait, `running` under its lease, for as long
/// as that tool takes. The check is not atomic with a slow reservation made
/// at the same moment; at worst one quick call then waits behind one slow
/// call, under a lease that is extended like any other.
pub(super) struct Capacity {
    workers: usize,
    spoken_for: AtomicUsize,
    /// Of `spoken_for`, the jobs and reservations not known to be quick.
    slow: AtomicUsize,
}

impl Capacity {
    pub(super) fn new(workers: usize) -> Capacity {
        Capacity {
            workers: workers.max(1),
            spoken_for: AtomicUsize::new(0),
            slow: AtomicUsize::new(0),
        }
    }

    /// Reserve up to `wanted` workers for work that is `quick` or not;
    /// returns how many were granted.
    pub(super) fn reserve(&self, wanted: usize, quick: bool) -> usize {
        let limit = if quick && self.slow.load(Ordering::SeqCst) == 0 {
            self.workers * QUICK_JOBS_PER_WORKER
        } else {
            self.workers
        };
        let mut granted = 0;
        let _ = self
            .spoken_for
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |taken| {
                granted = limit.saturating_sub(taken).min(wanted);
                (granted > 0).then_some(taken + granted)
            });
        if !quick {
            self.slow.fetch_add(granted, Ordering::SeqCst);
        }
        granted
    }

    /// A job was queued without a reservation (the direct path).
    pub(super) fn queued(&self, quick: bool) {
        self.spoken_for.fetch_add(1, Ordering::SeqCst);
        if !quick {
            self.slow.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// `n` jobs were worked off, or `n` reservations given back; `slow` of
    /// them were not quick.
    pub(super) fn release(&self, n: usize, slow: usize) {
        for (counter, by) in [(&self.spoken_for, n), (&self.slow, slow)] {
            let _ = counter.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |taken| {
                Some(taken.saturating_sub(by))
            });
        }
    }
}

/// A free worker and (for a capped tool) one of its tool's slots, held for a
/// call this process is about to claim itself. Hand it to `Runner::adopt`
/// with the lease once the claim is won; dropped unused, both are given back.
#[must_use = "dropping a reservation gives its worker and slot back"]
pub struct Reservation<'r> {
    runner: &'r Runner,
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
        self.runner.options.lease
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.held {
            let slow = usize::from(!self.quick);
            self.runner.give_back(1, slow, [self.tool.as_str()]);
        }
    }
}

impl Runner {
    /// Hold a free worker and a slot of `tool` for a call this process is
    /// about to claim itself (e.g. create it already `running`). `None` when
    /// every worker is spoken for, the tool is at its `max_concurrency`, or
    /// the runner is stopping: claim nothing then, and `submit` instead.
    /// `quick`: as for `submit`.
    pub fn reserve(&self, tool: &str, quick: bool) -> Option<Reservation<'_>> {
        if self.is_stopping() || self.capacity.reserve(1, quick) == 0 {
            return None;
        }
        if !self.tasks.reserve_slot(tool) {
            self.capacity.release(1, usize::from(!quick));
            return None;
        }
        Some(Reservation {
            runner: self,
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
    /// by the lease's attempt, and a stop gives the lease back. If the
    /// runner stops before a worker starts it, the lease is given back (the
    /// call returns to `pending` for the next process).
    pub fn adopt(&self, mut reservation: Reservation<'_>, lease: Lease) {
        reservation.held = false;
        debug_assert_eq!(reservation.tool, lease.tool, "reserved for its tool");
        self.adopt_reserved(lease, reservation.quick);
    }

    /// Take on a claimed call whose worker and slot are reserved, and queue it.
    fn adopt_reserved(&self, lease: Lease, quick: bool) {
        self.metrics.claims.inc();
        match self.tasks.adopt(&lease, quick) {
            Some(task) => self.send_reserved(task, lease),
            None => {
                self.release(&lease);
                self.give_back(1, usize::from(!quick), [lease.tool.as_str()]);
            }
        }
    }

    /// The poll: claim, in one store operation, as many due calls as this
    /// process has free workers for — no more of a capped tool than its free
    /// slots — and hand each lease to a worker. Returns how many were
    /// claimed. When the claim took all it was allowed (every free worker,
    /// or a capped tool's every free slot), more may be due: the next
    /// completion asks for another poll (`more_due`).
    pub fn claim_due_work(&self) -> usize {
        if self.is_stopping() {
            return 0;
        }
        let workers = self.capacity.reserve(usize::MAX, false);
        if workers == 0 {
            return 0;
        }
        let per_tool = self.tasks.reserve_free_slots(workers);
        let limits = DueLimits {
            total: workers,
            per_tool: per_tool.clone(),
        };
        let owner = owner_name(self.store.instance(), "poll");
        let leases = match self
            .store
            .claim_due_within(&limits, &owner, self.options.lease)
        {
            Ok(leases) => leases,
            Err(e) => {
                log::error("could not claim due calls")
                    .event("recovery_failed")
                    .cause(&e)
                    .emit_or_count(&CLAIM_DUE_FAILED);
                Vec::new()
            }
        };
        let claimed = leases.len();
        let mut filled = claimed == workers;
        let mut slots: HashMap<String, usize> = per_tool.into_iter().collect();
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
                    self.release(&lease);
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

    /// Queue an adopted task on the worker its reservation holds. Once the
    /// workers are gone (a stop) its entry goes and the lease is given back.
    fn send_reserved(&self, task: Task, lease: Lease) {
        let pool = self.pool.read().unwrap_or_else(PoisonError::into_inner);
        let unsent = match pool.as_ref() {
            Some(pool) => pool.send(Job::Run(task, lease)).err(),
            None => Some(Job::Run(task, lease)),
        };
        drop(pool);
        match unsent {
            None => self.metrics.queued_calls.inc(),
            Some(job) => {
                self.capacity.release(1, usize::from(!job.task().quick));
                self.finish(job.task());
                if let Job::Run(_, lease) = job {
                    self.release(&lease);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Reservations are granted only up to the free workers; queued work
    /// counts against them even past the workers; what is worked off or
    /// given back frees them again.
    #[test]
    fn capacity_grants_only_free_workers() {
        let capacity = Capacity::new(3);
        assert_eq!(capacity.reserve(2, false), 2);
        assert_eq!(capacity.reserve(usize::MAX, false), 1, "one left");
        assert_eq!(capacity.reserve(1, false), 0, "all spoken for");
        capacity.queued(false);
        capacity.release(3, 3);
        assert_eq!(
            capacity.reserve(5, false),
            2,
            "the queued job still holds one"
        );
        capacity.release(10, 10);
        assert_eq!(capacity.reserve(5, false), 3, "never below zero");
    }

    /// Quick work may queue past the workers, up to `QUICK_JOBS_PER_WORKER`
    /// each, but only while nothing slow is spoken for; slow work itself
    /// never goes past the workers, quick work ahead of it or not.
    #[test]
    fn quick_work_queues_past_the_workers_only_behind_quick_work() {
        let capacity = Capacity::new(2);
        let quick_limit = 2 * QUICK_JOBS_PER_WORKER;
        assert_eq!(capacity.reserve(usize::MAX, true), quick_limit);
        assert_eq!(capacity.reserve(1, true), 0, "the quick queue is full");
        assert_eq!(
            capacity.reserve(1, false),
            0,
            "slow work: only free workers"
        );
        capacity.release(quick_limit, 0);

        capacity.queued(false);
        assert_eq!(
            capacity.reserve(usize::MAX, true),
            1,
            "behind slow work: free workers only"
        );
        capacity.release(1, 1);
        assert_eq!(
            capacity.reserve(1, false),
            1,
            "the slow job's worker is free again"
        );
        capacity.release(2, 1);
        assert_eq!(
            capacity.reserve(usize::MAX, true),
            quick_limit,
            "nothing slow left"
        );
    }
}
