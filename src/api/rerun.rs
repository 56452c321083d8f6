//! `POST /v1/tool-calls/{call_id}/rerun`: the REST face of `Calls::rerun`.
//! Optional body `{"reason": "..."}` (as a cancel's). Answers:
//! - `202` and the call, `pending` again: same call id, same effect id, its
//!   next claim a new attempt (and `Location`);
//! - `409 call_succeeded`: it succeeded, its effect happened;
//! - `409 call_denied`: its approval was denied; it never runs;
//! - `409 call_in_flight`: it is `awaiting_approval`, `pending` or
//!   `running` (a second re-run
//!   finds the first one's call so);
//! - `410 call_expired`: it is past its retention;
//! - `409 duplicate_intent`: another live call holds its business key
//!   (`error.call_id` and `Location` name it);
//! - `403 role_required`: the token is not an operator's or an admin's;
//! - `404 not_found`: no such call in the caller's scope.
//!
//! Who asked is the authenticated tenant; it goes into the audit with the
//! reason. Nothing here decides an outcome.

use super::error::ApiError;
use super::operate::{may_operate, operating_scope, Operation};
use super::service::Api;
use super::validate::reason_of;
use crate::auth::Tenant;
use crate::http::{ErrorCode, Request, Response};
use crate::input::quote;
use crate::log::Exchange;
use crate::store::{Call, Rerun};
use serde_json::{json, Map};

impl Api {
    /// Re-run the call `call_id`, in the caller's operating scope.
    pub(super) fn rerun(
        &self,
        req: &Request,
        tenant: &Tenant,
        call_id: &str,
        exchange: &mut Exchange,
    ) -> Result<Response, ApiError> {
        // A re-run is an operator's act (`Action::Operate`), not a caller's:
        // an agent's own token never brings back what a person cancelled.
        let scope = operating_scope(tenant);
        may_operate(tenant, Operation::OnCalls(scope))?;
        let reason = reason_of(&req.body, "a re-run")?;
        let rerun = self
            .calls
            .rerun(scope, call_id, &tenant.name, reason.as_deref())?;
        let refused = |code: ErrorCode, call: &Call, why: &str| {
            let mut about = Map::new();
            about.insert("call_id".into(), json!(call.call_id));
            about.insert("status".into(), json!(call.status.as_str()));
            let mut beside = Map::new();
            beside.insert("call".into(), call.to_json());
            let message = format!("call {} {why}; nothing was changed", call.call_id);
            Response::from_error_about(code, message, about, beside)
        };
        let response = match rerun {
            Rerun::NotFound => return Err(ApiError::NotFound(format!("call {}", quote(call_id)))),
            Rerun::Done(call) => self
                .answer_with_call(&call, false)
                .with_header("Location", &call.url()),
            Rerun::Succeeded(call) => refused(
                ErrorCode::CallSucceeded,
                &call,
                "succeeded: its effect happened, and it never runs again",
            ),
            Rerun::Denied(call) => refused(
                ErrorCode::CallDenied,
                &call,
                "was denied: a person's refusal is not re-run (a new call needs a new key)",
            ),
            Rerun::InFlight(call) => refused(
                ErrorCode::CallInFlight,
                &call,
                "has not ended (only a failed or cancelled call is re-run)",
            ),
            Rerun::Expired(call) => refused(
                ErrorCode::CallExpired,
                &call,
                "is past its retention (--key-ttl) and may be purged; it is not re-run",
            ),
            Rerun::Duplicate { call, holder } => {
                let message = format!(
                    "call {holder} holds call {}'s business key now; re-running it would make \
                     a second live intent; nothing was changed",
                    call.call_id
                );
                Response::from_error_naming(ErrorCode::DuplicateIntent, message, Some(&holder))
                    .with_header("Location", &format!("/v1/tool-calls/{holder}"))
            }
        };
        exchange.call_id = Some(call_id.to_string());
        Ok(response)
    }
}
