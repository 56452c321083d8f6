//! Completions handed back: a worker hands its fenced completion to the
//! store's writer without waiting, and the writer, once the commit's fate is
//! known, only sends it here (`hand_back`). One runner thread, the
//! completer, takes them off the channel a batch at a time and does the rest:
//! counts the metrics, logs the transition, fires the `_crash_after_commit`
//! chaos hook, finishes the task (its entry goes, its tool's slot passes on),
//! wakes the waiters of the batch's calls with one notification, and asks
//! the maintenance thread to poll at once when the last poll left calls due.
//!
//! A completion whose commit failed for a reason that may pass (the file
//! locked past the busy timeout by another process, a full disk, a database
//! restarting) is held here and handed to the store again, after 50 ms, then
//! twice as long each time up to a second, until it commits or is fenced
//! off: left to recovery instead, its lease would expire and the call would
//! run again. Not after a failed WAL sync (nothing commits until a restart)
//! nor an internal error; a stop gives each held completion one last try.
//! A held completion's lease is no longer extended (its tool has returned),
//! but this process's recovery leaves it alone, lapsed or not, as it does a
//! running tool's (`TaskTable::held`): its executor is alive and will
//! commit once the fault passes. Another process on the same database may
//! still take a lapsed lease; the fence then refuses the held completion
//! and the call runs again there, with the same `effect_id`.
//!
//! Nothing here runs on the writer thread but the send: a slow log sink or a
//! crash hook never holds up a commit. It never decides a transition — the
//! store's fence already did — and never writes to the store but through
//! the runner's `hand_to_store`.

use super::tasks::Task;
use super::{Finish, Runner};
use crate::chaos;
use crate::log::{self, Repeats};
use crate::store::{Completion, LeaseHeld, StoreError, Then};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The first wait before a failed completion is handed to the store again;
/// it doubles with each failure up to `RETRY_AT_MOST`.
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_AT_MOST: Duration = Duration::from_secs(1);

/// Every held completion fails again while the fault lasts: one line per
/// second, with a count, however many calls are waiting.
static COMPLETION_HELD: Repeats = Repeats::every(Duration::from_secs(1));

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
    /// What was asked of the store, to ask again if the commit failed.
    pub(super) finish: Arc<Finish>,
    /// How many times it has been handed to the store.
    pub(super) tries: u32,
}

/// A completion whose commit failed, and when to hand it to the store again.
struct Held {
    due: Instant,
    handed: Handed,
}

/// How long a completion that has been handed to the store `tries` times,
/// the last time in vain, waits before the next.
fn retry_delay(tries: u32) -> Duration {
    let doublings = tries.saturating_sub(1).min(5);
    (RETRY_FIRST * 2u32.pow(doublings)).min(RETRY_AT_MOST)
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
        .spawn(move || record_until_closed(&runner, &handoffs))
}

/// Take completions off the channel a batch at a time, handing the held
/// ones to the store again as they come due.
fn record_until_closed(runner: &Runner, handoffs: &mpsc::Receiver<Handoff>) {
    let mut held: Vec<Held> = Vec::new();
    loop {
        let next = match held.iter().map(|h| h.due).min() {
            None => handoffs
                .recv()
                .map_err(|_| mpsc::RecvTimeoutError::Disconnected),
            Some(due) => handoffs.recv_timeout(due.saturating_duration_since(Instant::now())),
        };
        match next {
            Ok(first) => {
                let batch: Vec<Handoff> = std::iter::once(first)
                    .chain(handoffs.try_iter().take(MAX_BATCH - 1))
                    .collect();
                record_batch(runner, batch, &mut held);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        hand_due_ones_again(runner, &mut held);
    }
    last_try(runner, held.into_iter().map(|h| h.handed).collect());
}

/// Record each completion, finish its task, then wake the batch's waiters.
/// A completion whose commit failed for a reason that may pass is held
/// instead: its task stays, holding its slot, and nobody is woken.
fn record_batch(runner: &Runner, batch: Vec<Handoff>, held: &mut Vec<Held>) {
    let mut finished = Vec::with_capacity(batch.len());
    for (handed, committed) in batch {
        if let Err(e) = &committed {
            if worth_another_try(runner, e) {
                hold(runner, handed, e, held);
                continue;
            }
        }
        finished.push(settle(runner, handed, committed));
    }
    runner.notifier.notify(finished.iter().map(String::as_str));
    // The last poll claimed all it could; these completions freed workers
    // and slots, so more due calls may be claimed now.
    if runner.more_due.swap(false, Ordering::SeqCst) {
        runner.poll_soon();
    }
}

/// Whether a failed commit may succeed if asked again: the store is
/// unavailable for now, not failed for good (a failed WAL sync refuses
/// every write until a restart) and not broken (an internal error).
fn worth_another_try(runner: &Runner, e: &StoreError) -> bool {
    e.is_unavailable() && runner.store.write_failure().is_none()
}

fn hold(runner: &Runner, handed: Handed, e: &StoreError, held: &mut Vec<Held>) {
    runner.metrics.completions_retried.inc();
    runner
        .tasks
        .held(&handed.task, LeaseHeld::from(&handed.finish.lease));
    log::warn("completion not committed; handing it to the store again")
        .event("completion_held")
        .call_id(&handed.task.call_id)
        .attempt(handed.attempt)
        .number("tries", u64::from(handed.tries))
        .cause(e)
        .emit_or_count(&COMPLETION_HELD);
    held.push(Held {
        due: Instant::now() + retry_delay(handed.tries),
        handed,
    });
}

/// Hand each held completion that is due to the store again; once a stop
/// has closed the task table, give it its last try instead.
fn hand_due_ones_again(runner: &Runner, held: &mut Vec<Held>) {
    let now = Instant::now();
    let due: Vec<Handed> = held
        .extract_if(.., |h| h.due <= now)
        .map(|h| h.handed)
        .collect();
    // This runs after every batch of completions: with none due, it must not
    // take the task table's lock that every worker and request shares.
    if due.is_empty() {
        return;
    }
    match runner.tasks.completions() {
        Some(completions) => {
            for mut handed in due {
                handed.tries += 1;
                runner.hand_to_store(handed, completions.clone());
            }
        }
        None => last_try(runner, due),
    }
}

/// Hand held completions to the store once more, together, and wait for
/// their commit: the runner is stopping, and whatever this try leaves
/// uncommitted is left to recovery (the lease expires, or the next process
/// finds this one stopped), as a completion whose fate is unknown always is.
fn last_try(runner: &Runner, held: Vec<Handed>) {
    let (completions, answers) = mpsc::channel();
    for mut handed in held {
        handed.tries += 1;
        runner.hand_to_store(handed, completions.clone());
    }
    drop(completions);
    for (handed, committed) in answers {
        let call_id = settle(runner, handed, committed);
        runner.notifier.notify([call_id.as_str()]);
    }
}

/// A completion whose fate is final here: record it and finish its task;
/// returns its call id, for the waiters to be woken.
fn settle(runner: &Runner, handed: Handed, committed: Result<Completion, StoreError>) -> String {
    record(runner, &handed, committed);
    runner.pass_slot_on(&handed.task);
    handed.task.call_id
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_completion_waits_twice_as_long_each_time_up_to_a_second() {
        let waits: Vec<u128> = (1..=8)
            .map(|tries| retry_delay(tries).as_millis())
            .collect();
        assert_eq!(waits, [50, 100, 200, 400, 800, 1000, 1000, 1000]);
        assert_eq!(retry_delay(u32::MAX), RETRY_AT_MOST);
    }
}
