//! The reads behind the operations endpoints: a call's audit timeline, its
//! effect row, and
//! the fresh read `/healthz` makes (the counts of `/stats` and `/metrics`
//! are `counts`'). Each runs on a connection it is given; one that reads
//! more than one statement does it in one read transaction.
//!
//! This module never writes, and never reads another tenant's rows for a
//! tenant's answer.

use super::super::model::AuditEvent;
use super::super::operator::Effect;
use super::steps;
use rusqlite::{params, Connection, OpenFlags, OptionalExtension};
use std::path::Path;

/// The tenant's call's audit rows, oldest first, in one read transaction;
/// `None` when the tenant has no such call.
pub(super) fn tenant_audit(
    conn: &Connection,
    tenant: &str,
    call_id: &str,
) -> rusqlite::Result<Option<Vec<AuditEvent>>> {
    let snapshot = conn.unchecked_transaction()?;
    let events = match steps::select_tenant_call(conn, tenant, call_id)? {
        Some(_) => Some(audit_timeline(conn, call_id)?),
        None => None,
    };
    snapshot.commit()?;
    Ok(events)
}

/// A call's audit rows in the order they were written (`idx_audit_call`).
fn audit_timeline(conn: &Connection, call_id: &str) -> rusqlite::Result<Vec<AuditEvent>> {
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

/// The effect row of `call_id`, if it has one.
pub(super) fn effect(conn: &Connection, call_id: &str) -> rusqlite::Result<Option<Effect>> {
    conn.prepare_cached(
        "SELECT effect_id, tool, amount, detail, created_at FROM effects WHERE call_id = ?1",
    )?
    .query_row(params![call_id], |r| {
        let detail: Option<String> = r.get(3)?;
        Ok(Effect {
            effect_id: r.get(0)?,
            tool: r.get(1)?,
            amount: r.get(2)?,
            detail: detail.and_then(|d| serde_json::from_str(&d).ok()),
            created_at: r.get(4)?,
        })
    })
    .optional()
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
