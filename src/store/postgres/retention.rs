//! Key retention on PostgreSQL: terminal calls whose last update is older
//! than the TTL (by the database's clock) are deleted with their audit rows,
//! in bounded batches; their `effects` rows stay as the ledger, marked with
//! when their call was purged. A purged call's business-key row, approval
//! request and queued notification go with it.
//!
//! One statement per batch. The candidates are locked `FOR UPDATE SKIP
//! LOCKED`, so two nodes purging at once never take the same rows (each
//! passes over the other's), and the lock re-checks the condition on the
//! row's latest version (READ COMMITTED re-evaluates it), so a call that a
//! same-key retry reset to `pending` meanwhile is left alone.
//!
//! Never deletes a `pending` or `running` call, and never an `effects` row.

use super::super::model::Purged;
use super::session::GenericClient;

const PURGE: &str = "WITH c AS MATERIALIZED (
       SELECT call_id FROM calls
        WHERE status IN ('succeeded', 'failed', 'cancelled', 'denied')
          AND updated_at < extract(epoch FROM now())::float8 - $1
        ORDER BY updated_at LIMIT $2 FOR UPDATE SKIP LOCKED
     ), d AS (
       DELETE FROM calls USING c WHERE calls.call_id = c.call_id
       RETURNING calls.call_id, calls.tenant, calls.idem_key
     ), a AS (
       DELETE FROM audit WHERE call_id IN (SELECT call_id FROM d)
     ), b AS (
       DELETE FROM business_keys WHERE call_id IN (SELECT call_id FROM d)
     ), r AS (
       DELETE FROM approvals WHERE call_id IN (SELECT call_id FROM d)
     ), n AS (
       DELETE FROM notifications WHERE call_id IN (SELECT call_id FROM d)
     ), e AS (
       UPDATE effects SET call_purged_at = extract(epoch FROM now())::float8
         FROM d WHERE effects.call_id = d.call_id
     )
     SELECT call_id, tenant, idem_key FROM d";

pub(super) fn purge(
    client: &mut impl GenericClient,
    ttl_secs: f64,
    limit: usize,
) -> Result<Vec<Purged>, tokio_postgres::Error> {
    Ok(client
        .query(PURGE, &[&ttl_secs, &(limit as i64)])?
        .iter()
        .map(|r| Purged {
            call_id: r.get(0),
            tenant: r.get(1),
            idem_key: r.get(2),
        })
        .collect())
}
