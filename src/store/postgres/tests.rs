//! What only the PostgreSQL backend has to prove: several stores (nodes) on
//! one database, migrations raced by three nodes, a database from a newer
//! release refused, the pool's cap, and faults — a restart of PostgreSQL, a
//! lock held elsewhere — answered `Unavailable` and healed without reopening.

use super::super::tests::backends::TestDb;
use super::super::{CallStore, Created, Database, NewCall, Scope, StoreError, StoreOptions};
use super::{PgStore, PG_SCHEMA_VERSION};
use crate::temp::postgres::{connect, PgServer};
use std::collections::HashSet;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

fn call(key: &str) -> NewCall {
    NewCall {
        tenant: crate::auth::ANONYMOUS.into(),
        idem_key: key.into(),
        fingerprint: "fp".into(),
        tool: "charge".into(),
        args_json: r#"{"amount":1}"#.into(),
        client_id: None,
        seq: None,
        gate: None,
    }
}

fn url(db: &TestDb) -> String {
    match db {
        TestDb::Postgres(url) => url.clone(),
        TestDb::Sqlite(_) => unreachable!("a PostgreSQL test"),
    }
}

/// Three nodes opening one new database at once apply each migration step
/// exactly once (the advisory lock), and all three come up.
#[test]
fn three_nodes_migrating_at_once_apply_each_step_once() {
    let db = TestDb::postgres("migrate_race");
    let barrier = Arc::new(Barrier::new(3));
    let stores: Vec<Arc<CallStore>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let barrier = Arc::clone(&barrier);
                let db = &db;
                s.spawn(move || {
                    barrier.wait();
                    db.open().expect("open")
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(stores.len(), 3);
    assert_eq!(
        db.count("SELECT count(*) FROM idem_schema"),
        i64::from(PG_SCHEMA_VERSION)
    );
    assert_eq!(db.count("SELECT count(*) FROM instances"), 3);
}

/// A database whose schema is newer than this binary knows is refused.
#[test]
fn a_database_from_a_newer_release_is_refused() {
    let db = TestDb::postgres("newer");
    db.open().expect("first open").stop();
    db.execute(&format!(
        "INSERT INTO idem_schema (version, name) VALUES ({}, 'from the future')",
        PG_SCHEMA_VERSION + 1
    ));
    let refused = db.open().err().expect("refused").to_string();
    assert!(refused.contains("newer than this release"), "{refused}");
}

/// The same key sent through two nodes by many threads at once is one call.
#[test]
fn the_same_key_through_two_nodes_is_one_call() -> Result<(), StoreError> {
    let db = TestDb::postgres("two_nodes_key");
    let nodes = [db.open()?, db.open()?];
    let barrier = Barrier::new(16);
    let ids: HashSet<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..16)
            .map(|n| {
                let (node, barrier) = (&nodes[n % 2], &barrier);
                s.spawn(move || {
                    barrier.wait();
                    match node.create_or_get(call("same")).unwrap() {
                        Created::New(c) | Created::Existing(c) => c.call_id,
                        other => panic!("{other:?}"),
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert_eq!(nodes[0].stats(Scope::All)?.calls, 1);
    Ok(())
}

/// Two nodes claiming at once (`FOR UPDATE SKIP LOCKED`) take disjoint
/// calls, and together every call exactly once.
#[test]
fn nodes_claiming_at_once_take_each_call_once() -> Result<(), StoreError> {
    let db = TestDb::postgres("skip_locked");
    let nodes = [db.open()?, db.open()?, db.open()?];
    for n in 0..300 {
        nodes[0].create_or_get(call(&format!("k{n}")))?;
    }
    let barrier = Barrier::new(6);
    let taken: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..6)
            .map(|t| {
                let (node, barrier) = (&nodes[t % 3], &barrier);
                s.spawn(move || {
                    barrier.wait();
                    let mut mine = Vec::new();
                    loop {
                        let leases = node
                            .claim_due(7, &format!("1:w{t}"), Duration::from_secs(30))
                            .unwrap();
                        if leases.is_empty() {
                            return mine;
                        }
                        mine.extend(leases.into_iter().map(|l| l.call_id));
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let distinct: HashSet<&String> = taken.iter().collect();
    assert_eq!((taken.len(), distinct.len()), (300, 300));
    assert_eq!(
        db.count("SELECT count(*) FROM audit WHERE event = 'claimed'"),
        300
    );
    Ok(())
}

/// A node's pool never opens more than `--db-pool` connections, however
/// many threads use the store at once.
#[test]
fn the_pool_opens_at_most_its_size() -> Result<(), StoreError> {
    let db = TestDb::postgres("pool_cap");
    let store = db.open_with(StoreOptions {
        pool_size: 3,
        ..StoreOptions::default()
    })?;
    std::thread::scope(|s| {
        for t in 0..12 {
            let store = &store;
            s.spawn(move || {
                for n in 0..20 {
                    store.create_or_get(call(&format!("t{t}-{n}"))).unwrap();
                }
            });
        }
    });
    let backend: &dyn std::any::Any = store.backend();
    let pg: &PgStore = backend.downcast_ref().expect("a PostgreSQL store");
    assert!(pg.connections() <= 3, "{}", pg.connections());
    assert_eq!(store.stats(Scope::All)?.calls, 240);
    Ok(())
}

/// A row lock held elsewhere past the lock timeout answers `Unavailable`
/// (a 503), never `Internal`, and the connection is usable afterwards.
#[test]
fn a_lock_held_elsewhere_is_unavailable_not_internal() -> Result<(), StoreError> {
    let db = TestDb::postgres("lock_timeout");
    let store = db.open_with(StoreOptions {
        busy_timeout: Duration::from_millis(200),
        ..StoreOptions::default()
    })?;
    let id = match store.create_or_get(call("locked"))? {
        Created::New(c) => c.call_id,
        other => panic!("{other:?}"),
    };
    let mut other = connect(&url(&db));
    let mut tx = other.transaction().unwrap();
    tx.execute("SELECT 1 FROM calls WHERE call_id = $1 FOR UPDATE", &[&id])
        .unwrap();
    // A claim passes over a locked row (SKIP LOCKED); a same-key create
    // must wait for it, and gives up at the lock timeout.
    assert_eq!(store.claim(&id, "1:w", Duration::from_secs(30))?, None);
    let replay = store.create_or_get(call("locked"));
    assert!(
        matches!(replay, Err(StoreError::Unavailable(_))),
        "{replay:?}"
    );
    tx.rollback().unwrap();
    assert!(matches!(
        store.create_or_get(call("locked"))?,
        Created::Existing(_)
    ));
    assert!(store.claim(&id, "1:w", Duration::from_secs(30))?.is_some());
    Ok(())
}

/// PostgreSQL restarted under a running node: operations while it is down
/// are `Unavailable` (never `Internal`), nothing committed is lost, and the
/// pool makes new connections without the node reopening the store.
#[test]
fn a_postgres_restart_is_unavailable_then_heals() -> Result<(), StoreError> {
    let server = PgServer::start().unwrap_or_else(|e| panic!("{e}"));
    let url = server.fresh_database("restart");
    let store = CallStore::open(&Database::parse(&url).unwrap(), StoreOptions::default())?;
    let before = store.create_or_get(call("before"))?;
    server.stop_immediate().unwrap();
    match store.create_or_get(call("while-down")) {
        Err(StoreError::Unavailable(_)) => {}
        other => panic!("while PostgreSQL is down: {other:?}"),
    }
    assert!(store.health().database.is_err());
    server.start_again().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let after = loop {
        match store.create_or_get(call("after")) {
            Ok(created) => break created,
            Err(StoreError::Unavailable(_)) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("after the restart: {e}"),
        }
    };
    assert!(matches!(after, Created::New(_)));
    let again = store.create_or_get(call("before"))?;
    let (Created::New(first), Created::Existing(second)) = (before, again) else {
        unreachable!()
    };
    assert_eq!(
        first.call_id, second.call_id,
        "the call from before the restart"
    );
    server.restart_immediate().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match store.stats(Scope::All) {
            Ok(stats) => {
                assert_eq!(stats.calls, 2);
                break;
            }
            Err(StoreError::Unavailable(_)) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("after the second restart: {e}"),
        }
    }
    assert_eq!(store.health().database, Ok(()));
    store.stop();
    Ok(())
}

/// `verify --db postgres://...` passes on a database the service wrote, and
/// names each violation a broken one has.
#[test]
fn verify_passes_on_served_calls_and_names_violations() -> Result<(), StoreError> {
    use super::super::verify::verify_database;
    let db = TestDb::postgres("verify");
    let store = db.open()?;
    let done = match store.create_or_get(call("done"))? {
        Created::New(c) => c,
        other => panic!("{other:?}"),
    };
    let lease = store
        .claim(&done.call_id, "1:w", Duration::from_secs(30))?
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let effect = super::super::NewEffect {
        amount: Some(1),
        detail: None,
    };
    store.succeed_then(
        &lease,
        &serde_json::json!({"charged": 1}),
        Some(effect),
        Box::new(move |r| tx.send(r).unwrap()),
    );
    rx.recv().unwrap()?;
    store.create_or_get(call("waiting"))?;
    let tools = &crate::tools::EFFECT_TOOLS;
    let report = verify_database(&db.database(), tools).expect("verified");
    assert!(report.is_clean(), "{report}");
    assert_eq!((report.calls, report.effects), (2, 1));
    assert!(!report.to_string().contains(PgServer::shared().password()));

    db.execute(
        "INSERT INTO effects (effect_id, call_id, tool, created_at)
         SELECT 'eff_x', call_id, 'charge', 0 FROM calls WHERE idem_key = 'waiting';
         DELETE FROM effects WHERE call_id = (SELECT call_id FROM calls WHERE idem_key = 'done');",
    );
    let report = verify_database(&db.database(), tools).expect("verified");
    let violated: Vec<&str> = report.violated().map(|c| c.name).collect();
    assert!(
        violated.contains(&"effect_without_succeeded_call"),
        "{report}"
    );
    assert!(violated.contains(&"succeeded_without_effect"), "{report}");
    Ok(())
}

/// A node that stops cleanly has its running calls taken back at once by
/// another node's recovery, long before their leases would expire.
#[test]
fn a_stopped_nodes_calls_are_reclaimed_by_another_at_once() -> Result<(), StoreError> {
    let db = TestDb::postgres("stopped_node");
    let (a, b) = (db.open()?, db.open()?);
    a.create_or_get(call("k"))?;
    let owner = crate::store::owner_name(a.instance(), "worker-0");
    let lease = a.claim_due(1, &owner, Duration::from_secs(600))?;
    assert_eq!(lease.len(), 1);
    assert!(b.recover(&[])?.is_empty(), "a live node keeps its lease");
    a.stop();
    assert_eq!(b.recover(&[])?, vec![lease[0].call_id.clone()]);
    let again = b.claim_due(1, "1:w@other", Duration::from_secs(30))?;
    assert_eq!(again[0].attempt, 2);
    Ok(())
}
