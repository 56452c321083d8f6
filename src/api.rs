//! The HTTP API: routes, request validation, and the one mapping from every
//! failure to a status and a stable error code.
//!
//! `Api::handle` takes a parsed request and returns a response; it knows nothing
//! of sockets, so it can be tested without one. It validates everything before
//! anything is accepted: a request that gets `202` has been checked, and its call
//! is on disk. It never executes a tool itself — it hands new calls to the runner.
//!
//! Every request but `/healthz` is authenticated first; the tenant it belongs
//! to scopes every key and call it names, and another tenant's call is
//! `404`, never `403`, so its existence does not leak. It must never put a
//! token, a header value or a call's args in a log line or an error body.
//!
//! Map: this file holds the call routes and their validation; `error` holds
//! `ApiError` and the one mapping from it to a response; `key_cache` the
//! settled answers kept for retries; `exchange` wraps every request (request id, tenant,
//! access log, metrics, the server's own answers); `operations` answers
//! `/healthz`, `/stats`, `/metrics`, `/openapi.yaml` and the audit timeline;
//! `submit` is the one way a call is submitted, by this API and by `mcp`.

mod error;
mod exchange;
mod key_cache;
mod operations;
mod submit;
mod validate;

pub use error::ApiError;
pub use exchange::Exchange;
pub use key_cache::{KeyCache, DEFAULT_BUDGET_BYTES as DEFAULT_ANSWER_CACHE_BYTES};
pub use operations::HealthCache;
pub use validate::percent_decode;

use crate::auth::{Auth, Tenant};
use crate::http::{ClientProbe, Request, Response};
use crate::input::quote;
use crate::metrics::{Metrics, Transport};
use crate::request_id::RequestIds;
use crate::runner::{Notifier, Runner};
use crate::store::{Call, CallStore, Created, NewCall};
use crate::tools::ToolRegistry;
use std::sync::Arc;
use std::time::{Duration, Instant};
pub(crate) use submit::{Submission, Submitted};
use validate::{
    idempotency_key, optional_integer, optional_string, parse_body, tool_and_args, wait_param,
};

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

/// How long a `503 overloaded` is held before it is sent (see
/// `Api::refuse_if_overloaded`).
const OVERLOADED_HOLD: Duration = Duration::from_millis(20);

/// The longest `?wait=` a request may ask for.
const MAX_WAIT_SECS: f64 = 30.0;
/// Longest `Idempotency-Key`, in bytes.
const MAX_KEY_LEN: usize = 255;
/// Deepest JSON nesting accepted in a body.
const MAX_JSON_DEPTH: usize = 32;
/// Largest canonical `args`, in bytes.
const MAX_ARGS_BYTES: usize = 64 * 1024;

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
}

/// The `KeyCache` key of an idempotency key: its tenant, a space (never in
/// a tenant name or a key), and the key.
pub fn scoped_key(tenant: &str, idem_key: &str) -> String {
    format!("{tenant} {idem_key}")
}

impl Api {
    /// The routes. `/healthz` needs no token; every other path is answered
    /// for the authenticated tenant (`401` first, before any path is told
    /// apart, so an unauthenticated client learns nothing of the routes).
    fn route(&self, req: &Request, exchange: &mut Exchange) -> Result<Response, ApiError> {
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
            );
            return Ok(exchange.returned_call(response, &call_id, true));
        }
        let response = self.respond_with_call(call, wait, &req.client)?;
        Ok(exchange.returned_call(response, &call_id, replayed))
    }

    /// For a key known to have a row, the fast path first: a committed row with
    /// this key and fingerprint that needs no reset is the answer, without
    /// joining the write queue. Anything else — an unknown key, a conflict, a
    /// retryable failure — is decided inside the writer's transaction.
    fn create_or_get(&self, cache_key: &str, new: NewCall) -> Result<Created, ApiError> {
        if self.keys.has_row(cache_key) {
            if let Some(existing) = self.store.find_by_key(&new.tenant, &new.idem_key)? {
                if existing.fingerprint == new.fingerprint && !existing.is_retryable_failure() {
                    return Ok(Created::Existing(existing));
                }
            }
        }
        self.refuse_if_overloaded()?;
        let created = self.store.create_or_get(new)?;
        self.keys.insert_has_row(cache_key);
        Ok(created)
    }

    /// Pushback: past `--max-pending` calls queued for a worker, a request that
    /// may create a call is refused before it joins the write queue, so the
    /// backlog stays bounded however many clients send, and the workers'
    /// completions keep the writer's time. A known key was answered before
    /// this (its retry adds nothing to the backlog).
    pub(super) fn refuse_if_overloaded(&self) -> Result<(), ApiError> {
        let pending = self.metrics.queued_calls.get().max(0.0) as usize;
        if pending >= self.max_pending {
            self.metrics.overloaded.inc();
            // A client that ignores `Retry-After` asks again at once; holding
            // the refusal a moment keeps such clients from spending the CPU
            // the workers need to drain the backlog (it costs this connection's
            // thread a sleep, no CPU).
            std::thread::sleep(OVERLOADED_HOLD);
            return Err(ApiError::Overloaded {
                pending,
                max: self.max_pending,
            });
        }
        Ok(())
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

/// A call's state change made by a request, at `debug` (one per transition
/// would dominate the log at `info` under load).
fn log_transition(
    msg: &'static str,
    event: &'static str,
    call: &Call,
    from: &'static str,
    to: &'static str,
) {
    crate::log::debug(msg)
        .event(event)
        .call_id(&call.call_id)
        .tenant(&call.tenant)
        .attempt(call.attempt)
        .transition(from, to)
        .emit();
}
