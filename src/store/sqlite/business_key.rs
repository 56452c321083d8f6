//! Business keys on SQLite (migration 8): the rule of `store::business_key`
//! — at most one holding row per `(tenant, tool, bkey)`, enforced by the
//! partial unique index `idx_business_keys_live` — written in the writer's
//! transaction of the call's own create. First a conditional `UPDATE` lets
//! go of a holder that has expired or whose call failed (its row count, not
//! a read, decides), then the `INSERT` of the new holding row either
//! succeeds or hits the unique index — and then the existing holder is the
//! answer and no call is written.
//!
//! Never runs a tool; never holds the transaction across anything but SQL.

use super::super::business_key::{BusinessKey, Guarded, IntentLedger};
use super::super::ids::{new_call_id, now};
use super::super::model::{Created, NewCall};
use super::sql;
use super::steps;
use rusqlite::{params, Connection, ErrorCode, OptionalExtension};

/// The idempotency key first: a known key is answered as always (a replay
/// never consults the business key), except that a retryable failure about
/// to run again must hold the business key first. An unknown key takes the
/// business key, then writes its call.
pub(super) fn create_or_get_op(
    new: NewCall,
    key: BusinessKey,
) -> impl FnOnce(&Connection) -> rusqlite::Result<Guarded> + Send + 'static {
    move |conn| {
        let now = now();
        if let Some(existing) = steps::select_call_by_key(conn, &new.tenant, &new.idem_key)? {
            let resets = existing.fingerprint == new.fingerprint && existing.is_retryable_failure();
            if resets {
                release_dead_holder(conn, &new.tenant, &new.tool, &key.value, now)?;
                if !hold(conn, &existing.call_id, &new, &key, now)? {
                    return duplicate(conn, &new, &key);
                }
            }
            let created = sql::resolve_existing(conn, existing, &new.fingerprint, now)?;
            return Ok(Guarded::Created(created));
        }
        release_dead_holder(conn, &new.tenant, &new.tool, &key.value, now)?;
        // The row needs an id before the call exists; `insert_call` may draw
        // another one (a collision with another process), so it is re-pointed.
        let draft = new_call_id();
        if !hold(conn, &draft, &new, &key, now)? {
            return duplicate(conn, &new, &key);
        }
        let gate = new.gate;
        let call = sql::insert_call(conn, new, now)?;
        if call.call_id != draft {
            conn.prepare_cached("UPDATE business_keys SET call_id = ?1 WHERE call_id = ?2")?
                .execute(params![call.call_id, draft])?;
        }
        sql::audit_created(conn, &call, gate, now)?;
        Ok(Guarded::Created(Created::New(call)))
    }
}

/// Let go of the key's holder if it no longer blocks: its window is over,
/// or its call failed, was cancelled or denied (or was purged).
pub(super) fn release_dead_holder(
    conn: &Connection,
    tenant: &str,
    tool: &str,
    bkey: &str,
    now: f64,
) -> rusqlite::Result<usize> {
    conn.prepare_cached(
        "UPDATE business_keys SET holding = 0
          WHERE tenant = ?1 AND tool = ?2 AND bkey = ?3 AND holding = 1
            AND (expires_at <= ?4
                 OR NOT EXISTS (SELECT 1 FROM calls c
                                 WHERE c.call_id = business_keys.call_id
                                   AND c.status NOT IN ('failed', 'cancelled', 'denied')))",
    )?
    .execute(params![tenant, tool, bkey, now])
}

/// Make `call_id` the key's holder. `false`: another call holds it (the
/// partial unique index refused the row), and nothing was changed.
fn hold(
    conn: &Connection,
    call_id: &str,
    new: &NewCall,
    key: &BusinessKey,
    now: f64,
) -> rusqlite::Result<bool> {
    let written = conn
        .prepare_cached(
            "INSERT INTO business_keys (call_id, tenant, tool, bkey, created_at, expires_at, holding)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, 1)
             ON CONFLICT (call_id) DO UPDATE
                SET bkey = excluded.bkey, created_at = excluded.created_at,
                    expires_at = excluded.expires_at, holding = 1",
        )?
        .execute(params![
            call_id,
            new.tenant,
            new.tool,
            key.value,
            now,
            now + key.window_secs
        ]);
    match written {
        Ok(_) => Ok(true),
        Err(e) if e.sqlite_error_code() == Some(ErrorCode::ConstraintViolation) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The call that holds the key (it exists: the index just said so, in this
/// same transaction).
fn duplicate(conn: &Connection, new: &NewCall, key: &BusinessKey) -> rusqlite::Result<Guarded> {
    let holder: Option<String> = conn
        .prepare_cached(
            "SELECT call_id FROM business_keys
              WHERE tenant = ?1 AND tool = ?2 AND bkey = ?3 AND holding = 1",
        )?
        .query_row(params![new.tenant, new.tool, key.value], |r| r.get(0))
        .optional()?;
    let holder = holder.ok_or(rusqlite::Error::QueryReturnedNoRows)?;
    let call = steps::select_call(conn, &holder)?.ok_or(rusqlite::Error::QueryReturnedNoRows)?;
    Ok(Guarded::Duplicate(call))
}

/// Effects reconciled by business key: per `(tenant, tool, business key)`,
/// the calls that carried it, those neither `failed`, `cancelled` nor `denied`, their effects and the
/// effects' amounts. More than one live call or effect per key within a
/// window is what the second layer exists to prevent (`verify` says so).
pub const LEDGER_SQL: &str = "SELECT b.tenant, b.tool, b.bkey, count(*),
        count(c.call_id) FILTER (WHERE c.status NOT IN ('failed', 'cancelled', 'denied')),
        count(e.effect_id), sum(e.amount)
   FROM business_keys b
   LEFT JOIN calls c ON c.call_id = b.call_id
   LEFT JOIN effects e ON e.call_id = b.call_id
  GROUP BY b.tenant, b.tool, b.bkey
  ORDER BY count(*) DESC, b.tenant, b.tool, b.bkey";

pub(super) fn ledger(conn: &Connection, limit: usize) -> rusqlite::Result<Vec<IntentLedger>> {
    conn.prepare(&format!("{LEDGER_SQL} LIMIT ?1"))?
        .query_map(params![limit as i64], |r| {
            Ok(IntentLedger {
                tenant: r.get(0)?,
                tool: r.get(1)?,
                business_key: r.get(2)?,
                calls: r.get(3)?,
                live_calls: r.get(4)?,
                effects: r.get(5)?,
                amount: r.get(6)?,
            })
        })?
        .collect()
}

/// Migration 8's DDL. `business_keys` keeps a row per call that carried a
/// business key (for `verify` and the ledger, and to take the key back on a
/// retry reset); `holding = 1` marks the one row per key that blocks.
pub(super) const BUSINESS_KEYS_TABLE: &str = "
CREATE TABLE IF NOT EXISTS business_keys (
  call_id     TEXT PRIMARY KEY,
  tenant      TEXT NOT NULL,
  tool        TEXT NOT NULL,
  bkey        TEXT NOT NULL,
  created_at  REAL NOT NULL,
  expires_at  REAL NOT NULL,
  holding     INTEGER NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS idx_business_keys_live
    ON business_keys(tenant, tool, bkey) WHERE holding = 1;
CREATE INDEX IF NOT EXISTS idx_business_keys_key
    ON business_keys(tenant, tool, bkey, created_at);
";
