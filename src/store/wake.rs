//! Wake-ups from the other nodes on one database: what another node
//! committed since it last said so — new pending work, or calls that
//! finished — and what this process does on hearing it. Only the types: a
//! backend that can carry them (PostgreSQL's `LISTEN`/`NOTIFY`) delivers
//! them to the handler; SQLite has no such channel, and there polling alone
//! finds another process's work.
//!
//! A wake-up is a hint, never a message anyone relies on: whoever it wakes
//! re-reads the database, and the recovery pass and every `?wait`'s re-read
//! find the same work and completions without it.

use std::sync::Arc;

/// What another node committed since its last notification (or, once sent,
/// what this node has to announce).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Wake {
    /// New pending work: a call created, a lease released, a retry scheduled.
    pub work: bool,
    /// Calls reached a terminal state.
    pub done: bool,
    /// Which ones, as far as the sender could name them (a notification
    /// names a bounded number). With `done` set and a call missing here, its
    /// waiters find out by their own re-read.
    pub calls: Vec<String>,
    /// A running call's cancel was asked: the node that runs it checks its
    /// own calls now (`CallStore::cancels_asked`) rather than at its next
    /// heartbeat.
    pub cancel: bool,
}

/// What a process does when woken; it runs on the thread that heard it.
pub type WakeHandler = Arc<dyn Fn(Wake) + Send + Sync>;

impl Wake {
    /// After a lost connection: anything may have happened, nothing is named.
    pub fn everything() -> Wake {
        Wake {
            work: true,
            done: true,
            calls: Vec::new(),
            cancel: true,
        }
    }

    pub fn is_empty(&self) -> bool {
        !self.work && !self.done && !self.cancel
    }

    /// Both wake-ups in one.
    pub(in crate::store) fn merge(&mut self, other: Wake) {
        self.work |= other.work;
        self.done |= other.done;
        self.cancel |= other.cancel;
        self.calls.extend(other.calls);
    }
}
