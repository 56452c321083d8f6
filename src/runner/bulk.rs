//! Bulk jobs, a job of the maintenance ticker (`BulkWork`): this process
//! works at most one job at a time, a batch per pass — `BULK_BATCH` calls
//! every `BULK_EVERY`, so a job acts on at most 1,000 calls a second
//! and a new call never waits behind more than one batch in the writer.
//!
//! A pass: take a job if none is held (`CallStore::claim_job`: the oldest
//! running job whose lease is free or lapsed — one left by a process that
//! died is taken here once its lease lapses); read the next batch of its
//! calls with the list's own query and plan (`CallStore::list`, below the
//! job's cursor), so the calls it acts on are exactly the ones the list
//! shows for its filter; hand the batch to the store (`job_step`), which
//! commits the calls' transitions, the cursor and the counts in one
//! transaction fenced by the job's claim. Then what only this process can
//! do: stop the tools of cancelled calls running here, wake the requests
//! waiting for calls it cancelled, poll for calls it re-ran.
//!
//! It never decides what happens to a call (the store's statements do), and
//! never holds a lock across a store operation.

use super::chore::Chore;
use super::dispatch::Dispatch;
use crate::lock::lock;
use crate::log::{self, Repeats, BACKGROUND_FAILURE_EVERY};
use crate::metrics::Metrics;
use crate::store::{now, owner_name, BulkJob, CallStore, ListQuery, StepPlan};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Fails again on every pass while the fault lasts: one line per interval.
static BULK_FAILED: Repeats = Repeats::every(BACKGROUND_FAILURE_EVERY);

/// Calls per batch: with `BULK_EVERY`, at most 1,000 calls a second.
const BULK_BATCH: usize = 100;
/// How often a batch is worked.
const BULK_EVERY: Duration = Duration::from_millis(100);
/// How often an idle process looks for a job to take.
const LOOK_EVERY: Duration = Duration::from_secs(1);
/// How often finished jobs past the retention are deleted.
const PURGE_JOBS_EVERY: Duration = Duration::from_secs(60);

/// The bulk-job chore.
pub(super) struct BulkWork {
    dispatch: Arc<Dispatch>,
    store: Arc<CallStore>,
    metrics: Arc<Metrics>,
    /// How long a claim of a job lasts without a batch (the calls' lease).
    lease: Duration,
    /// The job this process works, and when it last looked for one.
    state: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    job: Option<BulkJob>,
    looked_at: Option<Instant>,
    purged_at: Option<Instant>,
}

impl BulkWork {
    pub(super) fn new(
        dispatch: Arc<Dispatch>,
        store: Arc<CallStore>,
        metrics: Arc<Metrics>,
        lease: Duration,
    ) -> BulkWork {
        BulkWork {
            dispatch,
            store,
            metrics,
            lease,
            state: Mutex::default(),
        }
    }

    /// One pass: a batch of the held job, or a look for one to take.
    pub(super) fn run_once(&self) {
        let mut held = lock(&self.state);
        let job = match held.job.take() {
            Some(job) => job,
            None => {
                let due = held.looked_at.is_none_or(|at| at.elapsed() >= LOOK_EVERY);
                if !due {
                    return;
                }
                held.looked_at = Some(Instant::now());
                self.purge_finished(&mut held);
                match self.claim() {
                    Some(job) => job,
                    None => return,
                }
            }
        };
        drop(held);
        let kept = self.batch(job);
        lock(&self.state).job = kept;
    }

    /// Take a job whose lease is free or lapsed.
    fn claim(&self) -> Option<BulkJob> {
        let owner = owner_name(self.store.instance(), "bulk");
        match self.store.claim_job(&owner, self.lease) {
            Ok(Some(job)) => {
                log::info("bulk job taken")
                    .event("bulk_job_claimed")
                    .job_id(&job.job_id)
                    .number("done_so_far", job.matched.max(0) as u64)
                    .emit();
                Some(job)
            }
            Ok(None) => None,
            Err(e) => {
                self.failed("could not take a bulk job", &e);
                None
            }
        }
    }

    /// One batch of `job`; the job if it goes on, `None` once it is done,
    /// its lease was lost, or the batch failed (its lease then lapses and
    /// a later pass, here or elsewhere, takes it again).
    fn batch(&self, mut job: BulkJob) -> Option<BulkJob> {
        let left = (job.max_calls - job.matched).max(0) as usize;
        let query = ListQuery {
            before_call_id: job.cursor.clone(),
            limit: BULK_BATCH.min(left).max(1),
            ..job.filter.clone()
        };
        let page = match self.store.list(&query) {
            Ok(page) => page,
            Err(e) => return self.failed("could not list a bulk job's calls", &e),
        };
        let calls: Vec<(String, String)> = page
            .calls
            .iter()
            .map(|c| (c.call_id.clone(), c.tenant.clone()))
            .collect();
        let reached_max = job.matched + calls.len() as i64 >= job.max_calls;
        let plan = StepPlan {
            cursor: calls.last().map(|(id, _)| id.clone()),
            finished: page.next.is_none() || calls.is_empty(),
            truncated: reached_max && page.next.is_some(),
            calls,
        };
        let step = match self.store.job_step(&job, &plan, self.lease) {
            Ok(Some(step)) => step,
            Ok(None) => {
                log::warn("bulk job's lease lost; another process works it")
                    .event("bulk_job_lost")
                    .job_id(&job.job_id)
                    .emit();
                return None;
            }
            Err(e) => return self.failed("a bulk job's batch failed", &e),
        };
        self.dispatch.notify_ended(&step.cancelled);
        for (call_id, attempt) in &step.stop_requested {
            self.dispatch.stop_running(call_id, Some(*attempt));
        }
        if !step.rerun.is_empty() {
            self.dispatch.poll_soon();
        }
        self.metrics
            .operator
            .bulk_calls
            .inc_by((step.changed + step.skipped).max(0) as u64);
        job.matched += plan.calls.len() as i64;
        job.changed += step.changed;
        job.skipped += step.skipped;
        job.cursor = plan.cursor.or(job.cursor);
        if plan.finished || plan.truncated {
            log::info("bulk job done")
                .event("bulk_job_done")
                .job_id(&job.job_id)
                .number("matched", job.matched.max(0) as u64)
                .number("changed", job.changed.max(0) as u64)
                .emit();
            return None;
        }
        Some(job)
    }

    /// Delete finished jobs past the retention, now and then.
    fn purge_finished(&self, held: &mut Held) {
        let Some(ttl) = self.store.retention().key_ttl else {
            return;
        };
        if held
            .purged_at
            .is_some_and(|at| at.elapsed() < PURGE_JOBS_EVERY)
        {
            return;
        }
        held.purged_at = Some(Instant::now());
        if let Err(e) = self.store.purge_jobs(now() - ttl.as_secs_f64(), 100) {
            self.failed("could not purge finished bulk jobs", &e);
        }
    }

    fn failed(&self, what: &'static str, e: &crate::store::StoreError) -> Option<BulkJob> {
        log::warn(what)
            .event("bulk_job_failed")
            .cause(e)
            .emit_or_count(&BULK_FAILED);
        None
    }
}

impl Chore for BulkWork {
    fn every(&self) -> Duration {
        BULK_EVERY
    }

    fn run(&self) {
        if !self.dispatch.is_stopping() {
            self.run_once();
        }
    }
}
