//! `Capacity`: how many workers are spoken for — jobs sent to the workers'
//! queue and not yet worked off, plus reservations — so that a claim never
//! takes a call this process cannot start at once (`Dispatch` reserves
//! before it claims, and gives back what the claim did not use).
//!
//! It only counts: it never decides who executes a call (the claim's
//! conditional `UPDATE` does) and never blocks. Every release matches a
//! reservation or a queued job; one that would take the count below zero is
//! a bug in that accounting, caught by a debug build's assertion.

use std::sync::atomic::{AtomicUsize, Ordering};

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
    /// them were not quick. Never more than are spoken for: that would be a
    /// job or reservation given back twice, asserted in a debug build (a
    /// release build floors the count at zero rather than wrap it).
    pub(super) fn release(&self, n: usize, slow: usize) {
        for (counter, by) in [(&self.spoken_for, n), (&self.slow, slow)] {
            let _ = counter.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |taken| {
                let left = taken.checked_sub(by);
                debug_assert!(
                    left.is_some(),
                    "capacity released below zero: {by} of {taken} spoken for"
                );
                Some(left.unwrap_or(0))
            });
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
        capacity.release(3, 3);
        assert_eq!(capacity.reserve(5, false), 3, "all free again");
    }

    /// Giving back more than is spoken for is a bug in the accounting, and a
    /// debug build stops there.
    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "capacity released below zero")]
    fn releasing_more_than_is_spoken_for_is_caught() {
        let capacity = Capacity::new(3);
        assert_eq!(capacity.reserve(2, false), 2);
        capacity.release(3, 3);
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
