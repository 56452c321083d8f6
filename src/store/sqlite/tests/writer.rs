//! The SQLite writer thread: group commit, what it answers when SQLite
//! rolls a batch back or a `COMMIT` fails, a failing operation rolled back
//! alone, `stop`, its counters and how it is seen stuck. SQLite only: the
//! PostgreSQL store has no writer thread.

use super::super::sql::create_or_get_op;
use super::super::MAX_READERS;
use super::*;
use rusqlite::Connection;
use std::sync::mpsc;

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

/// Holds the writer inside a batch until released, so that everything
/// queued meanwhile is committed together in the next batch.
pub(super) fn hold_writer(store: &CallStore) -> mpsc::Sender<()> {
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
    let store = CallStore::open(db.path(), StoreOptions::default())?;
    // After the open: a file with tables of another program's is refused.
    store.sqlite().write(|conn| {
        conn.execute_batch(
            "CREATE TABLE parent (id INTEGER PRIMARY KEY);
             CREATE TABLE child (parent INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED);",
        )
    })?;
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

/// A clean stop leaves the file alone, the `-wal` and `-shm` gone, however
/// many read connections were open: only the last connection to close may
/// remove them, and read threads closing at the same moment each see the
/// other still open, so the writer's connection is the one that closes last.
#[test]
fn a_clean_stop_with_several_readers_open_leaves_no_wal() -> Result<(), StoreError> {
    let db = TempDb::new("a_clean_stop_with_several_readers_open_leaves_no_wal");
    for round in 0..60 {
        let store = CallStore::open(db.path(), StoreOptions::default())?;
        store.create_or_get(new_call(&format!("k{round}"), "fp"))?;
        // Reads that overlap, so that the pool opens all its connections.
        let barrier = Arc::new(std::sync::Barrier::new(MAX_READERS));
        let readers: Vec<_> = (0..MAX_READERS)
            .map(|_| {
                let (store, barrier) = (Arc::clone(&store), Arc::clone(&barrier));
                std::thread::spawn(move || {
                    store.sqlite().readers.read(move |conn| {
                        barrier.wait();
                        conn.query_row("SELECT count(*) FROM calls", [], |r| r.get::<_, i64>(0))
                    })
                })
            })
            .collect();
        for reader in readers {
            assert_eq!(reader.join().unwrap()?, round + 1);
        }
        store.stop();
        let wal = std::path::PathBuf::from(format!("{}-wal", db.path().display()));
        assert!(
            !wal.exists(),
            "round {round}: a clean stop left {}",
            wal.display()
        );
    }
    Ok(())
}

/// Waits until the writer has no work queued. Callers are answered just
/// before their batch is counted done, so idleness is awaited, not assumed.
pub(super) fn wait_until_idle(store: &CallStore, what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while store.sqlite().writer.stuck_for().is_some() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The writer counts as stuck only with work queued and no batch finished
/// for a while: `/healthz` reads this (and says so past `--db-timeout-ms`).
#[test]
fn a_writer_holding_queued_work_is_seen_as_stuck() -> Result<(), StoreError> {
    let db = TempDb::new("a_writer_holding_queued_work_is_seen_as_stuck");
    let store = CallStore::open(db.path(), StoreOptions::default())?;
    // Opening registers this process (one write).
    wait_until_idle(&store, "never idle");
    let release = hold_writer(&store);
    let (answer, answered) = mpsc::channel();
    store.sqlite().writer.submit(
        |_conn: &Connection| Ok(()),
        Box::new(move |r| answer.send(r).unwrap()),
    );
    std::thread::sleep(Duration::from_millis(60));
    let (stuck, queued) = store.sqlite().writer.stuck_for().expect("work is queued");
    assert!(stuck >= Duration::from_millis(50), "{stuck:?}");
    assert_eq!(queued, 2, "the batch in progress and the one waiting");
    assert_eq!(store.health().writer, Ok(()), "60 ms is not yet stuck");
    release.send(()).unwrap();
    answered.recv().unwrap()?;
    wait_until_idle(&store, "never idle again");
    Ok(())
}

/// More settled than was queued is a job answered twice: a debug build
/// stops there rather than wrap the writer's outstanding count.
#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "writer settled 1 of 0 outstanding")]
fn settling_more_than_is_outstanding_is_caught() {
    super::super::writer::WriterCounters::default().settled(1);
}
