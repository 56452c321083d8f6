//! What a worker hands to the store when its tool returns (`Finish`,
//! `Handed`), and where the writer sends back what the commit said
//! (`Completions`, `Handoff`): the contract between the workers, the task
//! table that carries the sender (`dispatch`) and the completer that
//! records the outcome (`completion`). A leaf of the runner's completion
//! path: it names neither of them.
//!
//! It asks the store to record a completion and never waits for the commit.

use super::tasks::Task;
use crate::status::Status;
use crate::store::{CallStore, Completion, Lease, NewEffect, RetryDelay, StoreError, Then};
use crate::tools::{Effect, Outcome};
use std::sync::{mpsc, Arc};

/// Where the writer sends each completion's outcome.
pub(super) type Completions = mpsc::Sender<Handoff>;

/// A completion and what its commit said.
pub(super) type Handoff = (Handed, Result<Completion, StoreError>);

/// What a worker asks the store to record when its tool returns: kept with
/// the completion until it is committed or fenced off, so that a commit
/// that failed can be asked for again.
pub(super) struct Finish {
    pub(super) lease: Lease,
    pub(super) outcome: Outcome,
    /// A retryable failure with attempts left: back to `pending` after this.
    pub(super) retry: Option<RetryDelay>,
}

/// What a worker handed to the store: enough to record it once committed.
pub(super) struct Handed {
    pub(super) task: Task,
    pub(super) attempt: i64,
    pub(super) transition: Transition,
    /// The tool wrote an effect row along with its success.
    pub(super) writes_effect: bool,
    /// The `_crash_after_commit` chaos hook is armed.
    pub(super) crash_after_commit: bool,
    /// What was asked of the store, to ask again if the commit failed.
    pub(super) finish: Arc<Finish>,
    /// How many times it has been handed to the store.
    pub(super) tries: u32,
}

impl Handed {
    /// The completion of `task`'s attempt, not yet handed to the store. A
    /// completion belongs to an attempt the store claimed, so its attempt
    /// is at least 1.
    pub(super) fn new(task: Task, finish: Finish, crash_after_commit: bool) -> Handed {
        debug_assert!(
            finish.lease.attempt >= 1,
            "a completion of attempt {}: no claim makes one",
            finish.lease.attempt
        );
        let (transition, writes_effect) = match (&finish.outcome, finish.retry) {
            (Outcome::Succeeded { effect, .. }, _) => (Transition::Succeeded, effect.is_some()),
            (Outcome::Failed { .. }, Some(_)) => (Transition::RetryScheduled, false),
            (Outcome::Failed { .. }, None) => (Transition::Failed, false),
            (Outcome::Stopped { .. }, _) => (Transition::Cancelled, false),
        };
        Handed {
            task,
            attempt: finish.lease.attempt,
            transition,
            writes_effect,
            crash_after_commit,
            finish: Arc::new(finish),
            tries: 1,
        }
    }

    /// Submit the completion to the store's writer, its outcome to be sent
    /// through `completions`: the first time, and again when a commit
    /// failed for a reason that may pass.
    pub(super) fn hand_to(self, store: &CallStore, completions: Completions) {
        let finish = Arc::clone(&self.finish);
        let Finish {
            lease,
            outcome,
            retry,
        } = &*finish;
        let then = hand_back(completions, self);
        match outcome {
            Outcome::Succeeded { result, effect } => {
                store.succeed_then(lease, result, effect.as_ref().map(effect_record), then)
            }
            Outcome::Failed { error, .. } => match retry {
                Some(delay) => store.retry_later_then(lease, &error.to_json(), *delay, then),
                None => store.fail_then(lease, &error.to_json(), then),
            },
            Outcome::Stopped { sent, how } => store.stopped_then(lease, *sent, how, then),
        }
    }
}

/// The `effects` row the store writes for a tool's effect: the runner is
/// where tools and the store meet, so neither depends on the other.
pub(super) fn effect_record(effect: &Effect) -> NewEffect {
    NewEffect {
        amount: effect.amount,
        detail: effect.detail.clone(),
    }
}

/// The transition a completion asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Transition {
    Succeeded,
    Failed,
    /// A retryable failure with attempts left: back to `pending` until its
    /// retry is due.
    RetryScheduled,
    /// The tool was stopped because its call was cancelled.
    Cancelled,
}

impl Transition {
    pub(super) fn event(self) -> &'static str {
        match self {
            Transition::Succeeded => "succeeded",
            Transition::Failed => "failed",
            Transition::RetryScheduled => "retry_scheduled",
            Transition::Cancelled => "cancelled",
        }
    }

    pub(super) fn to_status(self) -> &'static str {
        match self {
            Transition::Succeeded => Status::Succeeded,
            Transition::Failed => Status::Failed,
            Transition::RetryScheduled => Status::Pending,
            Transition::Cancelled => Status::Cancelled,
        }
        .as_str()
    }
}

/// The writer's callback for one completion: the handoff, and nothing else.
pub(super) fn hand_back(completions: Completions, handed: Handed) -> Then<Completion> {
    Box::new(move |committed| {
        // The completer has gone only if it panicked; the call is then left
        // to recovery, like any completion whose fate is unknown.
        let _ = completions.send((handed, committed));
    })
}
