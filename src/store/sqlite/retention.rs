//! Key retention: terminal calls whose last update is older than `--key-ttl`
//! are purged, with their audit rows, in small batches; their `effects` rows
//! stay as the permanent ledger, marked with when their call was purged.
//!
//! Finding candidates is a read (on a pooled connection, outside the writer):
//! calls in `rowid` order, which is creation order, from a cursor, stopping at
//! the first call created after the cutoff (nothing later can have been
//! updated before it). Deleting is a write: each candidate goes by its own
//! conditional `DELETE ... WHERE status IN (the terminal ones) AND
//! updated_at < cutoff`, whose row count decides, so a call that a same-key
//! retry reset to `pending` in between, or that another process purged, is
//! left alone.
//!
//! This module must never delete a `pending` or `running` call, never delete
//! an `effects` row, and never hold the writer for more than one small batch.

use super::super::ids::now;
use super::super::model::Purged;
use super::count_book;
use super::steps::{group, StatusColumn};
use crate::status::Status;
use rusqlite::{params, Connection, OptionalExtension};

/// Rows the candidate scan reads at most per batch, so one pass over a file
/// full of long-running calls stays short.
const MAX_SCANNED: i64 = 10_000;

/// Calls that may be purged, found from `after_rowid` on: up to `limit`
/// call ids, and the rowid to continue from next time (0 once the scan
/// reached calls newer than the cutoff, or the end of the table).
pub(super) fn candidates(
    conn: &Connection,
    cutoff: f64,
    after_rowid: i64,
    limit: usize,
) -> rusqlite::Result<(Vec<String>, i64)> {
    let mut stmt = conn.prepare_cached(
        "SELECT rowid, call_id, status, created_at, updated_at
           FROM calls WHERE rowid > ?1 ORDER BY rowid LIMIT ?2",
    )?;
    let mut rows = stmt.query(params![after_rowid, MAX_SCANNED])?;
    let (mut found, mut last, mut scanned) = (Vec::new(), 0, 0);
    while let Some(row) = rows.next()? {
        scanned += 1;
        let (rowid, call_id, status): (i64, String, String) =
            (row.get(0)?, row.get(1)?, row.get(2)?);
        let (created_at, updated_at): (f64, f64) = (row.get(3)?, row.get(4)?);
        if created_at >= cutoff {
            return Ok((found, 0));
        }
        last = rowid;
        // A word this release does not know is not purged: nothing says it ended.
        let terminal = Status::parse(&status).is_ok_and(Status::is_terminal);
        if terminal && updated_at < cutoff {
            found.push(call_id);
            if found.len() >= limit {
                return Ok((found, last));
            }
        }
    }
    let next = if scanned < MAX_SCANNED { 0 } else { last };
    Ok((found, next))
}

/// Delete each candidate that is still terminal and expired, with its audit,
/// business-key, approval and notification rows, and mark its effect (if any) as the ledger of a purged call.
pub(super) fn purge_op(
    call_ids: Vec<String>,
    cutoff: f64,
) -> impl FnOnce(&Connection) -> rusqlite::Result<Vec<Purged>> + Send + 'static {
    move |conn| {
        let now = now();
        let mut purged = Vec::with_capacity(call_ids.len());
        for call_id in call_ids {
            let deleted: Option<(String, String, String, StatusColumn, i64)> = conn
                .prepare_cached(
                    "DELETE FROM calls
                      WHERE call_id = ?1
                        AND status IN ('succeeded', 'failed', 'cancelled', 'denied')
                        AND updated_at < ?2
                  RETURNING tenant, idem_key, tool, status, attempt",
                )?
                .query_row(params![call_id, cutoff], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
                })
                .optional()?;
            let Some((tenant, idem_key, tool, StatusColumn(status), attempt)) = deleted else {
                continue;
            };
            count_book::deleted(conn, group(&tenant, &tool, status, attempt))?;
            conn.prepare_cached("DELETE FROM audit WHERE call_id = ?1")?
                .execute(params![call_id])?;
            // A purged call's business key goes with it (its window is long over
            // or it failed: a purged call is terminal and past its TTL).
            conn.prepare_cached("DELETE FROM business_keys WHERE call_id = ?1")?
                .execute(params![call_id])?;
            // So do its approval request and any notification still queued.
            conn.prepare_cached("DELETE FROM approvals WHERE call_id = ?1")?
                .execute(params![call_id])?;
            conn.prepare_cached("DELETE FROM notifications WHERE call_id = ?1")?
                .execute(params![call_id])?;
            let kept_effect = conn
                .prepare_cached("UPDATE effects SET call_purged_at = ?1 WHERE call_id = ?2")?
                .execute(params![now, call_id])?;
            if kept_effect > 0 {
                // The effect stays, its call gone: detached, for this tenant.
                count_book::effect_detached(conn, tenant.clone())?;
            }
            purged.push(Purged {
                call_id,
                tenant,
                idem_key,
            });
        }
        Ok(purged)
    }
}
