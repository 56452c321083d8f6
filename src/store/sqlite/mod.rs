//! The SQLite backend (the default): one process's file, which several
//! processes on one host may share. Every write goes to one writer thread
//! that groups commits (`writer`, its two lanes in `write_queue`, each
//! operation in its `savepoint` with the table of what each error undoes), fsynced
//! off its path (`syncer`, `sync_mode`) and checkpointed on a thread of its
//! own (`checkpointer`); reads go to a bounded pool of read connections
//! (`reader_pool`). A request never touches the file itself: it hands the
//! work to one of those threads (`handoff`) and waits at most
//! `--db-timeout-ms` (`deadline`); `/healthz`'s read on a fresh connection
//! runs on a thread of its own (`health_probe`). The statements: `sql`
//! (the state machine), `steps` (what every statement shares: a call's row,
//! its audit row, its count group), `instances` (the process registry and recovery,
//! the nodes), `business_key`, `cancel`, `approval` (approval gates and
//! the webhook outbox), `retention`, `limits` (a tool's
//! `rate`, shared by every process on the file), `report_reads` (the
//! operations endpoints), `counts` (the count tables, their DDL and
//! reads), `count_book` (what each write changes in them, folded in by the
//! writer before each commit), `list` (the list's statements, and a
//! filter's total), `rerun`, `paused` (paused tools), `bulk_jobs`,
//! `readings` (the overview's history) and `operator` (`Operator` on them),
//! `schema` (DDL, pragmas,
//! migrations), `ownership` (a file another program made is refused),
//! `backup` (a consistent copy of a live file), `error` (a SQLite error
//! as `Unavailable` or `Internal`), `copy_mark` (the mark a
//! copy carries, and a start-up's refusal of it until it is accepted); and
//! the offline `verify`
//! and the bench's `bulk` loader.
//! `open` is the wing's one entry point; `SqliteStore` implements `Backend`.
//!
//! It owns nothing the facade does not ask for, imports nothing from the
//! PostgreSQL wing, and must never hand a `rusqlite` type across the facade.

mod approval;
pub mod backup;
#[cfg(any(test, feature = "testing"))]
pub mod bulk;
mod bulk_jobs;
mod business_key;
mod cancel;
mod checkpointer;
mod copy_mark;
mod count_book;
mod counts;
mod deadline;
mod error;
mod handoff;
mod health_probe;
mod instances;
mod limits;
mod list;
mod operator;
mod ownership;
mod paused;
mod reader_pool;
mod readings;
mod report_reads;
mod rerun;
mod retention;
mod savepoint;
mod schema;
mod sql;
mod steps;
mod sync_mode;
mod syncer;
#[cfg(test)]
mod tests;
mod verify;
mod write_queue;
mod writer;

pub use business_key::LEDGER_SQL;
pub use copy_mark::RestoredCopy;
#[cfg(any(test, feature = "testing"))]
pub use list::{
    ALL_IDS, ALL_IDS_FILTERED, ERROR_IDS, ERROR_IDS_FILTERED, GROUP_IDS, GROUP_IDS_FILTERED,
    PREFIX_COUNT,
};
pub use reader_pool::MAX_READERS;
pub use schema::SCHEMA_VERSION;
use verify::verify_within;
pub(super) use verify::{tools_outside, verify};

use super::approval::{Approval, Decided, Decision, Delivery, Notification, Waiting};
use super::audit;
use super::backend::Backend;
use super::business_key::{BusinessKey, Guarded, IntentLedger};
use super::cancel::Cancel;
use super::counts::Counts;
use super::error::StoreError;
use super::ids::now;
use super::instance::{log_gone, Instance, Node};
use super::limits::{LimitedClaim, ToolLimit};
use super::list::{ListPage, ListQuery};
use super::model::{
    AuditEvent, Backlog, Call, CallProgress, Completion, Created, CreatedClaimed, DueCall, Health,
    Lease, LeaseHeld, NewCall, NewEffect, Purged, RetryDelay, Scope, Stats, Then, ToolAtRelease,
};
use super::options::{DueLimits, StoreOptions};
use super::verify::{Report, VerifyError};
use crate::metrics::Metrics;
use deadline::{Deadline, LateLeases};
use health_probe::HealthProbe;
use reader_pool::Readers;
use rusqlite::Connection;
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use writer::{Lane, Writer};

/// How many due calls `claim_due_within` reads past those of a tool with no
/// slot left, looking for calls it may claim.
const SCAN_PAST_CAPPED: usize = 1_000;

/// The SQLite-backed store.
struct SqliteStore {
    /// The file, for the promise check's own read-only connection.
    path: std::path::PathBuf,
    /// `/healthz`'s read of the file on a fresh connection, off its thread.
    probe: HealthProbe,
    /// How long a caller waits for the writer or a reader (`--db-timeout-ms`).
    deadline: Deadline,
    /// Leases of writes that committed after their callers gave up, for the
    /// next recovery pass to give back.
    late_leases: Arc<LateLeases>,
    options: StoreOptions,
    /// The writer thread; every write goes through it.
    writer: Writer,
    /// At most `MAX_READERS` read connections, shared by every reader.
    readers: Readers,
    /// This process in `instances`; its workers' owner strings name it.
    instance: Instance,
    /// The tools whose `rate` this file holds for every process (`limits`).
    limited: Vec<ToolLimit>,
    stopped: std::sync::atomic::AtomicBool,
    /// Where the retention scan goes on from (a `rowid`; 0: the beginning).
    purge_cursor: AtomicI64,
}

/// Open (creating if absent) the database file at `path`, bring its schema
/// up to date, start its writer thread and register this process.
pub(super) fn open(path: &Path, options: StoreOptions) -> Result<Box<dyn Backend>, StoreError> {
    Ok(Box::new(SqliteStore::open(path, options)?))
}

impl SqliteStore {
    fn open(path: &Path, options: StoreOptions) -> Result<SqliteStore, StoreError> {
        let conn = schema::open_writer(path, &options)?;
        let writer =
            Writer::start(conn).map_err(|e| StoreError::internal(format!("spawn writer: {e}")))?;
        // Reads wait for the sync that covers what they saw (`syncer`): no
        // answer shows state a power cut could take back.
        let readers = Readers::new(path, &options).gated_by(writer.durability());
        let limited: Vec<ToolLimit> = options
            .limits
            .iter()
            .filter(|l| l.held_by(false))
            .cloned()
            .collect();
        let store = SqliteStore {
            path: path.to_path_buf(),
            probe: HealthProbe::new(path),
            deadline: Deadline::new(options.db_timeout()),
            late_leases: Arc::default(),
            limited,
            writer,
            readers,
            instance: Instance::this_process(),
            stopped: Default::default(),
            purge_cursor: AtomicI64::new(0),
            options,
        };
        if !store.limited.is_empty() {
            store.write(limits::declare_op(store.limited.clone()))?;
        }
        let me = store.instance.clone();
        let gone = store.write(move |conn| instances::register(conn, &me))?;
        log_gone(gone);
        Ok(store)
    }

    /// Queue `op` for the writer in the first lane (see `write_queue`) and
    /// wait until its batch has committed, at most the deadline.
    fn write<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        self.write_in(Lane::First, op)
    }

    /// `write`, in `lane`: creations go `Behind`, so completions are never
    /// queued behind new work.
    fn write_in<T, F>(&self, lane: Lane, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        self.deadline.write(&self.writer, lane, op, drop)
    }

    /// `write_in`, for an operation that takes leases: if it commits after
    /// its caller gave up, the leases `leases_of` finds in its answer are
    /// kept for the next recovery pass to give back (see `deadline`).
    fn write_leasing<T, F>(
        &self,
        lane: Lane,
        op: F,
        leases_of: fn(T) -> Vec<Lease>,
    ) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let late = Arc::clone(&self.late_leases);
        let keep = move |answer| late.keep(leases_of(answer));
        self.deadline.write(&self.writer, lane, op, keep)
    }

    /// Give back the leases of writes that committed after their callers
    /// gave up: their calls go back to `pending`, for the poll to run at
    /// once. Kept for the next pass if the writer cannot take them now.
    fn give_back_late_leases(&self) -> Result<(), StoreError> {
        let late = self.late_leases.take();
        if late.is_empty() {
            return Ok(());
        }
        let count = late.len() as u64;
        let leases = late.clone();
        let given_back = self.write(move |conn| {
            for lease in leases {
                let detail = audit::released(lease.attempt, &ToolAtRelease::Idle);
                sql::release_op(lease, detail)(conn)?;
            }
            Ok(())
        });
        match given_back {
            Ok(()) => crate::log::info("leases taken after their callers gave up, given back")
                .event("late_leases_released")
                .number("leases", count)
                .emit(),
            Err(_) => self.late_leases.keep(late),
        }
        given_back
    }

    /// Run `op` on a read thread's connection (see `reader_pool`), at most
    /// the deadline.
    fn read<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        self.readers.read(op)
    }
}

impl Backend for SqliteStore {
    fn name(&self) -> &'static str {
        "sqlite"
    }

    fn report_to(&self, metrics: Arc<Metrics>) {
        self.writer.report_to(metrics);
    }

    fn instance(&self) -> &Instance {
        &self.instance
    }

    fn heartbeat(&self) -> Result<(), StoreError> {
        let me = self.instance.clone();
        self.write(move |conn| instances::heartbeat(conn, &me))
    }

    /// Then closes the read connections, and stops the writer thread and
    /// joins it.
    fn stop(&self) {
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
        // The writer's connection closes last. Only the last connection to
        // close folds the WAL into the file and removes `-wal` and `-shm`;
        // read threads closing at the same moment each see another still
        // open, so none would, and a clean stop would leave the WAL behind.
        self.readers.close();
        self.probe.close();
        self.writer.stop();
    }

    /// Runs in the writer's `BEGIN IMMEDIATE` transaction, so the lookup and
    /// the insert cannot interleave with another writer; `UNIQUE (tenant,
    /// idem_key)` backs it up.
    fn create_or_get(&self, new: NewCall) -> Result<Created, StoreError> {
        // Behind completions: new work never delays finishing accepted work.
        self.write_in(Lane::Behind, sql::create_or_get_op(new))
    }

    /// In the writer's `Behind` lane like every create.
    fn create_or_get_guarded(&self, new: NewCall, key: BusinessKey) -> Result<Guarded, StoreError> {
        self.write_in(Lane::Behind, business_key::create_or_get_op(new, key))
    }

    /// One writer operation instead of a create and a claim.
    fn create_claimed(
        &self,
        new: NewCall,
        owner: &str,
        lease: Duration,
    ) -> Result<CreatedClaimed, StoreError> {
        let op = sql::create_claimed_op(new, owner.to_string(), lease);
        self.write_leasing(Lane::Behind, op, |created| {
            created.lease.into_iter().collect()
        })
    }

    /// One operation in the writer's queue.
    fn claim_many(
        &self,
        call_ids: &[String],
        owner: &str,
        lease: Duration,
    ) -> Result<Vec<Option<Lease>>, StoreError> {
        let call_ids = call_ids.to_vec();
        let owner = owner.to_string();
        let op = move |conn: &Connection| {
            let now = now();
            let lease_until = now + lease.as_secs_f64();
            call_ids
                .iter()
                .map(|call_id| sql::claim_one(conn, call_id, &owner, now, lease_until))
                .collect()
        };
        self.write_leasing(Lane::First, op, |leases: Vec<Option<Lease>>| {
            leases.into_iter().flatten().collect()
        })
    }

    fn limits_in_database(&self) -> Vec<ToolLimit> {
        self.limited.clone()
    }

    /// One writer operation: the buckets are read and spent in the writer's
    /// transaction, which every process on the file takes in turn.
    fn claim_limited(
        &self,
        limits: &DueLimits,
        owner: &str,
        lease: Duration,
    ) -> Result<LimitedClaim, StoreError> {
        if limits.total == 0 || self.limited.is_empty() {
            return Ok(LimitedClaim::default());
        }
        let op = limits::claim_op(
            self.limited.clone(),
            limits.clone(),
            owner.to_string(),
            lease,
        );
        self.write_leasing(Lane::First, op, |claim: LimitedClaim| claim.leases)
    }

    /// Does not wait: a worker hands its completion over and takes its next
    /// call while the commit is grouped with others.
    fn succeed_then(
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

    /// Does not wait either.
    fn fail_then(&self, lease: &Lease, error: &Value, then: Then<Completion>) {
        let code = error["code"].as_str().unwrap_or_default().to_string();
        self.writer
            .submit(sql::fail_op(lease.clone(), error.to_string(), code), then)
    }

    /// Unwaited like `fail_then`.
    fn retry_later_then(
        &self,
        lease: &Lease,
        error: &Value,
        delay: RetryDelay,
        then: Then<Completion>,
    ) {
        let code = error["code"].as_str().unwrap_or_default().to_string();
        let message = crate::input::clip(error["message"].as_str().unwrap_or_default());
        let detail = audit::retry_scheduled(lease.attempt, &code, message, delay);
        let op = sql::retry_later_op(lease.clone(), error.to_string(), code, detail, delay);
        self.writer.submit(op, then)
    }

    fn extend(
        &self,
        leases: &[Lease],
        progress: &[Option<CallProgress>],
        lease: Duration,
    ) -> Result<Vec<bool>, StoreError> {
        let (leases, progress) = (leases.to_vec(), progress.to_vec());
        self.write(move |conn| {
            let lease_until = now() + lease.as_secs_f64();
            sql::extend_leases(conn, &leases, &progress, lease_until)
        })
    }

    fn note_replay_by_content(
        &self,
        tenant: &str,
        call_id: &str,
        window_secs: u64,
    ) -> Result<bool, StoreError> {
        let (tenant, call_id) = (tenant.to_string(), call_id.to_string());
        let detail = audit::replayed_by_content(window_secs);
        self.write(move |conn| sql::note_replay_by_content(conn, &tenant, &call_id, &detail))
    }

    fn note_input_answers(
        &self,
        tenant: &str,
        call_id: &str,
        fingerprint: &str,
        answers: &str,
    ) -> Result<bool, StoreError> {
        let owned = [tenant, call_id, fingerprint, answers].map(str::to_string);
        self.write(move |conn| {
            let [tenant, call_id, fingerprint, answers] = &owned;
            sql::note_input_answers(conn, tenant, call_id, fingerprint, answers)
        })
    }

    fn release(&self, lease: &Lease, tool: &ToolAtRelease) -> Result<Completion, StoreError> {
        let detail = audit::released(lease.attempt, tool);
        self.write(sql::release_op(lease.clone(), detail))
    }

    /// One writer operation: the scan and the conditional updates share its
    /// transaction, so the per-tool limits hold (no other writer claims in
    /// between). Calls of a tool with no slot left are read past, within the
    /// first `SCAN_PAST_CAPPED` due calls — the window the runner listed
    /// before it claimed in one operation; beyond it they wait for a later
    /// poll, never over a cap.
    fn claim_due_within(
        &self,
        limits: &DueLimits,
        owner: &str,
        lease: Duration,
    ) -> Result<Vec<Lease>, StoreError> {
        if limits.total == 0 {
            return Ok(Vec::new());
        }
        let limits = limits.clone();
        let owner = owner.to_string();
        let op = move |conn: &Connection| {
            let now = now();
            let lease_until = now + lease.as_secs_f64();
            let mut left: HashMap<String, usize> = limits.per_tool.into_iter().collect();
            let scan = if left.values().any(|free| *free < limits.total) {
                limits.total.max(SCAN_PAST_CAPPED)
            } else {
                limits.total
            };
            let mut leases = Vec::new();
            for due in sql::due_calls(conn, now, scan)? {
                if leases.len() == limits.total {
                    break;
                }
                let free = left.get_mut(&due.tool);
                if free.as_deref() == Some(&0) {
                    continue;
                }
                if let Some(l) = sql::claim_one(conn, &due.call_id, &owner, now, lease_until)? {
                    if let Some(free) = free {
                        *free -= 1;
                    }
                    leases.push(l);
                }
            }
            Ok(leases)
        };
        self.write_leasing(Lane::First, op, std::convert::identity)
    }

    /// First gives back the leases of writes that committed after their
    /// callers gave up (see `deadline`). A cheap read then spares the writer
    /// a transaction when there is nothing to recover; the owners are then
    /// read again inside it.
    fn recover(&self, running_here: &[LeaseHeld]) -> Result<Vec<String>, StoreError> {
        self.give_back_late_leases()?;
        if !self.read(instances::has_reclaimable)? {
            return Ok(Vec::new());
        }
        let me = self.instance.clone();
        let running_here = running_here.to_vec();
        self.write(move |conn| instances::recover_expired(conn, &me, &running_here))
    }

    /// One writer operation: the read and the update share its transaction.
    fn cancel(
        &self,
        tenant: &str,
        call_id: &str,
        reason: Option<&str>,
    ) -> Result<Cancel, StoreError> {
        let op = cancel::cancel_op(
            tenant.to_string(),
            call_id.to_string(),
            reason.map(str::to_string),
        );
        self.write(op)
    }

    /// One writer operation: the read and the update share its transaction.
    fn decide(
        &self,
        tenant: Option<&str>,
        call_id: &str,
        decision: &Decision,
    ) -> Result<Decided, StoreError> {
        let op = approval::decide_op(
            tenant.map(str::to_string),
            call_id.to_string(),
            decision.clone(),
        );
        self.write(op)
    }

    fn approval(
        &self,
        tenant: Option<&str>,
        call_id: &str,
    ) -> Result<Option<Approval>, StoreError> {
        let (tenant, call_id) = (tenant.map(str::to_string), call_id.to_string());
        self.read(move |conn| approval::approval_of(conn, tenant.as_deref(), &call_id))
    }

    /// One read transaction: the ids and their rows describe one moment.
    fn waiting(
        &self,
        tenant: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Waiting>, StoreError> {
        let (tenant, after) = (tenant.map(str::to_string), after.map(str::to_string));
        self.read(move |conn| {
            let snapshot = conn.unchecked_transaction()?;
            let found = approval::waiting(conn, tenant.as_deref(), after.as_deref(), limit)?;
            snapshot.commit()?;
            Ok(found)
        })
    }

    /// A cheap read first spares the writer a transaction when nothing
    /// expired.
    fn expire_approvals(&self, limit: usize) -> Result<Vec<Call>, StoreError> {
        if !self.read(|conn| approval::has_expired(conn, now()))? {
            return Ok(Vec::new());
        }
        self.write(approval::expire_op(limit))
    }

    /// A cheap read first, as for expiry.
    fn take_notifications(
        &self,
        limit: usize,
        hold: Duration,
    ) -> Result<Vec<Notification>, StoreError> {
        if !self.read(|conn| approval::has_due_notification(conn, now()))? {
            return Ok(Vec::new());
        }
        self.write(approval::take_op(limit, hold))
    }

    fn settle_notification(
        &self,
        msg_id: &str,
        attempts: i64,
        delivery: Delivery,
    ) -> Result<(), StoreError> {
        self.write(approval::settle_op(msg_id.to_string(), attempts, delivery))
    }

    /// Unwaited like `fail_then`.
    fn stopped_then(&self, lease: &Lease, sent: bool, how: &str, then: Then<Completion>) {
        let op = cancel::stopped_op(lease.clone(), sent, how.to_string());
        self.writer.submit(op, then)
    }

    /// On a read connection: another process's cancel is on the file.
    fn cancels_asked(&self, running: &[LeaseHeld]) -> Result<Vec<LeaseHeld>, StoreError> {
        let running = running.to_vec();
        self.read(move |conn| cancel::cancels_asked(conn, &running))
    }

    fn due_calls(&self, limit: usize) -> Result<Vec<DueCall>, StoreError> {
        self.read(move |conn| sql::due_calls(conn, now(), limit))
    }

    fn get(&self, call_id: &str) -> Result<Option<Call>, StoreError> {
        let call_id = call_id.to_string();
        self.read(move |conn| steps::select_call(conn, &call_id))
    }

    fn get_for(&self, tenant: &str, call_id: &str) -> Result<Option<Call>, StoreError> {
        let (tenant, call_id) = (tenant.to_string(), call_id.to_string());
        self.read(move |conn| steps::select_tenant_call(conn, &tenant, &call_id))
    }

    /// On a read connection, without taking the write lock.
    fn find_by_key(&self, tenant: &str, idem_key: &str) -> Result<Option<Call>, StoreError> {
        let (tenant, idem_key) = (tenant.to_string(), idem_key.to_string());
        self.read(move |conn| steps::select_call_by_key(conn, &tenant, &idem_key))
    }

    fn audit_for(
        &self,
        tenant: &str,
        call_id: &str,
    ) -> Result<Option<Vec<AuditEvent>>, StoreError> {
        let (tenant, call_id) = (tenant.to_string(), call_id.to_string());
        self.read(move |conn| report_reads::tenant_audit(conn, &tenant, &call_id))
    }

    /// One small write batch, found by a read first (`retention`).
    fn purge_expired(&self, limit: usize) -> Result<Vec<Purged>, StoreError> {
        let Some(ttl) = self.options.retention.key_ttl else {
            return Ok(Vec::new());
        };
        let cutoff = now() - ttl.as_secs_f64();
        let after = self.purge_cursor.load(Ordering::Relaxed);
        let (found, next) =
            self.read(move |conn| retention::candidates(conn, cutoff, after, limit))?;
        self.purge_cursor.store(next, Ordering::Relaxed);
        if found.is_empty() {
            return Ok(Vec::new());
        }
        self.write(retention::purge_op(found, cutoff))
    }

    /// A new connection reads the file (on a thread of its own, waited for
    /// at most the deadline); the writer can never write again after a
    /// failed sync (an orchestrator should restart the process), and is
    /// down while it has had work queued and finished nothing for the
    /// deadline (a file system that stopped answering): all within about
    /// the deadline, never a hang.
    fn health(&self) -> Health {
        let database = self.probe.check(self.deadline.within());
        let writer = match self.writer.failure() {
            Some(failed) => Err(format!("{failed}; restart the process to write again")),
            None => self.deadline.check_writer(&self.writer),
        };
        Health { database, writer }
    }

    /// Set once a sync of the WAL failed; never cleared.
    fn write_failure(&self) -> Option<StoreError> {
        self.writer.failure()
    }

    /// From the count tables, and one seek per tool with pending calls.
    fn backlog(&self) -> Result<Backlog, StoreError> {
        Ok(self.counts(Scope::All)?.backlog())
    }

    /// From the count tables: no read of `calls` beyond the seeks for the
    /// oldest pending call.
    fn stats(&self, scope: Scope<'_>) -> Result<Stats, StoreError> {
        Ok(self.counts(scope)?.into_stats(self.writer.stats()))
    }

    /// One read transaction, so the counts describe one moment even while
    /// the writer commits between the queries.
    fn counts(&self, scope: Scope<'_>) -> Result<Counts, StoreError> {
        let tenant = scope.tenant().map(str::to_string);
        self.read(move |conn| {
            let snapshot = conn.unchecked_transaction()?;
            let counts = counts::counts(conn, Scope::of(tenant.as_deref()))?;
            snapshot.commit()?;
            Ok(counts)
        })
    }

    /// The counts that plan it and the rows in one read transaction, so a
    /// group the counts say is empty has no rows to miss.
    fn list(&self, query: &ListQuery) -> Result<ListPage, StoreError> {
        let query = query.clone();
        self.read(move |conn| {
            let snapshot = conn.unchecked_transaction()?;
            let scope = Scope::of(query.tenant.as_deref());
            let counts = Counts {
                rows: counts::count_rows(conn, scope)?,
                ..Counts::default()
            };
            let plan = query.plan(&counts);
            let rows = list::rows(conn, &query, &plan)?;
            snapshot.commit()?;
            Ok(query.page(rows))
        })
    }

    fn nodes(&self) -> Result<Vec<Node>, StoreError> {
        self.read(instances::nodes)
    }

    fn intent_ledger(&self, limit: usize) -> Result<Vec<IntentLedger>, StoreError> {
        self.read(move |conn| business_key::ledger(conn, limit))
    }

    /// The check opens the file itself, read-only; what it saw is then
    /// gated like any read (`syncer`).
    fn verify_until(
        &self,
        effect_tools: &[&str],
        deadline: Instant,
    ) -> Result<Report, VerifyError> {
        let report = verify_within(&self.path, effect_tools, deadline)?;
        // At least a moment for the sync in flight, even at the deadline.
        let left = deadline.saturating_duration_since(Instant::now());
        self.writer
            .durability()
            .wait_until_visible_is_synced(left.max(Duration::from_secs(1)))
            .map_err(VerifyError::NotDurable)?;
        Ok(report)
    }
}
