//! Chaos hooks: fields in `args` that make the server fail on purpose, so that
//! tests and `scripts/fault_inject.sh` can reproduce the chapter's failures with
//! real processes.
//!
//! Hooks exist only when the server runs with `--chaos`; without it they are a
//! `400 bad_request`. They are removed from `args` before validation and before
//! the fingerprint, so they never change what "the same request" means. Each
//! fires on a call's first attempt only, so recovery can finish the call.

use serde_json::{Map, Value};
use std::fmt;
use std::time::Duration;

/// The hooks one call carries.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Hooks {
    /// Exit the process right after the succeed transaction commits (section 12.7.2).
    pub crash_after_commit: bool,
    /// Exit after the tool ran but before its completion commits (section 12.7.3).
    pub crash_before_commit: bool,
    /// Hold the POST response that created the call.
    pub delay_response: Option<Duration>,
    /// Stall the worker after the tool ran, before it completes — a GC pause or a
    /// stopped process — so its lease can expire and its completion go stale.
    pub stall: Option<Duration>,
}

const HOOK_NAMES: [&str; 4] = [
    "_crash_after_commit",
    "_crash_before_commit",
    "_delay_response_ms",
    "_stall_ms",
];

/// A hook whose value is not of its type: `args.{hook} must be {expected}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookError {
    pub hook: String,
    /// What the value must be, as the message says it.
    pub expected: &'static str,
}

impl fmt::Display for HookError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "args.{} must be {}", self.hook, self.expected)
    }
}

impl std::error::Error for HookError {}

/// Split `args` into the tool's own arguments and the hooks.
pub fn split(args: &Map<String, Value>) -> Result<(Map<String, Value>, Hooks), HookError> {
    let mut hooks = Hooks::default();
    let mut rest = Map::new();
    for (key, value) in args {
        match key.as_str() {
            "_crash_after_commit" => hooks.crash_after_commit = flag(key, value)?,
            "_crash_before_commit" => hooks.crash_before_commit = flag(key, value)?,
            "_delay_response_ms" => hooks.delay_response = millis(key, value)?,
            "_stall_ms" => hooks.stall = millis(key, value)?,
            _ => {
                rest.insert(key.clone(), value.clone());
            }
        }
    }
    Ok((rest, hooks))
}

/// Whether `args` names any hook (to refuse them without `--chaos`).
pub fn names_a_hook(args: &Map<String, Value>) -> Option<&'static str> {
    HOOK_NAMES.into_iter().find(|name| args.contains_key(*name))
}

/// Exit at once, as a crash would: no destructors, no flushing of responses.
pub fn crash(reason: &'static str) -> ! {
    crate::log::warn("chaos hook: exiting the process")
        .event("chaos_exit")
        .label("when", reason)
        .emit();
    std::process::exit(1)
}

fn flag(key: &str, value: &Value) -> Result<bool, HookError> {
    match value {
        Value::Bool(b) => Ok(*b),
        Value::Null => Ok(false),
        _ => Err(HookError {
            hook: key.to_string(),
            expected: "a boolean",
        }),
    }
}

fn millis(key: &str, value: &Value) -> Result<Option<Duration>, HookError> {
    match value {
        Value::Null => Ok(None),
        // The integers the fingerprint knows, so `50.0` is `50` here too.
        v => crate::fingerprint::as_integer(v)
            .and_then(|ms| u64::try_from(ms).ok())
            .filter(|ms| *ms <= 60_000)
            .map(|ms| Some(Duration::from_millis(ms)))
            .ok_or_else(|| HookError {
                hook: key.to_string(),
                expected: "an integer from 0 to 60000",
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn hooks_are_split_from_tool_args() {
        let args = json!({"amount": 1, "_crash_after_commit": true, "_delay_response_ms": 50});
        let (rest, hooks) = split(args.as_object().unwrap()).unwrap();
        assert_eq!(Value::Object(rest), json!({"amount": 1}));
        assert!(hooks.crash_after_commit);
        assert_eq!(hooks.delay_response, Some(Duration::from_millis(50)));
        assert_eq!(
            names_a_hook(args.as_object().unwrap()),
            Some("_crash_after_commit")
        );
        assert!(split(json!({"_stall_ms": "x"}).as_object().unwrap()).is_err());
    }
}
