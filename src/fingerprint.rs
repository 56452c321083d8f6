//! Request fingerprints: what "the same request" means for one idempotency key.
//!
//! A fingerprint is the SHA-256 of the canonical JSON of `{"args": .., "tool": ..}`.
//! The canonical form settles the contract points the design chapter leaves open
//! (section 12.5.1), so that two clients that mean the same thing are not told
//! `409 idempotency_conflict`:
//!
//! - object members are sorted by key (code-point order), separators are compact;
//! - object members whose value is `null` are dropped (`{"a":null}` = `{}`);
//!   `null` inside arrays is kept, because there position carries meaning;
//! - numbers with an integral value print as integers, so `1`, `1.0` and `1e0`
//!   are one number; other numbers print in the shortest form that round-trips;
//! - strings and keys are NFC-normalized (`"é"` typed either way is one string)
//!   and non-ASCII stays as UTF-8, never `\u` escapes.
//!
//! This module only computes; it never looks at the database. Chaos hooks are
//! removed by the caller before fingerprinting (see `chaos`).

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::fmt::Write;
use unicode_normalization::UnicodeNormalization;

/// The hex SHA-256 of the canonical `{"args": args, "tool": tool}`.
pub fn fingerprint(tool: &str, args: &Map<String, Value>) -> String {
    fingerprint_canonical(tool, &canonical_object(args))
}

/// The fingerprint from args already in canonical form (see [`canonical_object`]),
/// for a caller that also keeps that text.
pub fn fingerprint_canonical(tool: &str, canonical_args: &str) -> String {
    let mut payload = String::with_capacity(canonical_args.len() + tool.len() + 20);
    payload.push_str("{\"args\":");
    payload.push_str(canonical_args);
    payload.push_str(",\"tool\":");
    write_string(&mut payload, tool);
    payload.push('}');
    hex_sha256(payload.as_bytes())
}

/// The canonical JSON text of an object.
pub fn canonical_object(map: &Map<String, Value>) -> String {
    let mut out = String::new();
    write_object(&mut out, map);
    out
}

/// The canonical JSON text of any value.
pub fn canonical(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value);
    out
}

/// Lower-case hex of SHA-256. By table rather than `format!` per byte: on the
/// replay path this ran once per request and the formatting machinery was
/// most of the fingerprint's cost.
pub fn hex_sha256(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let digest = Sha256::digest(bytes);
    let mut hex = String::with_capacity(64);
    for byte in digest {
        hex.push(char::from(DIGITS[usize::from(byte >> 4)]));
        hex.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    hex
}

fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => write_object(out, map),
    }
}

fn write_object(out: &mut String, map: &Map<String, Value>) {
    let mut members: Vec<(std::borrow::Cow<str>, &Value)> = map
        .iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| (nfc(k), v))
        .collect();
    // Two keys can become equal after NFC; ordering those by value too keeps the
    // output deterministic whatever order they arrived in.
    members
        .sort_by(|(ka, va), (kb, vb)| ka.cmp(kb).then_with(|| canonical(va).cmp(&canonical(vb))));
    out.push('{');
    for (i, (key, value)) in members.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(out, key);
        out.push(':');
        write_value(out, value);
    }
    out.push('}');
}

/// NFC of `s`, borrowed when it is already NFC (always so for ASCII).
fn nfc(s: &str) -> std::borrow::Cow<'_, str> {
    use unicode_normalization::{is_nfc_quick, IsNormalized};
    if s.is_ascii() || is_nfc_quick(s.chars()) == IsNormalized::Yes {
        std::borrow::Cow::Borrowed(s)
    } else {
        std::borrow::Cow::Owned(s.nfc().collect())
    }
}

/// The integer a JSON number stands for, when the canonical form prints it as
/// an integer and an `i64` holds it: `1`, `1.0`, `1e0` and `-0.0` are integers,
/// `1.5` and `1e300` are not. Every integer field of the API (`seq`,
/// `amount`, `fail_times`, ...) accepts exactly these, so two requests with one
/// fingerprint are never one accepted and one refused.
pub fn as_integer(value: &Value) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64().or_else(|| integral_float(n)),
        _ => None,
    }
}

/// The largest magnitude below which every integer is an exact `f64`.
const EXACT_LIMIT: f64 = 9_007_199_254_740_992.0; // 2^53

/// A float with an integral value small enough that an `i64` holds it exactly.
fn integral_float(n: &serde_json::Number) -> Option<i64> {
    if n.is_i64() || n.is_u64() {
        return None;
    }
    let f = n.as_f64()?;
    (f.is_finite() && f.fract() == 0.0 && f.abs() <= EXACT_LIMIT).then_some(f as i64)
}

/// Integers print as integers; a float with an integral value that an `i64`
/// holds exactly prints as that integer (so `-0.0` is `0`); any other float
/// prints in serde_json's shortest round-trip form.
fn write_number(out: &mut String, n: &serde_json::Number) {
    // Writing to a String cannot fail; `Number`'s `Display` is what its
    // `to_string` printed, without the allocation.
    if let Some(i) = integral_float(n) {
        let _ = write!(out, "{i}");
    } else {
        let _ = write!(out, "{n}");
    }
}

fn write_string(out: &mut String, s: &str) {
    let s = nfc(s);
    if s.bytes().any(needs_escape) {
        // serde_json escapes only what JSON requires and keeps non-ASCII as UTF-8.
        out.push_str(&Value::from(s.as_ref()).to_string());
    } else {
        // Nothing to escape: the same text serde_json would write, without
        // building a `Value` and formatting it.
        out.push('"');
        out.push_str(&s);
        out.push('"');
    }
}

/// What JSON requires escaped in a string, and all that serde_json escapes:
/// the quote, the backslash and the control characters below U+0020.
fn needs_escape(byte: u8) -> bool {
    byte < 0x20 || byte == b'"' || byte == b'\\'
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fp(tool: &str, args: Value) -> String {
        fingerprint(tool, args.as_object().expect("test args are objects"))
    }

    #[test]
    fn key_order_and_whitespace_do_not_matter() {
        let a: Value = serde_json::from_str(r#"{"b": 2, "a": 1}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":1,"b":2}"#).unwrap();
        assert_eq!(fp("charge", a), fp("charge", b));
        assert_eq!(
            canonical(&json!({"b": 2, "a": [1, {"d": 1, "c": 2}]})),
            r#"{"a":[1,{"c":2,"d":1}],"b":2}"#
        );
    }

    #[test]
    fn integral_floats_equal_integers() {
        assert_eq!(
            fp("charge", json!({"amount": 1})),
            fp("charge", json!({"amount": 1.0}))
        );
        let e: Value = serde_json::from_str(r#"{"amount": 1e2}"#).unwrap();
        assert_eq!(fp("charge", e), fp("charge", json!({"amount": 100})));
        assert_eq!(canonical(&json!(-0.0)), "0");
        assert_eq!(canonical(&json!(1.5)), "1.5");
        assert_ne!(
            fp("charge", json!({"amount": 1})),
            fp("charge", json!({"amount": 1.5}))
        );
    }

    #[test]
    fn null_members_are_dropped_but_null_array_items_kept() {
        assert_eq!(
            fp("send_email", json!({"to": "a@b", "subject": null})),
            fp("send_email", json!({"to": "a@b"}))
        );
        assert_eq!(canonical(&json!({"x": {"y": null}})), r#"{"x":{}}"#);
        assert_eq!(canonical(&json!([null, 1])), "[null,1]");
    }

    #[test]
    fn strings_are_nfc_normalized_and_kept_as_utf8() {
        // "é" precomposed (U+00E9) and decomposed (e + U+0301).
        assert_eq!(
            fp("send_email", json!({"to": "caf\u{e9}"})),
            fp("send_email", json!({"to": "cafe\u{301}"}))
        );
        assert_eq!(canonical(&json!({"cafe\u{301}": 1})), "{\"caf\u{e9}\":1}");
        assert_eq!(
            canonical(&json!({"subject": "支付成功"})),
            r#"{"subject":"支付成功"}"#
        );
        assert_ne!(
            fp("send_email", json!({"to": "a", "subject": "支付成功"})),
            fp("send_email", json!({"to": "a", "subject": "支付失败"}))
        );
    }

    #[test]
    fn chinese_text_matches_python_json_dumps() {
        // json.dumps({"tool":"send_email","args":{"to":"张三","body":"你好"}},
        //            sort_keys=True, separators=(",",":"), ensure_ascii=False)
        let mut payload = String::new();
        payload.push_str(r#"{"args":{"body":"你好","to":"张三"},"tool":"send_email"}"#);
        assert_eq!(
            fp("send_email", json!({"to": "张三", "body": "你好"})),
            hex_sha256(payload.as_bytes())
        );
    }

    #[test]
    fn tool_name_is_part_of_the_fingerprint() {
        assert_ne!(fp("charge", json!({})), fp("fail", json!({})));
    }

    #[test]
    fn escapes_only_what_json_requires() {
        assert_eq!(canonical(&json!("a\"b\\c\n")), r#""a\"b\\c\n""#);
    }

    /// Fingerprints are stored: a release that printed one byte differently
    /// would answer `409` to every retry of a call made before it. The hash
    /// here was computed outside Rust (`printf '%s' '<payload>' | sha256sum`),
    /// so it pins the bytes, not this module's own idea of them.
    #[test]
    fn stored_fingerprints_keep_their_exact_bytes() {
        let args: Value =
            serde_json::from_str(r#"{"x":-2,"note":"a\"b\\c\u0001\u001fé\u007f","amount":1.0e0}"#)
                .unwrap();
        let canonical_args = canonical(&args);
        assert_eq!(
            canonical_args,
            "{\"amount\":1,\"note\":\"a\\\"b\\\\c\\u0001\\u001f\u{e9}\u{7f}\",\"x\":-2}"
        );
        assert_eq!(
            fingerprint_canonical("charge", &canonical_args),
            "dbe64896132d84f929409a21bac8f11574ad6404f22b8e8d609e9bee82f1bd8c"
        );
        assert_eq!(
            canonical(&json!([1.5, -0.0, 1e300, "plain", "ünï"])),
            "[1.5,0,1e+300,\"plain\",\"ünï\"]"
        );
    }

    #[test]
    fn as_integer_accepts_exactly_what_prints_as_an_integer() {
        for text in [
            "1",
            "1.0",
            "1e0",
            "-0.0",
            "-7",
            "1e2",
            "9007199254740992.0",
            "9007199254740994.0",
            "1.5",
            "1e300",
            "-1e-3",
            "9223372036854775807",
            "9223372036854775808",
        ] {
            let value: Value = serde_json::from_str(text).unwrap();
            let printed = canonical(&value);
            let prints_as_integer = printed.parse::<i64>().is_ok();
            assert_eq!(
                as_integer(&value).is_some(),
                prints_as_integer,
                "{text} prints as {printed}"
            );
            if let Some(i) = as_integer(&value) {
                assert_eq!(i.to_string(), printed, "{text}");
            }
        }
        assert_eq!(as_integer(&json!("1")), None);
    }
}
