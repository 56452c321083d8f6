//! The key of an MCP `tools/call` that sends none, by the tool's policy
//! (`"keyless"` in the tools file, else `--mcp-keyless`, else `content`
//! without a business key and `fresh` with one): `content` derives it from
//! the tool and canonical arguments within a window, `fresh` makes a new one,
//! `reject` refuses the call.
//!
//! A content key is `content-` + 32 hex of the call's fingerprint (SHA-256 of
//! canonical `{"tool", "args"}`, so per tool and arguments; keys are already
//! per tenant) + `-` + the window's number since the epoch. Its call then
//! dedupes exactly as a client's key does, by the unique key in the store,
//! whatever node or process the repeat reaches. A repeat early in a window
//! finds the previous window's call while that call is younger than the
//! window, so every call holds its content for one window from its creation,
//! not to a boundary. It never writes anything itself.

use super::endpoint::Mcp;
use crate::store::StoreError;
use crate::tools::{Keyless, ToolRegistry, ToolSpec};
use serde_json::{Map, Value};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where a call's idempotency key came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyOf {
    /// The client's (`_meta` or `params.idempotencyKey`).
    Sent(String),
    /// Derived from the tool and arguments (`content`).
    Content(String),
    /// New for this request (`fresh`).
    Fresh(String),
}

impl KeyOf {
    pub fn key(&self) -> &str {
        match self {
            KeyOf::Sent(k) | KeyOf::Content(k) | KeyOf::Fresh(k) => k,
        }
    }
}

/// The policy in force for `spec`'s keyless calls.
pub fn policy(mcp: &Mcp, spec: &ToolSpec) -> Keyless {
    effective(spec, mcp.options.keyless)
}

/// The tool's (or its file's) policy, else the flag's, else by whether it
/// has a business key.
pub fn effective(spec: &ToolSpec, flag: Option<Keyless>) -> Keyless {
    spec.mcp
        .keyless
        .or(flag)
        .unwrap_or(if spec.business_key.is_some() {
            Keyless::Fresh
        } else {
            Keyless::Content
        })
}

/// What the start-up line says of keyless calls: how many tools follow each
/// policy, and the content window (`keyless: content 3, fresh 1 (window 600s)`).
pub fn summary(registry: &ToolRegistry, flag: Option<Keyless>, window: Duration) -> String {
    let mut counts = [
        (Keyless::Content, 0),
        (Keyless::Fresh, 0),
        (Keyless::Reject, 0),
    ];
    for spec in registry.specs() {
        let policy = effective(spec, flag);
        if let Some(entry) = counts.iter_mut().find(|(p, _)| *p == policy) {
            entry.1 += 1;
        }
    }
    let named: Vec<String> = counts
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(policy, n)| format!("{} {n}", policy.as_str()))
        .collect();
    format!(
        "keyless MCP calls: {} (window {}s)",
        named.join(", "),
        window.as_secs_f64()
    )
}

/// The content key of `tool` with `args` for `tenant` now: the current
/// window's, unless the previous window's call exists and is younger than
/// the window.
pub fn content_key(
    mcp: &Mcp,
    tenant: &str,
    tool: &str,
    args: &Map<String, Value>,
) -> Result<String, StoreError> {
    let window = mcp.options.content_window.as_secs_f64().max(1.0);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let (current, previous) = window_keys(tool, args, now, window);
    if let Some(call) = mcp.calls.get_by_key(tenant, &previous)? {
        if call.created_at > now - window {
            return Ok(previous);
        }
    }
    Ok(current)
}

/// The content keys of the window `now` falls in and of the one before.
fn window_keys(tool: &str, args: &Map<String, Value>, now: f64, window: f64) -> (String, String) {
    let content = &crate::fingerprint::fingerprint(tool, args)[..32];
    let number = (now / window).floor() as i64;
    (
        format!("content-{content}-{number}"),
        format!("content-{content}-{}", number - 1),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_same_tool_and_arguments_make_the_same_key_within_a_window() {
        let args = |v: Value| v.as_object().unwrap().clone();
        let a = window_keys(
            "charge",
            &args(json!({"amount": 1, "to": "x"})),
            1000.0,
            600.0,
        );
        let b = window_keys(
            "charge",
            &args(json!({"to": "x", "amount": 1})),
            1100.0,
            600.0,
        );
        assert_eq!(a, b, "member order does not matter");
        let other = window_keys(
            "charge",
            &args(json!({"amount": 2, "to": "x"})),
            1000.0,
            600.0,
        );
        assert_ne!(a.0, other.0);
        let next = window_keys(
            "charge",
            &args(json!({"amount": 1, "to": "x"})),
            1300.0,
            600.0,
        );
        assert_eq!(next.1, a.0, "the next window looks back at this one");
        assert!(a.0.starts_with("content-") && a.0.len() <= 255);
    }
}
