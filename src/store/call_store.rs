//! The facade: `CallStore` holds the backend the database names behind the
//! `Backend` contract, so the rest of the crate calls one type whichever
//! backend it runs on. It adds only what is the same on both: each call it
//! hands out is stamped with its `expires_at` here, once, and the
//! conveniences (`claim`, `claim_due`, a create with no business key) are
//! built on the contract's methods. Each rule is stated once, on `Backend`.
//!
//! This file never speaks SQL, names neither backend, and never lets a
//! backend's type out.

use super::approval::{Approval, Decided, Decision, Delivery, Notification, Waiting};
use super::backend::Backend;
use super::bulk_job::{BulkJob, JobCreated, NewBulkJob, Step};
use super::business_key::{BusinessKey, Guarded, IntentLedger};
use super::cancel::Cancel;
use super::counts::Counts;
use super::database::DatabaseRef;
use super::error::StoreError;
use super::instance::{Instance, Node};
use super::limits::{LimitedClaim, ToolLimit};
use super::list::{ListPage, ListQuery, Total};
use super::model::{
    AuditEvent, Backlog, Call, CallProgress, Completion, Created, CreatedClaimed, DueCall, Health,
    Lease, LeaseHeld, NewCall, NewEffect, Purged, Retention, RetryDelay, Scope, Stats, Then,
    ToolAtRelease,
};
use super::operator::{Effect, StepPlan};
use super::options::{DueLimits, StoreOptions};
use super::paused::{PausedTool, Toggled};
use super::readings::Reading;
use super::rerun::{Rerun, RerunRequest};
use super::verify::{Report, VerifyError};
use super::wake::WakeHandler;
use crate::metrics::Metrics;
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The call store, on whichever backend the database names. Cheap to share
/// behind an `Arc`.
pub struct CallStore {
    backend: Box<dyn Backend>,
    /// Stamps `expires_at` on every call handed out.
    retention: Retention,
}

impl CallStore {
    /// Open the database (a SQLite file, created if absent, or a PostgreSQL
    /// database), bring its schema up to date, and register this process.
    pub fn open<D: DatabaseRef + ?Sized>(
        db: &D,
        options: StoreOptions,
    ) -> Result<Arc<CallStore>, StoreError> {
        let retention = options.retention;
        let backend = super::open_backend(&db.to_database(), options)?;
        Ok(Arc::new(CallStore { backend, retention }))
    }

    /// The backend itself, for the tests that reach into it.
    #[cfg(test)]
    pub(in crate::store) fn backend(&self) -> &dyn Backend {
        &*self.backend
    }

    /// `sqlite` or `postgres`, for logs and the bench.
    pub fn backend_name(&self) -> &'static str {
        self.backend.name()
    }

    /// `Backend::report_to`.
    pub fn report_to(&self, metrics: Arc<Metrics>) {
        self.backend.report_to(metrics)
    }

    /// How long terminal calls are kept.
    pub fn retention(&self) -> Retention {
        self.retention
    }

    /// `Backend::instance`.
    pub fn instance(&self) -> &Instance {
        self.backend.instance()
    }

    /// `Backend::heartbeat`.
    pub fn heartbeat(&self) -> Result<(), StoreError> {
        self.backend.heartbeat()
    }

    /// `Backend::on_wake`.
    pub fn on_wake_from_other_nodes(&self, handler: WakeHandler) {
        self.backend.on_wake(handler)
    }

    /// `Backend::stop`.
    pub fn stop(&self) {
        self.backend.stop()
    }

    /// `Backend::create_or_get`.
    pub fn create_or_get(&self, new: NewCall) -> Result<Created, StoreError> {
        Ok(self.backend.create_or_get(new)?.map(|c| self.stamp(c)))
    }

    /// `create_or_get`, guarded by `key` when the tool has one
    /// (`Backend::create_or_get_guarded`).
    pub fn create_or_get_guarded(
        &self,
        new: NewCall,
        key: Option<BusinessKey>,
    ) -> Result<Guarded, StoreError> {
        let Some(key) = key else {
            return self.create_or_get(new).map(Guarded::Created);
        };
        let guarded = self.backend.create_or_get_guarded(new, key)?;
        Ok(guarded.map(|c| self.stamp(c)))
    }

    /// `Backend::create_claimed`; a gated call (it waits for a decision)
    /// is created as `create_or_get` creates it, with no lease.
    pub fn create_claimed(
        &self,
        new: NewCall,
        owner: &str,
        lease: Duration,
    ) -> Result<CreatedClaimed, StoreError> {
        if new.gate.is_some() {
            let created = self.create_or_get(new)?;
            return Ok(CreatedClaimed {
                created,
                lease: None,
            });
        }
        let CreatedClaimed { created, lease } = self.backend.create_claimed(new, owner, lease)?;
        Ok(CreatedClaimed {
            created: created.map(|c| self.stamp(c)),
            lease,
        })
    }

    /// Take the lease on one call for one attempt (`claim_many`).
    pub fn claim(
        &self,
        call_id: &str,
        owner: &str,
        lease: Duration,
    ) -> Result<Option<Lease>, StoreError> {
        let mut leases = self.claim_many(&[call_id.to_string()], owner, lease)?;
        Ok(leases.pop().flatten())
    }

    /// `Backend::claim_many`.
    pub fn claim_many(
        &self,
        call_ids: &[String],
        owner: &str,
        lease: Duration,
    ) -> Result<Vec<Option<Lease>>, StoreError> {
        self.backend.claim_many(call_ids, owner, lease)
    }

    /// Claim up to `limit` due calls of any tool (`claim_due_within`).
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

    /// `Backend::claim_due_within`.
    pub fn claim_due_within(
        &self,
        limits: &DueLimits,
        owner: &str,
        lease: Duration,
    ) -> Result<Vec<Lease>, StoreError> {
        self.backend.claim_due_within(limits, owner, lease)
    }

    /// `Backend::limits_in_database`.
    pub fn limits_in_database(&self) -> Vec<ToolLimit> {
        self.backend.limits_in_database()
    }

    /// `Backend::claim_limited`.
    pub fn claim_limited(
        &self,
        limits: &DueLimits,
        owner: &str,
        lease: Duration,
    ) -> Result<LimitedClaim, StoreError> {
        self.backend.claim_limited(limits, owner, lease)
    }

    /// `Backend::succeed_then`.
    pub fn succeed_then(
        &self,
        lease: &Lease,
        result: &Value,
        effect: Option<NewEffect>,
        then: Then<Completion>,
    ) {
        self.backend.succeed_then(lease, result, effect, then)
    }

    /// `Backend::fail_then`.
    pub fn fail_then(&self, lease: &Lease, error: &Value, then: Then<Completion>) {
        self.backend.fail_then(lease, error, then)
    }

    /// `Backend::retry_later_then`.
    pub fn retry_later_then(
        &self,
        lease: &Lease,
        error: &Value,
        delay: impl Into<RetryDelay>,
        then: Then<Completion>,
    ) {
        self.backend
            .retry_later_then(lease, error, delay.into(), then)
    }

    /// `Backend::extend`, storing no progress.
    pub fn extend(&self, leases: &[Lease], lease: Duration) -> Result<Vec<bool>, StoreError> {
        self.backend.extend(leases, &[], lease)
    }

    /// `Backend::extend`, storing each lease's last progress with it.
    pub fn extend_reporting(
        &self,
        leases: &[Lease],
        progress: &[Option<CallProgress>],
        lease: Duration,
    ) -> Result<Vec<bool>, StoreError> {
        self.backend.extend(leases, progress, lease)
    }

    /// `Backend::note_replay_by_content`.
    pub fn note_replay_by_content(
        &self,
        tenant: &str,
        call_id: &str,
        window_secs: u64,
    ) -> Result<bool, StoreError> {
        self.backend
            .note_replay_by_content(tenant, call_id, window_secs)
    }

    /// `Backend::note_input_answers`.
    pub fn note_input_answers(
        &self,
        tenant: &str,
        call_id: &str,
        fingerprint: &str,
        answers: &str,
    ) -> Result<bool, StoreError> {
        self.backend
            .note_input_answers(tenant, call_id, fingerprint, answers)
    }

    /// `Backend::release`.
    pub fn release(&self, lease: &Lease, tool: &ToolAtRelease) -> Result<Completion, StoreError> {
        self.backend.release(lease, tool)
    }

    /// `Backend::recover`.
    pub fn recover(&self, running_here: &[LeaseHeld]) -> Result<Vec<String>, StoreError> {
        self.backend.recover(running_here)
    }

    /// `Backend::cancel`.
    pub fn cancel(
        &self,
        tenant: &str,
        call_id: &str,
        reason: Option<&str>,
    ) -> Result<Cancel, StoreError> {
        let cancel = self.backend.cancel(tenant, call_id, reason)?;
        Ok(cancel.map(|c| self.stamp(c)))
    }

    /// `Backend::decide`.
    pub fn decide(
        &self,
        tenant: Option<&str>,
        call_id: &str,
        decision: &Decision,
    ) -> Result<Decided, StoreError> {
        let decided = self.backend.decide(tenant, call_id, decision)?;
        Ok(decided.map(|c| self.stamp(c)))
    }

    /// `Backend::approval`.
    pub fn approval(
        &self,
        tenant: Option<&str>,
        call_id: &str,
    ) -> Result<Option<Approval>, StoreError> {
        self.backend.approval(tenant, call_id)
    }

    /// `Backend::waiting`.
    pub fn waiting(
        &self,
        tenant: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Waiting>, StoreError> {
        let waiting = self.backend.waiting(tenant, after, limit)?;
        Ok(waiting
            .into_iter()
            .map(|w| Waiting {
                call: self.stamp(w.call),
                approval: w.approval,
            })
            .collect())
    }

    /// `Backend::expire_approvals`.
    pub fn expire_approvals(&self, limit: usize) -> Result<Vec<Call>, StoreError> {
        let ended = self.backend.expire_approvals(limit)?;
        Ok(ended.into_iter().map(|c| self.stamp(c)).collect())
    }

    /// `Backend::take_notifications`.
    pub fn take_notifications(
        &self,
        limit: usize,
        hold: Duration,
    ) -> Result<Vec<Notification>, StoreError> {
        self.backend.take_notifications(limit, hold)
    }

    /// `Backend::settle_notification`.
    pub fn settle_notification(
        &self,
        msg_id: &str,
        attempts: i64,
        delivery: Delivery,
    ) -> Result<(), StoreError> {
        self.backend.settle_notification(msg_id, attempts, delivery)
    }

    /// `Backend::stopped_then`.
    pub fn stopped_then(&self, lease: &Lease, sent: bool, how: &str, then: Then<Completion>) {
        self.backend.stopped_then(lease, sent, how, then)
    }

    /// `Backend::cancels_asked`.
    pub fn cancels_asked(&self, running: &[LeaseHeld]) -> Result<Vec<LeaseHeld>, StoreError> {
        if running.is_empty() {
            return Ok(Vec::new());
        }
        self.backend.cancels_asked(running)
    }

    /// `Backend::due_calls`.
    pub fn due_calls(&self, limit: usize) -> Result<Vec<DueCall>, StoreError> {
        self.backend.due_calls(limit)
    }

    /// `Backend::get`.
    pub fn get(&self, call_id: &str) -> Result<Option<Call>, StoreError> {
        Ok(self.backend.get(call_id)?.map(|c| self.stamp(c)))
    }

    /// `Backend::get_for`.
    pub fn get_for(&self, tenant: &str, call_id: &str) -> Result<Option<Call>, StoreError> {
        Ok(self
            .backend
            .get_for(tenant, call_id)?
            .map(|c| self.stamp(c)))
    }

    /// `Backend::find_by_key`.
    pub fn find_by_key(&self, tenant: &str, idem_key: &str) -> Result<Option<Call>, StoreError> {
        let call = self.backend.find_by_key(tenant, idem_key)?;
        Ok(call.map(|c| self.stamp(c)))
    }

    /// `Backend::audit_for`.
    pub fn audit_for(
        &self,
        tenant: &str,
        call_id: &str,
    ) -> Result<Option<Vec<AuditEvent>>, StoreError> {
        self.backend.audit_for(tenant, call_id)
    }

    /// `Backend::purge_expired`.
    pub fn purge_expired(&self, limit: usize) -> Result<Vec<Purged>, StoreError> {
        self.backend.purge_expired(limit)
    }

    /// `Backend::health`.
    pub fn health(&self) -> Health {
        self.backend.health()
    }

    /// `Backend::write_failure`.
    pub fn write_failure(&self) -> Option<StoreError> {
        self.backend.write_failure()
    }

    /// `Backend::backlog`.
    pub fn backlog(&self) -> Result<Backlog, StoreError> {
        self.backend.backlog()
    }

    /// `Backend::stats`.
    pub fn stats(&self, scope: Scope<'_>) -> Result<Stats, StoreError> {
        self.backend.stats(scope)
    }

    /// `Backend::counts`.
    pub fn counts(&self, scope: Scope<'_>) -> Result<Counts, StoreError> {
        self.backend.counts(scope)
    }

    /// `Backend::list`, each call stamped.
    pub fn list(&self, query: &ListQuery) -> Result<ListPage, StoreError> {
        let mut page = self.backend.list(query)?;
        page.calls = page.calls.into_iter().map(|c| self.stamp(c)).collect();
        Ok(page)
    }

    /// `Backend::nodes`.
    pub fn nodes(&self) -> Result<Vec<Node>, StoreError> {
        self.backend.nodes()
    }

    /// `Backend::intent_ledger`.
    pub fn intent_ledger(&self, limit: usize) -> Result<Vec<IntentLedger>, StoreError> {
        self.backend.intent_ledger(limit)
    }

    /// `call` as handed out: with when it may be purged.
    fn stamp(&self, call: Call) -> Call {
        self.retention.stamp(call)
    }
}

/// `Operator`'s methods (re-run, pause, bulk jobs, totals, readings),
/// each a pass-through but for the stamping of calls and the retention a
/// re-run is held to.
impl CallStore {
    /// `Operator::rerun`, within this store's retention (`--key-ttl`).
    pub fn rerun(&self, mut request: RerunRequest) -> Result<Rerun, StoreError> {
        request.key_ttl = self.retention.key_ttl.map(|t| t.as_secs_f64());
        Ok(self.backend.rerun(&request)?.map(|c| self.stamp(c)))
    }

    /// `Operator::pause_tool`.
    pub fn pause_tool(
        &self,
        tool: &str,
        by: &str,
        reason: Option<&str>,
    ) -> Result<Toggled, StoreError> {
        self.backend.pause_tool(tool, by, reason)
    }

    /// `Operator::resume_tool`.
    pub fn resume_tool(&self, tool: &str) -> Result<Toggled, StoreError> {
        self.backend.resume_tool(tool)
    }

    /// `Operator::paused_tools`.
    pub fn paused_tools(&self) -> Result<Vec<PausedTool>, StoreError> {
        self.backend.paused_tools()
    }

    /// `Operator::create_job`.
    pub fn create_job(&self, new: NewBulkJob) -> Result<JobCreated, StoreError> {
        self.backend.create_job(new)
    }

    /// `Operator::job`.
    pub fn job(&self, tenant: Option<&str>, job_id: &str) -> Result<Option<BulkJob>, StoreError> {
        self.backend.job(tenant, job_id)
    }

    /// `Operator::claim_job`.
    pub fn claim_job(&self, owner: &str, lease: Duration) -> Result<Option<BulkJob>, StoreError> {
        self.backend.claim_job(owner, lease)
    }

    /// `Operator::job_step`.
    pub fn job_step(
        &self,
        job: &BulkJob,
        plan: &StepPlan,
        lease: Duration,
    ) -> Result<Option<Step>, StoreError> {
        self.backend.job_step(job, plan, lease)
    }

    /// `Operator::total`.
    pub fn total(&self, query: &ListQuery) -> Result<Total, StoreError> {
        self.backend.total(query)
    }

    /// `Operator::record_reading`.
    pub fn record_reading(&self, reading: &Reading) -> Result<bool, StoreError> {
        self.backend.record_reading(reading)
    }

    /// `Operator::readings_at`.
    pub fn readings_at(&self, points: &[f64]) -> Result<Vec<Option<Reading>>, StoreError> {
        self.backend.readings_at(points)
    }

    /// `Operator::effect`.
    pub fn effect(&self, call_id: &str) -> Result<Option<Effect>, StoreError> {
        self.backend.effect(call_id)
    }

    /// `Operator::purge_jobs`.
    pub fn purge_jobs(&self, before: f64, limit: usize) -> Result<usize, StoreError> {
        self.backend.purge_jobs(before, limit)
    }
}

impl CallStore {
    /// `Backend::verify_until`.
    pub fn verify_until(
        &self,
        effect_tools: &[&str],
        deadline: Instant,
    ) -> Result<Report, VerifyError> {
        self.backend.verify_until(effect_tools, deadline)
    }
}
