//! The operations endpoints: `/healthz` (the truth, cheaply), `/stats` (the
//! caller's counts, or every tenant's for an admin), `/metrics` (Prometheus,
//! admins only), `/openapi.yaml` (this API's description, as built into the
//! binary) and a call's audit timeline.
//!
//! This file must never show one tenant another tenant's calls: the audit
//! timeline is read through the tenant's own lookup, and only an admin gets
//! counts across tenants or the process metrics.

use super::error::ApiError;
use super::service::Api;
use crate::auth::Tenant;
use crate::http::{ErrorCode, Request, Response};
use crate::input::quote;
use crate::log::Exchange;
use crate::store::Scope;
use serde_json::{json, Map};

/// The document served at `/openapi.yaml`: the repository's own file, built
/// in, so the binary and its description cannot drift apart unnoticed (a
/// test checks the file against the live router).
const OPENAPI: &str = include_str!("../../openapi.yaml");

/// `GET /openapi.yaml`.
pub(super) fn openapi() -> Response {
    Response {
        status: 200,
        headers: vec![("Content-Type".into(), "application/yaml".into())],
        body: OPENAPI.as_bytes().to_vec(),
        stream: None,
    }
}

impl Api {
    /// `200 {"ok":true}` only when a fresh connection reads the database and
    /// the writer is not stuck with work queued; otherwise `503` naming what
    /// is wrong, with `Retry-After` like every `unavailable`.
    pub(super) fn healthz(&self) -> Response {
        if self.health.fresh_and_healthy() {
            return Response::json_bytes(200, br#"{"ok":true}"#.to_vec());
        }
        let health = self.health.get(|| self.store.health());
        // The store reports each check as a `Result<(), String>` (its detail
        // goes only into this body and the log): src/store's type, not ours.
        let check = |result: &Result<(), String>| match result {
            Ok(()) => json!({"ok": true}),
            Err(detail) => json!({"ok": false, "detail": detail}),
        };
        let problems: Vec<String> = [("database", &health.database), ("writer", &health.writer)]
            .into_iter()
            .filter_map(|(what, result)| result.as_ref().err().map(|e| format!("{what}: {e}")))
            .collect();
        if problems.is_empty() {
            return Response::json(200, &json!({"ok": true}));
        }
        crate::log::warn("health check failed")
            .event("unhealthy")
            .flag("database_ok", health.database.is_ok())
            .flag("writer_ok", health.writer.is_ok())
            .emit();
        let mut beside = Map::new();
        beside.insert("ok".into(), false.into());
        beside.insert(
            "checks".into(),
            json!({"database": check(&health.database), "writer": check(&health.writer)}),
        );
        Response::from_error_beside(ErrorCode::Unavailable, problems.join("; "), beside)
    }

    /// `GET /stats`: the caller's calls; `?scope=all` every tenant's, for an
    /// admin. Without `--auth-file` the one (admin) tenant gets every call
    /// either way, through the cheaper all-calls count.
    pub(super) fn stats(&self, req: &Request, tenant: &Tenant) -> Result<Response, ApiError> {
        let all = match query_value(req, "scope") {
            None | Some("tenant") => !self.auth.is_required(),
            Some("all") if tenant.admin => true,
            Some("all") => return Err(ApiError::Forbidden("/stats?scope=all")),
            Some(other) => {
                return Err(ApiError::BadRequest(format!(
                    "scope must be tenant or all, not {}",
                    quote(other)
                )))
            }
        };
        let scope = if all {
            Scope::All
        } else {
            Scope::Tenant(&tenant.name)
        };
        Ok(Response::json(200, &self.store.stats(scope)?.to_json()))
    }

    /// `GET /metrics`, for an admin.
    pub(super) fn metrics_text(&self, tenant: &Tenant) -> Result<Response, ApiError> {
        if !tenant.admin {
            return Err(ApiError::Forbidden("/metrics"));
        }
        Ok(Response {
            status: 200,
            headers: vec![(
                "Content-Type".into(),
                self.metrics.content_type().to_string(),
            )],
            body: self.metrics.render().into_bytes(),
            stream: None,
        })
    }

    /// `GET /v1/tool-calls/{call_id}/audit`: the tenant's call's audit rows,
    /// oldest first, and its effect row (`effect`: what the downstream said,
    /// `null` until it succeeds with one).
    pub(super) fn audit(
        &self,
        tenant: &Tenant,
        call_id: &str,
        exchange: &mut Exchange,
    ) -> Result<Response, ApiError> {
        let events = self
            .calls
            .audit(&tenant.name, call_id)?
            .ok_or_else(|| ApiError::NotFound(format!("call {}", quote(call_id))))?;
        exchange.call_id = Some(call_id.to_string());
        let events: Vec<_> = events.iter().map(|e| e.to_json()).collect();
        let effect = self.calls.effect(&tenant.name, call_id)?;
        Ok(Response::json(
            200,
            &json!({"call_id": call_id, "events": events, "effect": effect.map(|e| e.to_json())}),
        ))
    }
}

/// The value of `name` in the query string, undecoded; the first wins.
fn query_value<'a>(req: &'a Request, name: &str) -> Option<&'a str> {
    req.query.as_deref()?.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        (key == name).then_some(value)
    })
}
