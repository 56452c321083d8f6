//! The four built-in tools: how their arguments are validated (at POST time, so
//! a bad request is refused before it is accepted), the JSON Schema each
//! publishes for those same rules, and what running them produces.
//!
//! A built-in never touches the database and never reaches outside the
//! process: it returns an [`Outcome`], and the runner commits it. The side
//! effect of `charge` and `send_email` is simulated by the `effects` row that
//! the runner inserts in the same transaction as `succeeded`; the `http` and
//! `command` tools pass `effect_id` downstream as its idempotency key instead.

use super::args_error::ArgsError;
use super::business_key::AgentFacing;
use super::error_code::ToolErrorCode;
use super::mcp_policy::McpPolicy;
use super::outcome::{Effect, Outcome, ToolError};
use super::spec::{Backoff, Executor, Kind, ToolSpec, DEFAULT_TIMEOUT};
use super::stop::Stop;
use crate::fingerprint::as_integer;
use serde_json::{json, Map, Value};
use std::time::Duration;

/// A validated tool call.
#[derive(Debug, Clone, PartialEq)]
pub enum Tool {
    Charge {
        amount: i64,
    },
    SendEmail {
        to: String,
    },
    Sleep {
        seconds: f64,
    },
    Fail {
        retryable: bool,
        fail_times: Option<i64>,
    },
}

/// The longest a `sleep` may run; the lease must exceed it.
pub const MAX_SLEEP_SECS: f64 = 10.0;

/// Names of the tools, as accepted in `"tool"`.
pub const TOOL_NAMES: [&str; 4] = ["charge", "send_email", "sleep", "fail"];

/// The tools whose every success writes exactly one `effects` row (the others
/// never write one). `verify` checks the database against this list, and a
/// test below holds it to what `run` does.
pub const EFFECT_TOOLS: [&str; 2] = ["charge", "send_email"];

impl Tool {
    /// Validate `args` (chaos hooks already removed). The error names the field.
    pub fn parse(name: &str, args: &Map<String, Value>) -> Result<Tool, ArgsError> {
        match name {
            "charge" => {
                allow_only(args, &["amount"])?;
                let amount = args
                    .get("amount")
                    .and_then(as_integer)
                    .filter(|a| *a > 0)
                    .ok_or(rule("amount", "must be a positive integer"))?;
                Ok(Tool::Charge { amount })
            }
            "send_email" => {
                allow_only(args, &["to", "subject", "body"])?;
                let to = match args.get("to") {
                    Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
                    _ => return Err(rule("to", "must be a non-empty string")),
                };
                for field in ["subject", "body"] {
                    if !matches!(args.get(field), None | Some(Value::Null | Value::String(_))) {
                        return Err(rule(field, "must be a string"));
                    }
                }
                Ok(Tool::SendEmail { to })
            }
            "sleep" => {
                allow_only(args, &["seconds"])?;
                let seconds = args
                    .get("seconds")
                    .and_then(Value::as_f64)
                    .filter(|s| (0.0..=MAX_SLEEP_SECS).contains(s))
                    .ok_or(rule("seconds", "must be a number from 0 to 10"))?;
                Ok(Tool::Sleep { seconds })
            }
            "fail" => {
                allow_only(args, &["retryable", "fail_times"])?;
                let retryable = match args.get("retryable") {
                    None | Some(Value::Null) => true,
                    Some(Value::Bool(b)) => *b,
                    Some(_) => return Err(rule("retryable", "must be a boolean")),
                };
                let fail_times = match args.get("fail_times") {
                    None | Some(Value::Null) => None,
                    Some(v) => Some(
                        as_integer(v)
                            .filter(|n| *n >= 0)
                            .ok_or(rule("fail_times", "must be a non-negative integer"))?,
                    ),
                };
                Ok(Tool::Fail {
                    retryable,
                    fail_times,
                })
            }
            other => Err(ArgsError::NotBuiltin {
                name: other.to_string(),
            }),
        }
    }

    /// `sleep`'s answer once it has slept.
    fn slept(&self, seconds: f64) -> Outcome {
        Outcome::Succeeded {
            result: json!({"slept": seconds}),
            effect: None,
        }
    }

    /// Whether the tool returns at once (everything but `sleep`): a worker may
    /// then take a second call with it, whose lease starts ticking meanwhile.
    pub fn is_quick(&self) -> bool {
        !matches!(self, Tool::Sleep { .. })
    }

    /// `run`, except that a `sleep` ends early when `stop` is asked
    /// (`Outcome::Stopped`: it reached nothing outside).
    pub fn run_stoppable(&self, attempt: i64, effect_id: &str, stop: Option<&Stop>) -> Outcome {
        match (self, stop) {
            (Tool::Sleep { seconds }, Some(stop)) => {
                if stop.sleep(Duration::from_secs_f64(*seconds)) {
                    return Outcome::Stopped {
                        sent: false,
                        how: "its sleep was woken".into(),
                    };
                }
                self.slept(*seconds)
            }
            _ => self.run(attempt, effect_id),
        }
    }

    /// Run the tool for attempt number `attempt` (1-based). `effect_id` is the
    /// call's downstream idempotency key, the same on every attempt.
    pub fn run(&self, attempt: i64, effect_id: &str) -> Outcome {
        match self {
            Tool::Charge { amount } => Outcome::Succeeded {
                result: json!({"charged": amount, "effect_id": effect_id}),
                effect: Some(Effect {
                    amount: Some(*amount),
                    detail: None,
                }),
            },
            Tool::SendEmail { to } => Outcome::Succeeded {
                result: json!({"sent_to": to, "effect_id": effect_id}),
                effect: Some(Effect {
                    amount: None,
                    detail: None,
                }),
            },
            Tool::Sleep { seconds } => {
                std::thread::sleep(Duration::from_secs_f64(*seconds));
                self.slept(*seconds)
            }
            Tool::Fail {
                retryable,
                fail_times,
            } => {
                if fail_times.is_none_or(|n| attempt <= n) {
                    Outcome::failed(
                        ToolError::new(
                            ToolErrorCode::ToolFailed,
                            format!("fail tool failed on attempt {attempt}"),
                        )
                        .with_retryable(*retryable),
                    )
                } else {
                    Outcome::Succeeded {
                        result: json!({"failed_attempts": attempt - 1}),
                        effect: None,
                    }
                }
            }
        }
    }
}

/// A failed hand rule of `field`.
fn rule(field: &'static str, rule: &'static str) -> ArgsError {
    ArgsError::Field { field, rule }
}

/// Unknown fields are refused: a typo in a payment request must not be ignored.
fn allow_only(args: &Map<String, Value>, known: &'static [&'static str]) -> Result<(), ArgsError> {
    match args.keys().find(|k| !known.contains(&k.as_str())) {
        Some(field) => Err(ArgsError::UnknownField {
            field: crate::input::clip(field).to_string(),
            expected: known,
        }),
        None => Ok(()),
    }
}

/// The JSON Schema that states `name`'s rules, as `GET /v1/tools` publishes
/// it. The hand rules in [`Tool::parse`] stay the ones enforced (their
/// messages are part of the API); a test holds the two to the same verdicts.
pub fn input_schema(name: &str) -> Option<Value> {
    let schema = match name {
        "charge" => json!({
            "type": "object",
            "required": ["amount"],
            "properties": {"amount": {"type": "integer", "minimum": 1}},
            "additionalProperties": false,
        }),
        "send_email" => json!({
            "type": "object",
            "required": ["to"],
            "properties": {
                "to": {"type": "string", "pattern": "\\S"},
                "subject": {"type": ["string", "null"]},
                "body": {"type": ["string", "null"]},
            },
            "additionalProperties": false,
        }),
        "sleep" => json!({
            "type": "object",
            "required": ["seconds"],
            "properties": {"seconds": {"type": "number", "minimum": 0, "maximum": MAX_SLEEP_SECS}},
            "additionalProperties": false,
        }),
        "fail" => json!({
            "type": "object",
            "properties": {
                "retryable": {"type": ["boolean", "null"]},
                "fail_times": {"type": ["integer", "null"], "minimum": 0},
            },
            "additionalProperties": false,
        }),
        _ => return None,
    };
    Some(schema)
}

/// The spec of built-in `name` with its defaults: one attempt (a built-in's
/// failure is final unless the tools file says otherwise), the default timeout,
/// no concurrency cap.
pub fn spec(name: &str) -> Option<ToolSpec> {
    Some(ToolSpec {
        name: name.to_string(),
        kind: Kind::Builtin,
        input_schema: input_schema(name)?,
        validator: None,
        max_attempts: 1,
        timeout: DEFAULT_TIMEOUT,
        backoff: Backoff::default(),
        max_concurrency: None,
        rate: None,
        business_key: None,
        approval: None,
        agent: AgentFacing::default_for(name, false),
        mcp: McpPolicy::default_for(Kind::Builtin, name),
        executor: Executor::Builtin,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(name: &str, args: Value) -> Result<Tool, ArgsError> {
        Tool::parse(name, args.as_object().unwrap())
    }

    #[test]
    fn charge_needs_a_positive_integer_amount() {
        assert_eq!(
            parse("charge", json!({"amount": 5})),
            Ok(Tool::Charge { amount: 5 })
        );
        assert_eq!(
            parse("charge", json!({"amount": 5.0})),
            Ok(Tool::Charge { amount: 5 })
        );
        for bad in [
            json!({}),
            json!({"amount": 0}),
            json!({"amount": -1}),
            json!({"amount": 1.5}),
            json!({"amount": "1"}),
        ] {
            let err = parse("charge", bad).unwrap_err().to_string();
            assert!(err.contains("args.amount"), "{err}");
        }
        assert!(parse("charge", json!({"amount": 1, "amont": 2}))
            .unwrap_err()
            .to_string()
            .contains("args.amont"));
    }

    #[test]
    fn send_email_needs_a_recipient() {
        assert!(parse("send_email", json!({"to": "a@b", "subject": "s"})).is_ok());
        assert!(parse("send_email", json!({"to": ""}))
            .unwrap_err()
            .to_string()
            .contains("args.to"));
        assert!(parse("send_email", json!({"to": "a", "body": 1}))
            .unwrap_err()
            .to_string()
            .contains("args.body"));
    }

    #[test]
    fn sleep_is_bounded() {
        assert!(parse("sleep", json!({"seconds": 10})).is_ok());
        assert!(parse("sleep", json!({"seconds": 10.5}))
            .unwrap_err()
            .to_string()
            .contains("args.seconds"));
        assert!(parse("sleep", json!({"seconds": -1})).is_err());
    }

    #[test]
    fn unknown_tool_is_named_but_never_echoed_whole() {
        assert!(parse("refund", json!({}))
            .unwrap_err()
            .to_string()
            .contains("refund"));
        let huge = "r".repeat(500_000);
        assert!(parse(&huge, json!({})).unwrap_err().to_string().len() < 300);
        let field = format!("{{\"{huge}\":1}}");
        let args: Value = serde_json::from_str(&field).unwrap();
        assert!(parse("charge", args).unwrap_err().to_string().len() < 300);
    }

    /// `verify` trusts `EFFECT_TOOLS`: a success writes an effect exactly for them.
    #[test]
    fn effect_tools_are_exactly_those_whose_success_writes_an_effect() {
        let examples = [
            ("charge", json!({"amount": 1})),
            ("send_email", json!({"to": "a@b"})),
            ("sleep", json!({"seconds": 0})),
            ("fail", json!({"fail_times": 0})),
        ];
        assert_eq!(examples.each_ref().map(|(name, _)| *name), TOOL_NAMES);
        for (name, args) in examples {
            match parse(name, args).unwrap().run(1, "eff_1") {
                Outcome::Succeeded { effect, .. } => {
                    assert_eq!(effect.is_some(), EFFECT_TOOLS.contains(&name), "{name}")
                }
                other => panic!("{name}: {other:?}"),
            }
        }
    }

    #[test]
    fn fail_fails_while_attempt_within_fail_times() {
        let tool = parse("fail", json!({"fail_times": 1})).unwrap();
        assert!(matches!(tool.run(1, "eff"), Outcome::Failed { .. }));
        assert!(matches!(
            tool.run(2, "eff"),
            Outcome::Succeeded { effect: None, .. }
        ));
        let always = parse("fail", json!({"retryable": false})).unwrap();
        match always.run(7, "eff") {
            Outcome::Failed { error, retry_after } => {
                assert_eq!(error.code, ToolErrorCode::ToolFailed);
                assert!(!error.retryable);
                assert_eq!(retry_after, None);
            }
            other => panic!("{other:?}"),
        }
    }

    /// The published schemas and the enforced hand rules give the same verdict.
    #[test]
    fn published_schemas_match_the_hand_rules() {
        let cases = [
            ("charge", json!({"amount": 5})),
            ("charge", json!({"amount": 5.0})),
            ("charge", json!({"amount": 0})),
            ("charge", json!({"amount": 1.5})),
            ("charge", json!({"amount": "1"})),
            ("charge", json!({})),
            ("charge", json!({"amount": 1, "amont": 2})),
            (
                "send_email",
                json!({"to": "a@b", "subject": "s", "body": null}),
            ),
            ("send_email", json!({"to": "  "})),
            ("send_email", json!({"to": ""})),
            ("send_email", json!({"to": "a", "body": 1})),
            ("send_email", json!({"subject": "s"})),
            ("sleep", json!({"seconds": 0})),
            ("sleep", json!({"seconds": 10})),
            ("sleep", json!({"seconds": 10.5})),
            ("sleep", json!({"seconds": -1})),
            ("sleep", json!({"seconds": "1"})),
            ("fail", json!({})),
            ("fail", json!({"retryable": false, "fail_times": 2})),
            ("fail", json!({"retryable": null, "fail_times": null})),
            ("fail", json!({"retryable": "no"})),
            ("fail", json!({"fail_times": -1})),
            ("fail", json!({"fail_times": 1.5})),
            ("fail", json!({"times": 1})),
        ];
        for (name, args) in cases {
            let schema =
                crate::tools::schema::Schema::compile(&input_schema(name).unwrap()).unwrap();
            let by_schema = schema.check(args.as_object().unwrap()).is_ok();
            let by_hand = parse(name, args.clone()).is_ok();
            assert_eq!(by_schema, by_hand, "{name} {args}");
        }
    }

    #[test]
    fn charge_result_names_amount_and_effect_id() {
        let out = Tool::Charge { amount: 100 }.run(1, "eff_1");
        assert_eq!(
            out,
            Outcome::Succeeded {
                result: json!({"charged": 100, "effect_id": "eff_1"}),
                effect: Some(Effect {
                    amount: Some(100),
                    detail: None
                }),
            }
        );
    }
}
