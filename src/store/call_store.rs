//! The facade: `CallStore` hands each operation to the backend the database
//! names (`Backend::Sqlite` or `Backend::Postgres`), so the rest of the crate
//! calls one type whichever backend it runs on. Each method's doc states the
//! rule every backend keeps; the statements live in the backends.
//!
//! This file never speaks SQL itself and never lets a backend's type out.

use super::database::{Database, DatabaseRef};
use super::error::StoreError;
use super::instances::Instance;
use super::model::{
    AuditEvent, Backlog, Call, Completion, Created, CreatedClaimed, DueCall, Health, Lease,
    LeaseHeld, NewCall, NewEffect, Purged, Retention, Scope, Stats,
};
use super::options::{DueLimits, StoreOptions};
use super::postgres::listen::Handler as WakeHandler;
use super::postgres::PgStore;
use super::sqlite::SqliteStore;
use super::verify::{Report, VerifyError};
use super::writer::Then;
use crate::metrics::Metrics;
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The call store, on whichever backend the database names. Cheap to share
/// behind an `Arc`.
pub struct CallStore {
    pub(in crate::store) backend: Backend,
}

pub(in crate::store) enum Backend {
    Sqlite(SqliteStore),
    Postgres(PgStore),
}

/// Hand an operation to the backend; both have the same method.
macro_rules! each {
    ($self:ident, $b:ident => $op:expr) => {
        match &$self.backend {
            Backend::Sqlite($b) => $op,
            Backend::Postgres($b) => $op,
        }
    };
}

impl CallStore {
    /// Open the database (a SQLite file, created if absent, or a PostgreSQL
    /// database), bring its schema up to date, and register this process.
    pub fn open<D: DatabaseRef + ?Sized>(
        db: &D,
        options: StoreOptions,
    ) -> Result<Arc<CallStore>, StoreError> {
        let backend = match db.to_database() {
            Database::Sqlite(path) => Backend::Sqlite(SqliteStore::open(&path, options)?),
            Database::Postgres(target) => Backend::Postgres(PgStore::open(&target, options)?),
        };
        Ok(Arc::new(CallStore { backend }))
    }

    /// The SQLite backend, for the tests that reach into its writer.
    #[cfg(test)]
    pub(in crate::store) fn sqlite(&self) -> &SqliteStore {
        match &self.backend {
            Backend::Sqlite(s) => s,
            Backend::Postgres(_) => panic!("a SQLite test opened a PostgreSQL store"),
        }
    }

    /// `sqlite` or `postgres`, for logs and the bench.
    pub fn backend_name(&self) -> &'static str {
        match self.backend {
            Backend::Sqlite(_) => "sqlite",
            Backend::Postgres(_) => "postgres",
        }
    }

    /// Report every write batch to `metrics` from now on.
    pub fn report_to(&self, metrics: Arc<Metrics>) {
        each!(self, b => b.report_to(metrics))
    }

    /// How long terminal calls are kept.
    pub fn retention(&self) -> Retention {
        each!(self, b => b.retention())
    }

    /// This process's instance: its id goes into every owner it writes.
    pub fn instance(&self) -> &Instance {
        each!(self, b => b.instance())
    }

    /// Tell other processes this one is alive (every `HEARTBEAT_EVERY`).
    pub fn heartbeat(&self) -> Result<(), StoreError> {
        each!(self, b => b.heartbeat())
    }

    /// What this process does when another node on the same database
    /// announces new pending work or completions (PostgreSQL's
    /// `LISTEN`/`NOTIFY`, see `postgres::listen`). SQLite has no such
    /// channel: there, polling alone finds another process's work.
    pub fn on_wake_from_other_nodes(&self, handler: WakeHandler) {
        match &self.backend {
            Backend::Sqlite(_) => {}
            Backend::Postgres(pg) => pg.on_wake(handler),
        }
    }

    /// Mark this instance stopped and commit every write already queued; later
    /// writes are answered `Unavailable`. Idempotent.
    pub fn stop(&self) {
        each!(self, b => b.stop())
    }

    /// Create the key's call, or return the one it already has, decided by
    /// the database's `UNIQUE (tenant, idem_key)`.
    pub fn create_or_get(&self, new: NewCall) -> Result<Created, StoreError> {
        each!(self, b => b.create_or_get(new))
    }

    /// `create_or_get` for a caller with a worker free to run the call at
    /// once: a new call is created already `running` — attempt 1, leased to
    /// `owner` for `lease` from the backend's clock, its `created` and
    /// `claimed` audit rows in the same transaction — and its lease comes
    /// back; the lease is fenced and recovered like any claim's. A known key
    /// is answered exactly as `create_or_get` answers it, with no lease.
    pub fn create_claimed(
        &self,
        new: NewCall,
        owner: &str,
        lease: Duration,
    ) -> Result<CreatedClaimed, StoreError> {
        each!(self, b => b.create_claimed(new, owner, lease))
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

    /// `claim` for several calls as one operation. Each call is still won or
    /// lost by its own conditional `UPDATE`; the answers come in the order of
    /// `call_ids`.
    pub fn claim_many(
        &self,
        call_ids: &[String],
        owner: &str,
        lease: Duration,
    ) -> Result<Vec<Option<Lease>>, StoreError> {
        each!(self, b => b.claim_many(call_ids, owner, lease))
    }

    /// Claim up to `limit` due calls (oldest first) in one operation, skipping
    /// calls another claimer holds at that moment rather than waiting for them
    /// (on PostgreSQL, `FOR UPDATE SKIP LOCKED`), so several nodes claiming at
    /// once each get different calls.
    pub fn claim_due(
        &self,
        limit: usize,
        owner: &str,
        lease: Duration,
    ) -> Result<Vec<Lease>, StoreError> {
        let limits = DueLimits {
            total: limit,
            per_tool: Vec::new(),
        };
        self.claim_due_within(&limits, owner, lease)
    }

    /// `claim_due` within `limits`: no more than `limits.total` calls, and
    /// of each tool `limits.per_tool` names no more than its number, still
    /// in one operation — what the runner's poll claims for its free workers
    /// and its capped tools' free slots.
    pub fn claim_due_within(
        &self,
        limits: &DueLimits,
        owner: &str,
        lease: Duration,
    ) -> Result<Vec<Lease>, StoreError> {
        each!(self, b => b.claim_due_within(limits, owner, lease))
    }

    /// Record success, fenced by the lease: the effect row (if the tool wrote
    /// one) and the `succeeded` update commit together, and only if this lease's
    /// attempt still owns the call. `effects.call_id UNIQUE` is the last gate:
    /// however many attempts succeed, one call has at most one effect. On
    /// SQLite it does not wait (the commit is grouped with others); `then`
    /// learns the outcome.
    pub fn succeed_then(
        &self,
        lease: &Lease,
        result: &Value,
        effect: Option<NewEffect>,
        then: Then<Completion>,
    ) {
        each!(self, b => b.succeed_then(lease, result, effect, then))
    }

    /// Record failure, fenced like `succeed_then`.
    pub fn fail_then(&self, lease: &Lease, error: &Value, then: Then<Completion>) {
        each!(self, b => b.fail_then(lease, error, then))
    }

    /// Record a retryable failure that has attempts left: the call returns to
    /// `pending`, not to be claimed for `delay` (`next_attempt_at`), audited
    /// `retry_scheduled`; fenced like `fail_then`.
    pub fn retry_later_then(
        &self,
        lease: &Lease,
        error: &Value,
        delay: Duration,
        then: Then<Completion>,
    ) {
        each!(self, b => b.retry_later_then(lease, error, delay, then))
    }

    /// Extend leases whose tools are still running to `lease` from now, each
    /// only while its call is `running` under the lease's attempt. Returns,
    /// in order, whether each lease is still held: `false` means it was lost
    /// (taken over after it expired, or released), and extending it must stop.
    pub fn extend(&self, leases: &[Lease], lease: Duration) -> Result<Vec<bool>, StoreError> {
        each!(self, b => b.extend(leases, lease))
    }

    /// Give back a lease whose tool is still running when this process stops:
    /// the call returns to `pending` (audited `released`) unless the lease was
    /// already lost, in which case nothing changes (`Stale`).
    pub fn release(&self, lease: &Lease) -> Result<Completion, StoreError> {
        each!(self, b => b.release(lease))
    }

    /// Return `running` calls whose lease has expired, or whose owner's process
    /// is gone, to `pending`, and name them. A live owner's leases are left
    /// alone: it may still be executing, and the effect would then run twice.
    /// So are `running_here`: the leases this process's own workers hold on
    /// tools running now, even once lapsed (a write stall let them lapse; the
    /// next extension renews them).
    pub fn recover(&self, running_here: &[LeaseHeld]) -> Result<Vec<String>, StoreError> {
        each!(self, b => b.recover(running_here))
    }

    /// Up to `limit` `pending` calls that may be claimed now (none whose
    /// automatic retry is scheduled for later), oldest first.
    pub fn due_calls(&self, limit: usize) -> Result<Vec<DueCall>, StoreError> {
        each!(self, b => b.due_calls(limit))
    }

    /// A call by id, whatever its tenant: for a caller that already holds
    /// the call (the wait loop), never for a tenant's lookup (`get_for`).
    pub fn get(&self, call_id: &str) -> Result<Option<Call>, StoreError> {
        each!(self, b => b.get(call_id))
    }

    /// `tenant`'s call by id; another tenant's reads as absent.
    pub fn get_for(&self, tenant: &str, call_id: &str) -> Result<Option<Call>, StoreError> {
        each!(self, b => b.get_for(tenant, call_id))
    }

    /// The key's call within `tenant`, as last committed: the fast path of a
    /// same-key retry (`idem_key` and `fingerprint` never change once written).
    pub fn find_by_key(&self, tenant: &str, idem_key: &str) -> Result<Option<Call>, StoreError> {
        each!(self, b => b.find_by_key(tenant, idem_key))
    }

    /// `tenant`'s call and its audit rows, oldest first, read in one
    /// snapshot; `None` when the tenant has no such call.
    pub fn audit_for(
        &self,
        tenant: &str,
        call_id: &str,
    ) -> Result<Option<Vec<AuditEvent>>, StoreError> {
        each!(self, b => b.audit_for(tenant, call_id))
    }

    /// Purge up to `limit` terminal calls whose last update is older than
    /// the retention's TTL (nothing when keys are kept forever). Returns what
    /// was purged.
    pub fn purge_expired(&self, limit: usize) -> Result<Vec<Purged>, StoreError> {
        each!(self, b => b.purge_expired(limit))
    }

    /// What `/healthz` reports: whether the database answers a fresh read now,
    /// and whether the writer (SQLite) is stuck with work queued.
    pub fn health(&self) -> Health {
        each!(self, b => b.health())
    }

    /// Why this process can never write again, if it cannot: a sync of
    /// SQLite's WAL failed (see `syncer`). PostgreSQL has no such state: a
    /// failed connection is replaced.
    pub fn write_failure(&self) -> Option<StoreError> {
        match &self.backend {
            Backend::Sqlite(b) => b.write_failure(),
            Backend::Postgres(_) => None,
        }
    }

    /// Calls by status and the oldest pending call, in one read (a scrape).
    pub fn backlog(&self) -> Result<Backlog, StoreError> {
        each!(self, b => b.backlog())
    }

    /// Every call's counts (`Scope::All`), or one tenant's.
    pub fn stats(&self, scope: Scope<'_>) -> Result<Stats, StoreError> {
        each!(self, b => b.stats(scope))
    }
}

impl CallStore {
    /// `verify` on this store's database (`GET /v1/verify`): read-only, one
    /// snapshot, on a connection of its own (never one that calls' reads or
    /// writes wait for), stopped at `deadline` (`VerifyError::TimedOut`). On
    /// SQLite the report is handed back only once every commit it could have
    /// seen is synced, like any read.
    pub fn verify_until(
        &self,
        effect_tools: &[&str],
        deadline: Instant,
    ) -> Result<Report, VerifyError> {
        each!(self, b => b.verify_until(effect_tools, deadline))
    }
}
