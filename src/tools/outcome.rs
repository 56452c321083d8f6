//! What one attempt produced: an [`Outcome`], which is either a success with
//! its result and maybe an [`Effect`], a failure, a [`ToolError`] with one
//! of the codes in [`ToolErrorCode`], or a stop (its call was cancelled).
//!
//! This file owns those values and the JSON a failure is stored as. It must
//! never know how they are stored: the runner turns them into the store's
//! records (tools never depend on the store).

use super::error_code::ToolErrorCode;
use serde_json::{json, Value};
use std::time::Duration;

/// What an attempt produced.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Success; `effect` says whether an `effects` row records it.
    Succeeded {
        result: Value,
        effect: Option<Effect>,
    },
    /// Failure. `error.retryable` says whether another attempt may succeed;
    /// `retry_after` is the downstream's earliest time for it, if it gave one.
    Failed {
        error: ToolError,
        retry_after: Option<Duration>,
    },
    /// Stopped before it had an answer, because its call was cancelled
    /// (its run's [`Stop`](super::Stop) was asked). `sent`: the tool had
    /// reached the outside (the request went out, the process started), so
    /// its effect may have happened anyway; `how` it was stopped, in words.
    Stopped { sent: bool, how: String },
}

impl Outcome {
    /// A failure without a retry hint.
    pub fn failed(error: ToolError) -> Outcome {
        Outcome::Failed {
            error,
            retry_after: None,
        }
    }

    pub fn is_retryable_failure(&self) -> bool {
        matches!(self, Outcome::Failed { error, .. } if error.retryable)
    }
}

/// The local record of a side effect.
#[derive(Debug, Clone, PartialEq)]
pub struct Effect {
    /// `charge`'s amount; `None` for every other tool.
    pub amount: Option<i64>,
    /// What the downstream said: `{"status", "body"}` for `http`,
    /// `{"exit_code"}` for `command`; `None` for built-ins.
    pub detail: Option<Value>,
}

/// A failed attempt, as stored in the call's `error`.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolError {
    /// Stable: clients and dashboards match on it.
    pub code: ToolErrorCode,
    pub message: String,
    pub retryable: bool,
    pub http_status: Option<u16>,
    /// At most 4 KiB of the downstream's response body.
    pub body: Option<String>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// The last 4 KiB of a command's stderr.
    pub stderr: Option<String>,
}

impl ToolError {
    /// A failure retryable as its code's row in [`ToolErrorCode`] says.
    pub fn new(code: ToolErrorCode, message: impl Into<String>) -> ToolError {
        ToolError {
            code,
            message: message.into(),
            retryable: code.retryable(),
            http_status: None,
            body: None,
            exit_code: None,
            signal: None,
            stderr: None,
        }
    }

    /// The same failure, retryable or not as this attempt decides: only for
    /// the codes whose row in [`ToolErrorCode`] names the exception.
    pub fn with_retryable(mut self, retryable: bool) -> ToolError {
        self.retryable = retryable;
        self
    }

    /// `{"code","message","retryable"}` plus whichever optional fields are set.
    pub fn to_json(&self) -> Value {
        let mut error = json!({
            "code": self.code.as_str(),
            "message": self.message,
            "retryable": self.retryable,
        });
        let fields = [
            ("http_status", self.http_status.map(Value::from)),
            ("body", self.body.clone().map(Value::from)),
            ("exit_code", self.exit_code.map(Value::from)),
            ("signal", self.signal.map(Value::from)),
            ("stderr", self.stderr.clone().map(Value::from)),
        ];
        for (name, value) in fields {
            if let Some(value) = value {
                error[name] = value;
            }
        }
        error
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_json_carries_only_the_fields_that_are_set() {
        let mut error = ToolError::new(ToolErrorCode::DownstreamRejected, "status 400");
        assert_eq!(
            error.to_json(),
            json!({"code": "downstream_rejected", "message": "status 400", "retryable": false})
        );
        error.http_status = Some(400);
        error.body = Some("no".into());
        assert_eq!(error.to_json()["http_status"], 400);
        assert_eq!(error.to_json()["body"], "no");
    }
}
