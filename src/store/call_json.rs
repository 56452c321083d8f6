//! A call as the API shows it: `Call::to_json` (the tree) and
//! `Call::write_json` (the same text written straight, without the tree,
//! for the answers every `POST` renders), held byte for byte to each other
//! by `api::answer`'s test.

use super::model::Call;
use serde_json::{json, Value};

impl Call {
    /// The JSON the API returns.
    pub fn to_json(&self) -> Value {
        json!({
            "call_id": self.call_id,
            "idem_key": self.idem_key,
            "tool": self.tool,
            "args": serde_json::from_str::<Value>(&self.args_json).unwrap_or(Value::Null),
            "client_id": self.client_id,
            "seq": self.seq,
            "status": self.status.as_str(),
            "attempt": self.attempt,
            "result": self.result,
            "error": self.error,
            "effect_id": self.effect_id,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "query_url": self.url(),
            "expires_at": self.expires_at,
            "next_attempt_at": self.next_attempt_at,
            "cancel_requested_at": self.cancel_requested_at,
            "lease_until": self.lease_until,
        })
    }

    /// The bytes of `to_json()` as text, written without building the tree
    /// (every answer to a `POST` renders a call, and the tree and its text
    /// were a tenth of a connection thread's CPU: docs/performance.md). With
    /// the two members an answer may add, each in its sorted place, as the
    /// tree would put it: `duplicate_intent` (only when true), `progress`
    /// and `waiting_for`.
    pub fn write_json(
        &self,
        out: &mut Vec<u8>,
        duplicate_intent: bool,
        progress: Option<&Value>,
        waiting_for: Option<&str>,
    ) {
        let args = serde_json::from_str::<Value>(&self.args_json).unwrap_or(Value::Null);
        let mut member = JsonMembers::new(out);
        member.value("args", &args);
        member.value("attempt", &self.attempt);
        member.value("call_id", &self.call_id);
        member.value("cancel_requested_at", &self.cancel_requested_at);
        member.value("client_id", &self.client_id);
        member.value("created_at", &self.created_at);
        if duplicate_intent {
            member.value("duplicate_intent", &true);
        }
        member.value("effect_id", &self.effect_id);
        member.value("error", &self.error);
        member.value("expires_at", &self.expires_at);
        member.value("idem_key", &self.idem_key);
        member.value("lease_until", &self.lease_until);
        member.value("next_attempt_at", &self.next_attempt_at);
        if let Some(progress) = progress {
            member.value("progress", progress);
        }
        member.value("query_url", &self.url());
        member.value("result", &self.result);
        member.value("seq", &self.seq);
        member.value("status", self.status.as_str());
        member.value("tool", &self.tool);
        member.value("updated_at", &self.updated_at);
        if let Some(waiting_for) = waiting_for {
            member.value("waiting_for", waiting_for);
        }
        member.out.push(b'}');
    }
}

/// The members of one JSON object being written: `{` before the first, `,`
/// before each next one.
struct JsonMembers<'a> {
    out: &'a mut Vec<u8>,
    first: bool,
}

impl<'a> JsonMembers<'a> {
    fn new(out: &'a mut Vec<u8>) -> JsonMembers<'a> {
        out.push(b'{');
        JsonMembers { out, first: true }
    }

    fn key(&mut self, key: &str) {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        self.out.push(b'"');
        self.out.extend_from_slice(key.as_bytes());
        self.out.extend_from_slice(b"\":");
    }

    /// `key` and `value` as serde_json writes them (a non-finite number as
    /// `null`, strings escaped alike). Writing into a `Vec` cannot fail.
    fn value(&mut self, key: &str, value: &(impl serde::Serialize + ?Sized)) {
        self.key(key);
        let _ = serde_json::to_writer(&mut *self.out, value);
    }
}
