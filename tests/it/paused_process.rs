//! A whole process paused with `SIGSTOP` (a VM freeze, a debugger, a stopped
//! container), then resumed with `SIGCONT`, beside a second process on the
//! same database file. Two moments matter, and each test pauses at one:
//!
//! - between write transactions, while one of its tools runs: its lease runs
//!   out, the other process takes the call (attempt 2), and when the paused
//!   process wakes, its completion is fenced off — one result, no overwrite;
//! - inside a write transaction, holding SQLite's write lock: the other
//!   process still answers reads, refuses new calls with `503 unavailable`
//!   (nothing written), and once the paused one resumes every call it had
//!   accepted is there and the refused key goes through on retry.
//!
//! `SIGSTOP` lands at an arbitrary instruction, so each test pauses, looks at
//! the write lock from outside, and resumes and pauses again until the pause
//! fell where the test needs it.

use crate::support::procfs;
use crate::support::*;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// Whether some connection holds the file's write lock now: `BEGIN
/// IMMEDIATE` without waiting, rolled back at once if it was granted.
fn write_lock_is_held(db: &Path) -> bool {
    let conn = rusqlite::Connection::open(db).expect("open db");
    conn.busy_timeout(Duration::ZERO).unwrap();
    match conn.execute_batch("BEGIN IMMEDIATE") {
        Ok(()) => {
            conn.execute_batch("ROLLBACK").unwrap();
            false
        }
        Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) => true,
        Err(e) => panic!("probing the write lock: {e}"),
    }
}

/// Whether the write lock stays `held` (or free) over five probes 50 ms
/// apart. The other process takes the lock too, for the milliseconds a
/// batch lasts; only the paused one can hold it through every probe.
fn lock_state_lasts(db: &Path, held: bool) -> bool {
    (0..5).all(|i| {
        if i > 0 {
            thread::sleep(Duration::from_millis(50));
        }
        write_lock_is_held(db) == held
    })
}

/// Pause `server` at a moment when it holds the write lock (`holding`) or
/// does not; returns with every one of its threads stopped.
fn pause_where(server: &Server, holding: bool) {
    let pid = server.proc.child.id();
    let deadline = Instant::now() + DEADLINE;
    loop {
        signal(&server.proc.child, "STOP");
        eventually("every thread of the server to stop", || {
            procfs::all_threads_stopped(pid)
        });
        if lock_state_lasts(&server.db, holding) {
            return;
        }
        signal(&server.proc.child, "CONT");
        assert!(
            Instant::now() < deadline,
            "never paused the server with the write lock {}",
            if holding { "held" } else { "free" }
        );
        thread::sleep(Duration::from_millis(3));
    }
}

/// The calls row's `(status, attempt, owner)`.
fn status_attempt_owner(db: &Path, call_id: &str) -> (String, i64, Option<String>) {
    open_db(db)
        .query_row(
            "SELECT status, attempt, owner FROM calls WHERE call_id = ?1",
            [call_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .expect("the call's row")
}

/// Paused while its tool ran, a process keeps its call only until its lease
/// runs out: the other process takes it as attempt 2 and finishes it, and the
/// woken process's completion of attempt 1 is fenced off and audited as
/// `stale_completion`. The paused process serves normally once resumed.
#[test]
fn a_paused_process_loses_its_call_when_its_lease_ends_and_its_completion_is_fenced() {
    let db = TempDb::new("paused-lease");
    let flags = ["--lease-secs", "2", "--recover-interval-ms", "50"];
    let paused = Server::start(&db, &flags);
    let other = Server::start(&db, &flags);
    let sleep = json!({"tool": "sleep", "args": {"seconds": 2}});
    let (status, call) = paused.post("k-paused", &sleep);
    assert_eq!(status, 202, "{call}");
    let call_id = call["call_id"].as_str().unwrap().to_string();
    let paused_pid = format!("{}:", paused.proc.child.id());
    let other_pid = format!("{}:", other.proc.child.id());
    eventually("the paused-to-be process to run attempt 1", || {
        let (status, attempt, owner) = status_attempt_owner(&db.path, &call_id);
        status == "running" && attempt == 1 && owner.is_some_and(|o| o.starts_with(&paused_pid))
    });

    pause_where(&paused, false);
    eventually("the other process to take the call as attempt 2", || {
        let (status, attempt, owner) = status_attempt_owner(&db.path, &call_id);
        status == "running" && attempt == 2 && owner.is_some_and(|o| o.starts_with(&other_pid))
    });
    signal(&paused.proc.child, "CONT");

    let stale = ("stale_completion".to_string(), 1);
    eventually("the woken process's attempt 1 to be fenced off", || {
        audit_events_and_attempts(&db.path, &call_id).contains(&stale)
    });
    let done = other.wait_terminal(&call_id);
    assert_eq!(status_and_attempt(&done), (Some("succeeded"), Some(2)));
    let events = audit_events_and_attempts(&db.path, &call_id);
    let finished: Vec<_> = events.iter().filter(|(e, _)| e == "succeeded").collect();
    assert_eq!(finished, [&("succeeded".to_string(), 2)], "{events:?}");
    assert!(events.contains(&("recover".to_string(), 1)), "{events:?}");

    let (status, again) = paused.post("k-paused", &sleep);
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["call_id"], call["call_id"]);
    assert_eq!(status_and_attempt(&again), (Some("succeeded"), Some(2)));
    let (status, fresh) = paused.post("k-after-pause", &charge(1));
    assert_eq!(status, 202, "{fresh}");
    let fresh = paused.wait_terminal(fresh["call_id"].as_str().unwrap());
    assert_eq!(fresh["status"], "succeeded", "{fresh}");
}

/// Keys posted to `server` from a few threads until `stop`, each answer kept:
/// load enough that its writer is inside a transaction much of the time.
fn load(server: &Server, stop: &Arc<AtomicBool>) -> Vec<thread::JoinHandle<Vec<(String, u16)>>> {
    (0..4)
        .map(|t| {
            let base = server.base.clone();
            let stop = Arc::clone(stop);
            thread::spawn(move || {
                let mut answers = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    let key = format!("load-{t}-{}", answers.len());
                    let body = charge(1).to_string();
                    let resp = idempotent_tool::client::request_once(
                        &base,
                        "POST",
                        "/v1/tool-calls",
                        &[("Idempotency-Key", key.as_str())],
                        Some(body.as_bytes()),
                        Some(DEADLINE),
                    )
                    .expect("a load request is answered");
                    answers.push((key, resp.status));
                }
                answers
            })
        })
        .collect()
}

/// Paused inside a write transaction, a process holds SQLite's write lock
/// until it resumes: meanwhile the other process answers reads and refuses a
/// new call with `503 unavailable` after its busy timeout, writing nothing.
/// Once resumed, every call the paused process accepted is on file, the
/// refused key goes through on retry, and the file verifies clean.
#[test]
fn a_process_paused_holding_the_write_lock_stalls_writes_not_reads() {
    let db = TempDb::new("paused-lock");
    // Long enough that no write of a busy but running process is refused, short
    // enough that the refusal during the pause comes quickly.
    let flags = ["--busy-timeout-ms", "1000"];
    let paused = Server::start(&db, &flags);
    let other = Server::start(&db, &flags);
    let (status, before) = other.post("k-before", &charge(2));
    assert_eq!(status, 202, "{before}");
    let before_id = before["call_id"].as_str().unwrap().to_string();
    other.wait_terminal(&before_id);

    let stop = Arc::new(AtomicBool::new(false));
    let loaders = load(&paused, &stop);
    eventually("the load to reach the paused process", || {
        count(
            &db.path,
            "SELECT count(*) FROM calls WHERE idem_key LIKE 'load-%'",
        ) > 20
    });
    pause_where(&paused, true);

    let (status, read) = other.get(&format!("/v1/tool-calls/{before_id}"));
    assert_eq!(status, 200, "{read}");
    assert_eq!(read["status"], "succeeded");
    let refused = other.call(
        "POST",
        "/v1/tool-calls",
        &[("Idempotency-Key", "k-during")],
        Some(&charge(3).to_string()),
    );
    let refusal: Value = refused.json();
    assert_eq!(refused.status, 503, "{refusal}");
    assert_eq!(refusal["error"]["code"], "unavailable");
    assert!(refused.header("retry-after").is_some());
    assert_eq!(
        count(
            &db.path,
            "SELECT count(*) FROM calls WHERE idem_key = 'k-during'"
        ),
        0,
        "the refused request wrote nothing"
    );

    signal(&paused.proc.child, "CONT");
    stop.store(true, Ordering::SeqCst);
    let answers: Vec<(String, u16)> = loaders
        .into_iter()
        .flat_map(|l| l.join().expect("load thread"))
        .collect();
    let accepted: Vec<&String> = answers
        .iter()
        .filter(|(_, status)| *status == 202)
        .map(|(key, _)| key)
        .collect();
    assert!(!accepted.is_empty(), "{answers:?}");
    let conn = open_db(&db.path);
    for key in &accepted {
        let on_file: i64 = conn
            .query_row(
                "SELECT count(*) FROM calls WHERE idem_key = ?1",
                [key],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(on_file, 1, "{key} was answered 202 but is not on file once");
    }

    let (status, during) = other.post("k-during", &charge(3));
    assert_eq!(status, 202, "{during}");
    other.wait_terminal(during["call_id"].as_str().unwrap());
    eventually("every call to finish", || {
        count(
            &db.path,
            "SELECT count(*) FROM calls WHERE status <> 'succeeded'",
        ) == 0
    });
    assert_verify_passes(&db);
}
