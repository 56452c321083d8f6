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
//! [`command_tool`] (the two executors that reach outside the process;
//! `command_process`, how a command's processes are started, signalled and
//! waited for, and [`supervisor`], the per-attempt process that stops them
//! even when the service dies),
//! `error_code` ([`ToolErrorCode`], the one table of the codes a failed
//! attempt is recorded with), `outcome` ([`Outcome`], [`Effect`] and
//! [`ToolError`], what an attempt produced), `registry` ([`ToolRegistry`],
//! [`PrepareError`]), `spec` ([`ToolSpec`], [`RunContext`], [`Backoff`]),
//! `args_error` ([`ArgsError`], why args fail a tool's rules), `file_error`
//! ([`ToolFileError`]), `rate` ([`Rate`], a tool's calls per second),
//! `excerpt` (bounded excerpts of output), `business_key` (a tool's
//! business-key rule and what agents are told of it), `approval` (a tool's
//! approval policy: when a call waits for a person's decision), `secret` ([`Secret`]),
//! `mcp_policy` ([`McpPolicy`]: tasks, keyless calls and content for MCP clients),
//! `progress` (what a running tool reports, kept per call),
//! `stop` ([`Stop`], a running attempt told to stop) and `http_stop` (how an
//! `http` request is abandoned then). This file is the map and holds no type.

mod approval;
mod args_error;
mod builtin;
mod business_key;
mod command_process;
mod command_tool;
mod error_code;
mod excerpt;
pub(crate) mod file;
mod file_error;
mod http_stop;
mod http_tool;
mod mcp_policy;
mod outcome;
pub mod progress;
mod rate;
mod registry;
pub(crate) mod schema;
mod secret;
mod spec;
mod stop;
pub mod supervisor;

pub use approval::{ApprovalPolicy, Predicate, When, DEFAULT_APPROVAL_TIMEOUT};
pub use args_error::ArgsError;
pub use builtin::{Tool, EFFECT_TOOLS, MAX_SLEEP_SECS, TOOL_NAMES};
pub use business_key::{AgentFacing, BusinessKeyRule, OnDuplicate};
pub use error_code::ToolErrorCode;
pub use excerpt::{excerpt, tail_excerpt, EXCERPT_BYTES, MAX_OUTPUT_BYTES};
pub use file_error::ToolFileError;
pub(crate) use http_tool::system_roots;
pub use mcp_policy::{Keyless, McpPolicy, McpResult, TaskSupport};
pub use outcome::{Effect, Outcome, ToolError};
pub use rate::Rate;
pub use registry::{PrepareError, Prepared, ToolRegistry};
pub use secret::Secret;
pub use spec::{jitter, Backoff, Executor, Kind, RunContext, ToolSpec, DEFAULT_TIMEOUT};
pub use stop::{Halt, Stop};
