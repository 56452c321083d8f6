//! How this process learns that a call it runs was cancelled, and stops its
//! tool. Three ways, the first that comes wins:
//! - in-process: a cancel answered here asks at once (`Runner::cancel`);
//! - another node's `NOTIFY` (PostgreSQL) runs the check below at once;
//! - the check below, a job of the maintenance ticker every heartbeat
//!   interval (`HEARTBEAT_EVERY`, also during a stop's grace period): one
//!   read of which attempts running here have their cancel asked — so a
//!   cancel answered by another process on the same SQLite file, or a lost
//!   notification, reaches the tool within one interval.
//!
//! Stopping is asking the worker's `Stop` for the entry's run (the task
//! table finds both); the worker then records the fenced `cancelled`
//! completion itself. Nothing here writes to the store or decides an
//! outcome, and nothing runs when no tool is running.

use super::chore::Chore;
use super::dispatch::Dispatch;
use crate::log::{self, Repeats, BACKGROUND_FAILURE_EVERY};
use crate::store::{CallStore, HEARTBEAT_EVERY};
use std::sync::Arc;
use std::time::Duration;

/// Fails again on every pass while the fault lasts: one line per interval.
static CANCEL_CHECK_FAILED: Repeats = Repeats::every(BACKGROUND_FAILURE_EVERY);

/// The check for cancels of the calls running here.
#[derive(Clone)]
pub(super) struct CancelCheck {
    pub(super) dispatch: Arc<Dispatch>,
    pub(super) store: Arc<CallStore>,
}

impl CancelCheck {
    /// Ask the store which attempts running here have their cancel asked,
    /// and stop their tools. Returns how many were stopped.
    pub(super) fn run_once(&self) -> usize {
        let running = self.dispatch.tasks().running();
        if running.is_empty() {
            return 0;
        }
        match self.store.cancels_asked(&running) {
            Ok(asked) => asked
                .iter()
                .filter(|held| {
                    self.dispatch
                        .stop_running(&held.call_id, Some(held.attempt))
                })
                .count(),
            Err(e) => {
                log::warn("could not read which running calls were cancelled")
                    .event("cancel_check_failed")
                    .cause(&e)
                    .emit_or_count(&CANCEL_CHECK_FAILED);
                0
            }
        }
    }
}

impl Chore for CancelCheck {
    fn every(&self) -> Duration {
        HEARTBEAT_EVERY
    }

    fn while_stopping(&self) -> bool {
        true
    }

    fn run(&self) {
        self.run_once();
    }
}
