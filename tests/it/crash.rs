//! Crash recovery with real processes: exits forced by chaos hooks, `kill -9`,
//! a stalled worker whose lease expires, two processes on one file, and the
//! count tables after a `kill -9` mid-batch.

use crate::support::Http;
use crate::support::{audit_events, count, Server, TempDb, DEADLINE};
use serde_json::json;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

fn call_row(server: &Server, call_id: &str) -> (String, i64) {
    server
        .sql()
        .query_row(
            "SELECT status, attempt FROM calls WHERE call_id = ?1",
            [call_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
}

fn only_call_id(server: &Server) -> String {
    server
        .sql()
        .query_row("SELECT call_id FROM calls", [], |r| r.get(0))
        .unwrap()
}

/// The process exits after the succeed transaction committed but before any
/// response: after a restart the call is `succeeded`, is not run again, and the
/// same-key retry gets the original result (section 12.7.2).
#[test]
fn crash_after_commit_then_restart() {
    let db = TempDb::new("crash-after");
    let mut first = Server::start(&db, &["--chaos"]);
    let _ = first.post_maybe_lost(
        "k-crash",
        &json!({"tool": "charge", "args": {"amount": 100, "_crash_after_commit": true}}),
    );
    let exit = first.wait_exit();
    assert!(
        !exit.success(),
        "the chaos hook exits with a failure status"
    );
    let call_id = only_call_id(&first);
    assert_eq!(call_row(&first, &call_id), ("succeeded".into(), 1));

    let second = Server::start(&db, &["--chaos"]);
    let (status, again) = second.post(
        "k-crash",
        &json!({"tool": "charge", "args": {"amount": 100, "_crash_after_commit": true}}),
    );
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["call_id"], call_id.as_str());
    assert_eq!(again["status"], "succeeded");
    assert_eq!(again["attempt"], 1);
    assert_eq!(second.stats()["effects"], 1);
    assert_eq!(
        audit_events(&second.db, &call_id),
        ["created", "claimed", "succeeded"]
    );
}

/// The process exits after the tool ran but before its completion committed:
/// recovery re-runs the call once the lease expires, with the same effect_id,
/// and there is still one effect (section 12.7.3).
#[test]
fn crash_before_commit_is_rerun_after_restart() {
    let db = TempDb::new("crash-before");
    let mut first = Server::start(&db, &["--chaos", "--lease-secs", "1"]);
    let _ = first.post_maybe_lost(
        "k-before",
        &json!({"tool": "charge", "args": {"amount": 5, "_crash_before_commit": true}}),
    );
    first.wait_exit();
    let call_id = only_call_id(&first);
    assert_eq!(call_row(&first, &call_id), ("running".into(), 1));
    assert_eq!(count(&first.db, "SELECT count(*) FROM effects"), 0);

    let second = Server::start(&db, &["--chaos", "--lease-secs", "1"]);
    let done = second.wait_terminal(&call_id);
    assert_eq!(done["status"], "succeeded");
    assert_eq!(done["attempt"], 2);
    assert_eq!(done["result"]["effect_id"], done["effect_id"]);
    assert_eq!(second.stats()["effects"], 1);
    assert!(audit_events(&second.db, &call_id).contains(&"recover".to_string()));
}

/// `kill -9` while a `sleep` runs; after a restart with a short lease (still
/// longer than the sleep) the call is recovered and completes as attempt 2.
#[test]
fn kill_9_during_sleep_then_restart_completes_with_attempt_2() {
    let db = TempDb::new("kill9");
    let lease = ["--lease-secs", "4"];
    let mut first = Server::start(&db, &lease);
    let (_, call) = first.post(
        "k-sleep",
        &json!({"tool": "sleep", "args": {"seconds": 1.5}}),
    );
    let call_id = call["call_id"].as_str().unwrap().to_string();
    let start = Instant::now();
    while call_row(&first, &call_id).0 != "running" {
        assert!(start.elapsed() < DEADLINE, "never started running");
        std::thread::sleep(Duration::from_millis(10));
    }
    first.kill();
    assert_eq!(call_row(&first, &call_id), ("running".into(), 1));

    let second = Server::start(&db, &lease);
    let done = second.wait_terminal(&call_id);
    assert_eq!(done["status"], "succeeded");
    assert_eq!(done["attempt"], 2);
    let events = audit_events(&second.db, &call_id);
    assert_eq!(
        events,
        ["created", "claimed", "recover", "claimed", "succeeded"]
    );
}

/// A worker stalls past its lease (a GC pause); another attempt takes over and
/// succeeds; the stalled worker's completion is fenced off, audited as
/// `stale_completion`, and overwrites nothing.
#[test]
fn stale_completion_does_not_overwrite() {
    let db = TempDb::new("fence");
    let server = Server::start(
        &db,
        &[
            "--chaos",
            "--lease-secs",
            "1",
            "--recover-interval-ms",
            "50",
        ],
    );
    let (_, call) = server.post(
        "k-stall",
        &json!({"tool": "charge", "args": {"amount": 3, "_stall_ms": 3000}}),
    );
    let call_id = call["call_id"].as_str().unwrap().to_string();
    let start = Instant::now();
    while !audit_events(&server.db, &call_id).contains(&"stale_completion".to_string()) {
        assert!(
            start.elapsed() < DEADLINE,
            "no stale completion: {:?}",
            audit_events(&server.db, &call_id)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let done = server.wait_terminal(&call_id);
    assert_eq!(done["status"], "succeeded");
    assert!(done["attempt"].as_i64().unwrap() >= 2, "{done}");
    let events = audit_events(&server.db, &call_id);
    let succeeded = events.iter().filter(|e| *e == "succeeded").count();
    assert_eq!(succeeded, 1, "{events:?}");
    assert!(events.contains(&"recover".to_string()), "{events:?}");
    assert_eq!(server.stats()["effects"], 1);
    let updated_before: f64 = done["updated_at"].as_f64().unwrap();
    let (_, after) = server.get(&format!("/v1/tool-calls/{call_id}"));
    assert_eq!(
        after["updated_at"].as_f64().unwrap(),
        updated_before,
        "the stale completion changed the row"
    );
}

/// Two server processes on one database file, same key from both at once: one
/// call and one effect (each group commit is one SQLite write transaction).
#[test]
fn two_processes_on_one_file_share_one_call() {
    let db = TempDb::new("two-procs");
    let servers = Arc::new([Server::start(&db, &[]), Server::start(&db, &[])]);
    let barrier = Arc::new(Barrier::new(12));
    let handles: Vec<_> = (0..12)
        .map(|i| {
            let (servers, barrier) = (Arc::clone(&servers), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                servers[i % 2].post(
                    "k-shared",
                    &json!({"tool": "charge", "args": {"amount": 1}}),
                )
            })
        })
        .collect();
    let ids: std::collections::HashSet<String> = handles
        .into_iter()
        .map(|h| {
            let (status, body) = h.join().unwrap();
            assert!(status == 200 || status == 202, "{status} {body}");
            body["call_id"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(ids.len(), 1);
    let call_id = ids.into_iter().next().unwrap();
    assert_eq!(servers[0].wait_terminal(&call_id)["attempt"], 1);
    assert_eq!(servers[1].stats()["effects"], 1);
}

/// `kill -9` while new calls stream in from four clients, batches in
/// flight: the file's count tables agree with its rows, group by group. The
/// writer folds a batch's counts in before that batch's `COMMIT`, in the
/// same transaction, so a batch the kill cut short is neither in the rows
/// nor in the counts.
#[test]
fn kill_9_mid_batch_leaves_the_counts_equal_to_the_rows() {
    let db = TempDb::new("kill9-counts");
    let mut server = Server::start(&db, &[]);
    std::thread::scope(|s| {
        for client in 0..4 {
            let server = &server;
            s.spawn(move || {
                let body = json!({"tool": "charge", "args": {"amount": 1}});
                // Until the server is gone: its answers are lost from then on.
                (0..).all(|i| {
                    let key = format!("k{client}-{i}");
                    server.post_maybe_lost(&key, &body).is_some()
                })
            });
        }
        let deadline = Instant::now() + DEADLINE;
        while count(&server.db, "SELECT count(*) FROM calls") < 200 {
            assert!(Instant::now() < deadline, "calls never reached 200");
            std::thread::sleep(Duration::from_millis(10));
        }
        crate::support::signal(&server.proc.child, "KILL");
    });
    server.kill();

    let conn = server.sql();
    let groups = |sql: &str| -> Vec<(String, String, String, i64, i64)> {
        let mut stmt = conn.prepare(sql).unwrap();
        let rows = stmt.query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        });
        rows.unwrap().collect::<Result<_, _>>().unwrap()
    };
    let counted = groups(
        "SELECT tenant, tool, status, attempt, calls FROM call_counts WHERE calls <> 0
          ORDER BY 1, 2, 3, 4",
    );
    let rows = groups(
        "SELECT tenant, tool, status, attempt, count(*) FROM calls
          GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4",
    );
    assert!(rows.iter().map(|g| g.4).sum::<i64>() >= 200, "{rows:?}");
    assert_eq!(counted, rows, "call_counts against the calls");
    assert_eq!(
        count(
            &server.db,
            "SELECT coalesce(sum(effects), 0) FROM effect_counts"
        ),
        count(&server.db, "SELECT count(*) FROM effects"),
        "effect_counts against the effects"
    );
}
