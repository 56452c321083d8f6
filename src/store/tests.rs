//! The store's own tests: transitions, fencing, recovery, group commit and
//! what it does when SQLite ends a transaction early, migrations.

use super::sql::create_or_get_op;
use super::*;
use crate::temp::TempDb;
use rusqlite::Connection;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::mpsc;

pub(super) mod backends;
mod retry;
mod tenants;

use backends::{on_both_backends, TestDb};

on_both_backends!(
    same_key_gives_one_call_and_other_fingerprint_conflicts,
    claim_many_decides_each_call_on_its_own,
    only_one_claim_wins_and_a_stale_completion_is_discarded,
    recover_resets_only_expired_running_calls,
    retryable_failure_is_reset_by_same_key_and_permanent_one_is_not,
    many_threads_same_key_share_one_call,
    recovery_names_the_owner_whose_lease_expired,
    a_silent_heartbeat_reclaims_only_where_the_kernel_cannot_vouch,
);

/// `succeed_then`, waiting for the commit.
fn succeed(
    store: &CallStore,
    lease: &Lease,
    result: &Value,
    effect: Option<NewEffect>,
) -> Result<Completion, StoreError> {
    let (tx, rx) = mpsc::channel();
    store.succeed_then(
        lease,
        result,
        effect,
        Box::new(move |r| tx.send(r).unwrap()),
    );
    rx.recv().unwrap()
}

/// `fail_then`, waiting for the commit.
fn fail(store: &CallStore, lease: &Lease, error: &Value) -> Result<Completion, StoreError> {
    let (tx, rx) = mpsc::channel();
    store.fail_then(lease, error, Box::new(move |r| tx.send(r).unwrap()));
    rx.recv().unwrap()
}

fn charged(amount: i64) -> Option<NewEffect> {
    Some(NewEffect {
        amount: Some(amount),
        detail: None,
    })
}

/// A `charge` of 1 under `tenant`'s `key`.
pub(super) fn new_call_in(tenant: &str, key: &str, fp: &str) -> NewCall {
    NewCall {
        tenant: tenant.into(),
        idem_key: key.into(),
        fingerprint: fp.into(),
        tool: "charge".into(),
        args_json: r#"{"amount":1}"#.into(),
        client_id: None,
        seq: None,
    }
}

fn new_call(key: &str, fp: &str) -> NewCall {
    new_call_in(crate::auth::ANONYMOUS, key, fp)
}

pub(super) fn created_call(c: Created) -> Call {
    match c {
        Created::New(c) | Created::Existing(c) | Created::RetryReset(c) | Created::Conflict(c) => c,
    }
}

fn effects(store: &CallStore) -> i64 {
    store.stats(Scope::All).unwrap().effects
}

/// A call's audit events, oldest first, through the store (either backend).
fn audit_events(store: &CallStore, call_id: &str) -> Vec<String> {
    let events = store.audit_for(crate::auth::ANONYMOUS, call_id).unwrap();
    events
        .unwrap_or_default()
        .into_iter()
        .map(|e| e.event)
        .collect()
}

/// A new database's status index covers `attempt`, so `stats` counts from
/// it; so does one made by the seed's DDL (whose index lacked it) once
/// migration 5 has rebuilt `calls` with its indexes.
#[test]
fn stats_counts_from_the_status_index_also_after_an_upgrade() -> Result<(), StoreError> {
    let new = TempDb::new("status-index-new");
    assert!(
        CallStore::open(new.path(), StoreOptions::default())?
            .sqlite()
            .status_index_has_attempt
    );
    let seed = TempDb::new("status-index-seed");
    Connection::open(seed.path())?.execute_batch(
        "CREATE TABLE calls (call_id TEXT PRIMARY KEY, idem_key TEXT NOT NULL UNIQUE,
           fingerprint TEXT NOT NULL, client_id TEXT, seq INTEGER, tool TEXT NOT NULL,
           args_json TEXT NOT NULL, status TEXT NOT NULL, result_json TEXT, error_json TEXT,
           attempt INTEGER NOT NULL DEFAULT 0, lease_until REAL, owner TEXT, effect_id TEXT,
           created_at REAL NOT NULL, updated_at REAL NOT NULL);
         CREATE INDEX idx_calls_status ON calls(status, lease_until);",
    )?;
    assert!(
        CallStore::open(seed.path(), StoreOptions::default())?
            .sqlite()
            .status_index_has_attempt
    );
    Ok(())
}

fn same_key_gives_one_call_and_other_fingerprint_conflicts(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let first = store.create_or_get(new_call("k", "fp1"))?;
    assert!(matches!(first, Created::New(_)));
    let again = store.create_or_get(new_call("k", "fp1"))?;
    assert!(matches!(again, Created::Existing(_)));
    assert_eq!(
        created_call(first.clone()).call_id,
        created_call(again).call_id
    );
    assert!(matches!(
        store.create_or_get(new_call("k", "fp2"))?,
        Created::Conflict(_)
    ));
    let call = created_call(first);
    assert!(call.call_id.starts_with("c_") && call.call_id.len() == 18);
    assert_eq!(call.effect_id, effect_id_for(&call.call_id));
    Ok(())
}

/// The writer's counters survive the trip through `/stats` JSON, and the
/// difference of two snapshots is the work done between them.
#[test]
fn writer_stats_round_trip_and_difference() {
    let earlier = WriterStats {
        batches: 2,
        ops: 5,
        run_us: 100,
        commit_us: 900,
    };
    let later = WriterStats {
        batches: 6,
        ops: 25,
        run_us: 700,
        commit_us: 4_900,
    };
    assert_eq!(WriterStats::from_json(&later.to_json()), later);
    let run = later.since(earlier);
    assert_eq!((run.batches, run.ops), (4, 20));
    assert_eq!(run.ops_per_batch(), 5.0);
    assert_eq!(run.run_us_per_op(), 30.0);
    assert_eq!(run.commit_ms_per_batch(), 1.0);
}

/// Several claims in one operation are decided one by one: a call under a
/// live lease is refused while the others are taken, answers in order.
fn claim_many_decides_each_call_on_its_own(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let ids: Vec<String> = ["a", "b", "c"]
        .iter()
        .map(|k| Ok(created_call(store.create_or_get(new_call(k, "fp"))?).call_id))
        .collect::<Result<_, StoreError>>()?;
    let held = store.claim(&ids[1], "1:other", Duration::from_secs(30))?;
    assert!(held.is_some());
    let leases = store.claim_many(&ids, "1:w", Duration::from_secs(30))?;
    let won: Vec<Option<&str>> = leases
        .iter()
        .map(|l| l.as_ref().map(|l| l.call_id.as_str()))
        .collect();
    assert_eq!(won, [Some(ids[0].as_str()), None, Some(ids[2].as_str())]);
    assert!(leases.iter().flatten().all(|l| l.attempt == 1));
    assert_eq!(audit_events(&store, &ids[0]), ["created", "claimed"]);
    assert_eq!(audit_events(&store, &ids[1]), ["created", "claimed"]);
    Ok(())
}

fn only_one_claim_wins_and_a_stale_completion_is_discarded(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let call = created_call(store.create_or_get(new_call("k", "fp"))?);
    // A zero-length lease expires at once, as after a long pause.
    let a = store
        .claim(&call.call_id, "1:a", Duration::ZERO)?
        .expect("first claim");
    assert_eq!(a.attempt, 1);
    let b = store
        .claim(&call.call_id, "1:b", Duration::from_secs(30))?
        .expect("an expired lease can be taken over");
    assert_eq!(b.attempt, 2);
    assert_eq!(
        store.claim(&call.call_id, "1:c", Duration::from_secs(30))?,
        None
    );

    assert_eq!(
        succeed(&store, &b, &json!({"by": "b"}), charged(1))?,
        Completion::Applied
    );
    assert_eq!(
        succeed(&store, &a, &json!({"by": "a"}), charged(1))?,
        Completion::Stale
    );
    assert_eq!(
        fail(&store, &a, &json!({"retryable": true}))?,
        Completion::Stale
    );
    let after = store.get(&call.call_id)?.unwrap();
    assert_eq!(after.status, Status::Succeeded);
    assert_eq!(after.result, Some(json!({"by": "b"})));
    assert_eq!(effects(&store), 1);
    assert_eq!(
        audit_events(&store, &call.call_id),
        [
            "created",
            "claimed",
            "claimed",
            "succeeded",
            "stale_completion",
            "stale_completion"
        ]
    );
    Ok(())
}

fn recover_resets_only_expired_running_calls(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let expired = created_call(store.create_or_get(new_call("a", "fp"))?);
    let live = created_call(store.create_or_get(new_call("b", "fp"))?);
    let done = created_call(store.create_or_get(new_call("c", "fp"))?);
    store
        .claim(&expired.call_id, "1:x", Duration::ZERO)?
        .unwrap();
    store
        .claim(&live.call_id, "1:y", Duration::from_secs(30))?
        .unwrap();
    let lease = store.claim(&done.call_id, "1:z", Duration::ZERO)?.unwrap();
    succeed(&store, &lease, &json!({}), None)?;

    assert_eq!(store.recover()?, vec![expired.call_id.clone()]);
    assert_eq!(
        store.get(&expired.call_id)?.unwrap().status,
        Status::Pending
    );
    assert_eq!(store.get(&live.call_id)?.unwrap().status, Status::Running);
    assert_eq!(store.get(&done.call_id)?.unwrap().status, Status::Succeeded);
    let due: Vec<String> = store
        .due_calls(10)?
        .into_iter()
        .map(|d| d.call_id)
        .collect();
    assert_eq!(due, vec![expired.call_id]);
    assert!(store.recover()?.is_empty());
    Ok(())
}

fn retryable_failure_is_reset_by_same_key_and_permanent_one_is_not(
    db: &TestDb,
) -> Result<(), StoreError> {
    let store = db.open()?;
    for (key, retryable) in [("r", true), ("p", false)] {
        let call = created_call(store.create_or_get(new_call(key, "fp"))?);
        let lease = store
            .claim(&call.call_id, "1:w", Duration::from_secs(30))?
            .unwrap();
        fail(
            &store,
            &lease,
            &json!({"code": "tool_failed", "retryable": retryable}),
        )?;
        let again = store.create_or_get(new_call(key, "fp"))?;
        if retryable {
            assert!(matches!(&again, Created::RetryReset(c) if c.status == Status::Pending));
        } else {
            assert!(matches!(&again, Created::Existing(c) if c.status == Status::Failed));
        }
    }
    Ok(())
}

fn many_threads_same_key_share_one_call(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let ids: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..16)
            .map(|_| {
                s.spawn(|| created_call(store.create_or_get(new_call("k", "fp")).unwrap()).call_id)
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(ids.iter().all(|id| id == &ids[0]));
    assert_eq!(store.stats(Scope::All)?.calls, 1);
    Ok(())
}

/// Holds the writer inside a batch until released, so that everything
/// queued meanwhile is committed together in the next batch.
fn hold_writer(store: &CallStore) -> mpsc::Sender<()> {
    let (entered, is_inside) = mpsc::channel();
    let (release, released) = mpsc::channel::<()>();
    store.sqlite().writer.submit(
        move |_conn: &Connection| {
            entered.send(()).unwrap();
            let _ = released.recv();
            Ok(())
        },
        Box::new(|_| {}),
    );
    is_inside.recv().unwrap();
    release
}

type Answers = mpsc::Receiver<(String, Result<Created, StoreError>)>;

/// Queue a create for each key without waiting; answers arrive named.
fn queue_creates(store: &CallStore, keys: &[&str]) -> Answers {
    let (tx, rx) = mpsc::channel();
    for key in keys {
        let (tx, key) = (tx.clone(), key.to_string());
        store.sqlite().writer.submit(
            create_or_get_op(new_call(&key, "fp")),
            Box::new(move |outcome| tx.send((key, outcome)).unwrap()),
        );
    }
    rx
}

fn rows(db: &Path, sql: &str) -> i64 {
    Connection::open(db)
        .unwrap()
        .query_row(sql, [], |r| r.get(0))
        .unwrap()
}

/// SQLite may roll back the whole transaction on `SQLITE_FULL` or an I/O
/// error (a cache spill to a full disk). Every operation of that batch, the
/// ones before the failure included, is answered `Unavailable`, none after
/// it runs outside a transaction, and none of their rows exist.
#[test]
fn a_batch_whose_transaction_sqlite_rolled_back_answers_every_operation_with_an_error(
) -> Result<(), StoreError> {
    let db = TempDb::new("rolled-back");
    let store = CallStore::open(db.path(), StoreOptions::default())?;
    let release = hold_writer(&store);
    let before = queue_creates(&store, &["before-1", "before-2"]);
    let (full_tx, full_rx) = mpsc::channel();
    store.sqlite().writer.submit(
        |conn: &Connection| -> rusqlite::Result<()> {
            // What SQLite does on SQLITE_FULL during a spill: the whole
            // transaction is rolled back and the statement fails.
            conn.execute_batch("ROLLBACK")?;
            Err(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
                Some("database or disk is full".into()),
            ))
        },
        Box::new(move |outcome| full_tx.send(outcome).unwrap()),
    );
    let after = queue_creates(&store, &["after-1", "after-2"]);
    release.send(()).unwrap();
    let answers: Vec<_> = before.iter().take(2).chain(after.iter().take(2)).collect();
    for (key, answer) in &answers {
        assert!(
            matches!(answer, Err(StoreError::Unavailable(_))),
            "{key}: {answer:?}"
        );
    }
    assert!(matches!(
        full_rx.recv().unwrap(),
        Err(StoreError::Unavailable(_))
    ));
    assert_eq!(rows(db.path(), "SELECT count(*) FROM calls"), 0);
    assert_eq!(rows(db.path(), "SELECT count(*) FROM audit"), 0);
    // The writer carries on with a fresh transaction.
    assert!(matches!(
        store.create_or_get(new_call("before-1", "fp"))?,
        Created::New(_)
    ));
    assert_eq!(rows(db.path(), "SELECT count(*) FROM calls"), 1);
    Ok(())
}

/// A `COMMIT` that fails (here a deferred foreign key that one operation
/// broke) fails the whole batch: no caller is told its write committed, and
/// no row of the batch remains.
#[test]
fn a_failed_commit_answers_every_operation_of_the_batch_with_an_error() -> Result<(), StoreError> {
    let db = TempDb::new("commit-fails");
    Connection::open(db.path())?.execute_batch(
        "CREATE TABLE parent (id INTEGER PRIMARY KEY);
         CREATE TABLE child (parent INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED);",
    )?;
    let store = CallStore::open(db.path(), StoreOptions::default())?;
    let release = hold_writer(&store);
    let answers = queue_creates(&store, &["k-1"]);
    store.sqlite().writer.submit(
        |conn: &Connection| {
            conn.execute("INSERT INTO child VALUES (42)", [])
                .map(|_| ())
        },
        Box::new(|_| {}),
    );
    let later = queue_creates(&store, &["k-2"]);
    release.send(()).unwrap();
    for (key, answer) in answers.iter().take(1).chain(later.iter().take(1)) {
        assert!(
            matches!(answer, Err(StoreError::Unavailable(_))),
            "{key}: {answer:?}"
        );
    }
    assert_eq!(rows(db.path(), "SELECT count(*) FROM calls"), 0);
    assert_eq!(rows(db.path(), "SELECT count(*) FROM child"), 0);
    assert!(matches!(
        store.create_or_get(new_call("k-1", "fp"))?,
        Created::New(_)
    ));
    Ok(())
}

#[test]
fn failing_operation_rolls_back_alone() -> Result<(), StoreError> {
    let db = TempDb::new("failing_operation_rolls_back_alone");
    let store = CallStore::open(db.path(), StoreOptions::default())?;
    let failing = store.sqlite().write(|conn| {
        conn.execute(
            "INSERT INTO audit (ts, call_id, event, detail) VALUES (0, 'x', 'probe', '')",
            [],
        )?;
        conn.execute("INSERT INTO no_such_table VALUES (1)", [])
    });
    assert!(matches!(failing, Err(StoreError::Internal(_))));
    store.create_or_get(new_call("k", "fp"))?;
    let probes: i64 = Connection::open(db.path())
        .unwrap()
        .query_row(
            "SELECT count(*) FROM audit WHERE event = 'probe'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(probes, 0);
    assert_eq!(store.stats(Scope::All)?.calls, 1);
    Ok(())
}

/// Section 12.3's DDL, exactly as the chapter prints it.
const CHAPTER_DDL: &str = "
CREATE TABLE calls (
  call_id      TEXT PRIMARY KEY,
  idem_key     TEXT NOT NULL UNIQUE,
  fingerprint  TEXT NOT NULL,
  client_id    TEXT,
  seq          INTEGER,
  tool         TEXT NOT NULL,
  args_json    TEXT NOT NULL,
  status       TEXT NOT NULL,
  result_json  TEXT,
  error_json   TEXT,
  attempt      INTEGER NOT NULL DEFAULT 0,
  lease_until  REAL,
  owner        TEXT,
  effect_id    TEXT,
  created_at   REAL NOT NULL,
  updated_at   REAL NOT NULL
);
CREATE INDEX idx_calls_status ON calls(status, lease_until);
CREATE INDEX idx_calls_client_seq ON calls(client_id, seq);

CREATE TABLE effects (
  effect_id   TEXT PRIMARY KEY,
  call_id     TEXT NOT NULL UNIQUE,
  tool        TEXT NOT NULL,
  amount      INTEGER,
  created_at  REAL NOT NULL
);

CREATE TABLE audit (
  id       INTEGER PRIMARY KEY AUTOINCREMENT,
  ts       REAL NOT NULL,
  call_id  TEXT,
  event    TEXT NOT NULL,
  detail   TEXT
);
";

/// The DDL of the last release before migrations (user_version 0).
const RELEASE_0_DDL: &str = "
CREATE TABLE IF NOT EXISTS calls (
  call_id TEXT PRIMARY KEY, idem_key TEXT NOT NULL UNIQUE, fingerprint TEXT NOT NULL,
  client_id TEXT, seq INTEGER, tool TEXT NOT NULL, args_json TEXT NOT NULL,
  status TEXT NOT NULL, result_json TEXT, error_json TEXT,
  attempt INTEGER NOT NULL DEFAULT 0, lease_until REAL, owner TEXT, effect_id TEXT,
  created_at REAL NOT NULL, updated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_calls_status ON calls(status, lease_until, attempt);
CREATE INDEX IF NOT EXISTS idx_calls_client_seq ON calls(client_id, seq) WHERE client_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS effects (
  effect_id TEXT PRIMARY KEY, call_id TEXT NOT NULL UNIQUE, tool TEXT NOT NULL,
  amount INTEGER, created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS audit (
  id INTEGER PRIMARY KEY, ts REAL NOT NULL, call_id TEXT, event TEXT NOT NULL, detail TEXT
);
";

/// One succeeded charge with its effect and audit row, as an old release wrote them.
const OLD_ROWS: &str = "
INSERT INTO calls (call_id, idem_key, fingerprint, tool, args_json, status, result_json,
                   attempt, effect_id, created_at, updated_at)
     VALUES ('c_0000000000000001', 'old-key', 'fp', 'charge', '{\"amount\":5}', 'succeeded',
             '{\"charged\":5}', 1, 'eff_0000000000000001', 1.0, 2.0);
INSERT INTO effects (effect_id, call_id, tool, amount, created_at)
     VALUES ('eff_0000000000000001', 'c_0000000000000001', 'charge', 5, 2.0);
INSERT INTO audit (ts, call_id, event, detail) VALUES (2.0, 'c_0000000000000001', 'succeeded', 'x');
";

fn user_version(db: &Path) -> i64 {
    rows(db, "SELECT user_version FROM pragma_user_version")
}

/// Open a database made by `ddl` holding `OLD_ROWS`, and check that its rows
/// are intact and its schema is this release's.
fn upgrades_in_place(name: &str, ddl: &str) -> Result<(), StoreError> {
    let db = TempDb::new(name);
    Connection::open(db.path())?.execute_batch(&format!("{ddl}{OLD_ROWS}"))?;
    assert_eq!(user_version(db.path()), 0);
    let rowid_before = rows(db.path(), "SELECT rowid FROM calls");
    let store = CallStore::open(db.path(), StoreOptions::default())?;
    // Migration 5 rebuilt `calls`: every row kept, with its rowid, in the
    // anonymous tenant; keys are now unique per tenant, not globally.
    assert_eq!(rows(db.path(), "SELECT count(*) FROM calls"), 1);
    assert_eq!(rows(db.path(), "SELECT rowid FROM calls"), rowid_before);
    assert_eq!(
        rows(
            db.path(),
            "SELECT count(*) FROM calls WHERE tenant = 'anonymous'"
        ),
        1
    );
    let mut other_tenant = new_call("old-key", "fp");
    other_tenant.tenant = "acme".into();
    assert!(matches!(
        store.create_or_get(other_tenant)?,
        Created::New(_)
    ));
    assert!(matches!(
        store.create_or_get(new_call("old-key", "other-fp"))?,
        Created::Conflict(_)
    ));
    for (table, column) in [("audit", "attempt"), ("effects", "call_purged_at")] {
        let sql =
            format!("SELECT count(*) FROM pragma_table_info('{table}') WHERE name = '{column}'");
        assert_eq!(rows(db.path(), &sql), 1, "{table}.{column}");
    }
    let call = store
        .find_by_key(crate::auth::ANONYMOUS, "old-key")?
        .expect("the old call survives");
    assert_eq!(call.status, Status::Succeeded);
    assert_eq!(call.result, Some(json!({"charged": 5})));
    assert_eq!(store.stats(Scope::All)?.effects, 1);
    assert_eq!(store.stats(Scope::Tenant("acme"))?.calls, 1);
    assert_eq!(user_version(db.path()), SCHEMA_VERSION);
    assert_eq!(
        rows(
            db.path(),
            "SELECT count(*) FROM sqlite_master WHERE name = 'idx_audit_call'"
        ),
        1
    );
    assert_eq!(
        rows(
            db.path(),
            "SELECT count(*) FROM pragma_table_info('effects') WHERE name = 'detail'"
        ),
        1
    );
    assert_eq!(
        rows(
            db.path(),
            "SELECT count(*) FROM pragma_table_info('calls') WHERE name = 'next_attempt_at'"
        ),
        1
    );
    assert_eq!(
        call.next_attempt_at, None,
        "an old row has no retry scheduled"
    );
    assert_eq!(audit_events(&store, &call.call_id), ["succeeded"]);
    // The new code writes into the upgraded file as into a new one.
    let lease_holder = store.create_or_get(new_call("new-key", "fp"))?;
    assert!(matches!(lease_holder, Created::New(_)));
    store.stop();
    // A second start finds nothing to apply.
    let conn = Connection::open(db.path())?;
    assert!(schema::migrate(&conn)?.is_empty());
    Ok(())
}

#[test]
fn a_database_made_by_the_chapters_ddl_upgrades_in_place() -> Result<(), StoreError> {
    upgrades_in_place("chapter-ddl", CHAPTER_DDL)
}

#[test]
fn a_database_made_before_migrations_upgrades_in_place() -> Result<(), StoreError> {
    upgrades_in_place("release-0", RELEASE_0_DDL)
}

#[test]
fn a_database_from_a_newer_release_is_refused() -> Result<(), StoreError> {
    let db = TempDb::new("too-new");
    Connection::open(db.path())?.pragma_update(None, "user_version", SCHEMA_VERSION + 1)?;
    let refused = CallStore::open(db.path(), StoreOptions::default()).err();
    let message = refused.expect("refused").to_string();
    assert!(message.contains("newer than this release"), "{message}");
    Ok(())
}

/// The `recover` audit row names the owner whose lease expired (it used to
/// read the owner after setting it to NULL).
fn recovery_names_the_owner_whose_lease_expired(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let call = created_call(store.create_or_get(new_call("k", "fp"))?);
    store
        .claim(&call.call_id, "4242:worker-7", Duration::ZERO)?
        .expect("claimed");
    assert_eq!(store.recover()?, vec![call.call_id.clone()]);
    let events = store
        .audit_for(crate::auth::ANONYMOUS, &call.call_id)?
        .unwrap();
    let recover = events
        .iter()
        .find(|e| e.event == "recover")
        .expect("recover");
    let detail = recover.detail.clone().unwrap_or_default();
    assert_eq!(detail, "lease expired (owner 4242:worker-7)");
    Ok(())
}

/// `stop` commits what was queued before it, answers later writes with an
/// error instead of leaving them waiting, and ends the writer thread.
#[test]
fn stop_commits_what_was_queued_and_refuses_the_rest() -> Result<(), StoreError> {
    let db = TempDb::new("stop_commits_what_was_queued_and_refuses_the_rest");
    let store = CallStore::open(db.path(), StoreOptions::default())?;
    let release = hold_writer(&store);
    let queued = queue_creates(&store, &["queued"]);
    let stopper = {
        let store = Arc::clone(&store);
        std::thread::spawn(move || store.stop())
    };
    release.send(()).unwrap();
    stopper.join().unwrap();
    let (key, answer) = queued.recv().unwrap();
    assert!(matches!(answer, Ok(Created::New(_))), "{key}: {answer:?}");
    assert!(matches!(
        store.create_or_get(new_call("late", "fp")),
        Err(StoreError::Unavailable(_))
    ));
    assert_eq!(rows(db.path(), "SELECT count(*) FROM calls"), 1);
    Ok(())
}

/// The bulk loader writes settled calls the store reads like any other.
#[test]
fn bulk_loaded_charges_read_like_served_ones() -> Result<(), StoreError> {
    let db = TempDb::new("bulk_loaded_charges_read_like_served_ones");
    let store = CallStore::open(db.path(), StoreOptions::default())?;
    let charge = bulk::BulkCharge {
        fingerprint: "fp",
        args_json: r#"{"amount":1}"#,
        amount: 1,
        key_prefix: "bulk",
    };
    bulk::insert_succeeded_charges(db.path(), &charge, 1_000)?;
    let stats = store.stats(Scope::All)?;
    assert_eq!((stats.calls, stats.effects), (1_000, 1_000));
    let call = store
        .find_by_key(crate::auth::ANONYMOUS, "bulk-999")?
        .expect("loaded");
    assert_eq!(call.status, Status::Succeeded);
    assert!(matches!(
        store.create_or_get(new_call("bulk-999", "fp"))?,
        Created::Existing(_)
    ));
    Ok(())
}

/// A silent heartbeat takes back the calls of a process on another host, but
/// never those of a process whose pid is alive on this one (it may just be
/// starved of CPU); a long lease is no obstacle to the first.
fn a_silent_heartbeat_reclaims_only_where_the_kernel_cannot_vouch(
    db: &TestDb,
) -> Result<(), StoreError> {
    let store = db.open()?;
    let long_ago = now() - 60.0;
    let me = store.instance().clone();
    db.execute(&format!(
        "INSERT INTO instances (instance_id, pid, host, started_at, heartbeat_at)
         VALUES ('i_elsewhere', 1, 'another-host', {long_ago}, {long_ago}),
                ('i_here', {}, '{}', {long_ago}, {long_ago})",
        std::process::id(),
        me.host
    ));
    let mut owners = Vec::new();
    for (key, instance) in [("far", "i_elsewhere"), ("near", "i_here")] {
        let call = created_call(store.create_or_get(new_call(key, "fp"))?);
        let owner = format!("1:worker-0@{instance}");
        store
            .claim(&call.call_id, &owner, Duration::from_secs(600))?
            .expect("claimed");
        owners.push(call.call_id);
    }
    assert_eq!(store.recover()?, vec![owners[0].clone()]);
    let near = store.get(&owners[1])?.unwrap();
    assert_eq!(near.status, Status::Running);
    Ok(())
}

on_both_backends!(claim_due_takes_the_oldest_due_calls_once);

/// `claim_due` takes up to `limit` due calls, oldest first, each once; a
/// call waiting for its retry time, or already running, is not taken.
fn claim_due_takes_the_oldest_due_calls_once(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let ids: Vec<String> = (0..5)
        .map(|n| Ok(created_call(store.create_or_get(new_call(&format!("k{n}"), "fp"))?).call_id))
        .collect::<Result<_, StoreError>>()?;
    let first = store.claim_due(2, "1:a", Duration::from_secs(30))?;
    let taken: Vec<&str> = first.iter().map(|l| l.call_id.as_str()).collect();
    assert_eq!(taken, [ids[0].as_str(), ids[1].as_str()]);
    assert!(first.iter().all(|l| l.attempt == 1));
    let rest = store.claim_due(10, "1:b", Duration::from_secs(30))?;
    let taken: Vec<&str> = rest.iter().map(|l| l.call_id.as_str()).collect();
    assert_eq!(taken, [ids[2].as_str(), ids[3].as_str(), ids[4].as_str()]);
    assert!(store
        .claim_due(10, "1:c", Duration::from_secs(30))?
        .is_empty());
    assert_eq!(audit_events(&store, &ids[4]), ["created", "claimed"]);
    Ok(())
}

on_both_backends!(
    a_released_lease_returns_the_call_to_pending_once,
    backlog_and_stats_describe_the_queue
);

/// A stopping process gives back a lease whose tool still runs: the call is
/// `pending` again (audited `released`), and giving it back twice, or after
/// another attempt took it, changes nothing.
fn a_released_lease_returns_the_call_to_pending_once(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let call = created_call(store.create_or_get(new_call("k", "fp"))?);
    let lease = store
        .claim(&call.call_id, "1:w", Duration::from_secs(30))?
        .unwrap();
    assert_eq!(store.release(&lease)?, Completion::Applied);
    assert_eq!(store.get(&call.call_id)?.unwrap().status, Status::Pending);
    assert_eq!(store.release(&lease)?, Completion::Stale);
    let next = store
        .claim(&call.call_id, "1:v", Duration::from_secs(30))?
        .unwrap();
    assert_eq!(next.attempt, 2);
    assert_eq!(store.release(&lease)?, Completion::Stale);
    assert_eq!(
        audit_events(&store, &call.call_id),
        ["created", "claimed", "released", "claimed"]
    );
    Ok(())
}

/// `/metrics`' backlog and `/stats` count the same calls by status, and the
/// oldest pending call is the first one created.
fn backlog_and_stats_describe_the_queue(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    assert_eq!(store.backlog()?.oldest_pending_created_at, None);
    let first = created_call(store.create_or_get(new_call("a", "fp"))?);
    store.create_or_get(new_call("b", "fp"))?;
    let running = created_call(store.create_or_get(new_call("c", "fp"))?);
    store
        .claim(&running.call_id, "1:w", Duration::from_secs(30))?
        .unwrap();
    let backlog = store.backlog()?;
    let pending = |counts: &[(String, i64)], status: &str| {
        counts
            .iter()
            .find(|(s, _)| s == status)
            .map_or(0, |(_, n)| *n)
    };
    assert_eq!(pending(&backlog.calls_by_status, "pending"), 2);
    assert_eq!(pending(&backlog.calls_by_status, "running"), 1);
    assert_eq!(backlog.oldest_pending_created_at, Some(first.created_at));
    let stats = store.stats(Scope::All)?;
    assert_eq!((stats.calls, stats.effects), (3, 0));
    assert_eq!(stats.by_status, backlog.calls_by_status);
    assert_eq!(stats.attempts, [(0, 2), (1, 1)]);
    assert_eq!(store.health().database, Ok(()));
    Ok(())
}
