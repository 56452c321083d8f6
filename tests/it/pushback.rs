//! Pushback under overload, against the real binary: past `--max-pending`
//! calls queued for a worker, a POST that would create a call is refused
//! `503 overloaded` with `Retry-After` before anything is written, the
//! refusal is counted in `/metrics`, MCP is told the same refusal (its code
//! and retry hint in the JSON-RPC error's `data`), the calls already
//! accepted still finish, and the refused key succeeds when retried once the
//! backlog drains.

use crate::support::exposition;
use crate::support::{charge, eventually, Server, TempDb};
use crate::support::{Counts, Http};
use serde_json::{json, Value};

fn metric(server: &Server, name: &str) -> f64 {
    let response = server.call("GET", "/metrics", &[], None);
    assert_eq!(response.status, 200);
    let text = String::from_utf8(response.body).unwrap();
    let scrape = exposition::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    scrape
        .value(&format!("idempotent_tool_{name}"), &[])
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

fn post_accepted(server: &Server, key: &str, body: &Value) -> String {
    let (status, call) = server.post(key, body);
    assert_eq!(status, 202, "{key}: {call}");
    call["call_id"].as_str().unwrap().to_string()
}

/// One worker held by a slow call, two calls queued behind it with
/// `--max-pending 2`: the next new key is refused `503 overloaded` with
/// `Retry-After`, no row is written for it, the counter moves, the accepted
/// calls all succeed, and the refused key is accepted once the queue drained.
#[test]
fn a_new_call_past_max_pending_is_refused_and_accepted_work_still_finishes() {
    let db = TempDb::new("idem-pushback");
    let server = Server::start(
        &db,
        &[
            "--workers",
            "1",
            "--max-pending",
            "2",
            "--access-log",
            "off",
        ],
    );
    let slow = post_accepted(
        &server,
        "slow",
        &json!({"tool": "sleep", "args": {"seconds": 3}}),
    );
    eventually("the worker to take the slow call", || {
        metric(&server, "busy_workers") == 1.0
    });
    let queued: Vec<String> = ["queued-1", "queued-2"]
        .iter()
        .map(|key| post_accepted(&server, key, &charge(1)))
        .collect();
    assert_eq!(metric(&server, "queued_calls"), 2.0);

    let refused = server.call(
        "POST",
        "/v1/tool-calls",
        &[("Idempotency-Key", "refused")],
        Some(&charge(1).to_string()),
    );
    assert_eq!(refused.status, 503);
    assert_eq!(refused.header("Retry-After"), Some("1"));
    assert_eq!(
        refused.json()["error"]["code"],
        "overloaded",
        "{}",
        refused.json()
    );
    assert_eq!(metric(&server, "overloaded_total"), 1.0);
    assert_eq!(
        db.count("SELECT count(*) FROM calls WHERE idem_key = 'refused'"),
        0,
        "a refused call must leave nothing behind"
    );

    // MCP is told the same refusal: the same code, the same message, and
    // when to come back, in the JSON-RPC error's `data`.
    let mcp = mcp_call(&server, "refused-over-mcp");
    let error = &mcp["error"];
    assert_eq!(error["data"]["code"], "overloaded", "{mcp}");
    assert_eq!(error["data"]["retry_after_secs"], 1, "{mcp}");
    assert_eq!(
        error["message"],
        refused.json()["error"]["message"],
        "{mcp}"
    );
    assert_eq!(metric(&server, "overloaded_total"), 2.0);
    assert_eq!(
        db.count("SELECT count(*) FROM calls WHERE idem_key = 'refused-over-mcp'"),
        0
    );

    for call_id in std::iter::once(&slow).chain(&queued) {
        assert_eq!(server.wait_terminal(call_id)["status"], "succeeded");
    }
    eventually("the queue to drain", || {
        metric(&server, "queued_calls") == 0.0
    });
    let (status, call) = server.post("refused", &charge(1));
    assert_eq!(status, 202, "{call}");
    let retried = call["call_id"].as_str().unwrap();
    assert_eq!(server.wait_terminal(retried)["status"], "succeeded");
    assert_eq!(metric(&server, "overloaded_total"), 2.0);
}

/// `tools/call` of `charge` under `key`, as a 2025-11-25 client sends it.
fn mcp_call(server: &Server, key: &str) -> Value {
    let body = json!({
        "jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "charge", "arguments": {"amount": 1},
                   "_meta": {"dev.idempotent-tool/idempotency-key": key}},
    });
    let response = server.call(
        "POST",
        "/mcp",
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", "2025-11-25"),
        ],
        Some(&body.to_string()),
    );
    assert_eq!(response.status, 200);
    response.json()
}
