//! `GET /v1/overview` (the console's overview page in one read, and who
//! the console speaks as: its tenant, name and role) and `GET /v1/nodes`
//! (the service instances, admins only).
//!
//! The overview's counts come from the count tables (`CallStore::counts`),
//! the same read `/stats` makes, so for the same scope they are the same
//! numbers; its rates, and the failures by error code, over the range it is
//! asked for (`?range=`, 15 minutes to 7 days), from the readings the
//! `rates` thread keeps in the database (`metrics::rates`,
//! `store::readings`): at most one per point of the chart. Neither reads
//! `calls` but for the seek to the oldest pending call.
//!
//! This file never shows a tenant another tenant's counts or rates, nor
//! the nodes (an admin's view of the deployment).

use super::error::ApiError;
use super::query::QueryParams;
use super::service::Api;
use crate::auth::Tenant;
use crate::http::{Request, Response};
use crate::input::quote;
use crate::metrics::rates::{points, range_secs, Rates, RANGES};
use crate::status::Status;
use crate::store::{now, Node, Reading, Scope};
use serde_json::{json, Map, Value};

impl Api {
    /// `GET /v1/nodes`, for an admin.
    pub(super) fn nodes(&self, req: &Request, tenant: &Tenant) -> Result<Response, ApiError> {
        QueryParams::parse(req.query.as_deref(), &[], &[])?;
        if !tenant.admin {
            return Err(ApiError::Forbidden("/v1/nodes"));
        }
        Ok(Response::json(200, &json!({"nodes": self.nodes_json()?})))
    }

    /// `GET /v1/overview`, in the caller's scope (`tenant=` as in the list).
    pub(super) fn overview(&self, req: &Request, tenant: &Tenant) -> Result<Response, ApiError> {
        let params = QueryParams::parse(req.query.as_deref(), &["tenant", "range"], &[])?;
        let scope = self.scope(&params, tenant)?;
        let range_name = params.one("range").unwrap_or("15m");
        let range = range_secs(range_name).ok_or_else(|| {
            let names: Vec<&str> = RANGES.iter().map(|(n, _)| *n).collect();
            ApiError::BadRequest(format!(
                "range must be one of {}, not {}",
                names.join(", "),
                quote(range_name)
            ))
        })?;
        let counts = self.store.counts(Scope::of(scope.as_deref()))?;
        let mut by_status: Map<String, Value> =
            Status::words().map(|s| (s.to_string(), json!(0))).collect();
        for (status, n) in counts.by_status() {
            by_status.insert(status, json!(n));
        }
        let tools: Vec<Value> = self
            .calls
            .tools()
            .specs()
            .map(|spec| {
                json!({
                    "name": spec.name,
                    "kind": spec.kind.as_str(),
                    "running": counts.of_tool(&spec.name, "running"),
                    "waiting": counts.of_tool(&spec.name, "pending"),
                    "max_concurrency": spec.max_concurrency,
                    "paused": self.calls.paused(&spec.name).is_some(),
                })
            })
            .collect();
        let now = now();
        let live = Reading::of(now, &counts);
        let readings = self.store.readings_at(&points(now, range))?;
        let rates = Rates::between(&readings, &live, range, scope.as_deref());
        let nodes = match tenant.admin {
            true => self.nodes_json()?,
            false => Vec::new(),
        };
        let oldest_age = counts
            .oldest_pending_created_at
            .map(|created| (now - created).max(0.0));
        let oldest_wait = counts
            .oldest_awaiting_since
            .map(|since| (now - since).max(0.0));
        let key_ttl_s = self.store.retention().key_ttl.map(|t| t.as_secs_f64());
        let overview = json!({
            "version": env!("CARGO_PKG_VERSION"),
            "backend": self.store.backend_name(),
            "scope": scope.as_deref().unwrap_or("*"),
            "by_status": by_status,
            "calls": counts.calls(),
            "effects": counts.effects,
            "backlog": {
                "pending": counts.by_status().iter().find(|(s, _)| s == "pending").map_or(0, |p| p.1),
                "oldest_pending_age_s": oldest_age,
            },
            "approvals": {
                "awaiting": counts.in_status("awaiting_approval"),
                "oldest_wait_s": oldest_wait,
            },
            "you": {
                "tenant": &*tenant.name,
                "principal": &*tenant.principal,
                "role": tenant.role.as_str(),
            },
            "tools": tools,
            "rates": {
                "range": range_name,
                "range_s": rates.range_s,
                "step_s": rates.step_s,
                "until": rates.until,
                "since": rates.since,
                "created": rates.created,
                "failed": rates.failed,
            },
            "failures_by_code": rates.failed_by_code.iter()
                .map(|(code, n)| json!({"error_code": code, "calls": n}))
                .collect::<Vec<Value>>(),
            "nodes": nodes,
            "retention": {"key_ttl_s": key_ttl_s},
        });
        Ok(Response::json(200, &overview))
    }

    fn nodes_json(&self) -> Result<Vec<Value>, ApiError> {
        Ok(self.store.nodes()?.iter().map(Node::to_json).collect())
    }
}
