//! The store's tests for tenants, key retention and the audit timeline:
//! keys scoped per tenant, another tenant's call reading as absent, the
//! purge taking only expired terminal calls (never a pending or running
//! one, never an effect), and audit rows carrying their attempt.

use super::*;
use serde_json::json;
use std::path::PathBuf;
use std::sync::mpsc;

fn temp_db(name: &str) -> (crate::temp::TempDb, PathBuf) {
    let db = crate::temp::TempDb::new(&format!("idem-store-{name}"));
    let path = db.path().to_path_buf();
    (db, path)
}

use super::backends::{on_both_backends, TestDb};
use super::{created_call as created, new_call_in as call_in};

on_both_backends!(
    keys_and_calls_are_scoped_per_tenant,
    purge_takes_only_expired_terminal_calls_and_keeps_their_effects,
    without_a_ttl_nothing_is_purged,
    a_backlog_is_purged_in_small_batches,
    audit_rows_carry_their_attempt,
);

fn with_ttl(ttl: Option<Duration>) -> StoreOptions {
    StoreOptions {
        retention: Retention { key_ttl: ttl },
        ..StoreOptions::default()
    }
}

/// Claim and succeed a call with an effect, waiting for the commit.
fn finish_with_effect(store: &CallStore, call: &Call) -> Lease {
    let lease = store
        .claim(&call.call_id, "test:worker", Duration::from_secs(30))
        .unwrap()
        .expect("claimed");
    let (tx, rx) = mpsc::channel();
    let effect = NewEffect {
        amount: Some(1),
        detail: None,
    };
    store.succeed_then(
        &lease,
        &json!({"charged": 1}),
        Some(effect),
        Box::new(move |r| tx.send(r).unwrap()),
    );
    assert_eq!(rx.recv().unwrap(), Ok(Completion::Applied));
    lease
}

/// The same key in two tenants is two calls; each tenant finds only its own,
/// by key and by id, and counts only its own.
fn keys_and_calls_are_scoped_per_tenant(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let a = created(store.create_or_get(call_in("acme", "step-1", "fp-a"))?);
    let b = store.create_or_get(call_in("beta", "step-1", "fp-b"))?;
    let b = match b {
        Created::New(b) => b,
        other => panic!("a second tenant's equal key must be a new call: {other:?}"),
    };
    assert_ne!(a.call_id, b.call_id);
    assert_eq!(
        store.find_by_key("acme", "step-1")?.map(|c| c.call_id),
        Some(a.call_id.clone())
    );
    assert_eq!(store.get_for("beta", &a.call_id)?, None);
    assert_eq!(store.audit_for("beta", &a.call_id)?, None);
    assert!(store.get_for("acme", &a.call_id)?.is_some());
    assert_eq!(store.stats(Scope::Tenant("acme"))?.calls, 1);
    assert_eq!(store.stats(Scope::Tenant("nobody"))?.calls, 0);
    assert_eq!(store.stats(Scope::All)?.calls, 2);
    Ok(())
}

/// Only terminal calls older than the TTL go, with their audit rows; their
/// effects stay, marked; a pending call of the same age stays; the key then
/// starts a new call.
fn purge_takes_only_expired_terminal_calls_and_keeps_their_effects(
    db: &TestDb,
) -> Result<(), StoreError> {
    let store = db.open_with(with_ttl(Some(Duration::from_millis(50))))?;
    let done = created(store.create_or_get(call_in("acme", "done", "fp"))?);
    finish_with_effect(&store, &done);
    let waiting = created(store.create_or_get(call_in("acme", "waiting", "fp"))?);
    let running = created(store.create_or_get(call_in("acme", "running", "fp"))?);
    store.claim(&running.call_id, "test:worker", Duration::from_secs(30))?;
    let done = store.get(&done.call_id)?.expect("done");
    let expires = done.expires_at.expect("a terminal call expires");
    assert!((expires - done.updated_at - 0.05).abs() < 1e-6, "{done:?}");
    assert_eq!(store.get(&waiting.call_id)?.unwrap().expires_at, None);
    std::thread::sleep(Duration::from_millis(120));

    let purged = store.purge_expired(100)?;
    assert_eq!(
        purged,
        [Purged {
            call_id: done.call_id.clone(),
            tenant: "acme".into(),
            idem_key: "done".into()
        }]
    );
    assert_eq!(store.get(&done.call_id)?, None);
    assert!(store.get(&waiting.call_id)?.is_some());
    assert!(store.get(&running.call_id)?.is_some());
    let audit_rows = format!(
        "SELECT count(*) FROM audit WHERE call_id = '{}'",
        done.call_id
    );
    assert_eq!(db.count(&audit_rows), 0);
    let marked = format!(
        "SELECT count(*) FROM effects WHERE call_id = '{}' AND call_purged_at IS NOT NULL",
        done.call_id
    );
    assert_eq!(db.count(&marked), 1);
    assert!(store.purge_expired(100)?.is_empty());
    let again = store.create_or_get(call_in("acme", "done", "fp"))?;
    assert!(
        matches!(&again, Created::New(c) if c.call_id != done.call_id),
        "{again:?}"
    );
    Ok(())
}

/// `--key-ttl 0`: nothing expires and nothing is purged.
fn without_a_ttl_nothing_is_purged(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open_with(with_ttl(None))?;
    let call = created(store.create_or_get(call_in("acme", "k", "fp"))?);
    finish_with_effect(&store, &call);
    assert_eq!(store.get(&call.call_id)?.unwrap().expires_at, None);
    assert!(store.purge_expired(100)?.is_empty());
    assert_eq!(store.stats(Scope::All)?.calls, 1);
    Ok(())
}

/// Purging in batches of `limit` empties a backlog larger than one batch.
fn a_backlog_is_purged_in_small_batches(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open_with(with_ttl(Some(Duration::from_millis(10))))?;
    for n in 0..25 {
        let call = created(store.create_or_get(call_in("acme", &format!("k{n}"), "fp"))?);
        finish_with_effect(&store, &call);
    }
    std::thread::sleep(Duration::from_millis(50));
    let mut batches = Vec::new();
    loop {
        let purged = store.purge_expired(10)?.len();
        if purged == 0 {
            break;
        }
        batches.push(purged);
    }
    assert_eq!(batches, [10, 10, 5]);
    assert_eq!(store.stats(Scope::All)?.calls, 0);
    assert_eq!(store.stats(Scope::All)?.effects, 25);
    Ok(())
}

/// The timeline is in order and each row says which attempt it belongs to.
fn audit_rows_carry_their_attempt(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let call = created(store.create_or_get(call_in("acme", "k", "fp"))?);
    finish_with_effect(&store, &call);
    let events = store.audit_for("acme", &call.call_id)?.expect("the call");
    let seen: Vec<(&str, Option<i64>)> = events
        .iter()
        .map(|e| (e.event.as_str(), e.attempt))
        .collect();
    assert_eq!(
        seen,
        [
            ("created", Some(0)),
            ("claimed", Some(1)),
            ("succeeded", Some(1))
        ]
    );
    assert!(events.windows(2).all(|w| w[0].at <= w[1].at));
    Ok(())
}

/// `/healthz`'s read opens the file afresh: a file that is gone is noticed
/// although the pooled connections still hold it open.
#[test]
fn health_reads_the_file_afresh() -> Result<(), StoreError> {
    let (_dir, db) = temp_db("health_reads_the_file_afresh");
    let store = CallStore::open(&db, StoreOptions::default())?;
    store.get("warm-the-pool")?;
    assert_eq!(store.health().database, Ok(()));
    assert_eq!(store.health().writer, Ok(()));
    let moved = db.with_extension("moved");
    std::fs::rename(&db, &moved).unwrap();
    std::fs::create_dir(&db).unwrap();
    assert!(store.health().database.is_err());
    std::fs::remove_dir(&db).unwrap();
    std::fs::rename(&moved, &db).unwrap();
    assert_eq!(store.health().database, Ok(()));
    Ok(())
}
