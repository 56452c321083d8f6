//! `CallError`: every way the call path refuses a request. Each transport
//! says it its own way — REST as a status and an error code
//! (`api::ApiError`), MCP as a tool execution error or a JSON-RPC error —
//! but the refusal, and what it names, is decided once, here.
//!
//! It carries no internal cause to a client: a store failure is wrapped
//! whole, for the transport to log and answer with a fixed message.

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
