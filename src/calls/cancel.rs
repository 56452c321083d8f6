//! Cancel, as both transports would answer it: the store records it (a
//! pending call `cancelled` at once; a running one's cancel recorded), the
//! runner halts the tool if it runs in this process (another process or
//! node learns of it by notification or by its check every heartbeat), and
//! the request waits a bounded time for a running call to end. What it
//! answers is the call as it then is: `cancelled`, still stopping, or
//! settled first (its tool's answer was recorded before the stop took
//! effect, or it had long succeeded or failed).
//!
//! It never decides whether a call is cancelled — the store's conditional
//! updates do — never shows another tenant's call, and never logs a reason
//! (free text).

use super::service::Calls;
use crate::log;
use crate::metrics::CancelOutcome;
use crate::store::{Call, Cancel, Status, StoreError};
use std::time::Duration;

/// How long a cancel of a running call waits for it to end unless the
/// request says (`?wait=`): a command tool's grace between SIGTERM and
/// SIGKILL, and a little more for its completion to commit.
pub const DEFAULT_CANCEL_WAIT: Duration = Duration::from_millis(2_000);

/// What a cancel answered.
#[derive(Debug, Clone, PartialEq)]
pub enum CancelAnswer {
    /// The call is `cancelled` (by this request, or before).
    Cancelled(Call),
    /// Still `running` with its cancel recorded: its tool is being stopped.
    Stopping(Call),
    /// It had succeeded, failed or been denied, or its tool's answer was
    /// recorded before the stop took effect: nothing was cancelled.
    Settled(Call),
    /// The tenant has no such call.
    NotFound,
}

impl CancelAnswer {
    fn outcome(&self) -> CancelOutcome {
        match self {
            CancelAnswer::Cancelled(_) => CancelOutcome::Cancelled,
            CancelAnswer::Stopping(_) => CancelOutcome::Stopping,
            CancelAnswer::Settled(_) => CancelOutcome::Settled,
            CancelAnswer::NotFound => CancelOutcome::NotFound,
        }
    }

    /// The answer the call's status gives once the wait is over.
    fn as_it_is(call: Call) -> CancelAnswer {
        match call.status {
            Status::Cancelled => CancelAnswer::Cancelled(call),
            Status::Succeeded | Status::Failed | Status::Denied => CancelAnswer::Settled(call),
            Status::AwaitingApproval | Status::Pending | Status::Running => {
                CancelAnswer::Stopping(call)
            }
        }
    }
}

impl Calls {
    /// Cancel the tenant's call `call_id`, saying why (`reason`, already
    /// bounded), and wait up to `wait` (or until `gone()`) for a running one
    /// to end. Idempotent: a second cancel answers what the call then is.
    pub fn cancel(
        &self,
        tenant: &str,
        call_id: &str,
        reason: Option<&str>,
        wait: Duration,
        gone: impl Fn() -> bool,
    ) -> Result<CancelAnswer, StoreError> {
        let answer = match self.store.cancel(tenant, call_id, reason)? {
            Cancel::NotFound => CancelAnswer::NotFound,
            Cancel::Settled(call) => CancelAnswer::Settled(call),
            Cancel::Cancelled { call, now } => {
                if now {
                    log_cancelled(&call, "pending");
                    // Its `?wait`s end now; a submission queued here will
                    // lose its claim.
                    self.notifier.notify([call.call_id.as_str()]);
                }
                CancelAnswer::Cancelled(call)
            }
            Cancel::Requested { call, .. } => {
                // Halted here at once if it runs here; elsewhere its owner
                // hears of it (a notification, or its next check).
                self.runner.cancel(&call.call_id, call.attempt);
                CancelAnswer::as_it_is(self.wait(call, wait, gone)?)
            }
        };
        self.metrics.observe_cancel(answer.outcome());
        Ok(answer)
    }
}

/// A call cancelled at once, at `info` (the reason stays out of the log).
fn log_cancelled(call: &Call, from: &'static str) {
    log::info("call cancelled")
        .event("cancelled")
        .tenant(&call.tenant)
        .call_id(&call.call_id)
        .transition(from, "cancelled")
        .emit();
}
