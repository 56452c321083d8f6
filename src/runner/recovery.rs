//! Recovery, a job of the maintenance ticker and the first thing a starting
//! process runs: expired leases back to `pending` (but never one this
//! process's workers still run and extend, nor a completion it is handing to
//! the store again), then as many due calls (no retry scheduled for later)
//! as there are free workers claimed in one operation and run
//! (`Dispatch::claim_due_work`).
//!
//! It never chooses what to take back — the store's conditional `UPDATE`
//! does, told which leases this process still holds — and never runs a tool.

use super::chore::Chore;
use super::dispatch::Dispatch;
use crate::log::{self, Repeats, BACKGROUND_FAILURE_EVERY};
use crate::metrics::Metrics;
use crate::store::CallStore;
use std::sync::Arc;
use std::time::Duration;

/// Fails again on every pass while the fault lasts: one line per interval.
static RECOVERY_FAILED: Repeats = Repeats::every(BACKGROUND_FAILURE_EVERY);

/// One pass of recovery, and how often the ticker runs it.
#[derive(Clone)]
pub(super) struct Recovery {
    pub(super) dispatch: Arc<Dispatch>,
    pub(super) store: Arc<CallStore>,
    pub(super) metrics: Arc<Metrics>,
    /// `--recover-interval-ms`.
    pub(super) every: Duration,
}

impl Recovery {
    /// One pass: recover, then claim the due calls.
    pub(super) fn run_once(&self) {
        let tasks = self.dispatch.tasks();
        match self.store.recover(&tasks.extended_leases()) {
            Ok(recovered) => {
                self.metrics.recoveries.inc_by(recovered.len() as u64);
                for call_id in &recovered {
                    // Its old executor (if in this process) is stalled past its
                    // lease; forget it so the call can be taken on again. The
                    // fence discards whatever that executor completes later.
                    tasks.forget(call_id);
                    log::info("call recovered")
                        .event("recover")
                        .call_id(call_id)
                        .transition("running", "pending")
                        .emit();
                }
            }
            Err(e) => log::error("recovery failed")
                .event("recovery_failed")
                .cause(&e)
                .emit_or_count(&RECOVERY_FAILED),
        }
        self.dispatch.claim_due_work();
    }
}

impl Chore for Recovery {
    fn every(&self) -> Duration {
        self.every
    }

    fn run(&self) {
        self.run_once();
    }
}
