//! Business keys, the second layer of chapter 12.15.4: a call whose tool has
//! a business key (some of its args, e.g. user + coupon template + campaign)
//! creates nothing while another call of the same tenant and tool with the
//! same business key, created within the window, is `pending`, `running` or
//! `succeeded` — whatever idempotency key each carries.
//!
//! This file holds what both backends share: the key, what a guarded create
//! found, the ledger's row, and the contract tests. Each backend keeps a
//! `business_keys` table — one row per call that carried a business key, at
//! most one *holding* row per `(tenant, tool, bkey)`, which a partial unique
//! index enforces — and writes it in the call's own create transaction
//! (`sqlite/business_key.rs`, `postgres/business_key.rs`). It never runs a
//! tool and never decides what the API answers (reject or return); the store
//! only says which call holds the key.

use super::model::{Call, Created};

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
    /// Of those, calls that are neither `failed` nor `cancelled`.
    pub live_calls: i64,
    pub effects: i64,
    /// Sum of the effects' amounts (`charge`), if any.
    pub amount: Option<i64>,
}

impl Guarded {
    /// The same outcome with `f` applied to its call (the facade stamps
    /// `expires_at` this way).
    pub(super) fn map(self, f: impl FnOnce(Call) -> Call) -> Guarded {
        match self {
            Guarded::Created(created) => Guarded::Created(created.map(f)),
            Guarded::Duplicate(call) => Guarded::Duplicate(f(call)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::backends::{on_both_backends, TestDb};
    use crate::store::{NewCall, Scope, Status, StoreError};
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
            gate: None,
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
