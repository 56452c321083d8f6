//! `POST /mcp`: the Model Context Protocol over Streamable HTTP, on the same
//! hand-written server, authenticated like every other route (the request
//! runs in its token's tenant). Every request is answered with one
//! `application/json` body (no SSE stream); a notification, or a response
//! the client posts, with `202` and no body. `GET /mcp` is `405`: there is no
//! server-to-client stream, because nothing here is ever pushed.
//!
//! Map: `jsonrpc` (the message shape and the error codes), `handshake`
//! (revisions: `initialize`, `server/discover`, `ping`, the
//! `MCP-Protocol-Version` header and 2026-07-28's mirrored headers),
//! `tools_list`, `tools_call` (the exactly-once path, through `Api::submit`).
//!
//! HTTP statuses: `200` for every JSON-RPC answer of a handshake revision
//! (errors included, as JSON-RPC over HTTP is usually spoken); `400` for a
//! body that is not JSON-RPC, a batch the revision forbids, an unsupported
//! version or a header mismatch; 2026-07-28's unknown method is `404`, as
//! that revision requires. `403` (`host_not_allowed`, `origin_not_allowed`)
//! for a `Host` or `Origin` this server does not trust (`origin`: DNS
//! rebinding).
//!
//! This module never runs a tool, keeps no session, and never puts a token,
//! a header value or a call's arguments in a log line.

pub mod handshake;
pub mod jsonrpc;
pub mod origin;
pub mod tools_call;
pub mod tools_list;

use crate::api::{Api, Exchange};
use crate::auth::Tenant;
use crate::http::{Request, Response};
use handshake::{Refused, Revision};
use jsonrpc::{Message, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR};
use serde_json::{json, Map, Value};

/// Answer one `POST /mcp`.
pub fn handle(api: &Api, req: &Request, tenant: &Tenant, exchange: &mut Exchange) -> Response {
    if let Err(refusal) = api
        .mcp_origins
        .check(req.header("host"), req.header("origin"))
    {
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
        Value::Array(batch) => answer_batch(api, req, tenant, exchange, &batch),
        single => match answer_one(api, req, tenant, exchange, &single) {
            Some((status, body)) => Response::json(status, &body),
            None => accepted(),
        },
    }
}

/// `202 Accepted`, no body: a notification (or a response) was taken.
fn accepted() -> Response {
    Response {
        status: 202,
        headers: Vec::new(),
        body: Vec::new(),
    }
}

/// A batch: only 2025-03-26 allows one (named by the header, or no header);
/// later revisions removed batching, so the whole body is an invalid request.
fn answer_batch(
    api: &Api,
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
    let answers: Vec<Value> = batch
        .iter()
        .filter_map(|message| answer_one(api, req, tenant, exchange, message))
        .map(|(_, body)| body)
        .collect();
    if answers.is_empty() {
        accepted()
    } else {
        Response::json(200, &Value::Array(answers))
    }
}

/// One message: `None` for a notification or a response (nothing to say).
fn answer_one(
    api: &Api,
    req: &Request,
    tenant: &Tenant,
    exchange: &mut Exchange,
    value: &Value,
) -> Option<(u16, Value)> {
    let (id, method, params) = match jsonrpc::classify(value) {
        Ok(Message::Request { id, method, params }) => (id, method, params),
        Ok(Message::Notification { method, params }) => {
            // A notification is not answered, but one in a version this
            // server does not speak is refused like a request (400).
            if let Err(refused) =
                handshake::revision_of(&params, req.header("mcp-protocol-version"))
            {
                let body = jsonrpc::error(None, refused.code, refused.message, refused.data);
                return Some((400, body));
            }
            notified(&method);
            return None;
        }
        Ok(Message::Response) => return None,
        Err(m) => {
            let body = jsonrpc::error(m.id.as_ref(), INVALID_REQUEST, m.message, None);
            return Some((400, body));
        }
    };
    if method == "initialize" {
        return Some((200, jsonrpc::result(&id, handshake::initialize(&params))));
    }
    let revision = match revision_checked(req, &method, &params) {
        Ok(revision) => revision,
        Err(refused) => {
            let body = jsonrpc::error(Some(&id), refused.code, refused.message, refused.data);
            return Some((400, body));
        }
    };
    let answer = match method.as_str() {
        "ping" => Ok(json!({})),
        "server/discover" => Ok(handshake::discover()),
        "tools/list" => {
            let cursor = params.get("cursor").and_then(Value::as_str);
            tools_list::list(&api.tools, revision, cursor)
                .map_err(|e| (INVALID_PARAMS, e.to_string(), None))
        }
        "tools/call" => tools_call::call(api, req, tenant, exchange, revision, &params),
        _ => {
            let message = format!("Method not found: {}", crate::input::quote(&method));
            let status = if revision.is_stateless() { 404 } else { 200 };
            return Some((
                status,
                jsonrpc::error(Some(&id), METHOD_NOT_FOUND, message, None),
            ));
        }
    };
    Some(match answer {
        Ok(result) => (200, jsonrpc::result(&id, complete(result, revision))),
        Err((code, message, data)) => (200, jsonrpc::error(Some(&id), code, message, data)),
    })
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

/// A stateless revision's result names its type and the server.
fn complete(mut result: Value, revision: Revision) -> Value {
    if revision.is_stateless() {
        result["resultType"] = "complete".into();
        result["_meta"] = json!({ handshake::META_SERVER_INFO: handshake::server_info() });
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
