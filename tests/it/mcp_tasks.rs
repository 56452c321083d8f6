//! Durable MCP Tasks against the real binary, under 2026-07-28 with the
//! conformance fixtures' tools file: a task is its call, so it survives
//! `kill -9` of the process that made it and is read by a new one; the
//! same key re-sent is the same task and one effect; `tasks/cancel` of a
//! running command ends it `cancelled` with no effect; another tenant's
//! task id is unknown exactly as a made-up one; keyless calls are one
//! call by their content within the window and a new call after it; and a
//! command's `$PROGRESS_FD` lines reach the client as progress notifications.

use crate::support::{eventually, open_db, AuthFile, Http, Server, TempDb};
use serde_json::{json, Value};
use std::time::Instant;

const FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/mcp-conformance/tools.json"
);
const KEY: &str = "dev.idempotent-tool/idempotency-key";

/// A 2026-07-28 request declaring the tasks extension.
fn rpc(server: &Server, token: Option<&str>, method: &str, params: Value) -> Value {
    let tasks = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    crate::support::mcp_stateless::rpc(server, token, &tasks, method, params)
}

fn start(db: &TempDb, extra: &[&str]) -> Server {
    let mut flags = vec!["--tools", FIXTURES];
    flags.extend_from_slice(extra);
    Server::start(db, &flags)
}

fn count(db: &TempDb, table: &str) -> i64 {
    let sql = format!("SELECT COUNT(*) FROM {table}");
    open_db(&db.path).query_row(&sql, [], |r| r.get(0)).unwrap()
}

fn task_status(server: &Server, token: Option<&str>, id: &str) -> String {
    let got = rpc(server, token, "tasks/get", json!({"taskId": id}));
    got["result"]["status"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A task created by a process that is then killed with `kill -9` is read
/// by `tasks/get` from a new process (its call recovered and run under the
/// same effect id); re-sending the `tools/call` with the same key names the
/// same task; one call, one effect.
#[test]
fn a_task_survives_kill_9_and_the_same_key_names_the_same_task() {
    let db = TempDb::new("mcp-task-crash");
    let mut first = start(&db, &["--lease-secs", "1"]);
    let call = json!({"name": "slow_compute", "arguments": {"seconds": 2},
                      "_meta": {KEY: "order-9/compute"}});
    let created = rpc(&first, None, "tools/call", call.clone())["result"].clone();
    assert_eq!(created["resultType"], "task", "{created}");
    let task = created["taskId"].as_str().unwrap().to_string();
    assert_eq!(created["status"], "working");
    assert!(created["ttlMs"].as_u64().unwrap() > 0);
    first.kill();

    let second = start(&db, &["--lease-secs", "1"]);
    eventually("the task to complete on the new process", || {
        task_status(&second, None, &task) == "completed"
    });
    let done = rpc(&second, None, "tasks/get", json!({"taskId": task}))["result"].clone();
    assert_eq!(
        done["result"]["content"][0]["text"],
        "computed it after 2 s"
    );
    let again = rpc(&second, None, "tools/call", call)["result"].clone();
    assert_eq!(again["taskId"], task.as_str(), "{again}");
    assert_eq!(again["status"], "completed");
    assert_eq!((count(&db, "calls"), count(&db, "effects")), (1, 1));
}

/// `tasks/cancel` of a running command tool is the empty ack; the task ends
/// `cancelled` and its tool's success never happens (no effect). A second
/// cancel of the settled task is the same ack.
#[test]
fn tasks_cancel_of_a_running_command_ends_cancelled_with_no_effect() {
    let db = TempDb::new("mcp-task-cancel");
    let server = start(&db, &[]);
    let call = json!({"name": "slow_compute", "arguments": {"seconds": 30}, "_meta": {KEY: "c-1"}});
    let task = rpc(&server, None, "tools/call", call)["result"]["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    eventually("the command to run", || {
        let status: String = open_db(&db.path)
            .query_row("SELECT status FROM calls", [], |r| r.get(0))
            .unwrap();
        status == "running"
    });
    for _ in 0..2 {
        let ack = rpc(&server, None, "tasks/cancel", json!({"taskId": task}));
        let ack = ack["result"].as_object().unwrap().clone();
        assert!(
            ack.keys().all(|k| k == "resultType" || k == "_meta"),
            "{ack:?}"
        );
        assert_eq!(ack["resultType"], "complete");
        eventually("the task to be cancelled", || {
            task_status(&server, None, &task) == "cancelled"
        });
    }
    assert_eq!(count(&db, "effects"), 0);
}

/// Another tenant's task id answers exactly what an id that never existed
/// answers, for `tasks/get` and `tasks/cancel`; its owner still reads it.
#[test]
fn a_foreign_tenants_task_is_unknown_like_one_that_never_existed() {
    let db = TempDb::new("mcp-task-tenant");
    let auth = AuthFile::new(&[
        ("acme", "acme-token", false),
        ("globex", "globex-token", false),
    ]);
    let server = start(&db, &["--auth-file", auth.path_str()]);
    let call = json!({"name": "slow_compute", "arguments": {"seconds": 0}, "_meta": {KEY: "t-1"}});
    let task = rpc(&server, Some("acme-token"), "tools/call", call)["result"]["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let never = "c_0000000000000000";
    for method in ["tasks/get", "tasks/cancel"] {
        let foreign = rpc(
            &server,
            Some("globex-token"),
            method,
            json!({"taskId": task}),
        );
        let made_up = rpc(
            &server,
            Some("globex-token"),
            method,
            json!({"taskId": never}),
        );
        assert_eq!(foreign["error"]["code"], -32602, "{foreign}");
        let unnamed =
            |v: &Value, id: &str| v["error"]["message"].as_str().unwrap().replace(id, "ID");
        assert_eq!(unnamed(&foreign, &task), unnamed(&made_up, never));
        assert_eq!(foreign["error"].get("data"), made_up["error"].get("data"));
    }
    eventually("the owner to read it", || {
        task_status(&server, Some("acme-token"), &task) == "completed"
    });
}

/// Keyless calls of a `content` tool: the same arguments within the window
/// are the one call (`replayed`, `key_source: content`), other arguments a
/// new call, and the same arguments once the window has passed a new call.
#[test]
fn keyless_calls_are_one_call_by_content_within_the_window_only() {
    let db = TempDb::new("mcp-keyless");
    let server = start(&db, &["--mcp-content-window-secs", "1"]);
    let greet = |name: &str| {
        let call = json!({"name": "greet", "arguments": {"name": name}});
        rpc(&server, None, "tools/call", call)["result"]["_meta"]["dev.idempotent-tool/call"]
            .clone()
    };
    let started = Instant::now();
    let first = greet("Ada");
    let repeat = greet("Ada");
    assert_eq!(repeat["call_id"], first["call_id"], "{repeat}");
    assert_eq!(
        (repeat["replayed"].clone(), repeat["key_source"].clone()),
        (json!(true), json!("content"))
    );
    assert_ne!(greet("Grace")["call_id"], first["call_id"]);
    eventually("a call after the window to be a new call", || {
        greet("Ada")["call_id"] != first["call_id"]
    });
    assert!(
        started.elapsed().as_secs_f64() >= 1.0,
        "not before the window ended"
    );
    assert_eq!(count(&db, "calls"), 3);
}

/// On PostgreSQL, two nodes on one database: a task created on one node is
/// read by `tasks/get` on the other (a new session, a new process) after
/// the first is killed with `kill -9`; its call is recovered there, and the
/// same key re-sent to the second node names the same task. One call, one
/// effect.
#[test]
fn on_postgres_a_task_made_on_one_node_is_read_and_finished_by_another() {
    let pg = idempotent_tool::temp::postgres::PgServer::shared();
    let url = pg.fresh_database("mcp_tasks");
    let scratch = idempotent_tool::temp::TempDir::new("idem-mcp-tasks-pg").unwrap();
    let flags = ["--tools", FIXTURES, "--lease-secs", "1"];
    let mut first = Server::start_on_postgres(&url, &flags, &scratch);
    let second = Server::start_on_postgres(&url, &flags, &scratch);
    let call = json!({"name": "slow_compute", "arguments": {"seconds": 2},
                      "_meta": {KEY: "pg-order/compute"}});
    let created = rpc(&first, None, "tools/call", call.clone())["result"].clone();
    let task = created["taskId"].as_str().expect("a task").to_string();
    let seen = rpc(&second, None, "tasks/get", json!({"taskId": task}))["result"].clone();
    assert_eq!(seen["taskId"], task.as_str(), "{seen}");
    first.kill();
    eventually("the other node to finish the task", || {
        task_status(&second, None, &task) == "completed"
    });
    let again = rpc(&second, None, "tools/call", call)["result"].clone();
    assert_eq!(again["taskId"], task.as_str(), "{again}");
    let stats = second.stats();
    assert_eq!(
        (stats["calls"].clone(), stats["effects"].clone()),
        (json!(1), json!(1)),
        "{stats}"
    );
}

/// A `tools/call` with a `progressToken` of a command that writes progress
/// lines on `$PROGRESS_FD` answers an event stream: a
/// `notifications/progress` per line, in order and with its message, then
/// the response. Without a token the answer is plain JSON.
#[test]
fn a_commands_progress_lines_become_progress_notifications() {
    let db = TempDb::new("mcp-progress");
    let server = start(&db, &[]);
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "test_tool_with_progress", "arguments": {},
                   "_meta": {"progressToken": "p-1"}}});
    let headers = [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    let answer = server.call("POST", "/mcp", &headers, Some(&body.to_string()));
    assert_eq!(answer.status, 200);
    let text = String::from_utf8(answer.body.clone()).unwrap();
    let events: Vec<Value> = text
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    let (notes, response) = events.split_at(events.len() - 1);
    let progress: Vec<(f64, String)> = notes
        .iter()
        .map(|n| {
            assert_eq!(n["method"], "notifications/progress");
            assert_eq!(n["params"]["progressToken"], "p-1");
            let p = &n["params"];
            (
                p["progress"].as_f64().unwrap(),
                p["message"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let steps: Vec<(f64, String)> = (1..=3)
        .map(|i| (i as f64, format!("step {i} of 3")))
        .collect();
    assert_eq!(progress, steps, "{text}");
    assert_eq!(response[0]["id"], 7);
    assert_eq!(
        response[0]["result"]["content"][0]["text"],
        "done in 3 steps"
    );
    let plain = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
        "params": {"name": "test_tool_with_progress", "arguments": {}}});
    let plain = server.call("POST", "/mcp", &headers, Some(&plain.to_string()));
    assert_eq!(
        plain.json()["result"]["content"][0]["text"],
        "done in 3 steps"
    );
}
