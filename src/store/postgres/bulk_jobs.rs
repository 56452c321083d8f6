//! Bulk jobs on PostgreSQL (schema step 11; `store::bulk_job` has the
//! rules): the table, the create-or-get under a tenant's key (one
//! statement: `ON CONFLICT … DO UPDATE` returns the key's row whoever wrote
//! it), the claim of a job under a lease (`FOR UPDATE SKIP LOCKED`: nodes
//! claiming at once pass over each other), and one batch — the fence on the
//! job's claim, every call's cancel or re-run (the same statements as a
//! single one, `cancel`, `rerun`), the job's cursor and counts and renewed
//! lease — in ONE transaction.
//!
//! Never runs a tool.

use super::super::bulk_job::{
    filter_from_json, filter_to_json, BulkAction, BulkJob, JobCreated, JobState, NewBulkJob, Step,
};
use super::super::cancel::{cancel_with, Cancel};
use super::super::ids::new_job_id;
use super::super::list::ListQuery;
use super::super::operator::StepPlan;
use super::super::rerun::{Rerun, RerunRequest};
use super::session::{GenericClient, Session, Transaction};
use super::{cancel, rerun};
use tokio_postgres::types::{FromSql, ToSql, Type};
use tokio_postgres::Row;

/// Schema step 11.
pub(super) const BULK_JOBS_TABLE: &str = "
CREATE TABLE bulk_jobs (
  job_id       text PRIMARY KEY,
  tenant       text NOT NULL,
  idem_key     text NOT NULL,
  fingerprint  text NOT NULL,
  action       text NOT NULL,
  filter_json  text NOT NULL,
  reason       text,
  max_calls    bigint NOT NULL,
  state        text NOT NULL,
  cursor       text,
  matched      bigint NOT NULL DEFAULT 0,
  changed      bigint NOT NULL DEFAULT 0,
  skipped      bigint NOT NULL DEFAULT 0,
  truncated    boolean NOT NULL DEFAULT false,
  claims       bigint NOT NULL DEFAULT 0,
  owner        text,
  lease_until  double precision,
  created_at   double precision NOT NULL,
  updated_at   double precision NOT NULL,
  finished_at  double precision,
  CONSTRAINT bulk_jobs_tenant_idem_key UNIQUE (tenant, idem_key)
);
CREATE INDEX bulk_jobs_running ON bulk_jobs (job_id) WHERE state = 'running';
";

/// Create-or-get: the key's row comes back either way; it is new exactly
/// when it carries the id this statement drew.
const CREATE: &str = "INSERT INTO bulk_jobs AS j (job_id, tenant, idem_key, fingerprint, action,
                                     filter_json, reason, max_calls, state, created_at, updated_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'running',
             extract(epoch FROM now())::float8, extract(epoch FROM now())::float8)
     ON CONFLICT (tenant, idem_key) DO UPDATE SET idem_key = EXCLUDED.idem_key
     RETURNING job_id, tenant, idem_key, fingerprint, action, filter_json, reason, max_calls,
               state, cursor, matched, changed, skipped, truncated, claims, owner, lease_until,
               created_at, updated_at, finished_at";

const ONE: &str = "SELECT job_id, tenant, idem_key, fingerprint, action, filter_json, reason,
            max_calls, state, cursor, matched, changed, skipped, truncated, claims, owner,
            lease_until, created_at, updated_at, finished_at
       FROM bulk_jobs WHERE job_id = $1 AND ($2::text IS NULL OR tenant = $2)";

const WAITING: &str = "SELECT EXISTS (SELECT 1 FROM bulk_jobs WHERE state = 'running')";

/// The oldest running job whose lease is free or lapsed, for `$1` until
/// `$2` seconds from now; a job another node is claiming is skipped.
const CLAIM: &str = "WITH pick AS (
       SELECT job_id FROM bulk_jobs
        WHERE state = 'running'
          AND (lease_until IS NULL OR lease_until <= extract(epoch FROM now())::float8)
        ORDER BY job_id LIMIT 1 FOR UPDATE SKIP LOCKED
     )
     UPDATE bulk_jobs j SET owner = $1,
            lease_until = extract(epoch FROM now())::float8 + $2, claims = j.claims + 1,
            updated_at = extract(epoch FROM now())::float8
       FROM pick WHERE j.job_id = pick.job_id
     RETURNING j.job_id, j.tenant, j.idem_key, j.fingerprint, j.action, j.filter_json, j.reason,
               j.max_calls, j.state, j.cursor, j.matched, j.changed, j.skipped, j.truncated,
               j.claims, j.owner, j.lease_until, j.created_at, j.updated_at, j.finished_at";

/// The fence of a batch: the job still `running` under claim `$2`; its
/// lease renewed for `$3` seconds.
const FENCE: &str = "UPDATE bulk_jobs
        SET lease_until = extract(epoch FROM now())::float8 + $3,
            updated_at = extract(epoch FROM now())::float8
      WHERE job_id = $1 AND claims = $2 AND state = 'running'";

/// A batch's end: cursor, counts, and `done` when `$7`.
const ADVANCE: &str = "UPDATE bulk_jobs
        SET cursor = coalesce($2, cursor), matched = matched + $3, changed = changed + $4,
            skipped = skipped + $5, truncated = $6,
            state = CASE WHEN $7 THEN 'done' ELSE 'running' END,
            finished_at = CASE WHEN $7 THEN extract(epoch FROM now())::float8 END,
            owner = CASE WHEN $7 THEN NULL ELSE owner END,
            lease_until = CASE WHEN $7 THEN NULL ELSE lease_until END,
            updated_at = extract(epoch FROM now())::float8
      WHERE job_id = $1";

const PURGE: &str = "DELETE FROM bulk_jobs WHERE job_id IN (
       SELECT job_id FROM bulk_jobs WHERE state = 'done' AND finished_at < $1 LIMIT $2)";

/// How many times a cancel in a batch reads its call again after losing a
/// race to a claim or a completion.
const CANCEL_TRIES: usize = 4;

pub(super) fn create(
    client: &mut impl GenericClient,
    new: &NewBulkJob,
) -> Result<JobCreated, tokio_postgres::Error> {
    let job_id = new_job_id();
    let filter = filter_to_json(&new.filter).to_string();
    let max = new.max_calls as i64;
    let params: [&(dyn ToSql + Sync); 8] = [
        &job_id,
        &new.tenant,
        &new.idem_key,
        &new.fingerprint,
        &new.action.as_str(),
        &filter,
        &new.reason,
        &max,
    ];
    let job = job_from_row(&client.query_one(CREATE, &params)?)?;
    Ok(if job.job_id == job_id {
        JobCreated::New(job)
    } else if job.fingerprint == new.fingerprint {
        JobCreated::Existing(job)
    } else {
        JobCreated::Conflict(job)
    })
}

pub(super) fn one(
    client: &mut impl GenericClient,
    tenant: Option<&str>,
    job_id: &str,
) -> Result<Option<BulkJob>, tokio_postgres::Error> {
    client
        .query_opt(ONE, &[&job_id, &tenant])?
        .map(|r| job_from_row(&r))
        .transpose()
}

/// A running job whose lease is free or lapsed, claimed; a cheap read
/// first when none is running (the usual case).
pub(super) fn claim(
    client: &mut impl GenericClient,
    owner: &str,
    lease_secs: f64,
) -> Result<Option<BulkJob>, tokio_postgres::Error> {
    if !client.query_one(WAITING, &[])?.get::<_, bool>(0) {
        return Ok(None);
    }
    client
        .query_opt(CLAIM, &[&owner, &lease_secs])?
        .map(|r| job_from_row(&r))
        .transpose()
}

/// One batch, in its own transaction; `None` when the job's claim was lost.
pub(super) fn step(
    client: &mut Session,
    job: &BulkJob,
    plan: &StepPlan,
    lease_secs: f64,
    key_ttl: Option<f64>,
) -> Result<Option<Step>, tokio_postgres::Error> {
    let mut tx = client.transaction()?;
    if tx.execute(FENCE, &[&job.job_id, &job.claims, &lease_secs])? == 0 {
        tx.rollback()?;
        return Ok(None);
    }
    let by = format!("{} in bulk job {}", job.tenant, job.job_id);
    let mut step = Step::default();
    for (call_id, tenant) in &plan.calls {
        let changed = match job.action {
            BulkAction::Cancel => cancel_one(&mut tx, job, &by, tenant, call_id, &mut step)?,
            BulkAction::Rerun => {
                let request = RerunRequest {
                    tenant: Some(tenant.clone()),
                    call_id: call_id.clone(),
                    by: by.clone(),
                    reason: job.reason.clone(),
                    key_ttl,
                };
                match rerun::rerun_in(&mut tx, &request)? {
                    Some(Rerun::Done(call)) => {
                        step.rerun.push(call.call_id);
                        true
                    }
                    _ => false,
                }
            }
        };
        match changed {
            true => step.changed += 1,
            false => step.skipped += 1,
        }
    }
    let done = plan.finished || plan.truncated;
    let matched = plan.calls.len() as i64;
    let params: [&(dyn ToSql + Sync); 7] = [
        &job.job_id,
        &plan.cursor,
        &matched,
        &step.changed,
        &step.skipped,
        &plan.truncated,
        &done,
    ];
    tx.execute(ADVANCE, &params)?;
    tx.commit()?;
    Ok(Some(step))
}

/// The job's cancel of one call; whether it changed it.
fn cancel_one(
    tx: &mut Transaction<'_>,
    job: &BulkJob,
    by: &str,
    tenant: &str,
    call_id: &str,
    step: &mut Step,
) -> Result<bool, tokio_postgres::Error> {
    let reason = job.reason.as_deref();
    let mut steps = cancel::Steps {
        client: tx,
        tenant,
        call_id,
        reason,
    };
    Ok(
        match cancel_with(&mut steps, Some(by), reason, CANCEL_TRIES)? {
            Some(Cancel::Cancelled { call, now: true }) => {
                step.cancelled.push(call.call_id);
                true
            }
            Some(Cancel::Requested { call, now: true }) => {
                step.stop_requested.push((call.call_id, call.attempt));
                true
            }
            _ => false,
        },
    )
}

pub(super) fn purge(
    client: &mut impl GenericClient,
    before: f64,
    limit: usize,
) -> Result<usize, tokio_postgres::Error> {
    Ok(client.execute(PURGE, &[&before, &(limit as i64)])? as usize)
}

fn job_from_row(r: &Row) -> Result<BulkJob, tokio_postgres::Error> {
    Ok(BulkJob {
        job_id: r.get(0),
        tenant: r.get(1),
        idem_key: r.get(2),
        fingerprint: r.get(3),
        action: r.try_get::<_, Column<BulkAction>>(4)?.0,
        filter: r.try_get::<_, Column<ListQuery>>(5)?.0,
        reason: r.get(6),
        max_calls: r.get(7),
        state: r.try_get::<_, Column<JobState>>(8)?.0,
        cursor: r.get(9),
        matched: r.get(10),
        changed: r.get(11),
        skipped: r.get(12),
        truncated: r.get(13),
        claims: r.get(14),
        owner: r.get(15),
        lease_until: r.get(16),
        created_at: r.get(17),
        updated_at: r.get(18),
        finished_at: r.get(19),
    })
}

/// A text column this release must understand: an action, a state or a
/// filter it cannot read fails the read, never a guess (a job must not act
/// as something other than what was asked).
struct Column<T>(T);

trait FromText: Sized {
    const WHAT: &'static str;
    fn from_text(text: &str) -> Option<Self>;
}

impl FromText for BulkAction {
    const WHAT: &'static str = "action";
    fn from_text(text: &str) -> Option<Self> {
        BulkAction::parse(text)
    }
}

impl FromText for JobState {
    const WHAT: &'static str = "state";
    fn from_text(text: &str) -> Option<Self> {
        JobState::parse(text)
    }
}

impl FromText for ListQuery {
    const WHAT: &'static str = "filter";
    fn from_text(text: &str) -> Option<Self> {
        filter_from_json(&serde_json::from_str(text).ok()?)
    }
}

impl<'a, T: FromText> FromSql<'a> for Column<T> {
    fn from_sql(
        ty: &Type,
        raw: &'a [u8],
    ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        let text = <&str as FromSql>::from_sql(ty, raw)?;
        T::from_text(text)
            .map(Column)
            .ok_or_else(|| format!("bulk_jobs: an unknown {} {:?}", T::WHAT, text).into())
    }

    fn accepts(ty: &Type) -> bool {
        <&str as FromSql>::accepts(ty)
    }
}
