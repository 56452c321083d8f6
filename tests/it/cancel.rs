//! `POST /v1/tool-calls/{call_id}/cancel` through the real service: a
//! pending call (or one waiting for its retry) is cancelled at once and
//! never runs; a running `command` tool's whole process group is stopped
//! (SIGTERM, then SIGKILL for a child that ignores it); a running `http`
//! tool's request is abandoned; a call that settled first answers `409
//! call_settled`; an unknown or foreign call `404`; the key replays the
//! cancelled call; MCP's `get_tool_call` shows it; and the cancel reaches
//! the process that runs the call when another process on the same SQLite
//! file, or another PostgreSQL node, answered it.

use crate::support::downstream::{audit_rows, ToolsFile};
use crate::support::{
    address_after, charge, eventually, AuthFile, Counts, FakeUpstream, Http, Proc, Reply, Server,
    TempDb, DEADLINE, SERVER_BIN,
};
use idempotent_tool::store::HEARTBEAT_EVERY;
use idempotent_tool::temp::postgres::PgServer;
use idempotent_tool::temp::TempDir;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// `POST .../cancel` with an optional body and query; status and body.
fn cancel(server: &impl Http, call_id: &str, query: &str, body: Option<&str>) -> (u16, Value) {
    let path = format!("/v1/tool-calls/{call_id}/cancel{query}");
    server.request("POST", &path, &[], body)
}

/// Cancel until the call is no longer stopping (`202`): what a client does.
fn cancel_until_done(server: &impl Http, call_id: &str) -> (u16, Value) {
    let start = Instant::now();
    loop {
        let (status, body) = cancel(server, call_id, "?wait=5", None);
        if status != 202 {
            return (status, body);
        }
        assert_eq!(body["status"], "running", "{body}");
        assert!(body["cancel_requested_at"].is_number(), "{body}");
        assert!(start.elapsed() < DEADLINE, "still stopping: {body}");
    }
}

fn call_id(call: &Value) -> String {
    call["call_id"].as_str().expect("a call id").to_string()
}

/// POST `body` under `key`; the call as first answered.
fn post(server: &impl Http, key: &str, body: &Value) -> Value {
    let (status, call) = server.post(key, body);
    assert!(matches!(status, 200 | 202), "{status} {call}");
    call
}

fn sleep(seconds: u64) -> Value {
    json!({"tool": "sleep", "args": {"seconds": seconds}})
}

/// The call's status, read until it is `status` (with a deadline).
fn wait_status(server: &impl Http, call_id: &str, status: &str) -> Value {
    let read = || server.get(&format!("/v1/tool-calls/{call_id}")).1;
    eventually(&format!("call {call_id} {status}"), || {
        read()["status"] == status
    });
    read()
}

fn assert_cancelled(call: &Value, message: &str) {
    assert_eq!(call["status"], "cancelled", "{call}");
    assert_eq!(
        call["error"],
        json!({"code": "cancelled", "message": message, "retryable": false}),
        "{call}"
    );
    assert!(call["cancel_requested_at"].is_number(), "{call}");
}

/// Cancel the running call `id` until it is done, well before its tool
/// would have ended by itself (10 s at the least): `200`, `cancelled`
/// without a reason, its last audit row saying how attempt 1 `stopped`.
fn assert_stopped(server: &impl Http, db: &std::path::Path, id: &str, stopped: &str) {
    let asked = Instant::now();
    let (status, cancelled) = cancel_until_done(server, id);
    assert_eq!(status, 200, "{cancelled}");
    assert_cancelled(&cancelled, "cancelled on request");
    assert!(
        asked.elapsed() < Duration::from_secs(9),
        "stopped, not run out"
    );
    let detail = last_audit(db, id, "cancelled");
    assert_eq!(detail, format!("attempt 1 stopped, {stopped}"));
}

/// The detail of the call's last audit row, which must be `event`.
fn last_audit(db: &std::path::Path, call_id: &str, event: &str) -> String {
    let rows = audit_rows(db, call_id);
    let (_, last, detail) = rows.last().expect("audit rows").clone();
    assert_eq!(last, event, "{rows:?}");
    detail
}

/// MCP's `get_tool_call` of `call_id`: the structured outcome and `isError`.
fn mcp_get_tool_call(server: &impl Http, call_id: &str) -> (Value, bool) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "get_tool_call", "arguments": {"call_id": call_id}}});
    let headers = [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    let (status, answer) = server.request("POST", "/mcp", &headers, Some(&body.to_string()));
    assert_eq!(status, 200, "{answer}");
    let result = &answer["result"];
    (
        result["structuredContent"].clone(),
        result["isError"] == true,
    )
}

/// A pending call (the one worker busy) is cancelled at once with its
/// reason, twice alike; its key replays it; MCP shows it; it never runs —
/// the worker, once free, runs a later call and not this one. The running
/// `sleep` that held the worker is cancelled in-process and woken at once.
/// `/metrics` counts each cancel by its answer.
#[test]
fn a_pending_call_is_cancelled_at_once_and_never_runs() {
    let db = TempDb::new("cancel-pending");
    let server = Server::start(&db, &["--workers", "1"]);
    let busy = call_id(&post(&server, "busy", &sleep(10)));
    let pending = post(&server, "pending", &charge(7));
    assert_eq!(pending["status"], "pending", "{pending}");
    let id = call_id(&pending);

    let reason = r#"{"reason":"wrong amount"}"#;
    let (status, cancelled) = cancel(&server, &id, "", Some(reason));
    assert_eq!(status, 200, "{cancelled}");
    assert_cancelled(&cancelled, "wrong amount");
    assert_eq!(cancelled["attempt"], 0);
    let (again, same) = cancel(&server, &id, "", Some(reason));
    assert_eq!((again, &same["status"]), (200, &json!("cancelled")));
    let replay = server.call(
        "POST",
        "/v1/tool-calls",
        &[("Idempotency-Key", "pending")],
        Some(&charge(7).to_string()),
    );
    assert_eq!(replay.status, 200);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_cancelled(&replay.json(), "wrong amount");
    let (outcome, is_error) = mcp_get_tool_call(&server, &id);
    assert_eq!(outcome["status"], "cancelled", "{outcome}");
    assert_eq!(outcome["error"]["code"], "cancelled", "{outcome}");
    assert!(is_error && outcome["cancel_requested_at"].is_number());
    let detail = last_audit(&db.path, &id, "cancelled");
    assert_eq!(detail, "by anonymous: wrong amount; pending, never ran");

    assert_stopped(&server, &db.path, &busy, "sent=false: its sleep was woken");

    let later = call_id(&post(&server, "later", &charge(8)));
    assert_eq!(server.wait_terminal(&later)["status"], "succeeded");
    assert_eq!(wait_status(&server, &id, "cancelled")["attempt"], 0);
    assert_eq!(db.effects(), 1, "only the later charge ran");
    let scrape = server.scrape();
    let cancels = |outcome: &str| {
        let name = "idempotent_tool_cancels_total";
        scrape.value(name, &[("outcome", outcome)]).unwrap()
    };
    assert_eq!((cancels("cancelled"), cancels("settled")), (3.0, 0.0));
}

/// A tools file: `stubborn` starts a child, writes both pids to `$PIDS`,
/// and ignores SIGTERM (as does the child); `tempfail` asks for a retry a
/// minute later; `charge` is the built-in.
fn command_tools(pids: &str) -> ToolsFile {
    let stubborn = r#"trap "" TERM; sleep 60 & echo $$ $! > "$PIDS"; wait"#;
    ToolsFile::write(&json!({"tools": {
        "stubborn": {"kind": "command", "argv": ["/bin/sh", "-c", stubborn],
                     "env": {"PIDS": pids}, "timeout_ms": 60000},
        "tempfail": {"kind": "command", "argv": ["/bin/sh", "-c", "exit 75"],
                     "max_attempts": 3, "backoff_ms": {"initial": 60000, "max": 60000}},
        "charge": {"kind": "builtin"}
    }}))
}

/// Whether `pid` is a live process (a zombie is not: it is dead, unreaped).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

/// A running `command` tool is stopped with its whole process group: the
/// shell and its child both ignore SIGTERM, so both get SIGKILL after the
/// grace, and neither is left; the call ends `cancelled`, its audit saying
/// the process had started. A call waiting for its automatic retry is
/// cancelled at once (its next attempt never runs). A call that already
/// succeeded answers `409 call_settled` with the call, twice alike.
#[test]
fn a_running_command_is_stopped_with_its_whole_process_group() {
    let scratch = TempDir::new("cancel-command").unwrap();
    let pids_file = scratch.join("pids");
    let tools = command_tools(pids_file.to_str().unwrap());
    let db = TempDb::new("cancel-command");
    let server = Server::start(&db, &["--tools", tools.path_str()]);

    let id = call_id(&post(&server, "stubborn", &json!({"tool": "stubborn"})));
    let read_pids = || -> Vec<u32> {
        let written = std::fs::read_to_string(&pids_file).unwrap_or_default();
        let pids = written.split_whitespace().filter_map(|p| p.parse().ok());
        pids.collect()
    };
    eventually("the command started", || read_pids().len() == 2);
    let pids = read_pids();
    assert!(pids.iter().all(|pid| alive(*pid)));
    let killed = "sent=true: its process group got SIGTERM, then SIGKILL after 500 ms";
    assert_stopped(&server, &db.path, &id, killed);
    eventually("no process of the group left", || {
        !pids.iter().any(|pid| alive(*pid))
    });

    let waiting = call_id(&post(&server, "tempfail", &json!({"tool": "tempfail"})));
    eventually("a retry was scheduled", || {
        server.get(&format!("/v1/tool-calls/{waiting}")).1["next_attempt_at"].is_number()
    });
    let (status, cancelled) = cancel(&server, &waiting, "", None);
    assert_eq!(status, 200, "{cancelled}");
    assert_cancelled(&cancelled, "cancelled on request");
    assert_eq!(
        (cancelled["attempt"].as_i64(), &cancelled["next_attempt_at"]),
        (Some(1), &Value::Null)
    );
    let detail = last_audit(&db.path, &waiting, "cancelled");
    assert!(
        detail.ends_with("waiting to retry after attempt 1; attempt 2 never ran"),
        "{detail}"
    );

    let done = call_id(&post(&server, "charged", &charge(5)));
    assert_eq!(server.wait_terminal(&done)["status"], "succeeded");
    for _ in 0..2 {
        let (status, settled) = cancel(&server, &done, "", None);
        assert_eq!(status, 409, "{settled}");
        assert_eq!(settled["error"]["code"], "call_settled");
        assert_eq!(settled["error"]["call_id"], done.as_str());
        assert_eq!(settled["error"]["status"], "succeeded");
        assert_eq!(settled["call"]["status"], "succeeded");
    }
    assert_eq!(db.effects(), 1, "only the charge's");
}

/// A running `http` tool's request is abandoned: the downstream got the
/// request and holds its answer for a minute; the cancel shuts the socket,
/// the worker stops waiting at once, and the call ends `cancelled`, its
/// audit saying the request had gone out (the downstream may act on it).
#[test]
fn a_running_http_request_is_abandoned() {
    let upstream = FakeUpstream::start(|_, _| Reply {
        delay: Duration::from_secs(60),
        ..Reply::json(200, json!({"ok": true}))
    });
    let tools = ToolsFile::write(&json!({"tools": {"slow": {"kind": "http",
        "url": format!("{}/slow", upstream.base()), "timeout_ms": 120000}}}));
    let db = TempDb::new("cancel-http");
    let server = Server::start(&db, &["--tools", tools.path_str()]);
    let id = call_id(&post(&server, "slow", &json!({"tool": "slow"})));
    eventually("the request arrived", || !upstream.seen().is_empty());
    let abandoned = "sent=true: its request had gone out; \
                     its connection was shut down and any answer left unread";
    assert_stopped(&server, &db.path, &id, abandoned);
    assert_eq!(upstream.seen().len(), 1, "sent once, never again");
    assert_eq!(db.effects(), 0);
}

/// Another tenant's call and an unknown id are `404` (never `403`); a
/// malformed body is `400` and changes nothing; any other method is `405`.
#[test]
fn foreign_unknown_and_malformed_cancels_are_refused() {
    let auth = AuthFile::new(&[("acme", "tok-a", false), ("beta", "tok-b", false)]);
    let db = TempDb::new("cancel-refused");
    let server = Server::start(&db, &["--auth-file", auth.path_str(), "--workers", "1"]);
    let as_tenant = |token: &str, method: &str, path: &str, body: Option<&str>| {
        let bearer = format!("Bearer {token}");
        let headers = [("Authorization", bearer.as_str()), ("Idempotency-Key", "k")];
        server.request(method, path, &headers, body)
    };
    let (status, busy) = as_tenant(
        "tok-a",
        "POST",
        "/v1/tool-calls",
        Some(&sleep(10).to_string()),
    );
    assert_eq!(status, 202, "{busy}");
    let path = format!("/v1/tool-calls/{}/cancel", call_id(&busy));
    let (status, body) = as_tenant("tok-b", "POST", &path, None);
    assert_eq!(
        (status, &body["error"]["code"]),
        (404, &json!("not_found")),
        "{body}"
    );
    let unknown = "/v1/tool-calls/c_0123456789abcdef/cancel";
    assert_eq!(as_tenant("tok-a", "POST", unknown, None).0, 404);
    for bad in [
        r#"{"why":"x"}"#,
        r#"{"reason":7}"#,
        r#"{"reason":"a","reason":"b"}"#,
        "[",
        &format!(r#"{{"reason":"{}"}}"#, "x".repeat(501)),
    ] {
        let (status, body) = as_tenant("tok-a", "POST", &path, Some(bad));
        assert_eq!(
            (status, &body["error"]["code"]),
            (400, &json!("bad_request")),
            "{bad}"
        );
    }
    let response = server.call("GET", &path, &[("Authorization", "Bearer tok-a")], None);
    assert_eq!(response.status, 405);
    assert_eq!(response.header("allow"), Some("POST"));
    let (_, call) = as_tenant(
        "tok-a",
        "GET",
        &format!("/v1/tool-calls/{}", call_id(&busy)),
        None,
    );
    assert_eq!(
        call["cancel_requested_at"],
        Value::Null,
        "nothing was asked"
    );
    let (status, cancelled) = as_tenant("tok-a", "POST", &path, Some(r#"{"reason":"done"}"#));
    assert_eq!(
        (status, &cancelled["status"]),
        (200, &json!("cancelled")),
        "{cancelled}"
    );
    let detail = last_audit(&db.path, &call_id(&busy), "cancelled");
    assert_eq!(detail, "attempt 1 stopped, sent=false: its sleep was woken");
    let asked = &audit_rows(&db.path, &call_id(&busy))[2];
    assert_eq!(asked.1, "cancel_requested");
    assert!(
        asked.2.starts_with("by acme: done; attempt 1 runs under "),
        "{asked:?}"
    );
}

/// The bound on `stop_took`: the owner asks its tool to stop within one
/// heartbeat interval (its check's period; a notification is faster), and
/// the stop and its commit get a second more on a loaded machine.
fn within_a_heartbeat() -> f64 {
    (HEARTBEAT_EVERY + Duration::from_secs(1)).as_secs_f64()
}

/// The seconds from a call's `cancel_requested` audit row to its
/// `cancelled` one: how long its owner took to stop it.
fn stop_took(rows: &[(f64, String, String)]) -> f64 {
    let at = |event: &str| rows.iter().find(|r| r.1 == event).map(|r| r.0);
    let (asked, ended) = (at("cancel_requested"), at("cancelled"));
    ended.expect("cancelled") - asked.expect("asked")
}

/// Two processes on one SQLite file: the call runs in the first, the
/// cancel is answered by the second; the first learns of it by its check
/// (there is no notification between SQLite processes) within one
/// heartbeat interval, wakes the tool, and records `cancelled`, which the
/// second's waiting answer then shows.
#[test]
fn a_cancel_answered_by_another_process_on_the_file_stops_the_call() {
    let db = TempDb::new("cancel-two-processes");
    let runs = Server::start(&db, &[]);
    let answers = Server::start(&db, &[]);
    let id = call_id(&post(&runs, "sleep", &sleep(10)));
    wait_status(&runs, &id, "running");
    let (status, cancelled) = cancel(&answers, &id, "?wait=30", None);
    assert_eq!(status, 200, "{cancelled}");
    assert_cancelled(&cancelled, "cancelled on request");
    let rows = audit_rows(&db.path, &id);
    let took = stop_took(&rows);
    eprintln!("the other process stopped the call {took:.3} s after the cancel");
    assert!(took < within_a_heartbeat(), "{took} s: {rows:?}");
}

/// Two PostgreSQL nodes: the call runs on node A (it took it when it was
/// posted there), the cancel goes to node B; A hears of it (B's `NOTIFY`,
/// or at worst its own check every heartbeat) and stops the tool within one
/// heartbeat interval, and B's answer shows the call `cancelled`.
#[test]
fn a_cancel_sent_to_another_node_stops_the_call_there() {
    let url = PgServer::shared().fresh_database("cancel_nodes");
    // The nodes have no SQLite file; what a failure's dump would open (and
    // create) lies in a folder removed with the test, never in the checkout.
    let scratch = TempDir::new("idem-cancel-nodes").unwrap();
    let node = |name: &str| {
        let args = ["--port", "0", "--db", url.as_str()];
        let (proc, line) = Proc::start(name, SERVER_BIN, &args, "listening on http://");
        let base = format!("http://{}", address_after(&line, "listening on http://"));
        let db = scratch.join("not-used.db");
        Server { proc, base, db }
    };
    let (a, b) = (node("node-a"), node("node-b"));
    let id = call_id(&post(&a, "sleep", &sleep(10)));
    let running = wait_status(&a, &id, "running");
    let owner = running_owner(&url, &id);
    assert!(
        owner.starts_with(&format!("{}:", a.proc.child.id())),
        "{owner} {running}"
    );
    let (status, cancelled) = cancel(&b, &id, "?wait=30", None);
    assert_eq!(status, 200, "{cancelled}");
    assert_cancelled(&cancelled, "cancelled on request");
    let rows = pg_audit_rows(&url, &id);
    let took = stop_took(&rows);
    eprintln!("node A stopped the call {took:.3} s after node B recorded the cancel");
    assert!(took < within_a_heartbeat(), "{took} s: {rows:?}");
    let stopped = &rows.last().unwrap().2;
    assert_eq!(
        stopped,
        "attempt 1 stopped, sent=false: its sleep was woken"
    );
}

fn running_owner(url: &str, call_id: &str) -> String {
    let mut db = idempotent_tool::temp::postgres::connect(url);
    let row = db
        .query_one("SELECT owner FROM calls WHERE call_id = $1", &[&call_id])
        .unwrap();
    row.get::<_, Option<String>>(0).unwrap_or_default()
}

fn pg_audit_rows(url: &str, call_id: &str) -> Vec<(f64, String, String)> {
    let mut db = idempotent_tool::temp::postgres::connect(url);
    db.query(
        "SELECT ts, event, coalesce(detail, '') FROM audit WHERE call_id = $1 ORDER BY id",
        &[&call_id],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
    .collect()
}
