//! `CallError`: every way the call path refuses a request, and the one
//! mapping of each to what a client is told (`CallError::refusal`): its
//! `ErrorCode` (and with it the HTTP status and whether to come back later),
//! its message and the call it names. Each transport only frames that —
//! REST as a status and an error body (`api::ApiError`), MCP as a tool
//! execution error or a JSON-RPC error (`mcp::tools_call`) — so the two
//! cannot disagree on a code or a message.
//!
//! It must never carry an internal cause to a client: a store failure's
//! cause is logged here (`store_refusal`) and answered with a fixed message.

use crate::http::ErrorCode;
use crate::store::StoreError;

/// Why a call request was refused.
#[derive(Debug)]
pub enum CallError {
    /// The request breaks a rule (an unknown tool, args the tool's rules
    /// refuse, a chaos hook without `--chaos`); the message says which,
    /// quoting at most `input::MAX_QUOTED_BYTES` of the client's input.
    Invalid(String),
    /// Canonical `args` over the limit: its size and the limit, in bytes.
    ArgsTooLarge {
        size: usize,
        limit: usize,
    },
    /// The key belongs to a call with another fingerprint: the key (clipped)
    /// and that call's id.
    Conflict {
        key: String,
        call_id: String,
    },
    /// A live call already holds this request's business key: its id.
    DuplicateIntent {
        call_id: String,
    },
    /// A new call refused: this many calls wait for a worker, and
    /// `--max-pending` allows no more.
    Overloaded {
        pending: usize,
        max: usize,
    },
    Store(StoreError),
}

impl From<StoreError> for CallError {
    fn from(e: StoreError) -> CallError {
        CallError::Store(e)
    }
}

/// A refusal as every transport tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallRefusal {
    /// The code: its HTTP status, and whether the client should send the
    /// same request again later (`ErrorCode::asks_to_retry_later`).
    pub code: ErrorCode,
    /// What happened and what to do, for a person or a model to read.
    pub message: String,
    /// The call the refusal is about: the key's owner (a conflict), the
    /// business key's holder (a duplicate intent).
    pub call_id: Option<String>,
    /// A conflict's key (clipped), for a transport that names it.
    pub key: Option<String>,
}

impl CallRefusal {
    fn new(code: ErrorCode, message: impl Into<String>) -> CallRefusal {
        CallRefusal {
            code,
            message: message.into(),
            call_id: None,
            key: None,
        }
    }
}

impl CallError {
    /// The one mapping from a refusal to its code and message.
    pub fn refusal(self) -> CallRefusal {
        match self {
            CallError::Invalid(message) => CallRefusal::new(ErrorCode::BadRequest, message),
            CallError::ArgsTooLarge { size, limit } => CallRefusal::new(
                ErrorCode::PayloadTooLarge,
                format!("args is {size} bytes canonical; the limit is {limit}"),
            ),
            CallError::Conflict { key, call_id } => CallRefusal {
                message: format!(
                    "same key, different fingerprint: key {key:?} belongs to call {call_id} \
                     with other tool or args"
                ),
                call_id: Some(call_id),
                key: Some(key),
                ..CallRefusal::new(ErrorCode::IdempotencyConflict, "")
            },
            CallError::DuplicateIntent { call_id } => CallRefusal {
                message: format!(
                    "call {call_id} has the same business key within its window; \
                     this request created nothing: read that call instead of sending again"
                ),
                call_id: Some(call_id),
                ..CallRefusal::new(ErrorCode::DuplicateIntent, "")
            },
            CallError::Overloaded { pending, max } => CallRefusal::new(
                ErrorCode::Overloaded,
                format!(
                    "{pending} calls are pending (--max-pending {max}); \
                     retry with the same key after Retry-After"
                ),
            ),
            CallError::Store(e) => store_refusal(e),
        }
    }
}

/// A store failure as a client is told it: `unavailable` (retry with the
/// same key: a write that timed out may still commit) or `internal_error`.
/// The cause goes to the log, here, and never into the answer.
pub fn store_refusal(e: StoreError) -> CallRefusal {
    match e {
        StoreError::Unavailable(_) => {
            crate::log::warn("database unavailable; answered unavailable")
                .event("unavailable")
                .cause(&e)
                .emit();
            CallRefusal::new(
                ErrorCode::Unavailable,
                "the database is busy or unavailable; retry with the same key",
            )
        }
        StoreError::Internal(_) => {
            crate::log::error("internal error; answered internal_error")
                .event("internal_error")
                .cause(&e)
                .emit();
            CallRefusal::new(ErrorCode::InternalError, "internal error")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every refusal but a store failure's names a code a client can act on,
    /// and only the two "come back later" codes ask for a retry.
    #[test]
    fn each_refusal_has_one_code() {
        let cases = [
            (CallError::Invalid("no".into()), ErrorCode::BadRequest),
            (
                CallError::ArgsTooLarge {
                    size: 70000,
                    limit: 65536,
                },
                ErrorCode::PayloadTooLarge,
            ),
            (
                CallError::Conflict {
                    key: "k".into(),
                    call_id: "c_1".into(),
                },
                ErrorCode::IdempotencyConflict,
            ),
            (
                CallError::DuplicateIntent {
                    call_id: "c_2".into(),
                },
                ErrorCode::DuplicateIntent,
            ),
            (
                CallError::Overloaded { pending: 9, max: 8 },
                ErrorCode::Overloaded,
            ),
        ];
        for (error, code) in cases {
            let refusal = error.refusal();
            assert_eq!(refusal.code, code);
            assert_eq!(
                refusal.code.asks_to_retry_later(),
                code == ErrorCode::Overloaded
            );
            assert!(!refusal.message.is_empty());
        }
    }

    #[test]
    fn a_conflict_names_its_call_and_key() {
        let refusal = CallError::Conflict {
            key: "order-7".into(),
            call_id: "c_9".into(),
        }
        .refusal();
        assert_eq!(refusal.call_id.as_deref(), Some("c_9"));
        assert_eq!(refusal.key.as_deref(), Some("order-7"));
        assert!(refusal.message.contains("c_9"), "{}", refusal.message);
    }
}
