//! An `http` entry's and a `command` entry's own fields: `url`, `headers`
//! and `ca_file`; `argv` and `env` — with `${NAME}` expansion from the
//! environment read at start-up, and `argv[0]` and `ca_file` resolved
//! against the tools file's folder. A header or `env` value becomes a
//! [`Secret`] as soon as it is read, and never reaches a message.

use super::super::command_tool::{CommandTool, RESERVED_ENV};
use super::super::file_error::{field_error, FieldError};
use super::super::http_tool::{check_url, HttpTool, RESERVED_HEADERS};
use super::super::secret::Secret;
use super::Context;
use serde_json::{Map, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub(super) fn http_executor(
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

pub(super) fn command_executor(
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
