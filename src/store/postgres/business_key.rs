//! Business keys on PostgreSQL (schema step 2): the rule of
//! `store::business_key`, as on SQLite — at most one holding row per
//! `(tenant, tool, bkey)`, enforced by the partial unique index
//! `business_keys_live`, written in the call's own transaction — for
//! several nodes on one database.
//!
//! One READ COMMITTED transaction per guarded create: a conditional `UPDATE`
//! lets go of a holder whose window ended or whose call failed, then the new
//! holding row is inserted with `ON CONFLICT ... DO NOTHING`. A concurrent
//! inserter of the same key (another node) makes ours wait on the index entry
//! until it commits, and then ours inserts nothing: the row count decides,
//! and the call is not written. The rare re-hold of a retryable failure's own
//! row runs in a savepoint, so a refusal by the index leaves the transaction
//! usable. Never runs a tool; never holds the transaction across anything
//! but SQL.

use super::super::business_key::{BusinessKey, Guarded, IntentLedger};
use super::super::ids::new_call_id;
use super::super::model::{Created, NewCall};
use super::error::violates;
use super::session::{GenericClient, Session, Transaction};
use super::sql;
use super::steps;

/// Schema step 2. `holding` marks the one row per key that blocks; the other
/// rows stay for the ledger and for a retryable failure to take its key back.
pub(super) const BUSINESS_KEYS_TABLE: &str = "
CREATE TABLE business_keys (
  call_id     text PRIMARY KEY,
  tenant      text NOT NULL,
  tool        text NOT NULL,
  bkey        text NOT NULL,
  created_at  double precision NOT NULL,
  expires_at  double precision NOT NULL,
  holding     boolean NOT NULL
);
CREATE UNIQUE INDEX business_keys_live ON business_keys (tenant, tool, bkey) WHERE holding;
CREATE INDEX business_keys_key ON business_keys (tenant, tool, bkey, created_at);
";

const RELEASE_DEAD_HOLDER: &str = "UPDATE business_keys SET holding = false
      WHERE tenant = $1 AND tool = $2 AND bkey = $3 AND holding
        AND (expires_at <= extract(epoch FROM now())::float8
             OR NOT EXISTS (SELECT 1 FROM calls c WHERE c.call_id = business_keys.call_id
                              AND c.status NOT IN ('failed', 'cancelled', 'denied')))";

const HOLD_NEW: &str =
    "INSERT INTO business_keys (call_id, tenant, tool, bkey, created_at, expires_at, holding)
     VALUES ($1, $2, $3, $4, extract(epoch FROM now())::float8,
             extract(epoch FROM now())::float8 + $5, true)
     ON CONFLICT (tenant, tool, bkey) WHERE holding DO NOTHING";

const HOLD_AGAIN: &str =
    "INSERT INTO business_keys (call_id, tenant, tool, bkey, created_at, expires_at, holding)
     VALUES ($1, $2, $3, $4, extract(epoch FROM now())::float8,
             extract(epoch FROM now())::float8 + $5, true)
     ON CONFLICT (call_id) DO UPDATE
        SET bkey = EXCLUDED.bkey, created_at = EXCLUDED.created_at,
            expires_at = EXCLUDED.expires_at, holding = true";

const HOLDER: &str = "SELECT call_id FROM business_keys
                       WHERE tenant = $1 AND tool = $2 AND bkey = $3 AND holding";

const LEDGER: &str = "SELECT b.tenant, b.tool, b.bkey, count(*),
        count(c.call_id) FILTER (WHERE c.status NOT IN ('failed', 'cancelled', 'denied')),
        count(e.effect_id), sum(e.amount)::bigint
   FROM business_keys b
   LEFT JOIN calls c ON c.call_id = b.call_id
   LEFT JOIN effects e ON e.call_id = b.call_id
  GROUP BY b.tenant, b.tool, b.bkey
  ORDER BY count(*) DESC, b.tenant, b.tool, b.bkey
  LIMIT $1";

/// A guarded create in its own transaction. A same-key request racing ours
/// between its read and its insert makes the insert find an existing call;
/// the transaction is then rolled back and the read, done again, finds the
/// call.
pub(super) fn create_or_get(
    client: &mut Session,
    new: &NewCall,
    key: &BusinessKey,
) -> Result<Guarded, tokio_postgres::Error> {
    for _ in 0..3 {
        let mut tx = client.transaction()?;
        if let Some(guarded) = guarded_create(&mut tx, new, key)? {
            tx.commit()?;
            return Ok(guarded);
        }
        tx.rollback()?;
    }
    let mut tx = client.transaction()?;
    let created = sql::create_or_get(&mut tx, new)?;
    tx.commit()?;
    Ok(Guarded::Created(created))
}

pub(super) fn ledger(
    client: &mut Session,
    limit: usize,
) -> Result<Vec<IntentLedger>, tokio_postgres::Error> {
    let rows = client.query(LEDGER, &[&(limit as i64)])?;
    Ok(rows
        .iter()
        .map(|r| IntentLedger {
            tenant: r.get(0),
            tool: r.get(1),
            business_key: r.get(2),
            calls: r.get(3),
            live_calls: r.get(4),
            effects: r.get(5),
            amount: r.get(6),
        })
        .collect())
}

/// The idempotency key first, then the business key, then the call; `None`:
/// a same-key call appeared meanwhile (roll back and read again).
fn guarded_create(
    tx: &mut Transaction<'_>,
    new: &NewCall,
    key: &BusinessKey,
) -> Result<Option<Guarded>, tokio_postgres::Error> {
    let window = key.window_secs;
    let scope = (&new.tenant, &new.tool, &key.value);
    if let Some(existing) = steps::select_call_by_key(tx, &new.tenant, &new.idem_key)? {
        let resets = existing.fingerprint == new.fingerprint && existing.is_retryable_failure();
        if resets {
            tx.execute(RELEASE_DEAD_HOLDER, &[scope.0, scope.1, scope.2])?;
            let mut savepoint = tx.savepoint("hold_again")?;
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] =
                [&existing.call_id, scope.0, scope.1, scope.2, &window];
            match savepoint.execute(HOLD_AGAIN, &params) {
                Ok(_) => savepoint.commit()?,
                Err(e) if violates(&e, "business_keys_live") => {
                    savepoint.rollback()?;
                    return holder(tx, new, key);
                }
                Err(e) => return Err(e),
            }
        }
        return sql::create_or_get(tx, new).map(|c| Some(Guarded::Created(c)));
    }
    tx.execute(RELEASE_DEAD_HOLDER, &[scope.0, scope.1, scope.2])?;
    let draft = new_call_id();
    let held = tx.execute(HOLD_NEW, &[&draft, scope.0, scope.1, scope.2, &window])?;
    if held == 0 {
        return holder(tx, new, key);
    }
    match sql::create_or_get(tx, new)? {
        Created::New(call) => {
            tx.execute(
                "UPDATE business_keys SET call_id = $1 WHERE call_id = $2",
                &[&call.call_id, &draft],
            )?;
            Ok(Some(Guarded::Created(Created::New(call))))
        }
        _ => Ok(None),
    }
}

/// The call that holds the key, read after the index refused ours (READ
/// COMMITTED: this statement sees the holder's committed row). `None` if it
/// let go meanwhile (its call failed and another request released it): the
/// caller rolls back and tries again.
fn holder(
    tx: &mut Transaction<'_>,
    new: &NewCall,
    key: &BusinessKey,
) -> Result<Option<Guarded>, tokio_postgres::Error> {
    let Some(row) = tx.query_opt(HOLDER, &[&new.tenant, &new.tool, &key.value])? else {
        return Ok(None);
    };
    let call_id: String = row.get(0);
    Ok(steps::select_call(tx, &call_id)?.map(Guarded::Duplicate))
}
