//! The `--tools FILE` format: reading it into a [`ToolRegistry`], with every
//! rule checked at start-up so that a mistake stops the server (exit 2) with
//! one line naming the tool and the field, instead of surfacing as a failed
//! call later.
//!
//! It owns `${NAME}` expansion (from the environment, once, at load) and path
//! resolution (`argv[0]` and `ca_file` against the file's folder), both in
//! `executors` (an `http` entry's and a `command` entry's own fields). It must
//! never put a header or `env` value, expanded or not, into a message: those
//! become [`Secret`]s as soon as they are read.

use super::approval::ApprovalPolicy;
use super::builtin::{EFFECT_TOOLS, TOOL_NAMES};
use super::business_key::{AgentFacing, BusinessKeyRule};
use super::file_error::{field_error, FieldError, ToolFileError};
use super::kind::Kind;
use super::mcp_policy::{parse_keyless, Keyless, McpPolicy};
use super::rate::Rate;
use super::registry::ToolRegistry;
use super::schema::Schema;
use super::spec::{Backoff, Executor, ToolSpec, DEFAULT_TIMEOUT};
use executors::{command_executor, http_executor};
use serde_json::{json, Map, Value};
use std::path::Path;
use std::time::Duration;

/// Fields every kind accepts.
const COMMON_FIELDS: [&str; 15] = [
    "tasks",
    "keyless",
    "mcp_result",
    "client_capabilities",
    "kind",
    "description",
    "annotations",
    "business_key",
    "input_schema",
    "max_attempts",
    "timeout_ms",
    "backoff_ms",
    "max_concurrency",
    "rate",
    "approval",
];
const HTTP_FIELDS: [&str; 4] = ["url", "headers", "ca_file", "retry_after_max_ms"];
const COMMAND_FIELDS: [&str; 2] = ["argv", "env"];
const MAX_ATTEMPTS_LIMIT: u64 = 100;
/// A day: heartbeats let a tool outlive the lease, not run forever.
const MAX_TIMEOUT_MS: u64 = 86_400_000;
const MAX_CONCURRENCY_LIMIT: u64 = 10_000;
/// `max_attempts` of `http` and `command` tools when the file does not say.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;

/// What the whole file shares: where relative paths start, and the
/// environment as it was at start-up.
pub(super) struct Context<'a> {
    pub(super) base_dir: &'a Path,
    pub(super) vars: &'a dyn Fn(&str) -> Option<String>,
    /// The file's top-level `"keyless"`: each tool's unless it names its own.
    keyless: Option<Keyless>,
}

impl ToolRegistry {
    /// Read `path`; `${NAME}` comes from this process's environment.
    pub fn load(path: &Path) -> Result<ToolRegistry, ToolFileError> {
        let file = path.display().to_string();
        let fail = |message: String| ToolFileError {
            file: file.clone(),
            tool: None,
            field: None,
            message,
        };
        let text =
            std::fs::read_to_string(path).map_err(|e| fail(format!("cannot read it: {e}")))?;
        let folder = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        let base_dir = std::fs::canonicalize(folder)
            .map_err(|e| fail(format!("cannot resolve its folder: {e}")))?;
        let vars = |name: &str| std::env::var(name).ok();
        ToolRegistry::from_json(&file, &text, &base_dir, &vars)
    }

    /// Parse the file's `text`; `file` only names it in errors. Tools are
    /// checked in name order and the first mistake is returned.
    pub fn from_json(
        file: &str,
        text: &str,
        base_dir: &Path,
        vars: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ToolRegistry, ToolFileError> {
        let root = crate::input::parse_strict(text.as_bytes())
            .map_err(|e| FieldError::entry(unreadable(&e)).in_tool(file, None))?;
        let tools = tools_object(&root).map_err(|e| e.in_tool(file, None))?;
        let keyless = file_keyless(&root).map_err(|e| e.in_tool(file, None))?;
        let context = Context {
            base_dir,
            vars,
            keyless,
        };
        let mut registry = ToolRegistry::default();
        for (name, entry) in tools {
            let spec = tool_spec(name, entry, &context).map_err(|e| e.in_tool(file, Some(name)))?;
            registry.insert(spec);
        }
        Ok(registry)
    }
}

/// The tools in the file at `path` whose every success writes one `effects`
/// row: each `http` and `command` tool, and `charge` and `send_email` when
/// listed. For `verify`, which judges a database where the service's secrets
/// and programs may be absent: only names and kinds are read (no `${NAME}` is
/// expanded, no URL, path or schema checked).
pub fn effect_tools(path: &Path) -> Result<Vec<String>, ToolFileError> {
    let error = |tool: Option<&str>, field: Option<String>, message: String| ToolFileError {
        file: path.display().to_string(),
        tool: tool.map(str::to_string),
        field,
        message,
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| error(None, None, format!("cannot read it: {e}")))?;
    let root = crate::input::parse_strict(text.as_bytes())
        .map_err(|e| error(None, None, unreadable(&e)))?;
    let tools = tools_object(&root).map_err(|e| error(None, e.field, e.message))?;
    let mut names = Vec::new();
    for (name, entry) in tools {
        check_name(name).map_err(|e| error(Some(name), e.field, e.message))?;
        let kind = entry
            .as_object()
            .ok_or_else(|| FieldError::entry("must be an object such as {\"kind\": \"builtin\"}"))
            .and_then(entry_kind)
            .map_err(|e| error(Some(name), e.field, e.message))?;
        match kind {
            Kind::Http | Kind::Command => names.push(name.clone()),
            Kind::Builtin if EFFECT_TOOLS.contains(&name.as_str()) => names.push(name.clone()),
            Kind::Builtin => {}
        }
    }
    Ok(names)
}

/// Why the file's text was refused: not JSON, or JSON with a member name
/// repeated in one object (which a reader could take either way).
fn unreadable(e: &serde_json::Error) -> String {
    if e.is_data() {
        format!("cannot be read one way: {e}")
    } else {
        format!("is not valid JSON: {e}")
    }
}

/// The file's top-level `"keyless"` (MCP calls without a key), if given.
fn file_keyless(root: &Value) -> Result<Option<Keyless>, FieldError> {
    root.get("keyless")
        .map(|value| parse_keyless("keyless", value))
        .transpose()
}

/// `{"tools": {...}}` with at least one tool, and nothing else at the top
/// but `"keyless"`.
fn tools_object(root: &Value) -> Result<&Map<String, Value>, FieldError> {
    let root = root
        .as_object()
        .ok_or_else(|| FieldError::entry("must be a JSON object {\"tools\": {...}}"))?;
    if let Some(extra) = root
        .keys()
        .find(|k| !matches!(k.as_str(), "tools" | "keyless"))
    {
        return Err(field_error(
            extra,
            "is not a top-level field (only \"tools\" and \"keyless\")",
        ));
    }
    let tools = root
        .get("tools")
        .and_then(Value::as_object)
        .ok_or_else(|| field_error("tools", "must be an object of tools by name"))?;
    if tools.is_empty() {
        return Err(field_error("tools", "lists no tool"));
    }
    Ok(tools)
}

/// The entry's `kind`, read once (`Kind::parse`).
fn entry_kind(entry: &Map<String, Value>) -> Result<Kind, FieldError> {
    match entry.get("kind").and_then(Value::as_str) {
        Some(word) => Kind::parse(word).ok_or_else(|| {
            field_error(
                "kind",
                format!("{word:?} is not a kind (builtin, http or command)"),
            )
        }),
        None => Err(field_error(
            "kind",
            "is required: \"builtin\", \"http\" or \"command\"",
        )),
    }
}

fn tool_spec(name: &str, entry: &Value, context: &Context) -> Result<ToolSpec, FieldError> {
    check_name(name)?;
    let entry = entry
        .as_object()
        .ok_or_else(|| FieldError::entry("must be an object such as {\"kind\": \"builtin\"}"))?;
    let kind = entry_kind(entry)?;
    allow_only(entry, kind)?;
    let mut spec = match kind {
        Kind::Builtin => ToolSpec::builtin(name).ok_or_else(|| {
            field_error(
                "kind",
                format!(
                    "no built-in tool is named {name:?} (built-ins: {})",
                    TOOL_NAMES.join(", ")
                ),
            )
        })?,
        Kind::Http => external_spec(name, kind, entry, context, |entry, context, timeout| {
            Ok(Executor::Http(http_executor(entry, context, timeout)?))
        })?,
        Kind::Command => external_spec(name, kind, entry, context, |entry, context, timeout| {
            Ok(Executor::Command(command_executor(
                entry, context, timeout,
            )?))
        })?,
    };
    if let Some(n) = bounded_integer(entry, "max_attempts", 1, MAX_ATTEMPTS_LIMIT)? {
        spec.max_attempts = n as u32;
    }
    if let Some(n) = bounded_integer(entry, "max_concurrency", 1, MAX_CONCURRENCY_LIMIT)? {
        spec.max_concurrency = Some(n as usize);
    }
    if let Some(rate) = entry.get("rate") {
        spec.rate = Some(Rate::parse(rate)?);
    }
    spec.backoff = backoff(entry.get("backoff_ms"))?;
    spec.backoff.retry_after_max = retry_after_max(entry, &spec.backoff)?;
    if let Some(rule) = entry.get("business_key") {
        let rule = BusinessKeyRule::parse(rule)?;
        spec.business_key = Some(rule);
    }
    if let Some(policy) = entry.get("approval") {
        spec.approval = Some(ApprovalPolicy::parse(policy)?);
    }
    spec.agent
        .apply(entry.get("description"), entry.get("annotations"))?;
    spec.mcp.apply(entry, context.keyless)?;
    Ok(spec)
}

/// An `http` or `command` tool: its schema, its timeout and its executor.
/// What an `http` or `command` entry's executor is made from: the entry,
/// the file's context and the tool's timeout.
type MakeExecutor = fn(&Map<String, Value>, &Context, Duration) -> Result<Executor, FieldError>;

fn external_spec(
    name: &str,
    kind: Kind,
    entry: &Map<String, Value>,
    context: &Context,
    make_executor: MakeExecutor,
) -> Result<ToolSpec, FieldError> {
    let timeout = bounded_integer(entry, "timeout_ms", 1, MAX_TIMEOUT_MS)?
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_TIMEOUT);
    let input_schema = entry
        .get("input_schema")
        .cloned()
        .unwrap_or_else(|| json!({"type": "object"}));
    let validator =
        Schema::compile(&input_schema).map_err(|e| field_error("input_schema", e.to_string()))?;
    let executor = make_executor(entry, context, timeout)?;
    Ok(ToolSpec {
        name: name.to_string(),
        kind,
        input_schema,
        validator: Some(validator),
        max_attempts: DEFAULT_MAX_ATTEMPTS,
        timeout,
        backoff: Backoff::default(),
        max_concurrency: None,
        rate: None,
        business_key: None,
        approval: None,
        agent: AgentFacing::default_for(name, true),
        mcp: McpPolicy::default_for(kind, name),
        executor,
    })
}

/// A tool name is 1–64 of `[A-Za-z0-9_.-]`: it appears in URLs, logs and
/// agents' tool lists.
fn check_name(name: &str) -> Result<(), FieldError> {
    let valid = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if valid {
        Ok(())
    } else {
        Err(field_error(
            "name",
            "must be 1-64 characters of [A-Za-z0-9_.-]",
        ))
    }
}

/// Unknown fields are refused: a misspelt `max_atempts` must not silently
/// mean "the default".
fn allow_only(entry: &Map<String, Value>, kind: Kind) -> Result<(), FieldError> {
    let mut allowed: Vec<&str> = COMMON_FIELDS.to_vec();
    match kind {
        // A built-in's arguments are checked by its own rules; its timeout is its own.
        Kind::Builtin => allowed.retain(|f| !matches!(*f, "input_schema" | "timeout_ms")),
        Kind::Http => allowed.extend(HTTP_FIELDS),
        Kind::Command => allowed.extend(COMMAND_FIELDS),
    }
    match entry.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(field) => Err(field_error(
            field,
            format!(
                "is not a field for kind {:?} (fields: {})",
                kind.as_str(),
                allowed.join(", ")
            ),
        )),
        None => Ok(()),
    }
}

/// `entry[field]` as an integer in `min..=max`, if present.
fn bounded_integer(
    entry: &Map<String, Value>,
    field: &str,
    min: u64,
    max: u64,
) -> Result<Option<u64>, FieldError> {
    match entry.get(field) {
        None => Ok(None),
        Some(value) => match value.as_u64() {
            Some(n) if (min..=max).contains(&n) => Ok(Some(n)),
            _ => Err(field_error(
                field,
                format!("must be an integer from {min} to {max}"),
            )),
        },
    }
}

/// `backoff_ms`: `{"initial", "max"}` in milliseconds, each optional.
fn backoff(value: Option<&Value>) -> Result<Backoff, FieldError> {
    let mut backoff = Backoff::default();
    let Some(value) = value else {
        return Ok(backoff);
    };
    let object = value.as_object().ok_or_else(|| {
        field_error(
            "backoff_ms",
            "must be an object {\"initial\": MS, \"max\": MS}",
        )
    })?;
    if let Some(extra) = object
        .keys()
        .find(|k| !matches!(k.as_str(), "initial" | "max"))
    {
        return Err(field_error(
            format!("backoff_ms.{extra}"),
            "is not a field (initial, max)",
        ));
    }
    for (name, slot) in [("initial", &mut backoff.initial), ("max", &mut backoff.max)] {
        if let Some(ms) = bounded_integer(object, name, 1, MAX_TIMEOUT_MS)
            .map_err(|e| field_error(format!("backoff_ms.{name}"), e.message))?
        {
            *slot = Duration::from_millis(ms);
        }
    }
    if backoff.max < backoff.initial {
        return Err(field_error(
            "backoff_ms.max",
            "must not be less than backoff_ms.initial",
        ));
    }
    Ok(backoff)
}

/// `retry_after_max_ms` (http tools): the longest `Retry-After` honoured;
/// absent, `backoff_ms.max` is the cap.
fn retry_after_max(
    entry: &Map<String, Value>,
    backoff: &Backoff,
) -> Result<Option<Duration>, FieldError> {
    let field = "retry_after_max_ms";
    let Some(ms) = bounded_integer(entry, field, 1, MAX_TIMEOUT_MS)? else {
        return Ok(None);
    };
    let cap = Duration::from_millis(ms);
    if cap < backoff.initial {
        return Err(field_error(
            field,
            "must not be less than backoff_ms.initial",
        ));
    }
    Ok(Some(cap))
}

mod executors;
#[cfg(test)]
mod tests;
