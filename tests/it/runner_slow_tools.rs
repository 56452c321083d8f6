//! How the runner treats long and slow tools, through the service: lease
//! heartbeats keep a run far longer than `--lease-secs` on its first attempt,
//! and `max_concurrency` keeps a slow downstream to its cap without holding
//! workers, so another tool's call finishes first. The first runs the real
//! binary (it reads its log), the second the service in this process.

use crate::support;

use crate::support::downstream::{Downstream, ToolsFile};
use crate::support::Http;
use crate::support::{audit_events, unique_name, Local, Server, TempDb};
use serde_json::{json, Value};
use std::time::Duration;

fn post(server: &impl Http, tool: &str, args: Value) -> String {
    let (status, call) = server.post(&unique_name(tool), &json!({"tool": tool, "args": args}));
    assert_eq!(status, 202, "{call}");
    call["call_id"].as_str().unwrap().to_string()
}

/// A built-in `sleep` of 3 s and an `http` call the downstream answers after
/// 3 s, with a 1 s lease: the leases are extended while the tools run, so
/// both finish on attempt 1 with no `recover` and no stale completion.
#[test]
fn a_tool_running_3s_with_a_1s_lease_finishes_on_attempt_1() {
    let downstream = Downstream::start(&["--delay-ms", "3000"]);
    let tools = ToolsFile::write(&json!({"tools": {
        "sleep": {"kind": "builtin"},
        "remote": {"kind": "http", "url": downstream.url("/slow"), "timeout_ms": 10000}
    }}));
    let db = TempDb::new("heartbeat");
    let server = Server::start(&db, &["--lease-secs", "1", "--tools", tools.path_str()]);
    let ids = [
        post(&server, "sleep", json!({"seconds": 3})),
        post(&server, "remote", json!({})),
    ];
    // Past the first lease: still running under attempt 1, its lease ahead.
    std::thread::sleep(Duration::from_millis(1800));
    let now = idempotent_tool::store::now();
    for id in &ids {
        let (status, attempt, until): (String, i64, f64) = server
            .sql()
            .query_row(
                "SELECT status, attempt, lease_until FROM calls WHERE call_id = ?1",
                [id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert_eq!((status.as_str(), attempt), ("running", 1), "{id}");
        assert!(
            until > now,
            "{id}: the lease was extended ({until} > {now})"
        );
    }
    for id in &ids {
        let done = server.wait_terminal(id);
        assert_eq!(
            support::status_and_attempt(&done),
            (Some("succeeded"), Some(1)),
            "{done}"
        );
        assert_eq!(
            audit_events(&server.db, id),
            ["created", "claimed", "succeeded"]
        );
    }
    assert!(!server.stderr().contains("stale"), "{}", server.stderr());
    assert_eq!(downstream.stats()["requests"], 1);
}

/// Ten calls of a tool capped at 2 against a slow downstream, on 3 workers:
/// the downstream never sees more than 2 at once, the calls over the cap
/// wait `pending`, and a call of another tool posted after them is not
/// stuck behind them — it finishes while most of them are still waiting.
#[test]
fn max_concurrency_caps_a_slow_tool_without_taking_the_other_tools_workers() {
    let downstream = Downstream::start(&["--delay-ms", "400"]);
    let tools = ToolsFile::write(&json!({"tools": {
        "slow": {"kind": "http", "url": downstream.url("/slow"), "max_concurrency": 2},
        "charge": {"kind": "builtin"}
    }}));
    let db = TempDb::new("max-concurrency");
    let server = Local::start(&db, &["--workers", "3", "--tools", tools.path_str()]);
    let slow: Vec<String> = (0..10).map(|_| post(&server, "slow", json!({}))).collect();
    let charge_id = post(&server, "charge", json!({"amount": 1}));
    let charged = server.wait_terminal(&charge_id);
    assert_eq!(charged["status"], "succeeded", "{charged}");
    let (running, pending): (i64, i64) = server
        .sql()
        .query_row(
            "SELECT count(*) FILTER (WHERE status = 'running'), count(*) FILTER (WHERE status = 'pending')
               FROM calls WHERE tool = 'slow'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert!(running <= 2, "{running} running");
    assert!(pending >= 1, "calls over the cap wait pending ({pending})");
    let finished_at = |call: &Value| call["updated_at"].as_f64().unwrap();
    let after_charge = slow
        .iter()
        .map(|id| server.wait_terminal(id))
        .inspect(|call| assert_eq!(call["status"], "succeeded", "{call}"))
        .filter(|call| finished_at(call) > finished_at(&charged))
        .count();
    assert!(
        after_charge >= 5,
        "only {after_charge} of 10 slow calls finished after the charge"
    );
    let stats = downstream.stats();
    assert_eq!(stats["max_in_flight"], 2, "{stats}");
    assert_eq!(stats["requests"], 10, "{stats}");
}
