//! Approval gates through the real service on SQLite (issue 42): a gated
//! charge waits — across a `kill -9` and a restart — holding no worker; a
//! same-key retry finds the same waiting call and asks nothing twice; a
//! viewer's or the caller's approval is refused `403 role_required`; an
//! approver's approval runs it once and is single-use (`409
//! already_decided` with the first decision) and audited by name; a denial
//! and an expiry end it `denied` with no effect; each role reaches what it
//! may and no more; `/metrics` and the log show what waits; and a tenant's
//! webhook receives a signed notification, retried after a failure, while
//! the log keeps its URL and secret out.

use crate::support::auth::sha256_hex;
use crate::support::downstream::{Downstream, ToolsFile};
use crate::support::exposition::{self, Exposition};
use crate::support::{eventually, AuthFile, Counts, Http, Server, TempDb, SERVER_BIN};
use serde_json::{json, Value};
use std::process::Command;

/// The tokens of the tests' one tenant, `acme`, by role; and `ops`, an admin.
const CALLER: &str = "acme-caller-token";
const VIEWER: &str = "acme-viewer-token";
const OPERATOR: &str = "acme-operator-token";
const APPROVER: &str = "acme-alice-token";
const ADMIN: &str = "ops-admin-token";

/// The webhook secret of `acme`, as Standard Webhooks' libraries make them.
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// `acme` (its own token a caller; bob a viewer, olga an operator, alice
/// an approver) and `ops` (an admin); `webhook`: acme's, if any.
fn auth_file(webhook: Option<&str>) -> AuthFile {
    let mut acme = json!({
        "token_sha256": sha256_hex(CALLER),
        "tokens": {
            "bob": {"token_sha256": sha256_hex(VIEWER), "role": "viewer"},
            "olga": {"token_sha256": sha256_hex(OPERATOR), "role": "operator"},
            "alice": {"token_sha256": sha256_hex(APPROVER), "role": "approver"},
        }
    });
    if let Some(url) = webhook {
        acme["webhook"] = json!({"url": url, "secret_file": "acme.whsec"});
    }
    let tenants = json!({"acme": acme, "ops": {"token_sha256": sha256_hex(ADMIN), "admin": true}});
    AuthFile::with_tenants(tenants, &[("acme.whsec", &format!("{SECRET}\n"))])
}

/// `charge` gated above 100; `wire`, a charge every call of which waits,
/// its request open `timeout_secs`.
fn tools_file(timeout_secs: u64) -> ToolsFile {
    ToolsFile::write(&json!({"tools": {
        "charge": {"kind": "builtin",
                   "approval": {"when": {"pointer": "/amount", "above": 100}}},
        "send_email": {"kind": "builtin",
                       "approval": {"when": "always", "timeout_secs": timeout_secs}},
    }}))
}

/// The service with `auth` and `tools`, on `db`.
fn start(db: &TempDb, auth: &AuthFile, tools: &ToolsFile) -> Server {
    Server::start(
        db,
        &["--auth-file", auth.path_str(), "--tools", tools.path_str()],
    )
}

/// One request with `token`.
fn with(
    server: &Server,
    token: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> (u16, Value) {
    let bearer = format!("Bearer {token}");
    let mut all = vec![("Authorization", bearer.as_str())];
    all.extend_from_slice(headers);
    server.request(method, path, &all, body.map(|b| b.to_string()).as_deref())
}

fn post(server: &Server, token: &str, key: &str, body: &Value) -> (u16, Value) {
    with(
        server,
        token,
        "POST",
        "/v1/tool-calls",
        &[("Idempotency-Key", key)],
        Some(body.clone()),
    )
}

fn decide(server: &Server, token: &str, call_id: &str, verb: &str, body: Value) -> (u16, Value) {
    let path = format!("/v1/tool-calls/{call_id}/{verb}");
    with(server, token, "POST", &path, &[], Some(body))
}

fn get(server: &Server, token: &str, path: &str) -> (u16, Value) {
    with(server, token, "GET", path, &[], None)
}

/// The call, read until its status is `status`.
fn wait_status(server: &Server, call_id: &str, status: &str) -> Value {
    let mut call = Value::Null;
    eventually(&format!("call {call_id} {status}"), || {
        call = get(server, CALLER, &format!("/v1/tool-calls/{call_id}?wait=1")).1;
        call["status"] == status
    });
    call
}

fn id(call: &Value) -> String {
    call["call_id"].as_str().expect("a call id").to_string()
}

fn charge(amount: i64) -> Value {
    json!({"tool": "charge", "args": {"amount": amount}})
}

/// `GET /metrics` as the admin, parsed strictly.
fn scrape(server: &Server) -> Exposition {
    let bearer = format!("Bearer {ADMIN}");
    let response = server.call("GET", "/metrics", &[("Authorization", &bearer)], None);
    let text = String::from_utf8(response.body).expect("a UTF-8 scrape");
    exposition::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// `idempotent-tool verify --db` on the live file: every invariant holds.
fn assert_verified(db: &TempDb) {
    let out = Command::new(SERVER_BIN)
        .args(["verify", "--db", db.path_str()])
        .output()
        .expect("run verify");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        report.contains("every approval request agrees with its call"),
        "{report}"
    );
}

#[test]
fn a_gated_charge_waits_across_a_restart_and_runs_once_approved() {
    let db = TempDb::new("approvals-restart");
    let (auth, tools) = (auth_file(None), tools_file(86_400));
    let mut server = start(&db, &auth, &tools);

    // Below the limit it runs at once; above, it waits.
    let (status, small) = post(&server, CALLER, "small", &charge(50));
    assert!(matches!(status, 200 | 202), "{status} {small}");
    wait_status(&server, &id(&small), "succeeded");
    let (status, big) = post(&server, CALLER, "big", &charge(500));
    assert_eq!(
        (status, big["status"].as_str()),
        (202, Some("awaiting_approval")),
        "{big}"
    );
    let call_id = id(&big);
    // A same-key retry finds the same waiting call: one request, not two.
    let retried = server.call(
        "POST",
        "/v1/tool-calls",
        &[
            ("Authorization", &format!("Bearer {CALLER}")),
            ("Idempotency-Key", "big"),
        ],
        Some(&charge(500).to_string()),
    );
    assert_eq!(retried.status, 202);
    assert_eq!(retried.header("Idempotent-Replayed"), Some("true"));
    assert_eq!(retried.json()["call_id"], call_id.as_str());
    let (_, queue) = get(&server, VIEWER, "/v1/approvals");
    assert_eq!(queue["approvals"].as_array().unwrap().len(), 1, "{queue}");
    assert_eq!(queue["approvals"][0]["args"], json!({"amount": 500}));
    assert_eq!(db.count("SELECT count(*) FROM approvals"), 1);
    let log = server
        .proc
        .wait_for_stderr("\"event\":\"approval_requested\"");
    assert_eq!(
        log.matches("\"event\":\"approval_requested\"").count(),
        1,
        "{log}"
    );

    // It waits across a kill -9 and a restart, holding no lease.
    server.kill();
    let server = start(&db, &auth, &tools);
    let (status, waiting) = get(&server, CALLER, &format!("/v1/tool-calls/{call_id}"));
    assert_eq!(
        (status, waiting["status"].as_str()),
        (202, Some("awaiting_approval"))
    );
    assert_eq!(waiting["attempt"], 0);
    assert_eq!(db.effects(), 1, "only the small charge ran");

    // Neither a viewer nor the caller may approve it; nor may the approver make calls.
    for token in [VIEWER, CALLER, OPERATOR] {
        let (status, refused) = decide(&server, token, &call_id, "approve", json!({}));
        assert_eq!(status, 403, "{refused}");
        assert_eq!(refused["error"]["code"], "role_required");
        assert_eq!(refused["error"]["role"], "approver");
    }
    let (status, refused) = post(&server, APPROVER, "by-alice", &charge(5));
    assert_eq!(
        (status, refused["error"]["role"].as_str()),
        (403, Some("caller"))
    );

    // The approver's approval, bound to the request reviewed, runs it once.
    let (_, request) = get(
        &server,
        APPROVER,
        &format!("/v1/tool-calls/{call_id}/approval"),
    );
    let fingerprint = request["fingerprint"].as_str().unwrap().to_string();
    let (status, mismatch) = decide(
        &server,
        APPROVER,
        &call_id,
        "approve",
        json!({"fingerprint": "0".repeat(64)}),
    );
    assert_eq!(
        (status, mismatch["error"]["code"].as_str()),
        (409, Some("fingerprint_mismatch"))
    );
    let (status, approved) = decide(
        &server,
        APPROVER,
        &call_id,
        "approve",
        json!({"reason": "invoice 7 checked", "fingerprint": fingerprint}),
    );
    assert_eq!(status, 200, "{approved}");
    assert_eq!(approved["approval"]["decision"]["by"], "alice@acme");
    let done = wait_status(&server, &call_id, "succeeded");
    assert_eq!(done["result"]["charged"], 500);
    assert_eq!(db.effects(), 2);

    // Single-use: a second decision, either way, finds the first.
    for (verb, body) in [("approve", json!({})), ("deny", json!({"reason": "late"}))] {
        let (status, again) = decide(&server, APPROVER, &call_id, verb, body);
        assert_eq!(status, 409, "{again}");
        assert_eq!(again["error"]["code"], "already_decided");
        assert_eq!(again["error"]["decision"], "approved");
        assert_eq!(again["approval"]["decision"]["reason"], "invoice 7 checked");
    }
    let (_, audit) = get(&server, VIEWER, &format!("/v1/tool-calls/{call_id}/audit"));
    let approved_rows: Vec<&Value> = audit["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event"] == "approved")
        .collect();
    assert_eq!(approved_rows.len(), 1, "{audit}");
    assert_eq!(
        approved_rows[0]["detail"],
        "by alice@acme (person): invoice 7 checked"
    );
    assert_eq!(db.effects(), 2, "approved once, charged once");
    assert_verified(&db);
}

#[test]
fn a_denial_and_an_expiry_end_it_denied_with_no_effect() {
    let db = TempDb::new("approvals-denied");
    let (auth, tools) = (auth_file(None), tools_file(1));
    let server = start(&db, &auth, &tools);
    let (_, big) = post(&server, CALLER, "deny-me", &charge(900));
    let call_id = id(&big);
    let rerun = format!("/v1/tool-calls/{call_id}/rerun");
    let (status, early) = with(&server, OPERATOR, "POST", &rerun, &[], Some(json!({})));
    assert_eq!(
        (status, early["error"]["code"].as_str()),
        (409, Some("call_in_flight")),
        "a call awaiting approval has not ended: {early}"
    );
    let (status, refused) = decide(&server, APPROVER, &call_id, "deny", json!({}));
    assert_eq!(status, 400, "a denial needs a reason: {refused}");
    let (status, denied) = decide(
        &server,
        APPROVER,
        &call_id,
        "deny",
        json!({"reason": "too much"}),
    );
    assert_eq!(status, 200, "{denied}");
    assert_eq!(denied["call"]["status"], "denied");
    assert_eq!(denied["call"]["error"]["code"], "approval_denied");
    assert_eq!(denied["call"]["error"]["message"], "too much");
    // The key replays the denial; nothing ran.
    let (status, replay) = post(&server, CALLER, "deny-me", &charge(900));
    assert_eq!((status, replay["status"].as_str()), (200, Some("denied")));
    let (status, late) = decide(&server, APPROVER, &call_id, "approve", json!({}));
    assert_eq!(
        (status, late["error"]["decision"].as_str()),
        (409, Some("denied"))
    );
    // A person's refusal is not re-run, even by an operator; the call stays denied.
    let (status, again) = with(&server, OPERATOR, "POST", &rerun, &[], Some(json!({})));
    assert_eq!(
        (
            status,
            again["error"]["code"].as_str(),
            again["error"]["status"].as_str()
        ),
        (409, Some("call_denied"), Some("denied")),
        "{again}"
    );
    assert_eq!(again["call"]["status"], "denied");
    let (_, still) = get(&server, CALLER, &format!("/v1/tool-calls/{call_id}"));
    assert_eq!(
        (still["status"].as_str(), still["attempt"].as_i64()),
        (Some("denied"), Some(0))
    );

    // No decision within its second: expiry ends it denied.
    let email = json!({"tool": "send_email", "args": {"to": "a@example.com", "subject": "hi", "body": "b"}});
    let (status, waiting) = post(&server, CALLER, "expire-me", &email);
    assert_eq!(
        (status, waiting["status"].as_str()),
        (202, Some("awaiting_approval")),
        "{waiting}"
    );
    let expired = wait_status(&server, &id(&waiting), "denied");
    assert_eq!(expired["error"]["code"], "approval_expired");
    let (status, _) = decide(&server, APPROVER, &id(&waiting), "approve", json!({}));
    assert_eq!(status, 409);
    server
        .proc
        .wait_for_stderr("\"event\":\"approval_expired\"");
    assert_eq!(db.effects(), 0);
    assert_eq!(db.count("SELECT count(*) FROM calls WHERE attempt > 0"), 0);
    assert_verified(&db);
}

#[test]
fn each_role_reaches_what_it_may_and_the_queue_and_metrics_show_what_waits() {
    let db = TempDb::new("approvals-roles");
    let (auth, tools) = (auth_file(None), tools_file(86_400));
    let server = start(&db, &auth, &tools);
    let (_, waiting) = post(&server, CALLER, "w", &charge(1000));
    let call_id = id(&waiting);
    // Reading: every role.
    for token in [VIEWER, OPERATOR, APPROVER, CALLER] {
        let (status, call) = get(&server, token, &format!("/v1/tool-calls/{call_id}"));
        assert_eq!(
            (status, call["status"].as_str()),
            (202, Some("awaiting_approval"))
        );
    }
    // Making calls: the caller (and an admin) only; MCP likewise.
    for token in [VIEWER, OPERATOR] {
        let (status, refused) = post(&server, token, "no", &charge(1));
        assert_eq!(
            (status, refused["error"]["role"].as_str()),
            (403, Some("caller"))
        );
        let (status, _) = with(&server, token, "POST", "/mcp", &[], Some(json!({})));
        assert_eq!(status, 403);
    }
    // Cancelling: not a viewer.
    let cancel = format!("/v1/tool-calls/{call_id}/cancel");
    let (status, refused) = with(&server, VIEWER, "POST", &cancel, &[], None);
    assert_eq!(
        (status, refused["error"]["role"].as_str()),
        (403, Some("operator"))
    );
    // The admin sees every tenant's queue; a tenant only its own.
    let (_, queue) = get(&server, ADMIN, "/v1/approvals?tenant=*");
    assert_eq!(queue["approvals"][0]["tenant"], "acme");
    let (_, own) = get(&server, ADMIN, "/v1/approvals");
    assert_eq!(
        own["approvals"],
        json!([]),
        "the admin's own tenant has none"
    );
    let (_, overview) = get(&server, VIEWER, "/v1/overview");
    assert_eq!(overview["approvals"]["awaiting"], 1);
    assert_eq!(
        overview["you"],
        json!({"tenant": "acme", "principal": "bob", "role": "viewer"})
    );
    // /metrics: the waiting count and the oldest wait's age.
    let metrics = scrape(&server);
    let awaiting = [("status", "awaiting_approval")];
    assert_eq!(metrics.value("idempotent_tool_calls", &awaiting), Some(1.0));
    let oldest = metrics.value("idempotent_tool_oldest_approval_wait_seconds", &[]);
    assert!(oldest.is_some_and(|age| age > 0.0), "{oldest:?}");
    assert_eq!(
        metrics.value("idempotent_tool_approvals_requested_total", &[]),
        Some(1.0)
    );
    // The operator cancels it: its request closes, and a decision comes too late.
    let (status, cancelled) = with(
        &server,
        OPERATOR,
        "POST",
        &cancel,
        &[],
        Some(json!({"reason": "dup"})),
    );
    assert_eq!(
        (status, cancelled["status"].as_str()),
        (200, Some("cancelled"))
    );
    let (status, late) = decide(&server, APPROVER, &call_id, "approve", json!({}));
    assert_eq!(
        (status, late["error"]["decision"].as_str()),
        (409, Some("cancelled"))
    );
    // The admin decides any tenant's call.
    let (_, again) = post(&server, CALLER, "w2", &charge(1000));
    let (status, approved) = decide(&server, ADMIN, &id(&again), "approve", json!({}));
    assert_eq!(
        (status, approved["approval"]["decision"]["by"].as_str()),
        (200, Some("ops"))
    );
    wait_status(&server, &id(&again), "succeeded");
}

#[test]
fn a_tenants_webhook_gets_a_signed_notification_retried_after_a_failure() {
    let db = TempDb::new("approvals-webhook");
    let secret_dir = idempotent_tool::temp::TempDir::new("webhook-secret").unwrap();
    let secret_file = secret_dir.join("whsec");
    std::fs::write(&secret_file, SECRET).unwrap();
    let downstream = Downstream::start(&[
        "--webhook-secret-file",
        secret_file.to_str().unwrap(),
        "--fail-first",
        "1",
    ]);
    let url = downstream.url("/hooks?token=sekrit-in-url");
    let (auth, tools) = (auth_file(Some(&url)), tools_file(86_400));
    let server = start(&db, &auth, &tools);
    let (_, waiting) = post(&server, CALLER, "hooked", &charge(777));
    let call_id = id(&waiting);
    let mut received = Value::Null;
    eventually("the webhook delivered", || {
        received = downstream.get("/webhooks");
        received["webhooks"][0]["verified"] == true
    });
    let hook = &received["webhooks"][0];
    assert_eq!(
        hook["deliveries"], 1,
        "recorded once, after one refused delivery: {hook}"
    );
    assert_eq!(hook["body"]["type"], "approval.requested");
    assert_eq!(hook["body"]["data"]["call_id"], call_id.as_str());
    assert_eq!(hook["body"]["data"]["args"], json!({"amount": 777}));
    assert_eq!(
        hook["body"]["data"]["approve_path"],
        format!("/v1/tool-calls/{call_id}/approve")
    );
    let log = server.proc.wait_for_stderr("\"event\":\"webhook_failed\"");
    assert!(
        log.contains("\"why\":\"status\"") && log.contains("\"status\":503"),
        "{log}"
    );
    // The URL (a chat tool's credential) and the secret never reach the log.
    for secret in ["sekrit-in-url", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"] {
        assert!(!server.stderr().contains(secret), "{secret} in the log");
    }
    let metrics = scrape(&server);
    let outcome = |o: &str| {
        metrics.value(
            "idempotent_tool_webhook_deliveries_total",
            &[("outcome", o)],
        )
    };
    assert_eq!(
        (outcome("retried"), outcome("delivered")),
        (Some(1.0), Some(1.0))
    );
    eventually("the outbox emptied", || {
        db.count("SELECT count(*) FROM notifications") == 0
    });
}

/// One MCP request (2025-06-18) with `token`; the JSON-RPC `result`.
fn mcp(server: &Server, token: &str, method: &str, params: Value) -> Value {
    let bearer = format!("Bearer {token}");
    let headers = [
        ("Authorization", bearer.as_str()),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", "2025-06-18"),
    ];
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let response = server.call("POST", "/mcp", &headers, Some(&body.to_string()));
    let answer = response.json();
    assert_eq!(response.status, 200, "{method}: {answer}");
    answer["result"].clone()
}

/// Over MCP, without tasks: `tools/list` shows a tool's policy; a gated
/// `tools/call` answers at once (not after `--mcp-wait-secs`), not an
/// error, `awaiting_approval` with its handle; the same key asks nothing
/// twice; once denied, the handle reads `denied` as an error.
#[test]
fn mcp_shows_the_policy_and_answers_a_gated_call_at_once_with_its_handle() {
    let db = TempDb::new("approvals-mcp");
    let (auth, tools) = (auth_file(None), tools_file(86_400));
    let server = start(&db, &auth, &tools);
    let listed = mcp(&server, CALLER, "tools/list", json!({}));
    let charge_tool = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "charge")
        .unwrap()
        .clone();
    assert_eq!(
        charge_tool["_meta"]["dev.idempotent-tool/approval"]["when"],
        json!([{"pointer": "/amount", "above": 100.0}])
    );
    let params = json!({"name": "charge", "arguments": {"amount": 999},
                        "_meta": {"dev.idempotent-tool/idempotency-key": "mcp-big"}});
    let started = std::time::Instant::now();
    let answer = mcp(&server, CALLER, "tools/call", params.clone());
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "answered at once"
    );
    assert_eq!(answer["isError"], false, "{answer}");
    let state = &answer["structuredContent"];
    assert_eq!(state["status"], "awaiting_approval", "{answer}");
    let call_id = state["call_id"].as_str().unwrap().to_string();
    let again = mcp(&server, CALLER, "tools/call", params);
    assert_eq!(again["structuredContent"]["call_id"], call_id.as_str());
    assert_eq!(again["structuredContent"]["replayed"], true);
    assert_eq!(db.count("SELECT count(*) FROM approvals"), 1);
    decide(
        &server,
        APPROVER,
        &call_id,
        "deny",
        json!({"reason": "not via chat"}),
    );
    let read = mcp(
        &server,
        CALLER,
        "tools/call",
        json!({"name": "get_tool_call", "arguments": {"call_id": call_id}}),
    );
    assert_eq!(read["isError"], true, "{read}");
    assert_eq!(read["structuredContent"]["status"], "denied");
    assert_eq!(
        read["structuredContent"]["error"]["code"],
        "approval_denied"
    );
    assert_eq!(db.effects(), 0);
}

/// The outbox is durable: a notification its endpoint refused is still due
/// after a `kill -9`, and the restarted service delivers it — the same
/// message id — to the endpoint the tenant names now.
#[test]
fn a_notification_left_in_the_outbox_is_delivered_after_a_kill() {
    let db = TempDb::new("approvals-outbox");
    let secret_dir = idempotent_tool::temp::TempDir::new("webhook-secret").unwrap();
    let secret_file = secret_dir.join("whsec");
    std::fs::write(&secret_file, SECRET).unwrap();
    let secret = secret_file.to_str().unwrap();
    let refusing = Downstream::start(&["--webhook-secret-file", secret, "--status", "503"]);
    let tools = tools_file(86_400);
    let auth = auth_file(Some(&refusing.url("/hooks")));
    let mut server = start(&db, &auth, &tools);
    let (_, waiting) = post(&server, CALLER, "kept", &charge(555));
    server.proc.wait_for_stderr("\"event\":\"webhook_failed\"");
    // Killed once an attempt is settled (due again in seconds), not inside
    // one (then held from other deliverers for a minute: at least once).
    eventually("a failed attempt settled", || {
        let soon = idempotent_tool::store::now() + 30.0;
        db.count(&format!(
            "SELECT count(*) FROM notifications WHERE attempts >= 1 AND next_attempt_at < {soon}"
        )) == 1
    });
    server.kill();
    assert_eq!(db.count("SELECT count(*) FROM notifications"), 1);
    let msg_id: String = server
        .sql()
        .query_row("SELECT msg_id FROM notifications", [], |r| r.get(0))
        .unwrap();

    let receiving = Downstream::start(&["--webhook-secret-file", secret]);
    let auth = auth_file(Some(&receiving.url("/hooks")));
    let _server = start(&db, &auth, &tools);
    let mut received = Value::Null;
    eventually("the kept notification delivered", || {
        received = receiving.get("/webhooks");
        received["webhooks"][0]["verified"] == true
    });
    assert_eq!(received["webhooks"][0]["msg_id"], msg_id.as_str());
    assert_eq!(
        received["webhooks"][0]["body"]["data"]["call_id"],
        id(&waiting).as_str()
    );
    eventually("the outbox emptied", || {
        db.count("SELECT count(*) FROM notifications") == 0
    });
}
