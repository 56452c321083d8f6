//! Cancelling on PostgreSQL (schema step 3), by the rules of
//! `store::cancel`: the cancel itself (a `pending` call to `cancelled`, or a
//! `running` one's request recorded), the fenced end of a running call
//! whose cancel was asked (`end_cancelled`: its owner's stop, a failure, a
//! retry, a release, recovery), and the read an owner makes to learn of
//! cancels. Each change is one statement — the conditional `UPDATE` naming
//! the status and attempt it read, and its audit row, in data-modifying
//! CTEs — whose row count decides; a cancel that loses a race to a claim or
//! a completion reads again (`cancel_with`).
//!
//! Times are the database's. Never runs a tool, never opens a transaction.

use super::super::cancel::{CancelSteps, NO_REASON};
use super::super::model::{Call, LeaseHeld};
use super::session::GenericClient;
use super::steps::select_tenant_call;

/// `pending` → `cancelled` under the attempt read (`$2`), with the reason
/// (`$3`, or `NO_REASON`, `$4`, when none was given, in its `error_json`)
/// and its `cancelled` audit row (`$5`).
const CANCEL_PENDING: &str = "WITH c AS (
       UPDATE calls SET status = 'cancelled',
              error_json = json_build_object('code', 'cancelled',
                                             'message', coalesce($3::text, $4),
                                             'retryable', false)::text,
              cancel_requested_at = extract(epoch FROM now())::float8, cancel_reason = $3,
              next_attempt_at = NULL, lease_until = NULL, owner = NULL,
              updated_at = extract(epoch FROM now())::float8
        WHERE call_id = $1 AND status = 'pending' AND attempt = $2
       RETURNING call_id, attempt, updated_at
     ), a AS (
       INSERT INTO audit (ts, call_id, attempt, event, detail)
       SELECT updated_at, call_id, attempt, 'cancelled', $5::text FROM c
     )
     SELECT count(*) FROM c";

/// A `running` call's cancel recorded under the attempt read (`$2`), with
/// the reason (`$3`) and its `cancel_requested` audit row (`$4`).
const REQUEST_STOP: &str = "WITH r AS (
       UPDATE calls SET cancel_requested_at = extract(epoch FROM now())::float8,
              cancel_reason = $3
        WHERE call_id = $1 AND status = 'running' AND attempt = $2
          AND cancel_requested_at IS NULL
       RETURNING call_id, attempt, cancel_requested_at
     ), a AS (
       INSERT INTO audit (ts, call_id, attempt, event, detail)
       SELECT cancel_requested_at, call_id, attempt, 'cancel_requested', $4::text FROM r
     )
     SELECT count(*) FROM r";

/// The fenced end of an attempt (`$2`) whose cancel was asked: still
/// `running` under it, its cancel recorded, no effect row; audited
/// `cancelled` with `$3`, the reason recorded (or `NO_REASON`, `$4`) in its
/// `error_json`.
const END_CANCELLED: &str = "WITH e AS (
       UPDATE calls SET status = 'cancelled',
              error_json = json_build_object('code', 'cancelled',
                                             'message', coalesce(cancel_reason, $4),
                                             'retryable', false)::text,
              lease_until = NULL, owner = NULL, updated_at = extract(epoch FROM now())::float8
        WHERE call_id = $1 AND status = 'running' AND attempt = $2
          AND cancel_requested_at IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM effects WHERE effects.call_id = calls.call_id)
       RETURNING call_id, attempt, updated_at
     ), a AS (
       INSERT INTO audit (ts, call_id, attempt, event, detail)
       SELECT updated_at, call_id, attempt, 'cancelled', $3::text FROM e
     )
     SELECT count(*) FROM e";

/// The statements of one cancel, on one pooled connection.
pub(super) struct Steps<'a, C: GenericClient> {
    pub(super) client: &'a mut C,
    pub(super) tenant: &'a str,
    pub(super) call_id: &'a str,
    pub(super) reason: Option<&'a str>,
}

impl<C: GenericClient> CancelSteps for Steps<'_, C> {
    type Error = tokio_postgres::Error;

    fn read(&mut self) -> Result<Option<Call>, tokio_postgres::Error> {
        select_tenant_call(self.client, self.tenant, self.call_id)
    }

    fn cancel_pending(&mut self, call: &Call, detail: &str) -> Result<bool, tokio_postgres::Error> {
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] = [
            &call.call_id,
            &call.attempt,
            &self.reason,
            &NO_REASON,
            &detail,
        ];
        let row = self.client.query_one(CANCEL_PENDING, &params)?;
        Ok(row.get::<_, i64>(0) == 1)
    }

    fn cancel_awaiting(
        &mut self,
        call: &Call,
        detail: &str,
    ) -> Result<bool, tokio_postgres::Error> {
        super::approval::cancel_awaiting(self.client, &call.call_id, self.reason, NO_REASON, detail)
    }

    fn request_stop(&mut self, call: &Call, detail: &str) -> Result<bool, tokio_postgres::Error> {
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
            [&call.call_id, &call.attempt, &self.reason, &detail];
        let row = self.client.query_one(REQUEST_STOP, &params)?;
        Ok(row.get::<_, i64>(0) == 1)
    }
}

/// `END_CANCELLED`; whether it applied.
pub(super) fn end_cancelled(
    client: &mut impl GenericClient,
    call_id: &str,
    attempt: i64,
    detail: &str,
) -> Result<bool, tokio_postgres::Error> {
    let row = client.query_one(END_CANCELLED, &[&call_id, &attempt, &detail, &NO_REASON])?;
    Ok(row.get::<_, i64>(0) == 1)
}

/// Which of `running` are still `running` under the same attempt with their
/// cancel asked, in one read.
pub(super) fn cancels_asked(
    client: &mut impl GenericClient,
    running: &[LeaseHeld],
) -> Result<Vec<LeaseHeld>, tokio_postgres::Error> {
    let ids: Vec<&str> = running.iter().map(|l| l.call_id.as_str()).collect();
    let rows = client.query(
        "SELECT call_id, attempt FROM calls
          WHERE call_id = ANY($1) AND status = 'running' AND cancel_requested_at IS NOT NULL",
        &[&ids],
    )?;
    Ok(running
        .iter()
        .filter(|held| {
            rows.iter()
                .any(|r| r.get::<_, &str>(0) == held.call_id && r.get::<_, i64>(1) == held.attempt)
        })
        .cloned()
        .collect())
}
