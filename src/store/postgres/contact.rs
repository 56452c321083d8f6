//! `Contact`: whether this node has been in touch with the database long
//! enough to judge the others by their heartbeats.
//!
//! After an outage every node (this one too) shows a stale heartbeat and
//! leases that lapsed on the database's clock meanwhile, while each may be
//! holding the completions of calls it finished during the outage. A node
//! that came back first and reclaimed them at once would run those calls a
//! second time. So a node judges another node dead only once it has itself
//! been in touch for `DEAD_AFTER` without a gap: the others then had as long
//! as a live node ever gets to heart-beat (every second), extend their
//! leases and commit their held completions. A gap is `OUT_OF_TOUCH_AFTER`
//! with no answer from the server — an outage, a partition, a frozen
//! server, or this process paused or starved — and this node's own
//! heartbeat, every `HEARTBEAT_EVERY`, keeps the gaps short while all is
//! well.
//!
//! It measures on this process's monotonic clock and decides nothing by
//! itself: recovery (`instances`) asks it.

use super::super::instance::{DEAD_AFTER, HEARTBEAT_EVERY};
use crate::lock::lock;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// No answer from the server for this long is a gap in contact: two beats.
pub(super) const OUT_OF_TOUCH_AFTER: Duration = Duration::from_secs(2 * HEARTBEAT_EVERY.as_secs());

pub(super) struct Contact {
    state: Mutex<State>,
}

struct State {
    /// When an operation last got an answer from the server.
    last_answer: Instant,
    /// When the current unbroken run of answers began.
    in_touch_since: Instant,
}

impl Contact {
    /// A node that has just started judges at once: it holds no completion
    /// of its own, and what it reads is the database's present.
    pub(super) fn new() -> Contact {
        let now = Instant::now();
        Contact {
            state: Mutex::new(State {
                last_answer: now,
                in_touch_since: now.checked_sub(DEAD_AFTER).unwrap_or(now),
            }),
        }
    }

    /// An operation got an answer from the server (a result, or an error
    /// the server sent): after a gap, a new run of contact begins now.
    pub(super) fn answered(&self) {
        let now = Instant::now();
        let mut state = lock(&self.state);
        if now.duration_since(state.last_answer) > OUT_OF_TOUCH_AFTER {
            state.in_touch_since = now;
        }
        state.last_answer = now;
    }

    /// Whether this node may judge other nodes dead by their heartbeats:
    /// in touch, without a gap, for at least `DEAD_AFTER`.
    pub(super) fn may_judge_others(&self) -> bool {
        let state = lock(&self.state);
        let now = Instant::now();
        now.duration_since(state.last_answer) <= OUT_OF_TOUCH_AFTER
            && now.duration_since(state.in_touch_since) >= DEAD_AFTER
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh node judges at once; after a gap it waits `DEAD_AFTER` of
    /// unbroken contact; during a gap it does not judge at all.
    #[test]
    fn a_gap_in_contact_suspends_judging_others_for_dead_after() {
        let contact = Contact::new();
        assert!(contact.may_judge_others());
        let long_ago = Instant::now() - OUT_OF_TOUCH_AFTER - Duration::from_millis(10);
        lock(&contact.state).last_answer = long_ago;
        assert!(!contact.may_judge_others(), "out of touch now");
        contact.answered();
        assert!(!contact.may_judge_others(), "just came back");
        let state_since = lock(&contact.state).in_touch_since;
        assert!(state_since > long_ago);
        lock(&contact.state).in_touch_since = Instant::now() - DEAD_AFTER;
        contact.answered();
        assert!(contact.may_judge_others(), "in touch for DEAD_AFTER");
    }
}
