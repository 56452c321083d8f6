//! Cancelling on SQLite (migration 9: `calls.cancel_requested_at`,
//! `calls.cancel_reason`), by the rules of `store::cancel`: the cancel
//! itself (a `pending` call to `cancelled`, or a `running` one's request
//! recorded), the fenced end of a running call whose cancel was asked
//! (`end_cancelled`, shared by its owner's stop, a failure, a retry, a
//! release and recovery), and the read an owner makes to learn of cancels.
//!
//! Every change is a conditional `UPDATE` naming the status and the attempt
//! it read, whose row count decides, inside the writer's transaction; the
//! audit row commits with it. A cancelled call's `error_json` gives the
//! reason the cancel gave, or `NO_REASON` (`?4` in both statements) when it
//! gave none. Never runs a tool.

use super::super::audit::{self, Event};
use super::super::cancel::{cancel_with, Cancel, CancelSteps, NO_REASON};
use super::super::ids::now;
use super::super::model::{Call, Completion, Lease, LeaseHeld};
use super::count_book;
use super::steps::{
    audit, discard_stale, group, left_running, select_tenant_call, tenant_and_tool,
};
use crate::status::Status;
use rusqlite::{params, Connection, OptionalExtension};

/// One cancel, in the writer's transaction: no other writer runs between
/// its read and its update, so one pass decides.
pub(super) fn cancel_op(
    tenant: String,
    call_id: String,
    reason: Option<String>,
) -> impl FnOnce(&Connection) -> rusqlite::Result<Cancel> + Send + 'static {
    move |conn| {
        let mut steps = Steps {
            conn,
            now: now(),
            tenant: &tenant,
            call_id: &call_id,
            reason: reason.as_deref(),
        };
        let found = cancel_with(&mut steps, None, reason.as_deref(), 1)?;
        // Inside one write transaction the row cannot move under the read.
        found.ok_or(rusqlite::Error::QueryReturnedNoRows)
    }
}

pub(super) struct Steps<'a> {
    pub(super) conn: &'a Connection,
    pub(super) now: f64,
    pub(super) tenant: &'a str,
    pub(super) call_id: &'a str,
    pub(super) reason: Option<&'a str>,
}

impl CancelSteps for Steps<'_> {
    type Error = rusqlite::Error;

    fn read(&mut self) -> rusqlite::Result<Option<Call>> {
        select_tenant_call(self.conn, self.tenant, self.call_id)
    }

    fn cancel_pending(&mut self, call: &Call, detail: &str) -> rusqlite::Result<bool> {
        let changed = self
            .conn
            .prepare_cached(
                "UPDATE calls
                    SET status = 'cancelled',
                        error_json = json_object('code', 'cancelled', 'message', coalesce(?5, ?4),
                                                 'retryable', json('false')),
                        cancel_requested_at = ?1, cancel_reason = ?5,
                        next_attempt_at = NULL, lease_until = NULL, owner = NULL, updated_at = ?1
                  WHERE call_id = ?2 AND status = 'pending' AND attempt = ?3",
            )?
            .execute(params![
                self.now,
                call.call_id,
                call.attempt,
                NO_REASON,
                self.reason
            ])?;
        if changed == 1 {
            // Read in this transaction and fenced by status and attempt.
            let (tenant, tool) = (&call.tenant, &call.tool);
            let from = group(tenant, tool, Status::Pending, call.attempt);
            let to = group(tenant, tool, Status::Cancelled, call.attempt);
            count_book::moved(self.conn, from, to)?;
            audit(
                self.conn,
                self.now,
                &call.call_id,
                call.attempt,
                Event::Cancelled,
                detail,
            )?;
        }
        Ok(changed == 1)
    }

    fn cancel_awaiting(&mut self, call: &Call, detail: &str) -> rusqlite::Result<bool> {
        super::approval::cancel_awaiting(self.conn, self.now, call, self.reason, detail, NO_REASON)
    }

    fn request_stop(&mut self, call: &Call, detail: &str) -> rusqlite::Result<bool> {
        let changed = self
            .conn
            .prepare_cached(
                "UPDATE calls SET cancel_requested_at = ?1, cancel_reason = ?4
                  WHERE call_id = ?2 AND status = 'running' AND attempt = ?3
                    AND cancel_requested_at IS NULL",
            )?
            .execute(params![self.now, call.call_id, call.attempt, self.reason])?;
        if changed == 1 {
            let event = Event::CancelRequested;
            audit(
                self.conn,
                self.now,
                &call.call_id,
                call.attempt,
                event,
                detail,
            )?;
        }
        Ok(changed == 1)
    }
}

/// A running attempt whose cancel was asked ends `cancelled`: only while
/// the call is still `running` under `attempt`, its cancel recorded, and
/// with no effect row; audited `cancelled` with `detail`. Returns whether
/// it applied.
pub(super) fn end_cancelled(
    conn: &Connection,
    now: f64,
    call_id: &str,
    attempt: i64,
    detail: &str,
) -> rusqlite::Result<bool> {
    let changed = conn
        .prepare_cached(
            "UPDATE calls
                SET status = 'cancelled',
                    error_json = json_object('code', 'cancelled',
                                             'message', coalesce(cancel_reason, ?4),
                                             'retryable', json('false')),
                    lease_until = NULL, owner = NULL, updated_at = ?1
              WHERE call_id = ?2 AND status = 'running' AND attempt = ?3
                AND cancel_requested_at IS NOT NULL
                AND NOT EXISTS (SELECT 1 FROM effects e WHERE e.call_id = calls.call_id)
          RETURNING tenant, tool",
        )?
        .query_row(params![now, call_id, attempt, NO_REASON], tenant_and_tool)
        .optional()?;
    let changed = left_running(conn, changed, attempt, Status::Cancelled)?;
    if changed {
        audit(conn, now, call_id, attempt, Event::Cancelled, detail)?;
    }
    Ok(changed)
}

/// The owner stopped `lease`'s attempt: `cancelled`, or a stale completion.
pub(super) fn stopped_op(
    lease: Lease,
    sent: bool,
    how: String,
) -> impl FnOnce(&Connection) -> rusqlite::Result<Completion> + Send + 'static {
    move |conn| {
        let now = now();
        let detail = audit::stopped(lease.attempt, sent, &how);
        if end_cancelled(conn, now, &lease.call_id, lease.attempt, &detail)? {
            return Ok(Completion::Applied);
        }
        discard_stale(conn, now, &lease, Event::Cancelled)
    }
}

/// A completion short of a success that its fence refused: if the reason
/// is that the call's cancel was asked, it ends `cancelled` with `detail`
/// instead; otherwise the lease was lost, and the completion is discarded
/// as `would_have`.
pub(super) fn cancelled_or_stale(
    conn: &Connection,
    now: f64,
    lease: &Lease,
    detail: &str,
    would_have: Event,
) -> rusqlite::Result<Completion> {
    if end_cancelled(conn, now, &lease.call_id, lease.attempt, detail)? {
        return Ok(Completion::Cancelled);
    }
    discard_stale(conn, now, lease, would_have)
}

/// Which of `running` are still `running` under the same attempt with their
/// cancel asked: one point read per lease (`calls`' primary key).
pub(super) fn cancels_asked(
    conn: &Connection,
    running: &[LeaseHeld],
) -> rusqlite::Result<Vec<LeaseHeld>> {
    let mut stmt = conn.prepare_cached(
        "SELECT 1 FROM calls
          WHERE call_id = ?1 AND status = 'running' AND attempt = ?2
            AND cancel_requested_at IS NOT NULL",
    )?;
    let mut asked = Vec::new();
    for held in running {
        let found = stmt
            .query_row(params![held.call_id, held.attempt], |_| Ok(()))
            .optional()?;
        if found.is_some() {
            asked.push(held.clone());
        }
    }
    Ok(asked)
}
