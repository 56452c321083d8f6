//! Client input, read strictly and echoed safely: a JSON parser that refuses
//! a body two readers could understand differently, and the one function that
//! quotes client input in an error message.
//!
//! `serde_json` keeps the last of two members with the same name, so
//! `{"args":{"amount":1,"amount":1000}}` would charge 1000 although a reader of
//! the first member sees 1. This module refuses such a body at any depth. Two
//! names are the same when they are equal after JSON unescaping and NFC, the
//! comparison the fingerprint uses (`"caf\u00e9"` and `"cafe\u0301"` are one
//! name there, so they are one name here too).
//!
//! An error message quotes at most [`MAX_QUOTED_BYTES`] of what the client
//! sent, so a 500 KB tool name cannot make a 500 KB error body.
//!
//! This module only parses and formats; it never decides what a field means.

use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::collections::HashSet;
use std::fmt;
use unicode_normalization::UnicodeNormalization;

/// The most bytes of client input an error message repeats.
pub const MAX_QUOTED_BYTES: usize = 100;

/// Parse one JSON text into a `Value`, refusing a member name repeated in
/// any object and anything after the value but whitespace. The error says
/// where (line and column) and, for a repeated name, which one.
pub fn parse_strict(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = StrictValue::deserialize(&mut deserializer)?.0;
    deserializer.end()?;
    Ok(value)
}

/// `input` as a quoted, escaped string of at most `MAX_QUOTED_BYTES` of it
/// (cut at a character boundary), followed by how long it really was when
/// it was cut: `"refundrefund…" (500000 bytes)`.
pub fn quote(input: &str) -> String {
    let shown = clip(input);
    if shown.len() == input.len() {
        format!("{shown:?}")
    } else {
        format!("{shown:?}… ({} bytes)", input.len())
    }
}

/// The longest prefix of `input` of at most `MAX_QUOTED_BYTES` that ends on a
/// character boundary: for a caller that formats it itself.
pub fn clip(input: &str) -> &str {
    if input.len() <= MAX_QUOTED_BYTES {
        return input;
    }
    let mut end = MAX_QUOTED_BYTES;
    while !input.is_char_boundary(end) {
        end -= 1;
    }
    &input[..end]
}

/// A `Value` whose objects were checked for repeated names while parsing.
struct StrictValue(Value);

impl<'de> Deserialize<'de> for StrictValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor).map(StrictValue)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }

    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }

    fn visit_f64<E>(self, f: f64) -> Result<Value, E> {
        // serde_json never hands over a non-finite float; `Null` mirrors its own visitor.
        Ok(Number::from_f64(f).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.to_owned()))
    }

    fn visit_string<E>(self, s: String) -> Result<Value, E> {
        Ok(Value::String(s))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        StrictValue::deserialize(deserializer).map(|v| v.0)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(StrictValue(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let mut map = Map::new();
        let mut seen = HashSet::new();
        while let Some(name) = access.next_key_seed(MemberName)? {
            if !seen.insert(comparable(&name)) {
                return Err(de::Error::custom(format_args!(
                    "member {} appears more than once in one object",
                    quote(&name)
                )));
            }
            let StrictValue(value) = access.next_value()?;
            map.insert(name, value);
        }
        Ok(Value::Object(map))
    }
}

/// A member name, as a `String`.
struct MemberName;

impl<'de> DeserializeSeed<'de> for MemberName {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<String, D::Error> {
        String::deserialize(deserializer)
    }
}

/// The form in which two names are compared: NFC, as the fingerprint sees them.
fn comparable(name: &str) -> String {
    if name.is_ascii() {
        name.to_owned()
    } else {
        name.nfc().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn accepts_what_serde_json_accepts_when_names_are_unique() {
        for text in [
            r#"{"tool":"charge","args":{"amount":1}}"#,
            r#"[1, -2, 3.5, 1e2, 18446744073709551615, "x", true, false, null, {}, []]"#,
            r#"  {"a":{"b":{"c":[{"d":1},{"d":2}]}}}  "#,
            r#"{"a":1,"A":2,"a ":3}"#,
            "\"\\u00e9\"",
        ] {
            let expected: Value = serde_json::from_str(text).unwrap();
            assert_eq!(parse_strict(text.as_bytes()).unwrap(), expected, "{text}");
        }
    }

    #[test]
    fn refuses_a_repeated_name_at_any_depth() {
        for (text, name) in [
            (r#"{"tool":"charge","tool":"fail"}"#, "tool"),
            (r#"{"args":{"amount":1,"amount":1000}}"#, "amount"),
            (r#"{"args":{"a":[{"x":1,"y":2,"x":1}]}}"#, "x"),
            (r#"{"a":1,"\u0061":2}"#, "a"),
            ("{\"caf\u{e9}\":1,\"cafe\u{301}\":2}", "caf"),
        ] {
            let err = parse_strict(text.as_bytes()).unwrap_err().to_string();
            assert!(err.contains("more than once"), "{text}: {err}");
            assert!(err.contains(name), "{text}: {err}");
        }
    }

    #[test]
    fn the_same_name_in_sibling_objects_is_fine() {
        let text = r#"{"a":{"x":1},"b":{"x":2}}"#;
        assert_eq!(
            parse_strict(text.as_bytes()).unwrap(),
            json!({"a":{"x":1},"b":{"x":2}})
        );
    }

    #[test]
    fn refuses_malformed_and_trailing_input() {
        for text in ["{", "{\"a\":1}x", "[1,]", "", "{\"a\" 1}", "nul"] {
            assert!(parse_strict(text.as_bytes()).is_err(), "{text:?}");
        }
    }

    #[test]
    fn quotes_at_most_the_limit_on_a_character_boundary() {
        assert_eq!(quote("refund"), "\"refund\"");
        let long = "x".repeat(500_000);
        let quoted = quote(&long);
        assert!(quoted.len() < 130, "{quoted}");
        assert!(quoted.ends_with("(500000 bytes)"), "{quoted}");
        // 99 ASCII bytes then a 3-byte character that straddles the limit.
        let straddling = format!("{}你好", "a".repeat(99));
        assert_eq!(clip(&straddling), "a".repeat(99));
        let err = parse_strict(format!("{{\"{long}\":1,\"{long}\":2}}").as_bytes())
            .unwrap_err()
            .to_string();
        assert!(err.len() < 200, "{} bytes", err.len());
    }
}
