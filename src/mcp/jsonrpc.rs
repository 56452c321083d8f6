//! JSON-RPC 2.0 as MCP uses it: telling a request from a notification (and
//! both from a malformed message), the standard and MCP-defined error codes,
//! and the response objects. Messages are parsed strictly (a repeated member
//! name is a parse error, as everywhere in this service).
//!
//! It owns the wire shape of one message and nothing else: it never decides
//! which methods exist or what a revision allows (`mcp` and `handshake` do).

use serde_json::{json, Map, Value};

/// Invalid JSON.
pub const PARSE_ERROR: i64 = -32700;
/// Valid JSON that is not a JSON-RPC request (or a batch a revision forbids).
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
/// Unknown tool, bad `params`, a bad cursor, two different keys.
pub const INVALID_PARAMS: i64 = -32602;
/// The store failed; `data.code` is this service's code (`unavailable`:
/// retry with the same key, which finds a write that committed late).
pub const INTERNAL_ERROR: i64 = -32603;
/// This service's own (JSON-RPC's implementation-defined range, which MCP
/// leaves to servers from -32000 to -32019): the idempotency key belongs to
/// a call with other arguments; `data` names `idempotency_conflict` and the
/// call.
pub const IDEMPOTENCY_CONFLICT: i64 = -32010;
/// 2026-07-28: a mirrored header is missing or disagrees with the body.
pub const HEADER_MISMATCH: i64 = -32020;
/// 2026-07-28: the request needs a client capability its `_meta` does not
/// declare (`data.requiredCapabilities`); `400`.
pub const MISSING_CAPABILITY: i64 = -32021;
/// 2026-07-28: the requested protocol version is not one this server speaks.
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

/// A request id: a string or a number (MCP forbids `null`).
pub type Id = Value;

/// One message from the client, as far as its shape goes.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    Request {
        id: Id,
        method: String,
        params: Map<String, Value>,
    },
    Notification {
        method: String,
        params: Map<String, Value>,
    },
    /// A response to a request this server never sends: ignored.
    Response,
}

/// A message that is not one: the error and the id to answer under (if the
/// message had a usable one).
#[derive(Debug, Clone, PartialEq)]
pub struct Malformed {
    pub id: Option<Id>,
    pub message: String,
}

/// Classify one JSON value as a JSON-RPC message.
pub fn classify(value: &Value) -> Result<Message, Malformed> {
    let object = value.as_object().ok_or_else(|| Malformed {
        id: None,
        message: "a JSON-RPC message must be an object".into(),
    })?;
    let id = object.get("id").cloned();
    let usable_id = id
        .clone()
        .filter(|id| id.is_string() || id.is_i64() || id.is_u64());
    let bad = |message: &str| Malformed {
        id: usable_id.clone(),
        message: message.into(),
    };
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(bad("\"jsonrpc\" must be \"2.0\""));
    }
    let Some(method) = object.get("method") else {
        if object.contains_key("result") || object.contains_key("error") {
            return Ok(Message::Response);
        }
        return Err(bad("a request needs a \"method\""));
    };
    let method = method
        .as_str()
        .ok_or_else(|| bad("\"method\" must be a string"))?
        .to_string();
    let params = match object.get("params") {
        None => Map::new(),
        Some(Value::Object(params)) => params.clone(),
        Some(_) => return Err(bad("\"params\" must be an object")),
    };
    match id {
        None => Ok(Message::Notification { method, params }),
        Some(_) if usable_id.is_none() => Err(bad("\"id\" must be a string or an integer")),
        Some(id) => Ok(Message::Request { id, method, params }),
    }
}

/// A successful response.
pub fn result(id: &Id, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// An error response; `id` is `None` when the request's could not be read.
pub fn error(id: Option<&Id>, code: i64, message: impl Into<String>, data: Option<Value>) -> Value {
    let mut error = json!({"code": code, "message": message.into()});
    if let Some(data) = data {
        error["data"] = data;
    }
    let mut response = json!({"jsonrpc": "2.0", "error": error});
    if let Some(id) = id {
        response["id"] = id.clone();
    } else {
        response["id"] = Value::Null;
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_told_apart_and_malformed_ones_named() {
        let request = json!({"jsonrpc": "2.0", "id": 7, "method": "ping"});
        assert!(matches!(classify(&request), Ok(Message::Request { .. })));
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        assert!(matches!(classify(&note), Ok(Message::Notification { .. })));
        let response = json!({"jsonrpc": "2.0", "id": 1, "result": {}});
        assert_eq!(classify(&response), Ok(Message::Response));
        let cases = [
            (json!(3), None),
            (json!({"id": 1, "method": "ping"}), Some(json!(1))),
            (json!({"jsonrpc": "2.0", "id": "a"}), Some(json!("a"))),
            (
                json!({"jsonrpc": "2.0", "id": null, "method": "ping"}),
                None,
            ),
            (json!({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}), None),
            (
                json!({"jsonrpc": "2.0", "id": 2, "method": 5}),
                Some(json!(2)),
            ),
            (
                json!({"jsonrpc": "2.0", "id": 2, "method": "x", "params": [1]}),
                Some(json!(2)),
            ),
        ];
        for (value, id) in cases {
            let malformed = classify(&value).unwrap_err();
            assert_eq!(malformed.id, id, "{value}");
        }
    }

    #[test]
    fn an_error_without_a_readable_id_answers_null() {
        let e = error(None, PARSE_ERROR, "bad", None);
        assert_eq!(e["id"], Value::Null);
        assert_eq!(e["error"]["code"], -32700);
        let e = error(
            Some(&json!("x")),
            INVALID_PARAMS,
            "m",
            Some(json!({"a": 1})),
        );
        assert_eq!(
            (e["id"].clone(), e["error"]["data"]["a"].clone()),
            (json!("x"), json!(1))
        );
    }
}
