//! The reads behind the operations endpoints: a call's audit timeline and
//! the fresh read `/healthz` makes (the counts of `/stats` and `/metrics`
//! are `counts`'). Each runs on a connection it is given, inside the
//! caller's read transaction.
//!
//! This module never writes, and never reads another tenant's rows for a
//! tenant's answer.

use super::super::model::AuditEvent;
use rusqlite::{params, Connection, OpenFlags};
use std::path::Path;

/// A call's audit rows in the order they were written (`idx_audit_call`).
pub(super) fn audit_timeline(
    conn: &Connection,
    call_id: &str,
) -> rusqlite::Result<Vec<AuditEvent>> {
    conn.prepare_cached(
        "SELECT ts, event, attempt, detail FROM audit WHERE call_id = ?1 ORDER BY id",
    )?
    .query_map(params![call_id], |r| {
        Ok(AuditEvent {
            at: r.get(0)?,
            event: r.get(1)?,
            attempt: r.get(2)?,
            detail: r.get(3)?,
        })
    })?
    .collect()
}

/// Whether the file can be opened and read now, on a new connection: the
/// pooled ones keep files open that may no longer be readable by anyone else
/// (permissions changed, file replaced), so only a fresh open tells the truth.
/// Read-only and without `CREATE`: a missing file is an answer, not a new file.
pub(super) fn fresh_read(path: &Path) -> rusqlite::Result<()> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(std::time::Duration::from_secs(1))?;
    conn.query_row(
        "SELECT count(*) FROM (SELECT 1 FROM calls LIMIT 1)",
        [],
        |r| r.get::<_, i64>(0),
    )?;
    Ok(())
}
