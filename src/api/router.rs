//! `Api`: the REST routes over one `Calls` service — which handler answers
//! each method and path, `POST /v1/tool-calls`, and the answer with a call
//! (`200` once it is terminal, `202` while it is not, and the `?wait=` that
//! holds the request until it is). `POST /mcp` is answered by the endpoint
//! it was built with, after the same authentication.
//!
//! It must never answer with a call before that call is committed, and never
//! tell an unauthenticated client anything about the routes: `401` comes
//! before any path is told apart. Each route that acts checks the token's
//! role first (`role_required`): making a call (`POST /v1/tool-calls`,
//! `POST /mcp`), cancelling, approving and denying.

use super::answer::render;
use super::error::ApiError;
use super::exchange::returned_call;
use super::operations;
use super::service::Api;
use super::validate::{
    idempotency_key, optional_integer, optional_string, parse_body, percent_decode, tool_and_args,
    wait_param,
};
use crate::auth::{Action, Tenant};
use crate::calls::{CallError, CallRequest, Submitted};
use crate::console;
use crate::http::{ClientProbe, Request, Response};
use crate::input::quote;
use crate::log::Exchange;
use crate::metrics::Transport;
use crate::store::{Call, Verdict};
use std::sync::Arc;
use std::time::Duration;

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
    ("GET", "/v1/tool-calls"),
    ("GET", "/v1/nodes"),
    ("GET", "/v1/overview"),
    ("POST", "/v1/tool-calls/{call_id}/cancel"),
    ("POST", "/v1/tool-calls/{call_id}/approve"),
    ("POST", "/v1/tool-calls/{call_id}/deny"),
    ("GET", "/v1/tool-calls/{call_id}/approval"),
    ("GET", "/v1/approvals"),
    ("POST", "/v1/tool-calls/{call_id}/rerun"),
    ("POST", "/v1/bulk-actions"),
    ("GET", "/v1/bulk-actions/{job_id}"),
    ("POST", "/v1/tools/{name}/pause"),
    ("POST", "/v1/tools/{name}/resume"),
    ("GET", "/v1/verify"),
    ("GET", "/ui"),
    ("GET", "/ui/{asset}"),
];

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
        if !self.auth.is_required() {
            let host = req.header("host");
            self.trusted_names
                .check_tokenless_host(host)
                .map_err(ApiError::HostRefused)?;
        }
        // The console's files carry no data; its pages ask for a token.
        if console::owns(path) {
            return Ok(console::answer(method, path));
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
                allow("GET, POST")?;
                match method {
                    "GET" => self.list_calls(req, &tenant),
                    _ => self.post_call(req, &tenant, exchange),
                }
            }
            "/v1/nodes" => {
                allow("GET")?;
                self.nodes(req, &tenant)
            }
            "/v1/overview" => {
                allow("GET")?;
                self.overview(req, &tenant)
            }
            "/v1/tools" => {
                allow("GET")?;
                Ok(Response::json(200, &self.tools_view()))
            }
            "/v1/bulk-actions" => {
                allow("POST")?;
                self.create_bulk_job(req, &tenant, exchange)
            }
            "/mcp" => {
                allow("POST")?;
                ApiError::unless_may(&tenant, Action::Call)?;
                Ok((self.mcp)(req, &tenant, exchange))
            }
            "/v1/approvals" => {
                allow("GET")?;
                self.approval_queue(req, &tenant)
            }
            "/v1/verify" => {
                allow("GET")?;
                if !tenant.admin {
                    return Err(ApiError::Forbidden("/v1/verify"));
                }
                self.promise_check.answer(req)
            }
            _ => {
                if let Some(key) = path.strip_prefix("/v1/tool-calls/by-key/") {
                    allow("GET")?;
                    let key = percent_decode(key).ok_or_else(|| {
                        ApiError::BadRequest(
                            "the key in the path is not valid percent-encoded UTF-8".into(),
                        )
                    })?;
                    let call = self.calls.get_by_key(&tenant.name, &key)?;
                    let call = call.ok_or_else(|| {
                        ApiError::NotFound(format!("call with key {}", quote(&key)))
                    })?;
                    exchange.call_id = Some(call.call_id.clone());
                    self.respond_with_call(call, wait_param(req)?, &req.client)
                } else if let Some(job_id) = path.strip_prefix("/v1/bulk-actions/") {
                    allow("GET")?;
                    self.bulk_job(&tenant, job_id)
                } else if let Some(rest) = path.strip_prefix("/v1/tools/") {
                    let (name, action) = rest.rsplit_once('/').unwrap_or((rest, ""));
                    match action {
                        "pause" | "resume" => {
                            allow("POST")?;
                            self.pause_or_resume(req, &tenant, name, action == "pause")
                        }
                        _ => Err(ApiError::NotFound(format!("path {}", quote(path)))),
                    }
                } else if let Some(rest) = path.strip_prefix("/v1/tool-calls/") {
                    if let Some(call_id) = rest.strip_suffix("/cancel") {
                        allow("POST")?;
                        ApiError::unless_may(&tenant, Action::Cancel)?;
                        return self.cancel(req, &tenant, call_id, exchange);
                    }
                    for (suffix, verdict) in
                        [("/approve", Verdict::Approve), ("/deny", Verdict::Deny)]
                    {
                        if let Some(call_id) = rest.strip_suffix(suffix) {
                            allow("POST")?;
                            return self.decide(req, &tenant, call_id, verdict, exchange);
                        }
                    }
                    if let Some(call_id) = rest.strip_suffix("/rerun") {
                        allow("POST")?;
                        return self.rerun(req, &tenant, call_id, exchange);
                    }
                    allow("GET")?;
                    if let Some(call_id) = rest.strip_suffix("/audit") {
                        return self.audit(&tenant, call_id, exchange);
                    }
                    if let Some(call_id) = rest.strip_suffix("/approval") {
                        return self.approval(&tenant, call_id, exchange);
                    }
                    let call = self.calls.get(&tenant.name, rest)?;
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
    /// within the tenant (`Calls::submit`). Every answer that returns a call
    /// carries its `Location`; one that returns a call that already existed
    /// (not one it reset to run again) carries `Idempotent-Replayed: true`,
    /// and one that is another key's call holding the same business key also
    /// says `"duplicate_intent": true`. A final replay's answer (a
    /// success's) is kept for the key's next retry.
    fn post_call(
        &self,
        req: &Request,
        tenant: &Tenant,
        exchange: &mut Exchange,
    ) -> Result<Response, ApiError> {
        ApiError::unless_may(tenant, Action::Call)?;
        let key = idempotency_key(req)?;
        exchange.idem_key = Some(key.to_string());
        let wait = wait_param(req)?;
        if let Some((call_id, answer)) = self.calls.replay_same_bytes(tenant, key, &req.body) {
            let response = Response::json_bytes(200, answer);
            return Ok(returned_call(exchange, response, &call_id, true));
        }
        let body = parse_body(&req.body)?;
        let (tool, args) = tool_and_args(&body)?;
        let request = CallRequest {
            tenant,
            key,
            tool,
            args,
            client_id: optional_string(&body, "client_id")?,
            seq: optional_integer(&body, "seq")?,
            transport: Transport::Http,
        };
        let (call, replayed, duplicate_intent) = match self.calls.submit(request) {
            Ok(Submitted::Cached { call_id, body }) => {
                let response = Response::json_bytes(200, body);
                return Ok(returned_call(exchange, response, &call_id, true));
            }
            Ok(Submitted::Call {
                call,
                replayed,
                duplicate_intent,
            }) => (*call, replayed, duplicate_intent),
            Err(e) => return Err(refused(e, exchange)),
        };
        let call_id = call.call_id.clone();
        if replayed && call.is_final() && !duplicate_intent {
            let response = render(&call, false);
            self.calls
                .keep_answer(tenant, key, call, &response.body, &req.body);
            return Ok(returned_call(exchange, response, &call_id, true));
        }
        let call = self.waited(call, wait, &req.client)?;
        let response = self.answer_with_call(&call, duplicate_intent);
        Ok(returned_call(exchange, response, &call_id, replayed))
    }

    /// The call as REST answers it, after the wait the request asked for.
    fn respond_with_call(
        &self,
        call: Call,
        wait: Option<Duration>,
        client: &ClientProbe,
    ) -> Result<Response, ApiError> {
        let call = self.waited(call, wait, client)?;
        Ok(self.answer_with_call(&call, false))
    }

    /// With a wait, the call once it is terminal, the wait is over, or the
    /// client has gone (`Calls::wait`); without one, the call as it is.
    fn waited(
        &self,
        call: Call,
        wait: Option<Duration>,
        client: &ClientProbe,
    ) -> Result<Call, ApiError> {
        match wait {
            Some(wait) if !call.status.is_terminal() => {
                Ok(self.calls.wait(call, wait, || client.gone())?)
            }
            _ => Ok(call),
        }
    }
}

/// What the call path refused, as REST says it; a conflict's access line
/// names the call that holds the key.
fn refused(e: CallError, exchange: &mut Exchange) -> ApiError {
    if let CallError::Conflict { call_id, .. } = &e {
        exchange.call_id = Some(call_id.clone());
    }
    e.into()
}
