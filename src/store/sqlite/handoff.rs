//! `Handoff`: one answer passed from the thread that touches the database
//! file (the writer, a reader) to the request that waits for it — for at
//! most its deadline.
//!
//! A file system that stops answering (frozen, a disk that hangs) blocks
//! whichever thread touches the file in the kernel, where nothing can wake
//! it. So no request touches the file itself: it hands the work over and
//! waits here, by its own clock. Past the deadline the two sides settle who
//! gave up first, once, under one lock:
//! - the work had not started: it never will (`start` says no), so the
//!   waiter may say that nothing was done (`Waited::NotStarted`);
//! - it had started: its outcome is unknown (a write may still commit), the
//!   waiter says so (`Waited::Unfinished`), and when the answer comes late
//!   it is handed back to the answering side (`answer` returns it), which
//!   deals with what it holds (a lease nobody will use).
//!
//! This module never touches the database and never decides what a late
//! answer means; it only keeps the two sides from both believing they own
//! the outcome.

use crate::lock::lock;
use std::sync::{Condvar, Mutex};
use std::time::Instant;

/// Where the work and its waiter stand.
enum State<R> {
    /// Queued; the waiter is waiting.
    Waiting,
    /// The work has begun; the waiter is waiting.
    Started,
    /// The answer, not yet taken by the waiter.
    Answered(R),
    /// The waiter gave up before the work began: it must never run.
    Abandoned,
    /// The waiter gave up after the work began: its answer goes back to the
    /// side that produced it.
    Gone,
    /// The waiter took the answer.
    Taken,
}

/// What the waiter got by its deadline.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Waited<R> {
    Answer(R),
    /// The deadline passed before the work began; it will not run.
    NotStarted,
    /// The deadline passed while the work ran: its outcome is unknown.
    Unfinished,
}

/// One answer between two threads.
pub(super) struct Handoff<R> {
    state: Mutex<State<R>>,
    answered: Condvar,
}

impl<R> Default for Handoff<R> {
    fn default() -> Self {
        Handoff {
            state: Mutex::new(State::Waiting),
            answered: Condvar::new(),
        }
    }
}

impl<R> Handoff<R> {
    /// Called by the working side before it begins: `false` if the waiter
    /// has already given up, and then the work must not be done.
    pub(super) fn start(&self) -> bool {
        let mut state = lock(&self.state);
        match *state {
            State::Waiting => {
                *state = State::Started;
                true
            }
            _ => false,
        }
    }

    /// Hand the answer over. `Some(answer)` back if the waiter gave up after
    /// the work began: the caller then owns what the answer holds. An answer
    /// to a waiter that gave up before (a job dropped unrun) is dropped.
    pub(super) fn answer(&self, answer: R) -> Option<R> {
        let mut state = lock(&self.state);
        match *state {
            State::Waiting | State::Started => {
                *state = State::Answered(answer);
                drop(state);
                self.answered.notify_one();
                None
            }
            State::Gone => Some(answer),
            State::Abandoned | State::Answered(_) | State::Taken => None,
        }
    }

    /// Wait for the answer until `deadline`, then give up: see `Waited`.
    pub(super) fn wait_until(&self, deadline: Instant) -> Waited<R> {
        let mut state = lock(&self.state);
        loop {
            if let State::Answered(_) = *state {
                let State::Answered(answer) = std::mem::replace(&mut *state, State::Taken) else {
                    unreachable!("just matched");
                };
                return Waited::Answer(answer);
            }
            let now = Instant::now();
            if now >= deadline {
                let (next, waited) = match *state {
                    State::Waiting => (State::Abandoned, Waited::NotStarted),
                    _ => (State::Gone, Waited::Unfinished),
                };
                *state = next;
                return waited;
            }
            state = self
                .answered
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    fn soon() -> Instant {
        Instant::now() + Duration::from_millis(20)
    }

    #[test]
    fn an_answer_in_time_is_taken() {
        let handoff = Arc::new(Handoff::default());
        let worker = Arc::clone(&handoff);
        let thread = std::thread::spawn(move || {
            assert!(worker.start());
            worker.answer(7)
        });
        let waited = handoff.wait_until(Instant::now() + Duration::from_secs(30));
        assert_eq!(waited, Waited::Answer(7));
        assert_eq!(thread.join().unwrap(), None, "the waiter took it");
    }

    /// Given up before it began, the work is refused its start, and its
    /// answer (an error from a job dropped unrun) goes nowhere.
    #[test]
    fn work_not_started_by_the_deadline_never_runs() {
        let handoff = Handoff::default();
        assert_eq!(handoff.wait_until(soon()), Waited::NotStarted);
        assert!(!handoff.start());
        assert_eq!(handoff.answer(1), None);
    }

    /// Given up while it ran, its late answer is handed back to the side
    /// that produced it.
    #[test]
    fn a_late_answer_goes_back_to_the_working_side() {
        let handoff = Handoff::default();
        assert!(handoff.start());
        assert_eq!(handoff.wait_until(soon()), Waited::Unfinished);
        assert_eq!(handoff.answer(9), Some(9));
    }

    /// An answer that came before the waiter looked is taken even when the
    /// deadline has already passed.
    #[test]
    fn an_answer_already_there_wins_over_the_deadline() {
        let handoff = Handoff::default();
        assert!(handoff.start());
        assert_eq!(handoff.answer(3), None);
        assert_eq!(handoff.wait_until(Instant::now()), Waited::Answer(3));
    }
}
