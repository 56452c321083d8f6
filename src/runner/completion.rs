//! Completions handed back: a worker hands its fenced completion to the
//! store's writer without waiting, and the writer, once the commit's fate is
//! known, only sends it here (`hand_back`). One runner thread, the
//! completer, takes them off the channel a batch at a time and does the rest:
//! counts the metrics, logs the transition, fires the `_crash_after_commit`
//! chaos hook, finishes the task (its entry goes, its tool's slot passes on),
//! wakes the waiters of the batch's calls with one notification, and asks
//! the maintenance thread to poll at once when the last poll left calls due.
//!
//! Nothing here runs on the writer thread but the send: a slow log sink or a
//! crash hook never holds up a commit. It never decides a transition — the
//! store's fence already did — and never writes to the store.

use super::tasks::Task;
use super::Runner;
use crate::chaos;
use crate::log;
use crate::store::{Completion, StoreError, Then};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

/// The most completions taken off the channel before their waiters are
/// woken, so a flood of completions still wakes waiters in good time.
const MAX_BATCH: usize = 256;

/// Where the writer sends each completion's outcome.
pub(super) type Completions = mpsc::Sender<Handoff>;

/// A completion and what its commit said.
pub(super) type Handoff = (Handed, Result<Completion, StoreError>);

/// What a worker handed to the store: enough to record it once committed.
pub(super) struct Handed {
    pub(super) task: Task,
    pub(super) attempt: i64,
    pub(super) transition: Transition,
    /// The tool wrote an effect row along with its success.
    pub(super) writes_effect: bool,
    /// The `_crash_after_commit` chaos hook is armed.
    pub(super) crash_after_commit: bool,
}

/// The transition a completion asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Transition {
    Succeeded,
    Failed,
    /// A retryable failure with attempts left: back to `pending` until its
    /// retry is due.
    RetryScheduled,
}

impl Transition {
    fn event(self) -> &'static str {
        match self {
            Transition::Succeeded => "succeeded",
            Transition::Failed => "failed",
            Transition::RetryScheduled => "retry_scheduled",
        }
    }

    fn to_status(self) -> &'static str {
        match self {
            Transition::Succeeded => "succeeded",
            Transition::Failed => "failed",
            Transition::RetryScheduled => "pending",
        }
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

/// Start the completer. It ends once every `Completions` sender is gone: the
/// task table's (dropped when it closes) and those of the completions still
/// with the writer.
pub(super) fn start(
    runner: Arc<Runner>,
    handoffs: mpsc::Receiver<Handoff>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("completer".into())
        .spawn(move || {
            while let Ok(first) = handoffs.recv() {
                let batch: Vec<Handoff> = std::iter::once(first)
                    .chain(handoffs.try_iter().take(MAX_BATCH - 1))
                    .collect();
                record_batch(&runner, batch);
            }
        })
}

/// Record each completion, finish its task, then wake the batch's waiters.
fn record_batch(runner: &Runner, batch: Vec<Handoff>) {
    let mut finished = Vec::with_capacity(batch.len());
    for (handed, committed) in batch {
        record(runner, &handed, committed);
        runner.pass_slot_on(&handed.task);
        finished.push(handed.task.call_id);
    }
    runner.notifier.notify(finished.iter().map(String::as_str));
    // The last poll claimed all it could; these completions freed workers
    // and slots, so more due calls may be claimed now.
    if runner.more_due.swap(false, Ordering::SeqCst) {
        runner.poll_soon();
    }
}

/// The metrics, the log line and the chaos hook of one answered completion.
fn record(runner: &Runner, handed: &Handed, committed: Result<Completion, StoreError>) {
    let (call_id, attempt) = (&handed.task.call_id, handed.attempt);
    match committed {
        Ok(Completion::Applied) => {
            if handed.writes_effect {
                runner.metrics.effects_written.inc();
            }
            if handed.transition == Transition::RetryScheduled {
                runner.metrics.retries_scheduled.inc();
            }
            log::debug("call completed")
                .event(handed.transition.event())
                .call_id(call_id)
                .attempt(attempt)
                .transition("running", handed.transition.to_status())
                .emit();
            if handed.crash_after_commit {
                chaos::crash("after the completion committed, before any response");
            }
        }
        Ok(Completion::Stale) => {
            runner.metrics.stale_completions.inc();
            log::warn("stale completion discarded: the lease was lost")
                .event("stale_completion")
                .call_id(call_id)
                .attempt(attempt)
                .emit()
        }
        // The lease will expire and recovery will run the call again with
        // the same effect_id, which the downstream (and `effects`) deduplicate.
        Err(e) => log::error("completion not committed; recovery will run the call again")
            .event("complete_failed")
            .call_id(call_id)
            .attempt(attempt)
            .cause(&e)
            .emit(),
    }
}
