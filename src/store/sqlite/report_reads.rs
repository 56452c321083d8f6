//! The reads behind the operations endpoints: the counts for `/stats`, a
//! call's audit timeline, the backlog a metrics scrape reports, and the
//! fresh read `/healthz` makes. Each runs on a connection it is given; the
//! ones that read more than one statement do it in one read transaction.
//!
//! This module never writes, and never reads another tenant's rows for a
//! tenant's answer.

use super::super::model::{AuditEvent, Backlog, CallCounts};
use super::sql;
use rusqlite::{params, Connection, OpenFlags};
use std::path::Path;

/// Calls by status and attempt and the effects, every tenant's (`None`)
/// or one tenant's, in one read transaction, so the counts describe one
/// moment even while the writer commits between the queries (each would
/// otherwise see its own snapshot, and the statuses could outnumber the
/// calls). `in_index`: whether `idx_calls_status` holds `attempt`.
pub(super) fn counts(
    conn: &Connection,
    tenant: Option<&str>,
    in_index: bool,
) -> rusqlite::Result<(CallCounts, i64)> {
    let snapshot = conn.unchecked_transaction()?;
    let counts = match tenant {
        Some(tenant) => (
            count_tenant_calls(conn, tenant)?,
            count_tenant_effects(conn, tenant)?,
        ),
        None if in_index => (
            sql::count_calls_in_status_index(conn)?,
            sql::count_effects(conn)?,
        ),
        None => (sql::count_calls_in_table(conn)?, sql::count_effects(conn)?),
    };
    snapshot.commit()?;
    Ok(counts)
}

/// The tenant's call's audit rows, oldest first, in one read transaction;
/// `None` when the tenant has no such call.
pub(super) fn tenant_audit(
    conn: &Connection,
    tenant: &str,
    call_id: &str,
) -> rusqlite::Result<Option<Vec<AuditEvent>>> {
    let snapshot = conn.unchecked_transaction()?;
    let events = match sql::select_tenant_call(conn, tenant, call_id)? {
        Some(_) => Some(audit_timeline(conn, call_id)?),
        None => None,
    };
    snapshot.commit()?;
    Ok(events)
}

/// One tenant's calls by status and by attempt, through the
/// `UNIQUE (tenant, idem_key)` index (the status index holds no tenant, and
/// another index would cost every call a write).
fn count_tenant_calls(conn: &Connection, tenant: &str) -> rusqlite::Result<CallCounts> {
    conn.prepare_cached(
        "SELECT status, attempt, count(*) FROM calls WHERE tenant = ?1 GROUP BY status, attempt",
    )?
    .query_map(params![tenant], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
    .collect()
}

/// The effects of a tenant's calls still kept (a purged call's effect stays
/// in the ledger but no longer has a tenant to count it under).
fn count_tenant_effects(conn: &Connection, tenant: &str) -> rusqlite::Result<i64> {
    conn.prepare_cached(
        "SELECT count(*) FROM effects e JOIN calls c ON c.call_id = e.call_id WHERE c.tenant = ?1",
    )?
    .query_row(params![tenant], |r| r.get(0))
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

/// Calls by status (one pass over `idx_calls_status`, as `/stats` makes) and
/// the oldest pending call's creation time (a range of that index).
pub(super) fn backlog(conn: &Connection) -> rusqlite::Result<Backlog> {
    let calls_by_status = conn
        .prepare_cached("SELECT status, count(*) FROM calls GROUP BY status")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let oldest_pending_created_at = conn
        .prepare_cached("SELECT min(created_at) FROM calls WHERE status = 'pending'")?
        .query_row([], |r| r.get(0))?;
    Ok(Backlog {
        calls_by_status,
        oldest_pending_created_at,
    })
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
