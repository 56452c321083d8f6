//! Graceful shutdown with real signals: SIGTERM under load exits 0 with no call
//! left `running`; a tool still running after the grace period has its lease
//! given back; a `?wait` request is answered with the call as it is; a second
//! signal exits at once; a completion held at the stop gets a last try.

use crate::support;

use crate::support::Counts;
use crate::support::Http;
use crate::support::{audit_events, charge, signal, Server, TempDb, DEADLINE};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

fn sleep_call(seconds: f64) -> Value {
    json!({"tool": "sleep", "args": {"seconds": seconds}})
}

fn wait_running(server: &Server, call_id: &str) {
    support::eventually("the call to be running", || {
        server.get(&format!("/v1/tool-calls/{call_id}")).1["status"] == "running"
    });
}

fn server_is_listening(server: &Server) -> bool {
    std::net::TcpStream::connect(server.addr()).is_ok()
}

/// Wait until one of the server's connection threads is blocked on a
/// condition variable: its request has been read and is waiting for the call.
fn wait_for_a_waiting_request(server: &Server) {
    let pid = server.proc.child.id();
    support::eventually("a connection thread waiting for its call", || {
        support::procfs::connection_threads(pid).1 > 0
    });
}

fn exit_code(server: &mut Server) -> Option<i32> {
    server.wait_exit().code()
}

/// SIGTERM while clients post: exit 0, nothing left `running`, and after a
/// restart every call the clients saw accepted reaches a terminal state.
#[test]
fn sigterm_during_load_exits_0_and_every_accepted_call_finishes_after_restart() {
    let db = TempDb::new("sigterm-load");
    let mut server = Server::start(&db, &[]);
    let accepted = Mutex::new(Vec::new());
    let stop = AtomicBool::new(false);
    thread::scope(|scope| {
        for client in 0..6 {
            let (server, accepted, stop) = (&server, &accepted, &stop);
            scope.spawn(move || {
                for n in 0.. {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let body = if n % 4 == 0 {
                        sleep_call(0.3)
                    } else {
                        charge(1)
                    };
                    let sent = idempotent_tool::client::request_once(
                        &server.base,
                        "POST",
                        "/v1/tool-calls",
                        &[("Idempotency-Key", &format!("term-{client}-{n}"))],
                        Some(body.to_string().as_bytes()),
                        Some(DEADLINE),
                    );
                    match sent {
                        Ok(resp) if resp.status == 202 || resp.status == 200 => {
                            let id = resp.json()["call_id"].as_str().unwrap().to_string();
                            accepted.lock().unwrap().push(id);
                        }
                        _ => return, // the server has stopped listening
                    }
                }
            });
        }
        support::eventually("some calls accepted", || {
            accepted.lock().unwrap().len() >= 40
        });
        signal(&server.proc.child, "TERM");
        // The clients end when the server stops answering.
        support::eventually("the server to stop", || !server_is_listening(&server));
        stop.store(true, Ordering::SeqCst);
    });
    assert_eq!(exit_code(&mut server), Some(0), "{}", server.stderr());
    assert!(
        server.stderr().contains("stopped cleanly"),
        "{}",
        server.stderr()
    );
    assert_eq!(
        db.count("SELECT count(*) FROM calls WHERE status = 'running'"),
        0
    );
    let restarted = Server::start(&db, &[]);
    let accepted = accepted.into_inner().unwrap();
    for call_id in &accepted {
        let call = restarted.wait_terminal(call_id);
        assert_eq!(call["status"], "succeeded", "{call}");
    }
}

/// A tool still running when the grace period ends: the process exits 0
/// without waiting for it, the call is `pending` again (audited `released`),
/// and the next process runs it at once despite a long lease.
#[test]
fn a_tool_running_past_the_grace_is_released_for_the_next_process() {
    let db = TempDb::new("sigterm-grace");
    let flags = ["--shutdown-grace-secs", "0.5", "--lease-secs", "600"];
    let mut server = Server::start(&db, &flags);
    let (_, call) = server.post("grace-1", &sleep_call(8.0));
    let call_id = call["call_id"].as_str().unwrap().to_string();
    wait_running(&server, &call_id);
    let signalled = Instant::now();
    signal(&server.proc.child, "TERM");
    assert_eq!(exit_code(&mut server), Some(0), "{}", server.stderr());
    assert!(
        signalled.elapsed() < Duration::from_secs(6),
        "the stop waited for the tool"
    );
    let status: String = server
        .sql()
        .query_row(
            "SELECT status FROM calls WHERE call_id = ?1",
            [&call_id],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(status, "pending");
    assert!(audit_events(&db.path, &call_id).contains(&"released".to_string()));
    let restarted = Server::start(&db, &flags);
    let done = restarted.wait_terminal(&call_id);
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(done["attempt"], 2, "{done}");
}

/// A request waiting (`?wait=30`) for a call is answered, with the call as it
/// is, as soon as the stop begins, not when its wait would have ended.
#[test]
fn a_waiting_request_is_answered_with_the_call_as_it_is() {
    let db = TempDb::new("sigterm-wait");
    let mut server = Server::start(&db, &["--shutdown-grace-secs", "0.5"]);
    let (_, call) = server.post("wait-1", &sleep_call(8.0));
    let call_id = call["call_id"].as_str().unwrap().to_string();
    wait_running(&server, &call_id);
    let answer = thread::scope(|scope| {
        let waiting = scope.spawn(|| server.get(&format!("/v1/tool-calls/{call_id}?wait=30")));
        wait_for_a_waiting_request(&server);
        assert!(!waiting.is_finished(), "the wait returned before the stop");
        let signalled = Instant::now();
        signal(&server.proc.child, "TERM");
        let answer = waiting.join().unwrap();
        assert!(signalled.elapsed() < Duration::from_secs(6));
        answer
    });
    assert_eq!(answer.0, 202, "{}", answer.1);
    assert_eq!(answer.1["status"], "running", "{}", answer.1);
    assert_eq!(exit_code(&mut server), Some(0), "{}", server.stderr());
}

/// A second signal while the stop waits for a tool exits at once, non-zero.
#[test]
fn a_second_signal_exits_at_once() {
    let db = TempDb::new("sigterm-twice");
    let mut server = Server::start(&db, &["--shutdown-grace-secs", "60"]);
    let (_, call) = server.post("twice-1", &sleep_call(9.0));
    let call_id = call["call_id"].as_str().unwrap().to_string();
    wait_running(&server, &call_id);
    signal(&server.proc.child, "TERM");
    server.proc.wait_for_stderr("stopping");
    let second = Instant::now();
    signal(&server.proc.child, "INT");
    assert_eq!(exit_code(&mut server), Some(1), "{}", server.stderr());
    assert!(second.elapsed() < Duration::from_secs(5));
    assert!(
        server.stderr().contains("exiting now"),
        "{}",
        server.stderr()
    );
}

/// A stop while a completion is held (its commit refused by a lock held from
/// outside, and it is waiting to be handed to the store again) gives it a
/// last try: the lock is let go as the signal is sent, after five refusals,
/// when the next retry is most of a second away, so the stop's last try is
/// what commits it. The call ends `succeeded` on attempt 1 before the process
/// exits; the tool ran once.
#[test]
fn a_completion_held_at_the_stop_gets_a_last_try() {
    let db = TempDb::new("sigterm-held");
    let flags = ["--lease-secs", "600", "--busy-timeout-ms", "20"];
    let mut server = Server::start(&db, &flags);
    let (status, call) = server.post("held-1", &sleep_call(0.5));
    assert_eq!(status, 202, "{call}");
    let call_id = call["call_id"].as_str().unwrap().to_string();
    wait_running(&server, &call_id);
    let blocker = server.sql();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    support::eventually("the completion to be refused five times", || {
        server.counter("idempotent_tool_completions_retried_total") >= 5.0
    });
    signal(&server.proc.child, "TERM");
    blocker.execute_batch("ROLLBACK").unwrap();
    assert_eq!(exit_code(&mut server), Some(0), "{}", server.stderr());
    let (status, attempt): (String, i64) = server
        .sql()
        .query_row(
            "SELECT status, attempt FROM calls WHERE call_id = ?1",
            [&call_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((status.as_str(), attempt), ("succeeded", 1));
    assert_eq!(
        audit_events(&db.path, &call_id),
        ["created", "claimed", "succeeded"]
    );
}
