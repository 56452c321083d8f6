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
//! Map: this file holds the call routes, their validation, the error mapping
//! and the key cache; `exchange` wraps every request (request id, tenant,
//! access log, metrics, the server's own answers); `operations` answers
//! `/healthz`, `/stats`, `/metrics`, `/openapi.yaml` and the audit timeline.

mod exchange;
mod key_cache;
mod operations;
mod validate;

pub use exchange::Exchange;
pub use key_cache::{KeyCache, DEFAULT_BUDGET_BYTES as DEFAULT_ANSWER_CACHE_BYTES};
pub use operations::HealthCache;
pub use validate::percent_decode;

use crate::auth::{Auth, AuthError, Tenant};
use crate::chaos;
use crate::fingerprint::{canonical_object, fingerprint_canonical};
use crate::http::{ClientProbe, ErrorCode, Request, Response};
use crate::input::{clip, quote};
use crate::metrics::Metrics;
use crate::request_id::RequestIds;
use crate::runner::{Notifier, Runner};
use crate::store::{Call, CallStore, Created, NewCall, StoreError};
use crate::tools::ToolRegistry;
use std::sync::Arc;
use std::time::{Duration, Instant};
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

/// Every way a request can fail, each with one status and one code.
#[derive(Debug)]
pub enum ApiError {
    /// No token, or a wrong one (only with `--auth-file`).
    Unauthorized(AuthError),
    /// An authenticated tenant that is not an admin, asking for what is.
    Forbidden(&'static str),
    MissingKey,
    BadRequest(String),
    ArgsTooLarge(usize),
    /// The key is taken by another request: the key and its call's id.
    Conflict {
        key: String,
        call_id: String,
    },
    NotFound(String),
    MethodNotAllowed(&'static str),
    /// A new call refused: this many calls wait for a worker, and the
    /// bound (`--max-pending`) allows no more.
    Overloaded {
        pending: usize,
        max: usize,
    },
    Store(StoreError),
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        ApiError::Store(e)
    }
}

impl ApiError {
    /// The one place errors become responses. Internal causes go to the log,
    /// never to the client.
    fn into_response(self) -> Response {
        match self {
            ApiError::Unauthorized(e) => Response::from_error(ErrorCode::Unauthorized, e)
                .with_header("WWW-Authenticate", e.challenge()),
            ApiError::Forbidden(what) => Response::from_error(
                ErrorCode::Forbidden,
                format_args!("{what} needs an admin tenant"),
            ),
            ApiError::MissingKey => Response::from_error(
                ErrorCode::MissingIdempotencyKey,
                "the Idempotency-Key header is required",
            ),
            ApiError::BadRequest(message) => Response::from_error(ErrorCode::BadRequest, message),
            ApiError::ArgsTooLarge(size) => Response::from_error(
                ErrorCode::PayloadTooLarge,
                format!("args is {size} bytes; the limit is {MAX_ARGS_BYTES}"),
            ),
            ApiError::Conflict { key, call_id } => Response::from_error_naming(
                ErrorCode::IdempotencyConflict,
                format!(
                    "same key, different fingerprint: key {:?} belongs to call {} with other tool or args",
                    key, call_id
                ),
                Some(&call_id),
            ),
            ApiError::NotFound(what) => {
                Response::from_error(ErrorCode::NotFound, format!("{what} not found"))
            }
            ApiError::MethodNotAllowed(allow) => Response::method_not_allowed(allow),
            ApiError::Overloaded { pending, max } => Response::from_error(
                ErrorCode::Overloaded,
                format_args!(
                    "{pending} calls are pending (--max-pending {max}); \
                     retry with the same key after Retry-After"
                ),
            ),
            ApiError::Store(e @ StoreError::Unavailable(_)) => {
                crate::log::warn("database unavailable; answered 503")
                    .event("unavailable")
                    .cause(&e)
                    .emit();
                Response::from_error(
                    ErrorCode::Unavailable,
                    "the database is busy or unavailable; retry with the same key",
                )
            }
            ApiError::Store(e @ StoreError::Internal(_)) => {
                crate::log::error("internal error; answered 500")
                    .event("internal_error")
                    .cause(&e)
                    .emit();
                Response::from_error(ErrorCode::InternalError, "internal error")
            }
        }
    }
}

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
    /// within the tenant. Every answer that returns a call carries its
    /// `Location`; one that returns a call that already existed (not one it
    /// reset to run again) carries `Idempotent-Replayed: true`.
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
        let (tool_args, hooks) = chaos::split(args).map_err(ApiError::BadRequest)?;
        if let Some(hook) = chaos::names_a_hook(args) {
            if !self.chaos {
                return Err(ApiError::BadRequest(format!(
                    "args.{hook} is a chaos hook; the server must run with --chaos"
                )));
            }
        }
        let prepared = self
            .tools
            .prepare(tool, &tool_args)
            .map_err(ApiError::BadRequest)?;
        let quick = prepared.quick && hooks == chaos::Hooks::default();
        let canonical_args = canonical_object(&tool_args);
        let fingerprint = fingerprint_canonical(tool, &canonical_args);
        // What the worker runs: the tool's args plus any hooks, canonical too.
        let args_json = if hooks == chaos::Hooks::default() {
            canonical_args
        } else {
            canonical_object(args)
        };
        if args_json.len() > MAX_ARGS_BYTES {
            return Err(ApiError::ArgsTooLarge(args_json.len()));
        }
        let new = NewCall {
            tenant: tenant.name.to_string(),
            idem_key: key.to_string(),
            fingerprint,
            tool: tool.to_string(),
            args_json,
            client_id: optional_string(&body, "client_id")?,
            seq: optional_integer(&body, "seq")?,
        };
        let cache_key = scoped_key(&tenant.name, key);
        if let Some((call_id, body)) = self.keys.settled(&cache_key, &new.fingerprint) {
            self.metrics.replays.inc();
            let response = Response::json_bytes(200, body);
            return Ok(exchange.returned_call(response, &call_id, true));
        }
        let fingerprint = new.fingerprint.clone();
        let (call, replayed) = match self.create_or_get(&cache_key, new)? {
            Created::Existing(call) if call.is_settled() => {
                self.metrics.replays.inc();
                let response = self.respond_with_call(call.clone(), None, &req.client)?;
                self.keys.insert_settled(
                    &cache_key,
                    fingerprint,
                    (&call.call_id, call.expires_at),
                    &response.body,
                );
                return Ok(exchange.returned_call(response, &call.call_id, true));
            }
            Created::New(call) => {
                self.metrics.calls_created.inc();
                log_transition("call created", "created", &call, "none", "pending");
                self.runner.submit(&call.call_id, &call.tool, quick);
                if let Some(delay) = hooks.delay_response {
                    std::thread::sleep(delay);
                }
                (call, false)
            }
            Created::RetryReset(call) => {
                self.metrics.retry_resets.inc();
                log_transition(
                    "call reset to run again",
                    "retry_reset",
                    &call,
                    "failed",
                    "pending",
                );
                // Rare; its stored args are not parsed here, so assume slow.
                self.runner.submit(&call.call_id, &call.tool, false);
                (call, false)
            }
            Created::Existing(call) => {
                self.metrics.replays.inc();
                (call, true)
            }
            Created::Conflict(call) => {
                self.metrics.conflicts.inc();
                exchange.call_id = Some(call.call_id.clone());
                // The key is the client's own input: the message repeats at most
                // `input::MAX_QUOTED_BYTES` of it.
                return Err(ApiError::Conflict {
                    key: clip(&call.idem_key).to_string(),
                    call_id: call.call_id,
                });
            }
        };
        let call_id = call.call_id.clone();
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
    fn refuse_if_overloaded(&self) -> Result<(), ApiError> {
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
    fn wait_terminal(
        &self,
        call: Call,
        wait: Duration,
        client: &ClientProbe,
    ) -> Result<Call, ApiError> {
        let deadline = Instant::now() + wait;
        let mut latest = call;
        let mut failure = None;
        self.notifier.wait_for(deadline, || {
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
