//! The pieces every statement of a call's path shares, on SQLite: a call's
//! columns and row read (`select_call`, `call_from_row`), its audit row
//! (`audit`), its place in the count tables (`group`), and what follows a
//! fenced update of a running call (`left_running`, `discard_stale`). A
//! leaf of the wing's statements: `sql`, `approval`, `cancel`, `rerun` and
//! the others use it; it uses none of them.
//!
//! Like them, it runs on a connection it is given, inside the caller's
//! transaction, and never begins or ends one.

use super::super::audit::{self, Event};
use super::super::ids::stored_effect_id;
use super::super::model::{Call, CallProgress, Completion, Lease};
use super::count_book::{self, Group};
use crate::status::Status;
use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ValueRef};
use rusqlite::{params, Connection, OptionalExtension, Row};
use serde_json::Value;

pub(super) const CALL_COLUMNS: &str = "call_id, tenant, idem_key, fingerprint, client_id, seq, tool, args_json, \
     status, result_json, error_json, attempt, lease_until, owner, effect_id, created_at, updated_at, \
     next_attempt_at, cancel_requested_at, progress_json";

/// `RETURNING tenant, tool`.
pub(super) fn tenant_and_tool(r: &Row) -> rusqlite::Result<(String, String)> {
    Ok((r.get(0)?, r.get(1)?))
}

/// After a fenced `UPDATE` of a `running` call under `attempt` to `to`:
/// whether it applied (it returned the call's tenant and tool), its move
/// noted for the count tables.
pub(super) fn left_running(
    conn: &Connection,
    changed: Option<(String, String)>,
    attempt: i64,
    to: Status,
) -> rusqlite::Result<bool> {
    let Some((tenant, tool)) = changed else {
        return Ok(false);
    };
    let from = group(&tenant, &tool, Status::Running, attempt);
    count_book::moved(conn, from, group(&tenant, &tool, to, attempt))?;
    Ok(true)
}

/// A call's place in the count tables.
pub(super) fn group(tenant: &str, tool: &str, status: Status, attempt: i64) -> Group {
    Group {
        tenant: tenant.to_string(),
        tool: tool.to_string(),
        status: status.as_str(),
        attempt,
    }
}

pub(super) fn discard_stale(
    conn: &Connection,
    now: f64,
    lease: &Lease,
    would_have: Event,
) -> rusqlite::Result<Completion> {
    let detail = audit::stale_completion(lease.attempt, would_have);
    audit_lease(conn, now, lease, Event::StaleCompletion, &detail)?;
    Ok(Completion::Stale)
}

/// One audit row; `attempt` is the call's attempt when it happened, so the
/// timeline answers "which try was this" without parsing `detail`.
pub(super) fn audit(
    conn: &Connection,
    now: f64,
    call_id: &str,
    attempt: i64,
    event: Event,
    detail: &str,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO audit (ts, call_id, attempt, event, detail) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![now, call_id, attempt, event.as_str(), detail])?;
    Ok(())
}

pub(super) fn select_call(conn: &Connection, call_id: &str) -> rusqlite::Result<Option<Call>> {
    one_call(conn, "call_id = ?1", params![call_id])
}

/// A call by id, only if it is `tenant`'s: another tenant's call reads as
/// absent, so its existence never shows.
pub(super) fn select_tenant_call(
    conn: &Connection,
    tenant: &str,
    call_id: &str,
) -> rusqlite::Result<Option<Call>> {
    one_call(
        conn,
        "call_id = ?1 AND tenant = ?2",
        params![call_id, tenant],
    )
}

/// The key's call within its tenant (`UNIQUE (tenant, idem_key)`'s index).
pub(super) fn select_call_by_key(
    conn: &Connection,
    tenant: &str,
    idem_key: &str,
) -> rusqlite::Result<Option<Call>> {
    one_call(
        conn,
        "tenant = ?1 AND idem_key = ?2",
        params![tenant, idem_key],
    )
}

/// The call `condition` (on a unique column or columns) finds, if any.
fn one_call(
    conn: &Connection,
    condition: &str,
    params: impl rusqlite::Params,
) -> rusqlite::Result<Option<Call>> {
    conn.prepare_cached(&format!(
        "SELECT {CALL_COLUMNS} FROM calls WHERE {condition}"
    ))?
    .query_row(params, call_from_row)
    .optional()
}

/// One `calls` row, in `CALL_COLUMNS` order.
pub(super) fn call_from_row(row: &Row) -> rusqlite::Result<Call> {
    let json_col = |i: usize| -> rusqlite::Result<Option<Value>> {
        Ok(row
            .get::<_, Option<String>>(i)?
            .and_then(|s| serde_json::from_str(&s).ok()))
    };
    let call_id: String = row.get(0)?;
    Ok(Call {
        effect_id: stored_effect_id(row.get(14)?, &call_id),
        call_id,
        tenant: row.get(1)?,
        idem_key: row.get(2)?,
        fingerprint: row.get(3)?,
        client_id: row.get(4)?,
        seq: row.get(5)?,
        tool: row.get(6)?,
        args_json: row.get(7)?,
        status: row.get::<_, StatusColumn>(8)?.0,
        result: json_col(9)?,
        error: json_col(10)?,
        attempt: row.get(11)?,
        lease_until: row.get(12)?,
        owner: row.get(13)?,
        created_at: row.get(15)?,
        updated_at: row.get(16)?,
        next_attempt_at: row.get(17)?,
        cancel_requested_at: row.get(18)?,
        progress: row
            .get::<_, Option<String>>(19)?
            .and_then(|text| CallProgress::from_json(&text)),
        expires_at: None,
    })
}

/// `calls.status` as read: `Status::parse`, so an unknown word fails the
/// read with `UnknownStatus` as its cause.
pub(super) struct StatusColumn(pub(super) Status);

impl FromSql for StatusColumn {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        let word = value.as_str()?;
        Status::parse(word)
            .map(StatusColumn)
            .map_err(|e| FromSqlError::Other(Box::new(e)))
    }
}

/// An audit row for `lease`'s call, under the lease's attempt.
pub(super) fn audit_lease(
    conn: &Connection,
    now: f64,
    lease: &Lease,
    event: Event,
    detail: &str,
) -> rusqlite::Result<()> {
    audit(conn, now, &lease.call_id, lease.attempt, event, detail)
}
