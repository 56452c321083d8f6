//! What a tool tells MCP clients beyond its schema, read from the tools
//! file: whether it runs as a task (`"tasks"`), what a `tools/call` without
//! an idempotency key means for it (`"keyless"`), whether its result is the
//! MCP content itself (`"mcp_result"`), and which client capabilities a call
//! needs (`"client_capabilities"`).
//!
//! It owns reading those fields and their defaults. It never decides an
//! answer: the MCP endpoint (`mcp::tools_call`, `mcp::tasks`) does.

use super::file_error::{field_error, FieldError};
use super::spec::Kind;
use serde_json::{Map, Value};

/// Whether a tool's `tools/call` may answer a task instead of its result
/// (the Tasks extension's `execution.taskSupport`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskSupport {
    /// Always answered in the call itself.
    Forbidden,
    /// A task when the client negotiated the extension, else the result.
    Optional,
    /// Only as a task: a client without the extension is refused `-32021`.
    Required,
}

impl TaskSupport {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskSupport::Forbidden => "forbidden",
            TaskSupport::Optional => "optional",
            TaskSupport::Required => "required",
        }
    }

    fn parse(text: &str) -> Option<TaskSupport> {
        [
            TaskSupport::Forbidden,
            TaskSupport::Optional,
            TaskSupport::Required,
        ]
        .into_iter()
        .find(|t| t.as_str() == text)
    }

    /// `http` and `command` tools may run long: tasks by default. A built-in
    /// only when it can (`sleep`).
    pub fn default_for(kind: Kind, name: &str) -> TaskSupport {
        match kind {
            Kind::Http | Kind::Command => TaskSupport::Optional,
            Kind::Builtin if name == "sleep" => TaskSupport::Optional,
            Kind::Builtin => TaskSupport::Forbidden,
        }
    }
}

/// What an MCP `tools/call` that names no idempotency key means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keyless {
    /// The same tenant, tool and canonical arguments within the content
    /// window are the same call (its key is derived from them).
    Content,
    /// A new key for each request: a re-sent call is a new call.
    Fresh,
    /// Refused as a tool error that says how to send a key.
    Reject,
}

impl Keyless {
    pub fn as_str(self) -> &'static str {
        match self {
            Keyless::Content => "content",
            Keyless::Fresh => "fresh",
            Keyless::Reject => "reject",
        }
    }

    pub fn parse(text: &str) -> Option<Keyless> {
        [Keyless::Content, Keyless::Fresh, Keyless::Reject]
            .into_iter()
            .find(|k| k.as_str() == text)
    }
}

/// How a call's outcome becomes MCP content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum McpResult {
    /// The call's state (`call_id`, `status`, `result`...) as JSON text and
    /// `structuredContent`: what every tool answered before.
    Outcome,
    /// The tool's result is the content: a string is one text item, an
    /// object with a `content` array is used as it is, anything else is its
    /// JSON as text. The call's state goes under `_meta`.
    Content,
}

/// A tool's MCP-facing policy.
#[derive(Debug, Clone, PartialEq)]
pub struct McpPolicy {
    pub tasks: TaskSupport,
    /// The tool's own (or its file's) keyless policy; `None`: the flag's,
    /// else `content` without a business key and `fresh` with one.
    pub keyless: Option<Keyless>,
    pub result: McpResult,
    /// Client capabilities a call needs (`{"sampling": {}}`): a client whose
    /// request does not declare each is refused `-32021`.
    pub client_capabilities: Map<String, Value>,
}

impl McpPolicy {
    pub fn default_for(kind: Kind, name: &str) -> McpPolicy {
        McpPolicy {
            tasks: TaskSupport::default_for(kind, name),
            keyless: None,
            result: McpResult::Outcome,
            client_capabilities: Map::new(),
        }
    }

    /// Read the four fields from a tool's entry (each optional);
    /// `file_keyless` is the file's top-level `"keyless"`, used when the
    /// tool names none.
    pub fn apply(
        &mut self,
        entry: &Map<String, Value>,
        file_keyless: Option<Keyless>,
    ) -> Result<(), FieldError> {
        if let Some(value) = entry.get("tasks") {
            self.tasks = value.as_str().and_then(TaskSupport::parse).ok_or_else(|| {
                field_error(
                    "tasks",
                    "must be \"forbidden\", \"optional\" or \"required\"",
                )
            })?;
        }
        self.keyless = match entry.get("keyless") {
            Some(value) => Some(parse_keyless("keyless", value)?),
            None => file_keyless,
        };
        if let Some(value) = entry.get("mcp_result") {
            self.result = match value.as_str() {
                Some("outcome") => McpResult::Outcome,
                Some("content") => McpResult::Content,
                _ => {
                    return Err(field_error(
                        "mcp_result",
                        "must be \"outcome\" or \"content\"",
                    ))
                }
            };
        }
        if let Some(value) = entry.get("client_capabilities") {
            let wanted = value
                .as_object()
                .filter(|o| o.values().all(Value::is_object));
            self.client_capabilities = wanted.cloned().ok_or_else(|| {
                field_error(
                    "client_capabilities",
                    "must be an object of capability objects, such as {\"sampling\": {}}",
                )
            })?;
        }
        Ok(())
    }
}

/// `"content"`, `"fresh"` or `"reject"` in `field`.
pub fn parse_keyless(field: &str, value: &Value) -> Result<Keyless, FieldError> {
    value
        .as_str()
        .and_then(Keyless::parse)
        .ok_or_else(|| field_error(field, "must be \"content\", \"fresh\" or \"reject\""))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn applied(entry: Value, file: Option<Keyless>) -> Result<McpPolicy, FieldError> {
        let mut policy = McpPolicy::default_for(Kind::Command, "t");
        policy.apply(entry.as_object().unwrap(), file)?;
        Ok(policy)
    }

    #[test]
    fn fields_are_read_with_their_defaults_and_refused_when_wrong() {
        let policy = applied(json!({}), None).unwrap();
        assert_eq!(policy.tasks, TaskSupport::Optional);
        assert_eq!((policy.keyless, policy.result), (None, McpResult::Outcome));
        assert_eq!(
            McpPolicy::default_for(Kind::Builtin, "charge").tasks,
            TaskSupport::Forbidden
        );
        let policy = applied(
            json!({"tasks": "required", "keyless": "reject", "mcp_result": "content",
                   "client_capabilities": {"sampling": {}}}),
            Some(Keyless::Fresh),
        )
        .unwrap();
        assert_eq!(policy.tasks, TaskSupport::Required);
        assert_eq!(policy.keyless, Some(Keyless::Reject));
        assert_eq!(policy.result, McpResult::Content);
        assert!(policy.client_capabilities.contains_key("sampling"));
        let inherited = applied(json!({}), Some(Keyless::Fresh)).unwrap();
        assert_eq!(inherited.keyless, Some(Keyless::Fresh));
        for (entry, field) in [
            (json!({"tasks": "always"}), "tasks"),
            (json!({"keyless": 1}), "keyless"),
            (json!({"mcp_result": "text"}), "mcp_result"),
            (
                json!({"client_capabilities": {"sampling": true}}),
                "client_capabilities",
            ),
        ] {
            let e = applied(entry, None).unwrap_err();
            assert_eq!(e.field.as_deref(), Some(field));
        }
    }
}
