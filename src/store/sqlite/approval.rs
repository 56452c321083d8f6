//! Approval gates on SQLite (migration 12), by the rules of
//! `store::approval`: a gated call's request written with its create
//! (`request`), a decision (`decide_op`), expiry (`expire_op`), a waiting
//! call cancelled (`cancel_awaiting`), the reads behind the queue and a
//! call's request, and the webhook outbox (`notifications`): claiming a
//! notification for one delivery attempt and settling it.
//!
//! Every change runs inside the writer's transaction and is a conditional
//! `UPDATE` whose row count decides; the `approvals` row and the audit row
//! commit with it. Never runs a tool, never sends a webhook.

use super::super::approval::{
    decided_detail, denied_error, request_msg_id, Approval, Decided, Decision, Delivery, Gate,
    Notification, Source, Verdict, Waiting, APPROVAL_REQUESTED,
};
use super::super::audit::{self, Event};
use super::super::ids::now;
use super::super::model::Call;
use super::count_book;
use super::steps::{audit, group, select_call};
use crate::status::Status;
use rusqlite::{params, Connection, OptionalExtension, Row};
use std::time::Duration;

/// Migration 12's DDL. `approvals` keeps one row per gated call, open
/// (`decision IS NULL`) until a decision, an expiry or a cancel closes it;
/// the partial index holds only the open ones (the queue and expiry read
/// it). `notifications` is the webhook outbox: a row per message still to
/// deliver, gone once delivered or given up.
pub(super) const APPROVAL_TABLES: &str = "
CREATE TABLE IF NOT EXISTS approvals (
  call_id      TEXT PRIMARY KEY,
  tenant       TEXT NOT NULL,
  tool         TEXT NOT NULL,
  fingerprint  TEXT NOT NULL,
  approvers    TEXT NOT NULL,
  requested_at REAL NOT NULL,
  expires_at   REAL NOT NULL,
  decision     TEXT,
  source       TEXT,
  decided_by   TEXT,
  reason       TEXT,
  decided_at   REAL
);
CREATE INDEX IF NOT EXISTS idx_approvals_open ON approvals(tenant, call_id)
  WHERE decision IS NULL;

CREATE TABLE IF NOT EXISTS notifications (
  msg_id          TEXT PRIMARY KEY,
  tenant          TEXT NOT NULL,
  call_id         TEXT NOT NULL,
  event           TEXT NOT NULL,
  created_at      REAL NOT NULL,
  attempts        INTEGER NOT NULL,
  next_attempt_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_notifications_due ON notifications(next_attempt_at);
";

/// The columns `approval_from_row` reads, in its order.
const APPROVAL_COLUMNS: &str = "call_id, tenant, tool, fingerprint, approvers, requested_at, \
     expires_at, decision, source, decided_by, reason, decided_at";

/// A new gated call's request, in its create's transaction: the open
/// `approvals` row, the `approval_requested` audit row, and (its tenant
/// has a webhook) the outbox row, due at once.
pub(super) fn request(
    conn: &Connection,
    call: &Call,
    gate: Gate,
    now: f64,
) -> rusqlite::Result<()> {
    let expires_at = now + gate.timeout.as_secs_f64();
    conn.prepare_cached(
        "INSERT INTO approvals (call_id, tenant, tool, fingerprint, approvers, requested_at,
                                expires_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        call.call_id,
        call.tenant,
        call.tool,
        call.fingerprint,
        gate.approvers.as_str(),
        now,
        expires_at
    ])?;
    let detail = audit::approval_requested(gate.approvers.as_str(), gate.timeout);
    audit(
        conn,
        now,
        &call.call_id,
        0,
        Event::ApprovalRequested,
        &detail,
    )?;
    if gate.notify {
        conn.prepare_cached(
            "INSERT OR IGNORE INTO notifications (msg_id, tenant, call_id, event, created_at,
                                                  attempts, next_attempt_at)
             VALUES (?1, ?2, ?3, ?4, ?5, 0, ?5)",
        )?
        .execute(params![
            request_msg_id(&call.call_id),
            call.tenant,
            call.call_id,
            APPROVAL_REQUESTED,
            now
        ])?;
    }
    Ok(())
}

/// One decision, in the writer's transaction: the call read in the asker's
/// scope, then the one conditional update — still `awaiting_approval`,
/// under the fingerprint the decider reviewed (the call's own when none
/// was given), its request still open and (for a client) open to the
/// client — whose row count decides; the request closed and the audit row
/// written with it.
pub(super) fn decide_op(
    tenant: Option<String>,
    call_id: String,
    decision: Decision,
) -> impl FnOnce(&Connection) -> rusqlite::Result<Decided> + Send + 'static {
    move |conn| {
        let Some(call) = select_scoped(conn, tenant.as_deref(), &call_id)? else {
            return Ok(Decided::NotFound);
        };
        decide(conn, call, &decision, now())
    }
}

/// `decide_op`'s decision on a call already read.
fn decide(
    conn: &Connection,
    call: Call,
    decision: &Decision,
    now: f64,
) -> rusqlite::Result<Decided> {
    let (status, error_json) = match decision.verdict {
        Verdict::Approve => ("pending", None),
        Verdict::Deny => (
            "denied",
            Some(denied_error(decision.source, decision.reason.as_deref())),
        ),
    };
    let fingerprint = decision.fingerprint.as_deref().unwrap_or(&call.fingerprint);
    let changed = conn
        .prepare_cached(
            "UPDATE calls SET status = ?1, error_json = ?2, updated_at = ?3
              WHERE call_id = ?4 AND status = 'awaiting_approval' AND fingerprint = ?5
                AND EXISTS (SELECT 1 FROM approvals a
                             WHERE a.call_id = calls.call_id AND a.decision IS NULL
                               AND (?6 <> 'client' OR a.approvers = 'people_or_client'))",
        )?
        .execute(params![
            status,
            error_json,
            now,
            call.call_id,
            fingerprint,
            decision.source.as_str()
        ])?;
    if changed == 0 {
        let approval = select_approval(conn, &call.call_id)?;
        return Ok(Decided::explain(call, approval, decision));
    }
    // Read in this transaction and fenced by its status: its group is known.
    let to = match decision.verdict {
        Verdict::Approve => Status::Pending,
        Verdict::Deny => Status::Denied,
    };
    left_awaiting(conn, &call, to)?;
    close(
        conn,
        &call.call_id,
        decision.verdict.decision(),
        decision,
        now,
    )?;
    let event = match decision.verdict {
        Verdict::Approve => Event::Approved,
        Verdict::Deny => Event::Denied,
    };
    audit(
        conn,
        now,
        &call.call_id,
        0,
        event,
        &decided_detail(decision),
    )?;
    let call = select_call(conn, &call.call_id)?.ok_or(rusqlite::Error::QueryReturnedNoRows)?;
    let approval =
        select_approval(conn, &call.call_id)?.ok_or(rusqlite::Error::QueryReturnedNoRows)?;
    Ok(Decided::Applied { call, approval })
}

/// Close a call's open request with `decision`.
fn close(
    conn: &Connection,
    call_id: &str,
    word: &str,
    decision: &Decision,
    now: f64,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE approvals SET decision = ?1, source = ?2, decided_by = ?3, reason = ?4,
                              decided_at = ?5
          WHERE call_id = ?6 AND decision IS NULL",
    )?
    .execute(params![
        word,
        decision.source.as_str(),
        decision.by,
        decision.reason,
        now,
        call_id
    ])?;
    Ok(())
}

/// Whether any open request has expired: a cheap read that spares the
/// writer a transaction when none has.
pub(super) fn has_expired(conn: &Connection, now: f64) -> rusqlite::Result<bool> {
    conn.prepare_cached(
        "SELECT 1 FROM approvals WHERE decision IS NULL AND expires_at <= ?1 LIMIT 1",
    )?
    .exists(params![now])
}

/// End up to `limit` expired requests `denied`, each by `decide`'s fenced
/// update (source `expiry`); the calls it ended.
pub(super) fn expire_op(
    limit: usize,
) -> impl FnOnce(&Connection) -> rusqlite::Result<Vec<Call>> + Send + 'static {
    move |conn| {
        let now = now();
        let expired: Vec<String> = conn
            .prepare_cached(
                "SELECT call_id FROM approvals
                  WHERE decision IS NULL AND expires_at <= ?1
                  ORDER BY expires_at LIMIT ?2",
            )?
            .query_map(params![now, limit as i64], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        let decision = Decision::expiry();
        let mut ended = Vec::new();
        for call_id in expired {
            let Some(call) = select_call(conn, &call_id)? else {
                continue;
            };
            if let Decided::Applied { call, .. } = decide(conn, call, &decision, now)? {
                ended.push(call);
            }
        }
        Ok(ended)
    }
}

/// A waiting call cancelled by its tenant: `awaiting_approval` →
/// `cancelled`, its request closed (`cancelled`, source `cancel`), audited
/// `cancelled` with `detail`; `true` if it applied.
pub(super) fn cancel_awaiting(
    conn: &Connection,
    now: f64,
    call: &Call,
    reason: Option<&str>,
    detail: &str,
    no_reason: &str,
) -> rusqlite::Result<bool> {
    let changed = conn
        .prepare_cached(
            "UPDATE calls
                SET status = 'cancelled',
                    error_json = json_object('code', 'cancelled', 'message', coalesce(?3, ?4),
                                             'retryable', json('false')),
                    cancel_requested_at = ?1, cancel_reason = ?3, updated_at = ?1
              WHERE call_id = ?2 AND status = 'awaiting_approval'",
        )?
        .execute(params![now, call.call_id, reason, no_reason])?;
    if changed == 1 {
        left_awaiting(conn, call, Status::Cancelled)?;
        let closing = Decision {
            verdict: Verdict::Deny,
            source: Source::Cancel,
            by: call.tenant.clone(),
            reason: reason.map(str::to_string),
            fingerprint: None,
        };
        close(conn, &call.call_id, "cancelled", &closing, now)?;
        audit(conn, now, &call.call_id, 0, Event::Cancelled, detail)?;
    }
    Ok(changed == 1)
}

/// `call`, read in this transaction, moved out of `awaiting_approval` into
/// `to`: noted for the count tables (`count_book`).
fn left_awaiting(conn: &Connection, call: &Call, to: Status) -> rusqlite::Result<()> {
    let (tenant, tool) = (&call.tenant, &call.tool);
    let from = group(tenant, tool, Status::AwaitingApproval, call.attempt);
    count_book::moved(conn, from, group(tenant, tool, to, call.attempt))
}

/// A call by id in `tenant`'s scope (`None`: any tenant's).
fn select_scoped(
    conn: &Connection,
    tenant: Option<&str>,
    call_id: &str,
) -> rusqlite::Result<Option<Call>> {
    match tenant {
        Some(tenant) => super::steps::select_tenant_call(conn, tenant, call_id),
        None => select_call(conn, call_id),
    }
}

/// A call's request, in `tenant`'s scope (`None`: any tenant's).
pub(super) fn approval_of(
    conn: &Connection,
    tenant: Option<&str>,
    call_id: &str,
) -> rusqlite::Result<Option<Approval>> {
    let approval = select_approval(conn, call_id)?;
    Ok(approval.filter(|a| tenant.is_none_or(|t| a.tenant == t)))
}

fn select_approval(conn: &Connection, call_id: &str) -> rusqlite::Result<Option<Approval>> {
    conn.prepare_cached(&format!(
        "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE call_id = ?1"
    ))?
    .query_row(params![call_id], approval_from_row)
    .optional()
}

/// The queue: up to `limit` calls waiting for a decision in `tenant`'s
/// scope (`None`: every tenant's), oldest first, after `after` (a call id).
pub(super) fn waiting(
    conn: &Connection,
    tenant: Option<&str>,
    after: Option<&str>,
    limit: usize,
) -> rusqlite::Result<Vec<Waiting>> {
    let ids: Vec<String> = conn
        .prepare_cached(
            "SELECT call_id FROM approvals
              WHERE decision IS NULL AND (?1 IS NULL OR tenant = ?1) AND call_id > ?2
              ORDER BY call_id LIMIT ?3",
        )?
        .query_map(params![tenant, after.unwrap_or(""), limit as i64], |r| {
            r.get(0)
        })?
        .collect::<rusqlite::Result<_>>()?;
    let mut found = Vec::with_capacity(ids.len());
    for call_id in ids {
        let call = select_call(conn, &call_id)?;
        let approval = select_approval(conn, &call_id)?;
        if let (Some(call), Some(approval)) = (call, approval) {
            found.push(Waiting { call, approval });
        }
    }
    Ok(found)
}

/// `approvals` columns, in `APPROVAL_COLUMNS` order.
fn approval_from_row(r: &Row) -> rusqlite::Result<Approval> {
    Ok(Approval::from_columns(
        (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?),
        r.get(4)?,
        (r.get(5)?, r.get(6)?),
        r.get(7)?,
        r.get(8)?,
        r.get(9)?,
        r.get(10)?,
        r.get(11)?,
    ))
}

/// Whether a notification is due: a read that spares the writer a
/// transaction when none is.
pub(super) fn has_due_notification(conn: &Connection, now: f64) -> rusqlite::Result<bool> {
    conn.prepare_cached("SELECT 1 FROM notifications WHERE next_attempt_at <= ?1 LIMIT 1")?
        .exists(params![now])
}

/// Claim up to `limit` due notifications, each held from every other
/// deliverer for `hold` by a conditional update (its row count decides, so
/// two processes never send one attempt twice), with its call and request.
/// A notification whose call is gone (purged) goes with it.
pub(super) fn take_op(
    limit: usize,
    hold: Duration,
) -> impl FnOnce(&Connection) -> rusqlite::Result<Vec<Notification>> + Send + 'static {
    move |conn| {
        let now = now();
        let due: Vec<String> = conn
            .prepare_cached(
                "SELECT msg_id FROM notifications WHERE next_attempt_at <= ?1
                  ORDER BY next_attempt_at LIMIT ?2",
            )?
            .query_map(params![now, limit as i64], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        let mut taken = Vec::with_capacity(due.len());
        for msg_id in due {
            let claimed: Option<(String, String, String, i64, f64)> = conn
                .prepare_cached(
                    "UPDATE notifications SET attempts = attempts + 1, next_attempt_at = ?1
                      WHERE msg_id = ?2 AND next_attempt_at <= ?3
                  RETURNING tenant, call_id, event, attempts, created_at",
                )?
                .query_row(params![now + hold.as_secs_f64(), msg_id, now], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
                })
                .optional()?;
            let Some((tenant, call_id, event, attempts, created_at)) = claimed else {
                continue;
            };
            let call = select_call(conn, &call_id)?;
            let approval = select_approval(conn, &call_id)?;
            let (Some(call), Some(approval)) = (call, approval) else {
                conn.prepare_cached("DELETE FROM notifications WHERE msg_id = ?1")?
                    .execute(params![msg_id])?;
                continue;
            };
            taken.push(Notification {
                msg_id,
                tenant,
                event,
                attempts,
                created_at,
                call,
                approval,
            });
        }
        Ok(taken)
    }
}

/// What became of attempt `attempts` of `msg_id`, fenced by that attempt (a
/// deliverer whose hold lapsed and was taken over changes nothing).
pub(super) fn settle_op(
    msg_id: String,
    attempts: i64,
    delivery: Delivery,
) -> impl FnOnce(&Connection) -> rusqlite::Result<()> + Send + 'static {
    move |conn| {
        match delivery {
            Delivery::Delivered | Delivery::GaveUp => conn
                .prepare_cached("DELETE FROM notifications WHERE msg_id = ?1 AND attempts = ?2")?
                .execute(params![msg_id, attempts])?,
            Delivery::RetryIn(delay) => conn
                .prepare_cached(
                    "UPDATE notifications SET next_attempt_at = ?1
                      WHERE msg_id = ?2 AND attempts = ?3",
                )?
                .execute(params![now() + delay.as_secs_f64(), msg_id, attempts])?,
        };
        Ok(())
    }
}
