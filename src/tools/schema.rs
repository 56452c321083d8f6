//! `input_schema`: a tool's JSON Schema (draft 2020-12), compiled once when the
//! tools file loads and checked against every posted call's `args`.
//!
//! Validation is the `jsonschema` crate's, complete for 2020-12, with two
//! choices made here: `format` is asserted (an `"email"` that is not one is
//! refused) and an unknown `format` is a load error, and no `$ref` is ever
//! fetched (network and file resolution are compiled out), so a schema must
//! be self-contained. A `$schema` other than 2020-12 is refused rather than
//! silently validated under another draft. This module must never touch the
//! network or the disk, and never accept a schema it cannot fully enforce.

use super::args_error::{one_line, ArgsError};
use jsonschema::{Draft, Validator};
use serde_json::{Map, Value};
use std::fmt;

/// The only `$schema` accepted (with or without a trailing `#`).
const DRAFT_2020_12: &str = "https://json-schema.org/draft/2020-12/schema";

/// A compiled `input_schema`.
pub struct Schema {
    validator: Validator,
}

impl fmt::Debug for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Schema")
    }
}

impl Schema {
    /// Compile `schema`, or say in one line why it is not a usable 2020-12
    /// schema for an object of arguments.
    pub fn compile(schema: &Value) -> Result<Schema, SchemaError> {
        let object = schema.as_object().ok_or(SchemaError::NotAnObject)?;
        if let Some(declared) = object.get("$schema") {
            let declared = declared.as_str().unwrap_or_default();
            if declared.trim_end_matches('#') != DRAFT_2020_12 {
                return Err(SchemaError::OtherDraft);
            }
        }
        let validator = jsonschema::options()
            .with_draft(Draft::Draft202012)
            .should_validate_formats(true)
            .should_ignore_unknown_formats(false)
            .build(schema)
            .map_err(|e| SchemaError::Refused {
                pointer: e.instance_path().as_str().to_string(),
                message: e.to_string(),
            })?;
        Ok(Schema { validator })
    }

    /// Check `args`; the message names the first failing path, `args.x.y`.
    pub fn check(&self, args: &Map<String, Value>) -> Result<(), ArgsError> {
        let instance = Value::Object(args.clone());
        let first = self
            .validator
            .iter_errors(&instance)
            .next()
            .map(|error| ArgsError::Schema {
                path: pointer_name("args", error.instance_path().as_str()),
                message: error.to_string(),
            });
        first.map_or(Ok(()), Err)
    }
}

/// Why an `input_schema` is not a usable 2020-12 schema for an object of
/// arguments; `Display` is one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaError {
    /// Not a JSON object (args is always an object).
    NotAnObject,
    /// `$schema` names a draft other than 2020-12.
    OtherDraft,
    /// The validator refused it: where in the schema (a JSON pointer; empty
    /// for the root), and why.
    Refused { pointer: String, message: String },
}

impl fmt::Display for SchemaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SchemaError::NotAnObject => {
                f.write_str("must be a JSON Schema object (args is always an object)")
            }
            SchemaError::OtherDraft => write!(
                f,
                "$schema must be {DRAFT_2020_12:?} (only draft 2020-12 is supported)"
            ),
            SchemaError::Refused { pointer, message } if pointer.is_empty() => {
                f.write_str(&one_line(message))
            }
            SchemaError::Refused { pointer, message } => {
                f.write_str(&one_line(&format!("at {pointer}: {message}")))
            }
        }
    }
}

impl std::error::Error for SchemaError {}

/// `/a/0/b~1c` under `root` as `root.a.0.b/c`: the way the built-ins name fields.
fn pointer_name(root: &str, pointer: &str) -> String {
    let mut name = root.to_string();
    for segment in pointer.split('/').skip(1) {
        name.push('.');
        name.push_str(&segment.replace("~1", "/").replace("~0", "~"));
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(schema: &Schema, args: Value) -> Result<(), ArgsError> {
        schema.check(args.as_object().unwrap())
    }

    fn refund() -> Schema {
        Schema::compile(&json!({
            "type": "object", "required": ["amount"],
            "properties": {
                "amount": {"type": "integer", "minimum": 1},
                "lines": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string"}}}},
                "email": {"type": "string", "format": "email"}
            },
            "additionalProperties": false
        }))
        .unwrap()
    }

    #[test]
    fn errors_name_the_first_failing_path() {
        let schema = refund();
        assert_eq!(check(&schema, json!({"amount": 5})), Ok(()));
        let low = check(&schema, json!({"amount": 0}))
            .unwrap_err()
            .to_string();
        assert_eq!(low, "args.amount: 0 is less than the minimum of 1");
        let nested = check(
            &schema,
            json!({"amount": 1, "lines": [{"sku": "a"}, {"sku": 3}]}),
        )
        .unwrap_err()
        .to_string();
        assert!(nested.starts_with("args.lines.1.sku: "), "{nested}");
        let extra = check(&schema, json!({"amount": 1, "amont": 2}))
            .unwrap_err()
            .to_string();
        assert!(
            extra.starts_with("args: ") && extra.contains("amont"),
            "{extra}"
        );
        let huge = "k".repeat(500_000);
        let mut echo = json!({"amount": 1});
        echo[huge.as_str()] = json!(1);
        assert!(check(&schema, echo).unwrap_err().to_string().len() < 400);
        let missing = check(&schema, json!({})).unwrap_err().to_string();
        assert!(missing.contains("amount"), "{missing}");
    }

    #[test]
    fn formats_are_asserted() {
        let bad = check(&refund(), json!({"amount": 1, "email": "not an address"}))
            .unwrap_err()
            .to_string();
        assert!(bad.starts_with("args.email: "), "{bad}");
        assert!(check(&refund(), json!({"amount": 1, "email": "a@example.com"})).is_ok());
    }

    #[test]
    fn unusable_schemas_are_refused_in_one_line() {
        for (schema, needle) in [
            (json!(true), "must be a JSON Schema object"),
            (json!({"type": "objekt"}), "objekt"),
            (
                json!({"$schema": "http://json-schema.org/draft-07/schema#"}),
                "2020-12",
            ),
            (json!({"$ref": "https://example.com/s.json"}), "example.com"),
            (
                json!({"properties": {"a": {"format": "no-such-format"}}}),
                "no-such-format",
            ),
            (
                json!({"properties": {"a": {"pattern": "("}}}),
                "at /properties/a",
            ),
        ] {
            let err = Schema::compile(&schema).unwrap_err().to_string();
            assert!(
                err.contains(needle) && !err.contains('\n'),
                "{schema}: {err}"
            );
        }
        assert!(Schema::compile(&json!({"$schema": DRAFT_2020_12, "type": "object"})).is_ok());
    }
}
