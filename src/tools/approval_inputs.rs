//! What an approval policy asks the MCP client that may decide a call
//! (`"inputs"` in a tool's `"approval"`): rounds of named questions, each an
//! `elicitation/create` form with its message and the JSON Schema its answer
//! must meet. The client is asked one round at a time; accepting every
//! question of every round approves the call, declining any one denies it,
//! and the accepted answers reach the tool with the call (`"inputs"` in its
//! request body). Without `"inputs"` the client is asked one question,
//! `approval`: a confirmation whose message shows the call.
//!
//! It owns reading the field, checking an answer's content against its
//! question, and saying which questions are still open given the answers
//! recorded so far. It never touches the database and never decides: the
//! MCP layer records answers and decisions through the store.

use super::file_error::{field_error, FieldError};
use super::schema::Schema;
use serde_json::{json, Map, Value};
use std::sync::Arc;

/// The key of the one question asked when a policy names no `inputs`.
pub const CONFIRMATION_KEY: &str = "approval";
/// The most rounds, and questions in one round.
const MAX_ROUNDS: usize = 8;
const MAX_PER_ROUND: usize = 8;
/// The longest message a question may carry, in bytes.
const MAX_MESSAGE_BYTES: usize = 1_000;

/// One question: its key in `inputRequests`, its message (`None`: the
/// confirmation's, made for each call) and what its answer must meet.
#[derive(Debug, Clone)]
pub struct Question {
    pub key: String,
    pub message: Option<String>,
    schema_json: Value,
    schema: Arc<Schema>,
}

impl PartialEq for Question {
    fn eq(&self, other: &Question) -> bool {
        (&self.key, &self.message, &self.schema_json)
            == (&other.key, &other.message, &other.schema_json)
    }
}

impl Question {
    /// The form's `requestedSchema`, as the file gave it.
    pub fn requested_schema(&self) -> &Value {
        &self.schema_json
    }

    /// Whether `content` (an accepted answer's) meets this question's
    /// schema; the message names the first failing field.
    pub fn check(&self, content: &Map<String, Value>) -> Result<(), String> {
        self.schema
            .check(content)
            .map_err(|e| format!("inputResponses.{}.content: {e}", self.key))
    }
}

/// The rounds a policy asks, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Inputs {
    rounds: Vec<Vec<Question>>,
    /// Whether the file named them (`false`: the one confirmation).
    explicit: bool,
}

impl Inputs {
    /// One confirmation, `approval`, with no fields.
    pub fn confirmation() -> Inputs {
        let schema_json = json!({"type": "object", "properties": {}});
        let schema = Schema::compile(&schema_json).expect("the confirmation's schema compiles");
        Inputs {
            rounds: vec![vec![Question {
                key: CONFIRMATION_KEY.to_string(),
                message: None,
                schema_json,
                schema: Arc::new(schema),
            }]],
            explicit: false,
        }
    }

    /// Read `approval.inputs`: `[{"key": {"message": ..., "schema": {...}}}, ...]`,
    /// one object per round.
    pub fn parse(value: &Value) -> Result<Inputs, FieldError> {
        let rounds = value
            .as_array()
            .filter(|r| (1..=MAX_ROUNDS).contains(&r.len()))
            .ok_or_else(|| {
                field_error(
                    "approval.inputs",
                    format!(
                        "must be 1 to {MAX_ROUNDS} rounds, each {{\"key\": {{\"message\": \
                         ..., \"schema\": {{...}}}}}}"
                    ),
                )
            })?;
        let mut seen: Vec<String> = Vec::new();
        let mut parsed = Vec::with_capacity(rounds.len());
        for (i, round) in rounds.iter().enumerate() {
            let place = format!("approval.inputs[{i}]");
            let questions = round
                .as_object()
                .filter(|q| (1..=MAX_PER_ROUND).contains(&q.len()))
                .ok_or_else(|| {
                    field_error(
                        &place,
                        format!("must be an object of 1 to {MAX_PER_ROUND} questions by key"),
                    )
                })?;
            let mut this_round = Vec::with_capacity(questions.len());
            for (key, question) in questions {
                if seen.contains(key) {
                    return Err(field_error(
                        format!("{place}.{key}"),
                        "is asked in an earlier round",
                    ));
                }
                seen.push(key.clone());
                this_round.push(parse_question(&place, key, question)?);
            }
            parsed.push(this_round);
        }
        Ok(Inputs {
            rounds: parsed,
            explicit: true,
        })
    }

    /// Whether the file named these (so the tool is told the answers).
    pub fn explicit(&self) -> bool {
        self.explicit
    }

    /// The round being asked, given the keys already answered (`None`:
    /// every question has its answer), and its index.
    pub fn open_round(&self, answered: &Map<String, Value>) -> Option<(usize, &[Question])> {
        self.rounds
            .iter()
            .enumerate()
            .find(|(_, round)| round.iter().any(|q| !answered.contains_key(&q.key)))
            .map(|(i, round)| (i, round.as_slice()))
    }

    /// What `GET /v1/tools` and `tools/list` show: the rounds as the file
    /// gave them.
    pub fn public_view(&self) -> Value {
        let rounds = self.rounds.iter().map(|round| {
            let questions = round.iter().map(|q| {
                let view = json!({"message": q.message, "schema": q.schema_json});
                (q.key.clone(), view)
            });
            Value::Object(questions.collect())
        });
        Value::Array(rounds.collect())
    }
}

/// One question `key` of a round at `place`.
fn parse_question(place: &str, key: &str, value: &Value) -> Result<Question, FieldError> {
    let at = |field: &str, message: &str| field_error(format!("{place}.{key}{field}"), message);
    let key_ok = (1..=64).contains(&key.len())
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if !key_ok {
        return Err(at("", "is not a key: 1 to 64 of A-Z a-z 0-9 _ - ."));
    }
    let object = value
        .as_object()
        .ok_or_else(|| at("", "must be {\"message\": ..., \"schema\": {...}}"))?;
    if let Some(extra) = object
        .keys()
        .find(|k| !matches!(k.as_str(), "message" | "schema"))
    {
        return Err(at(&format!(".{extra}"), "is not a field (message, schema)"));
    }
    let message = match object.get("message").and_then(Value::as_str) {
        Some(m) if !m.trim().is_empty() && m.len() <= MAX_MESSAGE_BYTES => m.to_string(),
        _ => {
            return Err(at(
                ".message",
                &format!("is required: a text of 1 to {MAX_MESSAGE_BYTES} bytes"),
            ))
        }
    };
    let schema_json = object
        .get("schema")
        .filter(|s| s.get("type").and_then(Value::as_str) == Some("object"))
        .cloned()
        .ok_or_else(|| {
            at(
                ".schema",
                "is required: the answer's JSON Schema, {\"type\": \"object\", ...}",
            )
        })?;
    let schema = Schema::compile(&schema_json).map_err(|e| at(".schema", &e.to_string()))?;
    Ok(Question {
        key: key.to_string(),
        message: Some(message),
        schema_json,
        schema: Arc::new(schema),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(keys: &[&str]) -> Map<String, Value> {
        keys.iter().map(|k| (k.to_string(), json!({}))).collect()
    }

    fn two_rounds() -> Inputs {
        Inputs::parse(&json!([
            {"name": {"message": "Your name?", "schema": {"type": "object",
              "properties": {"name": {"type": "string"}}, "required": ["name"]}}},
            {"color": {"message": "A colour?", "schema": {"type": "object"}},
             "size": {"message": "A size?", "schema": {"type": "object"}}}
        ]))
        .unwrap()
    }

    #[test]
    fn rounds_open_in_order_until_every_question_has_its_answer() {
        let inputs = two_rounds();
        let keys = |round: &[Question]| round.iter().map(|q| q.key.clone()).collect::<Vec<_>>();
        let (i, first) = inputs.open_round(&answered(&[])).unwrap();
        assert_eq!((i, keys(first)), (0, vec!["name".to_string()]));
        let (i, second) = inputs.open_round(&answered(&["name", "size"])).unwrap();
        assert_eq!(i, 1);
        assert_eq!(keys(second), vec!["color".to_string(), "size".to_string()]);
        assert!(inputs
            .open_round(&answered(&["name", "color", "size"]))
            .is_none());
        let confirmation = Inputs::confirmation();
        assert!(!confirmation.explicit());
        let (_, only) = confirmation.open_round(&Map::new()).unwrap();
        assert_eq!(only[0].key, CONFIRMATION_KEY);
    }

    #[test]
    fn an_answer_is_held_to_its_questions_schema() {
        let inputs = two_rounds();
        let (_, round) = inputs.open_round(&Map::new()).unwrap();
        let ok = json!({"name": "Alice"});
        assert_eq!(round[0].check(ok.as_object().unwrap()), Ok(()));
        let wrong = json!({"name": 7});
        let error = round[0].check(wrong.as_object().unwrap()).unwrap_err();
        assert!(error.starts_with("inputResponses.name.content:"), "{error}");
        assert!(round[0].check(&Map::new()).is_err(), "name is required");
    }

    #[test]
    fn mistakes_name_the_field() {
        let question = json!({"message": "m", "schema": {"type": "object"}});
        let cases = [
            (json!([]), "approval.inputs"),
            (json!({"a": question}), "approval.inputs"),
            (json!([{}]), "approval.inputs[0]"),
            (json!([{"a b": question}]), "approval.inputs[0].a b"),
            (
                json!([{"a": question}, {"a": question}]),
                "approval.inputs[1].a",
            ),
            (
                json!([{"a": {"schema": {"type": "object"}}}]),
                "approval.inputs[0].a.message",
            ),
            (
                json!([{"a": {"message": "m"}}]),
                "approval.inputs[0].a.schema",
            ),
            (
                json!([{"a": {"message": "m", "schema": {"type": "string"}}}]),
                "approval.inputs[0].a.schema",
            ),
            (
                json!([{"a": {"message": "m", "schema": {"type": "object"}, "x": 1}}]),
                "approval.inputs[0].a.x",
            ),
        ];
        for (value, field) in cases {
            let error = Inputs::parse(&value).unwrap_err();
            assert_eq!(error.field.as_deref(), Some(field), "{value}: {error:?}");
        }
    }
}
