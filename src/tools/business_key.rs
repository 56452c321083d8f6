//! A tool's business-key rule (`"business_key"` in the tools file) and what
//! agents are told about a tool (`"description"`, `"annotations"`): the parts
//! of a tool's contract that the MCP endpoint publishes and the second layer
//! of deduplication (chapter 12.15.4) enforces.
//!
//! It owns reading those three fields and computing a call's business key
//! from its args. It never touches the database: the store decides which
//! call holds a key (`store::business_key`), and the API decides what a
//! duplicate intent is answered with (`OnDuplicate`).

use super::args_error::ArgsError;
use super::file_error::{field_error, FieldError};
use crate::fingerprint::canonical;
use serde_json::{json, Map, Value};

/// The longest window a business key may block for: a year.
const MAX_WINDOW_SECS: u64 = 366 * 86_400;
/// The most fields one business key may combine.
const MAX_FIELDS: usize = 16;

/// What a new intent that matches a live call is answered with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnDuplicate {
    /// `409 duplicate_intent` naming the existing call (the default).
    Reject,
    /// The existing call, as a replay would answer it, marked.
    Return,
}

impl OnDuplicate {
    pub fn as_str(self) -> &'static str {
        match self {
            OnDuplicate::Reject => "reject",
            OnDuplicate::Return => "return",
        }
    }
}

/// `{"fields": [JSON Pointers into args], "window_secs": N, "on_duplicate": ...}`.
#[derive(Debug, Clone, PartialEq)]
pub struct BusinessKeyRule {
    pub fields: Vec<String>,
    pub window_secs: u64,
    pub on_duplicate: OnDuplicate,
}

impl BusinessKeyRule {
    /// Read the tools file's `business_key`; the error names the field.
    pub fn parse(value: &Value) -> Result<BusinessKeyRule, FieldError> {
        let at = |field: &str, message: &str| field_error(format!("business_key.{field}"), message);
        let object = value.as_object().ok_or_else(|| {
            field_error(
                "business_key",
                "must be an object {\"fields\": [...], \"window_secs\": N, \"on_duplicate\": ...}",
            )
        })?;
        if let Some(extra) = object
            .keys()
            .find(|k| !matches!(k.as_str(), "fields" | "window_secs" | "on_duplicate"))
        {
            return Err(at(
                extra,
                "is not a field (fields, window_secs, on_duplicate)",
            ));
        }
        let fields = match object.get("fields") {
            Some(Value::Array(items)) if !items.is_empty() && items.len() <= MAX_FIELDS => items,
            _ => {
                return Err(at(
                    "fields",
                    "is required: 1 to 16 JSON Pointers into args, such as \"/user_id\"",
                ))
            }
        };
        let mut pointers = Vec::with_capacity(fields.len());
        for (i, field) in fields.iter().enumerate() {
            match field.as_str() {
                Some(p) if p.starts_with('/') && p.len() > 1 => pointers.push(p.to_string()),
                _ => {
                    return Err(at(
                        &format!("fields[{i}]"),
                        "must be a JSON Pointer into args, such as \"/user_id\"",
                    ))
                }
            }
        }
        let window_secs = match object.get("window_secs") {
            Some(v) => match v.as_u64() {
                Some(n) if (1..=MAX_WINDOW_SECS).contains(&n) => n,
                _ => {
                    return Err(at(
                        "window_secs",
                        &format!("must be an integer from 1 to {MAX_WINDOW_SECS}"),
                    ))
                }
            },
            None => return Err(at("window_secs", "is required (seconds)")),
        };
        let on_duplicate = match object.get("on_duplicate").map(Value::as_str) {
            None | Some(Some("reject")) => OnDuplicate::Reject,
            Some(Some("return")) => OnDuplicate::Return,
            Some(_) => return Err(at("on_duplicate", "must be \"reject\" or \"return\"")),
        };
        Ok(BusinessKeyRule {
            fields: pointers,
            window_secs,
            on_duplicate,
        })
    }

    /// The call's business key: canonical JSON of the array of its fields'
    /// values, in the rule's order. A missing field is the `bad_request` text.
    pub fn key_of(&self, args: &Map<String, Value>) -> Result<String, ArgsError> {
        let args = Value::Object(args.clone());
        let mut values = Vec::with_capacity(self.fields.len());
        for pointer in &self.fields {
            match args.pointer(pointer) {
                Some(value) if !value.is_null() => values.push(value.clone()),
                _ => {
                    return Err(ArgsError::MissingKeyField {
                        pointer: pointer.clone(),
                    })
                }
            }
        }
        Ok(canonical(&Value::Array(values)))
    }

    /// What `GET /v1/tools` and `tools/list` show of it.
    pub fn public_view(&self) -> Value {
        json!({
            "fields": self.fields,
            "window_secs": self.window_secs,
            "on_duplicate": self.on_duplicate.as_str(),
        })
    }
}

/// What agents are told about a tool besides its schema (MCP's tool
/// `description` and `annotations`). `idempotentHint` is not here: it is
/// derived (true exactly when the tool has a business key), so it cannot
/// be claimed for a tool whose repeats could add an effect.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentFacing {
    pub description: String,
    pub title: Option<String>,
    pub read_only: bool,
    pub destructive: bool,
    pub open_world: bool,
}

impl AgentFacing {
    /// Defaults: a built-in touches nothing outside this process; an `http`
    /// or `command` tool may change anything (MCP's own defaults).
    pub fn default_for(name: &str, external: bool) -> AgentFacing {
        let description = match name {
            "charge" if !external => "Charge an amount (a local effect row, once per call).",
            "send_email" if !external => "Send an email (a local effect row, once per call).",
            "sleep" if !external => "Sleep for a number of seconds; no effect.",
            "fail" if !external => "Fail on purpose (tests); no effect.",
            _ => "",
        };
        AgentFacing {
            description: description.to_string(),
            title: None,
            read_only: false,
            destructive: external,
            open_world: external,
        }
    }

    /// Apply the tools file's `description` and `annotations`; the error
    /// names the field.
    pub fn apply(
        &mut self,
        description: Option<&Value>,
        annotations: Option<&Value>,
    ) -> Result<(), FieldError> {
        if let Some(d) = description {
            self.description = d
                .as_str()
                .ok_or_else(|| field_error("description", "must be a string"))?
                .to_string();
        }
        let Some(annotations) = annotations else {
            return Ok(());
        };
        let object = annotations
            .as_object()
            .ok_or_else(|| field_error("annotations", "must be an object of hints"))?;
        for (name, value) in object {
            let field = format!("annotations.{name}");
            let flag = || {
                value
                    .as_bool()
                    .ok_or_else(|| field_error(&field, "must be true or false"))
            };
            match name.as_str() {
                "title" => {
                    let title = value
                        .as_str()
                        .ok_or_else(|| field_error(&field, "must be a string"));
                    self.title = Some(title?.to_string());
                }
                "readOnlyHint" => self.read_only = flag()?,
                "destructiveHint" => self.destructive = flag()?,
                "openWorldHint" => self.open_world = flag()?,
                "idempotentHint" => {
                    return Err(field_error(
                        field,
                        "is derived: true exactly when the tool has a business_key",
                    ))
                }
                _ => {
                    return Err(field_error(
                        field,
                        "is not a hint (title, readOnlyHint, destructiveHint, openWorldHint)",
                    ))
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_reads_its_fields_and_keys_args_canonically() {
        let rule = BusinessKeyRule::parse(&json!({
            "fields": ["/user_id", "/coupon/template"],
            "window_secs": 86400,
            "on_duplicate": "return"
        }))
        .unwrap();
        assert_eq!(rule.on_duplicate, OnDuplicate::Return);
        let args = json!({"coupon": {"template": "T1", "x": 1}, "user_id": 7, "note": "a"});
        let key = rule.key_of(args.as_object().unwrap()).unwrap();
        assert_eq!(key, "[7,\"T1\"]");
        let missing = rule.key_of(json!({"user_id": 7}).as_object().unwrap());
        assert!(missing
            .unwrap_err()
            .to_string()
            .contains("args/coupon/template"));
    }

    #[test]
    fn bad_rules_name_the_field() {
        let cases = [
            (json!([]), "business_key"),
            (
                json!({"fields": [], "window_secs": 1}),
                "business_key.fields",
            ),
            (
                json!({"fields": ["user"], "window_secs": 1}),
                "business_key.fields[0]",
            ),
            (json!({"fields": ["/u"]}), "business_key.window_secs"),
            (
                json!({"fields": ["/u"], "window_secs": 0}),
                "business_key.window_secs",
            ),
            (
                json!({"fields": ["/u"], "window_secs": 5, "on_duplicate": "merge"}),
                "business_key.on_duplicate",
            ),
            (
                json!({"fields": ["/u"], "window_secs": 5, "x": 1}),
                "business_key.x",
            ),
        ];
        for (value, field) in cases {
            assert_eq!(
                BusinessKeyRule::parse(&value).unwrap_err().field.as_deref(),
                Some(field),
                "{value}"
            );
        }
    }

    #[test]
    fn idempotent_hint_cannot_be_claimed() {
        let mut facing = AgentFacing::default_for("refund", true);
        let err = facing
            .apply(None, Some(&json!({"idempotentHint": true})))
            .unwrap_err();
        assert_eq!(err.field.as_deref(), Some("annotations.idempotentHint"));
        facing
            .apply(
                Some(&json!("Refund a payment")),
                Some(&json!({"destructiveHint": false, "title": "Refund"})),
            )
            .unwrap();
        assert!(!facing.destructive && facing.open_world);
        assert_eq!(facing.title.as_deref(), Some("Refund"));
    }
}
