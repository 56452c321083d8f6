//! The PostgreSQL backend behind `CallStore`, for several service nodes on
//! one database. Every operation runs on the calling thread, on a pooled
//! connection (`pool`), and most are one statement (`sql`) — a transition,
//! its audit row and its effect committed together in one round trip.
//!
//! Map: `pool` (at most `--db-pool` connections, broken ones replaced),
//! `tls` (rustls for `sslmode`), `error` (SQLSTATE → `Unavailable` or
//! `Internal`), `schema` (DDL and migrations under an advisory lock), `sql`
//! (the state machine), `instances` (heartbeats and recovery), `retention`
//! (key purge), `report_reads` (audit, health), `counts` (the count tables,
//! sharded by backend, and their fold), `list` (the list's statements),
//! `bulk` (the bench's loader), `verify`
//! (the offline checker's queries), `business_key` (one live call per
//! business key, schema step 2), `listen` (`LISTEN`/`NOTIFY` wake-ups
//! between the nodes). `open` is the wing's one entry point; `PgStore`
//! implements `Backend`.
//!
//! The guarantees are `Backend`'s, as on SQLite, with these differences:
//! there is no writer thread and no group commit (PostgreSQL groups commits
//! itself), so `succeed_then` and friends commit before they return; lease
//! and heartbeat times are the database's; `claim_due` takes calls with
//! `FOR UPDATE SKIP LOCKED`, so nodes never queue on each other's rows.
//!
//! This module never holds a transaction open across anything but SQL,
//! imports nothing from the SQLite wing, and never lets a `postgres` type
//! out.

pub(super) mod bulk;
mod business_key;
mod counts;
mod error;
mod instances;
mod list;
mod listen;
mod pool;
mod report_reads;
mod retention;
mod schema;
mod sql;
#[cfg(test)]
mod tests;
mod tls;
#[cfg(test)]
mod tls_tests;
mod verify;

pub(super) use verify::{tools_outside, verify};

pub use list::{ALL_IDS, ALL_IDS_FILTERED, GROUP_IDS, GROUP_IDS_FILTERED, PREFIX_COUNT};
pub use schema::PG_SCHEMA_VERSION;

use super::audit::{self, Event};
use super::backend::Backend;
use super::business_key::{BusinessKey, Guarded, IntentLedger};
use super::counts::Counts;
use super::database::PgTarget;
use super::error::StoreError;
use super::instance::{Instance, Node};
use super::list::{ListPage, ListQuery};
use super::model::{
    AuditEvent, Backlog, Call, Completion, Created, CreatedClaimed, DueCall, Health, Lease,
    LeaseHeld, NewCall, NewEffect, Purged, Scope, Stats, Status, Then, WriterStats,
};
use super::options::{DueLimits, StoreOptions};
use super::wake::WakeHandler;
use ::postgres::IsolationLevel;
use pool::Pool;
use serde_json::Value;
use sql::Finish;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

struct PgStore {
    pool: Pool,
    options: StoreOptions,
    /// This node in `instances`; its workers' owner strings name it.
    instance: Instance,
    /// Set by `stop`: later operations are answered `Unavailable`.
    stopped: AtomicBool,
    /// Wake-ups to and from the other nodes on this database: announced
    /// after each commit of new pending work or of completions (`listen`).
    wake: listen::ClusterWake,
    /// Heartbeats since the count tables were last folded (`counts::fold`).
    beats_since_fold: AtomicU32,
}

/// How many heartbeats apart this node folds the count tables' rows of
/// closed connections (`counts::fold`).
const FOLD_EVERY_BEATS: u32 = 30;

/// Connect to the database `target` names, bring its schema up to date,
/// start the wake-up threads and register this node.
pub(super) fn open(
    target: &PgTarget,
    options: StoreOptions,
) -> Result<Box<dyn Backend>, StoreError> {
    Ok(Box::new(PgStore::open(target, options)?))
}

impl PgStore {
    fn open(target: &PgTarget, options: StoreOptions) -> Result<PgStore, StoreError> {
        let pool = Pool::new(
            target,
            options.pool_size,
            options.busy_timeout,
            options.ca_file.as_deref(),
        )?;
        let instance = Instance::this_process();
        let connect = listen::connector(target, options.ca_file.as_deref())?;
        let wake = listen::ClusterWake::start(connect, &instance.id)
            .map_err(|e| StoreError::internal(format!("start the LISTEN threads: {e}")))?;
        let store = PgStore {
            pool,
            options,
            instance,
            stopped: AtomicBool::new(false),
            wake,
            beats_since_fold: AtomicU32::new(0),
        };
        store.pool.with(|c| Ok(schema::migrate(c)))??;
        let me = store.instance.clone();
        let gone = store.run(|c| instances::register(c, &me))?;
        super::instance::log_gone(gone);
        Ok(store)
    }

    /// A fenced completion; a lost lease leaves only a `stale_completion`
    /// audit row.
    fn finish(&self, lease: &Lease, finish: &Finish<'_>) -> Result<Completion, StoreError> {
        let done = self.run(|c| {
            if sql::finish_fenced(c, lease, finish)? {
                return Ok(Completion::Applied);
            }
            sql::audit_stale(c, lease, finish.event)?;
            Ok(Completion::Stale)
        })?;
        if done == Completion::Applied {
            self.wake.announce_done([lease.call_id.as_str()]);
        }
        Ok(done)
    }

    /// After a commit that made calls claimable again.
    fn announce_work_if(&self, made_work: bool) {
        if made_work {
            self.wake.announce_work();
        }
    }

    /// Connections open now (idle or lent), for the tests of the pool.
    #[cfg(test)]
    pub(in crate::store) fn connections(&self) -> usize {
        self.pool.open()
    }

    /// Run `op` on a pooled connection, in autocommit: each statement is its
    /// own transaction, committed (durably: `synchronous_commit = on`) before
    /// it returns.
    fn run<T>(
        &self,
        op: impl FnOnce(&mut ::postgres::Client) -> Result<T, ::postgres::Error>,
    ) -> Result<T, StoreError> {
        if self.stopped.load(Ordering::SeqCst) {
            return Err(StoreError::unavailable("the store is stopping"));
        }
        self.pool.with(op)
    }

    /// Run `op` in one read-only REPEATABLE READ transaction: several reads
    /// that describe one moment.
    fn snapshot<T>(
        &self,
        op: impl FnOnce(&mut ::postgres::Transaction<'_>) -> Result<T, ::postgres::Error>,
    ) -> Result<T, StoreError> {
        self.run(|c| {
            let mut tx = c
                .build_transaction()
                .isolation_level(IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()?;
            let out = op(&mut tx)?;
            tx.commit()?;
            Ok(out)
        })
    }
}

impl Backend for PgStore {
    fn name(&self) -> &'static str {
        "postgres"
    }

    fn instance(&self) -> &Instance {
        &self.instance
    }

    /// And, every `FOLD_EVERY_BEATS`, the count tables' fold.
    fn heartbeat(&self) -> Result<(), StoreError> {
        self.run(|c| instances::heartbeat(c, &self.instance))?;
        if self.beats_since_fold.fetch_add(1, Ordering::Relaxed) + 1 >= FOLD_EVERY_BEATS {
            self.beats_since_fold.store(0, Ordering::Relaxed);
            self.run(counts::fold)?;
        }
        Ok(())
    }

    /// Mark this node stopped (the others reclaim its running calls at once),
    /// then refuse further operations and close idle connections.
    fn stop(&self) {
        if self.stopped.load(Ordering::SeqCst) {
            return;
        }
        // First: no wake-up may start work on a store that is stopping.
        self.wake.stop();
        if let Err(e) = self.run(|c| instances::mark_stopped(c, &self.instance.id)) {
            crate::log::warn("could not mark this process stopped")
                .event("mark_stopped_failed")
                .cause(&e)
                .emit();
        }
        self.stopped.store(true, Ordering::SeqCst);
        self.pool.close_idle();
    }

    /// Wake-ups from the other nodes arrive by `LISTEN` (`listen`).
    fn on_wake(&self, handler: WakeHandler) {
        self.wake.set_handler(handler);
    }

    fn create_or_get(&self, new: NewCall) -> Result<Created, StoreError> {
        let created = self.run(|c| sql::create_or_get(c, &new))?;
        if matches!(created, Created::New(_) | Created::RetryReset(_)) {
            self.wake.announce_work();
        }
        Ok(created)
    }

    fn create_or_get_guarded(&self, new: NewCall, key: BusinessKey) -> Result<Guarded, StoreError> {
        self.run(|client| business_key::create_or_get(client, &new, &key))
    }

    /// A new call is running here already: no other node needs waking for
    /// it (a reset one is `pending` as from `create_or_get`, and does).
    fn create_claimed(
        &self,
        new: NewCall,
        owner: &str,
        lease: Duration,
    ) -> Result<CreatedClaimed, StoreError> {
        let claimed = self.run(|c| sql::create_claimed(c, &new, owner, lease.as_secs_f64()))?;
        if matches!(claimed.created, Created::RetryReset(_)) {
            self.wake.announce_work();
        }
        Ok(claimed)
    }

    fn claim_many(
        &self,
        call_ids: &[String],
        owner: &str,
        lease: Duration,
    ) -> Result<Vec<Option<Lease>>, StoreError> {
        let won = self.run(|c| sql::claim_named(c, call_ids, owner, lease.as_secs_f64()))?;
        Ok(call_ids
            .iter()
            .map(|id| won.iter().find(|l| &l.call_id == id).cloned())
            .collect())
    }

    fn claim_due_within(
        &self,
        limits: &DueLimits,
        owner: &str,
        lease: Duration,
    ) -> Result<Vec<Lease>, StoreError> {
        if limits.total == 0 {
            return Ok(Vec::new());
        }
        self.run(|c| sql::claim_due_within(c, limits, owner, lease.as_secs_f64()))
    }

    fn succeed_then(
        &self,
        lease: &Lease,
        result: &Value,
        effect: Option<NewEffect>,
        then: Then<Completion>,
    ) {
        let result = result.to_string();
        let finish = Finish {
            status: Status::Succeeded,
            result_json: Some(&result),
            error_json: None,
            effect: effect.map(|e| (e.amount, e.detail.map(|d| d.to_string()))),
            event: Event::Succeeded,
            detail: &lease.effect_id,
        };
        then(self.finish(lease, &finish))
    }

    fn fail_then(&self, lease: &Lease, error: &Value, then: Then<Completion>) {
        let error = error.to_string();
        let finish = Finish {
            status: Status::Failed,
            result_json: None,
            error_json: Some(&error),
            effect: None,
            event: Event::Failed,
            detail: &error,
        };
        then(self.finish(lease, &finish))
    }

    fn retry_later_then(
        &self,
        lease: &Lease,
        error: &Value,
        delay: Duration,
        then: Then<Completion>,
    ) {
        let code = error["code"].as_str().unwrap_or_default();
        let detail = audit::retry_scheduled(lease.attempt, code, delay);
        let error = error.to_string();
        then(
            self.run(|c| {
                if sql::retry_later(c, lease, &error, delay.as_secs_f64(), &detail)? {
                    return Ok(Completion::Applied);
                }
                sql::audit_stale(c, lease, Event::RetryScheduled)?;
                Ok(Completion::Stale)
            })
            .inspect(|done| self.announce_work_if(*done == Completion::Applied)),
        )
    }

    fn extend(&self, leases: &[Lease], lease: Duration) -> Result<Vec<bool>, StoreError> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let held = self.run(|c| sql::extend(c, leases, lease.as_secs_f64()))?;
        Ok(leases
            .iter()
            .map(|l| {
                held.iter()
                    .any(|(id, attempt)| id == &l.call_id && *attempt == l.attempt)
            })
            .collect())
    }

    fn release(&self, lease: &Lease) -> Result<Completion, StoreError> {
        let released = self.run(|c| sql::release(c, lease))?;
        self.announce_work_if(released);
        Ok(match released {
            true => Completion::Applied,
            false => Completion::Stale,
        })
    }

    fn recover(&self, running_here: &[LeaseHeld]) -> Result<Vec<String>, StoreError> {
        let recovered = self.run(|c| instances::recover(c, &self.instance, running_here))?;
        self.announce_work_if(!recovered.is_empty());
        Ok(recovered)
    }

    fn due_calls(&self, limit: usize) -> Result<Vec<DueCall>, StoreError> {
        self.run(|c| sql::due_calls(c, limit))
    }

    fn get(&self, call_id: &str) -> Result<Option<Call>, StoreError> {
        self.run(|c| sql::select_call(c, call_id))
    }

    fn get_for(&self, tenant: &str, call_id: &str) -> Result<Option<Call>, StoreError> {
        self.run(|c| sql::select_tenant_call(c, tenant, call_id))
    }

    fn find_by_key(&self, tenant: &str, idem_key: &str) -> Result<Option<Call>, StoreError> {
        self.run(|c| sql::select_call_by_key(c, tenant, idem_key))
    }

    fn audit_for(
        &self,
        tenant: &str,
        call_id: &str,
    ) -> Result<Option<Vec<AuditEvent>>, StoreError> {
        self.snapshot(|tx| match sql::select_tenant_call(tx, tenant, call_id)? {
            Some(_) => Ok(Some(report_reads::audit_timeline(tx, call_id)?)),
            None => Ok(None),
        })
    }

    fn purge_expired(&self, limit: usize) -> Result<Vec<Purged>, StoreError> {
        let Some(ttl) = self.options.retention.key_ttl else {
            return Ok(Vec::new());
        };
        self.run(|c| retention::purge(c, ttl.as_secs_f64(), limit))
    }

    /// `/healthz`: a read on a pooled connection (a broken one is replaced by
    /// a new one, so this also proves a connection can be made). No writer.
    fn health(&self) -> Health {
        let database = self
            .pool
            .with(report_reads::probe)
            .map_err(|e| e.to_string());
        Health {
            database,
            writer: Ok(()),
        }
    }

    fn backlog(&self) -> Result<Backlog, StoreError> {
        let counts = self.counts(Scope::All)?;
        Ok(Backlog {
            calls_by_status: counts.by_status(),
            oldest_pending_created_at: counts.oldest_pending_created_at,
        })
    }

    fn stats(&self, scope: Scope<'_>) -> Result<Stats, StoreError> {
        let counts = self.counts(scope)?;
        let effects = counts.effects;
        Ok(counts
            .call_counts()
            .into_stats(effects, WriterStats::default()))
    }

    fn counts(&self, scope: Scope<'_>) -> Result<Counts, StoreError> {
        self.snapshot(|tx| counts::counts(tx, scope))
    }

    /// The counts that plan it and the rows in one REPEATABLE READ snapshot.
    fn list(&self, query: &ListQuery) -> Result<ListPage, StoreError> {
        let scope = match &query.tenant {
            Some(tenant) => Scope::Tenant(tenant),
            None => Scope::All,
        };
        let rows = self.snapshot(|tx| {
            let counts = Counts {
                rows: counts::count_rows(tx, scope)?,
                ..Counts::default()
            };
            list::rows(tx, query, &query.plan(&counts))
        })?;
        Ok(query.page(rows))
    }

    fn nodes(&self) -> Result<Vec<Node>, StoreError> {
        self.snapshot(|tx| instances::nodes(tx))
    }

    fn intent_ledger(&self, limit: usize) -> Result<Vec<IntentLedger>, StoreError> {
        self.run(|client| business_key::ledger(client, limit))
    }
}
