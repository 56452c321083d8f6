//! One operation of a batch inside its own `SAVEPOINT`, and what the
//! writer does with each SQLite error (the table below): which failure undoes
//! one operation, and which loses the whole batch (`BatchLost`).
//!
//! **What the writer does with each SQLite error.** The writer never assumes a
//! transaction is still open after an error; it asks (`is_autocommit`).
//! - `BEGIN IMMEDIATE` fails (`SQLITE_BUSY` past the busy timeout: another
//!   process holds the write lock; `SQLITE_READONLY`, `SQLITE_CANTOPEN`, I/O):
//!   nothing ran; every operation of the batch is answered with the error
//!   (`503` for these classes).
//! - An operation fails and the transaction is still open (a constraint, a
//!   statement-level `SQLITE_FULL`, a bug, a panic): its savepoint is rolled
//!   back, that caller alone gets the error, and the batch goes on.
//! - An operation fails and SQLite has rolled back the whole transaction
//!   (`SQLITE_FULL` or `SQLITE_IOERR_*` while spilling the page cache into the
//!   WAL, `SQLITE_NOMEM`, `SQLITE_BUSY` on a lock upgrade): the writes of every
//!   earlier operation of the batch are gone too, so every operation of the
//!   batch is answered `Unavailable` (`503` + `Retry-After`), and no later one
//!   runs — a `SAVEPOINT` outside a transaction would quietly open a new one
//!   and commit it on `RELEASE`.
//! - A savepoint command itself fails: treated as the case above.
//! - `COMMIT` fails (`SQLITE_FULL`, `SQLITE_IOERR_*`, a deferred constraint):
//!   the transaction is rolled back if SQLite left it open, and every
//!   operation of the batch is answered `Unavailable`. The error means "not
//!   known to be durable": a failed sync may still leave the commit in the WAL,
//!   which is why the answer is "retry with the same key", which is always safe.
//! - The syncer's `fdatasync` fails: every batch waiting for it, and every
//!   later one, is answered `Unavailable`, and reads are refused (see
//!   `syncer`): the process must restart.
//! - `SQLITE_CORRUPT`, `SQLITE_NOTADB` and other errors are `Internal` (`500`).
//!
//! It runs what it is given and never decides a transition.

use super::super::error::StoreError;
use super::count_book::Book;
use rusqlite::Connection;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Ask SQLite whether the transaction is still open rather than assume it: after
/// `SQLITE_FULL` or an I/O error it may already have rolled everything back.
pub(super) fn roll_back_if_open(conn: &Connection) {
    if !conn.is_autocommit() {
        if let Err(e) = conn.execute_batch("ROLLBACK") {
            crate::log::error("ROLLBACK failed")
                .event("rollback_failed")
                .cause(&e)
                .emit();
        }
    }
}

/// The batch's transaction cannot commit: SQLite rolled it back, a savepoint
/// could not be managed, or `COMMIT` failed. Nothing of the batch is durable,
/// and the same request may succeed later, so callers see `Unavailable`.
pub(super) struct BatchLost(pub(super) StoreError);

impl From<rusqlite::Error> for BatchLost {
    fn from(e: rusqlite::Error) -> BatchLost {
        BatchLost(StoreError::unavailable(format!(
            "the write transaction was rolled back: {e}"
        )))
    }
}

/// Run `op` inside a savepoint: its writes stay if it succeeds, and are undone
/// alone (the rest of the batch unaffected) if it fails or panics. The outer
/// `Err` means the batch's transaction is gone: SQLite rolled it back while
/// `op` ran (`SQLITE_FULL`, an I/O error), so `ROLLBACK TO` has nothing to undo
/// and a later `SAVEPOINT` would silently open a new transaction.
pub(super) fn in_savepoint<T>(
    conn: &Connection,
    op: impl FnOnce(&Connection) -> rusqlite::Result<T>,
) -> Result<Result<T, StoreError>, BatchLost> {
    if conn.is_autocommit() {
        return Err(BatchLost(StoreError::Unavailable(
            "the write transaction ended before this operation".into(),
        )));
    }
    run_cached(conn, "SAVEPOINT op")?;
    let notes = Book::mark();
    let outcome = catch_unwind(AssertUnwindSafe(|| op(conn)));
    if conn.is_autocommit() {
        return Err(match outcome {
            Ok(Err(e)) => BatchLost::from(e),
            _ => BatchLost(StoreError::Unavailable(
                "the write transaction was rolled back".into(),
            )),
        });
    }
    let outcome = match outcome {
        Ok(Ok(value)) => {
            run_cached(conn, "RELEASE op")?;
            return Ok(Ok(value));
        }
        Ok(Err(e)) => StoreError::from(e),
        Err(_) => StoreError::Internal("a store operation panicked".into()),
    };
    run_cached(conn, "ROLLBACK TO op")?;
    run_cached(conn, "RELEASE op")?;
    // Its rows are undone: so are its notes for the count tables.
    Book::rewind(notes);
    Ok(Err(outcome))
}

/// A statement without parameters or rows, prepared once per connection.
pub(super) fn run_cached(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([])?;
    Ok(())
}
