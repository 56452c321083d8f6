//! Re-running a call, as both backends keep it: what a re-run found or did
//! (`Rerun`), and the rules each wing's `rerun.rs` implements in its own SQL.
//!
//! The rules. Only a call that ended without an effect may run again: a
//! `failed` one, or a `cancelled` one (which never has an effect row). It
//! goes back to `pending` by one conditional `UPDATE … WHERE status IN
//! ('failed', 'cancelled') AND attempt = …` whose row count decides, with
//! its `rerun` audit row (who asked, why, after which attempt) in the same
//! transaction. It keeps its call id, its key and its effect id; its error,
//! its retry time and its cancel request are cleared, so nothing of the
//! attempt that ended decides the next one; the next claim gives it a new
//! attempt number. Its key then answers the call as it now is, and the
//! downstream is sent the same effect id again — a downstream that applied
//! it already answers from its own record.
//!
//! It is refused, with nothing changed, for a `succeeded` call (its effect
//! happened), a `denied` one (a person's refusal is not overruled here: a
//! new call needs a new key and a new decision), an `awaiting_approval`,
//! `pending` or `running` one (it has not ended), a call past
//! its retention (`expired`: it may be purged at any moment, and a re-run
//! must not bring it back), and a call whose business key another live call
//! now holds (the re-run would make a second live intent). A call that
//! carried a business key takes it back first, for a new window, in the
//! same transaction.
//!
//! A re-run of a cancelled call is a new decision, not a breach of cancel's
//! rule that a cancelled call never runs: the rule is about the cancel's own
//! effect (no claim may take a call whose cancel was asked); an operator's
//! re-run, audited, clears the request. This file holds no SQL and decides
//! nothing; the wings' updates do.

use super::audit;
use super::model::Call;
use crate::status::Status;

/// The longest reason a re-run may give, in bytes (as a cancel's).
pub use super::cancel::MAX_CANCEL_REASON_BYTES as MAX_RERUN_REASON_BYTES;

/// What a re-run found or did.
#[derive(Debug, Clone, PartialEq)]
pub enum Rerun {
    /// No such call in the scope.
    NotFound,
    /// Back to `pending`, as the call now reads.
    Done(Call),
    /// It succeeded: its effect happened, it never runs again.
    Succeeded(Call),
    /// It was denied (by a person, or by its request's expiry): it never
    /// runs, and a re-run would overrule that decision.
    Denied(Call),
    /// It is `awaiting_approval`, `pending` or `running`: it has not ended.
    InFlight(Call),
    /// It is past its retention (`expires_at`): it may be purged.
    Expired(Call),
    /// Another live call holds its business key: `holder`.
    Duplicate { call: Call, holder: String },
}

impl Rerun {
    /// The same outcome with `f` applied to its call (the facade stamps
    /// `expires_at` this way).
    pub(in crate::store) fn map(self, mut f: impl FnMut(Call) -> Call) -> Rerun {
        match self {
            Rerun::NotFound => Rerun::NotFound,
            Rerun::Done(call) => Rerun::Done(f(call)),
            Rerun::Succeeded(call) => Rerun::Succeeded(f(call)),
            Rerun::Denied(call) => Rerun::Denied(f(call)),
            Rerun::InFlight(call) => Rerun::InFlight(f(call)),
            Rerun::Expired(call) => Rerun::Expired(f(call)),
            Rerun::Duplicate { call, holder } => Rerun::Duplicate {
                call: f(call),
                holder,
            },
        }
    }
}

/// Who asks for a re-run, of which call, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct RerunRequest {
    /// The call's tenant, or `None` for any tenant's (an admin's).
    pub tenant: Option<String>,
    pub call_id: String,
    /// Who asked, as the audit names them (a tenant; a bulk job adds its id).
    pub by: String,
    pub reason: Option<String>,
    /// `--key-ttl` in seconds: a terminal call last updated longer ago than
    /// this is past its retention. `None`: keys are kept forever.
    pub key_ttl: Option<f64>,
}

/// The statements of one re-run, in a wing's SQL. Each update names the
/// attempt it read; its row count decides.
pub(in crate::store) trait RerunSteps {
    type Error;

    /// The call as it is now, in the request's scope.
    fn read(&mut self) -> Result<Option<Call>, Self::Error>;

    /// Whether the call's last update is older than the retention allows,
    /// by the backend's clock.
    fn expired(&mut self, call: &Call) -> Result<bool, Self::Error>;

    /// Take the call's business key back, if it carried one: its row holds
    /// again, for a new window from now. `Some(holder)`: another live call
    /// holds it, and nothing was changed.
    fn hold_business_key(&mut self, call: &Call) -> Result<Option<String>, Self::Error>;

    /// `failed` or `cancelled` (under `call.attempt`) → `pending`, audited
    /// `rerun` with `detail`; `true` if it applied.
    fn reset(&mut self, call: &Call, detail: &str) -> Result<bool, Self::Error>;
}

/// Re-run the call `steps` reads, by `request`: read it, then decide by its
/// status; a lost race (the call moved between the read and the update)
/// reads again, up to `tries` times. `None`: it kept moving.
pub(in crate::store) fn rerun_with<S: RerunSteps>(
    steps: &mut S,
    request: &RerunRequest,
    tries: usize,
) -> Result<Option<Rerun>, S::Error> {
    for _ in 0..tries {
        let Some(call) = steps.read()? else {
            return Ok(Some(Rerun::NotFound));
        };
        match call.status {
            Status::Succeeded => return Ok(Some(Rerun::Succeeded(call))),
            Status::Denied => return Ok(Some(Rerun::Denied(call))),
            Status::AwaitingApproval | Status::Pending | Status::Running => {
                return Ok(Some(Rerun::InFlight(call)))
            }
            Status::Failed | Status::Cancelled => {}
        }
        if steps.expired(&call)? {
            return Ok(Some(Rerun::Expired(call)));
        }
        if let Some(holder) = steps.hold_business_key(&call)? {
            return Ok(Some(Rerun::Duplicate { call, holder }));
        }
        let detail = audit::rerun(
            &request.by,
            request.reason.as_deref(),
            call.attempt,
            call.status,
        );
        if steps.reset(&call, &detail)? {
            return Ok(steps.read()?.map(Rerun::Done));
        }
    }
    Ok(None)
}
