//! A file system that fails under the running server, as ext4 does on a real
//! I/O error with `errors=remount-ro` (the default of many distributions):
//! it turns read-only at once, open files and all, so every write and every
//! `fdatasync` fails from then on. Clients keep posting new keys throughout.
//! The invariant: no call answered `202` before the error is lost — each is
//! on file, once, after the file system is checked and mounted again and the
//! service restarted, and `verify` passes (a `202` answered as the error
//! strikes rests on an `fdatasync` ext4 may acknowledge and then lose; see
//! `Outcomes::failed_at`); what could not be made durable is answered
//! `503 unavailable`, never `500`; `/healthz` stops answering `ok` (the
//! process cannot write again until it restarts, so an orchestrator should
//! restart it); and a `SIGTERM` still stops it, leaving the WAL alone.
//!
//! Needs root for the loop device (CI runs as root).

use crate::support::loop_ext4::LoopExt4;
use crate::support::tmpfs::is_root;
use crate::support::{self, count, eventually, Http, Server, TempDb, DEADLINE};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

#[derive(Default)]
struct Outcomes {
    /// (key, call_id) of every answer `202` received before the file system
    /// was failed.
    accepted: Vec<(String, String)>,
    /// The same for the answers received after: see `failed_at`.
    accepted_during_the_failure: Vec<(String, String)>,
    /// When the test started failing the file system. ext4's error path can
    /// acknowledge an `fdatasync` that races the error and then lose its
    /// data at the next mount: a 40-line program appending and syncing beside
    /// `trigger_fs_error` lost the last acknowledged sync in 4 trials of 67
    /// (the one timed had returned 9.5 ms after the trigger), 2 of 30 of them
    /// with a check after each sync that the file system had not turned
    /// read-only; held to every `202`, this test failed about 1 run in 8. A
    /// disk that acknowledges what it has not made durable is beyond any
    /// service, so the answers received after this instant are counted, not
    /// held to; every one received before it must be kept.
    failed_at: Option<Instant>,
    /// Every other answer: status and error code.
    refused: Vec<(u16, String)>,
}

impl Outcomes {
    fn unavailable(&self) -> usize {
        self.refused.iter().filter(|(s, _)| *s == 503).count()
    }
}

/// Eight clients posting new keys until `stop`.
fn post_until(server: &Server, outcomes: &Mutex<Outcomes>, stop: &AtomicBool) {
    thread::scope(|scope| {
        for client in 0..8 {
            scope.spawn(move || {
                for n in 0.. {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let key = format!("fs-{client}-{n}");
                    let (status, reply) =
                        server.post(&key, &json!({"tool": "charge", "args": {"amount": 1}}));
                    let mut o = outcomes.lock().unwrap();
                    if status == 202 {
                        let call_id = reply["call_id"].as_str().unwrap().to_string();
                        match o.failed_at {
                            None => o.accepted.push((key, call_id)),
                            Some(_) => o.accepted_during_the_failure.push((key, call_id)),
                        }
                    } else {
                        let code = reply["error"]["code"].as_str().unwrap_or("").to_string();
                        o.refused.push((status, code));
                    }
                }
            });
        }
    });
}

/// Wait until `enough` holds of the outcomes so far.
fn wait_for(outcomes: &Mutex<Outcomes>, what: &str, enough: impl Fn(&Outcomes) -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !enough(&outcomes.lock().unwrap()) {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(10));
    }
}

/// Every background pass fails on the failed file system (recovery every
/// 50 ms, the heartbeat, retention); each says so once, then holds its
/// repeats back (`log::Repeats`, one line per 10 s) instead of flooding the
/// log. Watched for a second once each has spoken.
fn assert_background_failures_are_not_repeated(server: &Server) {
    for event in ["recovery_failed", "heartbeat_failed", "purge_failed"] {
        server
            .proc
            .wait_for_stderr(&format!("\"event\":\"{event}\""));
    }
    thread::sleep(Duration::from_secs(1));
    let stderr = server.stderr();
    let lines = |event: &str| stderr.matches(&format!("\"event\":\"{event}\"")).count();
    // Two recovery sites: the recovery pass and the poll for due calls.
    assert!(lines("recovery_failed") <= 2, "{stderr}");
    assert_eq!(lines("heartbeat_failed"), 1, "{stderr}");
    assert_eq!(lines("purge_failed"), 1, "{stderr}");
}

#[test]
fn a_file_system_turned_read_only_loses_no_accepted_call() {
    if !is_root() {
        eprintln!(
            "disk_error: not root, so no loop device; this test needs root (CI runs as root)"
        );
        return;
    }
    let mut fs = LoopExt4::mount(64);
    let db = TempDb::at(fs.dir.join("idem.db"));
    let lease = ["--lease-secs", "2"];
    // Recovery every 50 ms: a failing pass would write twenty lines a second.
    let mut server = Server::start(
        &db,
        &[&lease[..], &["--recover-interval-ms", "50"]].concat(),
    );
    assert_eq!(server.get("/healthz").0, 200);

    let (outcomes, stop) = (Mutex::new(Outcomes::default()), AtomicBool::new(false));
    thread::scope(|scope| {
        scope.spawn(|| post_until(&server, &outcomes, &stop));
        wait_for(&outcomes, "calls accepted before the error", |o| {
            o.accepted.len() >= 200
        });
        outcomes.lock().unwrap().failed_at = Some(Instant::now());
        fs.fail_now();
        wait_for(&outcomes, "refusals after the error", |o| {
            o.unavailable() >= 40
        });
        stop.store(true, Ordering::SeqCst);
    });
    let outcomes = outcomes.into_inner().unwrap();
    let others: Vec<_> = outcomes
        .refused
        .iter()
        .filter(|(status, code)| (*status, code.as_str()) != (503, "unavailable"))
        .collect();
    assert!(
        others.is_empty(),
        "refused other than 503 unavailable: {others:?}"
    );

    // The process cannot write again, and says so where an orchestrator looks.
    let (status, new_key) = server.post(
        "after-the-error",
        &json!({"tool": "charge", "args": {"amount": 1}}),
    );
    assert_eq!(
        (status, new_key["error"]["code"].as_str()),
        (503, Some("unavailable")),
        "{new_key}"
    );
    let mut health = Value::Null;
    eventually("/healthz to report the writer", || {
        let (status, body) = server.get("/healthz");
        health = body;
        status == 503
    });
    let writer = &health["checks"]["writer"];
    assert_eq!(writer["ok"], false, "{health}");
    // The syncer's sync or a checkpoint's may be the first to fail.
    let detail = writer["detail"].as_str().unwrap_or("");
    let a_sync_failed =
        detail.contains("syncing the WAL failed") || detail.contains("a checkpoint's sync failed");
    assert!(
        a_sync_failed && detail.contains("restart the process"),
        "{health}"
    );

    assert_background_failures_are_not_repeated(&server);

    // A stop on the failed file system ends, leaves the WAL alone, and tells
    // a supervisor it was not clean.
    support::signal(&server.proc.child, "TERM");
    let exit = server.wait_exit();
    let stderr = server.stderr();
    assert_eq!(exit.code(), Some(1), "{stderr}");
    assert!(stderr.contains("final checkpoint skipped"), "{stderr}");
    assert!(
        stderr.contains("\"event\":\"stopped_after_write_failure\""),
        "{stderr}"
    );
    fs.repair_and_mount_again();
    let restarted = Server::start(&db, &lease);
    assert_eq!(restarted.get("/healthz").0, 200);
    let conn = restarted.sql();
    support::assert_each_accepted_call_kept(&conn, &outcomes.accepted);
    let kept_of_those_during = outcomes
        .accepted_during_the_failure
        .iter()
        .filter(|(key, _)| {
            conn.query_row(
                "SELECT count(*) FROM calls WHERE idem_key = ?1",
                [key],
                |r| r.get::<_, i64>(0),
            )
            .unwrap()
                == 1
        })
        .count();
    eventually("the restarted service to finish every call", || {
        count(
            &db.path,
            "SELECT count(*) FROM calls WHERE status <> 'succeeded'",
        ) == 0
    });
    support::assert_verify_passes(&db);
    eprintln!(
        "disk_error: {} accepted before the error and all kept; {} of {} accepted as it struck kept; {} answered 503",
        outcomes.accepted.len(),
        kept_of_those_during,
        outcomes.accepted_during_the_failure.len(),
        outcomes.unavailable()
    );
    drop(conn);
    drop(restarted);
    drop(db);
    drop(fs);
}
