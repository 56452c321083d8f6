//! An approval decided by the MCP client that made the call (issue 42, item
//! 6), through the real binary under 2026-07-28: the client is asked the
//! policy's questions round by round, each answer recorded before the reply
//! (`input_answered`), a question answered once is never asked again, and
//! the last answer approves the call, which then runs once with the answers
//! in its request; a declined question denies it and nothing runs; under
//! tasks a subset of answers leaves only the other questions open; on
//! PostgreSQL the rounds may be answered through any node. And the
//! refusals: where a person must decide (the tool's policy, or the tenant),
//! the client is asked nothing and an answer it sends anyway is `-32602`,
//! never a decision; content its question's schema refuses records nothing.

use crate::support::auth::sha256_hex;
use crate::support::downstream::ToolsFile;
use crate::support::mcp_stateless::rpc;
use crate::support::{audit_events, eventually, AuthFile, Counts, Http, Server, TempDb};
use serde_json::{json, Value};

const FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/mcp-conformance/tools.json"
);
const ANSWERS_SH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/mcp-conformance/answers.sh"
);
const KEY: &str = "dev.idempotent-tool/idempotency-key";
/// Where a content tool's answer carries the call's state.
const CALL: &str = "dev.idempotent-tool/call";

/// What the client says it takes: elicitation, and tasks when asked.
fn capabilities(tasks: bool) -> Value {
    match tasks {
        true => json!({"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}}),
        false => json!({"elicitation": {}}),
    }
}

fn accept(content: Value) -> Value {
    json!({"action": "accept", "content": content})
}

fn the_one_call(db: &TempDb) -> (String, String) {
    let calls = db.count("SELECT count(*) FROM calls");
    assert_eq!(calls, 1, "one call");
    crate::support::open_db(&db.path)
        .query_row("SELECT call_id, status FROM calls", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap()
}

/// Two rounds without tasks: each answer is recorded as it comes, the
/// state names the round, an answer re-sent to a round already answered
/// asks nothing twice, and the last answer runs the tool once with both.
#[test]
fn a_client_answers_every_round_and_the_tool_runs_once_with_the_answers() {
    let db = TempDb::new("mcp-approvals-rounds");
    let server = Server::start(&db, &["--tools", FIXTURES]);
    let caps = capabilities(false);
    let tool = "test_input_required_result_multi_round";
    let call = |extra: Value| {
        let mut params = json!({"name": tool, "arguments": {}, "_meta": {KEY: "rounds-1"}});
        for (k, v) in extra.as_object().unwrap() {
            params[k] = v.clone();
        }
        rpc(&server, None, &caps, "tools/call", params)["result"].clone()
    };
    let first = call(json!({}));
    assert_eq!(first["resultType"], "input_required", "{first}");
    let step1 = &first["inputRequests"]["step1"];
    assert_eq!(step1["method"], "elicitation/create");
    assert_eq!(step1["params"]["message"], "Step 1: What is your name?");
    let state1 = first["requestState"].as_str().unwrap().to_string();

    let answered_1 = json!({"inputResponses": {"step1": accept(json!({"name": "Alice"}))},
                            "requestState": state1});
    let second = call(answered_1.clone());
    assert_eq!(second["resultType"], "input_required", "{second}");
    assert!(second["inputRequests"].get("step1").is_none(), "{second}");
    assert!(second["inputRequests"].get("step2").is_some(), "{second}");
    let state2 = second["requestState"].as_str().unwrap().to_string();
    assert_ne!(state1, state2);
    // The first round's answer re-sent changes nothing and asks step 2 again.
    let again = call(answered_1);
    assert_eq!(again["inputRequests"], second["inputRequests"], "{again}");
    let (call_id, status) = the_one_call(&db);
    assert_eq!(status, "awaiting_approval");
    assert_eq!(db.effects(), 0, "nothing runs before the last answer");

    let done = call(
        json!({"inputResponses": {"step2": accept(json!({"color": "blue"}))},
                           "requestState": state2}),
    );
    assert_eq!(done["resultType"], "complete", "{done}");
    let text = done["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("Alice") && text.contains("blue"), "{done}");
    let events = audit_events(&db.path, &call_id);
    let answered = events.iter().filter(|e| *e == "input_answered").count();
    assert_eq!(answered, 2, "{events:?}");
    assert!(events.contains(&"approved".to_string()), "{events:?}");
    let source: String = crate::support::open_db(&db.path)
        .query_row("SELECT source FROM approvals", [], |r| r.get(0))
        .unwrap();
    assert_eq!(source, "client");
    assert_eq!(the_one_call(&db).1, "succeeded");
}

/// A declined question denies the call: it never runs, and the key (or the
/// same answers re-sent) reads it `denied`.
#[test]
fn a_declined_question_denies_the_call_and_nothing_runs() {
    let db = TempDb::new("mcp-approvals-decline");
    let server = Server::start(&db, &["--tools", FIXTURES]);
    let caps = capabilities(false);
    let params = json!({"name": "test_input_required_result_elicitation", "arguments": {},
                        "_meta": {KEY: "decline-1"}});
    let asked = rpc(&server, None, &caps, "tools/call", params.clone())["result"].clone();
    assert_eq!(asked["resultType"], "input_required", "{asked}");
    let mut declined = params.clone();
    declined["inputResponses"] = json!({"user_name": {"action": "decline"}});
    declined["requestState"] = asked["requestState"].clone();
    let answer = rpc(&server, None, &caps, "tools/call", declined)["result"].clone();
    assert_eq!(answer["isError"], true, "{answer}");
    assert_eq!(answer["_meta"][CALL]["status"], "denied", "{answer}");
    let replay = rpc(&server, None, &caps, "tools/call", params)["result"].clone();
    assert_eq!(replay["_meta"][CALL]["status"], "denied", "{replay}");
    assert_eq!(the_one_call(&db).1, "denied");
    assert_eq!(db.effects(), 0);
}

/// Under tasks: `tasks/get` shows both open questions; `tasks/update` with
/// one leaves the task `input_required` with only the other; the second
/// answer completes it, its result saying both answers.
#[test]
fn under_tasks_a_subset_of_answers_leaves_only_the_others_open() {
    let db = TempDb::new("mcp-approvals-tasks");
    let server = Server::start(&db, &["--tools", FIXTURES]);
    let caps = capabilities(true);
    let params = json!({"name": "multi_input", "arguments": {}, "_meta": {KEY: "multi-1"}});
    let created = rpc(&server, None, &caps, "tools/call", params)["result"].clone();
    assert_eq!(created["resultType"], "task", "{created}");
    let task = created["taskId"].as_str().unwrap().to_string();
    let get = || rpc(&server, None, &caps, "tasks/get", json!({"taskId": task}))["result"].clone();
    let keys = |task: &Value| {
        let mut keys: Vec<String> = task["inputRequests"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        keys.sort();
        keys
    };
    let waiting = get();
    assert_eq!(waiting["status"], "input_required", "{waiting}");
    assert_eq!(keys(&waiting), ["first", "second"]);
    // The ack is empty: `resultType` and the server's `_meta` only.
    let update = |key: &str, content: Value| {
        let params = json!({"taskId": task, "inputResponses": {key: accept(content)}});
        let ack = rpc(&server, None, &caps, "tasks/update", params)["result"].clone();
        assert_eq!(ack["resultType"], "complete", "{ack}");
        assert!(
            ack.get("status").is_none() && ack.get("taskId").is_none(),
            "{ack}"
        );
    };
    update("first", json!({"name": "Ann"}));
    let partial = get();
    assert_eq!(partial["status"], "input_required", "{partial}");
    assert_eq!(keys(&partial), ["second"]);
    update("second", json!({"confirm": true}));
    eventually("the task to complete", || get()["status"] == "completed");
    let text = get()["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(text.contains("Ann") && text.contains("confirm"), "{text}");
}

/// Where a person must decide — the tool's policy says so, or the tenant
/// does not let its clients approve — the client is asked nothing, and an
/// answer it sends anyway is `-32602` and decides nothing; content a
/// question's schema refuses is `-32602` and records nothing. A person's
/// approval then runs the call.
#[test]
fn where_a_person_must_decide_the_clients_answer_is_refused() {
    let db = TempDb::new("mcp-approvals-refused");
    let ask_client = |mcp_client: bool| {
        json!({"kind": "command", "argv": [ANSWERS_SH, "ran with"], "mcp_result": "content",
               "tasks": "forbidden",
               "approval": {"when": "always", "mcp_client": mcp_client}})
    };
    let mut named = ask_client(true);
    named["approval"]["inputs"] = json!([{"user_name": {"message": "Your name?",
        "schema": {"type": "object", "properties": {"name": {"type": "string"}},
                   "required": ["name"]}}}]);
    let tools = ToolsFile::write(&json!({"tools": {
        "people_only": ask_client(false),
        "client_may": ask_client(true),
        "named": named,
    }}));
    let tenants = json!({
        "strict": {"token_sha256": sha256_hex("strict-token"),
                   "tokens": {"alice": {"token_sha256": sha256_hex("alice-token"),
                                        "role": "approver"}}},
        "open": {"token_sha256": sha256_hex("open-token"), "mcp_client_may_approve": true},
    });
    let auth = AuthFile::with_tenants(tenants, &[]);
    let server = Server::start(
        &db,
        &["--tools", tools.path_str(), "--auth-file", auth.path_str()],
    );
    let caps = capabilities(false);
    let cases = [
        ("open", "people_only"),  // the policy admits people only
        ("strict", "client_may"), // the tenant does not let its clients approve
    ];
    for (tenant, tool) in cases {
        let token = format!("{tenant}-token");
        let params = json!({"name": tool, "arguments": {}, "_meta": {KEY: format!("{tool}-1")}});
        let first = rpc(&server, Some(&token), &caps, "tools/call", params.clone());
        let first = &first["result"];
        assert_ne!(
            first["resultType"], "input_required",
            "{tenant}/{tool}: {first}"
        );
        assert_eq!(
            first["_meta"][CALL]["status"], "awaiting_approval",
            "{first}"
        );
        let mut answered = params;
        answered["inputResponses"] = json!({"approval": {"action": "accept"}});
        let refused = rpc(&server, Some(&token), &caps, "tools/call", answered);
        assert_eq!(
            refused["error"]["code"], -32602,
            "{tenant}/{tool}: {refused}"
        );
    }
    let statuses = db.count("SELECT count(*) FROM calls WHERE status = 'awaiting_approval'");
    assert_eq!(statuses, 2, "nothing was decided");
    assert_eq!(
        db.count("SELECT count(*) FROM approvals WHERE source IS NOT NULL"),
        0
    );

    // Content its question's schema refuses records nothing.
    let params = json!({"name": "named", "arguments": {}, "_meta": {KEY: "named-1"}});
    let asked = rpc(
        &server,
        Some("open-token"),
        &caps,
        "tools/call",
        params.clone(),
    );
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    let mut wrong = params;
    wrong["inputResponses"] = json!({"user_name": accept(json!({"name": 7}))});
    let refused = rpc(&server, Some("open-token"), &caps, "tools/call", wrong);
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert_eq!(
        db.count("SELECT count(*) FROM audit WHERE event = 'input_answered'"),
        0
    );

    // A person approves the strict tenant's call: it runs with no answers.
    let call_id: String = crate::support::open_db(&db.path)
        .query_row(
            "SELECT call_id FROM calls WHERE tool = 'client_may'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let path = format!("/v1/tool-calls/{call_id}/approve");
    let headers = [
        ("Authorization", "Bearer alice-token"),
        ("Content-Type", "application/json"),
    ];
    let (status, body) = server.request("POST", &path, &headers, Some("{}"));
    assert_eq!(status, 200, "{body}");
    eventually("the approved call to succeed", || {
        db.count("SELECT count(*) FROM calls WHERE tool = 'client_may' AND status = 'succeeded'")
            == 1
    });
}

/// On PostgreSQL, across two nodes: the first round is asked by node A,
/// answered through node B, the second answered through node A — each
/// node reads the answers the other recorded, nothing is asked twice, and
/// the tool runs once with both answers.
#[test]
fn on_postgres_the_rounds_may_be_answered_through_any_node() {
    use idempotent_tool::temp::postgres::PgServer;
    let pg = PgServer::start().unwrap_or_else(|e| panic!("{e}"));
    let url = pg.fresh_database("mcp_rounds");
    let scratch = idempotent_tool::temp::TempDir::new("pg-mcp-rounds").unwrap();
    let node_a = Server::start_on_postgres(&url, &["--tools", FIXTURES], &scratch);
    let node_b = Server::start_on_postgres(&url, &["--tools", FIXTURES], &scratch);
    let caps = capabilities(false);
    let tool = "test_input_required_result_multi_round";
    let call = |node: &Server, extra: Value| {
        let mut params = json!({"name": tool, "arguments": {}, "_meta": {KEY: "pg-rounds-1"}});
        for (k, v) in extra.as_object().unwrap() {
            params[k] = v.clone();
        }
        rpc(node, None, &caps, "tools/call", params)["result"].clone()
    };
    let first = call(&node_a, json!({}));
    assert!(first["inputRequests"].get("step1").is_some(), "{first}");
    let second = call(
        &node_b,
        json!({"inputResponses": {"step1": accept(json!({"name": "Alice"}))},
               "requestState": first["requestState"]}),
    );
    assert!(second["inputRequests"].get("step2").is_some(), "{second}");
    // Node A, asked again with no answer, asks step 2 only: B's answer is read.
    let asked_again = call(&node_a, json!({}));
    assert_eq!(asked_again["inputRequests"], second["inputRequests"]);
    let done = call(
        &node_a,
        json!({"inputResponses": {"step2": accept(json!({"color": "green"}))},
               "requestState": second["requestState"]}),
    );
    let text = done["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("Alice") && text.contains("green"), "{done}");
    let call_id = done["_meta"][CALL]["call_id"].as_str().unwrap().to_string();
    let (status, audit) = node_b.get(&format!("/v1/tool-calls/{call_id}/audit"));
    assert_eq!(status, 200, "{audit}");
    let events: Vec<&str> = audit["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["event"].as_str())
        .collect();
    let answered = events.iter().filter(|e| **e == "input_answered").count();
    let runs = events.iter().filter(|e| **e == "succeeded").count();
    assert_eq!((answered, runs), (2, 1), "{events:?}");
    assert!(events.contains(&"approved"), "{events:?}");
}
