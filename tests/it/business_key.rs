//! Business keys, the second layer (chapter 12.15.4), against the real
//! binary: a new idempotency key for an intent a live call already has
//! (same tenant, tool and business-key fields within the window) creates
//! nothing — `409 duplicate_intent` naming the call, or (`on_duplicate:
//! return`) that call replayed and marked; a failed call does not block; the
//! window ends; 32 concurrent new keys for one intent make exactly one call;
//! over MCP the same; `verify` catches a duplicate intent, `inspect`
//! reconciles effects by business key, and retention purges the rows; and
//! on PostgreSQL, two nodes on one database hold the same line.

use crate::support::downstream::ToolsFile;
use crate::support::{
    address_after, eventually, unique_name, Proc, Server, TempDb, INSPECT_BIN, SERVER_BIN,
};
use crate::support::{Counts, Http};
use idempotent_tool::client::HttpResponse;
use serde_json::{json, Value};
use std::process::Command;
use std::sync::{Arc, Barrier};

/// A command tool granting a coupon: fails when `args.fail` is true.
fn grant_tool(on_duplicate: &str, window_secs: u64) -> Value {
    json!({
        "kind": "command",
        "argv": ["/bin/sh", "-c",
                 "if grep -q '\"fail\":true'; then echo refused >&2; exit 1; fi; echo '{\"granted\":true}'"],
        "max_attempts": 1,
        "description": "Grant a coupon to a user for a campaign.",
        "annotations": {"destructiveHint": false, "openWorldHint": false},
        "input_schema": {
            "type": "object",
            "required": ["user_id", "coupon_template"],
            "properties": {
                "user_id": {"type": "string"},
                "coupon_template": {"type": "string"},
                "campaign": {"type": "string"},
                "note": {"type": "string"},
                "fail": {"type": "boolean"}
            },
            "additionalProperties": false
        },
        "business_key": {
            "fields": ["/user_id", "/coupon_template", "/campaign"],
            "window_secs": window_secs,
            "on_duplicate": on_duplicate
        }
    })
}

fn tools(window_secs: u64) -> ToolsFile {
    ToolsFile::write(&json!({"tools": {
        "grant": grant_tool("reject", window_secs),
        "grant_or_return": grant_tool("return", window_secs),
        "charge": {"kind": "builtin"}
    }}))
}

fn start(db: &TempDb, tools: &ToolsFile, extra: &[&str]) -> Server {
    let mut args = vec!["--tools", tools.path_str()];
    args.extend_from_slice(extra);
    Server::start(db, &args)
}

fn intent(user: &str) -> Value {
    json!({"user_id": user, "coupon_template": "T-10OFF", "campaign": "spring"})
}

/// POST `tool` with `args` under a fresh key, waiting for it to settle.
fn post(server: &Server, tool: &str, args: Value) -> HttpResponse {
    let key = unique_name("bk");
    let body = json!({"tool": tool, "args": args}).to_string();
    server.call(
        "POST",
        "/v1/tool-calls?wait=20",
        &[("Idempotency-Key", &key)],
        Some(&body),
    )
}

fn mcp_call(server: &Server, tool: &str, args: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": tool, "arguments": args,
                   "_meta": {"dev.idempotent-tool/idempotency-key": unique_name("mcp-bk")}}});
    let response = server.call(
        "POST",
        "/mcp",
        &[("MCP-Protocol-Version", "2025-11-25")],
        Some(&body.to_string()),
    );
    assert_eq!(response.status, 200);
    response.json()["result"].clone()
}

/// `verify` with the tools file, so `grant`'s effects are expected.
fn verify(db: &TempDb, tools: &ToolsFile) -> std::process::Output {
    Command::new(SERVER_BIN)
        .args(["verify", "--db", db.path_str(), "--tools", tools.path_str()])
        .output()
        .expect("run verify")
}

/// `reject`: the second key for a live intent is `409 duplicate_intent`
/// with the first call's id and `Location`; another user's intent is new; a
/// missing business-key field is `400`; over MCP, a tool execution error
/// naming the call. One call and one effect per intent.
#[test]
fn a_new_key_for_a_live_intent_is_rejected_naming_the_call() {
    let db = TempDb::new("bk-reject");
    let tools = tools(86_400);
    let server = start(&db, &tools, &[]);
    let first = post(&server, "grant", intent("u1"));
    assert_eq!(first.status, 200);
    let first_id = first.json()["call_id"].as_str().unwrap().to_string();
    let mut again = intent("u1");
    again["note"] = "clicked twice".into();
    let dup = post(&server, "grant", again);
    let body = dup.json();
    assert_eq!(dup.status, 409, "{body}");
    assert_eq!(body["error"]["code"], "duplicate_intent");
    assert_eq!(body["error"]["call_id"], first_id.as_str());
    let location = format!("/v1/tool-calls/{first_id}");
    assert_eq!(dup.header("Location"), Some(location.as_str()));
    assert_eq!(post(&server, "grant", intent("u2")).status, 200);
    let missing = post(
        &server,
        "grant",
        json!({"user_id": "u3", "coupon_template": "T"}),
    );
    assert_eq!(missing.status, 400);
    assert!(missing.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("business key"));

    let over_mcp = mcp_call(&server, "grant", intent("u1"));
    assert_eq!(over_mcp["isError"], true, "{over_mcp}");
    let text = over_mcp["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("duplicate_intent") && text.contains(&first_id),
        "{text}"
    );
    assert_eq!((db.calls(), db.effects()), (2, 2));
    let list = server.call(
        "POST",
        "/mcp",
        &[("MCP-Protocol-Version", "2025-11-25")],
        Some(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#),
    );
    let grant = list.json()["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "grant")
        .cloned()
        .unwrap();
    assert_eq!(
        grant["annotations"]["idempotentHint"], true,
        "a business key: repeats add nothing"
    );
    assert_eq!(
        grant["annotations"]["destructiveHint"], false,
        "set in the tools file"
    );
    let checked = verify(&db, &tools);
    assert!(
        checked.status.success(),
        "{}",
        String::from_utf8_lossy(&checked.stdout)
    );
}

/// A failed call does not block a new intent; `return` answers the live
/// call itself, marked `Idempotent-Replayed: true` and `duplicate_intent`,
/// over HTTP and over MCP.
#[test]
fn a_failed_intent_does_not_block_and_return_replays_the_live_call_marked() {
    let db = TempDb::new("bk-return");
    let tools = tools(86_400);
    let server = start(&db, &tools, &[]);
    let mut failing = intent("u1");
    failing["fail"] = true.into();
    let failed = post(&server, "grant", failing);
    assert_eq!(failed.json()["status"], "failed", "{}", failed.json());
    let retried = post(&server, "grant", intent("u1"));
    assert_eq!(retried.json()["status"], "succeeded");

    let live = post(&server, "grant_or_return", intent("u9")).json();
    let dup = post(&server, "grant_or_return", intent("u9"));
    assert_eq!(dup.status, 200);
    assert_eq!(dup.header("Idempotent-Replayed"), Some("true"));
    let body = dup.json();
    assert_eq!(
        (body["call_id"].clone(), body["duplicate_intent"].clone()),
        (live["call_id"].clone(), json!(true))
    );
    assert_eq!(body["result"], live["result"]);
    let over_mcp = mcp_call(&server, "grant_or_return", intent("u9"));
    let state = &over_mcp["structuredContent"];
    assert_eq!(state["call_id"], live["call_id"], "{over_mcp}");
    assert_eq!(
        (state["replayed"].clone(), state["duplicate_intent"].clone()),
        (json!(true), json!(true))
    );
    assert_eq!(db.calls(), 3, "failed, retried, and the one live u9 call");
    assert_eq!(db.effects(), 2);
}

/// 32 threads released together, each with its own idempotency key and
/// the same business key: exactly one call is created, every other answer
/// is `409 duplicate_intent` naming it. `verify` is clean, and catches a
/// second live call written behind the service's back; `inspect` shows the
/// intent's one effect.
#[test]
fn concurrent_new_keys_for_one_intent_make_exactly_one_call() {
    const THREADS: usize = 32;
    let db = TempDb::new("bk-race");
    let tools = tools(86_400);
    let server = Arc::new(start(&db, &tools, &[]));
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|i| {
            let (server, barrier) = (Arc::clone(&server), Arc::clone(&barrier));
            std::thread::spawn(move || {
                let body = json!({"tool": "grant", "args": intent("racer")}).to_string();
                let key = format!("race-{i}-{}", unique_name("k"));
                barrier.wait();
                let r = server.call(
                    "POST",
                    "/v1/tool-calls",
                    &[("Idempotency-Key", &key)],
                    Some(&body),
                );
                (r.status, r.json())
            })
        })
        .collect();
    let answers: Vec<(u16, Value)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let (winner, refused) = one_created(&answers);
    for (status, body) in refused {
        assert_eq!(*status, 409, "{body}");
        assert_eq!(body["error"]["code"], "duplicate_intent");
        assert_eq!(body["error"]["call_id"], winner);
    }
    assert_eq!(db.calls(), 1);
    server.wait_terminal(winner.as_str().unwrap());
    assert!(verify(&db, &tools).status.success());

    let ledger = Command::new(INSPECT_BIN)
        .args(["--db", db.path_str(), "--query", "by_business_key"])
        .output()
        .unwrap();
    let ledger = String::from_utf8(ledger.stdout).unwrap();
    assert_eq!(
        ledger.trim(),
        "anonymous|grant|[\"racer\",\"T-10OFF\",\"spring\"]|1|1|1|",
        "{ledger}"
    );

    // Behind the service's back: a second succeeded call with the same intent.
    let conn = server.sql();
    conn.execute_batch(
        "INSERT INTO calls (call_id, tenant, idem_key, fingerprint, tool, args_json, status, attempt,
                            effect_id, created_at, updated_at)
         SELECT 'c_ffffffffffffffff', tenant, 'forged', fingerprint, tool, args_json, 'succeeded', 1,
                'eff_ffffffffffffffff', created_at + 1, updated_at + 1 FROM calls;
         INSERT INTO effects (effect_id, call_id, tool, created_at)
         VALUES ('eff_ffffffffffffffff', 'c_ffffffffffffffff', 'grant', 0);
         INSERT INTO business_keys (call_id, tenant, tool, bkey, created_at, expires_at, holding)
         SELECT 'c_ffffffffffffffff', tenant, tool, bkey, created_at + 1, expires_at + 1, 0
           FROM business_keys;",
    )
    .unwrap();
    let report = verify(&db, &tools);
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(!report.status.success(), "{text}");
    assert!(text.contains("duplicate_intent"), "{text}");
}

/// The window ends: a new key for the same intent is accepted once
/// `window_secs` has passed, and retention purges business-key rows with
/// their calls.
#[test]
fn the_window_ends_and_retention_purges_the_rows() {
    let db = TempDb::new("bk-window");
    let tools = tools(1);
    let server = start(&db, &tools, &["--key-ttl", "1"]);
    let started = std::time::Instant::now();
    assert_eq!(post(&server, "grant", intent("w")).status, 200);
    let refused = post(&server, "grant", intent("w"));
    if started.elapsed().as_secs_f64() < 0.9 {
        assert_eq!(refused.status, 409, "still within the window");
    }
    eventually("a new intent after the window", || {
        post(&server, "grant", intent("w")).status == 200
    });
    eventually("the purge of calls and their business keys", || {
        db.count("SELECT count(*) FROM business_keys") == 0 && db.calls() == 0
    });
}

/// A node of the service on the PostgreSQL database `url`, with `tools`.
fn start_node(url: &str, tools: &ToolsFile, scratch: &idempotent_tool::temp::TempDir) -> Server {
    let args = ["--port", "0", "--db", url, "--tools", tools.path_str()];
    let (proc, line) = Proc::start("node", SERVER_BIN, &args, "listening on http://");
    let base = format!("http://{}", address_after(&line, "listening on http://"));
    let db = scratch.join("not-used.db");
    Server { proc, base, db }
}

/// On PostgreSQL, two nodes on one database: 16 threads, alternating
/// nodes, each with its own key and the same intent, make exactly one call;
/// an MCP call to the other node with a new key is a duplicate intent; and
/// `verify --db postgres://...` finds nothing wrong.
#[test]
fn two_nodes_on_postgres_let_one_call_per_intent_through() {
    const THREADS: usize = 16;
    let pg = idempotent_tool::temp::postgres::PgServer::shared();
    let url = pg.fresh_database("business_keys");
    let scratch = idempotent_tool::temp::TempDir::new("idem-bk-pg").unwrap();
    let tools = tools(86_400);
    let nodes = Arc::new([
        start_node(&url, &tools, &scratch),
        start_node(&url, &tools, &scratch),
    ]);
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|i| {
            let (nodes, barrier) = (Arc::clone(&nodes), Arc::clone(&barrier));
            std::thread::spawn(move || {
                let body = json!({"tool": "grant", "args": intent("pg-racer")}).to_string();
                let key = format!("pg-race-{i}");
                barrier.wait();
                let r = nodes[i % 2].call(
                    "POST",
                    "/v1/tool-calls",
                    &[("Idempotency-Key", &key)],
                    Some(&body),
                );
                (r.status, r.json())
            })
        })
        .collect();
    let answers: Vec<(u16, Value)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let (winner, refused) = one_created(&answers);
    for (status, body) in refused {
        assert_eq!(
            (*status, &body["error"]["call_id"]),
            (409, &winner),
            "{body}"
        );
    }
    nodes[0].wait_terminal(winner.as_str().unwrap());
    let over_mcp = mcp_call(&nodes[1], "grant", intent("pg-racer"));
    assert_eq!(over_mcp["isError"], true, "{over_mcp}");
    assert_eq!(nodes[1].stats()["calls"], 1);
    crate::support::assert_verify_passes_with_business_keys(&url, &tools);
}

/// Of racing answers, exactly one created the call (`200` or `202`): its
/// `call_id`, and every other answer for the caller to check.
fn one_created(answers: &[(u16, Value)]) -> (Value, Vec<&(u16, Value)>) {
    let (created, refused): (Vec<_>, Vec<_>) = answers
        .iter()
        .partition(|(status, _)| *status == 202 || *status == 200);
    assert_eq!(created.len(), 1, "{answers:?}");
    (created[0].1["call_id"].clone(), refused)
}
