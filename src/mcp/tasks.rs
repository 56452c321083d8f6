//! Tasks (the `io.modelcontextprotocol/tasks` extension, SEP-2663): a
//! `tools/call` that answers a task instead of its result, and the methods
//! that read and cancel one (`tasks/get`, `tasks/update`, `tasks/cancel`);
//! `listen` pushes the same `DetailedTask` as status notifications.
//!
//! The task **is the call**: its `taskId` is the call's id, so any process on
//! the database answers for it, after a restart, a `kill -9` or a new MCP
//! session; its status is the call's, mapped in one place (`task_status`);
//! its result is the call's, inlined in `tasks/get`; its `ttlMs` is the
//! key's retention (`--key-ttl`); `tasks/cancel` is the service's fenced
//! cancel. Creating one is idempotent because creating a call is: the same
//! key names the same call, so the same task.
//!
//! It never runs a tool, never keeps a task anywhere but in the call record,
//! and never shows another tenant's call: an id the tenant has no call for is
//! `-32602`, exactly like one that never existed.

use super::approval_input::{self, Answer, Asker};
use super::call_result::tool_result;
use super::endpoint::Mcp;
use super::handshake::{Revision, META_CLIENT_CAPABILITIES, TASKS_EXTENSION};
use super::jsonrpc::{INTERNAL_ERROR, INVALID_PARAMS, MISSING_CAPABILITY};
use super::tools_call::RpcError;
use crate::auth::Tenant;
use crate::calls::CancelAnswer;
use crate::log::Exchange;
use crate::rfc3339::rfc3339_millis;
use crate::store::{Call, Status};
use crate::tools::{TaskSupport, ToolSpec};
use serde_json::{json, Map, Value};
use std::time::{Duration, UNIX_EPOCH};

/// How often a client is asked to poll `tasks/get`.
pub const POLL_INTERVAL_MS: u64 = 1_000;

/// A task's status, as the extension names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskStatus {
    Working,
    /// Waiting for the client: a call awaiting an approval its client may
    /// give (`approval_input`).
    InputRequired,
    Completed,
    Failed,
    Cancelled,
}

impl TaskStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Working => "working",
            TaskStatus::InputRequired => "input_required",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }
}

/// The one mapping from a call to its task's status. A tool that ran and
/// answered a failure is `completed` (its result says `isError`); a failure
/// the tool never answered (killed, timed out, unreachable, not started) is
/// `failed`, the extension's protocol-level error. A call awaiting approval
/// is `input_required` where its client is asked for the decision
/// (`asks_client`; `approval_input` says where it may be), and otherwise
/// works on while a person decides, out of band. A new call status gets its
/// arm here and nowhere else.
pub fn task_status(call: &Call, asks_client: bool) -> TaskStatus {
    match call.status {
        Status::AwaitingApproval if asks_client => TaskStatus::InputRequired,
        // A denial is an answer (its result says `isError`, `approval_denied`).
        Status::Pending | Status::Running | Status::AwaitingApproval => TaskStatus::Working,
        Status::Succeeded | Status::Denied => TaskStatus::Completed,
        Status::Failed if tool_answered(call) => TaskStatus::Completed,
        Status::Failed => TaskStatus::Failed,
        Status::Cancelled => TaskStatus::Cancelled,
    }
}

/// Whether a failed call's error is the tool's own answer (it ran and said
/// no), rather than the service failing to get one.
fn tool_answered(call: &Call) -> bool {
    let code = call
        .error
        .as_ref()
        .and_then(|e| e.get("code"))
        .and_then(Value::as_str);
    matches!(
        code,
        Some(
            "tool_failed"
                | "bad_args"
                | "downstream_rejected"
                | "downstream_error"
                | "command_failed"
                | "command_tempfail"
        )
    )
}

/// Whether this request's client declared the extension (2026-07-28: in
/// each request's `_meta`; the handshake revisions keep no session, so
/// never).
pub fn negotiated(revision: Revision, params: &Map<String, Value>) -> bool {
    revision.is_stateless()
        && declared(params)
            .and_then(|c| c.get("extensions"))
            .and_then(|e| e.get(TASKS_EXTENSION))
            .is_some()
}

/// The client capabilities a stateless request declares.
pub fn declared(params: &Map<String, Value>) -> Option<&Value> {
    params.get("_meta")?.get(META_CLIENT_CAPABILITIES)
}

/// `-32021`: the request needs capabilities its client did not declare;
/// `data.requiredCapabilities` names them as `ClientCapabilities` does.
pub fn missing_capability(required: Value) -> RpcError {
    (
        MISSING_CAPABILITY,
        "Missing required client capability".into(),
        Some(json!({"requiredCapabilities": required})),
    )
}

/// `-32021` naming the tasks extension.
pub fn missing_extension() -> RpcError {
    missing_capability(json!({"extensions": {TASKS_EXTENSION: {}}}))
}

/// How a 2026-07-28 `tools/call` of `spec` is answered: as a task (the client
/// negotiated tasks and the tool supports them) or in the call itself; or
/// refused `-32021` (the tool requires a task, or a client capability the
/// request does not declare). The handshake revisions are always answered in
/// the call, as before tasks existed.
pub fn answers_as_task(
    spec: &ToolSpec,
    revision: Revision,
    params: &Map<String, Value>,
) -> Result<bool, RpcError> {
    if !revision.is_stateless() {
        return Ok(false);
    }
    let capabilities = declared(params);
    let lacking: Map<String, Value> = spec
        .mcp
        .client_capabilities
        .iter()
        .filter(|(name, _)| capabilities.and_then(|c| c.get(name.as_str())).is_none())
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    if !lacking.is_empty() {
        return Err(missing_capability(Value::Object(lacking)));
    }
    let negotiated = negotiated(revision, params);
    match spec.mcp.tasks {
        TaskSupport::Forbidden => Ok(false),
        TaskSupport::Optional => Ok(negotiated),
        TaskSupport::Required if negotiated => Ok(true),
        TaskSupport::Required => Err(missing_extension()),
    }
}

/// The task's own fields: id, status, times, lifetime, polling.
/// `asks_client`: a call awaiting approval puts it to its client.
fn envelope(mcp: &Mcp, call: &Call, asks_client: bool) -> Value {
    let ttl_ms = mcp
        .options
        .key_ttl
        .map(|ttl| Value::from(ttl.as_millis().max(1) as u64))
        .unwrap_or(Value::Null);
    let mut task = json!({
        "taskId": call.call_id,
        "status": task_status(call, asks_client).as_str(),
        "createdAt": iso(call.created_at),
        "lastUpdatedAt": iso(call.updated_at),
        "ttlMs": ttl_ms,
        "pollIntervalMs": POLL_INTERVAL_MS,
    });
    if let Some(message) = status_message(call, asks_client) {
        task["statusMessage"] = message.into();
    }
    task
}

/// What a person reads about the task's state.
fn status_message(call: &Call, asks_client: bool) -> Option<String> {
    match call.status {
        Status::AwaitingApproval if asks_client => Some(
            "waiting for approval: answer the input request, or a person with the approver \
             role decides"
                .into(),
        ),
        Status::AwaitingApproval => Some("waiting for a person's approval".into()),
        Status::Pending if call.attempt > 0 => {
            Some(format!("waiting to retry after attempt {}", call.attempt))
        }
        Status::Pending => Some("waiting for a worker".into()),
        Status::Running if call.cancel_requested_at.is_some() => Some("being cancelled".into()),
        Status::Running => Some(match crate::calls::last_progress(call) {
            Some(report) => progress_message(&report),
            None => format!("running, attempt {}", call.attempt),
        }),
        _ => None,
    }
}

/// The last progress its tool reported (on whichever node runs it), as a
/// sentence.
fn progress_message(report: &crate::store::CallProgress) -> String {
    let done = match report.total {
        Some(total) => format!("{} of {total}", report.progress),
        None => report.progress.to_string(),
    };
    match &report.message {
        Some(message) => format!("{message} ({done})"),
        None => done,
    }
}

fn iso(unix_secs: f64) -> String {
    rfc3339_millis(UNIX_EPOCH + Duration::from_secs_f64(unix_secs.max(0.0)))
}

/// `tools/call`'s answer when it made (or found) a task: a flat
/// `CreateTaskResult`, never the result nor the input requests (those are
/// `tasks/get`'s).
pub fn created(mcp: &Mcp, call: &Call, asker: &Asker) -> Result<Value, RpcError> {
    let asks_client = approval_input::input_requests(mcp, asker, call)?.is_some();
    let mut task = envelope(mcp, call, asks_client);
    task["resultType"] = "task".into();
    Ok(task)
}

/// The task id of a `tasks/*` request, or `-32602`.
fn task_id(params: &Map<String, Value>) -> Result<&str, RpcError> {
    params.get("taskId").and_then(Value::as_str).ok_or_else(|| {
        (
            INVALID_PARAMS,
            "params.taskId (a string) is required".into(),
            None,
        )
    })
}

fn unknown(task_id: &str) -> RpcError {
    (
        INVALID_PARAMS,
        format!("Unknown task: {}", crate::input::quote(task_id)),
        None,
    )
}

/// The tenant's call named by `params.taskId` (the extension negotiated).
fn the_call(
    mcp: &Mcp,
    tenant: &Tenant,
    revision: Revision,
    params: &Map<String, Value>,
    exchange: &mut Exchange,
) -> Result<Call, RpcError> {
    if !negotiated(revision, params) {
        return Err(missing_extension());
    }
    let id = task_id(params)?;
    match mcp.calls.get(&tenant.name, id) {
        Ok(Some(call)) => {
            exchange.call_id = Some(call.call_id.clone());
            Ok(call)
        }
        Ok(None) => Err(unknown(id)),
        Err(e) => Err(super::tools_call::store_failure(e)),
    }
}

/// `tasks/get`: the task, with the call's result inlined once `completed`
/// or its error once `failed`.
pub fn get(
    mcp: &Mcp,
    tenant: &Tenant,
    revision: Revision,
    params: &Map<String, Value>,
    exchange: &mut Exchange,
) -> Result<Value, RpcError> {
    let call = the_call(mcp, tenant, revision, params, exchange)?;
    detailed(mcp, &call, revision, &Asker::of(tenant, params))
}

/// The task as `tasks/get` and `notifications/tasks` show it (the
/// extension's `DetailedTask`): its envelope, with the call's result inlined
/// once `completed` or its error once `failed`, and the input requests
/// it waits on once `input_required`.
pub fn detailed(
    mcp: &Mcp,
    call: &Call,
    revision: Revision,
    asker: &Asker,
) -> Result<Value, RpcError> {
    let input = approval_input::input_requests(mcp, asker, call)?;
    let mut task = envelope(mcp, call, input.is_some());
    match task_status(call, input.is_some()) {
        TaskStatus::Completed => {
            let spec = mcp.calls.tools().get(&call.tool).map(|s| &**s);
            task["result"] = tool_result(call, spec, Default::default(), revision);
        }
        TaskStatus::Failed => task["error"] = failure(call),
        TaskStatus::InputRequired => task["inputRequests"] = input.unwrap_or_default(),
        _ => {}
    }
    Ok(task)
}

/// A protocol-level failure as a JSON-RPC error object: the call's error
/// (its code string, message, retryability) as `data`.
fn failure(call: &Call) -> Value {
    let error = call.error.clone().unwrap_or(Value::Null);
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("the tool did not answer")
        .to_string();
    json!({"code": INTERNAL_ERROR, "message": message, "data": error})
}

/// `tasks/cancel`: the call's fenced cancel (a pending call never runs; a
/// running one's tool is stopped, and whatever ends it short of a success
/// makes it `cancelled`). The answer is the empty ack whatever the task
/// was, settled included; its state is `tasks/get`'s to tell.
pub fn cancel(
    mcp: &Mcp,
    tenant: &Tenant,
    revision: Revision,
    params: &Map<String, Value>,
    exchange: &mut Exchange,
) -> Result<Value, RpcError> {
    if !negotiated(revision, params) {
        return Err(missing_extension());
    }
    let id = task_id(params)?;
    let reason = Some("tasks/cancel");
    match mcp
        .calls
        .cancel(&tenant.name, id, reason, Duration::ZERO, || false)
    {
        Ok(CancelAnswer::NotFound) => Err(unknown(id)),
        Ok(_) => {
            exchange.call_id = Some(id.to_string());
            Ok(json!({}))
        }
        Err(e) => Err(super::tools_call::store_failure(e)),
    }
}

/// `tasks/update`: input for a task waiting on its client — the answer to
/// its approval request, recorded as the client's decision where it may
/// give one (`approval_input`), and refused (`-32602`) where a person
/// must. Answers to keys it never asked are ignored. The ack is empty; the
/// task's state is `tasks/get`'s to tell. An unknown task is `-32602`.
pub fn update(
    mcp: &Mcp,
    tenant: &Tenant,
    revision: Revision,
    params: &Map<String, Value>,
    exchange: &mut Exchange,
) -> Result<Value, RpcError> {
    let call = the_call(mcp, tenant, revision, params, exchange)?;
    let answer = Answer::of(params)?;
    approval_input::apply(mcp, tenant, call, answer)?;
    Ok(json!({}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(status: Status, code: Option<&str>) -> Call {
        Call {
            call_id: "c_1".into(),
            tenant: "t".into(),
            idem_key: "k".into(),
            fingerprint: "f".into(),
            client_id: None,
            seq: None,
            tool: "x".into(),
            args_json: "{}".into(),
            status,
            result: None,
            error: code.map(|c| json!({"code": c, "message": "m"})),
            attempt: 1,
            lease_until: None,
            owner: None,
            effect_id: "e".into(),
            created_at: 1.0,
            updated_at: 2.0,
            expires_at: None,
            next_attempt_at: None,
            cancel_requested_at: None,
            progress: None,
        }
    }

    #[test]
    fn a_call_maps_to_one_task_status() {
        let cases = [
            (Status::Pending, None, "working"),
            (Status::Running, None, "working"),
            (Status::Succeeded, None, "completed"),
            (Status::Failed, Some("command_failed"), "completed"),
            (Status::Failed, Some("tool_failed"), "completed"),
            (Status::Failed, Some("command_killed"), "failed"),
            (Status::Failed, Some("downstream_unavailable"), "failed"),
            (Status::Failed, None, "failed"),
            (Status::Cancelled, None, "cancelled"),
            (Status::AwaitingApproval, None, "working"),
            (Status::Denied, None, "completed"),
        ];
        for (status, code, want) in cases {
            assert_eq!(
                task_status(&call(status, code), false).as_str(),
                want,
                "{status:?} {code:?}"
            );
        }
        // Only a call awaiting approval waits on its client when asked.
        for status in [Status::Pending, Status::Running, Status::Succeeded] {
            assert_ne!(
                task_status(&call(status, None), true),
                TaskStatus::InputRequired
            );
        }
        assert_eq!(
            task_status(&call(Status::AwaitingApproval, None), true),
            TaskStatus::InputRequired
        );
    }

    #[test]
    fn tasks_are_negotiated_per_request_under_the_stateless_revision_only() {
        let with =
            json!({"_meta": {META_CLIENT_CAPABILITIES: {"extensions": {TASKS_EXTENSION: {}}}}});
        let with = with.as_object().unwrap();
        assert!(negotiated(Revision::V2026_07_28, with));
        assert!(!negotiated(Revision::V2025_11_25, with));
        let without = json!({"_meta": {META_CLIENT_CAPABILITIES: {}}});
        assert!(!negotiated(
            Revision::V2026_07_28,
            without.as_object().unwrap()
        ));
    }
}
