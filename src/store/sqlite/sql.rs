//! The statements of a call's path (ceation, claims, completions and the
//! reads beside them), each beside the rule it implements; the process
//! registry and recovery are in `instances`, key retention in `retention`,
//! business keys in `business_key`, the reports in `report_reads`. The
//! functions here run on a connection they are given, inside a transaction
//! the caller owns (the writer's batch, or a reader's snapshot); they never
//! begin, commit or roll back one themselves, and never run a tool.
//!
//! Transitions are conditional `UPDATE`s whose row count decides: a `SELECT`
//! before them is only ever a shortcut, never the decision.

use super::super::approval::Gate;
use super::super::audit::{self, Event};
use super::super::ids::{new_call_id, new_effect_id, now, stored_effect_id};
use super::super::model::{
    Call, CallProgress, Completion, Created, CreatedClaimed, DueCall, Lease, NewCall, NewEffect,
    RetryDelay,
};
use super::cancel::{cancelled_or_stale, end_cancelled};
use super::count_book;
use super::steps::{
    audit, audit_lease, discard_stale, group, left_running, select_call, select_call_by_key,
    tenant_and_tool,
};
use crate::status::Status;
use rusqlite::{params, Connection, ErrorCode, OptionalExtension, Row};
use std::time::Duration;

pub(super) fn create_or_get_op(
    new: NewCall,
) -> impl FnOnce(&Connection) -> rusqlite::Result<Created> + Send + 'static {
    move |conn| Ok(create_or_get(conn, new, None)?.created)
}

/// Create-or-get whose new call is inserted already `running` under a lease
/// for `owner` (attempt 1, `created` and `claimed` audited in the same
/// transaction): one writer operation where a create and a claim took two.
/// A known key is answered exactly as by `create_or_get_op`, with no lease.
pub(super) fn create_claimed_op(
    new: NewCall,
    owner: String,
    lease: Duration,
) -> impl FnOnce(&Connection) -> rusqlite::Result<CreatedClaimed> + Send + 'static {
    move |conn| create_or_get(conn, new, Some((&owner, lease)))
}

/// The key's call if it has one (resolved as a replay), else a new one:
/// `pending`, or — with `first_claim` (owner, lease) — already claimed.
fn create_or_get(
    conn: &Connection,
    new: NewCall,
    first_claim: Option<(&str, Duration)>,
) -> rusqlite::Result<CreatedClaimed> {
    let now = now();
    if let Some(existing) = select_call_by_key(conn, &new.tenant, &new.idem_key)? {
        let created = resolve_existing(conn, existing, &new.fingerprint, now)?;
        return Ok(CreatedClaimed {
            created,
            lease: None,
        });
    }
    // A gated call waits for a decision, and a paused tool's call waits for
    // its resume: neither is ever created claimed.
    let first_claim = match first_claim {
        Some(_) if new.gate.is_some() => None,
        Some(_) if super::paused::is_paused(conn, &new.tool)? => None,
        claim => claim.map(|(owner, lease)| (owner, now + lease.as_secs_f64())),
    };
    let gate = new.gate;
    let call = insert_call_as(conn, new, now, first_claim)?;
    audit_created(conn, &call, gate, now)?;
    if let Some((owner, _)) = first_claim {
        audit_claimed(conn, now, &call.call_id, owner, call.attempt)?;
    }
    Ok(CreatedClaimed {
        lease: call.lease(),
        created: Created::New(call),
    })
}

/// A new call's `created` audit row, and for a gated one its approval
/// request (`approval::request`), in its create's transaction.
pub(super) fn audit_created(
    conn: &Connection,
    call: &Call,
    gate: Option<Gate>,
    now: f64,
) -> rusqlite::Result<()> {
    audit(conn, now, &call.call_id, 0, Event::Created, &call.tool)?;
    match gate {
        Some(gate) => super::approval::request(conn, call, gate, now),
        None => Ok(()),
    }
}

/// A claim takes a `pending` call that is due (no automatic retry scheduled
/// for later), or a `running` one whose lease has expired — unless its
/// cancel was asked: recovery ends that one `cancelled` instead — and never
/// a call of a paused tool (`paused`). Two statements, one per state a claim
/// takes a call from, so that each knows the group it moves the call out of
/// (`count_book`); the second runs only when the first found no pending call.
pub(super) fn claim_one(
    conn: &Connection,
    call_id: &str,
    owner: &str,
    now: f64,
    lease_until: f64,
) -> rusqlite::Result<Option<Lease>> {
    let row = |r: &Row| {
        Ok((
            Lease {
                call_id: call_id.to_string(),
                attempt: r.get(0)?,
                tool: r.get(1)?,
                args_json: r.get(2)?,
                effect_id: stored_effect_id(r.get(3)?, call_id),
                lease_until,
            },
            r.get::<_, String>(4)?,
        ))
    };
    let claimed = conn
        .prepare_cached(
            "UPDATE calls
                SET status = 'running', attempt = attempt + 1,
                    lease_until = ?1, owner = ?2, updated_at = ?3, next_attempt_at = NULL
              WHERE call_id = ?4
                AND status = 'pending' AND (next_attempt_at IS NULL OR next_attempt_at <= ?3)
                AND NOT EXISTS (SELECT 1 FROM paused_tools p WHERE p.tool = calls.tool)
          RETURNING attempt, tool, args_json, effect_id, tenant",
        )?
        .query_row(params![lease_until, owner, now, call_id], row)
        .optional()?;
    let (lease, tenant, was) = match claimed {
        Some((lease, tenant)) => (lease, tenant, Status::Pending),
        None => {
            let taken_over = conn
                .prepare_cached(
                    "UPDATE calls
                        SET attempt = attempt + 1,
                            lease_until = ?1, owner = ?2, updated_at = ?3, next_attempt_at = NULL
                      WHERE call_id = ?4
                        AND status = 'running' AND lease_until <= ?3
                        AND cancel_requested_at IS NULL
                        AND NOT EXISTS (SELECT 1 FROM paused_tools p WHERE p.tool = calls.tool)
                  RETURNING attempt, tool, args_json, effect_id, tenant",
                )?
                .query_row(params![lease_until, owner, now, call_id], row)
                .optional()?;
            match taken_over {
                Some((lease, tenant)) => (lease, tenant, Status::Running),
                None => return Ok(None),
            }
        }
    };
    let from = group(&tenant, &lease.tool, was, lease.attempt - 1);
    let to = group(&tenant, &lease.tool, Status::Running, lease.attempt);
    count_book::moved(conn, from, to)?;
    audit_claimed(conn, now, call_id, owner, lease.attempt)?;
    Ok(Some(lease))
}

/// The audit row of a won claim, however it was won.
fn audit_claimed(
    conn: &Connection,
    now: f64,
    call_id: &str,
    owner: &str,
    attempt: i64,
) -> rusqlite::Result<()> {
    let detail = audit::claimed(owner, attempt);
    audit(conn, now, call_id, attempt, Event::Claimed, &detail)
}

pub(super) fn succeed_op(
    lease: Lease,
    result: String,
    effect: Option<NewEffect>,
) -> impl FnOnce(&Connection) -> rusqlite::Result<Completion> + Send + 'static {
    move |conn| {
        let now = now();
        let Some(tenant) =
            finish_fenced(conn, now, &lease, Status::Succeeded, Some(&result), None)?
        else {
            return discard_stale(conn, now, &lease, Event::Succeeded);
        };
        if let Some(effect) = effect {
            let detail = effect.detail.map(|d| d.to_string());
            let inserted = conn
                .prepare_cached(
                    "INSERT OR IGNORE INTO effects (effect_id, call_id, tool, amount, detail, created_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )?
                .execute(params![
                    lease.effect_id,
                    lease.call_id,
                    lease.tool,
                    effect.amount,
                    detail,
                    now
                ])?;
            if inserted == 1 {
                count_book::effect_inserted(conn, Some(tenant))?;
            }
        }
        audit_lease(conn, now, &lease, Event::Succeeded, &lease.effect_id)?;
        Ok(Completion::Applied)
    }
}

/// A failure; `code` is its error's, for the audit of a call whose cancel
/// was asked, which ends `cancelled` instead.
pub(super) fn fail_op(
    lease: Lease,
    error: String,
    code: String,
) -> impl FnOnce(&Connection) -> rusqlite::Result<Completion> + Send + 'static {
    move |conn| {
        let now = now();
        if finish_fenced(conn, now, &lease, Status::Failed, None, Some(&error))?.is_none() {
            let detail = audit::ended_after_cancel(lease.attempt, &code);
            return cancelled_or_stale(conn, now, &lease, &detail, Event::Failed);
        }
        audit_lease(conn, now, &lease, Event::Failed, &error)?;
        Ok(Completion::Applied)
    }
}

/// A retryable failure before the tool's last attempt (`detail`: its audit
/// row's, `audit::retry_scheduled`): back to `pending`,
/// not to be claimed before `now + delay`, fenced like a completion (a call
/// whose cancel was asked ends `cancelled` instead, never to run again). The
/// error stays on the call (the client sees why it is waiting); the next
/// claim's outcome replaces it.
pub(super) fn retry_later_op(
    lease: Lease,
    error: String,
    code: String,
    detail: String,
    delay: RetryDelay,
) -> impl FnOnce(&Connection) -> rusqlite::Result<Completion> + Send + 'static {
    move |conn| {
        let now = now();
        let changed = conn
            .prepare_cached(
                "UPDATE calls
                    SET status = 'pending', error_json = ?1, next_attempt_at = ?2,
                        lease_until = NULL, owner = NULL, updated_at = ?3
                  WHERE call_id = ?4 AND status = 'running' AND attempt = ?5
                    AND cancel_requested_at IS NULL
              RETURNING tenant, tool",
            )?
            .query_row(
                params![
                    error,
                    now + delay.delay.as_secs_f64(),
                    now,
                    lease.call_id,
                    lease.attempt
                ],
                tenant_and_tool,
            )
            .optional()?;
        if !left_running(conn, changed, lease.attempt, Status::Pending)? {
            let detail = audit::ended_after_cancel(lease.attempt, &code);
            return cancelled_or_stale(conn, now, &lease, &detail, Event::RetryScheduled);
        }
        audit_lease(conn, now, &lease, Event::RetryScheduled, &detail)?;
        Ok(Completion::Applied)
    }
}

/// Extend each lease to `lease_until` while its tool runs, under the same
/// fence as a completion: only a row still `running` under the lease's
/// attempt moves; and store the progress its tool reported
/// (`progress[i]` for `leases[i]`, if any) in the same update. Returns, in
/// order, whether each lease is still held.
pub(super) fn extend_leases(
    conn: &Connection,
    leases: &[Lease],
    progress: &[Option<CallProgress>],
    lease_until: f64,
) -> rusqlite::Result<Vec<bool>> {
    let mut stmt = conn.prepare_cached(
        "UPDATE calls SET lease_until = ?1, progress_json = coalesce(?4, progress_json)
          WHERE call_id = ?2 AND status = 'running' AND attempt = ?3",
    )?;
    leases
        .iter()
        .enumerate()
        .map(|(i, lease)| {
            let report = progress.get(i).and_then(Option::as_ref);
            let report = report.map(|p| p.to_json().to_string());
            let params = params![lease_until, lease.call_id, lease.attempt, report];
            Ok(stmt.execute(params)? == 1)
        })
        .collect()
}

/// The fence. A terminal update applies only while the call is still `running`
/// under the attempt this lease claimed; a worker whose lease was taken over
/// (it paused, its lease expired, recovery re-queued the call) changes nothing.
/// Anything but a success also needs the call's cancel not to have been
/// asked (the caller then ends it `cancelled`). Returns the call's tenant
/// if it applied.
fn finish_fenced(
    conn: &Connection,
    now: f64,
    lease: &Lease,
    status: Status,
    result_json: Option<&str>,
    error_json: Option<&str>,
) -> rusqlite::Result<Option<String>> {
    let changed: Option<(String, String)> = conn
        .prepare_cached(
            "UPDATE calls
                SET status = ?1, result_json = ?2, error_json = ?3,
                    lease_until = NULL, owner = NULL, updated_at = ?4
              WHERE call_id = ?5 AND status = 'running' AND attempt = ?6
                AND (?1 = 'succeeded' OR cancel_requested_at IS NULL)
          RETURNING tenant, tool",
        )?
        .query_row(
            params![
                status.as_str(),
                result_json,
                error_json,
                now,
                lease.call_id,
                lease.attempt
            ],
            tenant_and_tool,
        )
        .optional()?;
    let tenant = changed.as_ref().map(|(tenant, _)| tenant.clone());
    left_running(conn, changed, lease.attempt, status)?;
    Ok(tenant)
}

/// Insert a `pending` call under a fresh id and return the row as written;
/// another process may have drawn the same id, so a primary-key collision
/// draws again.
pub(super) fn insert_call(conn: &Connection, new: NewCall, now: f64) -> rusqlite::Result<Call> {
    insert_call_as(conn, new, now, None)
}

/// `insert_call`, or with `first_claim` (owner, lease_until) the call
/// inserted already `running`, attempt 1, under that lease: the row is
/// written as `Call` builds it, whichever it is.
fn insert_call_as(
    conn: &Connection,
    new: NewCall,
    now: f64,
    first_claim: Option<(&str, f64)>,
) -> rusqlite::Result<Call> {
    let mut call = Call::pending(new_call_id(), new, now);
    if let Some((owner, lease_until)) = first_claim {
        call = call.claimed_at_creation(owner, lease_until);
    }
    let mut attempts_left = 8;
    loop {
        let inserted = conn
            .prepare_cached(
                "INSERT INTO calls (call_id, tenant, idem_key, fingerprint, client_id, seq, tool,
                                    args_json, status, attempt, lease_until, owner, effect_id,
                                    created_at, updated_at)
                 VALUES (?1, ?10, ?2, ?3, ?4, ?5, ?6, ?7, ?11, ?12, ?13, ?14, ?8, ?9, ?9)",
            )?
            .execute(params![
                call.call_id,
                call.idem_key,
                call.fingerprint,
                call.client_id,
                call.seq,
                call.tool,
                call.args_json,
                call.effect_id,
                now,
                call.tenant,
                call.status.as_str(),
                call.attempt,
                call.lease_until,
                call.owner
            ]);
        match inserted {
            Ok(_) => {
                let at = group(&call.tenant, &call.tool, call.status, call.attempt);
                count_book::inserted(conn, at)?;
                return Ok(call);
            }
            Err(e)
                if e.sqlite_error_code() == Some(ErrorCode::ConstraintViolation)
                    && attempts_left > 0 =>
            {
                attempts_left -= 1;
                call.call_id = new_call_id();
                call.effect_id = new_effect_id(&call.call_id);
            }
            Err(e) => return Err(e),
        }
    }
}

pub(super) fn resolve_existing(
    conn: &Connection,
    existing: Call,
    fingerprint: &str,
    now: f64,
) -> rusqlite::Result<Created> {
    if existing.fingerprint != fingerprint {
        return Ok(Created::Conflict(existing));
    }
    if !existing.is_retryable_failure() {
        return Ok(Created::Existing(existing));
    }
    let changed = conn
        .prepare_cached(
            "UPDATE calls
                SET status = 'pending', result_json = NULL, error_json = NULL,
                    lease_until = NULL, owner = NULL, updated_at = ?1
              WHERE call_id = ?2 AND status = 'failed'",
        )?
        .execute(params![now, existing.call_id])?;
    if changed == 0 {
        return Ok(Created::Existing(existing));
    }
    // Read in this transaction and fenced by its status: its group is known.
    let (tenant, tool) = (&existing.tenant, &existing.tool);
    let from = group(tenant, tool, Status::Failed, existing.attempt);
    let to = group(tenant, tool, Status::Pending, existing.attempt);
    count_book::moved(conn, from, to)?;
    let detail = audit::retry_reset(existing.attempt);
    let attempt = existing.attempt;
    audit(
        conn,
        now,
        &existing.call_id,
        attempt,
        Event::RetryReset,
        &detail,
    )?;
    let call = select_call(conn, &existing.call_id)?.ok_or(rusqlite::Error::QueryReturnedNoRows)?;
    Ok(Created::RetryReset(call))
}

/// The `input_answered` row of the tenant's call `call_id`, under its
/// current attempt, written only while it waits for a decision under
/// `fingerprint`; whether it was.
pub(super) fn note_input_answers(
    conn: &Connection,
    tenant: &str,
    call_id: &str,
    fingerprint: &str,
    answers: &str,
) -> rusqlite::Result<bool> {
    let written = conn
        .prepare_cached(
            "INSERT INTO audit (ts, call_id, attempt, event, detail)
             SELECT ?1, call_id, attempt, ?2, ?3 FROM calls
              WHERE call_id = ?4 AND tenant = ?5 AND status = 'awaiting_approval'
                AND fingerprint = ?6",
        )?
        .execute(params![
            now(),
            Event::InputAnswered.as_str(),
            answers,
            call_id,
            tenant,
            fingerprint
        ])?;
    Ok(written == 1)
}

/// The `replayed_by_content` row of the tenant's call `call_id`, under its
/// current attempt; whether the call was there.
pub(super) fn note_replay_by_content(
    conn: &Connection,
    tenant: &str,
    call_id: &str,
    detail: &str,
) -> rusqlite::Result<bool> {
    let written = conn
        .prepare_cached(
            "INSERT INTO audit (ts, call_id, attempt, event, detail)
             SELECT ?1, call_id, attempt, ?2, ?3 FROM calls WHERE call_id = ?4 AND tenant = ?5",
        )?
        .execute(params![
            now(),
            Event::ReplayedByContent.as_str(),
            detail,
            call_id,
            tenant
        ])?;
    Ok(written == 1)
}

/// Give a lease back before it expires (a stopping process whose tool is
/// still running): the call returns to `pending`, fenced like a completion,
/// so that another process runs it at once with the same `effect_id` — or,
/// its cancel asked, ends `cancelled`.
pub(super) fn release_op(
    lease: Lease,
    released: String,
) -> impl FnOnce(&Connection) -> rusqlite::Result<Completion> + Send + 'static {
    move |conn| {
        let now = now();
        let changed = conn
            .prepare_cached(
                "UPDATE calls
                    SET status = 'pending', lease_until = NULL, owner = NULL, updated_at = ?1
                  WHERE call_id = ?2 AND status = 'running' AND attempt = ?3
                    AND cancel_requested_at IS NULL
              RETURNING tenant, tool",
            )?
            .query_row(params![now, lease.call_id, lease.attempt], tenant_and_tool)
            .optional()?;
        if !left_running(conn, changed, lease.attempt, Status::Pending)? {
            let detail = audit::released_after_cancel(lease.attempt);
            return Ok(
                match end_cancelled(conn, now, &lease.call_id, lease.attempt, &detail)? {
                    true => Completion::Cancelled,
                    false => Completion::Stale,
                },
            );
        }
        audit_lease(conn, now, &lease, Event::Released, &released)?;
        Ok(Completion::Applied)
    }
}

/// Up to `limit` `pending` calls that are due at `now`, oldest first; a
/// paused tool's are not due (and cannot hold the others back).
pub(super) fn due_calls(
    conn: &Connection,
    now: f64,
    limit: usize,
) -> rusqlite::Result<Vec<DueCall>> {
    conn.prepare_cached(
        // Index order (status, lease_until, rowid) is creation order for
        // pending rows, so no sort is needed. A call waiting for its retry
        // is read and skipped: such calls are few, and an index of their
        // own would cost every create and claim one more B-tree write.
        "SELECT call_id, tool FROM calls
          WHERE status = 'pending' AND (next_attempt_at IS NULL OR next_attempt_at <= ?1)
            AND NOT EXISTS (SELECT 1 FROM paused_tools p WHERE p.tool = calls.tool)
          ORDER BY lease_until, rowid LIMIT ?2",
    )?
    .query_map(params![now, limit as i64], |r| {
        Ok(DueCall {
            call_id: r.get(0)?,
            tool: r.get(1)?,
        })
    })?
    .collect()
}
