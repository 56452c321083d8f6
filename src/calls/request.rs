//! What a transport hands the call path and what it gets back: a
//! `CallRequest` (one call as a client asked for it, before anything is
//! checked) and what it turned into (`Submitted`); and the bounds both
//! transports hold a request to, so REST and MCP agree.
//!
//! Nothing here checks or decides anything.

use crate::auth::Tenant;
use crate::metrics::Transport;
use crate::store::Call;
use serde_json::{Map, Value};

/// Longest idempotency key, in bytes: REST's `Idempotency-Key` header and
/// MCP's key alike.
pub const MAX_KEY_LEN: usize = 255;

/// The longest wait for a call to settle, in seconds: REST's `?wait=` and
/// MCP's `wait_secs` alike.
pub const MAX_WAIT_SECS: f64 = 30.0;

/// One call as a client asked for it, before anything is checked.
pub struct CallRequest<'a> {
    pub tenant: &'a Tenant,
    pub key: &'a str,
    pub tool: &'a str,
    pub args: &'a Map<String, Value>,
    pub client_id: Option<String>,
    pub seq: Option<i64>,
    /// Which door it came in by: the metrics label, and whether a settled
    /// answer the key cache kept (REST's rendering) may answer it.
    pub transport: Transport,
}

/// What a submitted call request turned into.
pub enum Submitted {
    /// A settled answer the key cache already had rendered (REST only).
    Cached { call_id: String, body: Vec<u8> },
    /// The key's call: `replayed` when it already existed (not reset to run
    /// again); `duplicate_intent` when it is another key's call that holds
    /// this call's business key (`on_duplicate: "return"`).
    Call {
        call: Box<Call>,
        replayed: bool,
        duplicate_intent: bool,
    },
}
