//! `StoreError`: why the store could not answer, shared by both backends.
//! Two kinds, because callers act on two: `Unavailable` (answer `503` with
//! `Retry-After`; the same request may succeed later) and `Internal` (a bug
//! or a corrupt database). Each keeps the backend's error as its `source()`
//! where there is one, for the log; the message never holds a password.
//!
//! This module decides nothing about which backend error is which kind: each
//! backend maps its own errors (`sqlite::error` for SQLite, `postgres::error`
//! for PostgreSQL). It names no database driver.

use std::error::Error;
use std::fmt;
use std::sync::Arc;

/// Why the store could not answer.
#[derive(Debug, Clone)]
pub enum StoreError {
    /// The database is locked past the busy timeout, full, read-only, failing
    /// I/O, unreachable or restarting, or a statement timed out: nothing
    /// acknowledged was lost, and the same request may succeed later.
    Unavailable(Cause),
    /// Anything else; a bug or a corrupt database.
    Internal(Cause),
}

/// What went wrong, in words, with the backend's error behind it.
#[derive(Debug, Clone)]
pub struct Cause {
    message: String,
    source: Option<Arc<dyn Error + Send + Sync>>,
}

impl Cause {
    /// A cause with the backend's error as its source.
    pub fn with_source(message: String, source: impl Error + Send + Sync + 'static) -> Cause {
        Cause {
            message,
            source: Some(Arc::new(source)),
        }
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

impl From<String> for Cause {
    fn from(message: String) -> Cause {
        Cause {
            message,
            source: None,
        }
    }
}

impl From<&str> for Cause {
    fn from(message: &str) -> Cause {
        Cause::from(message.to_string())
    }
}

/// Causes compare by message: tests compare errors, and a source has no `Eq`.
impl PartialEq for Cause {
    fn eq(&self, other: &Cause) -> bool {
        self.message == other.message
    }
}

impl Eq for Cause {}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl PartialEq for StoreError {
    fn eq(&self, other: &StoreError) -> bool {
        match (self, other) {
            (StoreError::Unavailable(a), StoreError::Unavailable(b)) => a == b,
            (StoreError::Internal(a), StoreError::Internal(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for StoreError {}

impl StoreError {
    pub fn unavailable(message: impl Into<String>) -> StoreError {
        StoreError::Unavailable(Cause::from(message.into()))
    }

    pub fn internal(message: impl Into<String>) -> StoreError {
        StoreError::Internal(Cause::from(message.into()))
    }

    /// Whether the same request may succeed later (answered `503`).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, StoreError::Unavailable(_))
    }

    fn cause(&self) -> &Cause {
        match self {
            StoreError::Unavailable(c) | StoreError::Internal(c) => c,
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Unavailable(m) => write!(f, "database unavailable: {m}"),
            StoreError::Internal(m) => write!(f, "database error: {m}"),
        }
    }
}

impl Error for StoreError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.cause()
            .source
            .as_deref()
            .map(|e| e as &(dyn Error + 'static))
    }
}
