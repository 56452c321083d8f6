//! Completions handed back, and the `Completer` that records them: a worker
//! hands its fenced completion to the store's writer without waiting
//! (`Handed::hand_to`), and the writer, once the commit's fate is known,
//! only sends it here (`hand_back`). One thread, the completer, takes them
//! off the channel a batch at a time and does the rest: counts the metrics,
//! logs the transition, fires the `_crash_after_commit` chaos hook, finishes
//! the task (its entry goes, its tool's slot passes on), wakes the waiters
//! of the batch's calls with one notification, and rings the maintenance
//! thread's doorbell to poll at once when the last poll left calls due.
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
//! The completer holds what it needs and nothing else: the dispatch (the
//! task table and the slots), the store (to hand a held completion again),
//! the notifier, the metrics and the doorbell. Nothing here runs on the
//! writer thread but the send: a slow log sink or a crash hook never holds
//! up a commit. It never decides a transition — the store's fence already
//! did.

use super::chore::Doorbell;
use super::dispatch::Dispatch;
use super::handed::{Handed, Handoff, Transition};
use super::notifier::Notifier;
use crate::chaos;
use crate::log::{self, Repeats};
use crate::metrics::Metrics;
use crate::store::{CallStore, Completion, LeaseHeld, StoreError};
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

/// The completer's thread; it ends once every `Completions` sender is gone:
/// the task table's (dropped when it closes) and those of the completions
/// still with the writer.
pub(super) struct Completer {
    thread: JoinHandle<()>,
}

impl Completer {
    /// Start the completer on `handoffs`.
    pub(super) fn start(
        dispatch: Arc<Dispatch>,
        store: Arc<CallStore>,
        notifier: Arc<Notifier>,
        metrics: Arc<Metrics>,
        doorbell: Arc<Doorbell>,
        handoffs: mpsc::Receiver<Handoff>,
    ) -> std::io::Result<Completer> {
        let recorder = Recorder {
            dispatch,
            store,
            notifier,
            metrics,
            doorbell,
        };
        let thread = std::thread::Builder::new()
            .name("completer".into())
            .spawn(move || recorder.record_until_closed(&handoffs))?;
        Ok(Completer { thread })
    }

    /// Wait until every completion handed to the store is recorded (the
    /// task table closed, and the writer has answered the rest).
    pub(super) fn join(self) {
        let _ = self.thread.join();
    }
}

/// What the completer thread records completions with.
struct Recorder {
    /// The task table (held completions, finished tasks) and the slots.
    dispatch: Arc<Dispatch>,
    /// To hand a held completion to again, and to tell a failed sync.
    store: Arc<CallStore>,
    notifier: Arc<Notifier>,
    metrics: Arc<Metrics>,
    /// Rung when a completion frees room while the last poll left calls due.
    doorbell: Arc<Doorbell>,
}

impl Recorder {
    /// Take completions off the channel a batch at a time, handing the held
    /// ones to the store again as they come due.
    fn record_until_closed(&self, handoffs: &mpsc::Receiver<Handoff>) {
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
                    self.record_batch(batch, &mut held);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
            self.hand_due_ones_again(&mut held);
        }
        self.last_try(held.into_iter().map(|h| h.handed).collect());
    }

    /// Record each completion, finish its task, then wake the batch's waiters.
    /// A completion whose commit failed for a reason that may pass is held
    /// instead: its task stays, holding its slot, and nobody is woken.
    fn record_batch(&self, batch: Vec<Handoff>, held: &mut Vec<Held>) {
        let mut finished = Vec::with_capacity(batch.len());
        for (handed, committed) in batch {
            if let Err(e) = &committed {
                if self.worth_another_try(e) {
                    self.hold(handed, e, held);
                    continue;
                }
            }
            finished.push(self.settle(handed, committed));
        }
        self.notifier.notify(finished.iter().map(String::as_str));
        // The last poll claimed all it could; these completions freed workers
        // and slots, so more due calls may be claimed now.
        if self.dispatch.take_more_due() {
            self.doorbell.ring();
        }
    }

    /// Whether a failed commit may succeed if asked again: the store is
    /// unavailable for now, not failed for good (a failed WAL sync refuses
    /// every write until a restart) and not broken (an internal error).
    fn worth_another_try(&self, e: &StoreError) -> bool {
        e.is_unavailable() && self.store.write_failure().is_none()
    }

    fn hold(&self, handed: Handed, e: &StoreError, held: &mut Vec<Held>) {
        self.metrics.completions_retried.inc();
        self.dispatch
            .tasks()
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
    fn hand_due_ones_again(&self, held: &mut Vec<Held>) {
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
        match self.dispatch.tasks().completions() {
            Some(completions) => {
                for mut handed in due {
                    handed.tries += 1;
                    handed.hand_to(&self.store, completions.clone());
                }
            }
            None => self.last_try(due),
        }
    }

    /// Hand held completions to the store once more, together, and wait for
    /// their commit: the runner is stopping, and whatever this try leaves
    /// uncommitted is left to recovery (the lease expires, or the next process
    /// finds this one stopped), as a completion whose fate is unknown always is.
    fn last_try(&self, held: Vec<Handed>) {
        let (completions, answers) = mpsc::channel();
        for mut handed in held {
            handed.tries += 1;
            handed.hand_to(&self.store, completions.clone());
        }
        drop(completions);
        for (handed, committed) in answers {
            let call_id = self.settle(handed, committed);
            self.notifier.notify([call_id.as_str()]);
        }
    }

    /// A completion whose fate is final here: record it and finish its task;
    /// returns its call id, for the waiters to be woken.
    fn settle(&self, handed: Handed, committed: Result<Completion, StoreError>) -> String {
        self.record(&handed, committed);
        self.dispatch.pass_slot_on(&handed.task);
        handed.task.call_id
    }

    /// The metrics, the log line and the chaos hook of one answered completion.
    fn record(&self, handed: &Handed, committed: Result<Completion, StoreError>) {
        let (call_id, attempt) = (&handed.task.call_id, handed.attempt);
        match committed {
            Ok(Completion::Applied) => {
                if handed.writes_effect {
                    self.metrics.effects_written.inc();
                }
                if handed.transition == Transition::RetryScheduled {
                    self.metrics.retries_scheduled.inc();
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
            // Its cancel had been asked: the failure or the retry it asked
            // for ended the call `cancelled` instead.
            Ok(Completion::Cancelled) => log::info("call cancelled: its cancel was asked")
                .event("cancelled")
                .call_id(call_id)
                .attempt(attempt)
                .transition("running", "cancelled")
                .emit(),
            Ok(Completion::Stale) => {
                self.metrics.stale_completions.inc();
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
}

#[cfg(test)]
mod tests {
    use super::super::handed::Finish;
    use super::super::tasks::Task;
    use super::*;
    use crate::store::{Lease, RetryDelay};
    use crate::tools::{Outcome, ToolError, ToolErrorCode};

    #[test]
    fn a_held_completion_waits_twice_as_long_each_time_up_to_a_second() {
        let waits: Vec<u128> = (1..=8)
            .map(|tries| retry_delay(tries).as_millis())
            .collect();
        assert_eq!(waits, [50, 100, 200, 400, 800, 1000, 1000, 1000]);
        assert_eq!(retry_delay(u32::MAX), RETRY_AT_MOST);
    }

    fn finish(attempt: i64, outcome: Outcome, retry: Option<RetryDelay>) -> Finish {
        let lease = Lease {
            call_id: "c1".into(),
            attempt,
            tool: "charge".into(),
            args_json: "{}".into(),
            effect_id: "e-c1".into(),
            lease_until: 0.0,
        };
        Finish {
            lease,
            outcome,
            retry,
        }
    }

    fn task() -> Task {
        Task {
            call_id: "c1".into(),
            tool: "charge".into(),
            generation: 1,
            quick: true,
        }
    }

    /// What a completion asks for follows from its outcome: a success (with
    /// or without an effect row), a failure with a retry due, or one without.
    #[test]
    fn a_completion_asks_for_the_transition_its_outcome_names() {
        let failed = || Outcome::failed(ToolError::new(ToolErrorCode::BadArgs, "no"));
        let retry = Some(Duration::from_secs(1).into());
        let retried = Handed::new(task(), finish(2, failed(), retry), false);
        assert_eq!(retried.transition, Transition::RetryScheduled);
        assert_eq!(retried.attempt, 2);
        let failed = Handed::new(task(), finish(1, failed(), None), false);
        assert_eq!(failed.transition, Transition::Failed);
        assert!(!failed.writes_effect);
    }

    /// A completion of attempt 0 names no claim: a debug build stops there.
    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "a completion of attempt 0")]
    fn a_completion_of_no_attempt_is_caught() {
        let failed = Outcome::failed(ToolError::new(ToolErrorCode::BadArgs, "no"));
        let _ = Handed::new(task(), finish(0, failed, None), false);
    }
}
