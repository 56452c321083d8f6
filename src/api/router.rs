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

use super::error::ApiError;
use super::exchange::returned_call;
use super::operations::{self, HealthCache};
use super::promise_check::PromiseCheck;
use super::validate::{
    idempotency_key, optional_integer, optional_string, parse_body, percent_decode, tool_and_args,
    wait_param,
};
use crate::auth::{Action, Auth, Tenant};
use crate::calls::{CallError, CallRequest, Calls, Submitted};
use crate::console;
use crate::http::{ClientProbe, OriginPolicy, Request, Response, TrustedProxies};
use crate::input::quote;
use crate::log::Exchange;
use crate::metrics::{Metrics, Transport};
use crate::request_id::RequestIds;
use crate::store::{Call, CallStore, Verdict};
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

/// The poll interval a `202` suggests in `Retry-After`, in whole seconds.
pub const POLL_AFTER_SECS: &str = "1";

/// An endpoint mounted on a path the router authenticates but does not
/// answer itself (`POST /mcp`): the request, its tenant, and the exchange to
/// note its key and call in. The router knows it only by this shape, so the
/// protocol behind it and the REST routes need not know each other.
pub type Endpoint = Box<dyn Fn(&Request, &Tenant, &mut Exchange) -> Response + Send + Sync>;

/// The REST routes, over one `Calls` service.
pub struct Api {
    pub(super) calls: Arc<Calls>,
    /// For the operations endpoints only (`/healthz`, `/stats`); calls are
    /// read through `calls`.
    pub(super) store: Arc<CallStore>,
    /// `POST /mcp`.
    mcp: Endpoint,
    /// Who each request is: the tenants of `--auth-file`, or anonymous.
    pub(super) auth: Auth,
    pub(super) metrics: Arc<Metrics>,
    pub(super) request_ids: RequestIds,
    pub(super) health: HealthCache,
    /// `GET /v1/verify`: the one promise check that may run at a time.
    promise_check: PromiseCheck,
    /// Whose `X-Forwarded-For` names the client in the access log.
    pub(super) trusted_proxies: TrustedProxies,
    /// The `Host` names answered without `--auth-file` (DNS rebinding).
    trusted_names: OriginPolicy,
}

impl Api {
    /// The routes over `calls`, answering `POST /mcp` with `mcp`.
    pub fn new(
        calls: Arc<Calls>,
        store: Arc<CallStore>,
        auth: Auth,
        metrics: Arc<Metrics>,
        mcp: Endpoint,
        trusted_proxies: TrustedProxies,
        trusted_names: OriginPolicy,
    ) -> Api {
        let effect_tools = calls.tools().effect_tools();
        let promise_check = PromiseCheck::new(
            Arc::clone(&store),
            effect_tools.into_iter().map(String::from).collect(),
        );
        Api {
            calls,
            store,
            promise_check,
            mcp,
            auth,
            metrics,
            request_ids: RequestIds::new(),
            health: HealthCache::default(),
            trusted_proxies,
            trusted_names,
        }
    }

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
        let mut json = with_progress(self.with_wait(call.to_json(), &call), &call);
        if duplicate_intent {
            json["duplicate_intent"] = true.into();
        }
        let response = render_json(&call, json);
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
        let json = with_progress(self.with_wait(call.to_json(), &call), &call);
        Ok(render_json(&call, json))
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

/// A call as REST answers it: `200` once it is terminal, `202` (with
/// `Retry-After`, a poll interval) while it is pending or running; marked
/// `"duplicate_intent": true` when it is another key's call that holds the
/// request's business key; a running call's last `progress`, when its tool
/// reported one (`calls::last_progress`: on any node).
pub(super) fn render(call: &Call, duplicate_intent: bool) -> Response {
    // Written straight out: the bytes `call.to_json()` with these members
    // would print (`Call::write_json`), without the tree.
    let mut body = Vec::with_capacity(512);
    call.write_json(&mut body, duplicate_intent, progress_json(call).as_ref());
    answer(call, body)
}

/// A call's last `progress` as the answer shows it, when its tool reported
/// one.
fn progress_json(call: &Call) -> Option<serde_json::Value> {
    crate::calls::last_progress(call).map(|report| {
        serde_json::json!({
            "progress": report.progress,
            "total": report.total,
            "message": report.message,
            "at": report.at,
        })
    })
}

/// `json` (the call's) with its last `progress`, when its tool reported one.
fn with_progress(mut json: serde_json::Value, call: &Call) -> serde_json::Value {
    if let Some(progress) = progress_json(call) {
        json["progress"] = progress;
    }
    json
}

/// `call`'s answer with `json` as its body (the paths that add members to
/// the call's: a wait's outcome, a re-run).
fn render_json(call: &Call, json: serde_json::Value) -> Response {
    answer(call, json.to_string().into_bytes())
}

/// `200` once the call is terminal, `202` (with `Retry-After`, a poll
/// interval) while it is not.
fn answer(call: &Call, body: Vec<u8>) -> Response {
    if call.status.is_terminal() {
        Response::json_bytes(200, body)
    } else {
        Response::json_bytes(202, body).with_header("Retry-After", POLL_AFTER_SECS)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Status;
    use serde_json::json;

    fn call(status: Status) -> Call {
        Call {
            call_id: "c_0193a1b2c3d4e5f6".into(),
            tenant: "acme".into(),
            idem_key: "k \"quoted\" \\ é \u{1}".into(),
            fingerprint: "f".repeat(64),
            client_id: Some("agent-7".into()),
            seq: Some(-3),
            tool: "charge".into(),
            args_json: r#"{"amount":1.5,"memo":"ß","nested":{"b":[1,2],"a":null}}"#.into(),
            status,
            result: Some(json!({"ok": true, "n": 1e300, "s": "x\ny"})),
            error: None,
            attempt: 2,
            lease_until: Some(1.5),
            owner: Some("api".into()),
            effect_id: "eff_0193a1b2c3d4e5f6_0123456789abcdef0123456789abcdef".into(),
            created_at: 1_733_500_000.123_456,
            updated_at: 1_733_500_001.5,
            expires_at: None,
            next_attempt_at: Some(f64::NAN),
            cancel_requested_at: Some(0.1),
            progress: None,
        }
    }

    /// The answer is written without a tree, and is the tree's text byte
    /// for byte, with each member an answer may add in its place.
    #[test]
    fn a_call_written_straight_out_is_its_trees_text() {
        let progress = json!({"progress": 3.0, "total": null, "message": "half", "at": 1.5});
        for (duplicate_intent, progress) in [(false, None), (true, Some(&progress))] {
            let call = call(Status::Running);
            let mut tree = call.to_json();
            if duplicate_intent {
                tree["duplicate_intent"] = true.into();
            }
            if let Some(progress) = progress {
                tree["progress"] = progress.clone();
            }
            let mut written = Vec::new();
            call.write_json(&mut written, duplicate_intent, progress);
            assert_eq!(
                String::from_utf8(written).unwrap(),
                tree.to_string(),
                "duplicate_intent {duplicate_intent}, progress {progress:?}"
            );
        }
        let settled = call(Status::Succeeded);
        let response = render(&settled, false);
        assert_eq!(response.status, 200);
        assert_eq!(
            response.body,
            format!("{}\n", settled.to_json()).into_bytes()
        );
    }
}
