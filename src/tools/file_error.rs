//! What a mistake in the `--tools` file is: [`ToolFileError`], the one line
//! that stops the server at start-up (exit 2), and `FieldError`, a mistake
//! inside one tool's entry before it is tied to the tool's name (returned by
//! every check of an entry: `file`, `business_key`, the executors' set-up).
//!
//! It never holds a header or `env` value: messages name fields and
//! variables, never what they were set to.

use std::fmt;

/// A mistake in the tools file: where, and what. `Display` is one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolFileError {
    /// The file, as given on the command line.
    pub file: String,
    /// The tool's name, when the mistake is inside one tool's entry.
    pub tool: Option<String>,
    /// The field inside the entry (`headers.Authorization`, `argv[0]`), if any.
    pub field: Option<String>,
    pub message: String,
}

impl fmt::Display for ToolFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tools file {}: ", self.file)?;
        match (&self.tool, &self.field) {
            (Some(tool), Some(field)) => write!(f, "tool {tool:?}, field {field}: ")?,
            (Some(tool), None) => write!(f, "tool {tool:?}: ")?,
            (None, Some(field)) => write!(f, "field {field}: ")?,
            (None, None) => {}
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ToolFileError {}

/// A mistake inside one entry, before it is tied to the tool's name: the
/// field (`business_key.fields[0]`), when there is one, and what is wrong
/// with it (a phrase that follows the field: `is required ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: Option<String>,
    pub message: String,
}

/// A mistake in `field`.
pub fn field_error(field: impl Into<String>, message: impl Into<String>) -> FieldError {
    FieldError {
        field: Some(field.into()),
        message: message.into(),
    }
}

impl FieldError {
    /// A mistake in the entry as a whole.
    pub fn entry(message: impl Into<String>) -> FieldError {
        FieldError {
            field: None,
            message: message.into(),
        }
    }

    /// This mistake, tied to `tool` in `file`.
    pub fn in_tool(self, file: &str, tool: Option<&str>) -> ToolFileError {
        ToolFileError {
            file: file.to_string(),
            tool: tool.map(str::to_string),
            field: self.field,
            message: self.message,
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.field {
            Some(field) => write!(f, "{field} {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for FieldError {}
