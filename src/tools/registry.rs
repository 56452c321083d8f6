//! [`ToolRegistry`]: the tools this process runs, by name, and the check of a
//! posted call against them ([`ToolRegistry::prepare`]: the tool exists, its
//! args pass its rules) that comes before anything is accepted.
//!
//! It only reads specs: it never runs a tool and never touches the database.

use super::args_error::ArgsError;
use super::builtin::{self, EFFECT_TOOLS, TOOL_NAMES};
use super::spec::{Kind, ToolSpec};
use crate::input::quote;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// Why a posted (or stored) call cannot run: its text is the `bad_request`
/// message, or the `bad_args` one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrepareError {
    /// `tool` is empty.
    NoTool,
    /// No tool of that name in this process's registry.
    UnknownTool { name: String, known: Vec<String> },
    /// The args fail the tool's rules; the message names the first failing
    /// path (`args.amount ...`).
    BadArgs(ArgsError),
}

impl fmt::Display for PrepareError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PrepareError::NoTool => f.write_str("tool is required"),
            PrepareError::UnknownTool { name, known } => write!(
                f,
                "tool {} is unknown; known tools: {}",
                quote(name),
                known.join(", ")
            ),
            PrepareError::BadArgs(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for PrepareError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PrepareError::BadArgs(e) => Some(e),
            _ => None,
        }
    }
}

/// A call whose args passed its tool's rules.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub spec: Arc<ToolSpec>,
    /// See [`ToolSpec::is_quick`].
    pub quick: bool,
}

/// The tools this process runs, by name.
#[derive(Debug, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<ToolSpec>>,
}

impl ToolRegistry {
    /// The four built-ins, as when the server runs without `--tools`.
    pub fn builtins() -> ToolRegistry {
        let mut registry = ToolRegistry::default();
        for name in TOOL_NAMES {
            registry.insert(builtin::spec(name).expect("every TOOL_NAMES entry is a built-in"));
        }
        registry
    }

    pub(crate) fn insert(&mut self, spec: ToolSpec) {
        self.tools.insert(spec.name.clone(), Arc::new(spec));
    }

    pub fn get(&self, name: &str) -> Option<&Arc<ToolSpec>> {
        self.tools.get(name)
    }

    /// Every tool, by name.
    pub fn specs(&self) -> impl Iterator<Item = &Arc<ToolSpec>> {
        self.tools.values()
    }

    /// Check a posted call (chaos hooks already removed): the tool exists and
    /// its args pass. The message is the `bad_request` text.
    pub fn prepare(&self, name: &str, args: &Map<String, Value>) -> Result<Prepared, PrepareError> {
        if name.is_empty() {
            return Err(PrepareError::NoTool);
        }
        let spec = self.get(name).ok_or_else(|| PrepareError::UnknownTool {
            name: name.to_string(),
            known: self.tools.keys().cloned().collect(),
        })?;
        spec.check_args(args).map_err(PrepareError::BadArgs)?;
        Ok(Prepared {
            spec: Arc::clone(spec),
            quick: spec.is_quick(args),
        })
    }

    /// The tools whose every success writes one `effects` row: each `http`
    /// and `command` tool, and the built-ins of `EFFECT_TOOLS` (the same rule
    /// as `file::effect_tools`, which reads only a file's names and kinds):
    /// what `verify` judges this server's database by.
    pub fn effect_tools(&self) -> Vec<&str> {
        self.specs()
            .filter(|spec| match spec.kind {
                Kind::Http | Kind::Command => true,
                Kind::Builtin => EFFECT_TOOLS.contains(&spec.name.as_str()),
            })
            .map(|spec| spec.name.as_str())
            .collect()
    }

    /// `{"tools": [...]}` for `GET /v1/tools`, sorted by name.
    pub fn public_view(&self) -> Value {
        let tools: Vec<Value> = self.specs().map(|spec| spec.public_view()).collect();
        json!({ "tools": tools })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::{Effect, Outcome, RunContext};

    fn args(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn prepare_names_unknown_tools_and_bad_args() {
        let registry = ToolRegistry::builtins();
        assert_eq!(
            registry.prepare("", &Map::new()).unwrap_err(),
            PrepareError::NoTool
        );
        let unknown = registry
            .prepare("refund", &Map::new())
            .unwrap_err()
            .to_string();
        assert!(
            unknown.contains("\"refund\"") && unknown.contains("charge, fail, send_email, sleep"),
            "{unknown}"
        );
        let bad = registry
            .prepare("charge", &args(json!({"amount": 0})))
            .unwrap_err()
            .to_string();
        assert!(bad.contains("args.amount"), "{bad}");
        let ok = registry
            .prepare("charge", &args(json!({"amount": 3})))
            .unwrap();
        assert!(ok.quick);
        assert!(
            !registry
                .prepare("sleep", &args(json!({"seconds": 1})))
                .unwrap()
                .quick
        );
    }

    #[test]
    fn builtin_spec_runs_the_builtin() {
        let registry = ToolRegistry::builtins();
        let spec = registry.get("charge").unwrap();
        let a = args(json!({"amount": 7}));
        let ctx = RunContext {
            call_id: "c_1",
            effect_id: "e_1",
            attempt: 1,
            tool: "charge",
            args: &a,
            stop: None,
        };
        assert_eq!(
            spec.run(&ctx),
            Outcome::Succeeded {
                result: json!({"charged": 7, "effect_id": "e_1"}),
                effect: Some(Effect {
                    amount: Some(7),
                    detail: None
                }),
            }
        );
    }

    #[test]
    fn public_view_has_exactly_the_published_fields() {
        let view = ToolRegistry::builtins().public_view();
        let charge = &view["tools"][0];
        assert_eq!(charge["name"], "charge");
        let mut keys: Vec<&String> = charge.as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "approval",
                "business_key",
                "input_schema",
                "kind",
                "max_attempts",
                "max_concurrency",
                "name",
                "rate",
                "timeout_ms"
            ]
        );
        assert_eq!(charge["max_attempts"], 1);
        assert_eq!(charge["timeout_ms"], 30_000);
    }
}
