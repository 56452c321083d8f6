//! The count tables on PostgreSQL (schema step 5; see `store::counts` for
//! what they hold): DDL, the triggers that keep them in the transaction of
//! every change to `calls` and `effects`, the backfill, the reads, and the
//! fold that keeps them small.
//!
//! **Sharded by backend.** Every row is also keyed by `shard`, the
//! `pg_backend_pid()` of the connection that wrote it. One row per key
//! would be one hot row: every node's commit would wait on the lock of the
//! last commit that touched it (through its fsync), so the nodes would
//! commit one at a time. Keyed by backend, no two open transactions ever
//! write the same counter row — no waits, no deadlocks, whatever order a
//! statement touches its keys in — and a read sums the shards. A backend's
//! rows outlive it; `fold` moves the rows of backends that are gone into
//! shard 0 (which no backend writes, a pid is never 0), so the table holds
//! about (connections open × keys) rows.
//!
//! Row triggers with a `WHEN` on the columns counted: a lease extension or
//! a replay's no-op `ON CONFLICT DO UPDATE` fires no function at all.
//!
//! This module never reads `calls` in full except in the one backfill.

use super::super::counts::{CountRow, Counts, FailureRow};
use super::super::model::Scope;
use super::session::{GenericClient, Session};

/// Schema step 5, the count tables: DDL and triggers, then
/// `BACKFILL_*_COUNTS` (under the migration's lock, in its transaction:
/// `CREATE TRIGGER` takes a lock on `calls` that waits for writers in
/// flight and holds off new ones until the step commits, so no write falls
/// between the count and the triggers). An effect whose call is gone counts
/// under tenant `''` as detached: for every tenant together, not for any
/// one.
pub(super) const COUNT_TABLES: &str = "
CREATE TABLE call_counts (
  tenant    text NOT NULL,
  tool      text NOT NULL,
  status    text NOT NULL,
  attempt   bigint NOT NULL,
  shard     integer NOT NULL,
  calls     bigint NOT NULL,
  inserted  bigint NOT NULL,
  entered   bigint NOT NULL,
  PRIMARY KEY (tenant, tool, status, attempt, shard)
);

CREATE TABLE effect_counts (
  tenant    text NOT NULL,
  shard     integer NOT NULL,
  effects   bigint NOT NULL,
  detached  bigint NOT NULL,
  PRIMARY KEY (tenant, shard)
);

CREATE FUNCTION idem_count_calls() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP IN ('UPDATE', 'DELETE') THEN
    INSERT INTO call_counts AS n (tenant, tool, status, attempt, shard, calls, inserted, entered)
    VALUES (OLD.tenant, OLD.tool, OLD.status, OLD.attempt, pg_backend_pid(), -1, 0, 0)
    ON CONFLICT (tenant, tool, status, attempt, shard) DO UPDATE SET calls = n.calls - 1;
  END IF;
  IF TG_OP IN ('INSERT', 'UPDATE') THEN
    INSERT INTO call_counts AS n (tenant, tool, status, attempt, shard, calls, inserted, entered)
    VALUES (NEW.tenant, NEW.tool, NEW.status, NEW.attempt, pg_backend_pid(), 1,
            (TG_OP = 'INSERT')::int, (TG_OP = 'UPDATE')::int)
    ON CONFLICT (tenant, tool, status, attempt, shard) DO UPDATE
       SET calls = n.calls + 1, inserted = n.inserted + EXCLUDED.inserted,
           entered = n.entered + EXCLUDED.entered;
  END IF;
  IF TG_OP = 'DELETE' AND EXISTS (SELECT 1 FROM effects WHERE call_id = OLD.call_id) THEN
    INSERT INTO effect_counts AS n (tenant, shard, effects, detached)
    VALUES (OLD.tenant, pg_backend_pid(), 0, 1)
    ON CONFLICT (tenant, shard) DO UPDATE SET detached = n.detached + 1;
  END IF;
  RETURN NULL;
END $$;

CREATE TRIGGER calls_counted AFTER INSERT OR DELETE ON calls
  FOR EACH ROW EXECUTE FUNCTION idem_count_calls();
CREATE TRIGGER calls_counted_on_update AFTER UPDATE OF tenant, tool, status, attempt ON calls
  FOR EACH ROW
  WHEN (OLD.tenant IS DISTINCT FROM NEW.tenant OR OLD.tool IS DISTINCT FROM NEW.tool
        OR OLD.status IS DISTINCT FROM NEW.status OR OLD.attempt IS DISTINCT FROM NEW.attempt)
  EXECUTE FUNCTION idem_count_calls();

CREATE FUNCTION idem_count_effects() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  effect_call text;
  delta bigint;
  owner text;
BEGIN
  IF TG_OP = 'INSERT' THEN
    effect_call := NEW.call_id;
    delta := 1;
  ELSE
    effect_call := OLD.call_id;
    delta := -1;
  END IF;
  SELECT tenant INTO owner FROM calls WHERE call_id = effect_call;
  INSERT INTO effect_counts AS n (tenant, shard, effects, detached)
  VALUES (coalesce(owner, ''), pg_backend_pid(), delta,
          CASE WHEN owner IS NULL THEN delta ELSE 0 END)
  ON CONFLICT (tenant, shard) DO UPDATE
     SET effects = n.effects + EXCLUDED.effects, detached = n.detached + EXCLUDED.detached;
  RETURN NULL;
END $$;

CREATE TRIGGER effects_counted AFTER INSERT OR DELETE ON effects
  FOR EACH ROW EXECUTE FUNCTION idem_count_effects();
";

/// The counts of the rows already there, into empty count tables: the
/// migration's backfill, and the bulk loader's count once it has loaded
/// with the triggers off. The calls' counts, then the effects'
/// (`BACKFILL_EFFECT_COUNTS`); both in one transaction.
pub(super) const BACKFILL_CALL_COUNTS: &str = "
INSERT INTO call_counts (tenant, tool, status, attempt, shard, calls, inserted, entered)
SELECT tenant, tool, status, attempt, 0, count(*), count(*), 0
  FROM calls GROUP BY tenant, tool, status, attempt";

/// The effects' counts of `BACKFILL_CALL_COUNTS`'s backfill.
pub(super) const BACKFILL_EFFECT_COUNTS: &str = "
INSERT INTO effect_counts (tenant, shard, effects, detached)
SELECT coalesce(c.tenant, ''), 0, count(*), count(*) - count(c.call_id)
  FROM effects e LEFT JOIN calls c ON c.call_id = e.call_id
 GROUP BY coalesce(c.tenant, '')";

/// Schema step 8, failures by error code (`store::counts`): the table,
/// sharded like the others, its triggers — a call that enters `failed`,
/// inserted so or moved there, adds one to its (tenant, tool, code); the
/// `WHEN` keeps every other insert or update from calling the function —
/// and the backfill from the failed calls already there.
pub(super) const ERROR_COUNTS: &str = "
CREATE TABLE error_counts (
  tenant      text NOT NULL,
  tool        text NOT NULL,
  error_code  text NOT NULL,
  shard       integer NOT NULL,
  failed      bigint NOT NULL,
  PRIMARY KEY (tenant, tool, error_code, shard)
);

CREATE FUNCTION idem_count_failures() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO error_counts AS n (tenant, tool, error_code, shard, failed)
  VALUES (NEW.tenant, NEW.tool, coalesce((NEW.error_json::jsonb) ->> 'code', ''),
          pg_backend_pid(), 1)
  ON CONFLICT (tenant, tool, error_code, shard) DO UPDATE SET failed = n.failed + 1;
  RETURN NULL;
END $$;

CREATE TRIGGER calls_failures_counted AFTER INSERT ON calls
  FOR EACH ROW WHEN (NEW.status = 'failed') EXECUTE FUNCTION idem_count_failures();
CREATE TRIGGER calls_failures_counted_on_update AFTER UPDATE OF status ON calls
  FOR EACH ROW WHEN (NEW.status = 'failed' AND OLD.status IS DISTINCT FROM 'failed')
  EXECUTE FUNCTION idem_count_failures();
";

/// The failures of the calls already there, into an empty `error_counts`:
/// step 8's backfill, and the bulk loader's count.
pub(super) const BACKFILL_ERROR_COUNTS: &str = "
INSERT INTO error_counts (tenant, tool, error_code, shard, failed)
SELECT tenant, tool, coalesce((error_json::jsonb) ->> 'code', ''), 0, count(*)
  FROM calls WHERE status = 'failed'
 GROUP BY tenant, tool, coalesce((error_json::jsonb) ->> 'code', '')";

/// `error_counts`' rows of `scope`, summed over the shards.
const FAILURE_ROWS: &str = "
SELECT tenant, tool, error_code, sum(failed)::bigint
  FROM error_counts
 WHERE $1::text IS NULL OR tenant = $1
 GROUP BY tenant, tool, error_code";

/// The count rows of `scope`, summed over the shards.
const COUNT_ROWS: &str = "
SELECT tenant, tool, status, attempt,
       sum(calls)::bigint, sum(inserted)::bigint, sum(entered)::bigint
  FROM call_counts
 WHERE $1::text IS NULL OR tenant = $1
 GROUP BY tenant, tool, status, attempt";

/// Every effect ever written (none is ever deleted).
const ALL_EFFECTS: &str = "SELECT coalesce(sum(effects), 0)::bigint FROM effect_counts";

/// A tenant's effects whose calls it still has.
const TENANT_EFFECTS: &str =
    "SELECT coalesce(sum(effects - detached), 0)::bigint FROM effect_counts WHERE tenant = $1";

/// The oldest pending call, by `calls_pending` (creation order): the read
/// `/metrics` made before the count tables, unchanged.
const OLDEST_PENDING: &str =
    "SELECT created_at FROM calls WHERE status = 'pending' ORDER BY created_seq LIMIT 1";

/// A tenant's oldest pending call: the first pending entry of `calls_list`
/// in each of its tools with pending calls.
const TENANT_OLDEST_PENDING: &str = "
SELECT min(first.created_at) FROM unnest($2::text[]) AS t(tool)
 CROSS JOIN LATERAL (
   SELECT created_at FROM calls
    WHERE tenant = $1 AND tool = t.tool AND status = 'pending'
    ORDER BY call_id LIMIT 1) AS first";

/// `scope`'s counts, in the caller's snapshot.
pub(super) fn counts(
    client: &mut impl GenericClient,
    scope: Scope<'_>,
) -> Result<Counts, tokio_postgres::Error> {
    let rows = count_rows(client, scope)?;
    let (effects, oldest_pending_created_at) = match scope {
        Scope::All => (
            client.query_one(ALL_EFFECTS, &[])?.get(0),
            client.query_opt(OLDEST_PENDING, &[])?.map(|r| r.get(0)),
        ),
        Scope::Tenant(tenant) => {
            let pending_tools: Vec<&str> = rows
                .iter()
                .filter(|r| r.status == "pending" && r.calls > 0)
                .map(|r| r.tool.as_str())
                .collect();
            let oldest = match pending_tools.is_empty() {
                true => None,
                false => client
                    .query_one(TENANT_OLDEST_PENDING, &[&tenant, &pending_tools])?
                    .get(0),
            };
            (client.query_one(TENANT_EFFECTS, &[&tenant])?.get(0), oldest)
        }
    };
    let failures = client
        .query(FAILURE_ROWS, &[&scope.tenant()])?
        .iter()
        .map(|r| FailureRow {
            tenant: r.get(0),
            tool: r.get(1),
            error_code: r.get(2),
            failed: r.get(3),
        })
        .collect();
    let oldest_awaiting_since = match rows
        .iter()
        .any(|r| r.status == "awaiting_approval" && r.calls > 0)
    {
        true => {
            let tenant = scope.tenant();
            client.query_one(OLDEST_AWAITING, &[&tenant])?.get(0)
        }
        false => None,
    };
    Ok(Counts {
        rows,
        failures,
        effects,
        oldest_pending_created_at,
        oldest_awaiting_since,
    })
}

/// When the oldest open approval request of a scope (`$1`, or every
/// tenant's when NULL) was made: a `min()` over `approvals_open`, the open
/// requests only.
const OLDEST_AWAITING: &str = "SELECT min(requested_at) FROM approvals
  WHERE decision IS NULL AND ($1::text IS NULL OR tenant = $1)";

/// The count rows of `scope`, summed over the shards.
pub(super) fn count_rows(
    client: &mut impl GenericClient,
    scope: Scope<'_>,
) -> Result<Vec<CountRow>, tokio_postgres::Error> {
    let tenant = match scope {
        Scope::All => None,
        Scope::Tenant(t) => Some(t),
    };
    Ok(client
        .query(COUNT_ROWS, &[&tenant])?
        .iter()
        .map(|r| CountRow {
            tenant: r.get(0),
            tool: r.get(1),
            status: r.get(2),
            attempt: r.get(3),
            calls: r.get(4),
            inserted: r.get(5),
            entered: r.get(6),
        })
        .collect())
}

/// The advisory lock `fold` takes ("cnts"): one node folds at a time.
const FOLD_LOCK: i64 = 0x636e_7473;

/// Move the rows of backends that are gone (no session has their pid) into
/// shard 0, summing; the totals do not change. A pid reused by a new
/// session meanwhile is harmless: the row is moved whole, and that
/// session's next write starts a new one.
const FOLD_CALL_COUNTS: &str = "
WITH gone AS (
  DELETE FROM call_counts
   WHERE shard <> 0 AND shard NOT IN (SELECT pid FROM pg_stat_activity WHERE pid IS NOT NULL)
  RETURNING tenant, tool, status, attempt, calls, inserted, entered
)
INSERT INTO call_counts AS n (tenant, tool, status, attempt, shard, calls, inserted, entered)
SELECT tenant, tool, status, attempt, 0, sum(calls), sum(inserted), sum(entered)
  FROM gone GROUP BY tenant, tool, status, attempt
ON CONFLICT (tenant, tool, status, attempt, shard) DO UPDATE
   SET calls = n.calls + EXCLUDED.calls, inserted = n.inserted + EXCLUDED.inserted,
       entered = n.entered + EXCLUDED.entered";

const FOLD_ERROR_COUNTS: &str = "
WITH gone AS (
  DELETE FROM error_counts
   WHERE shard <> 0 AND shard NOT IN (SELECT pid FROM pg_stat_activity WHERE pid IS NOT NULL)
  RETURNING tenant, tool, error_code, failed
)
INSERT INTO error_counts AS n (tenant, tool, error_code, shard, failed)
SELECT tenant, tool, error_code, 0, sum(failed) FROM gone GROUP BY tenant, tool, error_code
ON CONFLICT (tenant, tool, error_code, shard) DO UPDATE SET failed = n.failed + EXCLUDED.failed";

const FOLD_EFFECT_COUNTS: &str = "
WITH gone AS (
  DELETE FROM effect_counts
   WHERE shard <> 0 AND shard NOT IN (SELECT pid FROM pg_stat_activity WHERE pid IS NOT NULL)
  RETURNING tenant, effects, detached
)
INSERT INTO effect_counts AS n (tenant, shard, effects, detached)
SELECT tenant, 0, sum(effects), sum(detached) FROM gone GROUP BY tenant
ON CONFLICT (tenant, shard) DO UPDATE
   SET effects = n.effects + EXCLUDED.effects, detached = n.detached + EXCLUDED.detached";

/// `FOLD_*` in one transaction, unless another node is folding now.
/// Returns whether this one did.
pub(super) fn fold(client: &mut Session) -> Result<bool, tokio_postgres::Error> {
    let mut tx = client.transaction()?;
    let locked: bool = tx
        .query_one("SELECT pg_try_advisory_xact_lock($1)", &[&FOLD_LOCK])?
        .get(0);
    if locked {
        tx.execute(FOLD_CALL_COUNTS, &[])?;
        tx.execute(FOLD_EFFECT_COUNTS, &[])?;
        tx.execute(FOLD_ERROR_COUNTS, &[])?;
    }
    tx.commit()?;
    Ok(locked)
}
