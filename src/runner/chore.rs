//! The ticker's contract with its jobs: `Chore` (one periodic job: how
//! often, whether it runs while stopping, and the run) and `Doorbell` (how
//! a job, the dispatch or the completer asks the ticker to poll at once).
//! A leaf of the runner: every chore and the ticker (`maintenance`) name it,
//! it names none of them.

use crate::lock::lock;
use std::sync::{mpsc, Mutex};
use std::time::Duration;

/// One periodic job of the ticker.
pub(super) trait Chore: Send {
    /// How often it runs (never more often than `MIN_INTERVAL`).
    fn every(&self) -> Duration;

    /// Whether it goes on during a stop's grace period.
    fn while_stopping(&self) -> bool {
        false
    }

    fn run(&self);
}

/// How the ticker is asked to poll at once, and told to end: a channel whose
/// sender the ticker's drop takes away.
pub(super) struct Doorbell {
    bell: Mutex<Option<mpsc::Sender<()>>>,
}

impl Doorbell {
    /// A doorbell, and the receiver the ticker listens on.
    pub(super) fn new() -> (Doorbell, mpsc::Receiver<()>) {
        let (bell, listener) = mpsc::channel();
        let doorbell = Doorbell {
            bell: Mutex::new(Some(bell)),
        };
        (doorbell, listener)
    }

    /// Poll now (`Dispatch::claim_due_work`) rather than at the next
    /// interval; nothing once the ticker has ended.
    pub(super) fn ring(&self) {
        if let Some(bell) = lock(&self.bell).as_ref() {
            let _ = bell.send(());
        }
    }

    /// Take the sender away: the ticker wakes at once and ends.
    pub(super) fn silence(&self) {
        drop(lock(&self.bell).take());
    }
}
