//! The approval routes, the REST face of `Calls::decide` and its reads:
//! - `POST /v1/tool-calls/{call_id}/approve` and `…/deny`, for a token
//!   with the approver role (or an admin's, for any tenant's call); body
//!   `{"reason": "…", "fingerprint": "<64 hex>"}`, the reason required to
//!   deny, the fingerprint (the request reviewed) optional. `200` with the
//!   call and its request; `409 already_decided` (the first decision in
//!   `approval`), `409 fingerprint_mismatch`, `404 not_found` (no such call
//!   in the token's tenant, or one that never waited for approval);
//! - `GET /v1/tool-calls/{call_id}/approval`: the call's request and its
//!   decision;
//! - `GET /v1/approvals`: the queue, calls awaiting approval oldest first,
//!   each with what will run (its tool and arguments) and when its request
//!   expires; `tenant=` as the list takes it, `limit=`, `after=` (the last
//!   call id of the page before).
//!
//! Who decides is the authenticated token, recorded by its name. Nothing
//! here decides an outcome: the store's conditional update does.

use super::error::ApiError;
use super::query::QueryParams;
use super::service::Api;
use crate::auth::{Action, Tenant};
use crate::calls::{by_person, MAX_QUEUE_PAGE};
use crate::http::{ErrorCode, Request, Response};
use crate::input::{parse_strict, quote};
use crate::log::Exchange;
use crate::store::{Approval, Call, Decided, Verdict, MAX_DECISION_REASON_BYTES};
use serde_json::{json, Map, Value};

/// The queue's page when `limit=` is not given.
const DEFAULT_QUEUE_PAGE: usize = 100;

impl Api {
    /// `POST /v1/tool-calls/{call_id}/approve` or `/deny`.
    pub(super) fn decide(
        &self,
        req: &Request,
        tenant: &Tenant,
        call_id: &str,
        verdict: Verdict,
        exchange: &mut Exchange,
    ) -> Result<Response, ApiError> {
        ApiError::unless_may(tenant, Action::Decide)?;
        let (reason, fingerprint) = decision_body(&req.body, verdict)?;
        let decision = by_person(tenant, verdict, reason, fingerprint);
        let decided = self
            .calls
            .decide(decider_scope(tenant), call_id, &decision)?;
        let not_found =
            || ApiError::NotFound(format!("approval request of call {}", quote(call_id)));
        match decided {
            Decided::NotFound => Err(not_found()),
            Decided::NoRequest(call) => {
                exchange.call_id = Some(call.call_id);
                Err(not_found())
            }
            Decided::Applied { call, approval } => {
                exchange.call_id = Some(call.call_id.clone());
                Ok(Response::json(200, &decided_json(&call, &approval)))
            }
            Decided::AlreadyDecided { call, approval } => {
                exchange.call_id = Some(call.call_id.clone());
                Ok(already_decided(&call, &approval))
            }
            Decided::FingerprintMismatch { call, approval } => {
                exchange.call_id = Some(call.call_id.clone());
                Ok(mismatch(&call, &approval))
            }
            Decided::ClientNotAllowed { .. } => Err(ApiError::RoleRequired {
                action: Action::Decide,
                role: tenant.role,
            }),
        }
    }

    /// `GET /v1/tool-calls/{call_id}/approval`.
    pub(super) fn approval(
        &self,
        tenant: &Tenant,
        call_id: &str,
        exchange: &mut Exchange,
    ) -> Result<Response, ApiError> {
        let approval = self
            .calls
            .approval(decider_scope(tenant), call_id)?
            .ok_or_else(|| {
                ApiError::NotFound(format!("approval request of call {}", quote(call_id)))
            })?;
        exchange.call_id = Some(approval.call_id.clone());
        Ok(Response::json(200, &approval.to_json()))
    }

    /// `GET /v1/approvals`: the queue.
    pub(super) fn approval_queue(
        &self,
        req: &Request,
        tenant: &Tenant,
    ) -> Result<Response, ApiError> {
        let params = QueryParams::parse(req.query.as_deref(), &["tenant", "limit", "after"], &[])?;
        let scope = self.scope(&params, tenant)?;
        let limit = match params.one("limit") {
            None => DEFAULT_QUEUE_PAGE,
            Some(raw) => raw
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=MAX_QUEUE_PAGE).contains(n))
                .ok_or_else(|| {
                    ApiError::BadRequest(format!(
                        "limit must be an integer from 1 to {MAX_QUEUE_PAGE}, not {}",
                        quote(raw)
                    ))
                })?,
        };
        let after = params.one("after");
        if let Some(after) = after {
            if after.len() > 64
                || !after
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_')
            {
                return Err(ApiError::BadRequest(format!(
                    "after must be a call id, not {}",
                    quote(after)
                )));
            }
        }
        let waiting = self.calls.waiting(scope.as_deref(), after, limit)?;
        let next = (waiting.len() == limit)
            .then(|| waiting.last().map(|w| w.call.call_id.clone()))
            .flatten();
        let approvals: Vec<Value> = waiting
            .iter()
            .map(|w| queued_json(&w.call, &w.approval))
            .collect();
        Ok(Response::json(
            200,
            &json!({"approvals": approvals, "next": next}),
        ))
    }
}

/// Whose calls a token's decisions and reads reach: its tenant's, or any
/// tenant's for an admin.
fn decider_scope(tenant: &Tenant) -> Option<&str> {
    match tenant.admin {
        true => None,
        false => Some(&tenant.name),
    }
}

/// A decision's body: nothing (approve only), or `{"reason", "fingerprint"}`
/// parsed strictly. A denial needs a reason; a reason is at most
/// `MAX_DECISION_REASON_BYTES`; a fingerprint is 64 lowercase hex.
fn decision_body(
    body: &[u8],
    verdict: Verdict,
) -> Result<(Option<String>, Option<String>), ApiError> {
    let mut fields = Map::new();
    if !body.iter().all(u8::is_ascii_whitespace) {
        let value = parse_strict(body).map_err(|e| {
            ApiError::BadRequest(format!("a decision's body is not valid JSON: {e}"))
        })?;
        let Value::Object(map) = value else {
            return Err(ApiError::BadRequest(
                "a decision's body must be a JSON object".into(),
            ));
        };
        fields = map;
    }
    if let Some(field) = fields
        .keys()
        .find(|k| !matches!(k.as_str(), "reason" | "fingerprint"))
    {
        return Err(ApiError::BadRequest(format!(
            "{} is not a field of a decision (expected: reason, fingerprint)",
            quote(field)
        )));
    }
    let reason = match fields.remove("reason") {
        None | Some(Value::Null) => None,
        Some(Value::String(reason))
            if !reason.trim().is_empty() && reason.len() <= MAX_DECISION_REASON_BYTES =>
        {
            Some(reason)
        }
        Some(_) => {
            return Err(ApiError::BadRequest(format!(
                "reason must be a non-blank string of at most {MAX_DECISION_REASON_BYTES} bytes"
            )))
        }
    };
    if verdict == Verdict::Deny && reason.is_none() {
        return Err(ApiError::BadRequest(
            "a denial needs a reason: {\"reason\": \"...\"}".into(),
        ));
    }
    let fingerprint = match fields.remove("fingerprint") {
        None | Some(Value::Null) => None,
        Some(Value::String(fp))
            if fp.len() == 64
                && fp
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) =>
        {
            Some(fp)
        }
        Some(_) => {
            return Err(ApiError::BadRequest(
                "fingerprint must be the request's 64 lowercase hex digits".into(),
            ))
        }
    };
    Ok((reason, fingerprint))
}

/// An applied decision's answer: the call as it now is, and its request.
fn decided_json(call: &Call, approval: &Approval) -> Value {
    json!({"call": call.to_json(), "approval": approval.to_json()})
}

/// One row of the queue: the request, and what will run.
fn queued_json(call: &Call, approval: &Approval) -> Value {
    let mut row = approval.to_json();
    row["idem_key"] = call.idem_key.clone().into();
    row["args"] = serde_json::from_str::<Value>(&call.args_json).unwrap_or(Value::Null);
    row["status"] = call.status.as_str().into();
    row["created_at"] = call.created_at.into();
    row
}

/// `409 already_decided`: the first decision, whole.
fn already_decided(call: &Call, approval: &Approval) -> Response {
    let decision = approval
        .outcome
        .as_ref()
        .map_or("decided", |o| o.decision.as_str());
    let mut about = Map::new();
    about.insert("call_id".into(), json!(call.call_id));
    about.insert("decision".into(), json!(decision));
    let mut beside = Map::new();
    beside.insert("approval".into(), approval.to_json());
    beside.insert("call".into(), call.to_json());
    Response::from_error_about(
        ErrorCode::AlreadyDecided,
        format_args!(
            "call {}'s approval request was already decided ({decision}); nothing changed",
            call.call_id
        ),
        about,
        beside,
    )
}

/// `409 fingerprint_mismatch`: what was reviewed is not what is waiting.
fn mismatch(call: &Call, approval: &Approval) -> Response {
    let mut about = Map::new();
    about.insert("call_id".into(), json!(call.call_id));
    let mut beside = Map::new();
    beside.insert("approval".into(), approval.to_json());
    Response::from_error_about(
        ErrorCode::FingerprintMismatch,
        format_args!(
            "call {} waits under another fingerprint than the one given; \
             review its request again (GET {}/approval)",
            call.call_id,
            call.url()
        ),
        about,
        beside,
    )
}
