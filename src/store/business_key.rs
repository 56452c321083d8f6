//! Business keys, the second layer of chapter 12.15.4: a call whose tool has
//! a business key (some of its args, e.g. user + coupon template + campaign)
//! creates nothing while another call of the same tenant and tool with the
//! same business key, created within the window, is `pending`, `running` or
//! `succeeded` — whatever idempotency key each carries.
//!
//! It owns the `business_keys` table (SQLite migration 8; PostgreSQL's is
//! `postgres/business_key.rs`), and the facade over both backends: one row per call that
//! carried a business key, and at most one *holding* row per
//! `(tenant, tool, bkey)`, which the partial unique index
//! `idx_business_keys_live` enforces. A new call takes the key in its own
//! create transaction: first a conditional `UPDATE` lets go of a holder that
//! has expired or whose call failed (its row count, not a read, decides),
//! then the `INSERT` of the new holding row either succeeds or hits the
//! unique index — and then the existing holder is the answer and no call is
//! written. It never runs a tool and never decides what the API answers (reject
//! or return); it only says which call holds the key.

use super::call_store::{Backend, CallStore};
use super::error::StoreError;
use super::ids::{new_call_id, now};
use super::model::{Call, Created, NewCall};
use super::sqlite::sql;
use super::sqlite::writer::Lane;
use rusqlite::{params, Connection, ErrorCode, OptionalExtension};

/// A call's business key, computed by the API from the tool's rule.
#[derive(Debug, Clone, PartialEq)]
pub struct BusinessKey {
    /// Canonical JSON of the array of the rule's fields' values, in order.
    pub value: String,
    /// How long after its call's creation the key blocks a new intent.
    pub window_secs: f64,
}

/// What a create under a business key found or did.
#[derive(Debug, Clone, PartialEq)]
pub enum Guarded {
    /// The idempotency key decided (new, existing, reset or conflict).
    Created(Created),
    /// Another live call holds the business key: nothing was written.
    Duplicate(Call),
}

/// Effects reconciled by business key (`inspect --by-business-key`).
#[derive(Debug, Clone, PartialEq)]
pub struct IntentLedger {
    pub tenant: String,
    pub tool: String,
    pub business_key: String,
    /// Calls that carried this key (any status).
    pub calls: i64,
    /// Of those, calls that are not `failed`.
    pub live_calls: i64,
    pub effects: i64,
    /// Sum of the effects' amounts (`charge`), if any.
    pub amount: Option<i64>,
}

impl CallStore {
    /// `create_or_get`, guarded by `key` when the tool has one. On either
    /// backend the business key's row is written in the same transaction as
    /// the call, so both exist or neither, and the unique index decides.
    pub fn create_or_get_guarded(
        &self,
        new: NewCall,
        key: Option<BusinessKey>,
    ) -> Result<Guarded, StoreError> {
        let Some(key) = key else {
            return self.create_or_get(new).map(Guarded::Created);
        };
        let retention = self.retention();
        let guarded = match &self.backend {
            Backend::Sqlite(b) => b.write_in(Lane::Behind, create_or_get_op(new, key))?,
            Backend::Postgres(b) => b.create_or_get_guarded(&new, &key)?,
        };
        Ok(match guarded {
            Guarded::Created(created) => Guarded::Created(match created {
                Created::New(c) => Created::New(retention.stamp(c)),
                Created::Existing(c) => Created::Existing(retention.stamp(c)),
                Created::RetryReset(c) => Created::RetryReset(retention.stamp(c)),
                Created::Conflict(c) => Created::Conflict(retention.stamp(c)),
            }),
            Guarded::Duplicate(c) => Guarded::Duplicate(retention.stamp(c)),
        })
    }

    /// Every business key's calls and effects, grouped (the chapter's
    /// reconciliation by business key rather than by request), largest
    /// number of calls first.
    pub fn intent_ledger(&self, limit: usize) -> Result<Vec<IntentLedger>, StoreError> {
        match &self.backend {
            Backend::Sqlite(b) => b.read(|conn| ledger(conn, limit)),
            Backend::Postgres(b) => b.intent_ledger(limit),
        }
    }
}

/// The idempotency key first: a known key is answered as always (a replay
/// never consults the business key), except that a retryable failure about
/// to run again must hold the business key first. An unknown key takes the
/// business key, then writes its call.
fn create_or_get_op(
    new: NewCall,
    key: BusinessKey,
) -> impl FnOnce(&Connection) -> rusqlite::Result<Guarded> + Send + 'static {
    move |conn| {
        let now = now();
        if let Some(existing) = sql::select_call_by_key(conn, &new.tenant, &new.idem_key)? {
            let resets = existing.fingerprint == new.fingerprint && existing.is_retryable_failure();
            if resets {
                release_dead_holder(conn, &new.tenant, &new.tool, &key.value, now)?;
                if !hold(conn, &existing.call_id, &new, &key, now)? {
                    return duplicate(conn, &new, &key);
                }
            }
            let created = sql::resolve_existing(conn, existing, &new.fingerprint, now)?;
            return Ok(Guarded::Created(created));
        }
        release_dead_holder(conn, &new.tenant, &new.tool, &key.value, now)?;
        // The row needs an id before the call exists; `insert_call` may draw
        // another one (a collision with another process), so it is re-pointed.
        let draft = new_call_id();
        if !hold(conn, &draft, &new, &key, now)? {
            return duplicate(conn, &new, &key);
        }
        let call = sql::insert_call(conn, new, now)?;
        if call.call_id != draft {
            conn.prepare_cached("UPDATE business_keys SET call_id = ?1 WHERE call_id = ?2")?
                .execute(params![call.call_id, draft])?;
        }
        sql::audit(conn, now, &call.call_id, 0, "created", &call.tool)?;
        Ok(Guarded::Created(Created::New(call)))
    }
}

/// Let go of the key's holder if it no longer blocks: its window is over,
/// or its call failed (or was purged).
fn release_dead_holder(
    conn: &Connection,
    tenant: &str,
    tool: &str,
    bkey: &str,
    now: f64,
) -> rusqlite::Result<usize> {
    conn.prepare_cached(
        "UPDATE business_keys SET holding = 0
          WHERE tenant = ?1 AND tool = ?2 AND bkey = ?3 AND holding = 1
            AND (expires_at <= ?4
                 OR NOT EXISTS (SELECT 1 FROM calls c
                                 WHERE c.call_id = business_keys.call_id
                                   AND c.status <> 'failed'))",
    )?
    .execute(params![tenant, tool, bkey, now])
}

/// Make `call_id` the key's holder. `false`: another call holds it (the
/// partial unique index refused the row), and nothing was changed.
fn hold(
    conn: &Connection,
    call_id: &str,
    new: &NewCall,
    key: &BusinessKey,
    now: f64,
) -> rusqlite::Result<bool> {
    let written = conn
        .prepare_cached(
            "INSERT INTO business_keys (call_id, tenant, tool, bkey, created_at, expires_at, holding)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, 1)
             ON CONFLICT (call_id) DO UPDATE
                SET bkey = excluded.bkey, created_at = excluded.created_at,
                    expires_at = excluded.expires_at, holding = 1",
        )?
        .execute(params![
            call_id,
            new.tenant,
            new.tool,
            key.value,
            now,
            now + key.window_secs
        ]);
    match written {
        Ok(_) => Ok(true),
        Err(e) if e.sqlite_error_code() == Some(ErrorCode::ConstraintViolation) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The call that holds the key (it exists: the index just said so, in this
/// same transaction).
fn duplicate(conn: &Connection, new: &NewCall, key: &BusinessKey) -> rusqlite::Result<Guarded> {
    let holder: Option<String> = conn
        .prepare_cached(
            "SELECT call_id FROM business_keys
              WHERE tenant = ?1 AND tool = ?2 AND bkey = ?3 AND holding = 1",
        )?
        .query_row(params![new.tenant, new.tool, key.value], |r| r.get(0))
        .optional()?;
    let holder = holder.ok_or(rusqlite::Error::QueryReturnedNoRows)?;
    let call = sql::select_call(conn, &holder)?.ok_or(rusqlite::Error::QueryReturnedNoRows)?;
    Ok(Guarded::Duplicate(call))
}

/// Effects reconciled by business key: per `(tenant, tool, business key)`,
/// the calls that carried it, those not `failed`, their effects and the
/// effects' amounts. More than one live call or effect per key within a
/// window is what the second layer exists to prevent (`verify` says so).
pub const LEDGER_SQL: &str = "SELECT b.tenant, b.tool, b.bkey, count(*),
        count(c.call_id) FILTER (WHERE c.status <> 'failed'),
        count(e.effect_id), sum(e.amount)
   FROM business_keys b
   LEFT JOIN calls c ON c.call_id = b.call_id
   LEFT JOIN effects e ON e.call_id = b.call_id
  GROUP BY b.tenant, b.tool, b.bkey
  ORDER BY count(*) DESC, b.tenant, b.tool, b.bkey";

fn ledger(conn: &Connection, limit: usize) -> rusqlite::Result<Vec<IntentLedger>> {
    conn.prepare(&format!("{LEDGER_SQL} LIMIT ?1"))?
        .query_map(params![limit as i64], |r| {
            Ok(IntentLedger {
                tenant: r.get(0)?,
                tool: r.get(1)?,
                business_key: r.get(2)?,
                calls: r.get(3)?,
                live_calls: r.get(4)?,
                effects: r.get(5)?,
                amount: r.get(6)?,
            })
        })?
        .collect()
}

/// Migration 8's DDL. `business_keys` keeps a row per call that carried a
/// business key (for `verify` and the ledger, and to take the key back on a
/// retry reset); `holding = 1` marks the one row per key that blocks.
pub(super) const BUSINESS_KEYS_TABLE: &str = "
CREATE TABLE IF NOT EXISTS business_keys (
  call_id     TEXT PRIMARY KEY,
  tenant      TEXT NOT NULL,
  tool        TEXT NOT NULL,
  bkey        TEXT NOT NULL,
  created_at  REAL NOT NULL,
  expires_at  REAL NOT NULL,
  holding     INTEGER NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS idx_business_keys_live
    ON business_keys(tenant, tool, bkey) WHERE holding = 1;
CREATE INDEX IF NOT EXISTS idx_business_keys_key
    ON business_keys(tenant, tool, bkey, created_at);
";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::backends::{on_both_backends, TestDb};
    use crate::store::{Scope, Status};
    use std::sync::{Arc, Barrier};

    on_both_backends!(
        a_second_intent_with_another_key_finds_the_first_call,
        an_expired_or_failed_holder_lets_a_new_intent_through,
        racing_keys_for_one_intent_make_one_call,
        a_purged_call_takes_its_business_key_row_along,
    );

    fn new(key: &str) -> NewCall {
        NewCall {
            tenant: "t".into(),
            idem_key: key.into(),
            fingerprint: format!("fp-{key}"),
            tool: "charge".into(),
            args_json: "{}".into(),
            client_id: None,
            seq: None,
        }
    }

    fn bkey(window_secs: f64) -> Option<BusinessKey> {
        Some(BusinessKey {
            value: "[\"u1\",\"coupon-7\"]".into(),
            window_secs,
        })
    }

    fn created(g: Guarded) -> Call {
        match g {
            Guarded::Created(Created::New(c)) => c,
            other => panic!("expected a new call, got {other:?}"),
        }
    }

    fn a_second_intent_with_another_key_finds_the_first_call(
        db: &TestDb,
    ) -> Result<(), StoreError> {
        let store = db.open()?;
        let first = created(store.create_or_get_guarded(new("a"), bkey(60.0))?);
        match store.create_or_get_guarded(new("b"), bkey(60.0))? {
            Guarded::Duplicate(c) => assert_eq!(c.call_id, first.call_id),
            other => panic!("{other:?}"),
        }
        // The same idempotency key is a replay, not a duplicate intent.
        match store.create_or_get_guarded(new("a"), bkey(60.0))? {
            Guarded::Created(Created::Existing(c)) => assert_eq!(c.call_id, first.call_id),
            other => panic!("{other:?}"),
        }
        assert_eq!(store.stats(Scope::All)?.calls, 1);
        assert_eq!(db.count("SELECT count(*) FROM business_keys"), 1);
        Ok(())
    }

    fn an_expired_or_failed_holder_lets_a_new_intent_through(
        db: &TestDb,
    ) -> Result<(), StoreError> {
        let store = db.open()?;
        created(store.create_or_get_guarded(new("a"), bkey(0.0))?);
        let second = created(store.create_or_get_guarded(new("b"), bkey(60.0))?);
        // Fail the second: a failed call does not block.
        let lease = store
            .claim(&second.call_id, "w", std::time::Duration::from_secs(5))?
            .expect("a pending call is claimed");
        let (tx, rx) = std::sync::mpsc::channel();
        store.fail_then(
            &lease,
            &serde_json::json!({"code": "x", "message": "m", "retryable": false}),
            Box::new(move |r| tx.send(r).unwrap()),
        );
        rx.recv().unwrap()?;
        assert_eq!(store.get(&second.call_id)?.unwrap().status, Status::Failed);
        let third = created(store.create_or_get_guarded(new("c"), bkey(60.0))?);
        assert_ne!(third.call_id, second.call_id);
        let ledger = store.intent_ledger(10)?;
        assert_eq!(ledger.len(), 1);
        assert_eq!((ledger[0].calls, ledger[0].live_calls), (3, 2));
        Ok(())
    }

    /// 16 threads, 16 keys, one intent: the unique index lets one through.
    fn racing_keys_for_one_intent_make_one_call(db: &TestDb) -> Result<(), StoreError> {
        const THREADS: usize = 16;
        let store = db.open()?;
        let barrier = Arc::new(Barrier::new(THREADS));
        let outcomes: Vec<Guarded> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|i| {
                    let (store, barrier) = (Arc::clone(&store), Arc::clone(&barrier));
                    s.spawn(move || {
                        barrier.wait();
                        store.create_or_get_guarded(new(&format!("k{i}")), bkey(60.0))
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap())
                .collect::<Result<_, _>>()
        })?;
        let new_calls: Vec<&Guarded> = outcomes
            .iter()
            .filter(|g| matches!(g, Guarded::Created(Created::New(_))))
            .collect();
        assert_eq!(new_calls.len(), 1, "{outcomes:?}");
        assert_eq!(store.stats(Scope::All)?.calls, 1);
        Ok(())
    }

    /// Retention deletes the business-key row with its call.
    fn a_purged_call_takes_its_business_key_row_along(db: &TestDb) -> Result<(), StoreError> {
        let options = crate::store::StoreOptions {
            retention: crate::store::Retention {
                key_ttl: Some(std::time::Duration::from_millis(1)),
            },
            ..Default::default()
        };
        let store = db.open_with(options)?;
        let call = created(store.create_or_get_guarded(new("p"), bkey(60.0))?);
        let lease = store
            .claim(&call.call_id, "w", std::time::Duration::from_secs(5))?
            .expect("a pending call is claimed");
        let (tx, rx) = std::sync::mpsc::channel();
        let result = serde_json::json!({"ok": true});
        store.succeed_then(
            &lease,
            &result,
            None,
            Box::new(move |r| tx.send(r).unwrap()),
        );
        rx.recv().unwrap()?;
        assert_eq!(db.count("SELECT count(*) FROM business_keys"), 1);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while store.purge_expired(10)?.is_empty() {
            assert!(std::time::Instant::now() < deadline, "never purged");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(db.count("SELECT count(*) FROM business_keys"), 0);
        Ok(())
    }
}
