//! The PostgreSQL backend behind `CallStore`, for several service nodes on
//! one database. Every operation runs on the calling thread, on a pooled
//! connection (`pool`), and most are one statement (`sql`) — a transition,
//! its audit row and its effect committed together in one round trip.
//!
//! Map: `pool` (at most `--db-pool` connections, broken ones replaced,
//! every operation within `--db-timeout-ms`), `session` (one connection whose
//! every wait ends at a deadline), `connect` (the URL's hosts in turn, TCP
//! timeouts), `target` (a `--db` URL parsed into the client's settings),
//! `contact` (whether this node may judge others dead), `tls` (rustls for `sslmode`), `error` (SQLSTATE → `Unavailable` or
//! `Internal`), `schema` (DDL and migrations under an advisory lock), `sql`
//! (the state machine), `steps` (what its statements share: a call read by
//! id or key, a fresh call id), `instances` (heartbeats and recovery), `retention`
//! (key purge), `report_reads` (audit, health), `counts` (the count tables,
//! sharded by backend, and their fold), `list` (the list's statements),
//! `bulk` (the bench's loader), `verify`
//! (the offline checker's queries), `business_key` (one live call per
//! business key, schema step 2), `cancel` (cancelling, schema step 3),
//! `approval` (approval gates and the webhook outbox, schema step 6),
//! `limits` (a tool's `max_concurrency` and `rate` shared by every node,
//! schema step 4), `readings` (the overview's history, step 9), `paused`
//! (paused tools, step 10), `rerun`, `bulk_jobs` (step 11) and `operator`
//! (`Operator` on them), `home_schema` (`--db-schema` made, an earlier release's
//! tables moved into it), `listen` (`LISTEN`/`NOTIFY` wake-ups between the
//! nodes, a cancel's included). `open` is the wing's one entry point; `PgStore`
//! implements `Backend`. Its own tests: `tests` (several nodes, migrations,
//! faults) and `tls_tests` (each `sslmode` against a server with TLS).
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

mod approval;
#[cfg(any(test, feature = "testing"))]
pub(super) mod bulk;
mod bulk_jobs;
mod business_key;
mod cancel;
mod connect;
mod contact;
mod counts;
mod error;
mod home_schema;
mod instances;
mod limits;
mod list;
mod listen;
mod operator;
mod paused;
mod pool;
mod readings;
mod report_reads;
mod rerun;
mod retention;
mod schema;
mod session;
mod sql;
mod steps;
mod target;
#[cfg(test)]
mod tests;
mod tls;
#[cfg(test)]
mod tls_tests;
mod verify;

use verify::verify_on;
pub(super) use verify::{tools_outside, verify};

#[cfg(any(test, feature = "testing"))]
pub use list::{
    ALL_IDS, ALL_IDS_FILTERED, ERROR_IDS, ERROR_IDS_FILTERED, GROUP_IDS, GROUP_IDS_FILTERED,
    PREFIX_COUNT,
};
pub use schema::PG_SCHEMA_VERSION;
pub use target::{PgTarget, SslMode};

use super::approval::{Approval, Decided, Decision, Delivery, Notification, Verdict, Waiting};
use super::audit::{self, Event};
use super::backend::Backend;
use super::business_key::{BusinessKey, Guarded, IntentLedger};
use super::cancel::{cancel_with, Cancel};
use super::counts::Counts;
use super::error::StoreError;
use super::instance::{Instance, Node};
use super::limits::{LimitedClaim, ToolLimit};
use super::list::{ListPage, ListQuery};
use super::model::{
    AuditEvent, Backlog, Call, CallProgress, Completion, Created, CreatedClaimed, DueCall, Health,
    Lease, LeaseHeld, NewCall, NewEffect, Purged, RetryDelay, Scope, Stats, Then, ToolAtRelease,
    WriterStats,
};
use super::options::{DueLimits, StoreOptions};
use super::verify::{Report, VerifyError};
use super::wake::WakeHandler;
use crate::status::Status;
use pool::Pool;
use serde_json::Value;
use session::{Session, Transaction};
use sql::Finish;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// How long bringing the schema up to date may take: longer than an
/// operation, since nodes starting at once queue on the migration lock.
const MIGRATION_DEADLINE: Duration = Duration::from_secs(60);

/// How many times a cancel reads its call again after losing a race.
const CANCEL_TRIES: usize = 4;

/// A completion short of a success that its fence refused: if its call's
/// cancel was asked it ends `cancelled` (audited `detail`); otherwise the
/// lease was lost, and only a `stale_completion` row says so.
fn cancelled_or_stale(
    client: &mut Session,
    lease: &Lease,
    detail: &str,
    would_have: Event,
) -> Result<Completion, tokio_postgres::Error> {
    if would_have != Event::Succeeded
        && cancel::end_cancelled(client, &lease.call_id, lease.attempt, detail)?
    {
        return Ok(Completion::Cancelled);
    }
    sql::audit_stale(client, lease, would_have)?;
    Ok(Completion::Stale)
}

struct PgStore {
    pool: Pool,
    /// The database, for the sessions opened outside the pool (`verify`).
    target: PgTarget,
    options: StoreOptions,
    /// This node in `instances`; its workers' owner strings name it.
    instance: Instance,
    /// The tools whose `max_concurrency` and `rate` this database holds for
    /// every node (`limits`).
    limited: Vec<ToolLimit>,
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
        let ca_file = options.ca_file.as_deref();
        let timeouts = options.pg_timeouts;
        let pool = Pool::new(
            target,
            options.pool_size,
            options.busy_timeout,
            ca_file,
            &timeouts,
        )?;
        let instance = Instance::this_process();
        let connect = listen::connector(target, ca_file, &timeouts)?;
        let channel = target.schema().wake_channel();
        let wake = listen::ClusterWake::start(connect, channel, &instance.id, timeouts.operation)
            .map_err(|e| StoreError::internal(format!("start the LISTEN threads: {e}")))?;
        let limited: Vec<ToolLimit> = options
            .limits
            .iter()
            .filter(|l| l.held_by(true))
            .cloned()
            .collect();
        let store = PgStore {
            pool,
            target: target.clone(),
            options,
            limited,
            instance,
            stopped: AtomicBool::new(false),
            wake,
            beats_since_fold: AtomicU32::new(0),
        };
        let migrated_by = Instant::now() + MIGRATION_DEADLINE;
        store
            .pool
            .with_deadline(migrated_by, |c| Ok(schema::migrate(c, target.schema())))??;
        if !store.limited.is_empty() {
            store.run(|c| limits::declare(c, &store.limited))?;
        }
        let me = store.instance.clone();
        let gone = store.run(|c| instances::register(c, &me))?;
        super::instance::log_gone(gone);
        Ok(store)
    }

    /// A fenced completion; a lost lease leaves only a `stale_completion`
    /// audit row. One short of a success whose call's cancel was asked ends
    /// it `cancelled` instead, audited with `if_cancelled`.
    fn finish(
        &self,
        lease: &Lease,
        finish: &Finish<'_>,
        if_cancelled: &str,
    ) -> Result<Completion, StoreError> {
        let done = self.run(|c| {
            if sql::finish_fenced(c, lease, finish)?
                || sql::already_recorded(c, lease, finish.event)?
            {
                return Ok(Completion::Applied);
            }
            cancelled_or_stale(c, lease, if_cancelled, finish.event)
        })?;
        if done != Completion::Stale {
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

    /// After a completion that gave `lease`'s call back (`Applied`: it is
    /// claimable again) or ended it `cancelled` (its waiters may be here).
    fn announce(&self, lease: &Lease, done: Completion) {
        match done {
            Completion::Applied => self.wake.announce_work(),
            Completion::Cancelled => self.wake.announce_done([lease.call_id.as_str()]),
            Completion::Stale => {}
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
        op: impl FnOnce(&mut Session) -> Result<T, tokio_postgres::Error>,
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
        op: impl FnOnce(&mut Transaction<'_>) -> Result<T, tokio_postgres::Error>,
    ) -> Result<T, StoreError> {
        self.run(|c| {
            let mut tx = c.snapshot()?;
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

    fn limits_in_database(&self) -> Vec<ToolLimit> {
        self.limited.clone()
    }

    /// A short transaction of two statements under the tools' row locks.
    fn claim_limited(
        &self,
        limits: &DueLimits,
        owner: &str,
        lease: Duration,
    ) -> Result<LimitedClaim, StoreError> {
        let lease = lease.as_secs_f64();
        self.run(|c| limits::claim(c, &self.limited, limits, owner, lease))
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
        // A success's fence ignores a cancel: refused, its lease was lost.
        then(self.finish(lease, &finish, ""))
    }

    fn fail_then(&self, lease: &Lease, error: &Value, then: Then<Completion>) {
        let code = error["code"].as_str().unwrap_or_default();
        let if_cancelled = audit::ended_after_cancel(lease.attempt, code);
        let error = error.to_string();
        let finish = Finish {
            status: Status::Failed,
            result_json: None,
            error_json: Some(&error),
            effect: None,
            event: Event::Failed,
            detail: &error,
        };
        then(self.finish(lease, &finish, &if_cancelled))
    }

    fn retry_later_then(
        &self,
        lease: &Lease,
        error: &Value,
        delay: RetryDelay,
        then: Then<Completion>,
    ) {
        let code = error["code"].as_str().unwrap_or_default();
        let message = crate::input::clip(error["message"].as_str().unwrap_or_default());
        let detail = audit::retry_scheduled(lease.attempt, code, message, delay);
        let if_cancelled = audit::ended_after_cancel(lease.attempt, code);
        let error = error.to_string();
        then(
            self.run(|c| {
                if sql::retry_later(c, lease, &error, delay.delay.as_secs_f64(), &detail)?
                    || sql::already_recorded(c, lease, Event::RetryScheduled)?
                {
                    return Ok(Completion::Applied);
                }
                cancelled_or_stale(c, lease, &if_cancelled, Event::RetryScheduled)
            })
            .inspect(|done| self.announce(lease, *done)),
        )
    }

    fn extend(
        &self,
        leases: &[Lease],
        progress: &[Option<CallProgress>],
        lease: Duration,
    ) -> Result<Vec<bool>, StoreError> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let held = self.run(|c| sql::extend(c, leases, progress, lease.as_secs_f64()))?;
        Ok(leases
            .iter()
            .map(|l| {
                held.iter()
                    .any(|(id, attempt)| id == &l.call_id && *attempt == l.attempt)
            })
            .collect())
    }

    fn note_replay_by_content(
        &self,
        tenant: &str,
        call_id: &str,
        window_secs: u64,
    ) -> Result<bool, StoreError> {
        let detail = audit::replayed_by_content(window_secs);
        self.run(|c| sql::note_replay_by_content(c, tenant, call_id, &detail))
    }

    fn note_input_answers(
        &self,
        tenant: &str,
        call_id: &str,
        fingerprint: &str,
        answers: &str,
    ) -> Result<bool, StoreError> {
        self.run(|c| sql::note_input_answers(c, tenant, call_id, fingerprint, answers))
    }

    fn release(&self, lease: &Lease, tool: &ToolAtRelease) -> Result<Completion, StoreError> {
        let detail = audit::released(lease.attempt, tool);
        let released = self.run(|c| {
            if sql::release(c, lease, &detail)? {
                return Ok(Completion::Applied);
            }
            let detail = audit::released_after_cancel(lease.attempt);
            Ok(
                match cancel::end_cancelled(c, &lease.call_id, lease.attempt, &detail)? {
                    true => Completion::Cancelled,
                    false => Completion::Stale,
                },
            )
        })?;
        self.announce(lease, released);
        Ok(released)
    }

    fn recover(&self, running_here: &[LeaseHeld]) -> Result<Vec<String>, StoreError> {
        let judge = || self.pool.may_judge_others();
        let recovered = self.run(|c| instances::recover(c, &self.instance, running_here, judge))?;
        self.announce_work_if(!recovered.is_empty());
        Ok(recovered)
    }

    /// A lost race (a claim or a completion between the read and the
    /// update) reads again, a few times. A recorded request is announced at
    /// once, so the node that runs the call stops it without waiting for its
    /// next check (`cancels_asked`, every heartbeat).
    fn cancel(
        &self,
        tenant: &str,
        call_id: &str,
        reason: Option<&str>,
    ) -> Result<Cancel, StoreError> {
        let found = self.run(|client| {
            let mut steps = cancel::Steps {
                client,
                tenant,
                call_id,
                reason,
            };
            cancel_with(&mut steps, None, reason, CANCEL_TRIES)
        })?;
        match &found {
            Some(Cancel::Requested { now: true, .. }) => self.wake.announce_cancel(),
            Some(Cancel::Cancelled { now: true, .. }) => self.wake.announce_done([call_id]),
            _ => {}
        }
        found.ok_or_else(|| StoreError::unavailable("the call kept changing; cancel it again"))
    }

    /// One statement decides; an approved call is announced as new work,
    /// a denied one to its waiters.
    fn decide(
        &self,
        tenant: Option<&str>,
        call_id: &str,
        decision: &Decision,
    ) -> Result<Decided, StoreError> {
        let decided = self.run(|c| approval::decide(c, tenant, call_id, decision))?;
        if let Decided::Applied { call, .. } = &decided {
            match decision.verdict {
                Verdict::Approve => self.wake.announce_work(),
                Verdict::Deny => self.wake.announce_done([call.call_id.as_str()]),
            }
        }
        Ok(decided)
    }

    fn approval(
        &self,
        tenant: Option<&str>,
        call_id: &str,
    ) -> Result<Option<Approval>, StoreError> {
        self.run(|c| approval::approval(c, tenant, call_id))
    }

    fn waiting(
        &self,
        tenant: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Waiting>, StoreError> {
        self.run(|c| approval::waiting(c, tenant, after, limit))
    }

    fn expire_approvals(&self, limit: usize) -> Result<Vec<Call>, StoreError> {
        let ended = self.run(|c| approval::expire(c, limit))?;
        if !ended.is_empty() {
            self.wake
                .announce_done(ended.iter().map(|c| c.call_id.as_str()));
        }
        Ok(ended)
    }

    fn take_notifications(
        &self,
        limit: usize,
        hold: Duration,
    ) -> Result<Vec<Notification>, StoreError> {
        self.run(|c| approval::take(c, limit, hold))
    }

    fn settle_notification(
        &self,
        msg_id: &str,
        attempts: i64,
        delivery: Delivery,
    ) -> Result<(), StoreError> {
        self.run(|c| approval::settle(c, msg_id, attempts, delivery))
    }

    fn stopped_then(&self, lease: &Lease, sent: bool, how: &str, then: Then<Completion>) {
        let detail = audit::stopped(lease.attempt, sent, how);
        let done = self.run(|c| {
            if cancel::end_cancelled(c, &lease.call_id, lease.attempt, &detail)? {
                return Ok(Completion::Applied);
            }
            sql::audit_stale(c, lease, Event::Cancelled)?;
            Ok(Completion::Stale)
        });
        if let Ok(Completion::Applied) = done {
            self.wake.announce_done([lease.call_id.as_str()]);
        }
        then(done)
    }

    fn cancels_asked(&self, running: &[LeaseHeld]) -> Result<Vec<LeaseHeld>, StoreError> {
        self.run(|c| cancel::cancels_asked(c, running))
    }

    fn due_calls(&self, limit: usize) -> Result<Vec<DueCall>, StoreError> {
        self.run(|c| sql::due_calls(c, limit))
    }

    fn get(&self, call_id: &str) -> Result<Option<Call>, StoreError> {
        self.run(|c| steps::select_call(c, call_id))
    }

    fn get_for(&self, tenant: &str, call_id: &str) -> Result<Option<Call>, StoreError> {
        self.run(|c| steps::select_tenant_call(c, tenant, call_id))
    }

    fn find_by_key(&self, tenant: &str, idem_key: &str) -> Result<Option<Call>, StoreError> {
        self.run(|c| steps::select_call_by_key(c, tenant, idem_key))
    }

    fn audit_for(
        &self,
        tenant: &str,
        call_id: &str,
    ) -> Result<Option<Vec<AuditEvent>>, StoreError> {
        self.snapshot(|tx| match steps::select_tenant_call(tx, tenant, call_id)? {
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
        Ok(self.counts(Scope::All)?.backlog())
    }

    fn stats(&self, scope: Scope<'_>) -> Result<Stats, StoreError> {
        Ok(self.counts(scope)?.into_stats(WriterStats::default()))
    }

    fn counts(&self, scope: Scope<'_>) -> Result<Counts, StoreError> {
        self.snapshot(|tx| counts::counts(tx, scope))
    }

    /// The counts that plan it and the rows in one REPEATABLE READ snapshot.
    fn list(&self, query: &ListQuery) -> Result<ListPage, StoreError> {
        let scope = Scope::of(query.tenant.as_deref());
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

    /// On a connection opened for it, outside the pool (the URL's TLS and
    /// `--db-ca-file`), each statement bounded by what is left of the time. PostgreSQL answers a read only
    /// with committed (durable) rows, so no gate follows.
    fn verify_until(
        &self,
        effect_tools: &[&str],
        deadline: Instant,
    ) -> Result<Report, VerifyError> {
        let target = &self.target;
        let mut session = connect::connect_once(target, self.options.ca_file.as_deref())
            .map_err(|e| VerifyError::Postgres(target.to_string(), e))?;
        verify_on(&mut session, target, effect_tools, Some(deadline))
    }
}
