//! A call as MCP's `CallToolResult`, for `tools/call` answered in the call
//! and for a completed task's inlined result: the call's state as JSON text
//! and `structuredContent` (`"mcp_result": "outcome"`, every tool's default),
//! or the tool's own result as the content (`"mcp_result": "content"`), the
//! state then under `_meta[META_CALL]`. Either way `isError` when the call
//! failed or was cancelled, and a call deduplicated by its content says so.
//!
//! It decides nothing about the call and reads nothing: it only renders.

use super::handshake::Revision;
use super::tools_call::outcome;
use crate::store::{Call, Status};
use crate::tools::{McpResult, ToolSpec};
use serde_json::{json, Value};

/// The `_meta` key a `content` tool's call state is put under.
pub const META_CALL: &str = "dev.idempotent-tool/call";

/// How the request found its call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Marks {
    /// An existing call's outcome: nothing ran again.
    pub replayed: bool,
    /// Another key's call holding the same business key.
    pub duplicate_intent: bool,
    /// The key was derived from the tool and arguments (a keyless call,
    /// `content` policy).
    pub by_content: bool,
}

/// The `CallToolResult` for `call` of `spec` (absent: a tool no longer in
/// the tools file, rendered as an outcome).
pub fn tool_result(
    call: &Call,
    spec: Option<&ToolSpec>,
    marks: Marks,
    revision: Revision,
) -> Value {
    let mut answer = outcome(call, marks.replayed, marks.duplicate_intent, revision);
    if marks.by_content {
        mark_by_content(&mut answer);
    }
    match spec.map(|s| s.mcp.result) {
        Some(McpResult::Content) => as_content(call, answer),
        _ => answer,
    }
}

/// `"key_source": "content"` in the state, as text and as structure.
fn mark_by_content(answer: &mut Value) {
    let text = answer["content"][0]["text"].as_str().unwrap_or_default();
    if let Ok(mut state) = serde_json::from_str::<Value>(text) {
        state["key_source"] = "content".into();
        answer["content"][0]["text"] = state.to_string().into();
    }
    if let Some(state) = answer.get_mut("structuredContent") {
        state["key_source"] = "content".into();
    }
}

/// The tool's result as the content, the state under `_meta`.
fn as_content(call: &Call, answer: Value) -> Value {
    let text = answer["content"][0]["text"].as_str().unwrap_or_default();
    let mut state = serde_json::from_str::<Value>(text).unwrap_or(Value::Null);
    if let Some(object) = state.as_object_mut() {
        object.remove("result");
    }
    let content = match call.status {
        Status::Succeeded => result_content(call.result.as_ref().unwrap_or(&Value::Null)),
        Status::Failed | Status::Cancelled | Status::Denied => {
            let error = call.error.clone().unwrap_or(Value::Null);
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .map_or_else(|| error.to_string(), str::to_string);
            vec![text_item(message)]
        }
        Status::Pending | Status::Running | Status::AwaitingApproval => vec![text_item(format!(
            "call {} is {}; read it with get_tool_call or re-send the same key",
            call.call_id,
            call.status.as_str()
        ))],
    };
    json!({
        "content": content,
        "isError": answer["isError"],
        "_meta": {META_CALL: state},
    })
}

/// A result as content items: a string is one text item; an object with a
/// `content` array is taken as it is; anything else is its JSON as text.
fn result_content(result: &Value) -> Vec<Value> {
    match result {
        Value::String(text) => vec![text_item(text.clone())],
        Value::Object(object) => match object.get("content") {
            Some(Value::Array(items)) if !items.is_empty() => items.clone(),
            _ => vec![text_item(result.to_string())],
        },
        other => vec![text_item(other.to_string())],
    }
}

fn text_item(text: String) -> Value {
    json!({"type": "text", "text": text})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_becomes_content_items() {
        assert_eq!(result_content(&json!("hi")), vec![text_item("hi".into())]);
        let items = json!({"content": [{"type": "image", "data": "x", "mimeType": "image/png"}]});
        assert_eq!(result_content(&items)[0]["type"], "image");
        assert_eq!(result_content(&json!({"a": 1}))[0]["text"], "{\"a\":1}");
        assert_eq!(result_content(&json!(3))[0]["text"], "3");
    }
}
