//! [`ArgsError`]: why a call's `args` fail its tool's rules. Its text is the
//! `bad_request` message at POST time (`bad_args` when a stored call is run)
//! and always starts with the path that failed (`args.amount ...`), so a
//! client can tell which field to fix.
//!
//! A message quotes client input only clipped (`input::clip`) or bounded
//! (`MAX_MESSAGE_BYTES`): an error is a line, never an echo of the request.

use crate::input::{clip, quote};
use std::fmt;

/// The longest schema error, in bytes: the validator's text quotes the
/// client's input, which may be huge.
pub const MAX_MESSAGE_BYTES: usize = 300;

/// Why `args` fail a tool's rules; `Display` is the one-line message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgsError {
    /// A built-in's hand rule: `args.{field} {rule}`.
    Field {
        field: &'static str,
        rule: &'static str,
    },
    /// A field a built-in does not have (typos must not be ignored).
    UnknownField {
        field: String,
        expected: &'static [&'static str],
    },
    /// The first error JSON Schema reports: where (`args.x.y`) and what.
    Schema { path: String, message: String },
    /// A field of the tool's business key is missing or null (`pointer` is
    /// its JSON Pointer into args).
    MissingKeyField { pointer: String },
    /// A built-in's rules were asked for a name that is no built-in.
    NotBuiltin { name: String },
}

impl fmt::Display for ArgsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgsError::Field { field, rule } => write!(f, "args.{field} {rule}"),
            ArgsError::UnknownField { field, expected } => write!(
                f,
                "args.{} is not a field of this tool (expected: {})",
                clip(field),
                expected.join(", ")
            ),
            ArgsError::Schema { path, message } => {
                f.write_str(&bounded(one_line(&format!("{path}: {message}"))))
            }
            ArgsError::MissingKeyField { pointer } => write!(
                f,
                "args{pointer} is required: it is part of this tool's business key"
            ),
            ArgsError::NotBuiltin { name } if name.is_empty() => f.write_str("tool is required"),
            ArgsError::NotBuiltin { name } => write!(
                f,
                "tool {} is unknown; known tools: {}",
                quote(name),
                super::kind::TOOL_NAMES.join(", ")
            ),
        }
    }
}

impl std::error::Error for ArgsError {}

/// At most `MAX_MESSAGE_BYTES`, cut on a character boundary, `…` when cut.
fn bounded(mut message: String) -> String {
    if message.len() > MAX_MESSAGE_BYTES {
        let mut cut = MAX_MESSAGE_BYTES;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
        message.push('…');
    }
    message
}

/// Error texts from the validator may quote multi-line JSON; a message here
/// is always one line.
pub(crate) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
