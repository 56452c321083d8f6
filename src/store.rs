//! `CallStore`: the only module that speaks SQL. It owns the `calls` state
//! machine, the lease and fencing rules, the unique constraints, recovery, and
//! the one place where commits are grouped.
//!
//! State machine: `pending → running → succeeded | failed`, and `failed` (when
//! its error says `retryable`) `→ pending` on a same-key retry. Every transition
//! is a conditional `UPDATE ... WHERE status = ...`; its row count decides who
//! wins, never an earlier `SELECT`.
//!
//! **Group commit.** All writes go through one writer thread that owns the only
//! write connection. It takes every operation waiting in its channel, runs them in
//! one `BEGIN IMMEDIATE` transaction — each inside its own `SAVEPOINT`, so a
//! failing operation rolls back only itself — commits once (`synchronous=FULL`:
//! the commit is on disk), and only then answers each caller. A caller therefore
//! never sees an outcome that is not durable, and a busy server pays one fsync
//! per batch instead of one per state change. Semantics are unchanged: operations
//! in a batch run one after another on one connection, so each sees the previous
//! one's writes, and several processes on one file stay correct because each
//! batch is still one SQLite write transaction.
//!
//! **What the writer does with each SQLite error.** The writer never assumes a
//! transaction is still open after an error; it asks (`is_autocommit`).
//! - `BEGIN IMMEDIATE` fails (`SQLITE_BUSY` past the busy timeout: another
//!   process holds the write lock; `SQLITE_READONLY`, `SQLITE_CANTOPEN`, I/O):
//!   nothing ran; every operation of the batch is answered with the error
//!   (`503` for these classes).
//! - An operation fails and the transaction is still open (a constraint, a
//!   statement-level `SQLITE_FULL`, a bug, a panic): its savepoint is rolled
//!   back, that caller alone gets the error, and the batch goes on.
//! - An operation fails and SQLite has rolled back the whole transaction
//!   (`SQLITE_FULL` or `SQLITE_IOERR_*` while spilling the page cache into the
//!   WAL, `SQLITE_NOMEM`, `SQLITE_BUSY` on a lock upgrade): the writes of every
//!   earlier operation of the batch are gone too, so every operation of the
//!   batch is answered `Unavailable` (`503` + `Retry-After`), and no later one
//!   runs — a `SAVEPOINT` outside a transaction would quietly open a new one
//!   and commit it on `RELEASE`.
//! - A savepoint command itself fails: treated as the case above.
//! - `COMMIT` fails (`SQLITE_FULL`, `SQLITE_IOERR_*`, a deferred constraint):
//!   the transaction is rolled back if SQLite left it open, and every
//!   operation of the batch is answered `Unavailable`. The error means "not
//!   known to be durable": a failed sync may still leave the commit in the WAL,
//!   which is why the answer is "retry with the same key", which is always safe.
//! - `SQLITE_CORRUPT`, `SQLITE_NOTADB` and other errors are `Internal` (`500`).
//!
//! Reads (`get`, `find_by_key`, `stats`, ...) use a small pool of separate
//! connections; WAL lets them run beside the writer.
//!
//! This module never runs a tool, and never holds a transaction open across
//! anything but SQL.

use rusqlite::{params, Connection, ErrorCode, OptionalExtension, Row};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The seed's schema (section 12.3). Columns may be added, never removed.
///
/// Three changes from the seed. Two cut the B-trees every call writes (each
/// page a batch dirties is written to the WAL and synced at commit):
/// - `idx_calls_client_seq` is partial: calls without a `client_id` (the common
///   case) have nothing to find there, and a lookup by `client_id = ?` still
///   uses it.
/// - `audit.id` is a plain `INTEGER PRIMARY KEY`: `AUTOINCREMENT` would also
///   update `sqlite_sequence` on every insert, and only matters when rows are
///   deleted, which audit rows never are; ids still grow with time.
///
/// And `idx_calls_status` also holds `attempt`, so `/stats` counts calls by
/// status and by attempt in one pass over that index instead of scanning the
/// table (at a million calls, 0.2 s instead of 0.8 s). It costs no extra
/// write: `attempt` changes only on a claim, which rewrites the entry anyway.
///
/// A database created with the seed's exact schema keeps working unchanged.
const SCHEMA: &str = "
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

const CALL_COLUMNS: &str = "call_id, idem_key, fingerprint, client_id, seq, tool, args_json, \
     status, result_json, error_json, attempt, lease_until, owner, effect_id, created_at, updated_at";

/// The most operations one commit carries; bounds how long the first waits.
const MAX_BATCH: usize = 512;

/// Idle read connections kept for reuse.
const MAX_IDLE_READERS: usize = 32;

/// Where a call is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Pending,
    Running,
    Succeeded,
    Failed,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Running => "running",
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
        }
    }

    fn parse(s: &str) -> Status {
        match s {
            "pending" => Status::Pending,
            "running" => Status::Running,
            "succeeded" => Status::Succeeded,
            _ => Status::Failed,
        }
    }

    /// `succeeded` and `failed` are never executed again (a retryable failure is
    /// first reset to `pending` by its client's retry).
    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Succeeded | Status::Failed)
    }
}

/// One row of `calls`.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub call_id: String,
    pub idem_key: String,
    pub fingerprint: String,
    pub client_id: Option<String>,
    pub seq: Option<i64>,
    pub tool: String,
    pub args_json: String,
    pub status: Status,
    pub result: Option<Value>,
    pub error: Option<Value>,
    /// How many times a worker has claimed this call.
    pub attempt: i64,
    /// Wall-clock seconds until which the current `owner` may execute.
    pub lease_until: Option<f64>,
    /// `pid:thread` of the worker holding the lease.
    pub owner: Option<String>,
    /// `eff_` + the call id's 16 hex: the same on every attempt.
    pub effect_id: String,
    pub created_at: f64,
    pub updated_at: f64,
}

impl Call {
    /// A failure whose error says the client may retry it with the same key.
    pub fn is_retryable_failure(&self) -> bool {
        self.status == Status::Failed
            && self
                .error
                .as_ref()
                .and_then(|e| e.get("retryable"))
                .and_then(Value::as_bool)
                .unwrap_or(false)
    }

    /// Whether the call can never change again: `succeeded`, or a failure its
    /// client may not retry.
    pub fn is_settled(&self) -> bool {
        self.status == Status::Succeeded
            || (self.status == Status::Failed && !self.is_retryable_failure())
    }

    /// The row `insert_call` writes, built here so it need not be read back.
    fn pending(call_id: String, new: NewCall, now: f64) -> Call {
        Call {
            effect_id: effect_id_for(&call_id),
            call_id,
            idem_key: new.idem_key,
            fingerprint: new.fingerprint,
            client_id: new.client_id,
            seq: new.seq,
            tool: new.tool,
            args_json: new.args_json,
            status: Status::Pending,
            result: None,
            error: None,
            attempt: 0,
            lease_until: None,
            owner: None,
            created_at: now,
            updated_at: now,
        }
    }

    /// The JSON the API returns.
    pub fn to_json(&self) -> Value {
        json!({
            "call_id": self.call_id,
            "idem_key": self.idem_key,
            "tool": self.tool,
            "args": serde_json::from_str::<Value>(&self.args_json).unwrap_or(Value::Null),
            "client_id": self.client_id,
            "seq": self.seq,
            "status": self.status.as_str(),
            "attempt": self.attempt,
            "result": self.result,
            "error": self.error,
            "effect_id": self.effect_id,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "query_url": format!("/v1/tool-calls/{}", self.call_id),
        })
    }

    fn from_row(row: &Row) -> rusqlite::Result<Call> {
        let json_col = |i: usize| -> rusqlite::Result<Option<Value>> {
            Ok(row
                .get::<_, Option<String>>(i)?
                .and_then(|s| serde_json::from_str(&s).ok()))
        };
        Ok(Call {
            call_id: row.get(0)?,
            idem_key: row.get(1)?,
            fingerprint: row.get(2)?,
            client_id: row.get(3)?,
            seq: row.get(4)?,
            tool: row.get(5)?,
            args_json: row.get(6)?,
            status: Status::parse(&row.get::<_, String>(7)?),
            result: json_col(8)?,
            error: json_col(9)?,
            attempt: row.get(10)?,
            lease_until: row.get(11)?,
            owner: row.get(12)?,
            effect_id: row.get::<_, Option<String>>(13)?.unwrap_or_default(),
            created_at: row.get(14)?,
            updated_at: row.get(15)?,
        })
    }
}

/// A request to create a call, already validated and fingerprinted.
#[derive(Debug, Clone)]
pub struct NewCall {
    pub idem_key: String,
    pub fingerprint: String,
    pub tool: String,
    /// Canonical JSON of the args as sent (chaos hooks included).
    pub args_json: String,
    pub client_id: Option<String>,
    pub seq: Option<i64>,
}

/// What `create_or_get` found or did.
#[derive(Debug, Clone, PartialEq)]
pub enum Created {
    /// A new `pending` call: submit it.
    New(Call),
    /// The key's call, untouched: never execute it again.
    Existing(Call),
    /// A retryable failure reset to `pending`: submit it.
    RetryReset(Call),
    /// The key belongs to a request with another fingerprint.
    Conflict(Call),
}

/// The right to execute one attempt of a call, held until `lease_until`.
#[derive(Debug, Clone, PartialEq)]
pub struct Lease {
    pub call_id: String,
    /// The attempt number this lease fences: completions apply only while the
    /// row still has this attempt and is `running`.
    pub attempt: i64,
    pub tool: String,
    pub args_json: String,
    pub effect_id: String,
    pub lease_until: f64,
}

/// Whether a fenced completion took effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completion {
    Applied,
    /// The lease was lost (another attempt took over, or the call is terminal):
    /// the completion was discarded and audited as `stale_completion`.
    Stale,
}

/// What `/stats` reports.
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    pub calls: i64,
    pub effects: i64,
    pub by_status: Vec<(String, i64)>,
    pub attempts: Vec<(i64, i64)>,
    /// This process's writer since it started.
    pub writer: WriterStats,
}

/// How well this process's writes are grouped, and where the writer's time
/// goes: running operations, or committing them (the fsync). Cumulative since
/// the store opened; the bench reports the difference across a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Transactions committed (or rolled back).
    pub batches: u64,
    /// Operations those transactions carried.
    pub ops: u64,
    /// Microseconds spent running operations inside the transactions.
    pub run_us: u64,
    /// Microseconds spent in `COMMIT`: writing the WAL and syncing it, plus the
    /// checkpoint SQLite runs inside it about every 1,000 WAL pages.
    pub commit_us: u64,
}

impl WriterStats {
    pub fn to_json(self) -> Value {
        json!({"batches": self.batches, "ops": self.ops, "run_us": self.run_us, "commit_us": self.commit_us})
    }

    /// Read back what `to_json` wrote (a missing field counts as 0).
    pub fn from_json(v: &Value) -> WriterStats {
        let field = |name: &str| v[name].as_u64().unwrap_or(0);
        WriterStats {
            batches: field("batches"),
            ops: field("ops"),
            run_us: field("run_us"),
            commit_us: field("commit_us"),
        }
    }

    /// The work done since `earlier`, a snapshot of the same writer.
    pub fn since(self, earlier: WriterStats) -> WriterStats {
        WriterStats {
            batches: self.batches.saturating_sub(earlier.batches),
            ops: self.ops.saturating_sub(earlier.ops),
            run_us: self.run_us.saturating_sub(earlier.run_us),
            commit_us: self.commit_us.saturating_sub(earlier.commit_us),
        }
    }

    /// How many operations each commit carried.
    pub fn ops_per_batch(self) -> f64 {
        self.ops as f64 / self.batches.max(1) as f64
    }

    pub fn run_us_per_op(self) -> f64 {
        self.run_us as f64 / self.ops.max(1) as f64
    }

    pub fn commit_ms_per_batch(self) -> f64 {
        self.commit_us as f64 / 1000.0 / self.batches.max(1) as f64
    }
}

/// The writer's running totals behind `WriterStats`.
#[derive(Default)]
struct WriterCounters {
    batches: AtomicU64,
    ops: AtomicU64,
    run_us: AtomicU64,
    commit_us: AtomicU64,
}

impl WriterCounters {
    fn record(&self, ops: usize, run: Duration, commit: Duration) {
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.ops.fetch_add(ops as u64, Ordering::Relaxed);
        self.run_us
            .fetch_add(run.as_micros() as u64, Ordering::Relaxed);
        self.commit_us
            .fetch_add(commit.as_micros() as u64, Ordering::Relaxed);
    }

    fn snapshot(&self) -> WriterStats {
        WriterStats {
            batches: self.batches.load(Ordering::Relaxed),
            ops: self.ops.load(Ordering::Relaxed),
            run_us: self.run_us.load(Ordering::Relaxed),
            commit_us: self.commit_us.load(Ordering::Relaxed),
        }
    }
}

impl Stats {
    pub fn to_json(&self) -> Value {
        let by_status: Map<String, Value> = self
            .by_status
            .iter()
            .map(|(s, n)| (s.clone(), json!(n)))
            .collect();
        let attempts: Map<String, Value> = self
            .attempts
            .iter()
            .map(|(a, n)| (a.to_string(), json!(n)))
            .collect();
        json!({
            "calls": self.calls,
            "effects": self.effects,
            "by_status": by_status,
            "attempts": attempts,
            "writer": self.writer.to_json(),
        })
    }
}

/// Why the store could not answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// The database is locked past the busy timeout, full, read-only, or failing
    /// I/O: nothing was changed, and the same request may succeed later.
    Unavailable(String),
    /// Anything else; a bug or a corrupt file.
    Internal(String),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Unavailable(m) => write!(f, "database unavailable: {m}"),
            StoreError::Internal(m) => write!(f, "database error: {m}"),
        }
    }
}

impl std::error::Error for StoreError {}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> StoreError {
        let transient = matches!(
            e.sqlite_error_code(),
            Some(
                ErrorCode::DatabaseBusy
                    | ErrorCode::DatabaseLocked
                    | ErrorCode::DiskFull
                    | ErrorCode::ReadOnly
                    | ErrorCode::SystemIoFailure
                    | ErrorCode::CannotOpen
                    | ErrorCode::OutOfMemory
            )
        );
        if transient {
            StoreError::Unavailable(e.to_string())
        } else {
            StoreError::Internal(e.to_string())
        }
    }
}

/// Connection settings shared by the writer and the readers.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    pub busy_timeout: Duration,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            busy_timeout: Duration::from_secs(5),
        }
    }
}

/// One queued write: run it inside the batch's transaction, or abandon it when
/// the transaction could not even begin (or SQLite ended it before its turn).
trait WriteJob: Send {
    /// Run in a savepoint; returns what to tell the caller once the commit's
    /// fate is known, and whether the batch's transaction survived.
    fn run(self: Box<Self>, conn: &Connection) -> Step;
    fn abandon(self: Box<Self>, err: &StoreError);
}

type Reply = Box<dyn FnOnce(Result<(), &StoreError>) + Send>;

/// What running one job left behind.
enum Step {
    /// The transaction is still open; the job's outcome waits for `COMMIT`.
    Kept(Reply),
    /// The transaction is gone (SQLite rolled it back) or its savepoint could
    /// not be managed: every job of the batch is answered with this error.
    Broken(Reply, StoreError),
}

/// What to do with a write's outcome once its commit is known.
pub type Then<T> = Box<dyn FnOnce(Result<T, StoreError>) + Send>;

/// A write operation and what to do with its outcome.
struct Job<T, F> {
    op: F,
    then: Then<T>,
}

impl<T, F> WriteJob for Job<T, F>
where
    T: Send + 'static,
    F: FnOnce(&Connection) -> rusqlite::Result<T> + Send,
{
    fn run(self: Box<Self>, conn: &Connection) -> Step {
        let then = self.then;
        let reply_with = |outcome: Result<T, StoreError>| -> Reply {
            Box::new(move |commit| {
                then(match commit {
                    Ok(()) => outcome,
                    Err(e) => Err(e.clone()),
                })
            })
        };
        match in_savepoint(conn, self.op) {
            Ok(outcome) => Step::Kept(reply_with(outcome)),
            Err(BatchLost(err)) => Step::Broken(reply_with(Err(err.clone())), err),
        }
    }

    fn abandon(self: Box<Self>, err: &StoreError) {
        (self.then)(Err(err.clone()))
    }
}

/// The SQLite-backed call store. Cheap to share behind an `Arc`.
pub struct CallStore {
    path: PathBuf,
    options: StoreOptions,
    /// The writer thread's queue; every write goes through it.
    writer: Mutex<mpsc::Sender<Box<dyn WriteJob>>>,
    counters: Arc<WriterCounters>,
    readers: Mutex<Vec<Connection>>,
    /// Whether `idx_calls_status` holds `attempt` (not in databases made by
    /// the seed's DDL or an earlier version), which decides how `stats` counts.
    status_index_has_attempt: bool,
}

impl CallStore {
    /// Open (creating if absent) the database and start its writer thread.
    pub fn open(path: &Path, options: StoreOptions) -> Result<Arc<CallStore>, StoreError> {
        let conn = open_connection(path, &options)?;
        // WAL is a property of the file; set it once, from the writer.
        // Small pages: a commit writes every page it dirtied, and a batch dirties
        // many pages a little (index leaves, appended rows), so 1 KiB pages cut
        // the bytes each fsync must flush. Only takes effect on a new file.
        conn.execute_batch("PRAGMA page_size=1024")?;
        let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Internal(format!(
                "could not switch to WAL (journal_mode={mode})"
            )));
        }
        conn.execute_batch(SCHEMA)?;
        let status_index_has_attempt = conn
            .prepare("SELECT 1 FROM pragma_index_info('idx_calls_status') WHERE name = 'attempt'")?
            .exists([])?;
        let (tx, rx) = mpsc::channel::<Box<dyn WriteJob>>();
        let counters = Arc::new(WriterCounters::default());
        let writer_counters = Arc::clone(&counters);
        std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || run_writer(conn, rx, &writer_counters))
            .map_err(|e| StoreError::Internal(format!("spawn writer: {e}")))?;
        Ok(Arc::new(CallStore {
            path: path.to_path_buf(),
            options,
            writer: Mutex::new(tx),
            counters,
            readers: Mutex::new(Vec::new()),
            status_index_has_attempt,
        }))
    }

    /// Create the key's call, or return the one it already has. Runs in the
    /// writer's `BEGIN IMMEDIATE` transaction, so the lookup and the insert cannot
    /// interleave with another writer; `calls.idem_key UNIQUE` backs it up.
    pub fn create_or_get(&self, new: NewCall) -> Result<Created, StoreError> {
        self.write(create_or_get_op(new))
    }

    /// Take the lease on a call for one attempt. Only one claimer can win: the
    /// conditional `UPDATE` matches a `pending` row, or a `running` row whose
    /// lease has expired, and its row count decides.
    pub fn claim(
        &self,
        call_id: &str,
        owner: &str,
        lease: Duration,
    ) -> Result<Option<Lease>, StoreError> {
        let mut leases = self.claim_many(&[call_id.to_string()], owner, lease)?;
        Ok(leases.pop().flatten())
    }

    /// `claim` for several calls as one operation in the writer's queue. Each
    /// call is still won or lost by its own conditional `UPDATE`; the answers
    /// come in the order of `call_ids`.
    pub fn claim_many(
        &self,
        call_ids: &[String],
        owner: &str,
        lease: Duration,
    ) -> Result<Vec<Option<Lease>>, StoreError> {
        let call_ids = call_ids.to_vec();
        let owner = owner.to_string();
        self.write(move |conn| {
            let now = now();
            let lease_until = now + lease.as_secs_f64();
            call_ids
                .iter()
                .map(|call_id| claim_one(conn, call_id, &owner, now, lease_until))
                .collect()
        })
    }

    /// Record success, fenced by the lease: the effect row and the `succeeded`
    /// update commit together, and only if this lease's attempt still owns the
    /// call. `effects.call_id UNIQUE` is the last gate: however many attempts
    /// succeed, one call has at most one effect.
    pub fn succeed(
        &self,
        lease: &Lease,
        result: &Value,
        effect_amount: Option<Option<i64>>,
    ) -> Result<Completion, StoreError> {
        self.write(succeed_op(lease.clone(), result.to_string(), effect_amount))
    }

    /// `succeed` without waiting: a worker hands its completion over and takes
    /// its next call while the commit is grouped with others.
    pub fn succeed_then(
        &self,
        lease: &Lease,
        result: &Value,
        effect_amount: Option<Option<i64>>,
        then: Then<Completion>,
    ) {
        self.write_then(
            succeed_op(lease.clone(), result.to_string(), effect_amount),
            then,
        )
    }

    /// Record failure, fenced like `succeed`.
    pub fn fail(&self, lease: &Lease, error: &Value) -> Result<Completion, StoreError> {
        self.write(fail_op(lease.clone(), error.to_string()))
    }

    /// `fail` without waiting.
    pub fn fail_then(&self, lease: &Lease, error: &Value, then: Then<Completion>) {
        self.write_then(fail_op(lease.clone(), error.to_string()), then)
    }

    /// Return `running` calls whose lease has expired to `pending`, and name them.
    /// Live leases are left alone: their owner may still be executing (another
    /// process on the same file), and the effect would then run twice.
    pub fn recover(&self) -> Result<Vec<String>, StoreError> {
        if !self.has_expired_leases()? {
            return Ok(Vec::new());
        }
        self.write(|conn| {
            let now = now();
            let ids: Vec<(String, Option<String>)> = conn
                .prepare_cached(
                    "UPDATE calls
                        SET status = 'pending', lease_until = NULL, owner = NULL, updated_at = ?1
                      WHERE status = 'running' AND (lease_until IS NULL OR lease_until <= ?1)
                  RETURNING call_id, owner",
                )?
                .query_map(params![now], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<_>>()?;
            for (call_id, owner) in &ids {
                let detail = format!("lease expired (owner {})", owner.as_deref().unwrap_or("-"));
                audit(conn, now, call_id, "recover", &detail)?;
            }
            Ok(ids.into_iter().map(|(id, _)| id).collect())
        })
    }

    /// Up to `limit` `pending` calls, oldest first.
    pub fn pending_ids(&self, limit: usize) -> Result<Vec<String>, StoreError> {
        self.read(|conn| {
            conn.prepare_cached(
                // Index order (status, lease_until, rowid) is creation order for
                // pending rows, so no sort is needed.
                "SELECT call_id FROM calls WHERE status = 'pending' ORDER BY lease_until, rowid LIMIT ?1",
            )?
            .query_map(params![limit as i64], |r| r.get(0))?
            .collect()
        })
    }

    pub fn get(&self, call_id: &str) -> Result<Option<Call>, StoreError> {
        self.read(|conn| select_call(conn, call_id))
    }

    /// The key's call as last committed. Used for the fast path of a same-key
    /// retry: `idem_key` and `fingerprint` never change once written, so a
    /// committed row is a safe answer without taking the write lock.
    pub fn find_by_key(&self, idem_key: &str) -> Result<Option<Call>, StoreError> {
        self.read(|conn| select_call_by_key(conn, idem_key))
    }

    pub fn stats(&self) -> Result<Stats, StoreError> {
        self.read(|conn| {
            // One read transaction, so the counts describe one moment even while
            // the writer commits between the queries (each would otherwise see
            // its own snapshot, and the statuses could outnumber the calls).
            let snapshot = conn.unchecked_transaction()?;
            let (calls, by_status, attempts) = if self.status_index_has_attempt {
                count_calls_in_status_index(conn)?
            } else {
                count_calls_in_table(conn)?
            };
            let effects = conn.query_row("SELECT count(*) FROM effects", [], |r| r.get(0))?;
            let stats = Stats {
                calls,
                effects,
                by_status,
                attempts,
                writer: self.counters.snapshot(),
            };
            snapshot.commit()?;
            Ok(stats)
        })
    }

    fn has_expired_leases(&self) -> Result<bool, StoreError> {
        self.read(|conn| {
            conn.prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM calls
                                 WHERE status = 'running' AND (lease_until IS NULL OR lease_until <= ?1))",
            )?
            .query_row(params![now()], |r| r.get(0))
        })
    }

    /// Queue `op` for the writer and wait until its batch has committed.
    fn write<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let (caller, answer) = mpsc::sync_channel::<Result<T, StoreError>>(1);
        self.write_then(
            op,
            Box::new(move |outcome| {
                // The caller may have gone (its thread ended); nothing to tell.
                let _ = caller.send(outcome);
            }),
        );
        answer
            .recv()
            .unwrap_or_else(|_| Err(StoreError::Internal("the writer dropped a reply".into())))
    }

    /// Queue `op` without waiting; `then` runs on the writer thread once the
    /// batch's commit is known, so it must be quick.
    fn write_then<T, F>(&self, op: F, then: Then<T>)
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let job: Box<dyn WriteJob> = Box::new(Job { op, then });
        let queue = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(mpsc::SendError(job)) = queue.send(job) {
            job.abandon(&StoreError::Internal(
                "the writer thread has stopped".into(),
            ));
        }
    }

    /// Run `op` on a pooled read connection.
    fn read<T>(
        &self,
        op: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        let pooled = self.readers.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let conn = match pooled {
            Some(conn) => conn,
            None => open_connection(&self.path, &self.options)?,
        };
        let result = op(&conn).map_err(StoreError::from);
        let mut idle = self.readers.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < MAX_IDLE_READERS {
            idle.push(conn);
        }
        result
    }
}

/// The writer thread: the single place where commits are grouped.
fn run_writer(
    conn: Connection,
    jobs: mpsc::Receiver<Box<dyn WriteJob>>,
    counters: &WriterCounters,
) {
    while let Ok(first) = jobs.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        commit_batch(&conn, batch, counters);
    }
}

/// One transaction for the whole batch; each job in its own savepoint. Replies go
/// out only after `COMMIT` returned, so every answer describes durable state.
/// If SQLite ends the transaction early, or `COMMIT` fails, no job of the batch
/// is told it committed, and no job after that point runs at all.
fn commit_batch(conn: &Connection, batch: Vec<Box<dyn WriteJob>>, counters: &WriterCounters) {
    let started = Instant::now();
    if let Err(e) = begin_batch(conn) {
        batch.into_iter().for_each(|job| job.abandon(&e));
        return;
    }
    let ops = batch.len();
    let mut jobs = batch.into_iter();
    let mut replies: Vec<Reply> = Vec::with_capacity(ops);
    let mut lost = None;
    for job in jobs.by_ref() {
        match job.run(conn) {
            Step::Kept(reply) => replies.push(reply),
            Step::Broken(reply, err) => {
                replies.push(reply);
                lost = Some(err);
                break;
            }
        }
    }
    let committing = Instant::now();
    let commit = match lost {
        Some(err) => Err(err),
        None => conn
            .execute_batch("COMMIT")
            .map_err(|e| BatchLost::from(e).0),
    };
    counters.record(ops, committing - started, committing.elapsed());
    if let Err(e) = &commit {
        eprintln!("store: batch of {ops} not committed, every operation in it answered with an error: {e}");
        roll_back_if_open(conn);
        jobs.for_each(|job| job.abandon(e));
    }
    for reply in replies {
        reply(commit.as_ref().map(|_| ()));
    }
}

/// `BEGIN IMMEDIATE`, after making sure no earlier transaction lingers (a
/// `ROLLBACK` that failed would otherwise make every later batch fail to begin).
fn begin_batch(conn: &Connection) -> Result<(), StoreError> {
    roll_back_if_open(conn);
    conn.execute_batch("BEGIN IMMEDIATE")
        .map_err(StoreError::from)
}

/// Ask SQLite whether the transaction is still open rather than assume it: after
/// `SQLITE_FULL` or an I/O error it may already have rolled everything back.
fn roll_back_if_open(conn: &Connection) {
    if !conn.is_autocommit() {
        if let Err(e) = conn.execute_batch("ROLLBACK") {
            eprintln!("store: ROLLBACK failed: {e}");
        }
    }
}

/// The batch's transaction cannot commit: SQLite rolled it back, a savepoint
/// could not be managed, or `COMMIT` failed. Nothing of the batch is durable,
/// and the same request may succeed later, so callers see `Unavailable`.
struct BatchLost(StoreError);

impl From<rusqlite::Error> for BatchLost {
    fn from(e: rusqlite::Error) -> BatchLost {
        BatchLost(StoreError::Unavailable(format!(
            "the write transaction was rolled back: {e}"
        )))
    }
}

fn create_or_get_op(
    new: NewCall,
) -> impl FnOnce(&Connection) -> rusqlite::Result<Created> + Send + 'static {
    move |conn| {
        let now = now();
        if let Some(existing) = select_call_by_key(conn, &new.idem_key)? {
            return resolve_existing(conn, existing, &new.fingerprint, now);
        }
        let call = insert_call(conn, new, now)?;
        audit(conn, now, &call.call_id, "created", &call.tool)?;
        Ok(Created::New(call))
    }
}

fn claim_one(
    conn: &Connection,
    call_id: &str,
    owner: &str,
    now: f64,
    lease_until: f64,
) -> rusqlite::Result<Option<Lease>> {
    let lease = conn
        .prepare_cached(
            "UPDATE calls
                SET status = 'running', attempt = attempt + 1,
                    lease_until = ?1, owner = ?2, updated_at = ?3
              WHERE call_id = ?4
                AND (status = 'pending' OR (status = 'running' AND lease_until <= ?3))
          RETURNING attempt, tool, args_json, effect_id",
        )?
        .query_row(params![lease_until, owner, now, call_id], |r| {
            Ok(Lease {
                call_id: call_id.to_string(),
                attempt: r.get(0)?,
                tool: r.get(1)?,
                args_json: r.get(2)?,
                effect_id: r.get::<_, Option<String>>(3)?.unwrap_or_default(),
                lease_until,
            })
        })
        .optional()?;
    if let Some(lease) = &lease {
        let detail = format!("{owner} attempt={}", lease.attempt);
        audit(conn, now, call_id, "claimed", &detail)?;
    }
    Ok(lease)
}

fn succeed_op(
    lease: Lease,
    result: String,
    effect_amount: Option<Option<i64>>,
) -> impl FnOnce(&Connection) -> rusqlite::Result<Completion> + Send + 'static {
    move |conn| {
        let now = now();
        if !finish_fenced(conn, now, &lease, Status::Succeeded, Some(&result), None)? {
            return discard_stale(conn, now, &lease, "succeeded");
        }
        if let Some(amount) = effect_amount {
            conn.prepare_cached(
                "INSERT OR IGNORE INTO effects (effect_id, call_id, tool, amount, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![
                lease.effect_id,
                lease.call_id,
                lease.tool,
                amount,
                now
            ])?;
        }
        audit(conn, now, &lease.call_id, "succeeded", &lease.effect_id)?;
        Ok(Completion::Applied)
    }
}

fn fail_op(
    lease: Lease,
    error: String,
) -> impl FnOnce(&Connection) -> rusqlite::Result<Completion> + Send + 'static {
    move |conn| {
        let now = now();
        if !finish_fenced(conn, now, &lease, Status::Failed, None, Some(&error))? {
            return discard_stale(conn, now, &lease, "failed");
        }
        audit(conn, now, &lease.call_id, "failed", &error)?;
        Ok(Completion::Applied)
    }
}

/// The fence. A terminal update applies only while the call is still `running`
/// under the attempt this lease claimed; a worker whose lease was taken over
/// (it paused, its lease expired, recovery re-queued the call) changes nothing.
/// Returns whether the update applied.
fn finish_fenced(
    conn: &Connection,
    now: f64,
    lease: &Lease,
    status: Status,
    result_json: Option<&str>,
    error_json: Option<&str>,
) -> rusqlite::Result<bool> {
    let changed = conn
        .prepare_cached(
            "UPDATE calls
                SET status = ?1, result_json = ?2, error_json = ?3,
                    lease_until = NULL, owner = NULL, updated_at = ?4
              WHERE call_id = ?5 AND status = 'running' AND attempt = ?6",
        )?
        .execute(params![
            status.as_str(),
            result_json,
            error_json,
            now,
            lease.call_id,
            lease.attempt
        ])?;
    Ok(changed == 1)
}

/// Run `op` inside a savepoint: its writes stay if it succeeds, and are undone
/// alone (the rest of the batch unaffected) if it fails or panics. The outer
/// `Err` means the batch's transaction is gone: SQLite rolled it back while
/// `op` ran (`SQLITE_FULL`, an I/O error), so `ROLLBACK TO` has nothing to undo
/// and a later `SAVEPOINT` would silently open a new transaction.
fn in_savepoint<T>(
    conn: &Connection,
    op: impl FnOnce(&Connection) -> rusqlite::Result<T>,
) -> Result<Result<T, StoreError>, BatchLost> {
    if conn.is_autocommit() {
        return Err(BatchLost(StoreError::Unavailable(
            "the write transaction ended before this operation".into(),
        )));
    }
    run_cached(conn, "SAVEPOINT op")?;
    let outcome = catch_unwind(AssertUnwindSafe(|| op(conn)));
    if conn.is_autocommit() {
        return Err(match outcome {
            Ok(Err(e)) => BatchLost::from(e),
            _ => BatchLost(StoreError::Unavailable(
                "the write transaction was rolled back".into(),
            )),
        });
    }
    let outcome = match outcome {
        Ok(Ok(value)) => {
            run_cached(conn, "RELEASE op")?;
            return Ok(Ok(value));
        }
        Ok(Err(e)) => StoreError::from(e),
        Err(_) => StoreError::Internal("a store operation panicked".into()),
    };
    run_cached(conn, "ROLLBACK TO op")?;
    run_cached(conn, "RELEASE op")?;
    Ok(Err(outcome))
}

/// Calls in all, by status, and by attempt.
type CallCounts = (i64, Vec<(String, i64)>, Vec<(i64, i64)>);

/// The query behind `count_calls_in_status_index` (public for the test that
/// checks its plan).
pub const COUNT_CALLS_IN_STATUS_INDEX: &str =
    "SELECT status, attempt, count(*) FROM calls GROUP BY status, lease_until, attempt";

/// One pass over `idx_calls_status`, grouped in the index's own order so no
/// sort is needed: one row per (status, lease_until, attempt), which is a
/// handful of rows plus one per running call, summed here.
fn count_calls_in_status_index(conn: &Connection) -> rusqlite::Result<CallCounts> {
    let (mut calls, mut by_status, mut attempts) = (0, BTreeMap::new(), BTreeMap::new());
    let mut stmt = conn.prepare_cached(COUNT_CALLS_IN_STATUS_INDEX)?;
    let mut rows = stmt.query([])?;
    while let Some(row) = rows.next()? {
        let (status, attempt, n): (String, i64, i64) = (row.get(0)?, row.get(1)?, row.get(2)?);
        calls += n;
        *by_status.entry(status).or_insert(0) += n;
        *attempts.entry(attempt).or_insert(0) += n;
    }
    Ok((
        calls,
        by_status.into_iter().collect(),
        attempts.into_iter().collect(),
    ))
}

/// The same counts where `idx_calls_status` lacks `attempt`: the table is scanned.
fn count_calls_in_table(conn: &Connection) -> rusqlite::Result<CallCounts> {
    let calls = conn.query_row("SELECT count(*) FROM calls", [], |r| r.get(0))?;
    let by_status = conn
        .prepare_cached("SELECT status, count(*) FROM calls GROUP BY status ORDER BY status")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let attempts = conn
        .prepare_cached("SELECT attempt, count(*) FROM calls GROUP BY attempt ORDER BY attempt")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    Ok((calls, by_status, attempts))
}

/// A statement without parameters or rows, prepared once per connection.
fn run_cached(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([])?;
    Ok(())
}

/// Insert a `pending` call under a fresh id and return the row as written;
/// another process may have drawn the same id, so a primary-key collision
/// draws again.
fn insert_call(conn: &Connection, new: NewCall, now: f64) -> rusqlite::Result<Call> {
    let mut call = Call::pending(new_call_id(), new, now);
    let mut attempts_left = 8;
    loop {
        let inserted = conn
            .prepare_cached(
                "INSERT INTO calls (call_id, idem_key, fingerprint, client_id, seq, tool, args_json,
                                    status, attempt, effect_id, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'pending', 0, ?8, ?9, ?9)",
            )?
            .execute(params![
                call.call_id,
                call.idem_key,
                call.fingerprint,
                call.client_id,
                call.seq,
                call.tool,
                call.args_json,
                call.effect_id,
                now
            ]);
        match inserted {
            Ok(_) => return Ok(call),
            Err(e)
                if e.sqlite_error_code() == Some(ErrorCode::ConstraintViolation)
                    && attempts_left > 0 =>
            {
                attempts_left -= 1;
                call.call_id = new_call_id();
                call.effect_id = effect_id_for(&call.call_id);
            }
            Err(e) => return Err(e),
        }
    }
}

fn resolve_existing(
    conn: &Connection,
    existing: Call,
    fingerprint: &str,
    now: f64,
) -> rusqlite::Result<Created> {
    if existing.fingerprint != fingerprint {
        return Ok(Created::Conflict(existing));
    }
    if !existing.is_retryable_failure() {
        return Ok(Created::Existing(existing));
    }
    let changed = conn
        .prepare_cached(
            "UPDATE calls
                SET status = 'pending', result_json = NULL, error_json = NULL,
                    lease_until = NULL, owner = NULL, updated_at = ?1
              WHERE call_id = ?2 AND status = 'failed'",
        )?
        .execute(params![now, existing.call_id])?;
    if changed == 0 {
        return Ok(Created::Existing(existing));
    }
    let detail = format!("after attempt {}", existing.attempt);
    audit(conn, now, &existing.call_id, "retry_reset", &detail)?;
    let call = select_call(conn, &existing.call_id)?.ok_or(rusqlite::Error::QueryReturnedNoRows)?;
    Ok(Created::RetryReset(call))
}

fn discard_stale(
    conn: &Connection,
    now: f64,
    lease: &Lease,
    outcome: &str,
) -> rusqlite::Result<Completion> {
    let detail = format!("attempt {} would have {outcome}; discarded", lease.attempt);
    audit(conn, now, &lease.call_id, "stale_completion", &detail)?;
    Ok(Completion::Stale)
}

fn audit(
    conn: &Connection,
    now: f64,
    call_id: &str,
    event: &str,
    detail: &str,
) -> rusqlite::Result<()> {
    conn.prepare_cached("INSERT INTO audit (ts, call_id, event, detail) VALUES (?1, ?2, ?3, ?4)")?
        .execute(params![now, call_id, event, detail])?;
    Ok(())
}

fn select_call(conn: &Connection, call_id: &str) -> rusqlite::Result<Option<Call>> {
    conn.prepare_cached(&format!(
        "SELECT {CALL_COLUMNS} FROM calls WHERE call_id = ?1"
    ))?
    .query_row(params![call_id], Call::from_row)
    .optional()
}

fn select_call_by_key(conn: &Connection, idem_key: &str) -> rusqlite::Result<Option<Call>> {
    conn.prepare_cached(&format!(
        "SELECT {CALL_COLUMNS} FROM calls WHERE idem_key = ?1"
    ))?
    .query_row(params![idem_key], Call::from_row)
    .optional()
}

fn open_connection(path: &Path, options: &StoreOptions) -> Result<Connection, StoreError> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(options.busy_timeout)?;
    // Every statement this module runs stays prepared.
    conn.set_prepared_statement_cache_capacity(64);
    // FULL: a commit returns only after the WAL is synced, so "accepted" means on disk.
    conn.execute_batch("PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;")?;
    // A small page cache (2 MiB, SQLite's default, said out loud). A B-tree
    // split briefly parks a page under the lock-byte page's number, and the
    // end of that transaction then scans the whole cache to drop it; with
    // 1 KiB pages nearly every batch splits a page, so a 16 MiB cache cost the
    // writer about a tenth of its CPU. Readers empty their cache whenever the
    // database changed since their last read, so a bigger one buys them nothing.
    conn.execute_batch("PRAGMA cache_size=-2048")?;
    Ok(conn)
}

/// Wall-clock seconds: leases are compared across processes and restarts.
pub fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// `eff_` + the call id's 16 hex: derived from the call alone, so every attempt
/// of a call hands the same downstream idempotency key to its tool. Like the
/// call id it grows with time, so `effects`' primary-key index is written at
/// its edge rather than at a random page per effect.
pub fn effect_id_for(call_id: &str) -> String {
    format!("eff_{}", call_id.trim_start_matches("c_"))
}

/// `c_` + 16 hex: 11 hex of milliseconds since the epoch, then 5 hex of a
/// per-process counter that starts at an offset hashed from the process id and
/// start time. Time first keeps new ids increasing, so the primary-key index
/// grows at its right edge instead of dirtying a random page per insert — and
/// every dirty page is written at commit. Ids are unique within a process; two
/// processes can still collide, and `insert_call` then draws another.
fn new_call_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    static OFFSET: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let offset = *OFFSET.get_or_init(|| {
        let seed = format!("{}:{:?}", std::process::id(), SystemTime::now());
        u64::from_str_radix(&crate::fingerprint::hex_sha256(seed.as_bytes())[..5], 16).unwrap_or(0)
    });
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let low = (offset + COUNTER.fetch_add(1, Ordering::Relaxed)) & 0xF_FFFF;
    format!("c_{:011x}{low:05x}", millis & 0xFFF_FFFF_FFFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct TempDb {
        dir: PathBuf,
    }

    impl TempDb {
        fn new(name: &str) -> TempDb {
            let dir = std::env::temp_dir().join(format!(
                "idem-store-{name}-{}-{}",
                std::process::id(),
                now()
            ));
            std::fs::create_dir_all(&dir).unwrap();
            TempDb { dir }
        }
        fn path(&self) -> PathBuf {
            self.dir.join("t.db")
        }
    }

    impl Drop for TempDb {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn new_call(key: &str, fp: &str) -> NewCall {
        NewCall {
            idem_key: key.into(),
            fingerprint: fp.into(),
            tool: "charge".into(),
            args_json: r#"{"amount":1}"#.into(),
            client_id: None,
            seq: None,
        }
    }

    fn created_call(c: Created) -> Call {
        match c {
            Created::New(c)
            | Created::Existing(c)
            | Created::RetryReset(c)
            | Created::Conflict(c) => c,
        }
    }

    fn effects(store: &CallStore) -> i64 {
        store.stats().unwrap().effects
    }

    fn audit_events(db: &Path, call_id: &str) -> Vec<String> {
        let conn = Connection::open(db).unwrap();
        let mut stmt = conn
            .prepare("SELECT event FROM audit WHERE call_id = ?1 ORDER BY id")
            .unwrap();
        stmt.query_map([call_id], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }

    /// A new database's status index covers `attempt`, so `stats` counts from
    /// it; one made by the seed's DDL does not, and `stats` scans the table.
    #[test]
    fn stats_counts_from_the_status_index_only_where_it_has_attempt() -> Result<(), StoreError> {
        let new = TempDb::new("status-index-new");
        assert!(CallStore::open(&new.path(), StoreOptions::default())?.status_index_has_attempt);
        let seed = TempDb::new("status-index-seed");
        Connection::open(seed.path())?.execute_batch(
            "CREATE TABLE calls (call_id TEXT PRIMARY KEY, idem_key TEXT NOT NULL UNIQUE,
               fingerprint TEXT NOT NULL, client_id TEXT, seq INTEGER, tool TEXT NOT NULL,
               args_json TEXT NOT NULL, status TEXT NOT NULL, result_json TEXT, error_json TEXT,
               attempt INTEGER NOT NULL DEFAULT 0, lease_until REAL, owner TEXT, effect_id TEXT,
               created_at REAL NOT NULL, updated_at REAL NOT NULL);
             CREATE INDEX idx_calls_status ON calls(status, lease_until);",
        )?;
        assert!(!CallStore::open(&seed.path(), StoreOptions::default())?.status_index_has_attempt);
        Ok(())
    }

    #[test]
    fn same_key_gives_one_call_and_other_fingerprint_conflicts() -> Result<(), StoreError> {
        let db = TempDb::new("same-key");
        let store = CallStore::open(&db.path(), StoreOptions::default())?;
        let first = store.create_or_get(new_call("k", "fp1"))?;
        assert!(matches!(first, Created::New(_)));
        let again = store.create_or_get(new_call("k", "fp1"))?;
        assert!(matches!(again, Created::Existing(_)));
        assert_eq!(
            created_call(first.clone()).call_id,
            created_call(again).call_id
        );
        assert!(matches!(
            store.create_or_get(new_call("k", "fp2"))?,
            Created::Conflict(_)
        ));
        let call = created_call(first);
        assert!(call.call_id.starts_with("c_") && call.call_id.len() == 18);
        assert_eq!(call.effect_id, effect_id_for(&call.call_id));
        Ok(())
    }

    /// The writer's counters survive the trip through `/stats` JSON, and the
    /// difference of two snapshots is the work done between them.
    #[test]
    fn writer_stats_round_trip_and_difference() {
        let earlier = WriterStats {
            batches: 2,
            ops: 5,
            run_us: 100,
            commit_us: 900,
        };
        let later = WriterStats {
            batches: 6,
            ops: 25,
            run_us: 700,
            commit_us: 4_900,
        };
        assert_eq!(WriterStats::from_json(&later.to_json()), later);
        let run = later.since(earlier);
        assert_eq!((run.batches, run.ops), (4, 20));
        assert_eq!(run.ops_per_batch(), 5.0);
        assert_eq!(run.run_us_per_op(), 30.0);
        assert_eq!(run.commit_ms_per_batch(), 1.0);
    }

    /// Several claims in one operation are decided one by one: a call under a
    /// live lease is refused while the others are taken, answers in order.
    #[test]
    fn claim_many_decides_each_call_on_its_own() -> Result<(), StoreError> {
        let db = TempDb::new("claim-many");
        let store = CallStore::open(&db.path(), StoreOptions::default())?;
        let ids: Vec<String> = ["a", "b", "c"]
            .iter()
            .map(|k| Ok(created_call(store.create_or_get(new_call(k, "fp"))?).call_id))
            .collect::<Result<_, StoreError>>()?;
        let held = store.claim(&ids[1], "1:other", Duration::from_secs(30))?;
        assert!(held.is_some());
        let leases = store.claim_many(&ids, "1:w", Duration::from_secs(30))?;
        let won: Vec<Option<&str>> = leases
            .iter()
            .map(|l| l.as_ref().map(|l| l.call_id.as_str()))
            .collect();
        assert_eq!(won, [Some(ids[0].as_str()), None, Some(ids[2].as_str())]);
        assert!(leases.iter().flatten().all(|l| l.attempt == 1));
        assert_eq!(audit_events(&db.path(), &ids[0]), ["created", "claimed"]);
        assert_eq!(audit_events(&db.path(), &ids[1]), ["created", "claimed"]);
        Ok(())
    }

    #[test]
    fn only_one_claim_wins_and_a_stale_completion_is_discarded() -> Result<(), StoreError> {
        let db = TempDb::new("fence");
        let store = CallStore::open(&db.path(), StoreOptions::default())?;
        let call = created_call(store.create_or_get(new_call("k", "fp"))?);
        // A zero-length lease expires at once, as after a long pause.
        let a = store
            .claim(&call.call_id, "1:a", Duration::ZERO)?
            .expect("first claim");
        assert_eq!(a.attempt, 1);
        let b = store
            .claim(&call.call_id, "1:b", Duration::from_secs(30))?
            .expect("an expired lease can be taken over");
        assert_eq!(b.attempt, 2);
        assert_eq!(
            store.claim(&call.call_id, "1:c", Duration::from_secs(30))?,
            None
        );

        assert_eq!(
            store.succeed(&b, &json!({"by": "b"}), Some(Some(1)))?,
            Completion::Applied
        );
        assert_eq!(
            store.succeed(&a, &json!({"by": "a"}), Some(Some(1)))?,
            Completion::Stale
        );
        assert_eq!(
            store.fail(&a, &json!({"retryable": true}))?,
            Completion::Stale
        );
        let after = store.get(&call.call_id)?.unwrap();
        assert_eq!(after.status, Status::Succeeded);
        assert_eq!(after.result, Some(json!({"by": "b"})));
        assert_eq!(effects(&store), 1);
        assert_eq!(
            audit_events(&db.path(), &call.call_id),
            [
                "created",
                "claimed",
                "claimed",
                "succeeded",
                "stale_completion",
                "stale_completion"
            ]
        );
        Ok(())
    }

    #[test]
    fn recover_resets_only_expired_running_calls() -> Result<(), StoreError> {
        let db = TempDb::new("recover");
        let store = CallStore::open(&db.path(), StoreOptions::default())?;
        let expired = created_call(store.create_or_get(new_call("a", "fp"))?);
        let live = created_call(store.create_or_get(new_call("b", "fp"))?);
        let done = created_call(store.create_or_get(new_call("c", "fp"))?);
        store
            .claim(&expired.call_id, "1:x", Duration::ZERO)?
            .unwrap();
        store
            .claim(&live.call_id, "1:y", Duration::from_secs(30))?
            .unwrap();
        let lease = store.claim(&done.call_id, "1:z", Duration::ZERO)?.unwrap();
        store.succeed(&lease, &json!({}), None)?;

        assert_eq!(store.recover()?, vec![expired.call_id.clone()]);
        assert_eq!(
            store.get(&expired.call_id)?.unwrap().status,
            Status::Pending
        );
        assert_eq!(store.get(&live.call_id)?.unwrap().status, Status::Running);
        assert_eq!(store.get(&done.call_id)?.unwrap().status, Status::Succeeded);
        assert_eq!(store.pending_ids(10)?, vec![expired.call_id]);
        assert!(store.recover()?.is_empty());
        Ok(())
    }

    #[test]
    fn retryable_failure_is_reset_by_same_key_and_permanent_one_is_not() -> Result<(), StoreError> {
        let db = TempDb::new("retry");
        let store = CallStore::open(&db.path(), StoreOptions::default())?;
        for (key, retryable) in [("r", true), ("p", false)] {
            let call = created_call(store.create_or_get(new_call(key, "fp"))?);
            let lease = store
                .claim(&call.call_id, "1:w", Duration::from_secs(30))?
                .unwrap();
            store.fail(
                &lease,
                &json!({"code": "tool_failed", "retryable": retryable}),
            )?;
            let again = store.create_or_get(new_call(key, "fp"))?;
            if retryable {
                assert!(matches!(&again, Created::RetryReset(c) if c.status == Status::Pending));
            } else {
                assert!(matches!(&again, Created::Existing(c) if c.status == Status::Failed));
            }
        }
        Ok(())
    }

    #[test]
    fn many_threads_same_key_share_one_call() -> Result<(), StoreError> {
        let db = TempDb::new("threads");
        let store = CallStore::open(&db.path(), StoreOptions::default())?;
        let ids: Vec<String> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..16)
                .map(|_| {
                    s.spawn(|| {
                        created_call(store.create_or_get(new_call("k", "fp")).unwrap()).call_id
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(ids.iter().all(|id| id == &ids[0]));
        assert_eq!(store.stats()?.calls, 1);
        Ok(())
    }

    /// Holds the writer inside a batch until released, so that everything
    /// queued meanwhile is committed together in the next batch.
    fn hold_writer(store: &CallStore) -> mpsc::Sender<()> {
        let (entered, is_inside) = mpsc::channel();
        let (release, released) = mpsc::channel::<()>();
        store.write_then(
            move |_conn: &Connection| {
                entered.send(()).unwrap();
                let _ = released.recv();
                Ok(())
            },
            Box::new(|_| {}),
        );
        is_inside.recv().unwrap();
        release
    }

    type Answers = mpsc::Receiver<(String, Result<Created, StoreError>)>;

    /// Queue a create for each key without waiting; answers arrive named.
    fn queue_creates(store: &CallStore, keys: &[&str]) -> Answers {
        let (tx, rx) = mpsc::channel();
        for key in keys {
            let (tx, key) = (tx.clone(), key.to_string());
            store.write_then(
                create_or_get_op(new_call(&key, "fp")),
                Box::new(move |outcome| tx.send((key, outcome)).unwrap()),
            );
        }
        rx
    }

    fn rows(db: &Path, sql: &str) -> i64 {
        Connection::open(db)
            .unwrap()
            .query_row(sql, [], |r| r.get(0))
            .unwrap()
    }

    /// SQLite may roll back the whole transaction on `SQLITE_FULL` or an I/O
    /// error (a cache spill to a full disk). Every operation of that batch, the
    /// ones before the failure included, is answered `Unavailable`, none after
    /// it runs outside a transaction, and none of their rows exist.
    #[test]
    fn a_batch_whose_transaction_sqlite_rolled_back_answers_every_operation_with_an_error(
    ) -> Result<(), StoreError> {
        let db = TempDb::new("rolled-back");
        let store = CallStore::open(&db.path(), StoreOptions::default())?;
        let release = hold_writer(&store);
        let before = queue_creates(&store, &["before-1", "before-2"]);
        let (full_tx, full_rx) = mpsc::channel();
        store.write_then(
            |conn: &Connection| -> rusqlite::Result<()> {
                // What SQLite does on SQLITE_FULL during a spill: the whole
                // transaction is rolled back and the statement fails.
                conn.execute_batch("ROLLBACK")?;
                Err(rusqlite::Error::SqliteFailure(
                    rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
                    Some("database or disk is full".into()),
                ))
            },
            Box::new(move |outcome| full_tx.send(outcome).unwrap()),
        );
        let after = queue_creates(&store, &["after-1", "after-2"]);
        release.send(()).unwrap();
        let answers: Vec<_> = before.iter().take(2).chain(after.iter().take(2)).collect();
        for (key, answer) in &answers {
            assert!(
                matches!(answer, Err(StoreError::Unavailable(_))),
                "{key}: {answer:?}"
            );
        }
        assert!(matches!(
            full_rx.recv().unwrap(),
            Err(StoreError::Unavailable(_))
        ));
        assert_eq!(rows(&db.path(), "SELECT count(*) FROM calls"), 0);
        assert_eq!(rows(&db.path(), "SELECT count(*) FROM audit"), 0);
        // The writer carries on with a fresh transaction.
        assert!(matches!(
            store.create_or_get(new_call("before-1", "fp"))?,
            Created::New(_)
        ));
        assert_eq!(rows(&db.path(), "SELECT count(*) FROM calls"), 1);
        Ok(())
    }

    /// A `COMMIT` that fails (here a deferred foreign key that one operation
    /// broke) fails the whole batch: no caller is told its write committed, and
    /// no row of the batch remains.
    #[test]
    fn a_failed_commit_answers_every_operation_of_the_batch_with_an_error() -> Result<(), StoreError>
    {
        let db = TempDb::new("commit-fails");
        Connection::open(db.path())?.execute_batch(
            "CREATE TABLE parent (id INTEGER PRIMARY KEY);
             CREATE TABLE child (parent INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED);",
        )?;
        let store = CallStore::open(&db.path(), StoreOptions::default())?;
        let release = hold_writer(&store);
        let answers = queue_creates(&store, &["k-1"]);
        store.write_then(
            |conn: &Connection| {
                conn.execute("INSERT INTO child VALUES (42)", [])
                    .map(|_| ())
            },
            Box::new(|_| {}),
        );
        let later = queue_creates(&store, &["k-2"]);
        release.send(()).unwrap();
        for (key, answer) in answers.iter().take(1).chain(later.iter().take(1)) {
            assert!(
                matches!(answer, Err(StoreError::Unavailable(_))),
                "{key}: {answer:?}"
            );
        }
        assert_eq!(rows(&db.path(), "SELECT count(*) FROM calls"), 0);
        assert_eq!(rows(&db.path(), "SELECT count(*) FROM child"), 0);
        assert!(matches!(
            store.create_or_get(new_call("k-1", "fp"))?,
            Created::New(_)
        ));
        Ok(())
    }

    #[test]
    fn failing_operation_rolls_back_alone() -> Result<(), StoreError> {
        let db = TempDb::new("savepoint");
        let store = CallStore::open(&db.path(), StoreOptions::default())?;
        let failing = store.write(|conn| {
            conn.execute(
                "INSERT INTO audit (ts, call_id, event, detail) VALUES (0, 'x', 'probe', '')",
                [],
            )?;
            conn.execute("INSERT INTO no_such_table VALUES (1)", [])
        });
        assert!(matches!(failing, Err(StoreError::Internal(_))));
        store.create_or_get(new_call("k", "fp"))?;
        let probes: i64 = Connection::open(db.path())
            .unwrap()
            .query_row(
                "SELECT count(*) FROM audit WHERE event = 'probe'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(probes, 0);
        assert_eq!(store.stats()?.calls, 1);
        Ok(())
    }
}
