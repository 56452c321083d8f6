//! One tool as this process runs it: [`ToolSpec`] (its published contract,
//! its retry and time bounds, and the [`Executor`] that runs an attempt),
//! [`RunContext`] (what one attempt knows about its call) and [`Backoff`]
//! (the delay before a retry).
//!
//! A spec never touches the database and never runs inside a transaction:
//! [`ToolSpec::run`] returns an [`Outcome`] and the runner commits it. Its
//! `Debug` never shows the executor, which holds URLs, argv and secrets.

use super::approval::ApprovalPolicy;
use super::args_error::ArgsError;
use super::builtin::Tool;
use super::business_key::{AgentFacing, BusinessKeyRule};
use super::error_code::ToolErrorCode;
use super::mcp_policy::McpPolicy;
use super::outcome::{Outcome, ToolError};
use super::rate::Rate;
use super::stop::Stop;
use super::{command_tool, http_tool, schema};
use serde_json::{json, Map, Value};
use std::fmt;
use std::time::Duration;

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

/// Retry delays: exponential from `initial`, never above `max`; a
/// downstream's `Retry-After` honoured up to `retry_after_max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
    /// The longest `Retry-After` honoured (`retry_after_max_ms`); `None`:
    /// `max`. Never less than `initial`.
    pub retry_after_max: Option<Duration>,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(200),
            max: Duration::from_secs(30),
            retry_after_max: None,
        }
    }
}

impl Backoff {
    /// The delay before attempt `failed_attempt + 1`: uniform between `initial`
    /// and `min(max, initial·2^failed_attempt)` ("full jitter" above the floor,
    /// so retries of many calls that failed together spread out). `jitter` is
    /// a number in `[0, 1)`, e.g. from [`jitter`]. A downstream's `Retry-After`
    /// wins when given, but never lets a retry come sooner than `initial`, nor
    /// later than `retry_after_max` (a downstream that says "tomorrow" must
    /// not park a call for a day unless the tool allows it).
    pub fn delay(
        &self,
        failed_attempt: u32,
        retry_after: Option<Duration>,
        jitter: f64,
    ) -> Duration {
        if let Some(hint) = retry_after {
            return hint.min(self.retry_after_cap()).max(self.initial);
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

impl Backoff {
    /// The longest `Retry-After` honoured.
    pub fn retry_after_cap(&self) -> Duration {
        self.retry_after_max.unwrap_or(self.max)
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
    /// On PostgreSQL, the most attempts of this tool running at once on every
    /// node together; on SQLite, in this process. `None`: no cap.
    pub max_concurrency: Option<usize>,
    /// The most attempts started per second, on every process on the database
    /// together, after a burst. `None`: no rate.
    pub rate: Option<Rate>,
    /// The second layer: one live call per business key (`None`: keys only).
    pub business_key: Option<BusinessKeyRule>,
    /// When a call waits for a person's decision (`None`: never).
    pub approval: Option<ApprovalPolicy>,
    /// Its description and hints for agents (`tools/list`).
    pub agent: AgentFacing,
    /// What MCP clients are told and allowed: tasks, keyless calls,
    /// content, required client capabilities.
    pub mcp: McpPolicy,
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
            .field("rate", &self.rate)
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
    /// How the runner stops this attempt when its call is cancelled; `None`
    /// for a run nothing can cancel (a test's).
    pub stop: Option<&'a Stop>,
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
    pub fn check_args(&self, args: &Map<String, Value>) -> Result<(), ArgsError> {
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
    /// long as they take, `sleep` at most 10 s), less when `ctx.stop` is
    /// asked: a `command` tool's process group is signalled, an `http`
    /// tool's request abandoned, a `sleep` woken (`Outcome::Stopped`).
    pub fn run(&self, ctx: &RunContext) -> Outcome {
        match &self.executor {
            Executor::Builtin => match Tool::parse(&self.name, ctx.args) {
                Ok(tool) => tool.run_stoppable(ctx.attempt, ctx.effect_id, ctx.stop),
                Err(e) => Outcome::failed(ToolError::new(ToolErrorCode::BadArgs, e.to_string())),
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
            "rate": self.rate.as_ref().map(Rate::public_view),
            "business_key": self.business_key.as_ref().map(BusinessKeyRule::public_view),
            "approval": self.approval.as_ref().map(ApprovalPolicy::public_view),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_within_its_bounds_and_honours_retry_after() {
        let backoff = Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_millis(1000),
            retry_after_max: Some(Duration::from_secs(10)),
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
        assert_eq!(
            backoff.delay(2, Some(Duration::from_secs(86_400)), 0.5),
            Duration::from_secs(10),
            "a Retry-After past the cap is cut to it"
        );
        let by_max = Backoff {
            retry_after_max: None,
            ..backoff
        };
        assert_eq!(
            by_max.delay(2, Some(Duration::from_secs(86_400)), 0.5),
            Duration::from_millis(1000),
            "without retry_after_max, backoff's max is the cap"
        );
        let j = jitter();
        assert!((0.0..1.0).contains(&j));
    }
}
