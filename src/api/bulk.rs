//! `POST /v1/bulk-actions` and `GET /v1/bulk-actions/{job_id}`: cancel or
//! re-run every call a list filter matches, as a background job
//! (`store::bulk_job` has the rules, `runner::bulk` works it).
//!
//! The body: `{"action": "cancel"|"rerun", "filter": {…}, "reason": "…",
//! "max_calls": N}`. The filter takes the list's parameters by the same
//! names and rules (`status` a string or an array of them; `tenant` for an
//! admin), so "every call this filter matches" is exactly what
//! `GET /v1/tool-calls` shows for it — bounded above by the moment the job
//! is accepted: calls created later are not in it. `max_calls` (at most and
//! by default `MAX_BULK_CALLS`) bounds the job.
//!
//! Safe to retry: the `Idempotency-Key` header is required, and the same
//! key with the same body answers the same job (`200`,
//! `Idempotent-Replayed: true`); with another body `409
//! idempotency_conflict`. A new job answers `202` with `Location`. Who may
//! run a job over whose calls is `operate`'s to say.

use super::error::ApiError;
use super::list::{list_query, FILTERS};
use super::operate::{may_operate, operating_scope, Operation};
use super::query::QueryParams;
use super::service::{Api, POLL_AFTER_SECS};
use super::validate::{idempotency_key, object_with};
use crate::auth::Tenant;
use crate::fingerprint::{canonical, hex_sha256};
use crate::http::{ErrorCode, Request, Response};
use crate::input::quote;
use crate::log::Exchange;
use crate::store::{
    next_millisecond, now, BulkAction, BulkJob, JobCreated, NewBulkJob, MAX_BULK_CALLS,
    MAX_RERUN_REASON_BYTES,
};
use serde_json::{json, Map, Value};

impl Api {
    /// `POST /v1/bulk-actions`.
    pub(super) fn create_bulk_job(
        &self,
        req: &Request,
        tenant: &Tenant,
        exchange: &mut Exchange,
    ) -> Result<Response, ApiError> {
        let key = idempotency_key(req)?;
        exchange.idem_key = Some(key.to_string());
        let body = object_with(
            &req.body,
            &["action", "filter", "reason", "max_calls"],
            "a bulk action",
        )?;
        let new = self.new_job(tenant, key, &body)?;
        let created = self.calls.create_job(new)?;
        let response = match created {
            JobCreated::New(job) => {
                job_answer(202, &job).with_header("Retry-After", POLL_AFTER_SECS)
            }
            JobCreated::Existing(job) => {
                job_answer(200, &job).with_header("Idempotent-Replayed", "true")
            }
            JobCreated::Conflict(job) => {
                let mut about = Map::new();
                about.insert("job_id".into(), json!(job.job_id));
                Response::from_error_about(
                    ErrorCode::IdempotencyConflict,
                    format!(
                        "same key, different request: key {} belongs to bulk job {} with \
                         another action, filter or reason",
                        quote(key),
                        job.job_id
                    ),
                    about,
                    Map::new(),
                )
            }
        };
        Ok(response)
    }

    /// `GET /v1/bulk-actions/{job_id}`, in the caller's operating scope.
    pub(super) fn bulk_job(&self, tenant: &Tenant, job_id: &str) -> Result<Response, ApiError> {
        let job = self
            .calls
            .job(operating_scope(tenant), job_id)?
            .ok_or_else(|| ApiError::NotFound(format!("bulk job {}", quote(job_id))))?;
        Ok(Response::json(200, &job.to_json()))
    }

    /// The job a body asks for, checked: its action, its filter (the list's,
    /// in a scope the caller may operate on), its reason and bound.
    fn new_job(
        &self,
        tenant: &Tenant,
        key: &str,
        object: &Map<String, Value>,
    ) -> Result<NewBulkJob, ApiError> {
        let action = match object.get("action").and_then(Value::as_str) {
            Some(word) => BulkAction::parse(word).ok_or_else(|| {
                bad(format!(
                    "action must be cancel or rerun, not {}",
                    quote(word)
                ))
            })?,
            None => return Err(bad("action must be cancel or rerun".into())),
        };
        let params =
            QueryParams::from_pairs(filter_pairs(object.get("filter"))?, FILTERS, &["status"])?;
        let scope = self.scope(&params, tenant)?;
        may_operate(tenant, Operation::OnCalls(scope.as_deref()))?;
        let mut filter = list_query(&params, scope)?;
        // Every call made before the job was accepted, its millisecond
        // included: the bound is read to the millisecond (`store::list`).
        let accepted = next_millisecond(now());
        filter.created_before = Some(filter.created_before.map_or(accepted, |t| t.min(accepted)));
        let reason = match object.get("reason") {
            None | Some(Value::Null) => None,
            Some(Value::String(r)) if r.len() <= MAX_RERUN_REASON_BYTES => Some(r.clone()),
            Some(_) => {
                return Err(bad(format!(
                    "reason must be a string of at most {MAX_RERUN_REASON_BYTES} bytes"
                )))
            }
        };
        let max_calls = match object.get("max_calls") {
            None | Some(Value::Null) => MAX_BULK_CALLS,
            Some(n) => n
                .as_u64()
                .filter(|n| (1..=MAX_BULK_CALLS as u64).contains(n))
                .map(|n| n as usize)
                .ok_or_else(|| {
                    bad(format!(
                        "max_calls must be an integer from 1 to {MAX_BULK_CALLS}"
                    ))
                })?,
        };
        Ok(NewBulkJob {
            tenant: tenant.name.to_string(),
            idem_key: key.to_string(),
            // The request as sent (not the bound the job adds): the same
            // request retried later is the same job.
            fingerprint: hex_sha256(canonical(&Value::Object(object.clone())).as_bytes()),
            action,
            filter,
            reason,
            max_calls,
        })
    }
}

/// A filter object as (name, value) pairs: each value a string, but
/// `status`, which may be an array of strings (one pair each).
fn filter_pairs(filter: Option<&Value>) -> Result<Vec<(String, String)>, ApiError> {
    let object = match filter {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(object)) => object,
        Some(_) => {
            return Err(bad(
                "filter must be an object of the list's parameters".into()
            ))
        }
    };
    let mut pairs = Vec::new();
    for (name, value) in object {
        match value {
            Value::String(s) => pairs.push((name.clone(), s.clone())),
            Value::Array(items) if name == "status" => {
                for item in items {
                    let s = item.as_str().ok_or_else(|| {
                        bad("status must be a string or an array of strings".into())
                    })?;
                    pairs.push((name.clone(), s.to_string()));
                }
            }
            _ => {
                return Err(bad(format!(
                    "filter {} must be a string (status: a string or an array of strings)",
                    quote(name)
                )))
            }
        }
    }
    Ok(pairs)
}

/// A job as the API answers it, with where to read it again.
fn job_answer(status: u16, job: &BulkJob) -> Response {
    Response::json(status, &job.to_json())
        .with_header("Location", &format!("/v1/bulk-actions/{}", job.job_id))
}

fn bad(message: String) -> ApiError {
    ApiError::BadRequest(message)
}
