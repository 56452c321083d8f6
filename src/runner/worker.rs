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
//! `bad_args`, never a worker's panic. A retryable failure with attempts left
//! is completed as `retry_later`: back to `pending` until its backoff ends,
//! with no worker waiting for it.
//!
//! Every failure here leaves a call where recovery finds it: `pending`, or
//! `running` with a lease that will expire. It never decides who executes a
//! call (the claim does) and never records a completion itself (the
//! completer does, once the commit is known).

use super::completion::{Finish, Handed};
use super::dispatch::{log_claimed, Assignment, Dispatch};
use super::stored_args::parse_stored_args;
use super::tasks::{Task, ToolRuns};
use crate::chaos;
use crate::log;
use crate::metrics::{Metrics, ToolOutcome};
use crate::store::{owner_name, CallStore, Lease};
use crate::tools::{self, Outcome, RunContext, ToolError, ToolErrorCode, ToolRegistry, ToolSpec};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
        let mut to_claim = Vec::new();
        for assignment in taken {
            match assignment {
                Assignment::Claim(task) if !stopping() && tasks.take(&task) => to_claim.push(task),
                Assignment::Run(task, lease) if !stopping() && tasks.starts(&task) => {
                    self.run_claimed(task, lease)
                }
                Assignment::Run(task, lease) => {
                    self.dispatch.finish(&task);
                    if stopping() {
                        self.dispatch.release(&lease);
                    }
                }
                Assignment::Claim(task) => self.dispatch.finish(&task),
            }
        }
        if !to_claim.is_empty() {
            self.execute(to_claim);
        }
        self.dispatch.worked_off(assignments, slow);
    }

    /// Claim the tasks in one operation, then run each one won, in order.
    fn execute(&self, tasks: Vec<Task>) {
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
            if self.dispatch.tasks().claimed(&task, &lease) {
                self.run_claimed(task, lease);
            } else {
                // A stop closed the table while this claim committed: give
                // the lease back rather than run a tool nobody tracks.
                self.dispatch.release(&lease);
                self.dispatch.finish(&task);
            }
        }
    }

    /// Run one claimed call's tool and hand its completion to the store.
    fn run_claimed(&self, task: Task, lease: Lease) {
        self.metrics.busy_workers.inc();
        let (prepared, args, hooks) = match parse_stored_args(&self.tools, &lease) {
            Ok(parsed) => parsed,
            Err(why) => {
                let error = ToolError::new(ToolErrorCode::BadArgs, why.to_string());
                return self.complete(task, lease, Outcome::failed(error), None, false);
            }
        };
        let hooks = if self.chaos && lease.attempt == 1 {
            hooks
        } else {
            chaos::Hooks::default()
        };
        let started = Instant::now();
        let outcome = {
            // Its lease is extended until the tool returns (or panics).
            let _runs = ToolRuns::new(self.dispatch.tasks(), &task);
            prepared.spec.run(&RunContext {
                call_id: &lease.call_id,
                effect_id: &lease.effect_id,
                attempt: lease.attempt,
                tool: &lease.tool,
                args: &args,
            })
        };
        self.metrics
            .observe_tool_run(&lease.tool, tool_outcome(&outcome), started.elapsed());
        let retry = retry_delay(&prepared.spec, &lease, &outcome);
        if let Some(stall) = hooks.stall {
            std::thread::sleep(stall);
        }
        if hooks.crash_before_commit {
            chaos::crash("after the tool ran, before its completion committed");
        }
        self.complete(task, lease, outcome, retry, hooks.crash_after_commit);
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
        retry: Option<Duration>,
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

/// The metrics label of a tool run's outcome.
fn tool_outcome(outcome: &Outcome) -> ToolOutcome {
    match outcome {
        Outcome::Succeeded { .. } => ToolOutcome::Succeeded,
        Outcome::Failed { error, .. } if error.retryable => ToolOutcome::RetryableFailure,
        Outcome::Failed { .. } => ToolOutcome::PermanentFailure,
    }
}

/// Whether a failed attempt is retried automatically, and after how long: a
/// retryable failure before the tool's last attempt, after its backoff (or the
/// downstream's `Retry-After`). A call a same-key POST reset after its last
/// attempt gets one attempt per reset.
fn retry_delay(spec: &ToolSpec, lease: &Lease, outcome: &Outcome) -> Option<Duration> {
    match outcome {
        Outcome::Failed { error, retry_after }
            if error.retryable && lease.attempt < i64::from(spec.max_attempts) =>
        {
            let failed_attempt = u32::try_from(lease.attempt).unwrap_or(u32::MAX);
            Some(
                spec.backoff
                    .delay(failed_attempt, *retry_after, tools::jitter()),
            )
        }
        _ => None,
    }
}
