//! The schema, the connection settings, and the migrations that bring any
//! earlier database up to this release.
//!
//! `PRAGMA user_version` records the last migration applied. At start-up each
//! later migration runs in its own `BEGIN IMMEDIATE` transaction that first
//! re-reads the version (another process may have just applied it), so each
//! runs once, in order, whole or not at all, and is logged once. A database
//! made by the chapter's exact DDL, or by a release before migrations, has
//! version 0 and upgrades in place with its rows intact. A database whose
//! version is newer than this release knows is refused: its schema may mean
//! something this code would get wrong. A database this process cannot write
//! is refused too (`refuse_read_only`, `probe_a_write`).
//!
//! This module never reads or writes rows.

use super::super::error::StoreError;
use super::super::options::StoreOptions;
use rusqlite::config::DbConfig;
use rusqlite::Connection;
use std::path::Path;

/// One step of the schema's history.
struct Migration {
    /// The `user_version` this step leaves behind: 1, 2, 3, ... in order.
    version: i64,
    /// What it does, for the log line.
    name: &'static str,
    apply: fn(&Connection) -> rusqlite::Result<()>,
}

/// Every migration, oldest first. Append only: a released step never changes.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "calls, effects and audit tables",
        apply: |conn| conn.execute_batch(TABLES),
    },
    Migration {
        version: 2,
        name: "index audit rows by call",
        // `/v1/tool-calls/{id}` timelines and `audit WHERE call_id = ?` read
        // one call's rows; without it they scan the table.
        apply: |conn| {
            conn.execute_batch("CREATE INDEX IF NOT EXISTS idx_audit_call ON audit(call_id, id)")
        },
    },
    Migration {
        version: 3,
        name: "effects.detail: what the downstream said",
        apply: |conn| add_column(conn, "effects", "detail", "TEXT"),
    },
    Migration {
        version: 4,
        name: "instances: processes and their heartbeats",
        apply: |conn| {
            conn.execute_batch(
                "CREATE TABLE IF NOT EXISTS instances (
                   instance_id  TEXT PRIMARY KEY,
                   pid          INTEGER NOT NULL,
                   host         TEXT NOT NULL,
                   started_at   REAL NOT NULL,
                   heartbeat_at REAL NOT NULL,
                   stopped_at   REAL
                 )",
            )
        },
    },
    Migration {
        version: 5,
        name: "calls.tenant: idempotency keys unique per tenant",
        apply: scope_keys_by_tenant,
    },
    Migration {
        version: 6,
        name: "audit.attempt and effects.call_purged_at: audit over HTTP, key retention",
        apply: |conn| {
            add_column(conn, "audit", "attempt", "INTEGER")?;
            add_column(conn, "effects", "call_purged_at", "REAL")
        },
    },
    Migration {
        version: 7,
        name: "calls.next_attempt_at: when an automatic retry may start",
        // A pending call with a time here is not claimed before it; NULL (a
        // call that never failed retryably) means at once. No index of its
        // own: the scan for due calls walks `idx_calls_status`'s pending
        // entries in creation order and skips those not yet due
        // (`sql::due_calls`), so creates and claims write no extra B-tree.
        apply: |conn| add_column(conn, "calls", "next_attempt_at", "REAL"),
    },
    Migration {
        version: 8,
        name: "business_keys: one live call per business key",
        // Written only for tools with a `business_key` rule; see
        // `business_key` for how the partial unique index decides.
        apply: |conn| conn.execute_batch(super::business_key::BUSINESS_KEYS_TABLE),
    },
    Migration {
        version: 9,
        name: "calls.cancel_requested_at and cancel_reason: cancelling a call",
        // `cancelled` needs no DDL (`status` is free text here, checked by
        // `verify`); a running call's cancel request is kept on its row, so
        // its owner, a failure or recovery can end it `cancelled` (see
        // `cancel`). No index: an owner reads its own calls by primary key.
        apply: |conn| {
            add_column(conn, "calls", "cancel_requested_at", "REAL")?;
            add_column(conn, "calls", "cancel_reason", "TEXT")
        },
    },
    Migration {
        version: 10,
        name: "tool_limits: a tool's rate shared by every process",
        // Written only for tools with a `rate`: their token buckets (`limits`).
        apply: |conn| conn.execute_batch(super::limits::TOOL_LIMITS_TABLE),
    },
    Migration {
        version: 11,
        name:
            "call_counts, effect_counts, idx_calls_status by tenant and tool: counts and lists without reading calls",
        // The counts `/stats`, `/metrics` and the overview read, kept by
        // triggers and filled once from the rows already here; and the
        // status index reshaped so that the list reads each (status, tenant,
        // tool) group of it. See `counts`.
        apply: |conn| {
            conn.execute_batch(super::counts::COUNT_TABLES)?;
            conn.execute_batch(super::counts::BACKFILL_COUNTS)?;
            conn.execute_batch(super::counts::STATUS_INDEX)
        },
    },
    Migration {
        version: 12,
        name: "approvals and notifications: approval gates and their webhook outbox",
        // `awaiting_approval` and `denied` need no DDL (`status` is free
        // text here, checked by `verify`). Written only for gated calls;
        // see `approval`.
        apply: |conn| conn.execute_batch(super::approval::APPROVAL_TABLES),
    },
    Migration {
        version: 13,
        name: "calls.progress_json: a running call's last progress, for every process",
        // Written with the lease's extension (`extend_leases`), so it costs
        // no write of its own; read with the call. No index.
        apply: |conn| add_column(conn, "calls", "progress_json", "TEXT"),
    },
    Migration {
        version: 14,
        name: "the count tables kept by the writer: migration 11's triggers dropped",
        // The counts stay exact: every statement that changes what they
        // count notes it (`count_book`), and the writer folds a batch's
        // notes in before its COMMIT. The triggers cost a new key a quarter
        // of the writer's work (docs/performance.md).
        apply: |conn| conn.execute_batch(super::counts::DROP_COUNT_TRIGGERS),
    },
    Migration {
        version: 15,
        name: "calls.error_code, idx_calls_error, error_counts: the list by error code, failures by code",
        // A virtual column computed from `error_json` (nothing more written
        // per call), a partial index holding only the calls with an error,
        // and the running totals of failures by code, kept by triggers that
        // fire only when a call fails. See `list` and `counts`.
        apply: |conn| {
            if !has_column(conn, "calls", "error_code")? {
                conn.execute_batch(super::list::ERROR_COLUMN)?;
            }
            conn.execute_batch(super::list::ERROR_INDEX)?;
            conn.execute_batch(super::counts::ERROR_COUNTS)
        },
    },
    Migration {
        version: 16,
        name: "rate_readings: the overview's history, kept across restarts",
        apply: |conn| conn.execute_batch(super::readings::READINGS_TABLE),
    },
    Migration {
        version: 17,
        name: "paused_tools: a paused tool's calls are kept but not claimed",
        apply: |conn| conn.execute_batch(super::paused::PAUSED_TOOLS_TABLE),
    },
    Migration {
        version: 18,
        name: "bulk_jobs: cancel or re-run every call a filter matches, in the background",
        apply: |conn| conn.execute_batch(super::bulk_jobs::BULK_JOBS_TABLE),
    },
];

/// The schema version this release writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS[MIGRATIONS.len() - 1].version;

/// Migration 1: the seed's schema (section 12.3). Columns may be added, never
/// removed.
///
/// Three changes from the seed. Two cut the B-trees every call writes (each
/// page a batch dirties is written to the WAL and synced at commit):
/// - `idx_calls_client_seq` is partial: calls without a `client_id` (the common
///   case) have nothing to find there, and a lookup by `client_id = ?` still
///   uses it.
/// - `audit.id` is a plain `INTEGER PRIMARY KEY`: `AUTOINCREMENT` would also
///   update `sqlite_sequence` on every insert, and only matters when the
///   newest rows are deleted: key retention deletes a call's audit rows only
///   with the call, long after newer rows exist, so ids still grow with time.
///
/// And `idx_calls_status` also holds `attempt`, so `/stats` counted calls by
/// status and by attempt in one pass over that index instead of scanning the
/// table (at a million calls, 0.2 s instead of 0.8 s), until migration 11 gave
/// it the count tables. It costs no extra
/// write: `attempt` changes only on a claim, which rewrites the entry anyway.
///
/// On a database created with the seed's exact schema, or by a release before
/// migrations existed, every statement here finds its object already there.
pub(super) const TABLES: &str = "
CREATE TABLE IF NOT EXISTS calls (
  call_id      TEXT PRIMARY KEY,
  idem_key     TEXT NOT NULL UNIQUE,
  fingerprint  TEXT NOT NULL,
  client_id    TEXT,
  seq          INTEGER,
  tool         TEXT NOT NULL,
  args_json    TEXT NOT NULL,
  status       TEXT NOT NULL,
  result_json  TEXT,
  error_json   TEXT,
  attempt      INTEGER NOT NULL DEFAULT 0,
  lease_until  REAL,
  owner        TEXT,
  effect_id    TEXT,
  created_at   REAL NOT NULL,
  updated_at   REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_calls_status ON calls(status, lease_until, attempt);
CREATE INDEX IF NOT EXISTS idx_calls_client_seq ON calls(client_id, seq) WHERE client_id IS NOT NULL;

CREATE TABLE IF NOT EXISTS effects (
  effect_id   TEXT PRIMARY KEY,
  call_id     TEXT NOT NULL UNIQUE,
  tool        TEXT NOT NULL,
  amount      INTEGER,
  created_at  REAL NOT NULL
);

CREATE TABLE IF NOT EXISTS audit (
  id       INTEGER PRIMARY KEY,
  ts       REAL NOT NULL,
  call_id  TEXT,
  event    TEXT NOT NULL,
  detail   TEXT
);
";

/// Migration 5. `idem_key` was declared `UNIQUE` on its column, and SQLite
/// cannot drop a column constraint, so `calls` is rebuilt (SQLite's documented
/// twelve-step procedure, inside the migration's own transaction): a new table
/// with `tenant` and `UNIQUE (tenant, idem_key)`, every row copied with its
/// `rowid` (retention scans calls in `rowid` order, which is creation order),
/// the old table dropped, the new one renamed, and its two indexes made again.
/// Existing calls belong to the anonymous tenant, which is the tenant every
/// request was before tenants existed. `tenant` defaults to it, so a writer
/// that does not name a tenant (the bench's bulk loader) still writes valid
/// rows.
fn scope_keys_by_tenant(conn: &Connection) -> rusqlite::Result<()> {
    if has_column(conn, "calls", "tenant")? {
        return Ok(());
    }
    conn.execute_batch(&format!(
        "CREATE TABLE calls_by_tenant (
           call_id      TEXT PRIMARY KEY,
           tenant       TEXT NOT NULL DEFAULT '{anonymous}',
           idem_key     TEXT NOT NULL,
           fingerprint  TEXT NOT NULL,
           client_id    TEXT,
           seq          INTEGER,
           tool         TEXT NOT NULL,
           args_json    TEXT NOT NULL,
           status       TEXT NOT NULL,
           result_json  TEXT,
           error_json   TEXT,
           attempt      INTEGER NOT NULL DEFAULT 0,
           lease_until  REAL,
           owner        TEXT,
           effect_id    TEXT,
           created_at   REAL NOT NULL,
           updated_at   REAL NOT NULL,
           UNIQUE (tenant, idem_key)
         );
         INSERT INTO calls_by_tenant
                (rowid, call_id, idem_key, fingerprint, client_id, seq, tool, args_json, status,
                 result_json, error_json, attempt, lease_until, owner, effect_id, created_at,
                 updated_at)
         SELECT rowid, call_id, idem_key, fingerprint, client_id, seq, tool, args_json, status,
                result_json, error_json, attempt, lease_until, owner, effect_id, created_at,
                updated_at
           FROM calls;
         DROP TABLE calls;
         ALTER TABLE calls_by_tenant RENAME TO calls;
         CREATE INDEX idx_calls_status ON calls(status, lease_until, attempt);
         CREATE INDEX idx_calls_client_seq ON calls(client_id, seq) WHERE client_id IS NOT NULL;",
        anonymous = crate::auth::ANONYMOUS
    ))
}

pub(super) fn open_connection(
    path: &Path,
    options: &StoreOptions,
) -> Result<Connection, StoreError> {
    let conn = Connection::open(path)?;
    configure(&conn, options)?;
    Ok(conn)
}

/// The settings every connection gets, the writer's and the readers'.
fn configure(conn: &Connection, options: &StoreOptions) -> Result<(), StoreError> {
    conn.busy_timeout(options.busy_timeout)?;
    // Every statement this module runs stays prepared.
    conn.set_prepared_statement_cache_capacity(64);
    // FULL unless said otherwise: a commit returns only after the WAL is synced. The
    // writer alone may switch to NORMAL, while its syncer covers every answer and
    // read (`sync_mode`).
    conn.execute_batch("PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;")?;
    // A small page cache (2 MiB, SQLite's default, said out loud). A B-tree
    // split briefly parks a page under the lock-byte page's number, and the
    // end of that transaction then scans the whole cache to drop it; with
    // 1 KiB pages nearly every batch splits a page, so a 16 MiB cache cost the
    // writer about a tenth of its CPU. Readers empty their cache whenever the
    // database changed since their last read, so a bigger one buys them nothing.
    conn.execute_batch("PRAGMA cache_size=-2048")?;
    Ok(())
}

/// From now on SQLite must not checkpoint when `conn` closes. After a failed
/// sync the WAL may hold frames that never reached the disk (Linux may drop
/// pages whose write-back failed, and reports the error to each descriptor
/// only once); a checkpoint would copy them into the database file, where
/// the next start's recovery, which keeps only the WAL's whole frames, could
/// no longer take them back.
pub(super) fn no_checkpoint_on_close(conn: &Connection) {
    if let Err(e) = conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true) {
        crate::log::error("could not turn off the checkpoint on close")
            .event("checkpoint_on_close_not_disabled")
            .cause(&e)
            .emit();
    }
}

/// Bring the database up to `SCHEMA_VERSION`; returns the names of the
/// migrations this call applied (each is also logged once, here).
pub(super) fn migrate(conn: &Connection) -> Result<Vec<&'static str>, StoreError> {
    let found = user_version(conn)?;
    if found > SCHEMA_VERSION {
        return Err(StoreError::internal(format!(
            "the database has schema version {found}, newer than this release's \
             {SCHEMA_VERSION}; run the release that wrote it, or a newer one"
        )));
    }
    let mut applied = Vec::new();
    for migration in MIGRATIONS.iter().filter(|m| m.version > found) {
        if apply_once(conn, migration)? {
            crate::log::info("schema migration applied")
                .event("migration")
                .number("version", migration.version as u64)
                .label("migration", migration.name)
                .emit();
            applied.push(migration.name);
        }
    }
    Ok(applied)
}

/// Apply one migration in its own transaction unless the database already has
/// it; returns whether it ran.
fn apply_once(conn: &Connection, migration: &Migration) -> rusqlite::Result<bool> {
    let tx = rusqlite::Transaction::new_unchecked(conn, rusqlite::TransactionBehavior::Immediate)?;
    if user_version(&tx)? >= migration.version {
        return Ok(false);
    }
    (migration.apply)(&tx)?;
    tx.pragma_update(None, "user_version", migration.version)?;
    tx.commit()?;
    Ok(true)
}

fn user_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.pragma_query_value(None, "user_version", |r| r.get(0))
}

/// `ALTER TABLE ... ADD COLUMN`, skipped if the column exists, so a migration
/// stays idempotent even on a file someone altered by hand.
fn add_column(conn: &Connection, table: &str, column: &str, decl: &str) -> rusqlite::Result<()> {
    if !has_column(conn, table, column)? {
        conn.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {decl}"))?;
    }
    Ok(())
}

fn has_column(conn: &Connection, table: &str, column: &str) -> rusqlite::Result<bool> {
    conn.prepare("SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2")?
        .exists([table, column])
}

/// The writer's connection: the file-level settings (page size, WAL) that only
/// take effect on a new file or must be set once, then the migrations.
pub(super) fn open_writer(path: &Path, options: &StoreOptions) -> Result<Connection, StoreError> {
    create_private(path);
    let conn = Connection::open(path)?;
    // Before anything reads the file: on a read-only mount, the first read of
    // a WAL database fails as "unable to open database file" (no -shm).
    refuse_read_only(&conn)?;
    // Before the first write (WAL, page size): another program's file stays as it was.
    super::ownership::refuse_foreign(&conn)?;
    // A copy `backup` made is refused as it is, unless its snapshot is named.
    let accepted =
        super::copy_mark::refuse_unaccepted(&conn, options.accept_restored_copy.as_deref())?;
    configure(&conn, options)?;
    // Small pages: a commit writes every page it dirtied, and a batch dirties
    // many pages a little (index leaves, appended rows), so 1 KiB pages cut
    // the bytes each fsync must flush. Only takes effect on a new file.
    conn.execute_batch("PRAGMA page_size=1024")?;
    let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::internal(format!(
            "could not switch to WAL (journal_mode={mode})"
        )));
    }
    probe_a_write(&conn)?;
    migrate(&conn)?;
    if let Some(copy) = accepted {
        super::copy_mark::accept(&conn, &copy)?;
    }
    Ok(conn)
}

/// Create the file at `path`, if there is none, readable and writable by its
/// owner only (0600): it holds every call's args and results. SQLite gives
/// the `-wal`, `-shm` and `-journal` files it creates beside a database the
/// database file's mode, so they are 0600 too. A file that exists keeps the
/// mode its owner gave it. A failure here is left for SQLite's own open to
/// report (a missing folder, no permission), with its usual message.
pub(super) fn create_private(path: &Path) {
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path);
}

/// Refuse a database this process cannot write, before anything else: it
/// would otherwise start, look healthy, and answer every new key `503`
/// forever. SQLite opens a file it may not write (permissions, a read-only
/// mount, an immutable file) read-only without complaint; ask it.
fn refuse_read_only(conn: &Connection) -> Result<(), StoreError> {
    if conn.is_readonly(rusqlite::DatabaseName::Main)? {
        return Err(cannot_write("SQLite could only open it read-only"));
    }
    Ok(())
}

/// For what `refuse_read_only` cannot see: take the write lock and make one
/// harmless change (`user_version` set to itself), then roll it back, so
/// nothing reaches the file. Runs after the page size is fixed: the first
/// write to an empty file settles it. A disk that is merely full passes; that
/// is transient, and answered `503` until space is freed.
fn probe_a_write(conn: &Connection) -> Result<(), StoreError> {
    let probe =
        rusqlite::Transaction::new_unchecked(conn, rusqlite::TransactionBehavior::Immediate)
            .and_then(|tx| {
                tx.pragma_update(None, "user_version", user_version(&tx)?)?;
                tx.rollback()
            });
    match probe {
        Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::ReadOnly) => {
            Err(cannot_write(&e.to_string()))
        }
        other => other.map_err(StoreError::from),
    }
}

fn cannot_write(why: &str) -> StoreError {
    StoreError::unavailable(format!(
        "it cannot be written ({why}); the service needs write access to the file \
         and to its folder, where SQLite keeps the -wal and -shm files"
    ))
}
