//! Instant reclaim of a dead process's calls, with real processes: a call
//! whose owner was `kill -9`ed is taken back as soon as a new process starts,
//! not after its (long) lease; and two live processes never take each other's
//! calls, however long their tools run.

use crate::support;

use crate::support::Http;
use crate::support::{count, Server, TempDb, DEADLINE};
use serde_json::json;
use std::time::{Duration, Instant};

fn sleep_call(seconds: f64) -> serde_json::Value {
    json!({"tool": "sleep", "args": {"seconds": seconds}})
}

/// Poll the call until it is `running`.
fn wait_running(server: &Server, call_id: &str) {
    support::eventually("the call to be running", || {
        server.get(&format!("/v1/tool-calls/{call_id}")).1["status"] == "running"
    });
}

/// With a 600 s lease, a call whose process was killed mid-tool completes a
/// few seconds after a restart, and its `recover` audit names the dead owner.
#[test]
fn a_killed_process_calls_are_reclaimed_at_restart_not_after_the_lease() {
    let db = TempDb::new("reclaim-killed");
    let lease = ["--lease-secs", "600"];
    let mut first = Server::start(&db, &lease);
    let (status, call) = first.post("reclaim-1", &sleep_call(2.0));
    assert_eq!(status, 202, "{call}");
    let call_id = call["call_id"].as_str().unwrap().to_string();
    wait_running(&first, &call_id);
    // Idle workers: the call was created already claimed by the API.
    let dead_owner = format!("{}:api@", first.proc.child.id());
    first.kill();

    let restarted_at = Instant::now();
    let second = Server::start(&db, &lease);
    let done = second.wait_terminal(&call_id);
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(done["attempt"], 2, "{done}");
    assert!(
        restarted_at.elapsed() < DEADLINE,
        "reclaim must not wait for the lease"
    );
    let detail: String = second
        .sql()
        .query_row(
            "SELECT detail FROM audit WHERE call_id = ?1 AND event = 'recover'",
            [&call_id],
            |r| r.get(0),
        )
        .unwrap();
    assert!(
        detail.contains("is gone") && detail.contains(&dead_owner),
        "{detail}"
    );
}

/// Two live processes on one file, each running tools longer than the
/// heartbeat cut-off: neither takes the other's calls.
#[test]
fn two_live_processes_never_take_each_others_calls() {
    let db = TempDb::new("reclaim-live");
    let lease = ["--lease-secs", "60"];
    let a = Server::start(&db, &lease);
    let b = Server::start(&db, &lease);
    let seconds = idempotent_tool::store::DEAD_AFTER.as_secs_f64() + 2.0;
    let mut ids = Vec::new();
    for (i, server) in [&a, &b, &a, &b].into_iter().enumerate() {
        let (status, call) = server.post(&format!("live-{i}"), &sleep_call(seconds));
        assert_eq!(status, 202, "{call}");
        ids.push(call["call_id"].as_str().unwrap().to_string());
    }
    let started = Instant::now();
    for id in &ids {
        let done = a.wait_terminal(id);
        assert_eq!(done["status"], "succeeded", "{done}");
        assert_eq!(done["attempt"], 1, "{done} was taken over");
    }
    assert!(started.elapsed() > Duration::from_secs_f64(seconds));
    assert_eq!(
        count(
            &db.path,
            "SELECT count(*) FROM audit WHERE event = 'recover'"
        ),
        0
    );
    assert_eq!(
        count(
            &db.path,
            "SELECT count(*) FROM instances WHERE stopped_at IS NULL"
        ),
        2
    );
}
