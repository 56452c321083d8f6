//! `Worker`: what each thread of the worker pool does with its assignments.
//! One attempt is: `claim` (the lease; the worker waits for it to commit, so
//! no tool runs without a durable lease) → run the tool outside any
//! transaction → hand `succeed`/`fail`/`retry_later` (fenced by the lease's
//! attempt) to the store's writer without waiting (`completion`), and take
//! the next assignment. Behind a quick call a worker takes a second waiting
//! one and claims both in one operation; a call that arrives already claimed
//! runs with no second claim.
//!
//! A claimed call's stored args are re-checked against this process's tools
//! before its tool starts (`stored_args`): a failure there is the call's
//! `bad_args`, never a worker's panic. A tool whose approval asks its own
//! questions gets the answers read then; a read that fails is a retryable
//! `inputs_unavailable`, and the tool does not start. A retryable failure with attempts left
//! is completed as `retry_later`: back to `pending` until its backoff ends,
//! with no worker waiting for it.
//!
//! Each worker thread has one `Stop` for its life; every attempt it runs is
//! a run of it, named by its task's generation, which the task table keeps
//! beside the running entry: a cancel asks it, the tool is halted (a
//! command's process group signalled, an http request abandoned, a sleep
//! woken), and the attempt is completed as stopped — the store records
//! `cancelled` under the usual fence, or the tool's success if it won. A
//! cancel asked before the tool starts means it never starts. A stopping
//! service whose grace period is over halts the tool the same way; then
//! the worker records nothing: it leaves the lease, and how its tool
//! ended, to the stop, which gives the lease back.
//!
//! Every failure here leaves a call where recovery finds it: `pending`, or
//! `running` with a lease that will expire. It never decides who executes a
//! call (the claim does) and never records a completion itself (the
//! completer does, once the commit is known).

use super::dispatch::{log_claimed, Assignment, Dispatch};
use super::handed::{Finish, Handed};
use super::stored_args::parse_stored_args;
use super::tasks::{Task, ToolRuns};
use crate::chaos;
use crate::log;
use crate::metrics::{Metrics, ToolOutcome};
use crate::store::{owner_name, CallStore, Lease, RetryDelay, StoreError, ToolAtRelease};
use crate::tools::{
    self, Outcome, RunContext, Stop, ToolError, ToolErrorCode, ToolRegistry, ToolSpec,
};
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Instant;

thread_local! {
    /// This worker thread's stop handle, made once, asked by cancels.
    static STOP: Stop = Stop::new();
}

/// The work function of every worker thread, with what it needs.
pub(super) struct Worker {
    /// The task table, the slots, and where claimed work goes.
    pub(super) dispatch: Arc<Dispatch>,
    pub(super) store: Arc<CallStore>,
    /// The tools calls are run with (the built-ins, or the `--tools` file).
    pub(super) tools: Arc<ToolRegistry>,
    pub(super) metrics: Arc<Metrics>,
    /// Honour chaos hooks stored in a call's args (`--chaos`).
    pub(super) chaos: bool,
}

impl Worker {
    /// A worker's batch: run the calls that came claimed, claim the tasks
    /// still this submission's, finish the others. A stopping runner starts
    /// nothing: the calls stay (or go back to) `pending` in the database for
    /// the next process.
    pub(super) fn work(&self, taken: Vec<Assignment>) {
        let assignments = taken.len();
        let slow = taken.iter().filter(|a| !a.task().quick).count();
        self.metrics.queued_calls.add(-(assignments as f64));
        let stopping = || self.dispatch.is_stopping();
        let tasks = self.dispatch.tasks();
        let stop = STOP.with(Stop::clone);
        let mut to_claim = Vec::new();
        for assignment in taken {
            match assignment {
                Assignment::Claim(task) if !stopping() && tasks.take(&task) => to_claim.push(task),
                Assignment::Run(task, lease) if !stopping() && tasks.starts(&task, Some(&stop)) => {
                    self.run_claimed(task, lease, &stop)
                }
                Assignment::Run(task, lease) => {
                    self.dispatch.finish(&task);
                    if stopping() {
                        self.dispatch.release(&lease, &ToolAtRelease::Idle);
                    }
                }
                Assignment::Claim(task) => self.dispatch.finish(&task),
            }
        }
        if !to_claim.is_empty() {
            self.execute(to_claim, &stop);
        }
        self.dispatch.worked_off(assignments, slow);
    }

    /// Claim the tasks in one operation, then run each one won, in order.
    fn execute(&self, tasks: Vec<Task>, stop: &Stop) {
        let owner = owner_name(
            self.store.instance(),
            std::thread::current().name().unwrap_or("unnamed"),
        );
        let ids: Vec<String> = tasks.iter().map(|t| t.call_id.clone()).collect();
        let leases = match self.store.claim_many(&ids, &owner, self.dispatch.lease()) {
            Ok(leases) => leases,
            Err(e) => {
                log::error("claim failed")
                    .event("claim_failed")
                    .number("calls", ids.len() as u64)
                    .cause(&e)
                    .emit();
                return tasks.iter().for_each(|task| self.dispatch.finish(task));
            }
        };
        for (task, lease) in tasks.into_iter().zip(leases) {
            let Some(lease) = lease else {
                self.dispatch.finish(&task); // held elsewhere, or already terminal
                continue;
            };
            self.metrics.claims.inc();
            log_claimed(&lease.call_id, lease.attempt, &owner);
            if self.dispatch.tasks().claimed(&task, &lease, Some(stop)) {
                self.run_claimed(task, lease, stop);
            } else {
                // A stop closed the table while this claim committed: give
                // the lease back rather than run a tool nobody tracks.
                self.dispatch.release(&lease, &ToolAtRelease::Idle);
                self.dispatch.finish(&task);
            }
        }
    }

    /// Run one claimed call's tool, as run `task.generation` of `stop`, and
    /// hand its completion to the store.
    fn run_claimed(&self, task: Task, lease: Lease, stop: &Stop) {
        self.metrics.busy_workers.inc();
        let (prepared, args, hooks) = match parse_stored_args(&self.tools, &lease) {
            Ok(parsed) => parsed,
            Err(why) => {
                let error = ToolError::new(ToolErrorCode::BadArgs, why.to_string());
                return self.complete(task, lease, Outcome::failed(error), None, false);
            }
        };
        let inputs = match self.approval_inputs(&prepared.spec, &lease.call_id) {
            Ok(inputs) => inputs,
            Err(e) => {
                let why = format!("the answers to its approval's questions: {e}");
                let error = ToolError::new(ToolErrorCode::InputsUnavailable, why);
                let outcome = Outcome::failed(error);
                let retry = retry_delay(&prepared.spec, &lease, &outcome);
                return self.complete(task, lease, outcome, retry, false);
            }
        };
        let hooks = if self.chaos && lease.attempt == 1 {
            hooks
        } else {
            chaos::Hooks::default()
        };
        let started = Instant::now();
        stop.begin(task.generation);
        let outcome = {
            // Its lease is extended until the tool returns (or panics).
            let _runs = ToolRuns::new(self.dispatch.tasks(), &task);
            if stop.is_requested() {
                let how = if stop.is_shutdown() {
                    "the service was stopping before its tool started"
                } else {
                    "its cancel came before its tool started"
                };
                Outcome::Stopped {
                    sent: false,
                    how: how.into(),
                }
            } else {
                prepared.spec.run(&RunContext {
                    call_id: &lease.call_id,
                    effect_id: &lease.effect_id,
                    attempt: lease.attempt,
                    tool: &lease.tool,
                    args: &args,
                    inputs: inputs.as_ref(),
                    stop: Some(stop),
                })
            }
        };
        let outcome = stopped_if_asked(outcome, stop);
        stop.end();
        self.metrics
            .observe_tool_run(&lease.tool, tool_outcome(&outcome), started.elapsed());
        if let (Outcome::Stopped { sent, how }, true) = (&outcome, stop.is_shutdown()) {
            // Halted by the stop, not by a cancel: the stop gives the lease
            // back, saying how the tool ended (`Runner::stop`).
            self.metrics.busy_workers.dec();
            self.dispatch.tasks().halted(&task, *sent, how.clone());
            return;
        }
        let retry = retry_delay(&prepared.spec, &lease, &outcome);
        if let Some(stall) = hooks.stall {
            std::thread::sleep(stall);
        }
        if hooks.crash_before_commit {
            chaos::crash("after the tool ran, before its completion committed");
        }
        self.complete(task, lease, outcome, retry, hooks.crash_after_commit);
    }

    /// The answers its approval's questions were given, for a tool whose
    /// policy asks questions of its own (`None`: it asks none, or only the
    /// confirmation); read from the call's audit, its tenant's.
    fn approval_inputs(
        &self,
        spec: &ToolSpec,
        call_id: &str,
    ) -> Result<Option<Map<String, Value>>, StoreError> {
        let asks = spec.approval.as_ref().is_some_and(|p| p.inputs.explicit());
        if !asks {
            return Ok(None);
        }
        let Some(call) = self.store.get(call_id)? else {
            return Ok(Some(Map::new()));
        };
        let timeline = self.store.audit_for(&call.tenant, call_id)?;
        Ok(Some(crate::store::input_answers(
            &timeline.unwrap_or_default(),
        )))
    }

    /// Hand the fenced completion to the store without waiting for its
    /// commit: the worker takes its next call while this one is grouped with
    /// other writes, and the completer records it once the commit is known.
    /// A failure with a `retry` delay goes back to `pending` until then
    /// instead of ending the call; no worker waits for it.
    fn complete(
        &self,
        task: Task,
        lease: Lease,
        outcome: Outcome,
        retry: Option<RetryDelay>,
        crash_after_commit: bool,
    ) {
        self.metrics.busy_workers.dec();
        let Some(completions) = self.dispatch.tasks().completing(&task) else {
            // A stop's grace period ended and released this lease: the call
            // is `pending` again; completing it would only be discarded.
            return self.dispatch.finish(&task);
        };
        let finish = Finish {
            lease,
            outcome,
            retry,
        };
        Handed::new(task, finish, crash_after_commit).hand_to(&self.store, completions);
    }
}

/// A failure of a run that was asked to stop is its stop: the tool failed
/// as it was being halted (or just before), and the call is cancelled, not
/// failed. A success stands: its effect happened.
fn stopped_if_asked(outcome: Outcome, stop: &Stop) -> Outcome {
    match outcome {
        Outcome::Failed { error, .. } if stop.is_requested() => Outcome::Stopped {
            sent: stop.sent(),
            how: format!(
                "its tool failed ({}) as it was being stopped",
                error.code.as_str()
            ),
        },
        other => other,
    }
}

/// The metrics label of a tool run's outcome.
fn tool_outcome(outcome: &Outcome) -> ToolOutcome {
    match outcome {
        Outcome::Succeeded { .. } => ToolOutcome::Succeeded,
        Outcome::Failed { error, .. } if error.retryable => ToolOutcome::RetryableFailure,
        Outcome::Failed { .. } => ToolOutcome::PermanentFailure,
        Outcome::Stopped { .. } => ToolOutcome::Stopped,
    }
}

/// Whether a failed attempt is retried automatically, and after how long: a
/// retryable failure before the tool's last attempt, after its backoff (or the
/// downstream's `Retry-After`, up to the tool's cap, the audit saying when it
/// was cut). A call a same-key POST reset after its last attempt gets one
/// attempt per reset.
fn retry_delay(spec: &ToolSpec, lease: &Lease, outcome: &Outcome) -> Option<RetryDelay> {
    match outcome {
        Outcome::Failed { error, retry_after }
            if error.retryable && lease.attempt < i64::from(spec.max_attempts) =>
        {
            let failed_attempt = u32::try_from(lease.attempt).unwrap_or(u32::MAX);
            let delay = spec
                .backoff
                .delay(failed_attempt, *retry_after, tools::jitter());
            Some(RetryDelay {
                delay,
                capped_from: retry_after.filter(|asked| *asked > delay),
            })
        }
        _ => None,
    }
}
