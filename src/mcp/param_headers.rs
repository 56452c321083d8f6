//! SEP-2243's header values, and its custom headers from tool parameters:
//! a tool whose input schema marks a parameter `"x-mcp-header": "Name"` is
//! called (2026-07-28) with that argument mirrored in `Mcp-Param-Name`, so
//! that a proxy can route on it without reading the body. A value is sent
//! as it is, or as `=?base64?…?=` (standard Base64, padded) when it is not
//! plain visible ASCII; `Mcp-Name` may be encoded the same way.
//!
//! This file owns reading such a value and holding a call's custom headers
//! to its arguments: a missing, undecodable or different header is a
//! mismatch, which the caller answers `400 -32020` before any call exists.
//! It never trusts a header over the body: the body is what runs.

use serde_json::{Map, Value};

/// The schema keyword that names a parameter's header.
pub const X_MCP_HEADER: &str = "x-mcp-header";
/// A client omits a header whose value would be longer than this.
const MAX_HEADER_VALUE: usize = 8192;

/// A header value as sent, or decoded from `=?base64?…?=`; `None` when the
/// wrapper holds no valid padded Base64 of UTF-8 text. A value missing
/// either half of the wrapper is taken as it is.
pub fn decode(value: &str) -> Option<String> {
    match value
        .strip_prefix("=?base64?")
        .and_then(|v| v.strip_suffix("?="))
    {
        Some(encoded) => String::from_utf8(base64_decode(encoded)?).ok(),
        None => Some(value.to_string()),
    }
}

/// Standard Base64 with its padding (RFC 4648 §4): a multiple of four
/// characters of the alphabet, `=` only as the last one or two.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    let padding = bytes.iter().rev().take_while(|&&b| b == b'=').count();
    if padding > 2 {
        return None;
    }
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let data = &bytes[..bytes.len() - padding];
    let mut out = Vec::with_capacity(data.len() * 3 / 4);
    for chunk in data.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= value(c)? << (18 - 6 * i);
        }
        let produced = chunk.len() - 1;
        if produced == 0 {
            return None;
        }
        out.extend_from_slice(&n.to_be_bytes()[1..1 + produced]);
    }
    Some(out)
}

/// Hold the request's `Mcp-Param-*` headers (`header` looks one up,
/// case-insensitively) to the arguments the tool's `schema` marks; the
/// message of the first mismatch.
pub fn check<'a>(
    schema: &Value,
    arguments: &Map<String, Value>,
    header: impl Fn(&str) -> Option<&'a str>,
) -> Result<(), String> {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return Ok(());
    };
    for (parameter, rule) in properties {
        let Some(name) = rule.get(X_MCP_HEADER).and_then(Value::as_str) else {
            continue;
        };
        let header_name = format!("Mcp-Param-{name}");
        let sent = header(&header_name.to_ascii_lowercase());
        match (arguments.get(parameter), sent) {
            (None, None) => {}
            (None, Some(_)) => {
                return Err(format!(
                    "Header mismatch: {header_name} is sent but arguments.{parameter} is not"
                ))
            }
            (Some(value), None) if as_text(value).len() > MAX_HEADER_VALUE => {}
            (Some(_), None) => {
                return Err(format!(
                    "Header mismatch: {header_name} must mirror arguments.{parameter}"
                ))
            }
            (Some(value), Some(sent)) => match decode(sent) {
                None => {
                    return Err(format!(
                        "Header mismatch: {header_name} is not valid =?base64?...?= text"
                    ))
                }
                Some(text) if !mirrors(value, &text) => {
                    return Err(format!(
                        "Header mismatch: {header_name} differs from arguments.{parameter}"
                    ))
                }
                Some(_) => {}
            },
        }
    }
    Ok(())
}

/// A primitive argument as its header carries it: a string as it is, a
/// number in decimal, a boolean `true` or `false`.
fn as_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// Whether the header's text is the argument (a number compared as one).
fn mirrors(value: &Value, text: &str) -> bool {
    match value {
        Value::Number(n) => text.parse::<f64>().ok() == n.as_f64(),
        other => as_text(other) == text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_are_literal_or_padded_base64() {
        let cases = [
            ("us-west1", Some("us-west1")),
            ("=?base64?SGVsbG8=?=", Some("Hello")),
            ("=?base64?SGVsbG8sIOS4lueVjA==?=", Some("Hello, 世界")),
            ("=?base64??=", Some("")),
            ("=?base64?SGVsbG8?=", None),
            ("=?base64?SGVs!!!bG8=?=", None),
            ("=?base64?S===?=", None),
            ("=?base64?/w==?=", None),
            ("=?base64?SGVsbG8=", Some("=?base64?SGVsbG8=")),
            ("SGVsbG8=", Some("SGVsbG8=")),
        ];
        for (sent, want) in cases {
            assert_eq!(decode(sent).as_deref(), want, "{sent}");
        }
    }

    #[test]
    fn marked_arguments_are_held_to_their_headers() {
        let schema = json!({"properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "n": {"type": "number", "x-mcp-header": "N"},
            "query": {"type": "string"}}});
        let args = |v: Value| v.as_object().unwrap().clone();
        let with = |headers: &'static [(&'static str, &'static str)]| {
            move |name: &str| headers.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
        };
        let both = args(json!({"region": "eu", "n": 2, "query": "q"}));
        assert!(check(
            &schema,
            &both,
            with(&[("mcp-param-region", "eu"), ("mcp-param-n", "2.0")])
        )
        .is_ok());
        assert!(check(
            &schema,
            &both,
            with(&[("mcp-param-region", "=?base64?ZXU=?=")])
        )
        .is_err());
        assert!(check(
            &schema,
            &both,
            with(&[("mcp-param-region", "us"), ("mcp-param-n", "2")])
        )
        .is_err());
        let none = args(json!({"query": "q"}));
        assert!(check(&schema, &none, with(&[])).is_ok());
        assert!(check(&schema, &none, with(&[("mcp-param-n", "1")])).is_err());
    }
}
