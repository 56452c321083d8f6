//! The audit trail's words: every event a call's timeline may hold, as one
//! enum, and the detail texts both backends write with them; and the one
//! event of no call, `RESTORED_COPY_ACCEPTED`. An audit row
//! is written in the same transaction as the change it records, so the
//! timeline never shows a change that did not commit.
//!
//! A statement that writes its event in SQL (PostgreSQL's, which insert the
//! audit row in the same statement as the change) spells the name and the
//! detail exactly as here; a contract test (`tests/audit.rs`) drives one
//! call through every event on both backends and holds what they wrote to
//! this file. This module never writes a row itself.

use super::model::{RetryDelay, ToolAtRelease};
use std::time::Duration;

/// What happened to a call, as `audit.event` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::store) enum Event {
    /// The call was created; the detail is its tool.
    Created,
    /// An attempt took the lease (`claimed`).
    Claimed,
    /// The attempt succeeded; the detail is the call's effect id.
    Succeeded,
    /// The attempt failed for good; the detail is the error's JSON.
    Failed,
    /// A retryable failure with attempts left went back to `pending`, due
    /// later (`retry_scheduled`).
    RetryScheduled,
    /// A same-key retry reset a retryable failure to `pending`
    /// (`retry_reset`).
    RetryReset,
    /// A stopping process gave its lease back (`released`).
    Released,
    /// Recovery took a `running` call back; the detail says whose lease and
    /// why (`Reclaimable::why`).
    Recover,
    /// A completion whose lease was lost, discarded (`stale_completion`).
    StaleCompletion,
    /// Its tenant asked to cancel a `running` call: who, why, and which
    /// attempt under whose lease (`cancel_requested`).
    CancelRequested,
    /// The call ended `cancelled`: a pending one at once (who and why), a
    /// running one once its attempt stopped or ended without an effect
    /// (how, and whether its request had gone out).
    Cancelled,
    /// A gated call was created waiting for a decision: who may decide and
    /// until when (`approval_requested`).
    ApprovalRequested,
    /// Its request was approved: by whom, from which source, why; the call
    /// is `pending`.
    Approved,
    /// Its request was denied, by a person or by its expiry: the call is
    /// `denied`.
    Denied,
    /// A `failed` or `cancelled` call sent back to `pending` by an operator:
    /// who, why, and after which attempt (`rerun`; see `store::rerun`).
    Rerun,
    /// A keyless MCP `tools/call` with the same tool and arguments was
    /// answered with this call, by its content key: nothing ran again
    /// (`replayed_by_content`).
    ReplayedByContent,
    /// The MCP client that may decide a waiting call answered some of its
    /// approval's questions; the detail is the answers, a JSON object by
    /// key (`input_answered`).
    InputAnswered,
}

impl Event {
    /// Every event, for the tests that hold SQL to these names.
    #[cfg(test)]
    pub(in crate::store) const ALL: [Event; 17] = [
        Event::Created,
        Event::Claimed,
        Event::Succeeded,
        Event::Failed,
        Event::RetryScheduled,
        Event::RetryReset,
        Event::Released,
        Event::Recover,
        Event::StaleCompletion,
        Event::CancelRequested,
        Event::Cancelled,
        Event::ApprovalRequested,
        Event::Approved,
        Event::Denied,
        Event::Rerun,
        Event::ReplayedByContent,
        Event::InputAnswered,
    ];

    /// The name in `audit.event`, and in the API's timeline.
    pub(in crate::store) fn as_str(self) -> &'static str {
        match self {
            Event::Created => "created",
            Event::Claimed => "claimed",
            Event::Succeeded => "succeeded",
            Event::Failed => "failed",
            Event::RetryScheduled => "retry_scheduled",
            Event::RetryReset => "retry_reset",
            Event::Released => "released",
            Event::Recover => "recover",
            Event::StaleCompletion => "stale_completion",
            Event::CancelRequested => "cancel_requested",
            Event::Cancelled => "cancelled",
            Event::ApprovalRequested => "approval_requested",
            Event::Approved => "approved",
            Event::Denied => "denied",
            Event::Rerun => "rerun",
            Event::ReplayedByContent => "replayed_by_content",
            Event::InputAnswered => "input_answered",
        }
    }
}

/// The one event of no call: a service started on a copy `backup` made, as
/// `--accept-restored-copy` allowed (SQLite only; `call_id` is NULL, so no
/// call's timeline shows it, and key retention never deletes it).
pub(in crate::store) const RESTORED_COPY_ACCEPTED: &str = "restored_copy_accepted";

/// `restored_copy_accepted`'s detail: which snapshot of which file, and the
/// process that accepted it.
pub(in crate::store) fn restored_copy_accepted(
    snapshot: &str,
    source: &str,
    source_host: &str,
    pid: u32,
    host: &str,
) -> String {
    format!(
        "a copy of {source} on {source_host}, snapshot {snapshot}: keys accepted after it are \
         not in it; accepted by pid {pid} on {host}"
    )
}

/// `claimed`'s detail: who holds the lease, and for which attempt.
pub(in crate::store) fn claimed(owner: &str, attempt: i64) -> String {
    format!("{owner} attempt={attempt}")
}

/// `retry_scheduled`'s detail: which attempt failed with what error (its
/// code and message, so the timeline shows every attempt's error, not only
/// the last one the call keeps), and when the next one may start.
pub(in crate::store) fn retry_scheduled(
    attempt: i64,
    code: &str,
    message: &str,
    delay: RetryDelay,
) -> String {
    let scheduled = format!(
        "attempt {attempt} failed ({code}: {message}); attempt {} in {:.3} s",
        attempt + 1,
        delay.delay.as_secs_f64()
    );
    match delay.capped_from {
        None => scheduled,
        Some(asked) => format!(
            "{scheduled}: the downstream's Retry-After of {:.3} s was capped at the tool's \
             retry_after_max_ms",
            asked.as_secs_f64()
        ),
    }
}

/// `retry_reset`'s detail: the attempt whose failure was reset.
pub(in crate::store) fn retry_reset(attempt: i64) -> String {
    format!("after attempt {attempt}")
}

/// `released`'s detail: what the stopping process had done to the
/// attempt's tool before it gave the lease back.
pub(in crate::store) fn released(attempt: i64, tool: &ToolAtRelease) -> String {
    match tool {
        ToolAtRelease::Idle => format!("attempt {attempt} released by a stopping process"),
        ToolAtRelease::Stopped { sent, how } => format!(
            "attempt {attempt} released by a stopping process after its tool was stopped, \
             sent={sent}: {how}"
        ),
        ToolAtRelease::StillStopping { sent } => format!(
            "attempt {attempt} released by a stopping process while its tool, asked to stop, \
             had not ended, sent={sent}"
        ),
    }
}

/// `stale_completion`'s detail: what the attempt that lost its lease would
/// have recorded (`Succeeded`, `Failed` or `RetryScheduled`).
pub(in crate::store) fn stale_completion(attempt: i64, would_have: Event) -> String {
    let outcome = match would_have {
        Event::RetryScheduled => "been retried",
        Event::Cancelled => "been cancelled",
        other => other.as_str(),
    };
    format!("attempt {attempt} would have {outcome}; discarded")
}

/// Who asked for a cancel (the tenant) and why, if they said.
fn asked(by: &str, reason: Option<&str>) -> String {
    match reason {
        Some(reason) => format!("by {by}: {reason}"),
        None => format!("by {by}"),
    }
}

/// `cancel_requested`'s detail: who asked and why, and which attempt is to
/// stop, under whose lease.
pub(in crate::store) fn cancel_requested(
    by: &str,
    reason: Option<&str>,
    attempt: i64,
    owner: Option<&str>,
) -> String {
    let owner = owner.unwrap_or("no owner");
    format!(
        "{}; attempt {attempt} runs under {owner}",
        asked(by, reason)
    )
}

/// `cancelled`'s detail for a call cancelled at once: who asked and why, and
/// that nothing ran since it was accepted (or since its last failed attempt,
/// for a call waiting for an automatic retry).
pub(in crate::store) fn cancelled_pending(by: &str, reason: Option<&str>, attempt: i64) -> String {
    let state = match attempt {
        0 => "pending, never ran".to_string(),
        n => format!(
            "waiting to retry after attempt {n}; attempt {} never ran",
            n + 1
        ),
    };
    format!("{}; {state}", asked(by, reason))
}

/// `rerun`'s detail: who asked and why, and which attempt ended how.
pub(in crate::store) fn rerun(
    by: &str,
    reason: Option<&str>,
    attempt: i64,
    ended: crate::status::Status,
) -> String {
    format!("{}; after attempt {attempt} ({ended})", asked(by, reason))
}

/// `cancelled`'s detail when the owner stopped the attempt: whether its
/// tool had reached the outside (`sent`: the http request went out, the
/// command's process started) and how it was stopped.
pub(in crate::store) fn stopped(attempt: i64, sent: bool, how: &str) -> String {
    format!("attempt {attempt} stopped, sent={sent}: {how}")
}

/// `cancelled`'s detail when the attempt ended short of a success after the
/// cancel was asked (its tool failed, or was due for a retry), before its
/// owner had stopped it.
pub(in crate::store) fn ended_after_cancel(attempt: i64, code: &str) -> String {
    format!("attempt {attempt} ended ({code}) after the cancel was asked, sent=true; no effect recorded")
}

/// `cancelled`'s detail when a stopping process gave back the lease of an
/// attempt whose cancel was asked.
pub(in crate::store) fn released_after_cancel(attempt: i64) -> String {
    format!(
        "attempt {attempt} released by a stopping process after the cancel was asked, \
         sent=unknown; no effect recorded"
    )
}

/// `cancelled`'s detail when recovery took back a call whose cancel was
/// asked from an owner that is gone (`why`): its attempt may have run.
pub(in crate::store) fn recovered_after_cancel(attempt: i64, why: &str) -> String {
    format!(
        "taken back ({why}) after the cancel was asked: attempt {attempt} may have run, \
         sent=unknown; no effect recorded"
    )
}

/// `approval_requested`'s detail: who may decide, and for how long the
/// request stays open.
pub(in crate::store) fn approval_requested(approvers: &str, timeout: Duration) -> String {
    format!(
        "approvers {approvers}; expires in {} s",
        timeout.as_secs_f64()
    )
}

/// `replayed_by_content`'s detail: which request found the call, and that
/// nothing ran for it.
pub(in crate::store) fn replayed_by_content(window_secs: u64) -> String {
    format!(
        "a keyless MCP tools/call with the same tool and arguments within {window_secs} s \
         was answered with this call; nothing ran again"
    )
}

/// `cancelled`'s detail for a call cancelled while it waited for a
/// decision: who asked and why; it never ran.
pub(in crate::store) fn cancelled_awaiting(by: &str, reason: Option<&str>) -> String {
    format!("{}; awaiting approval, never ran", asked(by, reason))
}
