//! The SQLite backend behind `CallStore`: one writer thread that groups
//! commits (`writer`), a pool of read connections (`readers`), and the
//! statements in `sql`, `reads`, `retention` and `instances`. One process's
//! file; several processes may share it on one host.
//!
//! It owns nothing the facade does not ask for, and must never hand a
//! `rusqlite` type across the facade.

use super::error::StoreError;
use super::ids::now;
use super::instances::{self, Instance};
use super::model::{
    AuditEvent, Backlog, Call, Completion, Created, CreatedClaimed, DueCall, Health, Lease,
    LeaseHeld, NewCall, NewEffect, Purged, Retention, Scope, Stats,
};
use super::options::{DueLimits, StoreOptions, WRITER_STUCK_AFTER};
use super::reader_pool::Readers;
use super::verify::{self, Report, VerifyError};
use super::writer::{Lane, Then, Writer};
use super::{report_reads, retention, schema, sql};
use crate::metrics::Metrics;
use rusqlite::Connection;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// How many due calls `claim_due_within` reads past those of a tool with no
/// slot left, looking for calls it may claim.
const SCAN_PAST_CAPPED: usize = 1_000;

/// The SQLite-backed store.
pub(super) struct SqliteStore {
    /// The database file: `/healthz` reads it on a fresh connection.
    path: PathBuf,
    options: StoreOptions,
    /// The writer thread; every write goes through it.
    pub(super) writer: Writer,
    /// At most `MAX_READERS` read connections, shared by every reader.
    readers: Readers,
    /// Whether `idx_calls_status` holds `attempt` (not in databases made by
    /// the seed's DDL or an earlier version), which decides how `stats` counts.
    pub(super) status_index_has_attempt: bool,
    /// This process in `instances`; its workers' owner strings name it.
    instance: Instance,
    stopped: std::sync::atomic::AtomicBool,
    /// Where the retention scan goes on from (a `rowid`; 0: the beginning).
    purge_cursor: AtomicI64,
}

impl SqliteStore {
    /// Open (creating if absent) the database, bring its schema up to date, and
    /// start its writer thread.
    pub fn open(path: &Path, options: StoreOptions) -> Result<SqliteStore, StoreError> {
        let conn = schema::open_writer(path, &options)?;
        let status_index_has_attempt = schema::status_index_has_attempt(&conn)?;
        let writer =
            Writer::start(conn).map_err(|e| StoreError::internal(format!("spawn writer: {e}")))?;
        // Reads wait for the sync that covers what they saw (`syncer`): no
        // answer shows state a power cut could take back.
        let readers = Readers::new(path, &options).gated_by(writer.durability());
        let store = SqliteStore {
            path: path.to_path_buf(),
            writer,
            readers,
            status_index_has_attempt,
            instance: Instance::this_process(),
            stopped: Default::default(),
            purge_cursor: AtomicI64::new(0),
            options,
        };
        let me = store.instance.clone();
        let gone = store.write(move |conn| instances::register(conn, &me))?;
        instances::log_gone(gone);
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
    /// interleave with another writer; `UNIQUE (tenant, idem_key)` backs it up.
    pub fn create_or_get(&self, new: NewCall) -> Result<Created, StoreError> {
        let retention = self.options.retention;
        // Behind completions: new work never delays finishing accepted work.
        let created = self.write_in(Lane::Behind, sql::create_or_get_op(new))?;
        Ok(created.map(|c| retention.stamp(c)))
    }

    /// `create_or_get` whose new call is inserted already `running` under a
    /// lease for `owner`, its `created` and `claimed` rows in the same
    /// transaction: one writer operation instead of a create and a claim.
    pub fn create_claimed(
        &self,
        new: NewCall,
        owner: &str,
        lease: Duration,
    ) -> Result<CreatedClaimed, StoreError> {
        let retention = self.options.retention;
        let op = sql::create_claimed_op(new, owner.to_string(), lease);
        let CreatedClaimed { created, lease } = self.write_in(Lane::Behind, op)?;
        Ok(CreatedClaimed {
            created: created.map(|c| retention.stamp(c)),
            lease,
        })
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

    /// Claim due calls within `limits`, oldest first, in one writer
    /// operation: the scan and the conditional updates share its
    /// transaction, so the per-tool limits hold (no other writer claims in
    /// between). Calls of a tool with no slot left are read past, within the
    /// first `SCAN_PAST_CAPPED` due calls — the window the runner listed
    /// before it claimed in one operation; beyond it they wait for a later
    /// poll, never over a cap.
    pub fn claim_due_within(
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
        self.write(move |conn| {
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
        })
    }

    /// Return `running` calls whose lease has expired, or whose owner's process
    /// is gone, to `pending`, and name them. A live owner's leases are left
    /// alone: it may still be executing (another process on the same file),
    /// and the effect would then run twice; so are `running_here`, the
    /// leases this process's workers hold now, even lapsed.
    pub fn recover(&self, running_here: &[LeaseHeld]) -> Result<Vec<String>, StoreError> {
        if !self.read(instances::has_reclaimable)? {
            return Ok(Vec::new());
        }
        let me = self.instance.clone();
        let running_here = running_here.to_vec();
        self.write(move |conn| instances::recover_expired(conn, &me, &running_here))
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
                Some(_) => Some(report_reads::audit_timeline(conn, call_id)?),
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
    /// now, and whether the writer can still write: never again after a
    /// failed sync (an orchestrator should restart the process), and not
    /// while it is stuck with work queued.
    pub fn health(&self) -> Health {
        let database = report_reads::fresh_read(&self.path).map_err(|e| e.to_string());
        if let Some(failed) = self.writer.failure() {
            let writer = Err(format!("{failed}; restart the process to write again"));
            return Health { database, writer };
        }
        let writer = match self.writer.stuck_for() {
            Some((stuck, queued)) if stuck > WRITER_STUCK_AFTER => Err(format!(
                "stuck for {:.1} s with {queued} operations queued",
                stuck.as_secs_f64()
            )),
            _ => Ok(()),
        };
        Health { database, writer }
    }

    /// Set once a sync of the WAL failed; never cleared.
    pub fn write_failure(&self) -> Option<StoreError> {
        self.writer.failure()
    }

    /// Calls by status and the oldest pending call, in one read (a scrape).
    pub fn backlog(&self) -> Result<Backlog, StoreError> {
        self.read(|conn| {
            let snapshot = conn.unchecked_transaction()?;
            let backlog = report_reads::backlog(conn)?;
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
                Scope::Tenant(tenant) => report_reads::count_tenant_calls(conn, tenant)?,
                Scope::All if self.status_index_has_attempt => {
                    sql::count_calls_in_status_index(conn)?
                }
                Scope::All => sql::count_calls_in_table(conn)?,
            };
            let effects = match scope {
                Scope::Tenant(tenant) => report_reads::count_tenant_effects(conn, tenant)?,
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
    pub(super) fn write<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        self.write_in(Lane::First, op)
    }

    /// `write`, in `lane`: creations go `Behind`, so completions are never
    /// queued behind new work.
    pub(super) fn write_in<T, F>(&self, lane: Lane, op: F) -> Result<T, StoreError>
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
    pub(super) fn read<T>(
        &self,
        op: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        self.readers.read(op)
    }
}

impl SqliteStore {
    /// See `CallStore::verify_until`. The check opens the file itself
    /// (read-only); what it saw is then gated like any read (`syncer`).
    pub fn verify_until(
        &self,
        effect_tools: &[&str],
        deadline: Instant,
    ) -> Result<Report, VerifyError> {
        let report = verify::verify_within(&self.path, effect_tools, deadline)?;
        // At least a moment for the sync in flight, even at the deadline.
        let left = deadline.saturating_duration_since(Instant::now());
        self.writer
            .durability()
            .wait_until_visible_is_synced(left.max(Duration::from_secs(1)))
            .map_err(VerifyError::NotDurable)?;
        Ok(report)
    }
}
