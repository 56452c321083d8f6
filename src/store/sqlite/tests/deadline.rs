//! A wait on the writer ends at the deadline (`--db-timeout-ms`), and what
//! the caller is then told is true: a write that had not begun is never
//! written; one that had begun may commit later, and a lease it took is
//! given back by the next recovery pass; a writer that finished nothing for
//! the whole deadline has new writes refused at once and `/healthz` told.
//! The writer is held inside a batch here, as a file system that stopped
//! answering holds it in the kernel.

use super::super::writer::Lane;
use super::writer::{hold_writer, wait_until_idle};
use super::*;
use rusqlite::Connection;
use std::sync::mpsc;
use std::time::Instant;

fn store_waiting_at_most(db: &TempDb, within: Duration) -> Arc<CallStore> {
    let options = StoreOptions::default().with_db_timeout(within);
    let store = CallStore::open(db.path(), options).unwrap();
    wait_until_idle(&store, "never idle after the open");
    store
}

fn assert_unavailable_saying(outcome: Result<impl std::fmt::Debug, StoreError>, says: &str) {
    match outcome {
        Err(StoreError::Unavailable(cause)) => {
            assert!(cause.message().contains(says), "{cause}")
        }
        other => panic!("{other:?}"),
    }
}

/// Queued behind a batch that does not end, a create is given up at its
/// deadline as never written, and when its turn comes it writes nothing.
#[test]
fn a_write_not_begun_by_its_deadline_is_never_written() {
    let db = TempDb::new("deadline-not-begun");
    let store = store_waiting_at_most(&db, Duration::from_millis(200));
    let release = hold_writer(&store);
    let started = Instant::now();
    let refused = store.create_or_get(new_call("k-queued", "fp"));
    assert_unavailable_saying(refused, "nothing was written");
    assert!(started.elapsed() < Duration::from_secs(10));
    release.send(()).unwrap();
    wait_until_idle(&store, "the held batch never ended");
    assert_eq!(rows(db.path(), "SELECT count(*) FROM calls"), 0);
    let created = store.create_or_get(new_call("k-queued", "fp")).unwrap();
    assert!(matches!(created, Created::New(_)), "{created:?}");
}

/// A create claimed that ran, in a batch that then does not end, is given
/// up at its deadline as "may still commit"; it does commit, and its lease,
/// which no worker holds, is given back by the next recovery pass, so the
/// call is `pending` for the poll at once rather than after the lease.
#[test]
fn a_write_begun_may_commit_after_its_deadline_and_its_lease_is_given_back() {
    let db = TempDb::new("deadline-begun");
    let store = store_waiting_at_most(&db, Duration::from_secs(1));
    let first = hold_writer(&store);
    let creator = {
        let store = Arc::clone(&store);
        std::thread::spawn(move || {
            store.create_claimed(new_call("k-late", "fp"), "api", Duration::from_secs(600))
        })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while store.sqlite().writer.stuck_for().map(|(_, queued)| queued) != Some(2) {
        assert!(Instant::now() < deadline, "the create was never queued");
        std::thread::sleep(Duration::from_millis(1));
    }
    // Behind the create in the same lane, so in its batch and after it.
    let (entered, inside) = mpsc::channel();
    let (second, released) = mpsc::channel::<()>();
    store.sqlite().writer.submit_in(
        Lane::Behind,
        move |_: &Connection| {
            entered.send(()).unwrap();
            let _ = released.recv();
            Ok(())
        },
        Box::new(|_| {}),
    );
    first.send(()).unwrap();
    inside.recv().unwrap();
    let answer = creator.join().unwrap();
    assert_unavailable_saying(answer, "it may still commit");
    second.send(()).unwrap();
    wait_until_idle(&store, "the held batch never ended");
    let call_id: String = Connection::open(db.path())
        .unwrap()
        .query_row(
            "SELECT call_id FROM calls WHERE idem_key = 'k-late' AND status = 'running'",
            [],
            |r| r.get(0),
        )
        .expect("the begun create committed, claimed");
    store.recover(&[]).unwrap();
    let call = store.get(&call_id).unwrap().unwrap();
    assert_eq!(call.status, Status::Pending, "{call:?}");
    assert_eq!(
        audit_events(&store, &call_id),
        ["created", "claimed", "released"]
    );
}

/// Once the writer has had work queued and finished nothing for the whole
/// deadline, a new write is refused before it is queued, at once, and the
/// health check says the writer is down; both clear when it moves again.
#[test]
fn a_writer_stalled_for_the_deadline_refuses_new_writes_at_once() {
    let db = TempDb::new("deadline-stalled");
    let within = Duration::from_millis(300);
    let store = store_waiting_at_most(&db, within);
    let release = hold_writer(&store);
    std::thread::sleep(within);
    let started = Instant::now();
    let refused = store.create_or_get(new_call("k-refused", "fp"));
    assert!(started.elapsed() < within, "{:?}", started.elapsed());
    assert_unavailable_saying(refused, "nothing was written");
    let health = store.health();
    let down = health.writer.expect_err("a stalled writer is down");
    assert!(down.contains("no batch finished"), "{down}");
    release.send(()).unwrap();
    wait_until_idle(&store, "the held batch never ended");
    assert_eq!(store.health().writer, Ok(()));
    assert!(store.create_or_get(new_call("k-refused", "fp")).is_ok());
    assert_eq!(rows(db.path(), "SELECT count(*) FROM calls"), 1);
}
