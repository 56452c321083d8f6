//! The writer's queue: two lanes, so that finishing work is never starved by
//! new work.
//!
//! Under overload the queue holds more creations than one batch carries. If
//! completions (and the claims and lease extensions that lead to them) waited
//! in the same line, each would sit behind hundreds of creations, workers
//! would finish fewer calls per second, and the pending backlog would grow
//! without bound. So a batch takes everything in the `First` lane before
//! anything in the `Behind` lane, where only creations go. Within a lane,
//! order is kept.
//!
//! This module never runs a job; it only holds them until the writer takes
//! them, and refuses new ones once stopped.

use crate::lock::lock;
use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};

/// Which line a write waits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lane {
    /// Claims, completions, lease extensions, recovery, heartbeats: what
    /// moves an accepted call towards its end.
    First,
    /// Creations: new work, taken only after every `First` write.
    Behind,
}

pub(super) struct WriteQueue<T> {
    lanes: Mutex<Lanes<T>>,
    ready: Condvar,
}

struct Lanes<T> {
    first: VecDeque<T>,
    behind: VecDeque<T>,
    /// No more writes are taken; what is queued is still handed out.
    stopped: bool,
}

impl<T> WriteQueue<T> {
    pub(super) fn new() -> WriteQueue<T> {
        WriteQueue {
            lanes: Mutex::new(Lanes {
                first: VecDeque::new(),
                behind: VecDeque::new(),
                stopped: false,
            }),
            ready: Condvar::new(),
        }
    }

    /// Queue `item` in `lane`; once stopped, it is given back.
    pub(super) fn push(&self, lane: Lane, item: T) -> Result<(), T> {
        let mut lanes = lock(&self.lanes);
        if lanes.stopped {
            return Err(item);
        }
        match lane {
            Lane::First => lanes.first.push_back(item),
            Lane::Behind => lanes.behind.push_back(item),
        }
        drop(lanes);
        self.ready.notify_one();
        Ok(())
    }

    /// Take no more writes; those already queued are still handed out.
    pub(super) fn stop(&self) {
        lock(&self.lanes).stopped = true;
        self.ready.notify_all();
    }

    /// Wait for writes and take up to `max`, the `First` lane first; `None`
    /// once stopped and empty.
    pub(super) fn take(&self, max: usize) -> Option<Vec<T>> {
        let mut lanes = lock(&self.lanes);
        while lanes.first.is_empty() && lanes.behind.is_empty() {
            if lanes.stopped {
                return None;
            }
            lanes = self.ready.wait(lanes).unwrap_or_else(|p| p.into_inner());
        }
        let from_first = lanes.first.len().min(max);
        let mut taken: Vec<T> = lanes.first.drain(..from_first).collect();
        let from_behind = lanes.behind.len().min(max - taken.len());
        taken.extend(lanes.behind.drain(..from_behind));
        Some(taken)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With more creations queued than a batch takes, every completion queued
    /// after them still goes into the next batch, ahead of them.
    #[test]
    fn the_first_lane_is_taken_before_the_one_behind() {
        let queue = WriteQueue::new();
        for n in 0..10 {
            queue.push(Lane::Behind, format!("create-{n}")).unwrap();
        }
        queue.push(Lane::First, "complete-a".to_string()).unwrap();
        queue.push(Lane::First, "complete-b".to_string()).unwrap();
        assert_eq!(
            queue.take(4).unwrap(),
            ["complete-a", "complete-b", "create-0", "create-1"]
        );
        assert_eq!(queue.take(100).unwrap().len(), 8);
    }

    /// A stopped queue refuses new writes but hands out what it holds, then
    /// says it is done.
    #[test]
    fn a_stopped_queue_drains_then_ends() {
        let queue = WriteQueue::new();
        queue.push(Lane::Behind, 1).unwrap();
        queue.stop();
        assert_eq!(queue.push(Lane::First, 2), Err(2));
        assert_eq!(queue.take(10), Some(vec![1]));
        assert_eq!(queue.take(10), None);
    }
}
