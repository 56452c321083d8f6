//! `CallStore`: the only module that speaks SQL. It owns the `calls` state
//! machine, the lease and fencing rules, the unique constraints, recovery,
//! the schema and its migrations, and the one place where commits are grouped.
//!
//! State machine: `pending → running → succeeded | failed`, and `failed` (when
//! its error says `retryable`) `→ pending` on a same-key retry; `running →
//! pending` with a `next_attempt_at` when a retryable failure has attempts
//! left (an automatic retry, claimed no earlier than that). Every transition
//! is a conditional `UPDATE ... WHERE status = ...`; its row count decides who
//! wins, never an earlier `SELECT`.
//!
//! Files: `model` (the types of the API), `sql` (every statement of the state
//! machine), `retention` (the purge of expired keys), `reads` (the reads of
//! the operations endpoints), `writer` (the group-commit thread and what it
//! does with each SQLite error), `schema` (DDL, pragmas, migrations), `ids`
//! (call and effect ids, the clock). Reads (`get`, `find_by_key`, `stats`,
//! ...) use `readers`, a pool of at most `MAX_READERS` separate connections;
//! WAL lets them run beside the writer.
//!
//! Idempotency keys are scoped by tenant: every lookup the API makes names
//! the tenant, and another tenant's call reads as absent.
//!
//! **The boundary.** The public API takes and returns the types in `model`,
//! never a `rusqlite` type, so another backend (PostgreSQL, for several
//! machines) can implement the same operations without the rest of the crate
//! changing. What any backend must guarantee:
//! - `calls (tenant, idem_key)` and `effects.call_id` are unique constraints,
//!   enforced by the database, not by a prior read;
//! - every transition is one conditional update whose affected-row count
//!   decides (`claim`: `pending` and due, or `running` with an expired lease;
//!   the fenced `succeed`/`fail`/`retry_later` and a lease's extension:
//!   `running` under the same `attempt`; the retry reset: `failed`); an
//!   effect row commits in the same transaction as its call's `succeeded`;
//! - nothing is answered before the transaction that wrote it is durable, and
//!   an error answer means "retry with the same key", never "it happened";
//! - lease times are wall-clock seconds comparable across processes.
//!
//! This module never runs a tool, and never holds a transaction open across
//! anything but SQL.

pub mod bulk;
mod checkpointer;
mod ids;
mod instances;
mod model;
mod readers;
mod reads;
mod retention;
mod schema;
mod sql;
mod sync_mode;
mod syncer;
#[cfg(test)]
mod tenant_tests;
#[cfg(test)]
mod tests;
pub mod verify;
mod write_queue;
mod writer;

pub use ids::{effect_id_for, now};
pub use instances::{owner_name, Instance, DEAD_AFTER, HEARTBEAT_EVERY};
pub use model::{
    AuditEvent, Backlog, Call, Completion, Created, DueCall, Health, Lease, NewCall, NewEffect,
    Purged, Retention, Scope, Stats, Status, WriterStats,
};
pub use readers::MAX_READERS;
pub use schema::SCHEMA_VERSION;
pub use sql::COUNT_CALLS_IN_STATUS_INDEX;
pub use writer::Then;

use crate::metrics::Metrics;
use readers::Readers;
use rusqlite::{Connection, ErrorCode};
use serde_json::Value;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;
use writer::{Lane, Writer};

/// A writer with work queued and no batch started or finished for this long
/// is stuck (`/healthz` says so): a batch takes milliseconds, and waiting for
/// another process's lock is bounded by the busy timeout.
pub const WRITER_STUCK_AFTER: Duration = Duration::from_secs(5);

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

/// Connection settings shared by the writer and the readers, and how long
/// terminal calls are kept.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    pub busy_timeout: Duration,
    pub retention: Retention,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            busy_timeout: Duration::from_secs(5),
            retention: Retention::default(),
        }
    }
}

/// The SQLite-backed call store. Cheap to share behind an `Arc`.
pub struct CallStore {
    /// The database file: `/healthz` reads it on a fresh connection.
    path: PathBuf,
    options: StoreOptions,
    /// The writer thread; every write goes through it.
    writer: Writer,
    /// At most `MAX_READERS` read connections, shared by every reader.
    readers: Readers,
    /// Whether `idx_calls_status` holds `attempt` (not in databases made by
    /// the seed's DDL or an earlier version), which decides how `stats` counts.
    status_index_has_attempt: bool,
    /// This process in `instances`; its workers' owner strings name it.
    instance: Instance,
    stopped: std::sync::atomic::AtomicBool,
    /// Where the retention scan goes on from (a `rowid`; 0: the beginning).
    purge_cursor: AtomicI64,
}

impl CallStore {
    /// Open (creating if absent) the database, bring its schema up to date, and
    /// start its writer thread.
    pub fn open(path: &Path, options: StoreOptions) -> Result<Arc<CallStore>, StoreError> {
        let conn = schema::open_writer(path, &options)?;
        let status_index_has_attempt = schema::status_index_has_attempt(&conn)?;
        let writer =
            Writer::start(conn).map_err(|e| StoreError::Internal(format!("spawn writer: {e}")))?;
        let readers = Readers::new(path, &options).gated_by(writer.durability());
        let store = Arc::new(CallStore {
            path: path.to_path_buf(),
            writer,
            readers,
            status_index_has_attempt,
            instance: Instance::this_process(),
            stopped: Default::default(),
            purge_cursor: AtomicI64::new(0),
            options,
        });
        let me = store.instance.clone();
        let gone = store.write(move |conn| instances::register(conn, &me))?;
        if gone > 0 {
            crate::log::warn(
                "earlier processes on this host are gone; their running calls are reclaimed now",
            )
            .event("instances_gone")
            .number("processes", gone as u64)
            .emit();
        }
        Ok(store)
    }

    /// Report every write batch to `metrics` from now on.
    pub fn report_to(&self, metrics: Arc<Metrics>) {
        self.writer.report_to(metrics);
    }

    /// How long terminal calls are kept.
    pub fn retention(&self) -> Retention {
        self.options.retention
    }

    /// This process's instance: its id goes into every owner it writes.
    pub fn instance(&self) -> &Instance {
        &self.instance
    }

    /// Tell other processes this one is alive (every `HEARTBEAT_EVERY`).
    pub fn heartbeat(&self) -> Result<(), StoreError> {
        let me = self.instance.clone();
        self.write(move |conn| instances::heartbeat(conn, &me))
    }

    /// Mark this instance stopped, commit every write already queued, then
    /// stop the writer thread and join it. Later writes are answered
    /// `Unavailable`. Idempotent.
    pub fn stop(&self) {
        if self.stopped.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let id = self.instance.id.clone();
        if let Err(e) = self.write(move |conn| instances::mark_stopped(conn, &id, now())) {
            crate::log::warn("could not mark this process stopped")
                .event("mark_stopped_failed")
                .cause(&e)
                .emit();
        }
        self.writer.stop();
        self.readers.close_idle();
    }

    /// Create the key's call, or return the one it already has. Runs in the
    /// writer's `BEGIN IMMEDIATE` transaction, so the lookup and the insert cannot
    /// interleave with another writer; `calls.idem_key UNIQUE` backs it up.
    pub fn create_or_get(&self, new: NewCall) -> Result<Created, StoreError> {
        let retention = self.options.retention;
        // Behind completions: new work never delays finishing accepted work.
        Ok(
            match self.write_in(Lane::Behind, sql::create_or_get_op(new))? {
                Created::New(c) => Created::New(retention.stamp(c)),
                Created::Existing(c) => Created::Existing(retention.stamp(c)),
                Created::RetryReset(c) => Created::RetryReset(retention.stamp(c)),
                Created::Conflict(c) => Created::Conflict(retention.stamp(c)),
            },
        )
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
                .map(|call_id| sql::claim_one(conn, call_id, &owner, now, lease_until))
                .collect()
        })
    }

    /// Record success, fenced by the lease: the effect row (if the tool wrote
    /// one) and the `succeeded` update commit together, and only if this lease's
    /// attempt still owns the call. `effects.call_id UNIQUE` is the last gate:
    /// however many attempts succeed, one call has at most one effect. Does not
    /// wait: a worker hands its completion over and takes its next call while
    /// the commit is grouped with others; `then` learns the outcome.
    pub fn succeed_then(
        &self,
        lease: &Lease,
        result: &Value,
        effect: Option<NewEffect>,
        then: Then<Completion>,
    ) {
        self.writer.submit(
            sql::succeed_op(lease.clone(), result.to_string(), effect),
            then,
        )
    }

    /// Record failure, fenced like `succeed_then`; does not wait either.
    pub fn fail_then(&self, lease: &Lease, error: &Value, then: Then<Completion>) {
        self.writer
            .submit(sql::fail_op(lease.clone(), error.to_string()), then)
    }

    /// Record a retryable failure that has attempts left: the call returns to
    /// `pending`, not to be claimed for `delay` (`next_attempt_at`), audited
    /// `retry_scheduled`; fenced and unwaited like `fail_then`.
    pub fn retry_later_then(
        &self,
        lease: &Lease,
        error: &Value,
        delay: Duration,
        then: Then<Completion>,
    ) {
        let code = error["code"].as_str().unwrap_or_default().to_string();
        self.writer.submit(
            sql::retry_later_op(lease.clone(), error.to_string(), code, delay),
            then,
        )
    }

    /// Extend leases whose tools are still running to `lease` from now, each
    /// only while its call is `running` under the lease's attempt. Returns,
    /// in order, whether each lease is still held: `false` means it was lost
    /// (taken over after it expired, or released), and extending it must stop.
    pub fn extend(&self, leases: &[Lease], lease: Duration) -> Result<Vec<bool>, StoreError> {
        let leases = leases.to_vec();
        self.write(move |conn| {
            let lease_until = now() + lease.as_secs_f64();
            sql::extend_leases(conn, &leases, lease_until)
        })
    }

    /// Give back a lease whose tool is still running when this process stops:
    /// the call returns to `pending` (audited `released`) unless the lease was
    /// already lost, in which case nothing changes (`Stale`).
    pub fn release(&self, lease: &Lease) -> Result<Completion, StoreError> {
        self.write(sql::release_op(lease.clone()))
    }

    /// Return `running` calls whose lease has expired, or whose owner's process
    /// is gone, to `pending`, and name them. A live owner's leases are left
    /// alone: it may still be executing (another process on the same file),
    /// and the effect would then run twice.
    pub fn recover(&self) -> Result<Vec<String>, StoreError> {
        if !self.read(sql::has_reclaimable)? {
            return Ok(Vec::new());
        }
        let me = self.instance.clone();
        self.write(move |conn| sql::recover_expired(conn, &me))
    }

    /// Up to `limit` `pending` calls that may be claimed now (none whose
    /// automatic retry is scheduled for later), oldest first.
    pub fn due_calls(&self, limit: usize) -> Result<Vec<DueCall>, StoreError> {
        self.read(|conn| sql::due_calls(conn, now(), limit))
    }

    /// A call by id, whatever its tenant: for a caller that already holds
    /// the call (the wait loop), never for a tenant's lookup (`get_for`).
    pub fn get(&self, call_id: &str) -> Result<Option<Call>, StoreError> {
        let call = self.read(|conn| sql::select_call(conn, call_id))?;
        Ok(call.map(|c| self.options.retention.stamp(c)))
    }

    /// `tenant`'s call by id; another tenant's reads as absent.
    pub fn get_for(&self, tenant: &str, call_id: &str) -> Result<Option<Call>, StoreError> {
        let call = self.read(|conn| sql::select_tenant_call(conn, tenant, call_id))?;
        Ok(call.map(|c| self.options.retention.stamp(c)))
    }

    /// The key's call within `tenant`, as last committed. Used for the fast
    /// path of a same-key retry: `idem_key` and `fingerprint` never change
    /// once written, so a committed row is a safe answer without taking the
    /// write lock.
    pub fn find_by_key(&self, tenant: &str, idem_key: &str) -> Result<Option<Call>, StoreError> {
        let call = self.read(|conn| sql::select_call_by_key(conn, tenant, idem_key))?;
        Ok(call.map(|c| self.options.retention.stamp(c)))
    }

    /// `tenant`'s call and its audit rows, oldest first, read in one
    /// snapshot; `None` when the tenant has no such call.
    pub fn audit_for(
        &self,
        tenant: &str,
        call_id: &str,
    ) -> Result<Option<Vec<AuditEvent>>, StoreError> {
        self.read(|conn| {
            let snapshot = conn.unchecked_transaction()?;
            let events = match sql::select_tenant_call(conn, tenant, call_id)? {
                Some(_) => Some(reads::audit_timeline(conn, call_id)?),
                None => None,
            };
            snapshot.commit()?;
            Ok(events)
        })
    }

    /// Purge up to `limit` terminal calls whose last update is older than
    /// the retention's TTL (nothing when keys are kept forever): one small
    /// write batch, found by a read first. Returns what was purged.
    pub fn purge_expired(&self, limit: usize) -> Result<Vec<Purged>, StoreError> {
        let Some(ttl) = self.options.retention.key_ttl else {
            return Ok(Vec::new());
        };
        let cutoff = now() - ttl.as_secs_f64();
        let after = self.purge_cursor.load(Ordering::Relaxed);
        let (found, next) = self.read(|conn| retention::candidates(conn, cutoff, after, limit))?;
        self.purge_cursor.store(next, Ordering::Relaxed);
        if found.is_empty() {
            return Ok(Vec::new());
        }
        self.write(retention::purge_op(found, cutoff))
    }

    /// What `/healthz` reports: whether a new connection can read the file
    /// now, and whether the writer is stuck with work queued.
    pub fn health(&self) -> Health {
        let database = reads::fresh_read(&self.path).map_err(|e| e.to_string());
        let writer = match self.writer.stuck_for() {
            Some((stuck, queued)) if stuck > WRITER_STUCK_AFTER => Err(format!(
                "stuck for {:.1} s with {queued} operations queued",
                stuck.as_secs_f64()
            )),
            _ => Ok(()),
        };
        Health { database, writer }
    }

    /// Calls by status and the oldest pending call, in one read (a scrape).
    pub fn backlog(&self) -> Result<Backlog, StoreError> {
        self.read(|conn| {
            let snapshot = conn.unchecked_transaction()?;
            let backlog = reads::backlog(conn)?;
            snapshot.commit()?;
            Ok(backlog)
        })
    }

    /// Every call's counts (`Scope::All`), or one tenant's.
    pub fn stats(&self, scope: Scope<'_>) -> Result<Stats, StoreError> {
        self.read(|conn| {
            // One read transaction, so the counts describe one moment even while
            // the writer commits between the queries (each would otherwise see
            // its own snapshot, and the statuses could outnumber the calls).
            let snapshot = conn.unchecked_transaction()?;
            let (calls, by_status, attempts) = match scope {
                Scope::Tenant(tenant) => reads::count_tenant_calls(conn, tenant)?,
                Scope::All if self.status_index_has_attempt => {
                    sql::count_calls_in_status_index(conn)?
                }
                Scope::All => sql::count_calls_in_table(conn)?,
            };
            let effects = match scope {
                Scope::Tenant(tenant) => reads::count_tenant_effects(conn, tenant)?,
                Scope::All => sql::count_effects(conn)?,
            };
            snapshot.commit()?;
            Ok(Stats {
                calls,
                effects,
                by_status,
                attempts,
                writer: self.writer.stats(),
            })
        })
    }

    /// Queue `op` for the writer in the first lane (see `write_queue`) and
    /// wait until its batch has committed.
    fn write<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        self.write_in(Lane::First, op)
    }

    fn write_in<T, F>(&self, lane: Lane, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let (caller, answer) = mpsc::sync_channel::<Result<T, StoreError>>(1);
        self.writer.submit_in(
            lane,
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

    /// Run `op` on a pooled read connection (see `readers`).
    fn read<T>(
        &self,
        op: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        self.readers.read(op)
    }
}
