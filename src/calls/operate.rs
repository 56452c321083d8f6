//! The operator's doors on the call service: re-run a call, pause and
//! resume a tool, create and read bulk jobs, a filter's total, a call's
//! effect, and why a pending call waits (`Wait`). Each goes to the store,
//! which decides; what only this process can do after (poll for a re-run
//! call, know a pause at once) is the runner's.
//!
//! Who may do these is the API's to decide (`api::operate`); this file
//! takes the scope it is given and never widens it.

use super::service::Calls;
use crate::log;
use crate::store::{
    now, BulkJob, Call, Effect, JobCreated, ListQuery, NewBulkJob, PausedTool, Rerun, RerunRequest,
    Status, StoreError, Toggled, Total,
};

/// Why a `pending` call waits, as far as this process can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Its tool is paused: no process claims it until it is resumed.
    Paused,
    /// Its last attempt failed retryably; the next may not start before
    /// its `next_attempt_at`.
    Backoff,
    /// Its tool is at its `max_concurrency`: it waits for a slot.
    Slot,
    /// Its tool's `rate` spends one token a claim: it waits for one.
    Rate,
    /// For a worker (here, or on another process or node) to claim it.
    Worker,
}

impl Wait {
    pub fn as_str(self) -> &'static str {
        match self {
            Wait::Paused => "paused",
            Wait::Backoff => "backoff",
            Wait::Slot => "slot",
            Wait::Rate => "rate",
            Wait::Worker => "worker",
        }
    }
}

impl Calls {
    /// Re-run a call (`store::rerun`): the tenant's own (`scope`), or any
    /// tenant's (`None`, an admin's); on success, polled for at once.
    pub fn rerun(
        &self,
        scope: Option<&str>,
        call_id: &str,
        by: &str,
        reason: Option<&str>,
    ) -> Result<Rerun, StoreError> {
        let request = RerunRequest {
            tenant: scope.map(str::to_string),
            call_id: call_id.to_string(),
            by: by.to_string(),
            reason: reason.map(str::to_string),
            key_ttl: None,
        };
        let rerun = self.store.rerun(request)?;
        if let Rerun::Done(call) = &rerun {
            self.metrics.operator.reruns.inc();
            log::info("call re-run")
                .event("rerun")
                .tenant(&call.tenant)
                .call_id(&call.call_id)
                .attempt(call.attempt)
                .emit();
            self.runner.poll_soon();
        }
        Ok(rerun)
    }

    /// Why `call` waits, if it is `pending`.
    pub fn waiting_for(&self, call: &Call) -> Option<Wait> {
        if call.status != Status::Pending {
            return None;
        }
        if self.runner.paused(&call.tool).is_some() {
            return Some(Wait::Paused);
        }
        if call.next_attempt_at.is_some_and(|at| at > now()) {
            return Some(Wait::Backoff);
        }
        if self.runner.waits_for_slot(&call.call_id) {
            return Some(Wait::Slot);
        }
        let spec = self.tools.get(&call.tool);
        if spec.is_some_and(|s| s.rate.is_some()) {
            return Some(Wait::Rate);
        }
        Some(Wait::Worker)
    }

    /// Pause `tool` for every process, audited with who asked and why.
    pub fn pause_tool(
        &self,
        tool: &str,
        by: &str,
        reason: Option<&str>,
    ) -> Result<Toggled, StoreError> {
        let toggled = self.runner.pause(tool, by, reason)?;
        self.publish_paused();
        log::info("tool paused")
            .event("tool_paused")
            .tool(tool)
            .emit();
        Ok(toggled)
    }

    /// Resume `tool` for every process.
    pub fn resume_tool(&self, tool: &str) -> Result<Toggled, StoreError> {
        let toggled = self.runner.resume(tool)?;
        self.publish_paused();
        log::info("tool resumed")
            .event("tool_resumed")
            .tool(tool)
            .emit();
        Ok(toggled)
    }

    /// `tool`'s pause, as this process knows it.
    pub fn paused(&self, tool: &str) -> Option<PausedTool> {
        self.runner.paused(tool)
    }

    /// The paused-tools gauge, as this process now knows them.
    fn publish_paused(&self) {
        let names: Vec<String> = self
            .runner
            .paused_tools()
            .into_iter()
            .map(|p| p.tool)
            .collect();
        self.metrics.operator.set_paused_tools(&names);
    }

    /// Create a bulk job under its key, or find the key's.
    pub fn create_job(&self, new: NewBulkJob) -> Result<JobCreated, StoreError> {
        let created = self.store.create_job(new)?;
        if let JobCreated::New(job) = &created {
            log::info("bulk job accepted")
                .event("bulk_job_created")
                .tenant(&job.tenant)
                .job_id(&job.job_id)
                .emit();
        }
        Ok(created)
    }

    /// A bulk job in `scope` (`None`: any tenant's).
    pub fn job(&self, scope: Option<&str>, job_id: &str) -> Result<Option<BulkJob>, StoreError> {
        self.store.job(scope, job_id)
    }

    /// How many calls `query` matches (up to `store::TOTAL_CAP`).
    pub fn total(&self, query: &ListQuery) -> Result<Total, StoreError> {
        self.store.total(query)
    }

    /// The effect of the tenant's call `call_id`, if it has one.
    pub fn effect(&self, tenant: &str, call_id: &str) -> Result<Option<Effect>, StoreError> {
        match self.store.get_for(tenant, call_id)? {
            Some(_) => self.store.effect(call_id),
            None => Ok(None),
        }
    }

    /// A call by id in `scope` (`None`: any tenant's, for an admin).
    pub fn get_in(&self, scope: Option<&str>, call_id: &str) -> Result<Option<Call>, StoreError> {
        match scope {
            Some(tenant) => self.store.get_for(tenant, call_id),
            None => self.store.get(call_id),
        }
    }
}
