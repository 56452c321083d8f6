//! The PostgreSQL schema and its migrations.
//!
//! `idem_schema` holds one row per step applied. Each step runs in its own
//! transaction that first takes `pg_advisory_xact_lock(MIGRATION_LOCK)` and
//! then re-reads the version: nodes starting at once queue on the lock, and
//! the ones after the first find the step applied, so each runs exactly once,
//! whole or not at all (PostgreSQL's DDL is transactional). A database whose
//! version is newer than this binary knows is refused, as on SQLite.
//!
//! Step 1 is the SQLite schema's shape at its version 7 (tenants, audit
//! attempts, key retention, automatic retries, instances), with PostgreSQL's
//! own indexes for the queue. This module never reads or writes calls.

use super::super::db_schema::DbSchema;
use super::super::error::StoreError;
use super::error::store_error;
use super::home_schema;
use super::session::{GenericClient, Session, Transaction};

/// The advisory lock every migration takes ("idem" in ASCII): one number,
/// so a database shared with other applications is unlikely to collide.
const MIGRATION_LOCK: i64 = 0x6964_656d;

struct Migration {
    version: i32,
    name: &'static str,
    /// Run one after another in the step's transaction.
    sql: &'static [&'static str],
}

/// Every step, oldest first. Append only: a released step never changes.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "calls, effects, audit and instances (the SQLite schema at version 7)",
        sql: &[V1],
    },
    Migration {
        version: 2,
        name: "business_keys: one live call per business key (SQLite's version 8)",
        sql: &[super::business_key::BUSINESS_KEYS_TABLE],
    },
    Migration {
        version: 3,
        name: "cancelled calls: the status, cancel_requested_at and cancel_reason (SQLite's version 9)",
        sql: &[V3],
    },
    Migration {
        version: 4,
        name: "tool_limits: max_concurrency and rate shared by every node",
        sql: &[super::limits::TOOL_LIMITS_TABLE],
    },
    Migration {
        version: 5,
        name: "call_counts, effect_counts, calls_list, idem_key in \"C\": counts and lists \
               without reading calls (SQLite's version 11)",
        sql: &[
            V5,
            super::counts::COUNT_TABLES,
            super::counts::BACKFILL_CALL_COUNTS,
            super::counts::BACKFILL_EFFECT_COUNTS,
        ],
    },
    Migration {
        version: 6,
        name: "approval gates: awaiting_approval and denied, approvals, notifications \
               (SQLite's version 12)",
        sql: &[super::approval::V6],
    },
    Migration {
        version: 7,
        name: "calls.progress_json: a running call's last progress, for every node \
               (SQLite's version 13)",
        sql: &[V7],
    },
    Migration {
        version: 8,
        name: "calls.error_code, calls_error, error_counts: the list by error code, \
               failures by code (SQLite's version 15)",
        sql: &[
            super::list::ERROR_CODE_COLUMN,
            super::counts::ERROR_COUNTS,
            super::counts::BACKFILL_ERROR_COUNTS,
        ],
    },
    Migration {
        version: 9,
        name: "rate_readings: the overview's history, kept across restarts (SQLite's version 16)",
        sql: &[super::readings::READINGS_TABLE],
    },
    Migration {
        version: 10,
        name: "paused_tools: a paused tool's calls are kept but claimed by no node \
               (SQLite's version 17)",
        sql: &[super::paused::PAUSED_TOOLS_TABLE],
    },
    Migration {
        version: 11,
        name: "bulk_jobs: cancel or re-run every call a filter matches, in the background \
               (SQLite's version 18)",
        sql: &[super::bulk_jobs::BULK_JOBS_TABLE],
    },
];

/// Step 7: a running call's last progress report (JSON), written with its
/// lease's extension by the node that runs it, so any node can show it.
const V7: &str = "ALTER TABLE calls ADD COLUMN progress_json text;";

/// Step 5: the list's index, keys in byte order, and the count tables
/// (`counts`).
///
/// `idem_key` takes the "C" collation: keys are opaque bytes, so equality
/// (and the unique constraint) is unchanged, while `calls_tenant_idem_key`
/// is rebuilt in byte order, in which a key prefix is one range of it — in
/// a language's collation it is not. `calls_list` is the list's index; its
/// entries land at the right end of their (tenant, tool, status) group, as
/// call ids grow.
const V5: &str = "
ALTER TABLE calls ALTER COLUMN idem_key TYPE text COLLATE \"C\";
CREATE INDEX calls_list ON calls (tenant, tool, status, call_id);
";

/// The PostgreSQL schema version this binary writes.
pub const PG_SCHEMA_VERSION: i32 = MIGRATIONS[MIGRATIONS.len() - 1].version;

/// Times are seconds since the epoch (`double precision`), from the
/// database's clock, as on SQLite (REAL): the API's types stay one.
///
/// Indexes, each for one reader of the queue, all partial so a call is in at
/// most the ones its status needs:
/// - `calls_pending (created_seq)`: the claim's scan, oldest first, with
///   `FOR UPDATE SKIP LOCKED`;
/// - `calls_running (lease_until)`: recovery's scan of running calls;
/// - `calls_terminal (updated_at)`: key retention's scan of expired calls.
///
/// `created_seq` is creation order (an identity), for the claim's order.
/// The `status` check makes an unknown status impossible rather than a
/// `verify` finding.
const V1: &str = "
CREATE TABLE calls (
  call_id         text PRIMARY KEY,
  tenant          text NOT NULL,
  idem_key        text NOT NULL,
  fingerprint     text NOT NULL,
  client_id       text,
  seq             bigint,
  tool            text NOT NULL,
  args_json       text NOT NULL,
  status          text NOT NULL,
  result_json     text,
  error_json      text,
  attempt         bigint NOT NULL DEFAULT 0,
  lease_until     double precision,
  owner           text,
  effect_id       text,
  created_at      double precision NOT NULL,
  updated_at      double precision NOT NULL,
  next_attempt_at double precision,
  created_seq     bigint GENERATED ALWAYS AS IDENTITY,
  CONSTRAINT calls_tenant_idem_key UNIQUE (tenant, idem_key),
  CONSTRAINT calls_status_known
    CHECK (status IN ('pending', 'running', 'succeeded', 'failed'))
);
CREATE INDEX calls_pending ON calls (created_seq) WHERE status = 'pending';
CREATE INDEX calls_running ON calls (lease_until) WHERE status = 'running';
CREATE INDEX calls_terminal ON calls (updated_at) WHERE status IN ('succeeded', 'failed');
CREATE INDEX calls_client_seq ON calls (client_id, seq) WHERE client_id IS NOT NULL;

CREATE TABLE effects (
  effect_id      text PRIMARY KEY,
  call_id        text NOT NULL CONSTRAINT effects_call_id UNIQUE,
  tool           text NOT NULL,
  amount         bigint,
  detail         text,
  created_at     double precision NOT NULL,
  call_purged_at double precision
);

CREATE TABLE audit (
  id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  ts       double precision NOT NULL,
  call_id  text,
  attempt  bigint,
  event    text NOT NULL,
  detail   text
);
CREATE INDEX audit_call ON audit (call_id, id);

CREATE TABLE instances (
  instance_id  text PRIMARY KEY,
  pid          bigint NOT NULL,
  host         text NOT NULL,
  started_at   double precision NOT NULL,
  heartbeat_at double precision NOT NULL,
  stopped_at   double precision
);
";

/// Step 3: cancelling (`store::cancel`). `cancelled` joins the statuses
/// the check allows and the terminal ones key retention scans (the partial
/// index is made again with it: `retention`'s purge names the same three);
/// a running call's cancel request is kept on its row.
const V3: &str = "
ALTER TABLE calls ADD COLUMN cancel_requested_at double precision,
                  ADD COLUMN cancel_reason text;
ALTER TABLE calls DROP CONSTRAINT calls_status_known;
ALTER TABLE calls ADD CONSTRAINT calls_status_known
  CHECK (status IN ('pending', 'running', 'succeeded', 'failed', 'cancelled'));
DROP INDEX calls_terminal;
CREATE INDEX calls_terminal ON calls (updated_at)
  WHERE status IN ('succeeded', 'failed', 'cancelled');
";

/// Bring the database up to `PG_SCHEMA_VERSION`; returns the names of the
/// steps this call applied (each is also logged once, here).
pub(super) fn migrate(
    client: &mut Session,
    schema: &DbSchema,
) -> Result<Vec<&'static str>, StoreError> {
    let (moved, found) = locked(client, |tx| {
        let moved = home_schema::prepare(tx, schema)?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS idem_schema (
               version    integer PRIMARY KEY,
               name       text NOT NULL,
               applied_at timestamptz NOT NULL DEFAULT now()
             )",
        )
        .map_err(store_error)?;
        Ok((moved, version(tx)?))
    })?;
    if !moved.is_empty() {
        crate::log::info("the tables of an earlier release moved from public into --db-schema")
            .event("tables_moved")
            .number("tables", moved.len() as u64)
            .emit();
    }
    if found > PG_SCHEMA_VERSION {
        return Err(StoreError::internal(format!(
            "the database has schema version {found}, newer than this release's \
             {PG_SCHEMA_VERSION}; run the release that wrote it, or a newer one"
        )));
    }
    let mut applied = Vec::new();
    for step in MIGRATIONS.iter().filter(|m| m.version > found) {
        let ran = locked(client, |tx| {
            if version(tx)? >= step.version {
                return Ok(false);
            }
            for sql in step.sql {
                tx.batch_execute(sql).map_err(store_error)?;
            }
            tx.execute(
                "INSERT INTO idem_schema (version, name) VALUES ($1, $2)",
                &[&step.version, &step.name],
            )
            .map_err(store_error)?;
            Ok(true)
        })?;
        if ran {
            crate::log::info("schema migration applied")
                .event("migration")
                .number("version", step.version as u64)
                .label("migration", step.name)
                .emit();
            applied.push(step.name);
        }
    }
    Ok(applied)
}

/// Run `op` in a transaction that holds the migration lock until it ends.
fn locked<T>(
    client: &mut Session,
    op: impl FnOnce(&mut Transaction<'_>) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    let mut tx = client.transaction().map_err(store_error)?;
    // Waiting for another node's migration may take longer than an
    // operation may: the caller's deadline (`MIGRATION_DEADLINE`) bounds it.
    tx.batch_execute("SET LOCAL statement_timeout = 0")
        .map_err(store_error)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .map_err(store_error)?;
    let out = op(&mut tx)?;
    tx.commit().map_err(store_error)?;
    Ok(out)
}

fn version(tx: &mut Transaction<'_>) -> Result<i32, StoreError> {
    tx.query_one("SELECT coalesce(max(version), 0) FROM idem_schema", &[])
        .map(|row| row.get(0))
        .map_err(store_error)
}
