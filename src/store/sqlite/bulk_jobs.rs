//! Bulk jobs on SQLite (migration 18; `store::bulk_job` has the rules): the
//! table, the create-or-get under a tenant's key, the claim of a job under a
//! lease, and one batch — the calls' cancels or re-runs (by the same steps
//! as a single cancel or re-run, `cancel`, `rerun`), the job's cursor and
//! counts and its renewed lease — as ONE writer operation, fenced by the
//! job's claim, so a batch happens whole or not at all.
//!
//! Never runs a tool.

use super::super::bulk_job::{
    filter_from_json, filter_to_json, BulkAction, BulkJob, JobCreated, JobState, NewBulkJob, Step,
};
use super::super::cancel::{cancel_with, Cancel};
use super::super::ids::{new_job_id, now};
use super::super::operator::StepPlan;
use super::super::rerun::{Rerun, RerunRequest};
use super::{cancel, rerun};
use rusqlite::{params, Connection, OptionalExtension, Row};
use std::time::Duration;

/// Migration 18. `UNIQUE (tenant, idem_key)` makes a retried create find
/// its job; the partial index is what a claim scans (the running jobs, a
/// handful).
pub(super) const BULK_JOBS_TABLE: &str = "
CREATE TABLE IF NOT EXISTS bulk_jobs (
  job_id       TEXT PRIMARY KEY,
  tenant       TEXT NOT NULL,
  idem_key     TEXT NOT NULL,
  fingerprint  TEXT NOT NULL,
  action       TEXT NOT NULL,
  filter_json  TEXT NOT NULL,
  reason       TEXT,
  max_calls    INTEGER NOT NULL,
  state        TEXT NOT NULL,
  cursor       TEXT,
  matched      INTEGER NOT NULL DEFAULT 0,
  changed      INTEGER NOT NULL DEFAULT 0,
  skipped      INTEGER NOT NULL DEFAULT 0,
  truncated    INTEGER NOT NULL DEFAULT 0,
  claims       INTEGER NOT NULL DEFAULT 0,
  owner        TEXT,
  lease_until  REAL,
  created_at   REAL NOT NULL,
  updated_at   REAL NOT NULL,
  finished_at  REAL,
  UNIQUE (tenant, idem_key)
);
CREATE INDEX IF NOT EXISTS idx_bulk_jobs_running ON bulk_jobs(job_id) WHERE state = 'running';
";

const JOB_COLUMNS: &str = "job_id, tenant, idem_key, fingerprint, action, filter_json, reason, \
     max_calls, state, cursor, matched, changed, skipped, truncated, claims, owner, lease_until, \
     created_at, updated_at, finished_at";

/// Create the key's job, or find it.
pub(super) fn create_op(
    new: NewBulkJob,
) -> impl FnOnce(&Connection) -> rusqlite::Result<JobCreated> + Send + 'static {
    move |conn| {
        let by_key =
            format!("SELECT {JOB_COLUMNS} FROM bulk_jobs WHERE tenant = ?1 AND idem_key = ?2");
        let find = |conn: &Connection| {
            conn.prepare_cached(&by_key)?
                .query_row([&new.tenant, &new.idem_key], job_from_row)
                .optional()
        };
        if let Some(job) = find(conn)? {
            return Ok(match job.fingerprint == new.fingerprint {
                true => JobCreated::Existing(job),
                false => JobCreated::Conflict(job),
            });
        }
        let now = now();
        let job_id = new_job_id();
        conn.prepare_cached(
            "INSERT INTO bulk_jobs (job_id, tenant, idem_key, fingerprint, action, filter_json,
                                        reason, max_calls, state, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'running', ?9, ?9)",
        )?
        .execute(params![
            job_id,
            new.tenant,
            new.idem_key,
            new.fingerprint,
            new.action.as_str(),
            filter_to_json(&new.filter).to_string(),
            new.reason,
            new.max_calls as i64,
            now
        ])?;
        let job = one(conn, None, &job_id)?.ok_or(rusqlite::Error::QueryReturnedNoRows)?;
        Ok(JobCreated::New(job))
    }
}

/// A job by id, in `tenant`'s scope (`None`: any tenant's).
pub(super) fn one(
    conn: &Connection,
    tenant: Option<&str>,
    job_id: &str,
) -> rusqlite::Result<Option<BulkJob>> {
    conn.prepare_cached(&format!(
        "SELECT {JOB_COLUMNS} FROM bulk_jobs WHERE job_id = ?1 AND (?2 IS NULL OR tenant = ?2)"
    ))?
    .query_row(params![job_id, tenant], job_from_row)
    .optional()
}

/// Take the oldest running job whose lease is free or lapsed.
pub(super) fn claim_op(
    owner: String,
    lease: Duration,
) -> impl FnOnce(&Connection) -> rusqlite::Result<Option<BulkJob>> + Send + 'static {
    move |conn| {
        let now = now();
        conn.prepare_cached(&format!(
            "UPDATE bulk_jobs
                SET owner = ?1, lease_until = ?2 + ?3, claims = claims + 1, updated_at = ?2
              WHERE job_id = (SELECT job_id FROM bulk_jobs
                               WHERE state = 'running' AND (lease_until IS NULL OR lease_until <= ?2)
                               ORDER BY job_id LIMIT 1)
                AND state = 'running' AND (lease_until IS NULL OR lease_until <= ?2)
             RETURNING {JOB_COLUMNS}"
        ))?
        .query_row(params![owner, now, lease.as_secs_f64()], job_from_row)
        .optional()
    }
}

/// One batch of `job` (see `Operator::job_step`), fenced by its claim.
pub(super) fn step_op(
    job: BulkJob,
    plan: StepPlan,
    lease: Duration,
    key_ttl: Option<f64>,
) -> impl FnOnce(&Connection) -> rusqlite::Result<Option<Step>> + Send + 'static {
    move |conn| {
        let now = now();
        let held = conn
            .prepare_cached(
                "UPDATE bulk_jobs SET lease_until = ?1 + ?2, updated_at = ?1
                  WHERE job_id = ?3 AND claims = ?4 AND state = 'running'",
            )?
            .execute(params![now, lease.as_secs_f64(), job.job_id, job.claims])?;
        if held == 0 {
            return Ok(None);
        }
        let mut batch = Batch {
            conn,
            now,
            by: format!("{} in bulk job {}", job.tenant, job.job_id),
            job: &job,
            key_ttl,
            step: Step::default(),
        };
        for (call_id, tenant) in &plan.calls {
            let changed = match job.action {
                BulkAction::Cancel => batch.cancel(tenant, call_id)?,
                BulkAction::Rerun => batch.rerun(tenant, call_id)?,
            };
            match changed {
                true => batch.step.changed += 1,
                false => batch.step.skipped += 1,
            }
        }
        let step = batch.step;
        let done = plan.finished || plan.truncated;
        conn.prepare_cached(
            "UPDATE bulk_jobs
                SET cursor = coalesce(?2, cursor), matched = matched + ?3, changed = changed + ?4,
                    skipped = skipped + ?5, truncated = ?6,
                    state = CASE WHEN ?7 THEN 'done' ELSE 'running' END,
                    finished_at = CASE WHEN ?7 THEN ?8 END,
                    owner = CASE WHEN ?7 THEN NULL ELSE owner END,
                    lease_until = CASE WHEN ?7 THEN NULL ELSE lease_until END,
                    updated_at = ?8
              WHERE job_id = ?1",
        )?
        .execute(params![
            job.job_id,
            plan.cursor,
            plan.calls.len() as i64,
            step.changed,
            step.skipped,
            plan.truncated,
            done,
            now
        ])?;
        Ok(Some(step))
    }
}

/// One batch in the writer's transaction: what it acts with, and what it
/// did so far.
struct Batch<'a> {
    conn: &'a Connection,
    now: f64,
    /// Who the audit says asked: the job's tenant, and the job.
    by: String,
    job: &'a BulkJob,
    key_ttl: Option<f64>,
    step: Step,
}

impl Batch<'_> {
    /// The job's cancel of one call; whether it changed it.
    fn cancel(&mut self, tenant: &str, call_id: &str) -> rusqlite::Result<bool> {
        let reason = self.job.reason.as_deref();
        let mut steps = cancel::Steps {
            conn: self.conn,
            now: self.now,
            tenant,
            call_id,
            reason,
        };
        Ok(match cancel_with(&mut steps, Some(&self.by), reason, 1)? {
            Some(Cancel::Cancelled { call, now: true }) => {
                self.step.cancelled.push(call.call_id);
                true
            }
            Some(Cancel::Requested { call, now: true }) => {
                self.step.stop_requested.push((call.call_id, call.attempt));
                true
            }
            _ => false,
        })
    }

    /// The job's re-run of one call; whether it changed it.
    fn rerun(&mut self, tenant: &str, call_id: &str) -> rusqlite::Result<bool> {
        let request = RerunRequest {
            tenant: Some(tenant.to_string()),
            call_id: call_id.to_string(),
            by: self.by.clone(),
            reason: self.job.reason.clone(),
            key_ttl: self.key_ttl,
        };
        let mut steps = rerun::Steps {
            conn: self.conn,
            now: self.now,
            request: &request,
        };
        Ok(match rerun::rerun_in(&mut steps)? {
            Rerun::Done(call) => {
                self.step.rerun.push(call.call_id);
                true
            }
            _ => false,
        })
    }
}

/// Delete `done` jobs that finished before `before`, at most `limit`.
pub(super) fn purge_op(
    before: f64,
    limit: usize,
) -> impl FnOnce(&Connection) -> rusqlite::Result<usize> + Send + 'static {
    move |conn| {
        conn.prepare_cached(
            "DELETE FROM bulk_jobs WHERE job_id IN (
               SELECT job_id FROM bulk_jobs WHERE state = 'done' AND finished_at < ?1 LIMIT ?2)",
        )?
        .execute(params![before, limit as i64])
    }
}

fn job_from_row(r: &Row) -> rusqlite::Result<BulkJob> {
    let bad = |what: &str| {
        rusqlite::Error::FromSqlConversionFailure(
            0,
            rusqlite::types::Type::Text,
            format!("bulk_jobs: {what}").into(),
        )
    };
    let filter: String = r.get(5)?;
    let filter = serde_json::from_str(&filter)
        .ok()
        .and_then(|v| filter_from_json(&v))
        .ok_or_else(|| bad("a filter_json this release cannot read"))?;
    let action: String = r.get(4)?;
    let state: String = r.get(8)?;
    Ok(BulkJob {
        job_id: r.get(0)?,
        tenant: r.get(1)?,
        idem_key: r.get(2)?,
        fingerprint: r.get(3)?,
        action: BulkAction::parse(&action).ok_or_else(|| bad("an unknown action"))?,
        filter,
        reason: r.get(6)?,
        max_calls: r.get(7)?,
        state: JobState::parse(&state).ok_or_else(|| bad("an unknown state"))?,
        cursor: r.get(9)?,
        matched: r.get(10)?,
        changed: r.get(11)?,
        skipped: r.get(12)?,
        truncated: r.get(13)?,
        claims: r.get(14)?,
        owner: r.get(15)?,
        lease_until: r.get(16)?,
        created_at: r.get(17)?,
        updated_at: r.get(18)?,
        finished_at: r.get(19)?,
    })
}
