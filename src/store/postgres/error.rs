//! What each PostgreSQL error means to a client: `Unavailable` (503 with
//! `Retry-After`: the same request may succeed later) or `Internal` (500).
//! Decided by SQLSTATE, never by message text, and for errors without one
//! (a dropped connection, a refused connect, TLS) by what failed.
//!
//! The rule that matters: anything that can happen while the database
//! restarts, fails over, or is overloaded is `Unavailable`, including a
//! connection that died during a `COMMIT` — its outcome is unknown, and the
//! client's same-key retry finds the truth. This module never retries.

use super::super::error::{Cause, StoreError};
use tokio_postgres::error::SqlState;

/// SQLSTATE classes that are all transient: connection exceptions (08),
/// insufficient resources (53: too many connections, disk full, out of
/// memory), operator intervention (57: admin or crash shutdown, cannot
/// connect now, statement timeout as `query_canceled`), system errors (58:
/// I/O). See PostgreSQL's "Appendix A. Error Codes".
const TRANSIENT_CLASSES: &[&str] = &["08", "53", "57", "58"];

/// Single transient codes outside those classes.
const TRANSIENT_CODES: &[SqlState] = &[
    // A failed-over primary that came back as a standby, or a read-only
    // replica behind the URL's host: writes will work again on the new primary.
    SqlState::READ_ONLY_SQL_TRANSACTION,
    SqlState::LOCK_NOT_AVAILABLE,
    SqlState::T_R_SERIALIZATION_FAILURE,
    SqlState::T_R_DEADLOCK_DETECTED,
    SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT,
];

pub(in crate::store) fn store_error(e: tokio_postgres::Error) -> StoreError {
    let message = describe(&e);
    let transient = match e.code() {
        Some(code) => {
            TRANSIENT_CLASSES.iter().any(|c| code.code().starts_with(c))
                || TRANSIENT_CODES.contains(code)
        }
        // No SQLSTATE: the connection closed, could not be made, or its I/O or
        // TLS failed. A bug (a type that does not convert) has no I/O source.
        None => e.is_closed() || has_io_source(&e) || message.contains("timeout"),
    };
    let cause = Cause::with_source(message, e);
    if transient {
        StoreError::Unavailable(cause)
    } else {
        StoreError::Internal(cause)
    }
}

/// The server's message with its SQLSTATE, or the client's error with its
/// causes: the `Display` of a database error alone says only "db error".
fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{} ({}): {}", db.severity(), db.code().code(), db.message());
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

fn has_io_source(e: &tokio_postgres::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if s.is::<std::io::Error>() {
            return true;
        }
        source = s.source();
    }
    false
}

/// Whether `e` is a unique violation of the named constraint.
pub(super) fn violates(e: &tokio_postgres::Error, constraint: &str) -> bool {
    e.as_db_error().is_some_and(|db| {
        db.code() == &SqlState::UNIQUE_VIOLATION && db.constraint() == Some(constraint)
    })
}
