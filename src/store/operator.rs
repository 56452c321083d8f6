//! `Operator`: the second contract both backends implement, beside
//! `Backend`: what an operator does to calls beyond their own path — re-run
//! one (`store::rerun`), pause a tool (`store::paused`), work a bulk job
//! (`store::bulk_job`) — and what the console reads besides a page of calls:
//! a filter's total and the overview's history (`store::readings`). Each
//! method's doc is the rule every backend keeps; each wing implements it in
//! its own `operator.rs`, so neither wing's `mod.rs` grows with it.
//!
//! Like `Backend`, every method takes and returns the store's own types.
//! This file never speaks SQL and imports neither wing.

use super::bulk_job::{BulkJob, JobCreated, NewBulkJob, Step};
use super::error::StoreError;
use super::list::{ListQuery, Total};
use super::paused::{PausedTool, Toggled};
use super::readings::Reading;
use super::rerun::{Rerun, RerunRequest};
use serde_json::{json, Value};
use std::time::Duration;

/// One batch of a bulk job, as its worker read it from the list: the calls
/// (id and tenant, newest first) and where the list goes on.
#[derive(Debug, Clone, PartialEq)]
pub struct StepPlan {
    pub calls: Vec<(String, String)>,
    /// The last of `calls`: the next batch is the list below it.
    pub cursor: Option<String>,
    /// The list has no more below `cursor`: the job is done after this.
    pub finished: bool,
    /// The job reached its `max_calls` with calls left: done, truncated.
    pub truncated: bool,
}

pub(in crate::store) trait Operator {
    /// Re-run a call by `store::rerun`'s rules, in one transaction: read in
    /// the request's scope (another tenant's call reads as absent), refused
    /// with nothing changed unless it is `failed` or `cancelled`, within its
    /// retention, and its business key free; else back to `pending` by one
    /// conditional update with its `rerun` audit row. A backend that can
    /// reach the other nodes tells them there is work.
    fn rerun(&self, request: &RerunRequest) -> Result<Rerun, StoreError>;

    /// Pause `tool` (a row of `paused_tools`: when, by whom, why). From its
    /// commit on, no claim of any process takes a call of it, and no create
    /// makes one already claimed; its calls are still created, `pending`.
    /// Idempotent: a second pause finds the first (`Already`).
    fn pause_tool(&self, tool: &str, by: &str, reason: Option<&str>)
        -> Result<Toggled, StoreError>;

    /// Resume `tool`: its row goes, and its calls are claimable again,
    /// oldest first; a backend that can reach the other nodes tells them
    /// there is work. Idempotent (`Already` when it was not paused).
    fn resume_tool(&self, tool: &str) -> Result<Toggled, StoreError>;

    /// Every paused tool, by name.
    fn paused_tools(&self) -> Result<Vec<PausedTool>, StoreError>;

    /// Create a bulk job under its tenant's key, or find the key's job:
    /// `UNIQUE (tenant, idem_key)` decides; the same fingerprint is
    /// `Existing`, another is `Conflict`. A new job is `running`, with no
    /// cursor and no owner.
    fn create_job(&self, new: NewBulkJob) -> Result<JobCreated, StoreError>;

    /// A job by id, in `tenant`'s scope (`None`: any tenant's): another
    /// tenant's job reads as absent.
    fn job(&self, tenant: Option<&str>, job_id: &str) -> Result<Option<BulkJob>, StoreError>;

    /// Take the oldest `running` job whose lease is free or lapsed, for
    /// `owner` until `lease` from now, counting the claim (`claims`). Only
    /// one claimer can win a job: a conditional update's row count decides
    /// (on PostgreSQL, a job another node is claiming is skipped).
    fn claim_job(&self, owner: &str, lease: Duration) -> Result<Option<BulkJob>, StoreError>;

    /// One batch of `job`, in ONE transaction, only while the job is still
    /// `running` under the claim `job.claims` (`None`: the lease was lost,
    /// nothing changed): each call of `plan` gets the job's action by its
    /// rules (audited as by the job), the job's counts and cursor move, its
    /// state becomes `done` when `plan` says so, and its lease is renewed
    /// for `lease`. So no call is acted on twice by one job, whoever works
    /// it after a crash.
    fn job_step(
        &self,
        job: &BulkJob,
        plan: &StepPlan,
        lease: Duration,
    ) -> Result<Option<Step>, StoreError>;

    /// How many calls `query` matches, counted by its plan's indexes up to
    /// `list::TOTAL_CAP` (exact from the count table when the plan reads
    /// whole groups, however many).
    fn total(&self, query: &ListQuery) -> Result<Total, StoreError>;

    /// Keep `reading` (unless another process kept one within half of
    /// `readings::READING_EVERY` of it), and let go of the readings
    /// `readings::kept` no longer keeps. Returns whether it was kept.
    fn record_reading(&self, reading: &Reading) -> Result<bool, StoreError>;

    /// For each of `points` (seconds), the last reading taken at or before
    /// it, in one read.
    fn readings_at(&self, points: &[f64]) -> Result<Vec<Option<Reading>>, StoreError>;

    /// Delete `done` bulk jobs that finished before `before`, at most
    /// `limit`; how many went.
    fn purge_jobs(&self, before: f64, limit: usize) -> Result<usize, StoreError>;

    /// The effect row of `call_id`, if its call succeeded with one (the
    /// caller has checked the call is the tenant's).
    fn effect(&self, call_id: &str) -> Result<Option<Effect>, StoreError>;
}

/// One row of `effects`: what a success recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct Effect {
    pub effect_id: String,
    pub tool: String,
    pub amount: Option<i64>,
    /// What the downstream said (its status and a body excerpt, or a
    /// command's exit), as the tool recorded it.
    pub detail: Option<Value>,
    pub created_at: f64,
}

impl Effect {
    pub fn to_json(&self) -> Value {
        json!({
            "effect_id": self.effect_id,
            "tool": self.tool,
            "amount": self.amount,
            "detail": self.detail,
            "created_at": self.created_at,
        })
    }
}
