//! `tools/list`: every tool this server runs (the built-ins or the tools
//! file) plus the MCP-only `get_tool_call`, each with its input schema, the
//! output schema of the `structuredContent` every call answers with, and
//! honest annotations — `idempotentHint` is true only where a repeat cannot
//! add an effect (a tool with a business key, and `get_tool_call`, which
//! reads) — and in `_meta` its business-key rule and approval policy.
//! Pages of `PAGE_SIZE` tools, with an opaque cursor. A paused tool is
//! still listed (its calls are accepted and wait), marked paused
//! (`mark_paused`).
//!
//! It never reveals a URL, argv, header or env value (only what
//! `GET /v1/tools` shows), and never runs anything.

use super::handshake::Revision;
use crate::calls::MAX_WAIT_SECS;
use crate::status::Status;
use crate::store::PausedTool;
use crate::tools::schema::Schema;
use crate::tools::{ArgsError, Keyless, McpResult, TaskSupport, ToolRegistry, ToolSpec};
use serde_json::{json, Map, Value};
use std::sync::{Arc, OnceLock};

/// The MCP-only tool that reads a call by id.
pub const GET_TOOL_CALL: &str = "get_tool_call";
/// Tools per `tools/list` page.
pub const PAGE_SIZE: usize = 50;
/// The `_meta` key under which a tool's business-key rule is shown.
pub const META_BUSINESS_KEY: &str = "dev.idempotent-tool/business-key";
/// The `_meta` key under which a tool's keyless policy is shown.
pub const META_KEYLESS: &str = "dev.idempotent-tool/keyless";
/// The `_meta` key under which a tool's approval policy is shown.
pub const META_APPROVAL: &str = "dev.idempotent-tool/approval";
/// The `_meta` key under which a paused tool's pause is shown.
pub const META_PAUSED: &str = "dev.idempotent-tool/paused";

/// `page` with each paused tool (`paused` says which: its pause, if it is
/// one) marked: its pause under `_meta`, and its description saying what a
/// call of it does now.
pub fn mark_paused(mut page: Value, paused: impl Fn(&str) -> Option<PausedTool>) -> Value {
    for tool in page["tools"].as_array_mut().into_iter().flatten() {
        let Some(pause) = tool["name"].as_str().and_then(&paused) else {
            continue;
        };
        if !tool["_meta"].is_object() {
            tool["_meta"] = json!({});
        }
        tool["_meta"][META_PAUSED] = pause.to_json();
        let note = " Paused by an operator now: a call is accepted and waits (pending) until the tool is resumed.";
        if let Some(text) = tool["description"].as_str() {
            tool["description"] = format!("{text}{note}").into();
        }
    }
    page
}

/// The schema of every `tools/call` answer's `structuredContent`.
pub fn output_schema() -> Value {
    json!({
        "type": "object",
        "required": ["call_id", "idempotency_key", "status", "attempt", "replayed"],
        "properties": {
            "call_id": {"type": "string", "description": "the call's handle: get_tool_call reads it"},
            "idempotency_key": {"type": "string"},
            "status": {"type": "string", "enum": Status::words().collect::<Vec<_>>()},
            "attempt": {"type": "integer", "minimum": 0},
            "replayed": {"type": "boolean", "description": "true: an existing call's outcome, nothing ran again"},
            "duplicate_intent": {"type": "boolean", "description": "true: another key's call with the same business key"},
            "result": {"description": "the tool's result, when status is succeeded"},
            "error": {"type": "object", "description": "why it failed, when status is failed; {code: cancelled, message: the reason} when cancelled"},
            "cancel_requested_at": {"type": "number", "description": "Unix time its cancel was asked (POST /v1/tool-calls/{call_id}/cancel); absent if never"},
            "key_source": {"type": "string", "enum": ["content"], "description": "content: the client sent no key, and the call is the one its tool and arguments name within the content window"}
        }
    })
}

/// A `tools/list` cursor this server cannot continue from (an
/// `invalid params` error; its text is the JSON-RPC message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CursorError {
    /// Not of the form this server issues (`tools:N`); the cursor as given.
    NotIssued(String),
    /// Beyond the last tool (the list shrank, or the cursor was made up).
    PastTheEnd,
}

impl std::fmt::Display for CursorError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CursorError::NotIssued(cursor) => write!(
                f,
                "cursor {} was not issued by this server",
                crate::input::quote(cursor)
            ),
            CursorError::PastTheEnd => f.write_str("cursor is past the end of the list"),
        }
    }
}

impl std::error::Error for CursorError {}

/// One page of the list, from `cursor` (`None`: the first page).
pub fn list(
    registry: &ToolRegistry,
    revision: Revision,
    cursor: Option<&str>,
    keyless_flag: Option<Keyless>,
) -> Result<Value, CursorError> {
    let start = match cursor {
        None => 0,
        Some(c) => c
            .strip_prefix("tools:")
            .and_then(|n| n.parse::<usize>().ok())
            .ok_or_else(|| CursorError::NotIssued(c.to_string()))?,
    };
    // A tool only a client with tasks can call goes last: a client that
    // tries "the first tool" then finds one it can call. Still one fixed order.
    let (open, task_only): (Vec<&Arc<ToolSpec>>, Vec<&Arc<ToolSpec>>) = registry
        .specs()
        .filter(|spec| spec.name != GET_TOOL_CALL)
        .partition(|spec| spec.mcp.tasks != TaskSupport::Required);
    let mut all: Vec<Value> = open
        .into_iter()
        .chain(task_only)
        .map(|spec| describe(spec, revision, keyless_flag))
        .collect();
    all.push(get_tool_call(revision));
    if start > all.len() {
        return Err(CursorError::PastTheEnd);
    }
    let end = (start + PAGE_SIZE).min(all.len());
    let mut page = json!({"tools": all[start..end].to_vec()});
    if end < all.len() {
        page["nextCursor"] = format!("tools:{end}").into();
    }
    if revision.is_stateless() {
        page["ttlMs"] = 0.into();
        page["cacheScope"] = "private".into();
    }
    Ok(page)
}

fn describe(spec: &ToolSpec, revision: Revision, keyless_flag: Option<Keyless>) -> Value {
    let facing = &spec.agent;
    let mut annotations = json!({
        "readOnlyHint": facing.read_only,
        "destructiveHint": facing.destructive,
        "idempotentHint": spec.business_key.is_some(),
        "openWorldHint": facing.open_world,
    });
    if let Some(title) = &facing.title {
        annotations["title"] = title.clone().into();
    }
    let mut tool = json!({
        "name": spec.name,
        "description": description(spec),
        "inputSchema": spec.input_schema,
        "annotations": annotations,
    });
    let keyless = super::keyless::effective(spec, keyless_flag);
    tool["_meta"] = json!({ META_KEYLESS: keyless.as_str() });
    if let Some(rule) = &spec.business_key {
        tool["_meta"][META_BUSINESS_KEY] = rule.public_view();
    }
    if let Some(policy) = &spec.approval {
        tool["_meta"][META_APPROVAL] = policy.public_view();
    }
    if revision.is_stateless() {
        tool["execution"] = json!({"taskSupport": spec.mcp.tasks.as_str()});
    }
    if revision.has_structured_output() {
        if spec.mcp.result == McpResult::Outcome {
            tool["outputSchema"] = output_schema();
        }
        if let Some(title) = &facing.title {
            tool["title"] = title.clone().into();
        }
    }
    tool
}

/// The configured description, plus what a caller must know about retries.
fn description(spec: &ToolSpec) -> String {
    let mut text = spec.agent.description.clone();
    if !text.is_empty() {
        text.push(' ');
    }
    text.push_str("Runs at most once per idempotency key; a call still running answers its call_id for get_tool_call.");
    if let Some(rule) = &spec.business_key {
        text.push_str(&format!(
            " At most one live call per ({}) within {} s.",
            rule.fields.join(", "),
            rule.window_secs
        ));
    }
    if spec.approval.is_some() {
        text.push_str(
            " A call may need a person's approval first: it then answers status \
             awaiting_approval with its call_id, and runs once approved (denied: status denied).",
        );
    }
    text
}

/// Every tool name `tools/list` shows, in its order.
pub fn names(registry: &ToolRegistry) -> Vec<&str> {
    let mut names: Vec<&str> = registry
        .specs()
        .map(|spec| spec.name.as_str())
        .filter(|name| *name != GET_TOOL_CALL)
        .collect();
    names.push(GET_TOOL_CALL);
    names
}

/// `get_tool_call`'s arguments: what `tools/list` shows, and what
/// `check_get_tool_call` holds them to.
fn get_tool_call_schema() -> Value {
    json!({
        "type": "object",
        "required": ["call_id"],
        "properties": {
            "call_id": {"type": "string"},
            "wait_secs": {"type": "number", "minimum": 0, "maximum": MAX_WAIT_SECS}
        },
        "additionalProperties": false
    })
}

/// Hold `get_tool_call`'s arguments to the schema it advertises.
pub fn check_get_tool_call(arguments: &Map<String, Value>) -> Result<(), ArgsError> {
    static SCHEMA: OnceLock<Schema> = OnceLock::new();
    SCHEMA
        .get_or_init(|| Schema::compile(&get_tool_call_schema()).expect("a valid 2020-12 schema"))
        .check(arguments)
}

fn get_tool_call(revision: Revision) -> Value {
    let mut tool = json!({
        "name": GET_TOOL_CALL,
        "description": "Read a call's current state by its call_id (the handle every tools/call answers with). \
    Optionally wait up to wait_secs for it to settle. Never runs anything.",
        "inputSchema": get_tool_call_schema(),
        "annotations": {
            "readOnlyHint": true,
            "destructiveHint": false,
            "idempotentHint": true,
            "openWorldHint": false
        }
    });
    if revision.has_structured_output() {
        tool["outputSchema"] = output_schema();
    }
    tool
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_is_listed_with_its_contract_and_the_handle_reader_last() {
        let registry = ToolRegistry::builtins();
        let page = list(&registry, Revision::V2025_11_25, None, None).unwrap();
        let names: Vec<&str> = page["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            ["charge", "fail", "send_email", "sleep", GET_TOOL_CALL]
        );
        let charge = &page["tools"][0];
        assert_eq!(charge["annotations"]["idempotentHint"], false);
        assert_eq!(charge["outputSchema"]["type"], "object");
        assert!(page.get("nextCursor").is_none());
        let old = list(&registry, Revision::V2025_03_26, None, None).unwrap();
        assert!(old["tools"][0].get("outputSchema").is_none());
        assert_eq!(
            list(&registry, Revision::V2025_03_26, Some("nope"), None),
            Err(CursorError::NotIssued("nope".into()))
        );
        assert_eq!(
            list(&registry, Revision::V2025_03_26, Some("tools:99"), None),
            Err(CursorError::PastTheEnd)
        );
    }
}
