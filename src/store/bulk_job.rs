//! Bulk jobs, as both backends keep them: cancel or re-run every call a
//! list filter matches, in the background, a batch at a time. What a job
//! is (`BulkJob`), what a create found (`JobCreated`), and what one batch
//! did (`Step`).
//!
//! The rules. A job is a row of `bulk_jobs`, created under its tenant's
//! `Idempotency-Key` (`UNIQUE (tenant, idem_key)`: the same request again
//! finds the same job; another request under the key is a conflict). Its
//! filter is the list's (`ListQuery`, the scope included), bounded above
//! by the moment it was accepted, so the calls it acts on are the ones that
//! matched then, newest first, the list's own order and plan. It is worked
//! by one process at a time under a lease like a call's: `claim_job` takes
//! a `running` job whose lease is free or lapsed and counts the claim
//! (`claims`, the fence); each batch (`bulk_step`) commits, in ONE
//! transaction, its calls' transitions and audit rows, the job's new cursor
//! and counts, and a renewed lease — only while the job is still `running`
//! under the same claim. So a process that dies mid-job leaves a cursor that
//! says exactly which calls were done; the next claim goes on below it, and
//! no call is acted on twice by one job. A job stops at `max_calls` calls
//! (`truncated`), and is `done` when the list has no more.
//!
//! This file holds no SQL and decides nothing; the wings' statements do.

use super::list::ListQuery;
use serde_json::{json, Value};

/// The most calls one job acts on: a larger selection is several jobs. As
/// far as a list's total is counted, so a job's selection can be shown
/// whole.
pub const MAX_BULK_CALLS: usize = super::list::TOTAL_CAP;

/// What a job does to each call it finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BulkAction {
    /// `store::cancel`'s rules: a pending call cancelled, a running one's
    /// stop requested, a settled one left alone.
    Cancel,
    /// `store::rerun`'s rules: a failed or cancelled call back to pending.
    Rerun,
}

impl BulkAction {
    pub fn as_str(self) -> &'static str {
        match self {
            BulkAction::Cancel => "cancel",
            BulkAction::Rerun => "rerun",
        }
    }

    pub fn parse(word: &str) -> Option<BulkAction> {
        match word {
            "cancel" => Some(BulkAction::Cancel),
            "rerun" => Some(BulkAction::Rerun),
            _ => None,
        }
    }
}

/// A job to create: who asked, under which key, and what.
#[derive(Debug, Clone, PartialEq)]
pub struct NewBulkJob {
    /// The tenant whose key this is (who asked).
    pub tenant: String,
    pub idem_key: String,
    /// Of the request (action, filter, reason): the same key with another
    /// request is a conflict.
    pub fingerprint: String,
    pub action: BulkAction,
    /// The list filter, its scope included, bounded above by the moment
    /// the job was accepted (`created_before`); no cursor, no page size.
    pub filter: ListQuery,
    pub reason: Option<String>,
    pub max_calls: usize,
}

/// A job's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    /// Accepted, not finished: some process works it (or will).
    Running,
    /// The list had no more, or `max_calls` was reached.
    Done,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Running => "running",
            JobState::Done => "done",
        }
    }

    pub fn parse(word: &str) -> Option<JobState> {
        match word {
            "running" => Some(JobState::Running),
            "done" => Some(JobState::Done),
            _ => None,
        }
    }
}

/// One row of `bulk_jobs`.
#[derive(Debug, Clone, PartialEq)]
pub struct BulkJob {
    pub job_id: String,
    pub tenant: String,
    pub idem_key: String,
    pub fingerprint: String,
    pub action: BulkAction,
    pub filter: ListQuery,
    pub reason: Option<String>,
    pub max_calls: i64,
    pub state: JobState,
    /// The last call id acted on: the next batch is the list below it.
    pub cursor: Option<String>,
    /// Calls the filter found and the job looked at.
    pub matched: i64,
    /// Of those, calls it changed: cancelled or their stop requested, or
    /// sent back to pending.
    pub changed: i64,
    /// Of those, calls its action did not apply to (already settled, still
    /// in flight, succeeded, expired, a business key held elsewhere).
    pub skipped: i64,
    /// It stopped at `max_calls` with more calls matching.
    pub truncated: bool,
    /// Times a process took it: the fence of every batch.
    pub claims: i64,
    pub owner: Option<String>,
    pub lease_until: Option<f64>,
    pub created_at: f64,
    pub updated_at: f64,
    pub finished_at: Option<f64>,
}

impl BulkJob {
    /// The JSON the API returns.
    pub fn to_json(&self) -> Value {
        json!({
            "job_id": self.job_id,
            "action": self.action.as_str(),
            "filter": filter_to_json(&self.filter),
            "reason": self.reason,
            "state": self.state.as_str(),
            "max_calls": self.max_calls,
            "matched": self.matched,
            "changed": self.changed,
            "skipped": self.skipped,
            "truncated": self.truncated,
            "cursor": self.cursor,
            "owner": self.owner,
            "lease_until": self.lease_until,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "finished_at": self.finished_at,
            "query_url": format!("/v1/bulk-actions/{}", self.job_id),
        })
    }
}

/// What `create_job` found or did.
#[derive(Debug, Clone, PartialEq)]
pub enum JobCreated {
    New(BulkJob),
    /// The key's job, for the same request.
    Existing(BulkJob),
    /// The key belongs to another request.
    Conflict(BulkJob),
}

/// What one batch of a job did, once committed: the counts it added, and
/// what the process that ran it must pass on (a stop to ask of a call
/// running here, waiters to wake, work to poll for).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Step {
    pub changed: i64,
    pub skipped: i64,
    /// Calls cancelled at once: their `?wait`s end.
    pub cancelled: Vec<String>,
    /// Running calls whose stop was requested, with their attempts.
    pub stop_requested: Vec<(String, i64)>,
    /// Calls sent back to pending.
    pub rerun: Vec<String>,
}

/// The filter as a job stores and shows it: the list's parameters by their
/// names, the scope as `tenant` (`*`: every tenant).
pub fn filter_to_json(q: &ListQuery) -> Value {
    json!({
        "tenant": q.tenant.as_deref().unwrap_or("*"),
        "status": q.statuses,
        "tool": q.tool,
        "key": q.key,
        "key_prefix": q.key_prefix,
        "business_key": q.business_key,
        "effect_id": q.effect_id,
        "error_code": q.error_code,
        "created_after": q.created_after,
        "created_before": q.created_before,
    })
}

/// `filter_to_json` read back (a stored job's); `None` if it is not one.
pub fn filter_from_json(v: &Value) -> Option<ListQuery> {
    let text = |name: &str| v[name].as_str().map(str::to_string);
    let statuses = v["status"]
        .as_array()?
        .iter()
        .map(|s| s.as_str().map(str::to_string))
        .collect::<Option<Vec<_>>>()?;
    Some(ListQuery {
        tenant: match v["tenant"].as_str()? {
            "*" => None,
            tenant => Some(tenant.to_string()),
        },
        statuses,
        tool: text("tool"),
        key: text("key"),
        key_prefix: text("key_prefix"),
        business_key: text("business_key"),
        effect_id: text("effect_id"),
        error_code: text("error_code"),
        created_after: v["created_after"].as_f64(),
        created_before: v["created_before"].as_f64(),
        before_call_id: None,
        limit: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stored filter reads back as the query it was.
    #[test]
    fn a_filter_reads_back_as_it_was_written() {
        let q = ListQuery {
            tenant: Some("acme".into()),
            statuses: vec!["failed".into(), "pending".into()],
            tool: Some("charge".into()),
            key_prefix: Some("order-".into()),
            error_code: Some("downstream_timeout".into()),
            created_before: Some(1_800_000_000.25),
            ..ListQuery::default()
        };
        assert_eq!(filter_from_json(&filter_to_json(&q)), Some(q.clone()));
        let every = ListQuery { tenant: None, ..q };
        assert_eq!(filter_from_json(&filter_to_json(&every)), Some(every));
        assert_eq!(filter_from_json(&json!({"tenant": 1})), None);
    }
}
