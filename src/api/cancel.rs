//! `POST /v1/tool-calls/{call_id}/cancel`: the REST face of `Calls::cancel`.
//! Optional body `{"reason": "..."}` (`validate::cancel_reason`); `?wait=`
//! bounds how long a running call is waited for (default
//! `DEFAULT_CANCEL_WAIT`). Answers, the same for the same request however
//! often it is sent:
//! - `200` and the call, `cancelled`;
//! - `202` and the call, still `running` with `cancel_requested_at`: its
//!   tool is being stopped; poll it;
//! - `409 call_settled` (`error.call_id`, `error.status`, and the call
//!   under `call`): it had succeeded or failed, or its tool's answer was
//!   recorded before the stop took effect;
//! - `404 not_found`: no such call for this tenant (another tenant's call
//!   included, never `403`).
//!
//! Who asked is the authenticated tenant; it goes into the audit with the
//! reason. Nothing here decides an outcome.

use super::error::ApiError;
use super::service::Api;
use super::validate::{cancel_reason, wait_param};
use crate::auth::Tenant;
use crate::calls::{CancelAnswer, DEFAULT_CANCEL_WAIT};
use crate::http::{ErrorCode, Request, Response};
use crate::input::quote;
use crate::log::Exchange;
use crate::store::Call;
use serde_json::{json, Map};

impl Api {
    /// Cancel the tenant's call `call_id`.
    pub(super) fn cancel(
        &self,
        req: &Request,
        tenant: &Tenant,
        call_id: &str,
        exchange: &mut Exchange,
    ) -> Result<Response, ApiError> {
        let reason = cancel_reason(&req.body)?;
        let wait = wait_param(req)?.unwrap_or(DEFAULT_CANCEL_WAIT);
        let gone = || req.client.gone();
        let cancelled = self
            .calls
            .cancel(&tenant.name, call_id, reason.as_deref(), wait, gone)?;
        let call = match cancelled {
            CancelAnswer::NotFound => {
                return Err(ApiError::NotFound(format!("call {}", quote(call_id))))
            }
            CancelAnswer::Settled(call) => {
                exchange.call_id = Some(call.call_id.clone());
                return Ok(settled(&call));
            }
            CancelAnswer::Cancelled(call) | CancelAnswer::Stopping(call) => call,
        };
        exchange.call_id = Some(call.call_id.clone());
        Ok(self.answer_with_call(&call, false))
    }
}

/// `409 call_settled`: the call had succeeded or failed before it could be
/// cancelled; the answer names it and carries it whole.
fn settled(call: &Call) -> Response {
    let mut about = Map::new();
    about.insert("call_id".into(), json!(call.call_id));
    about.insert("status".into(), json!(call.status.as_str()));
    let mut beside = Map::new();
    beside.insert("call".into(), call.to_json());
    Response::from_error_about(
        ErrorCode::CallSettled,
        format_args!(
            "call {} had already {}; nothing was cancelled",
            call.call_id,
            call.status.as_str()
        ),
        about,
        beside,
    )
}
