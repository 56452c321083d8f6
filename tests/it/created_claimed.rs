//! A call created already claimed (`CallStore::create_claimed`): on a node
//! with a worker free, a POST writes the call `running` with its `created`
//! and `claimed` rows in one writer operation and hands the lease to that
//! worker; behind only quick work it still does, queued; behind a slow tool
//! it falls back to `pending` and a worker's claim;
//! and a process killed while such a call runs leaves it to the next
//! process, which finishes it once.

use crate::support::downstream::audit_rows;
use crate::support::{charge, eventually, Http, Local, Server, TempDb};
use serde_json::{json, Value};
use std::sync::Barrier;

/// The audit rows of `call_id`: (ts, event, detail), oldest first.
fn timeline(db: &TempDb, call_id: &str) -> Vec<(f64, String, String)> {
    audit_rows(&db.path, call_id)
}

/// `call`, as its `202` showed it, was created claimed: `running`, attempt
/// 1; it then succeeds on that attempt, with exactly `created`, `claimed`
/// (by the API) and `succeeded` audited. Returns those rows.
fn assert_created_claimed_and_run_once(
    server: &Local,
    db: &TempDb,
    call: &Value,
) -> Vec<(f64, String, String)> {
    assert_eq!(
        (call["status"].as_str(), call["attempt"].as_i64()),
        (Some("running"), Some(1)),
        "created claimed: {call}"
    );
    let call_id = call["call_id"].as_str().unwrap();
    let done = server.wait_terminal(call_id);
    assert_eq!(
        (done["status"].as_str(), done["attempt"].as_i64()),
        (Some("succeeded"), Some(1)),
        "{done}"
    );
    let rows = timeline(db, call_id);
    let events: Vec<&str> = rows.iter().map(|(_, e, _)| e.as_str()).collect();
    assert_eq!(events, ["created", "claimed", "succeeded"]);
    assert!(
        rows[1].2.contains(":api@"),
        "claimed by the API: {:?}",
        rows[1]
    );
    rows
}

/// An idle node answers a new key `running`, attempt 1; the audit's
/// `created` and `claimed` rows carry one timestamp (one writer operation
/// computes it once; a separate claim would be a later operation) and the
/// claim names the API as owner.
#[test]
fn an_idle_node_creates_the_call_claimed_in_one_write() {
    let db = TempDb::new("created-claimed-idle");
    let server = Local::start(&db, &[]);
    let (status, call) = server.post("idle-1", &charge(3));
    assert_eq!(status, 202, "{call}");
    let rows = assert_created_claimed_and_run_once(&server, &db, &call);
    assert_eq!(rows[0].0, rows[1].0, "created and claimed in one write");
    assert!(rows[1].2.ends_with(" attempt=1"), "{:?}", rows[1]);
    assert_eq!(server.stats()["effects"], 1);
}

/// With its only worker busy, a node creates the call `pending` and a
/// worker claims it later in an operation of its own; once the worker is
/// free again, the next call is created claimed (the reservation came back).
#[test]
fn a_busy_node_falls_back_to_create_then_claim() {
    let db = TempDb::new("created-claimed-busy");
    let server = Local::start(&db, &["--workers", "1"]);
    let (_, slow) = server.post(
        "busy-sleep",
        &json!({"tool": "sleep", "args": {"seconds": 1.5}}),
    );
    assert_eq!(slow["status"], "running", "{slow}");
    let (status, queued) = server.post("busy-charge", &charge(1));
    assert_eq!(status, 202, "{queued}");
    assert_eq!(
        (queued["status"].as_str(), queued["attempt"].as_i64()),
        (Some("pending"), Some(0)),
        "no worker free: {queued}"
    );
    let queued_id = queued["call_id"].as_str().unwrap();
    let done = server.wait_terminal(queued_id);
    assert_eq!(
        (done["status"].as_str(), done["attempt"].as_i64()),
        (Some("succeeded"), Some(1)),
        "{done}"
    );
    let rows = timeline(&db, queued_id);
    let events: Vec<&str> = rows.iter().map(|(_, e, _)| e.as_str()).collect();
    assert_eq!(events, ["created", "claimed", "succeeded"]);
    assert!(rows[1].0 > rows[0].0, "a claim of its own, later: {rows:?}");
    assert!(rows[1].2.contains(":worker-"), "{:?}", rows[1]);

    server.wait_terminal(slow["call_id"].as_str().unwrap());
    // The worker's count goes back as its completion is recorded.
    let mut after = Vec::new();
    eventually("a free worker to be reserved again", || {
        let (_, call) = server.post(&format!("busy-after-{}", after.len()), &charge(1));
        after.push(call["call_id"].as_str().unwrap().to_string());
        call["status"] == "running"
    });
    for call_id in &after {
        server.wait_terminal(call_id);
    }
    assert_eq!(server.stats()["effects"], after.len() + 1);
}

/// With nothing slow ahead, quick calls are created claimed even while every
/// worker is spoken for: a burst of charges on a one-worker node is answered
/// `running`, attempt 1, each claimed by the API in its creating write (no
/// worker's claim of its own), and each runs once. Eight fit the quick queue
/// of one worker (`QUICK_JOBS_PER_WORKER`), so none may fall back to pending.
#[test]
fn quick_calls_are_created_claimed_behind_quick_work() {
    const CALLS: usize = 8;
    let db = TempDb::new("created-claimed-quick-queue");
    let server = Local::start(&db, &["--workers", "1"]);
    let barrier = Barrier::new(CALLS);
    let calls: Vec<Value> = std::thread::scope(|scope| {
        let posts: Vec<_> = (0..CALLS)
            .map(|i| {
                let (server, barrier) = (&server, &barrier);
                scope.spawn(move || {
                    barrier.wait();
                    server.post(&format!("quick-queue-{i}"), &charge(1)).1
                })
            })
            .collect();
        posts.into_iter().map(|p| p.join().unwrap()).collect()
    });
    for call in &calls {
        assert_created_claimed_and_run_once(&server, &db, call);
    }
    assert_eq!(server.stats()["effects"], CALLS);
}

/// `kill -9` right after the `202` of a call created claimed, while its
/// tool runs (a `charge` stalled before its completion commits): after a
/// restart on the same database the dead owner's lease is reclaimed at
/// once (not after the 600 s lease), and the call finishes once — one
/// call, one effect, attempt 2.
#[test]
fn a_call_created_claimed_survives_kill_9_and_finishes_once() {
    let db = TempDb::new("created-claimed-kill9");
    let flags = ["--chaos", "--lease-secs", "600"];
    let mut first = Server::start(&db, &flags);
    let body = json!({"tool": "charge", "args": {"amount": 7, "_stall_ms": 60_000}});
    let (status, call) = first.post("kill9-claimed", &body);
    assert_eq!(status, 202, "{call}");
    assert_eq!(
        (call["status"].as_str(), call["attempt"].as_i64()),
        (Some("running"), Some(1)),
        "created claimed: {call}"
    );
    first.kill();
    let call_id = call["call_id"].as_str().unwrap();
    assert_eq!(
        audit_rows(&db.path, call_id)
            .iter()
            .map(|(_, e, _)| e.as_str())
            .collect::<Vec<_>>(),
        ["created", "claimed"],
        "nothing committed after the creation"
    );

    let second = Server::start(&db, &flags);
    let done = second.wait_terminal(call_id);
    assert_eq!(
        (done["status"].as_str(), done["attempt"].as_i64()),
        (Some("succeeded"), Some(2)),
        "{done}"
    );
    assert_eq!(done["result"]["charged"], 7, "{done}");
    let stats = second.stats();
    assert_eq!(
        (stats["calls"].as_i64(), stats["effects"].as_i64()),
        (Some(1), Some(1)),
        "{stats}"
    );
    let rows = audit_rows(&db.path, call_id);
    let events: Vec<&str> = rows.iter().map(|(_, e, _)| e.as_str()).collect();
    assert_eq!(
        events,
        ["created", "claimed", "recover", "claimed", "succeeded"]
    );
    assert!(
        rows[2].2.contains(":api@") && rows[2].2.contains("is gone"),
        "{:?}",
        rows[2]
    );
    let (_, again) = second.post("kill9-claimed", &body);
    assert_eq!(
        (again["call_id"].as_str(), again["attempt"].as_i64()),
        (Some(call_id), Some(2))
    );
}
