//! One request's exchange, around the routes: the request id it is answered
//! and logged under, the `log::Exchange` the routes fill in (the tenant it
//! turned out to be, its key and call), the headers a REST call answer
//! carries, and — once the response exists — its access-log line and
//! its metrics. The same stamping and recording is applied to the answers
//! the server gives on its own (`server::Observer`).
//!
//! This file must never log a header other than the checked `X-Request-Id`
//! and `Idempotency-Key`, nor a body, nor a query string.

use super::error::ApiError;
use super::service::Api;
use crate::http::{Request, Response};
use crate::log::{self, AccessRecord, Exchange};
use crate::metrics::Route;
use crate::request_id;
use crate::server::Observer;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// A POST's answer that returns a call: its `Location`, and
/// `Idempotent-Replayed: true` when the call already existed.
pub(super) fn returned_call(
    exchange: &mut Exchange,
    response: Response,
    call_id: &str,
    replayed: bool,
) -> Response {
    exchange.call_id = Some(call_id.to_string());
    exchange.replayed = replayed;
    let response = response.with_header("Location", &format!("/v1/tool-calls/{call_id}"));
    if replayed {
        response.with_header("Idempotent-Replayed", "true")
    } else {
        response
    }
}

/// The metrics route of a path: the template it matches, never the path
/// itself (its values are the client's).
pub fn route_of(path: &str) -> Route {
    match path {
        "/v1/tool-calls" => Route::PostToolCall,
        "/v1/tools" => Route::ListTools,
        "/stats" => Route::Stats,
        "/healthz" => Route::Healthz,
        "/metrics" => Route::Metrics,
        "/openapi.yaml" => Route::OpenApi,
        "/mcp" => Route::Mcp,
        "/v1/nodes" => Route::Nodes,
        "/v1/overview" => Route::Overview,
        "/v1/verify" => Route::Verify,
        "/v1/approvals" => Route::Approvals,
        "/v1/bulk-actions" => Route::PostBulkAction,
        _ if crate::console::owns(path) => Route::Console,
        _ if path.starts_with("/v1/bulk-actions/") => Route::GetBulkAction,
        _ if path.starts_with("/v1/tools/") && path.ends_with("/pause") => Route::PauseTool,
        _ if path.starts_with("/v1/tools/") && path.ends_with("/resume") => Route::ResumeTool,
        _ if path.starts_with("/v1/tool-calls/by-key/") => Route::GetToolCallByKey,
        _ => match path.strip_prefix("/v1/tool-calls/") {
            Some(rest) if rest.ends_with("/audit") => Route::GetAudit,
            Some(rest) if rest.ends_with("/cancel") => Route::CancelToolCall,
            Some(rest) if rest.ends_with("/approve") => Route::ApproveToolCall,
            Some(rest) if rest.ends_with("/deny") => Route::DenyToolCall,
            Some(rest) if rest.ends_with("/approval") => Route::GetApproval,
            Some(rest) if rest.ends_with("/rerun") => Route::RerunToolCall,
            Some(_) => Route::GetToolCall,
            None => Route::Other,
        },
    }
}

impl Api {
    /// Answer one request: under its request id (the client's when valid,
    /// else a new one), echoed in `X-Request-Id` and named in every log line
    /// the request causes; then its access-log line and metrics.
    pub fn handle(&self, req: &Request) -> Response {
        let started = Instant::now();
        let request_id = self
            .request_ids
            .accept_or_generate(req.header(request_id::HEADER));
        let _scope = log::request_scope(&request_id);
        let mut exchange = Exchange::default();
        let mut response = self
            .route(req, &mut exchange)
            .unwrap_or_else(ApiError::into_response);
        let elapsed = started.elapsed();
        self.record(
            &request_id,
            Some(req),
            req.peer,
            &exchange,
            &response,
            elapsed,
        );
        if let Some(stream) = response.stream.take() {
            // A streamed body is produced after this returns: its log lines
            // go under the same request id.
            let scoped = request_id.clone();
            response.stream = Some(stream.wrapped(move |sink, produce| {
                let _scope = log::request_scope(&scoped);
                produce(sink)
            }));
        }
        response
            .headers
            .push((request_id::HEADER.to_string(), request_id));
        response
    }

    /// The access-log line and the request metrics of one answer.
    fn record(
        &self,
        request_id: &str,
        req: Option<&Request>,
        peer: Option<SocketAddr>,
        exchange: &Exchange,
        response: &Response,
        elapsed: Duration,
    ) {
        let (method, path) = req.map_or(("-", "-"), |r| (r.method.as_str(), r.path.as_str()));
        let client = peer.map(|peer| match req {
            Some(r) => self
                .trusted_proxies
                .client_address(peer.ip(), r.header_values("x-forwarded-for")),
            None => peer.ip().to_canonical(),
        });
        self.metrics
            .observe_request(route_of(path), response.status, elapsed);
        log::access(&AccessRecord {
            request_id,
            client,
            tenant: exchange.tenant.as_deref(),
            method,
            path,
            status: response.status,
            duration: elapsed,
            idem_key: exchange.idem_key.as_deref(),
            call_id: exchange.call_id.as_deref(),
            replayed: exchange.replayed,
        });
    }
}

/// The server's own answers (malformed requests, timeouts, a handler panic,
/// the connection cap) get a request id and an access-log line like any
/// other; connections feed the open-connections gauge.
impl Observer for Api {
    fn connection_opened(&self) {
        self.metrics.open_connections.inc();
    }

    fn connection_closed(&self) {
        self.metrics.open_connections.dec();
    }

    fn own_answer(
        &self,
        request: Option<&Request>,
        peer: Option<SocketAddr>,
        response: &mut Response,
        elapsed: Duration,
    ) {
        let client_id = request.and_then(|r| r.header(request_id::HEADER));
        let request_id = self.request_ids.accept_or_generate(client_id);
        response
            .headers
            .push((request_id::HEADER.to_string(), request_id.clone()));
        self.record(
            &request_id,
            request,
            peer,
            &Exchange::default(),
            response,
            elapsed,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_has_its_template() {
        let cases = [
            ("/v1/tool-calls", Route::PostToolCall),
            ("/v1/tool-calls/c_1", Route::GetToolCall),
            ("/v1/tool-calls/c_1/audit", Route::GetAudit),
            ("/v1/tool-calls/c_1/cancel", Route::CancelToolCall),
            ("/v1/tool-calls/c_1/approve", Route::ApproveToolCall),
            ("/v1/tool-calls/c_1/deny", Route::DenyToolCall),
            ("/v1/tool-calls/c_1/approval", Route::GetApproval),
            ("/v1/approvals", Route::Approvals),
            ("/v1/tool-calls/c_1/rerun", Route::RerunToolCall),
            ("/v1/bulk-actions", Route::PostBulkAction),
            ("/v1/bulk-actions/b_1", Route::GetBulkAction),
            ("/v1/tools/charge/pause", Route::PauseTool),
            ("/v1/tools/charge/resume", Route::ResumeTool),
            ("/v1/tool-calls/by-key/a%2Faudit", Route::GetToolCallByKey),
            ("/v1/tools", Route::ListTools),
            ("/stats", Route::Stats),
            ("/healthz", Route::Healthz),
            ("/metrics", Route::Metrics),
            ("/openapi.yaml", Route::OpenApi),
            ("/mcp", Route::Mcp),
            ("/v1/nodes", Route::Nodes),
            ("/v1/overview", Route::Overview),
            ("/nope", Route::Other),
            ("-", Route::Other),
        ];
        for (path, route) in cases {
            assert_eq!(route_of(path), route, "{path}");
        }
    }
}
