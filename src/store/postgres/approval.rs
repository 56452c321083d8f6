//! Approval gates on PostgreSQL (schema step 6), by the rules of
//! `store::approval`: a gated call created with its request in one
//! statement (`CREATE_GATED`), a decision (`DECIDE`, one statement: the
//! call's conditional update, its request closed, its audit row), expiry
//! (each expired request by `DECIDE`), a waiting call cancelled
//! (`CANCEL_AWAITING`), the reads behind the queue and a call's request,
//! and the webhook outbox (`notifications`): due rows claimed `FOR UPDATE
//! SKIP LOCKED` for one delivery attempt, then settled.
//!
//! Every change is one statement whose row count decides; times are the
//! database's. Never runs a tool, never sends a webhook, never opens a
//! transaction of its own.

use super::super::approval::{
    decided_detail, denied_error, request_msg_id, Approval, Decided, Decision, Delivery, Gate,
    Notification, Verdict, Waiting,
};
use super::super::audit::{self, Event};
use super::super::model::{Call, NewCall};

use super::session::GenericClient;
use super::steps::{call_from_row, select_call, select_tenant_call, with_fresh_call_id};
use std::time::Duration;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

/// Schema step 6: the statuses `awaiting_approval` and `denied` (the
/// check and the terminal index made again with them: `retention`'s purge
/// names the same four terminal statuses), the requests and the webhook
/// outbox (see `sqlite/approval.rs` for what each holds).
pub(super) const V6: &str = "
ALTER TABLE calls DROP CONSTRAINT calls_status_known;
ALTER TABLE calls ADD CONSTRAINT calls_status_known
  CHECK (status IN ('awaiting_approval', 'pending', 'running', 'succeeded', 'failed',
                    'cancelled', 'denied'));
DROP INDEX calls_terminal;
CREATE INDEX calls_terminal ON calls (updated_at)
  WHERE status IN ('succeeded', 'failed', 'cancelled', 'denied');

CREATE TABLE approvals (
  call_id      text PRIMARY KEY,
  tenant       text NOT NULL,
  tool         text NOT NULL,
  fingerprint  text NOT NULL,
  approvers    text NOT NULL,
  requested_at double precision NOT NULL,
  expires_at   double precision NOT NULL,
  decision     text,
  source       text,
  decided_by   text,
  reason       text,
  decided_at   double precision
);
CREATE INDEX approvals_open ON approvals (tenant, call_id) WHERE decision IS NULL;

CREATE TABLE notifications (
  msg_id          text PRIMARY KEY,
  tenant          text NOT NULL,
  call_id         text NOT NULL,
  event           text NOT NULL,
  created_at      double precision NOT NULL,
  attempts        bigint NOT NULL,
  next_attempt_at double precision NOT NULL
);
CREATE INDEX notifications_due ON notifications (next_attempt_at);
";

/// `sql::CREATE_OR_GET` for a gated call, `$1`..`$9` the new call: a new
/// one is inserted `awaiting_approval` (attempt 0, no lease) with its open
/// request (approvers `$10`, open for `$11` seconds), audited `created`
/// then `approval_requested` (`$14`), and — `$12`, its tenant has a
/// webhook — its outbox row (message id `$13`), all in this one statement.
/// A known key comes back as from `CREATE_OR_GET` (`existed`).
const CREATE_GATED: &str = "WITH ins AS (
       INSERT INTO calls AS c (call_id, tenant, idem_key, fingerprint, client_id, seq, tool,
                              args_json, status, attempt, effect_id, created_at, updated_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'awaiting_approval', 0, $9,
               extract(epoch FROM now())::float8, extract(epoch FROM now())::float8)
       ON CONFLICT (tenant, idem_key) DO UPDATE SET idem_key = EXCLUDED.idem_key
       RETURNING call_id, tenant, idem_key, fingerprint, client_id, seq, tool, args_json,
                 status, result_json, error_json, attempt, lease_until, owner, effect_id,
                 created_at, updated_at, next_attempt_at, cancel_requested_at, progress_json,
                 (c.call_id <> $1) AS existed
     ), requested AS (
       INSERT INTO approvals (call_id, tenant, tool, fingerprint, approvers, requested_at,
                              expires_at)
       SELECT call_id, tenant, tool, fingerprint, $10::text, created_at, created_at + $11::float8
         FROM ins WHERE NOT ins.existed
     ), notified AS (
       INSERT INTO notifications (msg_id, tenant, call_id, event, created_at, attempts,
                                  next_attempt_at)
       SELECT $13::text, tenant, call_id, 'approval.requested', created_at, 0, created_at
         FROM ins WHERE NOT ins.existed AND $12::bool
       ON CONFLICT DO NOTHING
     ), audited AS (
       INSERT INTO audit (ts, call_id, attempt, event, detail)
       SELECT ins.created_at, ins.call_id, 0, e.event, e.detail
         FROM ins CROSS JOIN LATERAL (VALUES (1, 'created', ins.tool),
                                             (2, 'approval_requested', $14::text))
                                     AS e(ord, event, detail)
        WHERE NOT ins.existed ORDER BY e.ord
     )
     SELECT * FROM ins";

/// One decision: the call (`$1`) to `$2` (`pending` or `denied`, with
/// `$3` as its error), only while it is `awaiting_approval` under
/// fingerprint `$4` and its request is open — to the client too, for a
/// client's decision (`$5` the source) — its request closed as `$6` by
/// `$7` for `$8`, and its audit row (`$9`, `$10`), in one statement.
const DECIDE: &str = "WITH d AS (
       UPDATE calls SET status = $2, error_json = $3,
              updated_at = extract(epoch FROM now())::float8
        WHERE call_id = $1 AND status = 'awaiting_approval' AND fingerprint = $4
          AND EXISTS (SELECT 1 FROM approvals a
                       WHERE a.call_id = calls.call_id AND a.decision IS NULL
                         AND ($5::text <> 'client' OR a.approvers = 'people_or_client'))
       RETURNING call_id, updated_at
     ), closed AS (
       UPDATE approvals SET decision = $6, source = $5, decided_by = $7, reason = $8,
              decided_at = d.updated_at
         FROM d WHERE approvals.call_id = d.call_id AND approvals.decision IS NULL
     ), a AS (
       INSERT INTO audit (ts, call_id, attempt, event, detail)
       SELECT updated_at, call_id, 0, $9::text, $10::text FROM d
     )
     SELECT count(*) FROM d";

/// A waiting call cancelled by its tenant: `awaiting_approval` →
/// `cancelled` with the reason (`$2`, or `$3` when none was given), its
/// request closed (`cancelled`, source `cancel`), its audit row (`$4`).
const CANCEL_AWAITING: &str = "WITH c AS (
       UPDATE calls SET status = 'cancelled',
              error_json = json_build_object('code', 'cancelled',
                                             'message', coalesce($2::text, $3),
                                             'retryable', false)::text,
              cancel_requested_at = extract(epoch FROM now())::float8, cancel_reason = $2,
              updated_at = extract(epoch FROM now())::float8
        WHERE call_id = $1 AND status = 'awaiting_approval'
       RETURNING call_id, tenant, updated_at
     ), closed AS (
       UPDATE approvals SET decision = 'cancelled', source = 'cancel', decided_by = c.tenant,
              reason = $2, decided_at = c.updated_at
         FROM c WHERE approvals.call_id = c.call_id AND approvals.decision IS NULL
     ), a AS (
       INSERT INTO audit (ts, call_id, attempt, event, detail)
       SELECT updated_at, call_id, 0, 'cancelled', $4::text FROM c
     )
     SELECT count(*) FROM c";

/// A call's request, in a scope (`$2`, or any tenant's when NULL).
const APPROVAL: &str = "SELECT call_id, tenant, tool, fingerprint, approvers, requested_at,
            expires_at, decision, source, decided_by, reason, decided_at
       FROM approvals WHERE call_id = $1 AND ($2::text IS NULL OR tenant = $2)";

/// The queue: open requests in a scope (`$1`, or every tenant's when NULL)
/// after call id `$2`, oldest first, at most `$3`, each with its call.
const WAITING: &str = "SELECT c.call_id, c.tenant, c.idem_key, c.fingerprint, c.client_id, c.seq,
            c.tool, c.args_json, c.status, c.result_json, c.error_json, c.attempt,
            c.lease_until, c.owner, c.effect_id, c.created_at, c.updated_at,
            c.next_attempt_at, c.cancel_requested_at, c.progress_json,
            a.call_id, a.tenant, a.tool, a.fingerprint, a.approvers, a.requested_at,
            a.expires_at, a.decision, a.source, a.decided_by, a.reason, a.decided_at
       FROM approvals a JOIN calls c ON c.call_id = a.call_id
      WHERE a.decision IS NULL AND ($1::text IS NULL OR a.tenant = $1) AND a.call_id > $2
      ORDER BY a.call_id LIMIT $3";

/// Open requests whose time is over, at most `$1`.
const EXPIRED: &str = "SELECT call_id FROM approvals
      WHERE decision IS NULL AND expires_at <= extract(epoch FROM now())::float8
      ORDER BY expires_at LIMIT $1";

/// Claim up to `$1` due notifications for one delivery attempt, each held
/// `$2` seconds; two deliverers pass over each other's rows.
const TAKE: &str = "WITH due AS MATERIALIZED (
       SELECT msg_id FROM notifications
        WHERE next_attempt_at <= extract(epoch FROM now())::float8
        ORDER BY next_attempt_at LIMIT $1 FOR UPDATE SKIP LOCKED
     )
     UPDATE notifications n SET attempts = n.attempts + 1,
            next_attempt_at = extract(epoch FROM now())::float8 + $2
       FROM due WHERE n.msg_id = due.msg_id
     RETURNING n.msg_id, n.tenant, n.call_id, n.event, n.attempts, n.created_at";

/// A notification delivered, given up, or whose call is gone; fenced by
/// the attempt (`$2`; NULL: any).
const SETTLE_GONE: &str = "DELETE FROM notifications
      WHERE msg_id = $1 AND ($2::int8 IS NULL OR attempts = $2)";

/// A failed attempt (`$2`), due again in `$3` seconds.
const SETTLE_RETRY: &str = "UPDATE notifications
        SET next_attempt_at = extract(epoch FROM now())::float8 + $3
      WHERE msg_id = $1 AND attempts = $2";

/// Create-or-get of a gated call: `CREATE_GATED`, drawing another call id
/// when another node drew the same one; the row as it came back and
/// whether it existed.
pub(super) fn create_gated(
    client: &mut impl GenericClient,
    new: &NewCall,
    gate: Gate,
) -> Result<(Call, bool), tokio_postgres::Error> {
    let timeout = gate.timeout.as_secs_f64();
    let detail = audit::approval_requested(gate.approvers.as_str(), gate.timeout);
    let row = with_fresh_call_id(|call_id, effect_id| {
        let msg_id = request_msg_id(call_id);
        let params: [&(dyn ToSql + Sync); 14] = [
            &call_id,
            &new.tenant,
            &new.idem_key,
            &new.fingerprint,
            &new.client_id,
            &new.seq,
            &new.tool,
            &new.args_json,
            &effect_id,
            &gate.approvers.as_str(),
            &timeout,
            &gate.notify,
            &msg_id,
            &detail,
        ];
        client.query_one(CREATE_GATED, &params)
    })?;
    Ok((call_from_row(&row)?, row.get("existed")))
}

/// `DECIDE` on a call already read; the call and its request as they then
/// are, or why nothing changed.
fn decide_read(
    client: &mut impl GenericClient,
    call: Call,
    decision: &Decision,
) -> Result<Decided, tokio_postgres::Error> {
    let (status, error_json) = match decision.verdict {
        Verdict::Approve => ("pending", None),
        Verdict::Deny => (
            "denied",
            Some(denied_error(decision.source, decision.reason.as_deref())),
        ),
    };
    let event = match decision.verdict {
        Verdict::Approve => Event::Approved,
        Verdict::Deny => Event::Denied,
    };
    let fingerprint = decision.fingerprint.as_deref().unwrap_or(&call.fingerprint);
    let detail = decided_detail(decision);
    let params: [&(dyn ToSql + Sync); 10] = [
        &call.call_id,
        &status,
        &error_json,
        &fingerprint,
        &decision.source.as_str(),
        &decision.verdict.decision(),
        &decision.by,
        &decision.reason,
        &event.as_str(),
        &detail,
    ];
    let applied = client.query_one(DECIDE, &params)?.get::<_, i64>(0) == 1;
    let approval = approval(client, None, &call.call_id)?;
    if !applied {
        return Ok(Decided::explain(call, approval, decision));
    }
    let call = select_call(client, &call.call_id)?;
    Ok(match (call, approval) {
        (Some(call), Some(approval)) => Decided::Applied { call, approval },
        // Purged between the statements: nothing left to show.
        _ => Decided::NotFound,
    })
}

/// One decision in `tenant`'s scope (`None`: any tenant's).
pub(super) fn decide(
    client: &mut impl GenericClient,
    tenant: Option<&str>,
    call_id: &str,
    decision: &Decision,
) -> Result<Decided, tokio_postgres::Error> {
    let call = match tenant {
        Some(tenant) => select_tenant_call(client, tenant, call_id)?,
        None => select_call(client, call_id)?,
    };
    match call {
        Some(call) => decide_read(client, call, decision),
        None => Ok(Decided::NotFound),
    }
}

/// End up to `limit` expired requests `denied` (source `expiry`); the
/// calls this node ended (another node may end some of them first).
pub(super) fn expire(
    client: &mut impl GenericClient,
    limit: usize,
) -> Result<Vec<Call>, tokio_postgres::Error> {
    let decision = Decision::expiry();
    let mut ended = Vec::new();
    for row in client.query(EXPIRED, &[&(limit as i64)])? {
        let call_id: String = row.get(0);
        let Some(call) = select_call(client, &call_id)? else {
            continue;
        };
        if let Decided::Applied { call, .. } = decide_read(client, call, &decision)? {
            ended.push(call);
        }
    }
    Ok(ended)
}

/// `CANCEL_AWAITING`; whether it applied.
pub(super) fn cancel_awaiting(
    client: &mut impl GenericClient,
    call_id: &str,
    reason: Option<&str>,
    no_reason: &str,
    detail: &str,
) -> Result<bool, tokio_postgres::Error> {
    let row = client.query_one(CANCEL_AWAITING, &[&call_id, &reason, &no_reason, &detail])?;
    Ok(row.get::<_, i64>(0) == 1)
}

/// A call's request in a scope (`None`: any tenant's).
pub(super) fn approval(
    client: &mut impl GenericClient,
    tenant: Option<&str>,
    call_id: &str,
) -> Result<Option<Approval>, tokio_postgres::Error> {
    Ok(client
        .query_opt(APPROVAL, &[&call_id, &tenant])?
        .map(|r| approval_from_row(&r, 0)))
}

/// The queue in a scope, after `after`, oldest first.
pub(super) fn waiting(
    client: &mut impl GenericClient,
    tenant: Option<&str>,
    after: Option<&str>,
    limit: usize,
) -> Result<Vec<Waiting>, tokio_postgres::Error> {
    let after = after.unwrap_or("");
    client
        .query(WAITING, &[&tenant, &after, &(limit as i64)])?
        .iter()
        .map(|r| {
            Ok(Waiting {
                call: call_from_row(r)?,
                approval: approval_from_row(r, 20),
            })
        })
        .collect()
}

/// An `approvals` row whose columns start at `at`, in `APPROVAL`'s order.
fn approval_from_row(r: &Row, at: usize) -> Approval {
    Approval::from_columns(
        (r.get(at), r.get(at + 1), r.get(at + 2), r.get(at + 3)),
        r.get(at + 4),
        (r.get(at + 5), r.get(at + 6)),
        r.get(at + 7),
        r.get(at + 8),
        r.get(at + 9),
        r.get(at + 10),
        r.get(at + 11),
    )
}

/// Claim due notifications (`TAKE`), each with its call and request; one
/// whose call is gone is deleted.
pub(super) fn take(
    client: &mut impl GenericClient,
    limit: usize,
    hold: Duration,
) -> Result<Vec<Notification>, tokio_postgres::Error> {
    let rows = client.query(TAKE, &[&(limit as i64), &hold.as_secs_f64()])?;
    let mut taken = Vec::with_capacity(rows.len());
    for row in rows {
        let msg_id: String = row.get(0);
        let call_id: String = row.get(2);
        let call = select_call(client, &call_id)?;
        let approval = approval(client, None, &call_id)?;
        let (Some(call), Some(approval)) = (call, approval) else {
            client.execute(SETTLE_GONE, &[&msg_id, &None::<i64>])?;
            continue;
        };
        taken.push(Notification {
            msg_id,
            tenant: row.get(1),
            event: row.get(3),
            attempts: row.get(4),
            created_at: row.get(5),
            call,
            approval,
        });
    }
    Ok(taken)
}

/// What became of one delivery attempt.
pub(super) fn settle(
    client: &mut impl GenericClient,
    msg_id: &str,
    attempts: i64,
    delivery: Delivery,
) -> Result<(), tokio_postgres::Error> {
    match delivery {
        Delivery::Delivered | Delivery::GaveUp => {
            client.execute(SETTLE_GONE, &[&msg_id, &Some(attempts)])?
        }
        Delivery::RetryIn(delay) => {
            client.execute(SETTLE_RETRY, &[&msg_id, &attempts, &delay.as_secs_f64()])?
        }
    };
    Ok(())
}
