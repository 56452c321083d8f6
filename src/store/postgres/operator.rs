//! `Operator` on PostgreSQL: each method a statement or a short transaction
//! of its own on a pooled connection, on the statements of `rerun`,
//! `paused`, `bulk_jobs`, `readings` and `list`; what makes work for other
//! nodes (a re-run, a resume, a batch's cancels and re-runs) is announced
//! once it has committed. Kept apart from `mod.rs`, which holds `Backend`'s.

use super::super::bulk_job::{BulkJob, JobCreated, NewBulkJob, Step};
use super::super::counts::Counts;
use super::super::error::StoreError;
use super::super::list::{ListQuery, Total};
use super::super::model::Scope;
use super::super::operator::{Effect, Operator, StepPlan};
use super::super::paused::{PausedTool, Toggled};
use super::super::readings::Reading;
use super::super::rerun::{Rerun, RerunRequest};
use super::{bulk_jobs, counts, list, paused, readings, report_reads, rerun, PgStore};
use std::time::Duration;

impl Operator for PgStore {
    /// One transaction, the call's row locked from the read to the update.
    fn rerun(&self, request: &RerunRequest) -> Result<Rerun, StoreError> {
        let found = self.run(|c| rerun::rerun(c, request))?;
        if let Some(Rerun::Done(_)) = &found {
            self.wake.announce_work();
        }
        found.ok_or_else(|| StoreError::unavailable("the call kept changing; re-run it again"))
    }

    fn pause_tool(
        &self,
        tool: &str,
        by: &str,
        reason: Option<&str>,
    ) -> Result<Toggled, StoreError> {
        self.run(|c| paused::pause(c, tool, by, reason))
    }

    fn resume_tool(&self, tool: &str) -> Result<Toggled, StoreError> {
        let resumed = self.run(|c| paused::resume(c, tool))?;
        if let Toggled::Now(_) = resumed {
            self.wake.announce_work();
        }
        Ok(resumed)
    }

    fn paused_tools(&self) -> Result<Vec<PausedTool>, StoreError> {
        self.run(paused::all)
    }

    fn create_job(&self, new: NewBulkJob) -> Result<JobCreated, StoreError> {
        self.run(|c| bulk_jobs::create(c, &new))
    }

    fn job(&self, tenant: Option<&str>, job_id: &str) -> Result<Option<BulkJob>, StoreError> {
        self.run(|c| bulk_jobs::one(c, tenant, job_id))
    }

    fn claim_job(&self, owner: &str, lease: Duration) -> Result<Option<BulkJob>, StoreError> {
        self.run(|c| bulk_jobs::claim(c, owner, lease.as_secs_f64()))
    }

    fn job_step(
        &self,
        job: &BulkJob,
        plan: &StepPlan,
        lease: Duration,
    ) -> Result<Option<Step>, StoreError> {
        let key_ttl = self.options.retention.key_ttl.map(|t| t.as_secs_f64());
        let step = self.run(|c| bulk_jobs::step(c, job, plan, lease.as_secs_f64(), key_ttl))?;
        if let Some(step) = &step {
            if !step.rerun.is_empty() {
                self.wake.announce_work();
            }
            if !step.stop_requested.is_empty() {
                self.wake.announce_cancel();
            }
            if !step.cancelled.is_empty() {
                self.wake
                    .announce_done(step.cancelled.iter().map(String::as_str));
            }
        }
        Ok(step)
    }

    /// The counts that plan it and the count in one snapshot.
    fn total(&self, query: &ListQuery) -> Result<Total, StoreError> {
        let scope = Scope::of(query.tenant.as_deref());
        self.snapshot(|tx| {
            let counts = Counts {
                rows: counts::count_rows(tx, scope)?,
                ..Counts::default()
            };
            list::total(tx, query, &query.plan(&counts), &counts)
        })
    }

    fn record_reading(&self, reading: &Reading) -> Result<bool, StoreError> {
        self.run(|c| readings::record(c, reading))
    }

    fn readings_at(&self, points: &[f64]) -> Result<Vec<Option<Reading>>, StoreError> {
        self.run(|c| readings::at_points(c, points))
    }

    fn purge_jobs(&self, before: f64, limit: usize) -> Result<usize, StoreError> {
        self.run(|c| bulk_jobs::purge(c, before, limit))
    }

    fn effect(&self, call_id: &str) -> Result<Option<Effect>, StoreError> {
        self.run(|c| report_reads::effect(c, call_id))
    }
}
