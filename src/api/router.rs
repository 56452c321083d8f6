//! The REST routes over one `Calls` service: which handler answers each
//! method and path (`Api::route`, on `route`'s parse), `POST /v1/tool-calls`
//! and the reads of one call, with the `?wait=` that holds the request until
//! it is terminal (`answer` renders it). `POST /mcp` is answered by the
//! endpoint it was built with, after the same authentication.
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
use super::route::{Route, RouteKind, Unrouted};
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

impl Api {
    /// The routes, in the order that matters: `/healthz` needs no token;
    /// without `--auth-file` the `Host` is checked (DNS rebinding); the
    /// console's files carry no data; every other path is answered for the
    /// authenticated tenant (`401` first, before any path is told apart, so
    /// an unauthenticated client learns nothing of the routes). Then one
    /// `match` names each route's handler, in its concern's file.
    pub(super) fn route(
        &self,
        req: &Request,
        exchange: &mut Exchange,
    ) -> Result<Response, ApiError> {
        let (method, path) = (req.method.as_str(), req.path.as_str());
        if path == "/healthz" {
            Route::parse(method, path).map_err(|e| unrouted(e, path))?;
            return Ok(self.healthz());
        }
        if !self.auth.is_required() {
            let host = req.header("host");
            self.trusted_names
                .check_tokenless_host(host)
                .map_err(ApiError::HostRefused)?;
        }
        if console::owns(path) {
            return Ok(console::answer(method, path));
        }
        let tenant = self
            .auth
            .authenticate(req.header("authorization"))
            .map_err(ApiError::Unauthorized)?;
        exchange.tenant = Some(Arc::clone(&tenant.name));
        let Route { kind, param } = Route::parse(method, path).map_err(|e| unrouted(e, path))?;
        match kind {
            RouteKind::PostCall => self.post_call(req, &tenant, exchange),
            RouteKind::GetCall => self.get_call(req, &tenant, param, exchange),
            RouteKind::CallByKey => self.get_call_by_key(req, &tenant, param, exchange),
            RouteKind::CallAudit => self.audit(&tenant, param, exchange),
            RouteKind::Stats => self.stats(req, &tenant),
            RouteKind::Healthz => Ok(self.healthz()),
            RouteKind::Metrics => self.metrics_text(&tenant),
            RouteKind::OpenApi => Ok(operations::openapi()),
            RouteKind::Tools => Ok(Response::json(200, &self.tools_view())),
            RouteKind::Mcp => {
                ApiError::unless_may(&tenant, Action::Call)?;
                Ok((self.mcp)(req, &tenant, exchange))
            }
            RouteKind::ListCalls => self.list_calls(req, &tenant),
            RouteKind::Nodes => self.nodes(req, &tenant),
            RouteKind::Overview => self.overview(req, &tenant),
            RouteKind::Cancel => {
                ApiError::unless_may(&tenant, Action::Cancel)?;
                self.cancel(req, &tenant, param, exchange)
            }
            RouteKind::Approve => self.decide(req, &tenant, param, Verdict::Approve, exchange),
            RouteKind::Deny => self.decide(req, &tenant, param, Verdict::Deny, exchange),
            RouteKind::Approval => self.approval(&tenant, param, exchange),
            RouteKind::Approvals => self.approval_queue(req, &tenant),
            RouteKind::Rerun => self.rerun(req, &tenant, param, exchange),
            RouteKind::CreateBulkJob => self.create_bulk_job(req, &tenant, exchange),
            RouteKind::BulkJob => self.bulk_job(&tenant, param),
            RouteKind::Pause => self.pause_or_resume(req, &tenant, param, true),
            RouteKind::Resume => self.pause_or_resume(req, &tenant, param, false),
            RouteKind::Verify => self.verify(req, &tenant),
            RouteKind::Ui | RouteKind::UiAsset => Ok(console::answer(method, path)),
        }
    }

    /// `GET /v1/verify`: the promise check, for an admin alone.
    fn verify(&self, req: &Request, tenant: &Tenant) -> Result<Response, ApiError> {
        if !tenant.admin {
            return Err(ApiError::Forbidden("/v1/verify"));
        }
        self.promise_check.answer(req)
    }

    /// `GET /v1/tool-calls/{call_id}`, `?wait=` included.
    fn get_call(
        &self,
        req: &Request,
        tenant: &Tenant,
        call_id: &str,
        exchange: &mut Exchange,
    ) -> Result<Response, ApiError> {
        let call = self.calls.get(&tenant.name, call_id)?;
        let call = call.ok_or_else(|| ApiError::NotFound(format!("call {}", quote(call_id))))?;
        exchange.call_id = Some(call.call_id.clone());
        self.respond_with_call(call, wait_param(req)?, &req.client)
    }

    /// `GET /v1/tool-calls/by-key/{key}`: the key percent-decoded.
    fn get_call_by_key(
        &self,
        req: &Request,
        tenant: &Tenant,
        key: &str,
        exchange: &mut Exchange,
    ) -> Result<Response, ApiError> {
        let key = percent_decode(key).ok_or_else(|| {
            ApiError::BadRequest("the key in the path is not valid percent-encoded UTF-8".into())
        })?;
        let call = self.calls.get_by_key(&tenant.name, &key)?;
        let call =
            call.ok_or_else(|| ApiError::NotFound(format!("call with key {}", quote(&key))))?;
        exchange.call_id = Some(call.call_id.clone());
        self.respond_with_call(call, wait_param(req)?, &req.client)
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

/// A method and path no route answers, as REST says it.
fn unrouted(e: Unrouted, path: &str) -> ApiError {
    match e {
        Unrouted::NotFound => ApiError::NotFound(format!("path {}", quote(path))),
        Unrouted::MethodNotAllowed(allowed) => ApiError::MethodNotAllowed(allowed),
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
