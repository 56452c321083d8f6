//! `tools/call`: an MCP tool call submitted through the same pipeline as
//! `POST /v1/tool-calls` (`Calls::submit`: the store, the fingerprint, the
//! workers, the retries, the audit), under an idempotency key taken from
//! `_meta` (`META_IDEMPOTENCY_KEY`), from `params.idempotencyKey` (SEP-3182's
//! spelling), or — when the client sends neither — made fresh for this
//! request, so that only a business key protects against a re-sent call.
//! It waits up to `--mcp-wait-secs` for the call to settle, then answers its
//! state: `structuredContent` and the same JSON as text, `isError` when the
//! call failed — streaming its progress meanwhile when the request carries a
//! `progressToken` (`progress`). Also `get_tool_call`, which reads a call by
//! its handle.
//!
//! It never runs a tool itself, never answers before the call is committed,
//! and never lets `notifications/cancelled` (or a client hanging up) abort a
//! call: the wait ends, the call goes on.

use super::approval_input::{self, Answer, Asker};
use super::call_result::{tool_result, Marks};
use super::endpoint::Mcp;
use super::handshake::Revision;
use super::jsonrpc::{HEADER_MISMATCH, IDEMPOTENCY_CONFLICT, INTERNAL_ERROR, INVALID_PARAMS};
use super::keyless::{self, KeyOf};
use super::progress::Follow;
use super::tools_list::GET_TOOL_CALL;
use crate::auth::Tenant;
// The key and wait bounds are the call path's, so both transports agree.
use crate::calls::{
    store_refusal, CallError, CallRefusal, CallRequest, Submitted, MAX_KEY_LEN, MAX_WAIT_SECS,
};
use crate::http::{ErrorCode, Request, RETRY_AFTER_SECS};
use crate::input::quote;
use crate::log::Exchange;
use crate::metrics::Transport;
use crate::store::{Call, Status, StoreError};
use crate::tools::{Keyless, ToolSpec};
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::Duration;

/// The `_meta` key a client puts its idempotency key under (reverse DNS, as
/// MCP asks of a non-MCP `_meta` key).
pub const META_IDEMPOTENCY_KEY: &str = "dev.idempotent-tool/idempotency-key";

/// A JSON-RPC error: code, message, data.
pub type RpcError = (i64, String, Option<Value>);

fn invalid(message: impl Into<String>) -> RpcError {
    (INVALID_PARAMS, message.into(), None)
}

/// How `tools/call` answers.
pub enum Called {
    /// Its result now (possibly a tool execution error).
    Now(Value),
    /// Its result once the call is waited for, its progress streamed
    /// meanwhile (`progress::Follow`).
    Followed(Box<Follow>),
}

/// `tools/call`'s answer, or a protocol error. `streams`: the request may
/// be answered with an event stream (one message, and its client takes
/// `text/event-stream`).
pub fn call(
    mcp: &Arc<Mcp>,
    req: &Request,
    tenant: &Tenant,
    exchange: &mut Exchange,
    revision: Revision,
    params: &Map<String, Value>,
    streams: bool,
) -> Result<Called, RpcError> {
    let name = params
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("params.name (the tool) is required"))?;
    let arguments = match params.get("arguments") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(args)) => args.clone(),
        Some(_) => return Err(invalid("params.arguments must be an object")),
    };
    if name == GET_TOOL_CALL {
        return get_tool_call(mcp, req, tenant, exchange, revision, &arguments).map(Called::Now);
    }
    let Some(spec) = mcp.calls.tools().get(name) else {
        let known = super::tools_list::names(mcp.calls.tools());
        return Err((
            INVALID_PARAMS,
            format!("Unknown tool: {}", quote(name)),
            Some(json!({"tools": known})),
        ));
    };
    if revision.is_stateless() {
        super::param_headers::check(&spec.input_schema, &arguments, |name| req.header(name))
            .map_err(|message| (HEADER_MISMATCH, message, None))?;
    }
    let as_task = super::tasks::answers_as_task(spec, revision, params)?;
    // A re-sent call answering an input request names its call in
    // `requestState`: its key finds it again, whatever the keyless policy.
    let key = match approval_input::stated_call(mcp, tenant, name, params)? {
        Some(stated) => KeyOf::Sent(stated.idem_key),
        None => match key_of(mcp, tenant, spec, name, &arguments, params)? {
            Ok(key) => key,
            Err(refused) => return Ok(Called::Now(refused)),
        },
    };
    exchange.idem_key = Some(key.key().to_string());
    if !revision.schema_failure_is_tool_error() {
        // Before 2025-11-25, arguments the schema refuses are a protocol error.
        let (tool_args, _) = crate::chaos::split(&arguments).map_err(|e| invalid(e.to_string()))?;
        spec.check_args(&tool_args)
            .map_err(|e| invalid(e.to_string()))?;
    }
    let request = CallRequest {
        tenant,
        key: key.key(),
        tool: name,
        args: &arguments,
        client_id: None,
        seq: None,
        transport: Transport::Mcp,
    };
    let (call, replayed, duplicate_intent) = match mcp.calls.submit(request) {
        Ok(Submitted::Call {
            call,
            replayed,
            duplicate_intent,
        }) => (*call, replayed, duplicate_intent),
        Ok(Submitted::Cached { .. }) => {
            return Err((INTERNAL_ERROR, "internal error".into(), None));
        }
        Err(e) => return refusal(e, exchange).map(Called::Now),
    };
    exchange.call_id = Some(call.call_id.clone());
    exchange.replayed = replayed;
    let marks = Marks {
        replayed,
        duplicate_intent,
        by_content: matches!(key, KeyOf::Content(_)),
    };
    if marks.replayed && marks.by_content {
        // The answer says it was found by its content; so does the audit,
        // committed before the answer (a failed write is the client's to
        // retry, as any store failure: the same content finds the call).
        mcp.calls
            .note_replay_by_content(&tenant.name, &call.call_id, mcp.options.content_window)
            .map_err(store_failure)?;
    }
    let asker = Asker::of(tenant, params);
    let call = match call.status {
        Status::AwaitingApproval => approval_input::apply(mcp, tenant, call, Answer::of(params)?)?,
        _ => call,
    };
    if as_task {
        log_answer(&call, marks);
        return super::tasks::created(mcp, &call, &asker).map(Called::Now);
    }
    if revision.is_stateless() {
        if let Some(requests) = approval_input::input_requests(mcp, &asker, &call)? {
            log_answer(&call, marks);
            return Ok(Called::Now(approval_input::input_required(&call, requests)));
        }
    }
    // A call awaiting approval is answered at once with its handle: a
    // person's decision is not a matter of seconds (`get_tool_call`, asked
    // to wait, does wait).
    let wait = match call.status {
        Status::AwaitingApproval => Duration::ZERO,
        _ => mcp.options.wait,
    };
    let token = super::progress::token(params);
    if let Some(token) = token.filter(|_| streams && !wait.is_zero()) {
        if !call.status.is_terminal() {
            let spec = Arc::clone(spec);
            return Ok(Called::Followed(Box::new(Follow {
                calls: Arc::clone(&mcp.calls),
                call,
                token,
                wait,
                client: req.client.clone(),
                answer: Box::new(move |call| {
                    log_answer(call, marks);
                    tool_result(call, Some(&spec), marks, revision)
                }),
            })));
        }
    }
    let call = settle(mcp, req, call, wait)?;
    log_answer(&call, marks);
    Ok(Called::Now(tool_result(&call, Some(spec), marks, revision)))
}

/// What `submit` refused (mapped once, in `calls::error`), as MCP frames
/// it: a tool execution error the model can read and act on (bad or too
/// large arguments, a duplicate intent), the conflict's own JSON-RPC error,
/// or a JSON-RPC error whose `data.code` is the REST code and, for
/// `unavailable` and `overloaded`, `data.retry_after_secs`.
fn refusal(e: CallError, exchange: &mut Exchange) -> Result<Value, RpcError> {
    let refusal = e.refusal();
    if refusal.call_id.is_some() {
        exchange.call_id = refusal.call_id.clone();
    }
    match refusal.code {
        ErrorCode::BadRequest | ErrorCode::PayloadTooLarge | ErrorCode::DuplicateIntent => Ok(
            tool_error(refusal.code, &refusal.message, refusal.call_id.as_deref()),
        ),
        ErrorCode::IdempotencyConflict => Err((
            IDEMPOTENCY_CONFLICT,
            "Idempotency key conflict: the key belongs to a call with other arguments".into(),
            Some(json!({
                "code": refusal.code.as_str(),
                "reason": "idempotency_key_conflict",
                "idempotency_key": refusal.key,
                "call_id": refusal.call_id,
            })),
        )),
        _ => Err(rpc_error(refusal)),
    }
}

/// A store failure (its cause logged by `store_refusal`, never sent).
pub(super) fn store_failure(e: StoreError) -> RpcError {
    rpc_error(store_refusal(e))
}

/// A refusal no tool result can carry, as a JSON-RPC error: the REST code in
/// `data.code`, and when it asks the client to come back, after how long.
fn rpc_error(refusal: CallRefusal) -> RpcError {
    let mut data = json!({"code": refusal.code.as_str()});
    if refusal.code.asks_to_retry_later() {
        data["retry_after_secs"] = json!(RETRY_AFTER_SECS);
    }
    (INTERNAL_ERROR, refusal.message, Some(data))
}

/// The request's key: the client's, or by the tool's keyless policy one
/// derived from its content or made fresh; `Ok(Err(answer))` when the
/// policy is `reject` (a tool error saying how to send a key).
fn key_of(
    mcp: &Mcp,
    tenant: &Tenant,
    spec: &ToolSpec,
    tool: &str,
    arguments: &Map<String, Value>,
    params: &Map<String, Value>,
) -> Result<Result<KeyOf, Value>, RpcError> {
    if let Some(key) = idempotency_key(params)? {
        return Ok(Ok(KeyOf::Sent(key)));
    }
    Ok(match keyless::policy(mcp, spec) {
        Keyless::Fresh => Ok(KeyOf::Fresh(fresh_key())),
        Keyless::Content => Ok(KeyOf::Content(
            keyless::content_key(mcp, &tenant.name, tool, arguments).map_err(store_failure)?,
        )),
        Keyless::Reject => Err(tool_error(
            ErrorCode::MissingIdempotencyKey,
            &format!(
                "this tool needs an idempotency key: send it as params._meta[\"{META_IDEMPOTENCY_KEY}\"] \
                 and send the same key again when you retry"
            ),
            None,
        )),
    })
}

/// The key from `_meta`, or `params.idempotencyKey` (both: they must agree);
/// `None` when the client sent neither.
fn idempotency_key(params: &Map<String, Value>) -> Result<Option<String>, RpcError> {
    let from_meta = params
        .get("_meta")
        .and_then(|m| m.get(META_IDEMPOTENCY_KEY));
    let from_params = params.get("idempotencyKey");
    let key = match (from_meta, from_params) {
        (None, None) => return Ok(None),
        (Some(a), Some(b)) if a != b => {
            return Err(invalid(format!(
                "_meta.{META_IDEMPOTENCY_KEY} and params.idempotencyKey differ; send one"
            )))
        }
        (Some(k), _) | (None, Some(k)) => k,
    };
    let visible = |b: u8| (0x21..=0x7e).contains(&b);
    match key.as_str() {
        Some(k) if !k.is_empty() && k.len() <= MAX_KEY_LEN && k.bytes().all(visible) => {
            Ok(Some(k.to_string()))
        }
        _ => Err(invalid(format!(
            "the idempotency key must be a string of 1 to {MAX_KEY_LEN} visible ASCII characters"
        ))),
    }
}

/// `mcp-` and 32 hex: unique per request (time, a counter, the process and
/// std's randomly keyed hasher, hashed).
fn fresh_key() -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    let seed = format!(
        "{}:{}:{:?}:{}",
        hasher.finish(),
        std::process::id(),
        std::time::SystemTime::now(),
        COUNTER.load(Ordering::Relaxed)
    );
    format!(
        "mcp-{}",
        &crate::fingerprint::hex_sha256(seed.as_bytes())[..32]
    )
}

/// Wait up to `wait` for the call to settle (a client that hangs up ends
/// the wait, never the call).
fn settle(mcp: &Mcp, req: &Request, call: Call, wait: Duration) -> Result<Call, RpcError> {
    if call.status.is_terminal() || wait.is_zero() {
        return Ok(call);
    }
    mcp.calls
        .wait(call, wait, || req.client.gone())
        .map_err(store_failure)
}

/// `{call_id, idempotency_key, status, attempt, result | error, replayed}`
/// (and `cancel_requested_at` once a cancel was asked) as
/// `structuredContent` (from 2025-06-18) and as text; `isError` when the
/// call failed, was cancelled or denied.
pub fn outcome(call: &Call, replayed: bool, duplicate_intent: bool, revision: Revision) -> Value {
    let mut state = json!({
        "call_id": call.call_id,
        "idempotency_key": call.idem_key,
        "status": call.status.as_str(),
        "attempt": call.attempt,
        "replayed": replayed,
    });
    if duplicate_intent {
        state["duplicate_intent"] = true.into();
    }
    match call.status {
        Status::Succeeded => state["result"] = call.result.clone().unwrap_or(Value::Null),
        Status::Failed | Status::Cancelled | Status::Denied => {
            state["error"] = call.error.clone().unwrap_or(Value::Null)
        }
        Status::AwaitingApproval | Status::Pending | Status::Running => {}
    }
    if let Some(at) = call.cancel_requested_at {
        state["cancel_requested_at"] = at.into();
    }
    let mut answer = json!({
        "content": [{"type": "text", "text": state.to_string()}],
        "isError": matches!(call.status, Status::Failed | Status::Cancelled | Status::Denied),
    });
    if revision.has_structured_output() {
        answer["structuredContent"] = state;
    }
    answer
}

/// A tool execution error that is not a call's outcome: text only (no
/// `structuredContent`, which would have to match the output schema).
fn tool_error(code: ErrorCode, message: &str, call_id: Option<&str>) -> Value {
    let mut error = json!({"code": code.as_str(), "message": message});
    if let Some(call_id) = call_id {
        error["call_id"] = call_id.into();
    }
    json!({
        "content": [{"type": "text", "text": json!({"error": error}).to_string()}],
        "isError": true,
    })
}

/// `get_tool_call {call_id, wait_secs?}`: the call's current state, within
/// the tenant (another tenant's call is not found).
fn get_tool_call(
    mcp: &Mcp,
    req: &Request,
    tenant: &Tenant,
    exchange: &mut Exchange,
    revision: Revision,
    arguments: &Map<String, Value>,
) -> Result<Value, RpcError> {
    if let Err(e) = super::tools_list::check_get_tool_call(arguments) {
        // Its schema is held like any tool's: a protocol error before
        // 2025-11-25, a tool execution error the model can read from it.
        return if revision.schema_failure_is_tool_error() {
            Ok(tool_error(ErrorCode::BadRequest, &e.to_string(), None))
        } else {
            Err(invalid(e.to_string()))
        };
    }
    // The schema has checked both: a string, and a number within bounds.
    let call_id = arguments["call_id"].as_str().unwrap_or_default();
    let wait = arguments
        .get("wait_secs")
        .and_then(Value::as_f64)
        .map_or(Duration::ZERO, |s| {
            Duration::from_secs_f64(s.clamp(0.0, MAX_WAIT_SECS))
        });
    let call = match mcp.calls.get(&tenant.name, call_id) {
        Ok(Some(call)) => call,
        Ok(None) => {
            let message = format!("call {} not found", quote(call_id));
            return Ok(tool_error(ErrorCode::NotFound, &message, None));
        }
        Err(e) => return Err(store_failure(e)),
    };
    exchange.call_id = Some(call.call_id.clone());
    let call = settle(mcp, req, call, wait)?;
    Ok(outcome(&call, false, false, revision))
}

/// The MCP call in the log, labelled `transport="mcp"` (the access line
/// already names its key and call).
fn log_answer(call: &Call, marks: Marks) {
    let Marks {
        replayed,
        duplicate_intent,
        by_content,
    } = marks;
    crate::log::info("MCP tools/call answered")
        .event("mcp_tool_call")
        .label("transport", "mcp")
        .tenant(&call.tenant)
        .call_id(&call.call_id)
        .tool(&call.tool)
        .label("status", call.status.as_str())
        .attempt(call.attempt)
        .flag("replayed", replayed)
        .flag("duplicate_intent", duplicate_intent)
        .flag("by_content", by_content)
        .emit();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn the_key_comes_from_meta_or_params_or_is_made_fresh() {
        let meta = params(json!({"_meta": {META_IDEMPOTENCY_KEY: "k1"}}));
        assert_eq!(idempotency_key(&meta).unwrap().as_deref(), Some("k1"));
        let sep = params(json!({"idempotencyKey": "k2"}));
        assert_eq!(idempotency_key(&sep).unwrap().as_deref(), Some("k2"));
        let both = params(json!({"_meta": {META_IDEMPOTENCY_KEY: "k1"}, "idempotencyKey": "k1"}));
        assert_eq!(idempotency_key(&both).unwrap().as_deref(), Some("k1"));
        let differ = params(json!({"_meta": {META_IDEMPOTENCY_KEY: "k1"}, "idempotencyKey": "k2"}));
        assert_eq!(idempotency_key(&differ).unwrap_err().0, INVALID_PARAMS);
        for bad in [
            json!(""),
            json!(5),
            json!("has space"),
            json!("x".repeat(256)),
        ] {
            let p = params(json!({ "idempotencyKey": bad }));
            assert!(idempotency_key(&p).is_err(), "{bad}");
        }
        assert_eq!(idempotency_key(&Map::new()).unwrap(), None);
        let (a, b) = (fresh_key(), fresh_key());
        assert!(a.starts_with("mcp-") && a.len() == 36 && a != b);
    }
}
