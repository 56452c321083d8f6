//! Approval expiry, a job of the maintenance ticker: about once a second,
//! the requests whose time is over end their calls `denied` (source
//! `expiry`), each by the store's fenced decision — a decision that came
//! first wins, and expiry then changes nothing. Each ended call's waits
//! end, one `approval_expired` line is logged and counted.
//!
//! It never chooses which call ends: the store's conditional update does.

use super::chore::Chore;
use super::notifier::Notifier;
use crate::log::{self, Repeats, BACKGROUND_FAILURE_EVERY};
use crate::metrics::Metrics;
use crate::store::{CallStore, Source, Verdict};
use std::sync::Arc;
use std::time::Duration;

/// Fails again on every pass while the fault lasts: one line per interval.
static EXPIRY_FAILED: Repeats = Repeats::every(BACKGROUND_FAILURE_EVERY);

/// How often expired requests are looked for.
const EXPIRE_EVERY: Duration = Duration::from_secs(1);
/// Requests ended per pass: the rest wait a second.
const EXPIRE_BATCH: usize = 100;

/// The expiry pass.
pub(super) struct ApprovalExpiry {
    pub(super) store: Arc<CallStore>,
    pub(super) notifier: Arc<Notifier>,
    pub(super) metrics: Arc<Metrics>,
}

impl Chore for ApprovalExpiry {
    fn every(&self) -> Duration {
        EXPIRE_EVERY
    }

    fn run(&self) {
        let ended = match self.store.expire_approvals(EXPIRE_BATCH) {
            Ok(ended) => ended,
            Err(e) => {
                return log::error("approval expiry failed")
                    .event("approval_expiry_failed")
                    .cause(&e)
                    .emit_or_count(&EXPIRY_FAILED)
            }
        };
        for call in &ended {
            self.metrics
                .approvals
                .observe_decision(Verdict::Deny, Source::Expiry);
            log::info("approval request expired")
                .event("approval_expired")
                .tenant(&call.tenant)
                .call_id(&call.call_id)
                .tool(&call.tool)
                .transition("awaiting_approval", "denied")
                .emit();
        }
        self.notifier
            .notify(ended.iter().map(|call| call.call_id.as_str()));
    }
}
