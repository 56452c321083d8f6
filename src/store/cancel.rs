//! Cancelling a call, as both backends keep it: what a cancel found or did
//! (`Cancel`), the bound on its reason, and the rules each wing's
//! `cancel.rs` implements in its own SQL.
//!
//! The rules. A `pending` call — new, or waiting for an automatic retry —
//! becomes `cancelled` at once, by one conditional `UPDATE … WHERE status =
//! 'pending' AND attempt = …` whose row count decides: a claim racing it
//! matches no row (it needs `pending`), so the call never runs. A `running`
//! call only has its request recorded (`cancel_requested_at`, the reason,
//! and a `cancel_requested` audit row naming who asked and why), by an
//! `UPDATE … WHERE status = 'running' AND attempt = …`; from then on:
//! - no claim takes its lease over, even once it lapses;
//! - its owner stops the tool and records `cancelled` fenced like any
//!   completion: same attempt, still `running`, and no effect row;
//! - a success still commits (its effect happened; the cancel was too late),
//!   but any other end — a failure, a retry due, a lease given back by a
//!   stopping process, recovery from a dead owner — makes it `cancelled`
//!   instead of `failed` or `pending`, under the same fence.
//!
//! So a `cancelled` call never has an effect row, and never runs again; its
//! key replays it, and its business key no longer holds (like `failed`).
//! This file holds no SQL and decides nothing; the wings' updates do.

use super::audit;
use super::model::Call;
use crate::status::Status;

/// The longest reason a cancel may give, in bytes.
pub const MAX_CANCEL_REASON_BYTES: usize = 500;

/// The `error.message` of a call cancelled without a reason.
pub(in crate::store) const NO_REASON: &str = "cancelled on request";

/// What a cancel found or did, read after it (the call as it then is).
#[derive(Debug, Clone, PartialEq)]
pub enum Cancel {
    /// The tenant has no such call.
    NotFound,
    /// The call is `cancelled`; `now` when this request made it so (it was
    /// pending, or waiting for a retry).
    Cancelled { call: Call, now: bool },
    /// The call is `running` with its cancel recorded (`now` when this
    /// request recorded it): its owner must stop it.
    Requested { call: Call, now: bool },
    /// It had already succeeded, failed or been denied: nothing was changed.
    Settled(Call),
}

impl Cancel {
    /// What this request did, as the call reads right after: cancelled, or
    /// its stop requested (or already settled by then: its owner's success
    /// was faster than the read).
    fn done_now(call: Call) -> Cancel {
        match call.status {
            Status::Cancelled => Cancel::Cancelled { call, now: true },
            Status::Succeeded | Status::Failed | Status::Denied => Cancel::Settled(call),
            Status::AwaitingApproval | Status::Pending | Status::Running => {
                Cancel::Requested { call, now: true }
            }
        }
    }

    /// The same outcome with `f` applied to its call (the facade stamps
    /// `expires_at` this way).
    pub(in crate::store) fn map(self, f: impl FnOnce(Call) -> Call) -> Cancel {
        match self {
            Cancel::NotFound => Cancel::NotFound,
            Cancel::Cancelled { call, now } => Cancel::Cancelled { call: f(call), now },
            Cancel::Requested { call, now } => Cancel::Requested { call: f(call), now },
            Cancel::Settled(call) => Cancel::Settled(f(call)),
        }
    }
}

/// The statements of one cancel, in a wing's SQL: a read of the tenant's
/// call, and the two conditional updates (each with its audit row). Each
/// update names the attempt it read; its row count decides.
pub(in crate::store) trait CancelSteps {
    type Error;

    /// The tenant's call as it is now.
    fn read(&mut self) -> Result<Option<Call>, Self::Error>;

    /// `pending` (under `call.attempt`) → `cancelled`, audited `cancelled`
    /// with `detail`; `true` if it applied.
    fn cancel_pending(&mut self, call: &Call, detail: &str) -> Result<bool, Self::Error>;

    /// Record the cancel of a `running` call (under `call.attempt`, none
    /// recorded yet), audited `cancel_requested` with `detail`; `true` if it
    /// applied.
    fn request_stop(&mut self, call: &Call, detail: &str) -> Result<bool, Self::Error>;

    /// `awaiting_approval` → `cancelled`, its approval request closed
    /// (`store::approval`), audited `cancelled` with `detail`; `true` if it
    /// applied.
    fn cancel_awaiting(&mut self, call: &Call, detail: &str) -> Result<bool, Self::Error>;
}

/// Cancel the call `steps` reads: read it, then the one update its status
/// calls for, audited as asked `by` (`None`: by the call's own tenant); a
/// lost race (the call moved between the read and the update) reads again,
/// up to `tries` times. `None`: it kept moving.
pub(in crate::store) fn cancel_with<S: CancelSteps>(
    steps: &mut S,
    by: Option<&str>,
    reason: Option<&str>,
    tries: usize,
) -> Result<Option<Cancel>, S::Error> {
    for _ in 0..tries {
        let Some(call) = steps.read()? else {
            return Ok(Some(Cancel::NotFound));
        };
        match call.status {
            Status::Cancelled => return Ok(Some(Cancel::Cancelled { call, now: false })),
            Status::Succeeded | Status::Failed | Status::Denied => {
                return Ok(Some(Cancel::Settled(call)))
            }
            Status::AwaitingApproval => {
                let detail = audit::cancelled_awaiting(&call.tenant, reason);
                if steps.cancel_awaiting(&call, &detail)? {
                    return Ok(steps.read()?.map(Cancel::done_now));
                }
            }
            Status::Running if call.cancel_requested_at.is_some() => {
                return Ok(Some(Cancel::Requested { call, now: false }))
            }
            Status::Pending => {
                let by = by.unwrap_or(&call.tenant);
                let detail = audit::cancelled_pending(by, reason, call.attempt);
                if steps.cancel_pending(&call, &detail)? {
                    return Ok(steps.read()?.map(Cancel::done_now));
                }
            }
            Status::Running => {
                let owner = call.owner.as_deref();
                let by = by.unwrap_or(&call.tenant);
                let detail = audit::cancel_requested(by, reason, call.attempt, owner);
                if steps.request_stop(&call, &detail)? {
                    return Ok(steps.read()?.map(Cancel::done_now));
                }
            }
        }
    }
    Ok(None)
}
