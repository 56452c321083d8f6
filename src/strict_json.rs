//! JSON for files an operator writes (the auth file, later the tools file):
//! parsed into `serde_json::Value`, refusing what `serde_json` would quietly
//! accept — an object with the same member twice.
//!
//! `serde_json::Value` keeps the last of two equal members, so an auth file
//! listing `"acme"` twice would silently disable the first token. This module
//! only parses; it never reads files and never echoes a member's value in an
//! error (values may be secrets), only its name.

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::fmt;

/// Parse `text` as one JSON value; any object with a repeated member name, at
/// any depth, is an error naming that member.
pub fn parse(text: &str) -> Result<Value, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let value = StrictValue.deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(value)
}

/// Builds a `Value` like `serde_json` does, but checks each object's members.
struct StrictValue;

impl<'de> DeserializeSeed<'de> for StrictValue {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(StrictValue)
    }
}

impl<'de> Visitor<'de> for StrictValue {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        // serde_json never hands a visitor a non-finite number.
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(StrictValue)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let mut map = Map::new();
        while let Some(name) = access.next_key::<String>()? {
            let value = access.next_value_seed(StrictValue)?;
            if map.contains_key(&name) {
                return Err(de::Error::custom(format_args!(
                    "member {name:?} appears twice in one object"
                )));
            }
            map.insert(name, value);
        }
        Ok(Value::Object(map))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_what_serde_json_parses() {
        let text = r#"{"a":[1,-2,3.5,"x",null,true,{"b":{}}],"c":18446744073709551615}"#;
        assert_eq!(
            parse(text).unwrap(),
            serde_json::from_str::<Value>(text).unwrap()
        );
        assert_eq!(parse(" 7 ").unwrap(), json!(7));
    }

    #[test]
    fn repeated_members_are_refused_at_any_depth() {
        for text in [
            r#"{"a":1,"a":2}"#,
            r#"{"t":{"acme":{"x":1},"acme":{"x":2}}}"#,
            r#"[{"k":1},{"k":1,"k":1}]"#,
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains("appears twice"), "{text}: {err}");
        }
        // The same name in sibling objects is fine.
        assert!(parse(r#"[{"k":1},{"k":2}]"#).is_ok());
    }

    #[test]
    fn errors_name_the_member_but_not_its_value() {
        let err = parse(r#"{"token":"s3cret","token":"s3cret"}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"token\""), "{err}");
        assert!(!err.contains("s3cret"), "{err}");
    }

    #[test]
    fn trailing_garbage_and_bad_syntax_are_errors() {
        assert!(parse(r#"{"a":1} x"#).is_err());
        assert!(parse(r#"{"a":1,}"#).is_err());
        assert!(parse("").is_err());
    }
}
