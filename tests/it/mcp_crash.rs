//! A crash under an MCP `tools/call`: the server is killed with `kill -9`
//! while the call is running and its client is waiting (the response is
//! lost); the client re-sends the same `tools/call` with the same `_meta`
//! key to a restarted server and gets the call's outcome — one call, one
//! effect, the result the first attempt would have produced.

use crate::support::{eventually, Server, TempDb, DEADLINE};
use crate::support::{Counts, Http};
use serde_json::{json, Value};

const KEY: &str = "agent-run-7/step-3/charge";

fn tools_call(args: &Value) -> String {
    json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "charge", "arguments": args,
                   "_meta": {"dev.idempotent-tool/idempotency-key": KEY}}})
    .to_string()
}

/// `(status, attempt)` of the only call.
fn the_call(db: &TempDb) -> Option<(String, i64)> {
    let conn = crate::support::open_db(&db.path);
    conn.query_row("SELECT status, attempt FROM calls", [], |r| {
        Ok((r.get(0)?, r.get(1)?))
    })
    .ok()
}

/// `kill -9` while the tool runs (stalled after running, before its
/// completion commits); the re-sent `tools/call` with the same key attaches
/// to the recovered call, which runs again under the same `effect_id` and
/// commits exactly one effect.
#[test]
fn a_resent_tools_call_after_kill_9_returns_the_one_outcome() {
    let db = TempDb::new("mcp-crash");
    // The stall hook holds the first attempt after the tool ran; it fires on
    // the first attempt only.
    let args = json!({"amount": 25, "_stall_ms": 60_000});
    let mut first = Server::start(&db, &["--chaos", "--mcp-wait-secs", "30"]);
    let base = first.base.clone();
    let body = tools_call(&args);
    let waiting = std::thread::spawn(move || {
        idempotent_tool::client::request_once(
            &base,
            "POST",
            "/mcp",
            &[("MCP-Protocol-Version", "2025-11-25")],
            Some(body.as_bytes()),
            Some(DEADLINE),
        )
    });
    eventually("the call to be running", || {
        the_call(&db).is_some_and(|(status, attempt)| status == "running" && attempt == 1)
    });
    first.kill();
    let lost = waiting.join().unwrap();
    assert!(
        lost.as_ref().map_or(true, |r| r.status != 200),
        "the client never got an answer: {:?}",
        lost.map(|r| r.status)
    );
    assert_eq!(db.effects(), 0, "the first attempt never committed");

    let second = Server::start(&db, &["--chaos", "--mcp-wait-secs", "30"]);
    let response = second.call(
        "POST",
        "/mcp",
        &[("MCP-Protocol-Version", "2025-11-25")],
        Some(&tools_call(&args)),
    );
    assert_eq!(response.status, 200);
    let answer = response.json();
    let state = &answer["result"]["structuredContent"];
    assert_eq!(state["status"], "succeeded", "{answer}");
    assert_eq!(state["replayed"], true, "it attached to the existing call");
    assert_eq!(state["idempotency_key"], KEY);
    assert_eq!(state["attempt"], 2);
    let call_id = state["call_id"].as_str().unwrap();
    let (_, call) = second.get(&format!("/v1/tool-calls/{call_id}"));
    let effect_id = call["effect_id"].as_str().unwrap_or_default();
    assert_eq!(
        idempotent_tool::store::call_id_of_effect(effect_id).as_deref(),
        Some(call_id),
        "{call}"
    );
    assert_eq!(
        state["result"],
        json!({"charged": 25, "effect_id": effect_id})
    );
    assert_eq!((db.calls(), db.effects()), (1, 1));

    // Re-sent once more: the same outcome, nothing runs.
    let again = second.call(
        "POST",
        "/mcp",
        &[("MCP-Protocol-Version", "2025-11-25")],
        Some(&tools_call(&args)),
    );
    assert_eq!(again.json()["result"]["structuredContent"], *state);
    assert_eq!((db.calls(), db.effects()), (1, 1));
}
