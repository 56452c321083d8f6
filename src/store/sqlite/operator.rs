//! `Operator` on SQLite: each method one writer operation or one read, on
//! the statements of `rerun`, `paused`, `bulk_jobs`, `readings` and `list`.
//! Kept apart from `mod.rs`, which holds `Backend`'s.

use super::super::bulk_job::{BulkJob, JobCreated, NewBulkJob, Step};
use super::super::counts::Counts;
use super::super::error::StoreError;
use super::super::list::{ListQuery, Total};
use super::super::model::Scope;
use super::super::operator::{Effect, Operator, StepPlan};
use super::super::paused::{PausedTool, Toggled};
use super::super::readings::Reading;
use super::super::rerun::{Rerun, RerunRequest};
use super::{bulk_jobs, counts, list, paused, readings, report_reads, rerun, SqliteStore};
use std::time::Duration;

impl Operator for SqliteStore {
    /// One writer operation: the read, the checks and the update share its
    /// transaction.
    fn rerun(&self, request: &RerunRequest) -> Result<Rerun, StoreError> {
        self.write(rerun::rerun_op(request.clone()))
    }

    fn pause_tool(
        &self,
        tool: &str,
        by: &str,
        reason: Option<&str>,
    ) -> Result<Toggled, StoreError> {
        let op = paused::pause_op(tool.to_string(), by.to_string(), reason.map(str::to_string));
        self.write(op)
    }

    fn resume_tool(&self, tool: &str) -> Result<Toggled, StoreError> {
        self.write(paused::resume_op(tool.to_string()))
    }

    fn paused_tools(&self) -> Result<Vec<PausedTool>, StoreError> {
        self.read(paused::all)
    }

    fn create_job(&self, new: NewBulkJob) -> Result<JobCreated, StoreError> {
        self.write(bulk_jobs::create_op(new))
    }

    fn job(&self, tenant: Option<&str>, job_id: &str) -> Result<Option<BulkJob>, StoreError> {
        let (tenant, job_id) = (tenant.map(str::to_string), job_id.to_string());
        self.read(move |conn| bulk_jobs::one(conn, tenant.as_deref(), &job_id))
    }

    /// A cheap read first spares the writer a transaction when no job
    /// waits (the usual case, every pass).
    fn claim_job(&self, owner: &str, lease: Duration) -> Result<Option<BulkJob>, StoreError> {
        let waiting = self.read(|conn| {
            conn.prepare_cached("SELECT 1 FROM bulk_jobs WHERE state = 'running' LIMIT 1")?
                .exists([])
        })?;
        if !waiting {
            return Ok(None);
        }
        self.write(bulk_jobs::claim_op(owner.to_string(), lease))
    }

    /// In the writer's first lane, so its batch is not queued behind a
    /// burst of new calls (its lease must not lapse waiting).
    fn job_step(
        &self,
        job: &BulkJob,
        plan: &StepPlan,
        lease: Duration,
    ) -> Result<Option<Step>, StoreError> {
        let key_ttl = self.options.retention.key_ttl.map(|t| t.as_secs_f64());
        self.write(bulk_jobs::step_op(
            job.clone(),
            plan.clone(),
            lease,
            key_ttl,
        ))
    }

    /// The counts that plan it and the count in one read transaction.
    fn total(&self, query: &ListQuery) -> Result<Total, StoreError> {
        let query = query.clone();
        self.read(move |conn| {
            let snapshot = conn.unchecked_transaction()?;
            let scope = Scope::of(query.tenant.as_deref());
            let counts = Counts {
                rows: counts::count_rows(conn, scope)?,
                ..Counts::default()
            };
            let total = list::total(conn, &query, &query.plan(&counts), &counts)?;
            snapshot.commit()?;
            Ok(total)
        })
    }

    fn record_reading(&self, reading: &Reading) -> Result<bool, StoreError> {
        self.write(readings::record_op(reading.clone()))
    }

    fn readings_at(&self, points: &[f64]) -> Result<Vec<Option<Reading>>, StoreError> {
        let points = points.to_vec();
        self.read(move |conn| readings::at_points(conn, &points))
    }

    fn purge_jobs(&self, before: f64, limit: usize) -> Result<usize, StoreError> {
        self.write(bulk_jobs::purge_op(before, limit))
    }

    fn effect(&self, call_id: &str) -> Result<Option<Effect>, StoreError> {
        let call_id = call_id.to_string();
        self.read(move |conn| report_reads::effect(conn, &call_id))
    }
}
