//! Request validation for the call routes: the `Idempotency-Key` header,
//! `?wait=`, the body of a tool call (strict JSON, known fields, bounded
//! depth), and the percent-decoded key of a by-key path. Each refusal is an
//! `ApiError::BadRequest` (or `MissingKey`) whose message repeats at most
//! `input::MAX_QUOTED_BYTES` of what the client sent.
//!
//! Nothing here touches the store or decides anything about a call.

use super::error::ApiError;
use crate::calls::{MAX_KEY_LEN, MAX_WAIT_SECS};
use crate::fingerprint::as_integer;
use crate::http::Request;
use crate::input::{parse_strict, quote};
use crate::store::MAX_CANCEL_REASON_BYTES;
use serde_json::{Map, Value};
use std::time::Duration;

/// Deepest JSON nesting accepted in a body.
const MAX_JSON_DEPTH: usize = 32;

/// `Idempotency-Key`: exactly one header of 1–255 visible ASCII characters
/// (so no control character, no space). Two headers are refused rather than
/// one of them picked: a proxy and this server could pick differently.
pub(super) fn idempotency_key(req: &Request) -> Result<&str, ApiError> {
    // Header names are stored lower-cased.
    let mut values = req
        .headers
        .iter()
        .filter(|(name, _)| name == "idempotency-key")
        .map(|(_, value)| value.as_str());
    let key = values.next().ok_or(ApiError::MissingKey)?;
    if values.next().is_some() {
        return Err(ApiError::BadRequest(
            "the Idempotency-Key header appears more than once; send it once".into(),
        ));
    }
    let visible = |b: u8| (0x21..=0x7e).contains(&b);
    if key.is_empty() || key.len() > MAX_KEY_LEN || !key.bytes().all(visible) {
        return Err(ApiError::BadRequest(format!(
            "Idempotency-Key must be 1 to {MAX_KEY_LEN} visible ASCII characters"
        )));
    }
    Ok(key)
}

/// `?wait=SECONDS`, 0 to 30; other query parameters are ignored.
pub(super) fn wait_param(req: &Request) -> Result<Option<Duration>, ApiError> {
    let Some(query) = &req.query else {
        return Ok(None);
    };
    let Some(raw) = query.split('&').find_map(|pair| pair.strip_prefix("wait=")) else {
        return Ok(None);
    };
    raw.parse::<f64>()
        .ok()
        .filter(|s| (0.0..=MAX_WAIT_SECS).contains(s))
        .map(|s| Some(Duration::from_secs_f64(s)))
        .ok_or_else(|| {
            ApiError::BadRequest(format!(
                "wait must be a number of seconds from 0 to 30, not {}",
                quote(raw)
            ))
        })
}

/// The body as an object with only the known fields. Parsed strictly: a
/// member name repeated at any depth is refused, not resolved (see `input`).
pub(super) fn parse_body(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    object_with(body, &["tool", "args", "client_id", "seq"], "a tool call")
}

/// The body as an object whose fields are among `fields` (`what` names it
/// in a refusal), parsed as strictly as a tool call's.
pub(super) fn object_with(
    body: &[u8],
    fields: &[&str],
    what: &str,
) -> Result<Map<String, Value>, ApiError> {
    let value = parse_strict(body).map_err(|e| {
        // A data error is the strict parser's own refusal (a repeated name):
        // well-formed JSON that two readers could understand differently.
        let what = if e.is_data() {
            "ambiguous"
        } else {
            "not valid"
        };
        ApiError::BadRequest(format!("body is {what} JSON: {e}"))
    })?;
    if depth(&value) > MAX_JSON_DEPTH {
        return Err(ApiError::BadRequest(format!(
            "body nests deeper than {MAX_JSON_DEPTH} levels"
        )));
    }
    let Value::Object(map) = value else {
        return Err(ApiError::BadRequest("body must be a JSON object".into()));
    };
    if let Some(field) = map.keys().find(|k| !fields.contains(&k.as_str())) {
        return Err(ApiError::BadRequest(format!(
            "{} is not a field of {what} (expected: {})",
            quote(field),
            fields.join(", ")
        )));
    }
    Ok(map)
}

/// `tool` (required string) and `args` (object; absent or null means `{}`).
pub(super) fn tool_and_args(
    body: &Map<String, Value>,
) -> Result<(&str, &Map<String, Value>), ApiError> {
    static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
    let tool = match body.get("tool") {
        Some(Value::String(tool)) => tool.as_str(),
        None | Some(Value::Null) => return Err(ApiError::BadRequest("tool is required".into())),
        Some(_) => return Err(ApiError::BadRequest("tool must be a string".into())),
    };
    let args = match body.get("args") {
        Some(Value::Object(args)) => args,
        None | Some(Value::Null) => EMPTY.get_or_init(Map::new),
        Some(_) => return Err(ApiError::BadRequest("args must be a JSON object".into())),
    };
    Ok((tool, args))
}

/// An optional text field (`client_id`): at most 255 bytes, and no control
/// character (C0, DEL, C1), which would be stored as-is and reach every log
/// line and terminal that shows the call.
pub(super) fn optional_string(
    body: &Map<String, Value>,
    field: &str,
) -> Result<Option<String>, ApiError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.len() <= MAX_KEY_LEN && !s.chars().any(char::is_control) => {
            Ok(Some(s.clone()))
        }
        Some(_) => Err(ApiError::BadRequest(format!(
            "{field} must be a string of at most {MAX_KEY_LEN} bytes without control characters"
        ))),
    }
}

/// An optional integer field (`seq`): the numbers the fingerprint treats as
/// integers (`1`, `1.0`, `1e0`), as for every integer in `args`.
pub(super) fn optional_integer(
    body: &Map<String, Value>,
    field: &str,
) -> Result<Option<i64>, ApiError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => as_integer(v)
            .map(Some)
            .ok_or_else(|| ApiError::BadRequest(format!("{field} must be a 64-bit integer"))),
    }
}

fn depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// A cancel's optional body: nothing, or `{"reason": "..."}` — a string of
/// at most `MAX_CANCEL_REASON_BYTES` (or `null`), parsed strictly, no other
/// member. The reason, if one was given.
pub(super) fn cancel_reason(body: &[u8]) -> Result<Option<String>, ApiError> {
    reason_of(body, "a cancel")
}

/// The optional body of an action on a call or a tool (`what`: "a cancel",
/// "a re-run", "a pause"): as a cancel's, `{"reason": "..."}` or nothing.
pub(super) fn reason_of(body: &[u8], what: &str) -> Result<Option<String>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let value = parse_strict(body)
        .map_err(|e| ApiError::BadRequest(format!("{what}'s body is not valid JSON: {e}")))?;
    let Value::Object(mut map) = value else {
        return Err(ApiError::BadRequest(format!(
            "{what}'s body must be a JSON object"
        )));
    };
    if let Some(field) = map.keys().find(|k| k.as_str() != "reason") {
        return Err(ApiError::BadRequest(format!(
            "{} is not a field of {what} (expected: reason)",
            quote(field)
        )));
    }
    match map.remove("reason") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(reason)) if reason.len() <= MAX_CANCEL_REASON_BYTES => Ok(Some(reason)),
        Some(_) => Err(ApiError::BadRequest(format!(
            "reason must be a string of at most {MAX_CANCEL_REASON_BYTES} bytes"
        ))),
    }
}

/// Decode `%XX` escapes; `None` when an escape is malformed or the result is
/// not UTF-8. `+` stays `+`: this is a path, not a form.
pub fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%20b%2Fc").as_deref(), Some("a b/c"));
        assert_eq!(percent_decode("%E4%BD%A0").as_deref(), Some("你"));
        assert_eq!(percent_decode("a+b").as_deref(), Some("a+b"));
        assert_eq!(percent_decode("%2"), None);
        assert_eq!(percent_decode("%zz"), None);
        assert_eq!(percent_decode("%FF"), None);
    }

    #[test]
    fn json_depth_is_counted() {
        assert_eq!(depth(&json!(1)), 0);
        assert_eq!(depth(&json!({"a": [1, {"b": 2}]})), 3);
    }

    #[test]
    fn body_fields_are_checked_and_named() {
        let err = |body: &str| match parse_body(body.as_bytes())
            .and_then(|b| tool_and_args(&b).map(|_| ()))
        {
            Err(ApiError::BadRequest(m)) => m,
            other => panic!("{other:?}"),
        };
        assert!(err("{").contains("not valid JSON"));
        assert!(err("[1]").contains("JSON object"));
        assert!(err(r#"{"args":{}}"#).contains("tool is required"));
        assert!(err(r#"{"tool":"charge","args":[1]}"#).contains("args must be"));
        assert!(err(r#"{"tool":"charge","extra":1}"#).contains("extra"));
        assert!(err(r#"{"tool":"charge","tool":"fail"}"#).contains("ambiguous JSON: member"));
        assert!(err(r#"{"tool":"x","args":{"a":1,"a":1}}"#).contains("more than once"));
        let deep = format!("{}{}", "[".repeat(40), "]".repeat(40));
        assert!(err(&deep).contains("deeper"));
    }

    /// A cancel's body: nothing, or a bounded `reason` and nothing else,
    /// never read two ways.
    #[test]
    fn a_cancel_reason_is_optional_bounded_and_alone() {
        assert_eq!(cancel_reason(b"").unwrap(), None);
        assert_eq!(cancel_reason(b" \n").unwrap(), None);
        assert_eq!(cancel_reason(b"{}").unwrap(), None);
        assert_eq!(cancel_reason(br#"{"reason":null}"#).unwrap(), None);
        let said = cancel_reason(br#"{"reason":"wrong amount"}"#).unwrap();
        assert_eq!(said.as_deref(), Some("wrong amount"));
        let longest = format!(r#"{{"reason":"{}"}}"#, "x".repeat(MAX_CANCEL_REASON_BYTES));
        assert!(cancel_reason(longest.as_bytes()).unwrap().is_some());
        let refused = |body: &str| match cancel_reason(body.as_bytes()) {
            Err(ApiError::BadRequest(m)) => m,
            other => panic!("{body}: {other:?}"),
        };
        let too_long = format!(
            r#"{{"reason":"{}"}}"#,
            "x".repeat(MAX_CANCEL_REASON_BYTES + 1)
        );
        assert!(refused(&too_long).contains("at most 500 bytes"));
        assert!(refused(r#"{"reason":1}"#).contains("must be a string"));
        assert!(refused(r#"{"reason":"a","why":"b"}"#).contains("why"));
        assert!(refused(r#"{"reason":"a","reason":"b"}"#).contains("not valid JSON"));
        assert!(refused("[]").contains("JSON object"));
        assert!(refused("{").contains("not valid JSON"));
    }
}
