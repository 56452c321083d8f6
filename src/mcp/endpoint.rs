//! `Mcp`: the endpoint behind `POST /mcp` — the `Host` and `Origin` checks, the JSON-RPC
//! body parsed strictly, a batch where its revision allows one, and each
//! message answered: `initialize` and the handshake methods, `tools/list`,
//! and `tools/call` (`tools_call`), over the `Calls` service the REST routes
//! share. The router mounts it as an `api::Endpoint`; it does not know the
//! router.
//!
//! It never runs a tool, keeps no session, and never puts a token, a header
//! value or a call's arguments in a log line.

use super::context::Mcp;
use super::events::Events;
use super::handshake::{self, Refused, Revision};
use super::jsonrpc::{
    self, Message, HEADER_MISMATCH, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND,
    MISSING_CAPABILITY, PARSE_ERROR,
};
use super::rpc_error::RpcError;
use super::tools_call::Called;
use super::{listen, tasks, tools_call, tools_list};
use crate::auth::Tenant;
use crate::http::{Request, Response};
use crate::log::Exchange;
use serde_json::{json, Map, Value};
use std::sync::Arc;

impl Mcp {
    /// Answer one `POST /mcp`.
    pub fn handle(
        self: &Arc<Mcp>,
        req: &Request,
        tenant: &Tenant,
        exchange: &mut Exchange,
    ) -> Response {
        let (host, origin) = (req.header("host"), req.header("origin"));
        if let Err(refusal) = self.origins.check(host, origin) {
            return refusal.into();
        }
        let value = match crate::input::parse_strict(&req.body) {
            Ok(value) => value,
            Err(e) => {
                let message = format!("Parse error: {e}");
                return Response::json(400, &jsonrpc::error(None, PARSE_ERROR, message, None));
            }
        };
        match value {
            Value::Array(batch) => answer_batch(self, req, tenant, exchange, &batch),
            single => match answer_one(self, req, tenant, exchange, &single, accepts_events(req)) {
                Some(Answer::Now(status, body)) => Response::json(status, &body),
                Some(Answer::Streamed(produce)) => super::events::stream(produce),
                None => accepted(),
            },
        }
    }
}

/// One message's answer: now, or as an event stream whose producer sends
/// the notifications and then the response.
enum Answer {
    Now(u16, Value),
    Streamed(Box<dyn FnOnce(&mut Events<'_>) + Send>),
}

/// A streamed answer: `work` sends its notifications, then its outcome is
/// the response (framed as `finished` frames any answer).
fn streamed(
    id: jsonrpc::Id,
    revision: Revision,
    work: impl FnOnce(&mut Events<'_>) -> Result<Value, RpcError> + Send + 'static,
) -> Answer {
    Answer::Streamed(Box::new(move |events| {
        let (_, body) = finished(&id, revision, work(events));
        let _ = events.send(&body);
    }))
}

/// Whether the client takes a `text/event-stream` answer (MCP clients
/// send `Accept: application/json, text/event-stream`).
fn accepts_events(req: &Request) -> bool {
    req.header("accept")
        .is_some_and(|accept| accept.contains("text/event-stream"))
}

/// `202 Accepted`, no body: a notification (or a response) was taken.
fn accepted() -> Response {
    Response {
        status: 202,
        headers: Vec::new(),
        body: Vec::new(),
        stream: None,
    }
}

/// A batch: only 2025-03-26 allows one (named by the header, or no header);
/// later revisions removed batching, so the whole body is an invalid request.
fn answer_batch(
    mcp: &Arc<Mcp>,
    req: &Request,
    tenant: &Tenant,
    exchange: &mut Exchange,
    batch: &[Value],
) -> Response {
    let revision = handshake::revision_of(&Map::new(), req.header("mcp-protocol-version"));
    let refusal = match revision {
        Ok(r) if r.allows_batches() && !batch.is_empty() => None,
        Ok(_) if batch.is_empty() => Some("an empty batch is not a request".to_string()),
        Ok(r) => Some(format!(
            "JSON-RPC batches are not part of MCP revision {} (only 2025-03-26 allows them)",
            r.as_str()
        )),
        Err(refused) => Some(refused.message),
    };
    if let Some(message) = refusal {
        return Response::json(400, &jsonrpc::error(None, INVALID_REQUEST, message, None));
    }
    // A batch is answered whole: never streamed.
    let answers: Vec<Value> = batch
        .iter()
        .filter_map(|message| answer_one(mcp, req, tenant, exchange, message, false))
        .filter_map(|answer| match answer {
            Answer::Now(_, body) => Some(body),
            Answer::Streamed(_) => None,
        })
        .collect();
    if answers.is_empty() {
        accepted()
    } else {
        Response::json(200, &Value::Array(answers))
    }
}

/// One message: `None` for a notification or a response (nothing to say).
/// `streams`: it may be answered with an event stream.
fn answer_one(
    mcp: &Arc<Mcp>,
    req: &Request,
    tenant: &Tenant,
    exchange: &mut Exchange,
    value: &Value,
    streams: bool,
) -> Option<Answer> {
    let (id, method, params) = match jsonrpc::classify(value) {
        Ok(Message::Request { id, method, params }) => (id, method, params),
        Ok(Message::Notification { method, params }) => {
            // A notification is not answered, but one in a version this
            // server does not speak is refused like a request (400).
            let header = req.header("mcp-protocol-version");
            if let Err(refused) = handshake::revision_of(&params, header) {
                let body = jsonrpc::error(None, refused.code, refused.message, refused.data);
                return Some(Answer::Now(400, body));
            }
            notified(&method);
            return None;
        }
        Ok(Message::Response) => return None,
        Err(m) => {
            let body = jsonrpc::error(m.id.as_ref(), INVALID_REQUEST, m.message, None);
            return Some(Answer::Now(400, body));
        }
    };
    if method == "initialize"
        && !handshake::names_stateless(&params, req.header("mcp-protocol-version"))
    {
        return Some(Answer::Now(
            200,
            jsonrpc::result(&id, handshake::initialize(&params)),
        ));
    }
    let revision = match revision_checked(req, &method, &params) {
        Ok(revision) => revision,
        Err(refused) => {
            let body = jsonrpc::error(Some(&id), refused.code, refused.message, refused.data);
            return Some(Answer::Now(400, body));
        }
    };
    let answer = match method.as_str() {
        // The handshake methods are gone from the stateless revision.
        "ping" | "initialize" if revision.is_stateless() => {
            return Some(now(method_not_found(&id, &method, revision)))
        }
        "ping" => Ok(json!({})),
        "server/discover" => Ok(handshake::discover()),
        "tools/list" => {
            let cursor = params.get("cursor").and_then(Value::as_str);
            tools_list::list(mcp.calls.tools(), revision, cursor, mcp.options.keyless)
                .map(|page| tools_list::mark_paused(page, |tool| mcp.calls.paused(tool)))
                .map_err(|e| (INVALID_PARAMS, e.to_string(), None))
        }
        "tools/call" => {
            match tools_call::call(mcp, req, tenant, exchange, revision, &params, streams) {
                Ok(Called::Followed(follow)) => {
                    return Some(streamed(id, revision, move |events| follow.run(events)))
                }
                Ok(Called::Now(result)) => Ok(result),
                Err(e) => Err(e),
            }
        }
        "subscriptions/listen" if revision.is_stateless() => {
            return Some(match listen::open(mcp, tenant, revision, &params, &id) {
                Ok(listening) => streamed(id, revision, move |events| listening.run(events)),
                Err(e) => now(finished(&id, revision, Err(e))),
            })
        }
        "tasks/get" => tasks::get(mcp, tenant, revision, &params, exchange),
        "tasks/cancel" => tasks::cancel(mcp, tenant, revision, &params, exchange),
        "tasks/update" => tasks::update(mcp, tenant, revision, &params, exchange),
        _ => return Some(now(method_not_found(&id, &method, revision))),
    };
    Some(now(finished(&id, revision, answer)))
}

fn now((status, body): (u16, Value)) -> Answer {
    Answer::Now(status, body)
}

/// A method's outcome as the JSON-RPC response, with its HTTP status.
fn finished(id: &jsonrpc::Id, revision: Revision, answer: Result<Value, RpcError>) -> (u16, Value) {
    match answer {
        Ok(result) => (200, jsonrpc::result(id, complete(result, revision))),
        Err((code, message, data)) => {
            // A missing client capability or a custom header that does not
            // mirror its argument is a 400 under the stateless revision, as
            // its transport requires.
            let refused_by_transport = code == MISSING_CAPABILITY || code == HEADER_MISMATCH;
            let status = if refused_by_transport && revision.is_stateless() {
                400
            } else {
                200
            };
            (status, jsonrpc::error(Some(id), code, message, data))
        }
    }
}

/// `-32601`; `404` under the stateless revision, as its transport requires.
fn method_not_found(id: &jsonrpc::Id, method: &str, revision: Revision) -> (u16, Value) {
    let message = format!("Method not found: {}", crate::input::quote(method));
    let status = if revision.is_stateless() { 404 } else { 200 };
    (
        status,
        jsonrpc::error(Some(id), METHOD_NOT_FOUND, message, None),
    )
}

/// The request's revision, and for 2026-07-28 its mirrored headers checked.
fn revision_checked(
    req: &Request,
    method: &str,
    params: &Map<String, Value>,
) -> Result<Revision, Refused> {
    let revision = handshake::revision_of(params, req.header("mcp-protocol-version"))?;
    if revision.is_stateless() {
        handshake::check_mirrored_headers(
            method,
            params,
            req.header("mcp-method"),
            req.header("mcp-name"),
        )?;
    }
    Ok(revision)
}

/// A stateless revision's result names its type (`complete`, unless it is
/// a task) and the server, beside any `_meta` of its own.
fn complete(mut result: Value, revision: Revision) -> Value {
    if revision.is_stateless() {
        if result.get("resultType").is_none() {
            result["resultType"] = "complete".into();
        }
        if !result.get("_meta").is_some_and(Value::is_object) {
            result["_meta"] = json!({});
        }
        result["_meta"][handshake::META_SERVER_INFO] = handshake::server_info();
    }
    result
}

/// Notifications change nothing here. `notifications/cancelled` in
/// particular never aborts a call: an effect may already be under way, and
/// the same key re-sent later attaches to the same call; the request it
/// names stops waiting when its client goes.
fn notified(method: &str) {
    if method == "notifications/cancelled" {
        crate::log::debug("MCP cancellation received; the call, if any, goes on")
            .event("mcp_cancelled")
            .label("transport", "mcp")
            .emit();
    }
}
