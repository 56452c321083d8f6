//! A tool's approval policy (`"approval"` in the tools file): when a call of
//! it waits for a person's decision before it runs — always, or when a
//! predicate on its arguments holds (a JSON Pointer's value above a numeric
//! limit, or equal to a value) — whether the MCP client that made the call
//! may decide it too (where its tenant allows it), and how long a request
//! stays open.
//!
//! It owns reading the field and judging a call's arguments against it. It
//! never touches the database and never decides who may approve: the store
//! keeps the request, the API checks the decider's role.

use super::file_error::{field_error, FieldError};
use serde_json::{json, Map, Value};
use std::time::Duration;

/// How long a request stays open when the policy does not say: a day.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(86_400);
/// The longest a request may stay open: 30 days.
const MAX_TIMEOUT_SECS: u64 = 30 * 86_400;
/// The most predicates one `when` may list.
const MAX_PREDICATES: usize = 16;

/// One condition on a call's arguments.
#[derive(Debug, Clone, PartialEq)]
pub enum Predicate {
    /// The value at `pointer` is a number above `limit` — or is missing or
    /// not a number: when in doubt, a person decides.
    Above { pointer: String, limit: f64 },
    /// The value at `pointer` equals `value` (numbers by value).
    Equals { pointer: String, value: Value },
}

impl Predicate {
    fn holds(&self, args: &Value) -> bool {
        match self {
            Predicate::Above { pointer, limit } => match args.pointer(pointer) {
                Some(Value::Number(n)) => n.as_f64().is_none_or(|n| n > *limit),
                _ => true,
            },
            Predicate::Equals { pointer, value } => args
                .pointer(pointer)
                .is_some_and(|found| same(found, value)),
        }
    }

    fn public_view(&self) -> Value {
        match self {
            Predicate::Above { pointer, limit } => json!({"pointer": pointer, "above": limit}),
            Predicate::Equals { pointer, value } => json!({"pointer": pointer, "equals": value}),
        }
    }
}

/// JSON equality, numbers compared by value (`1` equals `1.0`).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

/// When a call waits for a decision.
#[derive(Debug, Clone, PartialEq)]
pub enum When {
    /// Every call.
    Always,
    /// A call for whose arguments any of these holds.
    Any(Vec<Predicate>),
}

/// `{"when": ..., "mcp_client": bool, "timeout_secs": N}`.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalPolicy {
    pub when: When,
    /// The MCP client that made the call may decide it too (through an
    /// input request), where its tenant allows it.
    pub mcp_client: bool,
    /// How long a request stays open before it ends `denied`.
    pub timeout: Duration,
}

impl ApprovalPolicy {
    /// Read the tools file's `approval`; the error names the field.
    pub fn parse(value: &Value) -> Result<ApprovalPolicy, FieldError> {
        let at = |field: &str, message: &str| field_error(format!("approval.{field}"), message);
        let object = value.as_object().ok_or_else(|| {
            field_error(
                "approval",
                "must be an object {\"when\": ..., \"mcp_client\"?: bool, \"timeout_secs\"?: N}",
            )
        })?;
        if let Some(extra) = object
            .keys()
            .find(|k| !matches!(k.as_str(), "when" | "mcp_client" | "timeout_secs"))
        {
            return Err(at(extra, "is not a field (when, mcp_client, timeout_secs)"));
        }
        let when = match object.get("when") {
            Some(Value::String(s)) if s == "always" => When::Always,
            Some(Value::Object(_)) => When::Any(vec![predicate(&object["when"], "when")?]),
            Some(Value::Array(items)) if !items.is_empty() && items.len() <= MAX_PREDICATES => {
                let mut predicates = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    predicates.push(predicate(item, &format!("when[{i}]"))?);
                }
                When::Any(predicates)
            }
            _ => {
                return Err(at(
                    "when",
                    "is required: \"always\", a predicate {\"pointer\": \"/amount\", \
                     \"above\": N} or {\"pointer\": ..., \"equals\": V}, or 1 to 16 of them \
                     (any holds)",
                ))
            }
        };
        let mcp_client = match object.get("mcp_client") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(at("mcp_client", "must be true or false")),
        };
        let timeout = match object.get("timeout_secs") {
            None => DEFAULT_APPROVAL_TIMEOUT,
            Some(v) => match v.as_u64() {
                Some(n) if (1..=MAX_TIMEOUT_SECS).contains(&n) => Duration::from_secs(n),
                _ => {
                    return Err(at(
                        "timeout_secs",
                        &format!("must be an integer from 1 to {MAX_TIMEOUT_SECS}"),
                    ))
                }
            },
        };
        Ok(ApprovalPolicy {
            when,
            mcp_client,
            timeout,
        })
    }

    /// Whether a call with these arguments (chaos hooks removed) waits for
    /// a decision.
    pub fn holds(&self, args: &Map<String, Value>) -> bool {
        match &self.when {
            When::Always => true,
            When::Any(predicates) => {
                let args = Value::Object(args.clone());
                predicates.iter().any(|p| p.holds(&args))
            }
        }
    }

    /// What `GET /v1/tools` and MCP's `tools/list` show.
    pub fn public_view(&self) -> Value {
        let when = match &self.when {
            When::Always => json!("always"),
            When::Any(predicates) => {
                Value::Array(predicates.iter().map(Predicate::public_view).collect())
            }
        };
        json!({
            "when": when,
            "mcp_client": self.mcp_client,
            "timeout_secs": self.timeout.as_secs(),
        })
    }
}

/// One predicate at `place` (`when`, `when[2]`).
fn predicate(value: &Value, place: &str) -> Result<Predicate, FieldError> {
    let at = |field: &str, message: &str| field_error(format!("approval.{place}{field}"), message);
    let object = value.as_object().ok_or_else(|| {
        at(
            "",
            "must be {\"pointer\": \"/amount\", \"above\": N} or {\"pointer\": ..., \"equals\": V}",
        )
    })?;
    if let Some(extra) = object
        .keys()
        .find(|k| !matches!(k.as_str(), "pointer" | "above" | "equals"))
    {
        return Err(at(
            &format!(".{extra}"),
            "is not a field (pointer, above, equals)",
        ));
    }
    let pointer = match object.get("pointer").and_then(Value::as_str) {
        Some(p) if p.starts_with('/') && p.len() > 1 => p.to_string(),
        _ => {
            return Err(at(
                ".pointer",
                "is required: a JSON Pointer into args, such as \"/amount\"",
            ))
        }
    };
    match (object.get("above"), object.get("equals")) {
        (Some(limit), None) => match limit.as_f64() {
            Some(limit) if limit.is_finite() => Ok(Predicate::Above { pointer, limit }),
            _ => Err(at(".above", "must be a number")),
        },
        (None, Some(value)) => Ok(Predicate::Equals {
            pointer,
            value: value.clone(),
        }),
        _ => Err(at("", "needs exactly one of \"above\" and \"equals\"")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn always_and_predicates_hold_as_written() {
        let always = ApprovalPolicy::parse(&json!({"when": "always"})).unwrap();
        assert!(always.holds(&Map::new()));
        assert_eq!(always.timeout, DEFAULT_APPROVAL_TIMEOUT);
        assert!(!always.mcp_client);

        let big = ApprovalPolicy::parse(&json!({
            "when": [{"pointer": "/amount", "above": 1000}, {"pointer": "/env", "equals": "prod"}],
            "mcp_client": true, "timeout_secs": 60
        }))
        .unwrap();
        assert!(!big.holds(&args(json!({"amount": 1000, "env": "dev"}))));
        assert!(big.holds(&args(json!({"amount": 1000.5}))));
        assert!(big.holds(&args(json!({"amount": 5, "env": "prod"}))));
        // When in doubt a person decides: no amount, or not a number.
        assert!(big.holds(&args(json!({"env": "dev"}))));
        assert!(big.holds(&args(json!({"amount": "9"}))));
        assert_eq!(big.timeout, Duration::from_secs(60));
        assert!(big.mcp_client);

        let one = ApprovalPolicy::parse(&json!({"when": {"pointer": "/n", "equals": 1}})).unwrap();
        assert!(one.holds(&args(json!({"n": 1.0}))));
        assert!(!one.holds(&args(json!({"n": "1"}))));
        assert!(!one.holds(&Map::new()));
    }

    #[test]
    fn the_public_view_says_what_the_file_said() {
        let policy = ApprovalPolicy::parse(&json!({
            "when": {"pointer": "/amount", "above": 10}, "timeout_secs": 5
        }))
        .unwrap();
        assert_eq!(
            policy.public_view(),
            json!({"when": [{"pointer": "/amount", "above": 10.0}],
                   "mcp_client": false, "timeout_secs": 5})
        );
    }

    #[test]
    fn mistakes_name_the_field() {
        let cases = [
            (json!("always"), "approval"),
            (json!({}), "approval.when"),
            (json!({"when": "sometimes"}), "approval.when"),
            (json!({"when": []}), "approval.when"),
            (json!({"when": "always", "who": 1}), "approval.who"),
            (json!({"when": {"above": 1}}), "approval.when.pointer"),
            (
                json!({"when": [{"pointer": "/a", "above": "x"}]}),
                "approval.when[0].above",
            ),
            (
                json!({"when": {"pointer": "/a", "above": 1, "equals": 2}}),
                "approval.when",
            ),
            (
                json!({"when": {"pointer": "/a", "below": 1}}),
                "approval.when.below",
            ),
            (
                json!({"when": "always", "mcp_client": 1}),
                "approval.mcp_client",
            ),
            (
                json!({"when": "always", "timeout_secs": 0}),
                "approval.timeout_secs",
            ),
            (
                json!({"when": "always", "timeout_secs": 2_592_001}),
                "approval.timeout_secs",
            ),
        ];
        for (value, field) in cases {
            let error = ApprovalPolicy::parse(&value).unwrap_err();
            assert_eq!(error.field.as_deref(), Some(field), "{value}: {error:?}");
        }
    }
}
