//! The tools this server runs: which exist ([`ToolRegistry`]), how a call's
//! arguments are checked when it is posted ([`ToolRegistry::prepare`]), how one
//! attempt runs ([`ToolSpec::run`]) and what it produced ([`Outcome`]).
//!
//! A tool never touches the database and never runs inside a transaction: it
//! returns an [`Outcome`], and the runner commits it. Every attempt of one call
//! carries the same `effect_id`; the `http` and `command` executors hand it to
//! the downstream as its idempotency key, which is what keeps a retry (or a
//! crash between the downstream's answer and the local commit) from becoming a
//! second effect. Nothing here may print, log or return a configured secret
//! (header values, `env` values): they live in [`Secret`], whose `Debug` and
//! `Display` say `***`.
//!
//! Submodules: [`builtin`] (the four demo tools), [`file`](mod@file) (the `--tools` file),
//! [`schema`] (JSON Schema for `input_schema`), [`http_tool`] and
//! [`command_tool`] (the two executors that reach outside the process),
//! `error_code` ([`ToolErrorCode`], the one table of the codes a failed
//! attempt is recorded with), `outcome` ([`Outcome`], [`Effect`] and
//! [`ToolError`], what an attempt produced). This file holds the registry
//! and the tool's spec.

pub mod builtin;
pub mod business_key;
pub mod command_tool;
mod error_code;
pub mod file;
pub mod http_tool;
mod outcome;
pub mod schema;
mod secret;

pub use builtin::{Tool, EFFECT_TOOLS, MAX_SLEEP_SECS, TOOL_NAMES};
pub use business_key::{AgentFacing, BusinessKeyRule, OnDuplicate};
pub use error_code::ToolErrorCode;
pub use file::ToolFileError;
pub use outcome::{Effect, Outcome, ToolError};
pub use secret::Secret;

use crate::input::quote;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Longest excerpt of a downstream's body or a command's stderr kept in an
/// error or an effect's detail.
pub const EXCERPT_BYTES: usize = 4 * 1024;
/// Largest response body (`http`) or stdout (`command`) a tool may produce.
pub const MAX_OUTPUT_BYTES: usize = 1024 * 1024;
/// A tool's run time bound when the file does not give `timeout_ms`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Which executor runs a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Builtin,
    Http,
    Command,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Builtin => "builtin",
            Kind::Http => "http",
            Kind::Command => "command",
        }
    }
}

/// Retry delays: exponential from `initial`, never above `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(200),
            max: Duration::from_secs(30),
        }
    }
}

impl Backoff {
    /// The delay before attempt `failed_attempt + 1`: uniform between `initial`
    /// and `min(max, initial·2^failed_attempt)` ("full jitter" above the floor,
    /// so retries of many calls that failed together spread out). `jitter` is
    /// a number in `[0, 1)`, e.g. from [`jitter`]. A downstream's `Retry-After`
    /// wins when given, but never lets a retry come sooner than `initial`.
    pub fn delay(
        &self,
        failed_attempt: u32,
        retry_after: Option<Duration>,
        jitter: f64,
    ) -> Duration {
        if let Some(hint) = retry_after {
            return hint.max(self.initial);
        }
        let doubling = 2f64.powi(failed_attempt.min(62) as i32);
        let ceiling = self
            .initial
            .mul_f64(doubling)
            .min(self.max)
            .max(self.initial);
        let spread = ceiling - self.initial;
        self.initial + spread.mul_f64(jitter.clamp(0.0, 1.0))
    }
}

/// A number in `[0, 1)` that differs between calls, from std's randomly keyed
/// hasher: backoff needs spread, not cryptographic randomness.
pub fn jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// What runs a tool's attempt.
pub enum Executor {
    /// One of the four built-ins, by its name.
    Builtin,
    Http(http_tool::HttpTool),
    Command(command_tool::CommandTool),
}

/// One tool: its published contract and how it runs.
pub struct ToolSpec {
    pub name: String,
    pub kind: Kind,
    /// Published in `GET /v1/tools`; for built-ins it mirrors their hand rules.
    pub input_schema: Value,
    /// Checks `args` at POST time; `None` for built-ins, which check by hand.
    pub validator: Option<schema::Schema>,
    /// Attempts before a retryable failure becomes final (at least 1).
    pub max_attempts: u32,
    /// Bounds one attempt; the executor stops the run when it passes.
    pub timeout: Duration,
    pub backoff: Backoff,
    /// Most attempts of this tool running at once in this process; `None`: no cap.
    pub max_concurrency: Option<usize>,
    /// The second layer: one live call per business key (`None`: keys only).
    pub business_key: Option<BusinessKeyRule>,
    /// Its description and hints for agents (`tools/list`).
    pub agent: AgentFacing,
    pub executor: Executor,
}

impl fmt::Debug for ToolSpec {
    /// Deliberately omits the executor: it holds URLs, argv and secrets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolSpec")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("max_attempts", &self.max_attempts)
            .field("timeout", &self.timeout)
            .field("backoff", &self.backoff)
            .field("max_concurrency", &self.max_concurrency)
            .finish_non_exhaustive()
    }
}

/// Everything one attempt knows about its call. The same five fields are the
/// JSON body an `http` downstream receives and a `command` reads on stdin.
#[derive(Debug, Clone, Copy)]
pub struct RunContext<'a> {
    pub call_id: &'a str,
    /// The call's downstream idempotency key: the same on every attempt.
    pub effect_id: &'a str,
    /// 1-based attempt number.
    pub attempt: i64,
    pub tool: &'a str,
    /// The validated args, chaos hooks removed.
    pub args: &'a Map<String, Value>,
}

impl RunContext<'_> {
    /// `{"call_id", "effect_id", "attempt", "tool", "args"}`.
    pub fn request_body(&self) -> Value {
        json!({
            "call_id": self.call_id,
            "effect_id": self.effect_id,
            "attempt": self.attempt,
            "tool": self.tool,
            "args": self.args,
        })
    }
}

impl ToolSpec {
    /// Check `args` against the tool's rules; the message names the first
    /// failing path (`args.amount ...`).
    pub fn check_args(&self, args: &Map<String, Value>) -> Result<(), String> {
        match (&self.executor, &self.validator) {
            (Executor::Builtin, _) => Tool::parse(&self.name, args).map(|_| ()),
            (_, Some(schema)) => schema.check(args),
            (_, None) => Ok(()),
        }
    }

    /// Whether an attempt returns at once, so a worker may claim a second call
    /// with it (see `runner`). Only in-process built-ins other than `sleep` do.
    pub fn is_quick(&self, args: &Map<String, Value>) -> bool {
        matches!(self.executor, Executor::Builtin)
            && Tool::parse(&self.name, args).is_ok_and(|tool| tool.is_quick())
    }

    /// Run one attempt. Blocks for at most about `timeout` (built-ins: for as
    /// long as they take, `sleep` at most 10 s).
    pub fn run(&self, ctx: &RunContext) -> Outcome {
        match &self.executor {
            Executor::Builtin => match Tool::parse(&self.name, ctx.args) {
                Ok(tool) => tool.run(ctx.attempt, ctx.effect_id),
                Err(message) => Outcome::failed(ToolError::new(ToolErrorCode::BadArgs, message)),
            },
            Executor::Http(http) => http.run(ctx),
            Executor::Command(command) => command.run(ctx),
        }
    }

    /// What `GET /v1/tools` shows: never a URL, argv, header or env value.
    pub fn public_view(&self) -> Value {
        json!({
            "name": self.name,
            "kind": self.kind.as_str(),
            "input_schema": self.input_schema,
            "max_attempts": self.max_attempts,
            "timeout_ms": self.timeout.as_millis() as u64,
            "max_concurrency": self.max_concurrency,
            "business_key": self.business_key.as_ref().map(BusinessKeyRule::public_view),
        })
    }
}

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
    BadArgs(String),
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
            PrepareError::BadArgs(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for PrepareError {}

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

    /// `{"tools": [...]}` for `GET /v1/tools`, sorted by name.
    pub fn public_view(&self) -> Value {
        let tools: Vec<Value> = self.specs().map(|spec| spec.public_view()).collect();
        json!({ "tools": tools })
    }
}

/// At most `EXCERPT_BYTES` of `bytes` as text, cut on a character boundary.
pub fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(EXCERPT_BYTES)]);
    truncate_on_char(text.into_owned(), EXCERPT_BYTES)
}

/// The last `EXCERPT_BYTES` of `bytes` as text (stderr: the end says why).
pub fn tail_excerpt(bytes: &[u8]) -> String {
    let start = bytes.len().saturating_sub(EXCERPT_BYTES);
    let text = String::from_utf8_lossy(&bytes[start..]).into_owned();
    let mut cut = text.len().saturating_sub(EXCERPT_BYTES);
    while !text.is_char_boundary(cut) {
        cut += 1;
    }
    text[cut..].to_string()
}

fn truncate_on_char(mut text: String, limit: usize) -> String {
    if text.len() > limit {
        let mut cut = limit;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

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
                "business_key",
                "input_schema",
                "kind",
                "max_attempts",
                "max_concurrency",
                "name",
                "timeout_ms"
            ]
        );
        assert_eq!(charge["max_attempts"], 1);
        assert_eq!(charge["timeout_ms"], 30_000);
    }

    #[test]
    fn backoff_grows_within_its_bounds_and_honours_retry_after() {
        let backoff = Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_millis(1000),
        };
        assert_eq!(backoff.delay(1, None, 0.0), Duration::from_millis(100));
        assert_eq!(backoff.delay(1, None, 1.0), Duration::from_millis(200));
        assert_eq!(backoff.delay(3, None, 1.0), Duration::from_millis(800));
        assert_eq!(backoff.delay(30, None, 1.0), Duration::from_millis(1000));
        assert_eq!(
            backoff.delay(2, Some(Duration::from_secs(5)), 0.5),
            Duration::from_secs(5)
        );
        assert_eq!(
            backoff.delay(2, Some(Duration::ZERO), 0.5),
            Duration::from_millis(100)
        );
        let j = jitter();
        assert!((0.0..1.0).contains(&j));
    }

    #[test]
    fn excerpts_cut_on_character_boundaries() {
        let text = "é".repeat(EXCERPT_BYTES);
        let head = excerpt(text.as_bytes());
        assert!(head.len() <= EXCERPT_BYTES && head.chars().all(|c| c == 'é'));
        let tail = tail_excerpt(format!("start{}", "é".repeat(EXCERPT_BYTES)).as_bytes());
        assert!(tail.len() <= EXCERPT_BYTES && tail.chars().all(|c| c == 'é'));
        assert_eq!(tail_excerpt(b"short"), "short");
    }
}
