//! `RpcError`, the JSON-RPC error every MCP handler may answer (code,
//! message, data), and how a refusal of the call path becomes one: the REST
//! code in `data.code`, and for a refusal that asks the client to come back,
//! `data.retry_after_secs`. A leaf of `mcp`: every handler uses it, it uses
//! none.
//!
//! It never sends a store failure's cause (`store_refusal` logs it).

use super::jsonrpc::INTERNAL_ERROR;
use crate::calls::{store_refusal, CallRefusal};
use crate::http::RETRY_AFTER_SECS;
use crate::store::StoreError;
use serde_json::{json, Value};

/// A JSON-RPC error: code, message, data.
pub type RpcError = (i64, String, Option<Value>);

/// A store failure (its cause logged by `store_refusal`, never sent).
pub fn store_failure(e: StoreError) -> RpcError {
    rpc_error(store_refusal(e))
}

/// A refusal no tool result can carry, as a JSON-RPC error: the REST code in
/// `data.code`, and when it asks the client to come back, after how long.
pub(super) fn rpc_error(refusal: CallRefusal) -> RpcError {
    let mut data = json!({"code": refusal.code.as_str()});
    if refusal.code.asks_to_retry_later() {
        data["retry_after_secs"] = json!(RETRY_AFTER_SECS);
    }
    (INTERNAL_ERROR, refusal.message, Some(data))
}
