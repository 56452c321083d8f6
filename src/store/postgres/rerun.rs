//! Re-running a call on PostgreSQL, by the rules of `store::rerun`: one
//! transaction reads the call and locks its row (`FOR UPDATE`: no claim or
//! completion moves it meanwhile), checks its retention by the database's
//! clock, takes its business key back in a savepoint (the live index may
//! refuse it), and sends it back to `pending` with its `rerun` audit row —
//! the update naming the status and attempt it read, its row count
//! deciding.
//!
//! Never runs a tool.

use super::super::model::Call;
use super::super::rerun::{rerun_with, Rerun, RerunRequest, RerunSteps};
use super::error::violates;
use super::session::{GenericClient, Session, Transaction};
use super::steps::call_from_row;
use tokio_postgres::types::ToSql;

/// The call, in the request's scope (`$2` NULL: any tenant's), its row
/// locked until the transaction ends.
const READ_LOCKED: &str =
    "SELECT call_id, tenant, idem_key, fingerprint, client_id, seq, tool, args_json,
            status, result_json, error_json, attempt, lease_until, owner, effect_id,
            created_at, updated_at, next_attempt_at, cancel_requested_at, progress_json
       FROM calls WHERE call_id = $1 AND ($2::text IS NULL OR tenant = $2)
        FOR UPDATE";

/// Whether a call last updated at `$1` is past a retention of `$2` seconds.
const EXPIRED: &str = "SELECT $1::float8 + $2::float8 <= extract(epoch FROM now())::float8";

const CARRIED: &str = "SELECT tenant, tool, bkey, expires_at - created_at FROM business_keys
      WHERE call_id = $1";

const RELEASE_DEAD_HOLDER: &str = "UPDATE business_keys SET holding = false
      WHERE tenant = $1 AND tool = $2 AND bkey = $3 AND holding
        AND (expires_at <= extract(epoch FROM now())::float8
             OR NOT EXISTS (SELECT 1 FROM calls c WHERE c.call_id = business_keys.call_id
                              AND c.status NOT IN ('failed', 'cancelled', 'denied')))";

const HOLD_AGAIN: &str = "UPDATE business_keys
        SET holding = true, created_at = extract(epoch FROM now())::float8,
            expires_at = extract(epoch FROM now())::float8 + $2
      WHERE call_id = $1";

const HOLDER: &str = "SELECT call_id FROM business_keys
      WHERE tenant = $1 AND tool = $2 AND bkey = $3 AND holding";

/// `failed` or `cancelled` under attempt `$2` → `pending`, its error, retry
/// time and cancel request cleared, never with an effect row; audited
/// `rerun` with `$3`.
const RESET: &str = "WITH r AS (
       UPDATE calls SET status = 'pending', result_json = NULL, error_json = NULL,
              lease_until = NULL, owner = NULL, next_attempt_at = NULL,
              cancel_requested_at = NULL, cancel_reason = NULL,
              updated_at = extract(epoch FROM now())::float8
        WHERE call_id = $1 AND status IN ('failed', 'cancelled') AND attempt = $2
          AND NOT EXISTS (SELECT 1 FROM effects e WHERE e.call_id = calls.call_id)
       RETURNING call_id, attempt, updated_at
     ), a AS (
       INSERT INTO audit (ts, call_id, attempt, event, detail)
       SELECT updated_at, call_id, attempt, 'rerun', $3::text FROM r
     )
     SELECT count(*) FROM r";

/// One re-run in its own transaction.
pub(super) fn rerun(
    client: &mut Session,
    request: &RerunRequest,
) -> Result<Option<Rerun>, tokio_postgres::Error> {
    let mut tx = client.transaction()?;
    let found = rerun_in(&mut tx, request)?;
    tx.commit()?;
    Ok(found)
}

/// One re-run inside the caller's transaction (a bulk job's batch).
pub(super) fn rerun_in(
    tx: &mut Transaction<'_>,
    request: &RerunRequest,
) -> Result<Option<Rerun>, tokio_postgres::Error> {
    let mut steps = Steps { tx, request };
    rerun_with(&mut steps, request, 1)
}

struct Steps<'a, 'b> {
    tx: &'a mut Transaction<'b>,
    request: &'a RerunRequest,
}

impl RerunSteps for Steps<'_, '_> {
    type Error = tokio_postgres::Error;

    fn read(&mut self) -> Result<Option<Call>, tokio_postgres::Error> {
        let params: [&(dyn ToSql + Sync); 2] = [&self.request.call_id, &self.request.tenant];
        self.tx
            .query_opt(READ_LOCKED, &params)?
            .map(|r| call_from_row(&r))
            .transpose()
    }

    fn expired(&mut self, call: &Call) -> Result<bool, tokio_postgres::Error> {
        let Some(ttl) = self.request.key_ttl else {
            return Ok(false);
        };
        Ok(self
            .tx
            .query_one(EXPIRED, &[&call.updated_at, &ttl])?
            .get(0))
    }

    fn hold_business_key(&mut self, call: &Call) -> Result<Option<String>, tokio_postgres::Error> {
        let Some(row) = self.tx.query_opt(CARRIED, &[&call.call_id])? else {
            return Ok(None);
        };
        let (tenant, tool, bkey, window): (String, String, String, f64) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        self.tx
            .execute(RELEASE_DEAD_HOLDER, &[&tenant, &tool, &bkey])?;
        let mut savepoint = self.tx.savepoint("rerun_hold")?;
        match savepoint.execute(HOLD_AGAIN, &[&call.call_id, &window]) {
            Ok(_) => {
                savepoint.commit()?;
                Ok(None)
            }
            Err(e) if violates(&e, "business_keys_live") => {
                savepoint.rollback()?;
                let holder = self.tx.query_opt(HOLDER, &[&tenant, &tool, &bkey])?;
                Ok(Some(holder.map(|r| r.get(0)).unwrap_or_default()))
            }
            Err(e) => Err(e),
        }
    }

    fn reset(&mut self, call: &Call, detail: &str) -> Result<bool, tokio_postgres::Error> {
        let row = self
            .tx
            .query_one(RESET, &[&call.call_id, &call.attempt, &detail])?;
        Ok(row.get::<_, i64>(0) == 1)
    }
}
