//! `RunContext`: everything one attempt knows about its call — the contract
//! between the runner and every executor, and the request body an `http`
//! downstream receives and a `command` reads on stdin.
//!
//! A leaf: it imports nothing of `tools` but `stop`.

use super::stop::Stop;
use serde_json::{json, Map, Value};

/// Everything one attempt knows about its call. The same five fields (and
/// `inputs`, for a tool whose approval asks its MCP client questions) are the
/// JSON body an `http` downstream receives and a `command` reads on stdin.
#[derive(Debug, Clone, Copy)]
pub struct RunContext<'a> {
    pub call_id: &'a str,
    /// The call's downstream idempotency key: the same on every attempt.
    pub effect_id: &'a str,
    /// 1-based attempt number.
    pub attempt: i64,
    pub tool: &'a str,
    /// The validated args, chaos hooks removed.
    pub args: &'a Map<String, Value>,
    /// The answers its approval's questions were given, by key (`None`:
    /// its tool's policy asks none of its own).
    pub inputs: Option<&'a Map<String, Value>>,
    /// How the runner stops this attempt when its call is cancelled; `None`
    /// for a run nothing can cancel (a test's).
    pub stop: Option<&'a Stop>,
}

impl RunContext<'_> {
    /// `{"call_id", "effect_id", "attempt", "tool", "args"}`, and
    /// `"inputs"` when the call has them.
    pub fn request_body(&self) -> Value {
        let mut body = json!({
            "call_id": self.call_id,
            "effect_id": self.effect_id,
            "attempt": self.attempt,
            "tool": self.tool,
            "args": self.args,
        });
        if let Some(inputs) = self.inputs {
            body["inputs"] = Value::Object(inputs.clone());
        }
        body
    }
}
