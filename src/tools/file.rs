//! The `--tools FILE` format: reading it into a [`ToolRegistry`], with every
//! rule checked at start-up so that a mistake stops the server (exit 2) with
//! one line naming the tool and the field, instead of surfacing as a failed
//! call later.
//!
//! It owns `${NAME}` expansion (from the environment, once, at load) and path
//! resolution (`argv[0]` and `ca_file` against the file's folder). It must
//! never put a header or `env` value, expanded or not, into a message: those
//! become [`Secret`]s as soon as they are read.

use super::approval::ApprovalPolicy;
use super::builtin::{self, EFFECT_TOOLS, TOOL_NAMES};
use super::business_key::{AgentFacing, BusinessKeyRule};
use super::command_tool::{CommandTool, RESERVED_ENV};
use super::file_error::{field_error, FieldError, ToolFileError};
use super::http_tool::{check_url, HttpTool, RESERVED_HEADERS};
use super::mcp_policy::{parse_keyless, Keyless, McpPolicy};
use super::rate::Rate;
use super::registry::ToolRegistry;
use super::schema::Schema;
use super::secret::Secret;
use super::spec::{Backoff, Executor, Kind, ToolSpec, DEFAULT_TIMEOUT};
use serde_json::{json, Map, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
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
struct Context<'a> {
    base_dir: &'a Path,
    vars: &'a dyn Fn(&str) -> Option<String>,
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
        match entry.get("kind").and_then(Value::as_str) {
            Some("http" | "command") => names.push(name.clone()),
            Some("builtin") if EFFECT_TOOLS.contains(&name.as_str()) => names.push(name.clone()),
            Some("builtin") => {}
            _ => {
                let message = "must be \"builtin\", \"http\" or \"command\"".to_string();
                return Err(error(Some(name), Some("kind".into()), message));
            }
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

fn tool_spec(name: &str, entry: &Value, context: &Context) -> Result<ToolSpec, FieldError> {
    check_name(name)?;
    let entry = entry
        .as_object()
        .ok_or_else(|| FieldError::entry("must be an object such as {\"kind\": \"builtin\"}"))?;
    let kind = match entry.get("kind").and_then(Value::as_str) {
        Some("builtin") => Kind::Builtin,
        Some("http") => Kind::Http,
        Some("command") => Kind::Command,
        Some(other) => {
            return Err(field_error(
                "kind",
                format!("{other:?} is not a kind (builtin, http or command)"),
            ))
        }
        None => {
            return Err(field_error(
                "kind",
                "is required: \"builtin\", \"http\" or \"command\"",
            ))
        }
    };
    allow_only(entry, kind)?;
    let mut spec = match kind {
        Kind::Builtin => builtin::spec(name).ok_or_else(|| {
            field_error(
                "kind",
                format!(
                    "no built-in tool is named {name:?} (built-ins: {})",
                    TOOL_NAMES.join(", ")
                ),
            )
        })?,
        Kind::Http | Kind::Command => external_spec(name, kind, entry, context)?,
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
fn external_spec(
    name: &str,
    kind: Kind,
    entry: &Map<String, Value>,
    context: &Context,
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
    let executor = match kind {
        Kind::Http => Executor::Http(http_executor(entry, context, timeout)?),
        _ => Executor::Command(command_executor(entry, context, timeout)?),
    };
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

fn http_executor(
    entry: &Map<String, Value>,
    context: &Context,
    timeout: Duration,
) -> Result<HttpTool, FieldError> {
    let url = entry
        .get("url")
        .and_then(Value::as_str)
        .ok_or_else(|| field_error("url", "is required: an http:// or https:// URL"))?;
    check_url(url).map_err(|e| field_error("url", e.to_string()))?;
    let mut headers = Vec::new();
    for (header, value) in string_map(entry, "headers")? {
        let field = format!("headers.{header}");
        check_header_name(&field, header)?;
        let value = expand(&field, value, context.vars)?;
        if value
            .expose()
            .bytes()
            .any(|b| (b < 0x20 && b != b'\t') || b == 0x7f)
        {
            return Err(field_error(
                &field,
                "contains a control character (after ${} expansion)",
            ));
        }
        headers.push((header.clone(), value));
    }
    let ca_file = match entry.get("ca_file") {
        None => None,
        Some(Value::String(path)) if !path.is_empty() => {
            if !url
                .get(..8)
                .is_some_and(|s| s.eq_ignore_ascii_case("https://"))
            {
                return Err(field_error("ca_file", "is only used with an https:// url"));
            }
            Some(context.base_dir.join(path))
        }
        Some(_) => return Err(field_error("ca_file", "must be a path to a PEM file")),
    };
    HttpTool::new(url.to_string(), headers, ca_file.as_deref(), timeout)
        .map_err(|e| field_error("ca_file", e.to_string()))
}

fn command_executor(
    entry: &Map<String, Value>,
    context: &Context,
    timeout: Duration,
) -> Result<CommandTool, FieldError> {
    let argv = match entry.get("argv") {
        Some(Value::Array(items)) if !items.is_empty() => items,
        _ => {
            return Err(field_error(
                "argv",
                "is required: a non-empty array of strings (no shell)",
            ))
        }
    };
    let mut words = Vec::with_capacity(argv.len());
    for (i, item) in argv.iter().enumerate() {
        match item.as_str() {
            Some(word) if !word.contains('\0') => words.push(word.to_string()),
            _ => {
                return Err(field_error(
                    format!("argv[{i}]"),
                    "must be a string without NUL",
                ))
            }
        }
    }
    let program = resolve_program(&words[0], context)?;
    let mut env = Vec::new();
    for (name, value) in string_map(entry, "env")? {
        let field = format!("env.{name}");
        if !is_variable_name(name) {
            return Err(field_error(
                &field,
                "is not a variable name ([A-Za-z_][A-Za-z0-9_]*)",
            ));
        }
        if RESERVED_ENV.contains(&name.as_str()) {
            return Err(field_error(
                &field,
                "is set by the server on every run and cannot be configured",
            ));
        }
        let value = expand(&field, value, context.vars)?;
        if value.expose().contains('\0') {
            return Err(field_error(&field, "contains NUL (after ${} expansion)"));
        }
        env.push((name.clone(), value));
    }
    Ok(CommandTool::new(program, words.split_off(1), env, timeout))
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

/// `entry[field]` as an object of strings (absent: empty).
fn string_map<'a>(
    entry: &'a Map<String, Value>,
    field: &str,
) -> Result<Vec<(&'a String, &'a str)>, FieldError> {
    let Some(value) = entry.get(field) else {
        return Ok(Vec::new());
    };
    let object = value
        .as_object()
        .ok_or_else(|| field_error(field, "must be an object of strings"))?;
    object
        .iter()
        .map(|(name, value)| match value.as_str() {
            Some(text) => Ok((name, text)),
            None => Err(field_error(format!("{field}.{name}"), "must be a string")),
        })
        .collect()
}

/// RFC 9110 token characters, and not a header the executor owns (`field`
/// names the header in the message).
fn check_header_name(field: &str, name: &str) -> Result<(), FieldError> {
    let token = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if !token {
        return Err(field_error(field, "is not a valid header name"));
    }
    if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
        return Err(field_error(
            field,
            "is set by the server on every request and cannot be configured",
        ));
    }
    Ok(())
}

fn is_variable_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Replace each `${NAME}` with the variable's value. A `$` not followed by
/// `{` is literal. The error names `field` and the variable, never a value.
fn expand(
    field: &str,
    value: &str,
    vars: &dyn Fn(&str) -> Option<String>,
) -> Result<Secret, FieldError> {
    let mut text = String::with_capacity(value.len());
    let mut expanded = Vec::new();
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        text.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| field_error(field, "has a ${ without its closing }"))?;
        let name = &after[..end];
        if !is_variable_name(name) {
            return Err(field_error(
                field,
                "has a ${...} whose name is not [A-Za-z_][A-Za-z0-9_]*",
            ));
        }
        let found = vars(name).filter(|v| !v.is_empty()).ok_or_else(|| {
            field_error(
                field,
                format!("environment variable {name} is not set (or is empty)"),
            )
        })?;
        text.push_str(&found);
        expanded.push(found);
        rest = &after[end + 1..];
    }
    text.push_str(rest);
    Ok(Secret::new(text, expanded))
}

/// `argv[0]`: with a `/`, a path (relative to the tools file's folder); without,
/// a name looked up in `PATH` as a shell would. It must be an executable file.
fn resolve_program(program: &str, context: &Context) -> Result<PathBuf, FieldError> {
    let argv0 = |message: String| field_error("argv[0]", message);
    if program.is_empty() {
        return Err(argv0("must name a program".into()));
    }
    if program.contains('/') {
        let path = context.base_dir.join(program);
        return match is_executable(&path) {
            true => Ok(path),
            false => Err(argv0(format!(
                "{} is not an executable file",
                path.display()
            ))),
        };
    }
    let search = (context.vars)("PATH").unwrap_or_default();
    search
        .split(':')
        .filter(|dir| !dir.is_empty())
        .map(|dir| Path::new(dir).join(program))
        .find(|candidate| is_executable(candidate))
        .ok_or_else(|| argv0(format!("{program:?} is not an executable found in PATH")))
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests;
