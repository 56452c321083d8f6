//! `Api`: the routes over one store and one runner — which handler answers
//! each method and path, `POST /v1/tool-calls`, and the answer with a call
//! (`200` once it is terminal, `202` while it is not, and the `?wait=` that
//! holds the request until it is).
//!
//! It must never answer with a call before that call is committed, and never
//! tell an unauthenticated client anything about the routes: `401` comes
//! before any path is told apart.

use super::error::ApiError;
use super::exchange::Exchange;
use super::key_cache::{scoped_key, KeyCache};
use super::operations::{self, HealthCache};
use super::submit::{Submission, Submitted};
use super::validate::{
    idempotency_key, optional_integer, optional_string, parse_body, percent_decode, tool_and_args,
    wait_param,
};
use crate::auth::{Auth, Tenant};
use crate::http::{ClientProbe, Request, Response};
use crate::input::quote;
use crate::metrics::{Metrics, Transport};
use crate::request_id::RequestIds;
use crate::runner::{Notifier, Runner};
use crate::store::{Call, CallStore};
use crate::tools::ToolRegistry;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Every route the router answers, as (method, path template): what
/// `openapi.yaml` must describe. A test holds the live router to this list
/// (each answers, a wrong method gets `405` with exactly these methods in
/// `Allow`) and the document to the router.
pub const ROUTES: &[(&str, &str)] = &[
    ("POST", "/v1/tool-calls"),
    ("GET", "/v1/tool-calls/{call_id}"),
    ("GET", "/v1/tool-calls/by-key/{key}"),
    ("GET", "/v1/tool-calls/{call_id}/audit"),
    ("GET", "/stats"),
    ("GET", "/healthz"),
    ("GET", "/metrics"),
    ("GET", "/openapi.yaml"),
    ("GET", "/v1/tools"),
    ("POST", "/mcp"),
];

/// The poll interval a `202` suggests in `Retry-After`, in whole seconds.
pub const POLL_AFTER_SECS: &str = "1";

/// The routes, over one store and one runner.
pub struct Api {
    pub store: Arc<CallStore>,
    pub runner: Arc<Runner>,
    pub notifier: Arc<Notifier>,
    /// The tools calls may name, with their argument rules.
    pub tools: Arc<ToolRegistry>,
    /// Whether chaos hooks are accepted in `args`.
    pub chaos: bool,
    /// What this process knows about idempotency keys, within a byte budget
    /// (shared with the purge, which makes it forget purged keys).
    pub keys: Arc<KeyCache>,
    /// Who each request is: the tenants of `--auth-file`, or anonymous.
    pub auth: Auth,
    pub metrics: Arc<Metrics>,
    pub request_ids: RequestIds,
    pub health: HealthCache,
    /// How long an MCP `tools/call` waits for its call to settle
    /// (`--mcp-wait-secs`) before answering `running` with the call's id.
    pub mcp_wait: Duration,
    /// Calls queued for a worker past which a new call is refused
    /// `503 overloaded` (`--max-pending`).
    pub max_pending: usize,
    /// Whose `X-Forwarded-For` names the client in the access log.
    pub trusted_proxies: crate::http::TrustedProxies,
}

impl Api {
    /// The routes. `/healthz` needs no token; every other path is answered
    /// for the authenticated tenant (`401` first, before any path is told
    /// apart, so an unauthenticated client learns nothing of the routes).
    pub(super) fn route(
        &self,
        req: &Request,
        exchange: &mut Exchange,
    ) -> Result<Response, ApiError> {
        let method = req.method.as_str();
        let path = req.path.as_str();
        let allow = |allowed: &'static str| {
            if allowed.split(", ").any(|m| m == method) {
                Ok(())
            } else {
                Err(ApiError::MethodNotAllowed(allowed))
            }
        };
        if path == "/healthz" {
            allow("GET")?;
            return Ok(self.healthz());
        }
        let tenant = self
            .auth
            .authenticate(req.header("authorization"))
            .map_err(ApiError::Unauthorized)?;
        exchange.tenant = Some(Arc::clone(&tenant.name));
        match path {
            "/stats" => {
                allow("GET")?;
                self.stats(req, &tenant)
            }
            "/metrics" => {
                allow("GET")?;
                self.metrics_text(&tenant)
            }
            "/openapi.yaml" => {
                allow("GET")?;
                Ok(operations::openapi())
            }
            "/v1/tool-calls" => {
                allow("POST")?;
                self.post_call(req, &tenant, exchange)
            }
            "/v1/tools" => {
                allow("GET")?;
                Ok(Response::json(200, &self.tools.public_view()))
            }
            "/mcp" => {
                allow("POST")?;
                Ok(crate::mcp::handle(self, req, &tenant, exchange))
            }
            _ => {
                if let Some(key) = path.strip_prefix("/v1/tool-calls/by-key/") {
                    allow("GET")?;
                    let key = percent_decode(key).ok_or_else(|| {
                        ApiError::BadRequest(
                            "the key in the path is not valid percent-encoded UTF-8".into(),
                        )
                    })?;
                    let call = self.store.find_by_key(&tenant.name, &key)?;
                    let call = call.ok_or_else(|| {
                        ApiError::NotFound(format!("call with key {}", quote(&key)))
                    })?;
                    exchange.call_id = Some(call.call_id.clone());
                    self.respond_with_call(call, wait_param(req)?, &req.client)
                } else if let Some(rest) = path.strip_prefix("/v1/tool-calls/") {
                    allow("GET")?;
                    if let Some(call_id) = rest.strip_suffix("/audit") {
                        return self.audit(&tenant, call_id, exchange);
                    }
                    let call = self.store.get_for(&tenant.name, rest)?;
                    let call =
                        call.ok_or_else(|| ApiError::NotFound(format!("call {}", quote(rest))))?;
                    exchange.call_id = Some(call.call_id.clone());
                    self.respond_with_call(call, wait_param(req)?, &req.client)
                } else {
                    Err(ApiError::NotFound(format!("path {}", quote(path))))
                }
            }
        }
    }

    /// `POST /v1/tool-calls`: validate, then create-or-get under the key,
    /// within the tenant (`submit`). Every answer that returns a call carries
    /// its `Location`; one that returns a call that already existed (not one
    /// it reset to run again) carries `Idempotent-Replayed: true`, and one
    /// that is another key's call holding the same business key also says
    /// `"duplicate_intent": true`.
    fn post_call(
        &self,
        req: &Request,
        tenant: &Tenant,
        exchange: &mut Exchange,
    ) -> Result<Response, ApiError> {
        let key = idempotency_key(req)?;
        exchange.idem_key = Some(key.to_string());
        let wait = wait_param(req)?;
        if let Some((call_id, answer)) = self.replay_same_bytes(tenant, key, &req.body) {
            let response = Response::json_bytes(200, answer);
            return Ok(exchange.returned_call(response, &call_id, true));
        }
        let body = parse_body(&req.body)?;
        let (tool, args) = tool_and_args(&body)?;
        let submission = Submission {
            tenant,
            key,
            tool,
            args,
            client_id: optional_string(&body, "client_id")?,
            seq: optional_integer(&body, "seq")?,
            transport: Transport::Http,
        };
        let (call, replayed, duplicate_intent) = match self.submit(submission, true) {
            Ok(Submitted::Cached { call_id, body }) => {
                let response = Response::json_bytes(200, body);
                return Ok(exchange.returned_call(response, &call_id, true));
            }
            Ok(Submitted::Call {
                call,
                replayed,
                duplicate_intent,
            }) => (*call, replayed, duplicate_intent),
            Err(ApiError::Conflict { key, call_id }) => {
                exchange.call_id = Some(call_id.clone());
                return Err(ApiError::Conflict { key, call_id });
            }
            Err(e) => return Err(e),
        };
        let call_id = call.call_id.clone();
        if duplicate_intent {
            let mut response = self.respond_with_call(call, wait, &req.client)?;
            let mut json: serde_json::Value =
                serde_json::from_slice(&response.body).unwrap_or_default();
            json["duplicate_intent"] = true.into();
            response.body = json.to_string().into_bytes();
            return Ok(exchange.returned_call(response, &call_id, true));
        }
        if replayed && call.is_settled() {
            let (fingerprint, expires_at) = (call.fingerprint.clone(), call.expires_at);
            let response = self.respond_with_call(call, None, &req.client)?;
            let cache_key = scoped_key(&tenant.name, key);
            self.keys.insert_settled(
                &cache_key,
                fingerprint,
                (&call_id, expires_at),
                &response.body,
                &req.body,
            );
            return Ok(exchange.returned_call(response, &call_id, true));
        }
        let response = self.respond_with_call(call, wait, &req.client)?;
        Ok(exchange.returned_call(response, &call_id, replayed))
    }

    /// `200` with a terminal call, `202` (with `Retry-After`, a poll
    /// interval) while it is pending or running; with a wait, first hold
    /// until it is terminal, the wait is over, or the client has gone.
    fn respond_with_call(
        &self,
        call: Call,
        wait: Option<Duration>,
        client: &ClientProbe,
    ) -> Result<Response, ApiError> {
        let call = match wait {
            Some(wait) if !call.status.is_terminal() => self.wait_terminal(call, wait, client)?,
            _ => call,
        };
        if call.status.is_terminal() {
            Ok(Response::json(200, &call.to_json()))
        } else {
            Ok(Response::json(202, &call.to_json()).with_header("Retry-After", POLL_AFTER_SECS))
        }
    }

    /// Re-read the call after every completion in this process and at least
    /// every 100 ms (another process may finish it) until it is terminal. A
    /// read borrows a pooled connection only while it runs, so a waiting
    /// request holds none. A client that has hung up ends the wait at once:
    /// its thread and connection slot are freed instead of idling up to 30 s.
    pub(crate) fn wait_terminal(
        &self,
        call: Call,
        wait: Duration,
        client: &ClientProbe,
    ) -> Result<Call, ApiError> {
        let deadline = Instant::now() + wait;
        let call_id = call.call_id.clone();
        let mut latest = call;
        let mut failure = None;
        self.notifier.wait_for(&call_id, deadline, || {
            if client.gone() {
                return Some(());
            }
            match self.store.get(&latest.call_id) {
                Ok(Some(now)) => {
                    let done = now.status.is_terminal();
                    latest = now;
                    done.then_some(())
                }
                Ok(None) => None,
                Err(e) => {
                    failure = Some(e);
                    Some(())
                }
            }
        });
        match failure {
            Some(e) => Err(e.into()),
            None => Ok(latest),
        }
    }
}
