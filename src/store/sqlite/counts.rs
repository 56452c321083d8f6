//! The count tables on SQLite (migration 11; see `store::counts` for what
//! they hold): their DDL, the backfill from the rows already there (also a
//! recount, `recount`), and the reads behind `/stats`, `/metrics`, the
//! overview and the list's planner.
//!
//! Migration 11 kept them with triggers on `calls` and `effects`, so that
//! every write counted whoever made it; they cost a new key about 45,000
//! instructions, a quarter of the writer's work, and migration 14 dropped
//! them. Since then each statement that changes what they count notes it,
//! and the writer folds a batch's notes in before its `COMMIT`
//! (`count_book`). A write made by hand (`sqlite3`) is not counted; `recount`
//! (run by the bench's bulk loaders) counts the tables again from the rows.
//!
//! This module never reads `calls` in full except in the migration's
//! one backfill and a recount.

use super::super::counts::{CountRow, Counts, FailureRow};
use super::super::model::Scope;
use rusqlite::{params, Connection, OptionalExtension};

/// Migration 11, first part: the tables and their triggers (dropped by
/// migration 14). `call_counts`
/// is keyed like the groups the list reads; `WITHOUT ROWID` keeps each row
/// in its key's B-tree, one page for every counter a batch touches.
///
/// A trigger on `calls` reads `effects` and one on `effects` reads `calls`.
/// So a later migration that rebuilds either table (create a copy, drop,
/// rename) must drop these triggers first and make them again after, or
/// run with `PRAGMA legacy_alter_table=ON`: a rename checks every trigger
/// against the schema, and finds the other table's triggers naming one
/// that is gone.
pub(super) const COUNT_TABLES: &str = "
CREATE TABLE IF NOT EXISTS call_counts (
  tenant    TEXT NOT NULL,
  tool      TEXT NOT NULL,
  status    TEXT NOT NULL,
  attempt   INTEGER NOT NULL,
  calls     INTEGER NOT NULL,
  inserted  INTEGER NOT NULL,
  entered   INTEGER NOT NULL,
  PRIMARY KEY (tenant, tool, status, attempt)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS effect_counts (
  tenant    TEXT PRIMARY KEY,
  effects   INTEGER NOT NULL,
  detached  INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TRIGGER IF NOT EXISTS calls_counted_on_insert AFTER INSERT ON calls
BEGIN
  INSERT INTO call_counts (tenant, tool, status, attempt, calls, inserted, entered)
  VALUES (new.tenant, new.tool, new.status, new.attempt, 1, 1, 0)
  ON CONFLICT (tenant, tool, status, attempt)
  DO UPDATE SET calls = calls + 1, inserted = inserted + 1;
END;

CREATE TRIGGER IF NOT EXISTS calls_counted_on_update
AFTER UPDATE OF tenant, tool, status, attempt ON calls
WHEN old.tenant IS NOT new.tenant OR old.tool IS NOT new.tool
  OR old.status IS NOT new.status OR old.attempt IS NOT new.attempt
BEGIN
  INSERT INTO call_counts (tenant, tool, status, attempt, calls, inserted, entered)
  VALUES (old.tenant, old.tool, old.status, old.attempt, -1, 0, 0),
         (new.tenant, new.tool, new.status, new.attempt, 1, 0, 1)
  ON CONFLICT (tenant, tool, status, attempt)
  DO UPDATE SET calls = calls + excluded.calls, entered = entered + excluded.entered;
END;

CREATE TRIGGER IF NOT EXISTS calls_counted_on_delete AFTER DELETE ON calls
BEGIN
  UPDATE call_counts SET calls = calls - 1
   WHERE tenant = old.tenant AND tool = old.tool AND status = old.status
     AND attempt = old.attempt;
  UPDATE effect_counts SET detached = detached + 1
   WHERE tenant = old.tenant
     AND EXISTS (SELECT 1 FROM effects WHERE call_id = old.call_id);
END;

CREATE TRIGGER IF NOT EXISTS effects_counted_on_insert AFTER INSERT ON effects
BEGIN
  INSERT INTO effect_counts (tenant, effects, detached)
  SELECT coalesce(c.tenant, ''), 1, c.call_id IS NULL
    FROM (SELECT 1) LEFT JOIN calls c ON c.call_id = new.call_id
   WHERE true
  ON CONFLICT (tenant)
  DO UPDATE SET effects = effects + 1, detached = detached + excluded.detached;
END;

CREATE TRIGGER IF NOT EXISTS effects_counted_on_delete AFTER DELETE ON effects
BEGIN
  INSERT INTO effect_counts (tenant, effects, detached)
  SELECT coalesce(c.tenant, ''), -1, -(c.call_id IS NULL)
    FROM (SELECT 1) LEFT JOIN calls c ON c.call_id = old.call_id
   WHERE true
  ON CONFLICT (tenant)
  DO UPDATE SET effects = effects - 1, detached = detached + excluded.detached;
END;
";

/// Migration 14: migration 11's triggers, dropped; the writer keeps the
/// counts since (`count_book`).
pub(super) const DROP_COUNT_TRIGGERS: &str = "
DROP TRIGGER IF EXISTS calls_counted_on_insert;
DROP TRIGGER IF EXISTS calls_counted_on_update;
DROP TRIGGER IF EXISTS calls_counted_on_delete;
DROP TRIGGER IF EXISTS effects_counted_on_insert;
DROP TRIGGER IF EXISTS effects_counted_on_delete;
";

/// Migration 11, second part: the counts of the rows already there, once,
/// inside the migration's transaction (so no write falls between the count
/// and the triggers). An effect whose call is gone counts under the tenant
/// `''` as detached: it still counts for every tenant together, as
/// `count(*) FROM effects` did, and for no one tenant.
pub(super) const BACKFILL_COUNTS: &str = "
DELETE FROM call_counts;
DELETE FROM effect_counts;
INSERT INTO call_counts (tenant, tool, status, attempt, calls, inserted, entered)
SELECT tenant, tool, status, attempt, count(*), count(*), 0
  FROM calls GROUP BY tenant, tool, status, attempt;
INSERT INTO effect_counts (tenant, effects, detached)
SELECT coalesce(c.tenant, ''), count(*), count(*) - count(c.call_id)
  FROM effects e LEFT JOIN calls c ON c.call_id = e.call_id
 GROUP BY coalesce(c.tenant, '');
";

/// Every count from the rows, as migration 11's backfill made them (the
/// running totals `inserted` and `entered` start again from the rows): for
/// rows that no statement noted, such as the bench's bulk loads.
#[cfg(any(test, feature = "testing"))]
pub(super) fn recount(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(BACKFILL_COUNTS)
}

/// `idx_calls_status` reshaped from `(status, lease_until, attempt)` to
/// `(status, tenant, tool, call_id)`: calls by status, then tenant and tool,
/// newest last. The claim's scan of pending calls and recovery's of running
/// ones search it by status as before; the list reads each (status, tenant,
/// tool) group of it newest first. No index is added to the hot path: a new
/// call still writes one entry and each transition still moves it (to the
/// right end of its new group, as ids grow), and a lease's extension, which
/// changes only `lease_until`, no longer moves it at all. `attempt` was
/// there for `/stats`, which the count tables now answer.
pub(super) const STATUS_INDEX: &str = "
DROP INDEX IF EXISTS idx_calls_status;
CREATE INDEX idx_calls_status ON calls(status, tenant, tool, call_id);
";

/// Migration 15, the failures by error code (`store::counts`): the table,
/// its triggers — a call that enters `failed`, inserted so or moved there,
/// adds one to its (tenant, tool, code); nothing else fires them, so a
/// call's create, claim and success cost only the `WHEN` — and the backfill
/// from the failed calls already there (the only count they can have).
pub(super) const ERROR_COUNTS: &str = "
CREATE TABLE IF NOT EXISTS error_counts (
  tenant      TEXT NOT NULL,
  tool        TEXT NOT NULL,
  error_code  TEXT NOT NULL,
  failed      INTEGER NOT NULL,
  PRIMARY KEY (tenant, tool, error_code)
) WITHOUT ROWID;

CREATE TRIGGER IF NOT EXISTS calls_failures_counted_on_insert AFTER INSERT ON calls
WHEN new.status = 'failed'
BEGIN
  INSERT INTO error_counts (tenant, tool, error_code, failed)
  VALUES (new.tenant, new.tool, coalesce(new.error_code, ''), 1)
  ON CONFLICT (tenant, tool, error_code) DO UPDATE SET failed = failed + 1;
END;

CREATE TRIGGER IF NOT EXISTS calls_failures_counted AFTER UPDATE OF status ON calls
WHEN new.status = 'failed' AND old.status IS NOT 'failed'
BEGIN
  INSERT INTO error_counts (tenant, tool, error_code, failed)
  VALUES (new.tenant, new.tool, coalesce(new.error_code, ''), 1)
  ON CONFLICT (tenant, tool, error_code) DO UPDATE SET failed = failed + 1;
END;

DELETE FROM error_counts;
INSERT INTO error_counts (tenant, tool, error_code, failed)
SELECT tenant, tool, coalesce(error_code, ''), count(*)
  FROM calls WHERE status = 'failed' GROUP BY tenant, tool, coalesce(error_code, '');
";

/// `scope`'s counts, in the caller's read transaction.
pub(super) fn counts(conn: &Connection, scope: Scope<'_>) -> rusqlite::Result<Counts> {
    let rows = count_rows(conn, scope)?;
    let effects = match scope {
        Scope::All => conn
            .prepare_cached("SELECT coalesce(sum(effects), 0) FROM effect_counts")?
            .query_row([], |r| r.get(0))?,
        Scope::Tenant(tenant) => conn
            .prepare_cached("SELECT effects - detached FROM effect_counts WHERE tenant = ?1")?
            .query_row(params![tenant], |r| r.get(0))
            .optional()?
            .unwrap_or(0),
    };
    let mut counts = Counts {
        rows,
        failures: failure_rows(conn, scope)?,
        effects,
        oldest_pending_created_at: None,
        oldest_awaiting_since: None,
    };
    counts.oldest_pending_created_at = oldest_pending(conn, &counts)?;
    if counts.in_status("awaiting_approval") > 0 {
        counts.oldest_awaiting_since = oldest_awaiting(conn, scope)?;
    }
    Ok(counts)
}

/// When the oldest open approval request of `scope` was made: a `min()`
/// over `idx_approvals_open`, the open requests only.
fn oldest_awaiting(conn: &Connection, scope: Scope<'_>) -> rusqlite::Result<Option<f64>> {
    conn.prepare_cached(
        "SELECT min(requested_at) FROM approvals
          WHERE decision IS NULL AND (?1 IS NULL OR tenant = ?1)",
    )?
    .query_row(params![scope.tenant()], |r| r.get(0))
}

pub(super) fn count_rows(conn: &Connection, scope: Scope<'_>) -> rusqlite::Result<Vec<CountRow>> {
    const COLUMNS: &str = "SELECT tenant, tool, status, attempt, calls, inserted, entered
                             FROM call_counts";
    let row = |r: &rusqlite::Row| {
        Ok(CountRow {
            tenant: r.get(0)?,
            tool: r.get(1)?,
            status: r.get(2)?,
            attempt: r.get(3)?,
            calls: r.get(4)?,
            inserted: r.get(5)?,
            entered: r.get(6)?,
        })
    };
    match scope {
        Scope::All => conn.prepare_cached(COLUMNS)?.query_map([], row)?.collect(),
        Scope::Tenant(tenant) => conn
            .prepare_cached(&format!("{COLUMNS} WHERE tenant = ?1"))?
            .query_map(params![tenant], row)?
            .collect(),
    }
}

/// `error_counts`' rows of `scope`.
fn failure_rows(conn: &Connection, scope: Scope<'_>) -> rusqlite::Result<Vec<FailureRow>> {
    let row = |r: &rusqlite::Row| {
        Ok(FailureRow {
            tenant: r.get(0)?,
            tool: r.get(1)?,
            error_code: r.get(2)?,
            failed: r.get(3)?,
        })
    };
    conn.prepare_cached(
        "SELECT tenant, tool, error_code, failed FROM error_counts
          WHERE ?1 IS NULL OR tenant = ?1",
    )?
    .query_map([scope.tenant()], row)?
    .collect()
}

/// The oldest pending call's `created_at`: in each (tenant, tool) with
/// pending calls, the first of `idx_calls_status`' pending entries (ids grow
/// with time), one index seek each.
fn oldest_pending(conn: &Connection, counts: &Counts) -> rusqlite::Result<Option<f64>> {
    let mut first = conn.prepare_cached(
        "SELECT created_at FROM calls
          WHERE tenant = ?1 AND tool = ?2 AND status = 'pending'
          ORDER BY call_id LIMIT 1",
    )?;
    let mut oldest: Option<f64> = None;
    for (tenant, tool, _) in counts.groups().into_iter().filter(|g| g.2 == "pending") {
        let created: Option<f64> = first
            .query_row(params![tenant, tool], |r| r.get(0))
            .optional()?;
        oldest = match (oldest, created) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    Ok(oldest)
}
