//! Approval gates on PostgreSQL, through two nodes (issue 42): a gated
//! charge created through node A waits; the same key through node B finds
//! the same waiting call; node A is killed (`kill -9`) and the primary
//! database dies too, its synchronous standby promoted — and the call
//! still waits on the new primary, holding nothing. Node B's approver
//! approves it: it runs once, its effect written once, and a second
//! decision through a restarted node A finds the first (`409
//! already_decided`).

use crate::support::auth::sha256_hex;
use crate::support::downstream::ToolsFile;
use crate::support::{eventually, AuthFile, Http, Server};
use idempotent_tool::temp::postgres::{PgServer, USER};
use idempotent_tool::temp::TempDir;
use serde_json::{json, Value};

const CALLER: &str = "pg-acme-caller";
const APPROVER: &str = "pg-acme-approver";

fn with(
    server: &Server,
    token: &str,
    method: &str,
    path: &str,
    key: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let bearer = format!("Bearer {token}");
    let mut headers = vec![("Authorization", bearer.as_str())];
    if let Some(key) = key {
        headers.push(("Idempotency-Key", key));
    }
    server.request(
        method,
        path,
        &headers,
        body.map(|b| b.to_string()).as_deref(),
    )
}

/// Until `server` answers the call (the database may still be failing
/// over), the call as it reads.
fn read_when_up(server: &Server, call_id: &str) -> Value {
    let mut call = Value::Null;
    eventually("the node answers again", || {
        let (status, read) = with(
            server,
            CALLER,
            "GET",
            &format!("/v1/tool-calls/{call_id}"),
            None,
            None,
        );
        call = read;
        matches!(status, 200 | 202)
    });
    call
}

#[test]
fn a_gated_charge_waits_across_a_node_kill_and_a_database_failover() {
    let primary = PgServer::start().unwrap_or_else(|e| panic!("{e}"));
    let first_url = primary.fresh_database("approvals");
    let dbname = first_url.rsplit('/').next().unwrap().to_string();
    let standby = primary.start_standby().unwrap_or_else(|e| panic!("{e}"));
    primary.set("synchronous_standby_names", "*");
    primary
        .wait_for_standby(true)
        .unwrap_or_else(|e| panic!("{e}"));
    let url = format!(
        "postgres://{USER}:{}@127.0.0.1:{},127.0.0.1:{}/{dbname}?target_session_attrs=read-write",
        primary.password(),
        primary.port(),
        standby.port()
    );
    let auth = AuthFile::with_tenants(
        json!({"acme": {"token_sha256": sha256_hex(CALLER),
                        "tokens": {"alice": {"token_sha256": sha256_hex(APPROVER), "role": "approver"}}}}),
        &[],
    );
    let tools = ToolsFile::write(&json!({"tools": {
        "charge": {"kind": "builtin", "approval": {"when": "always"}},
    }}));
    let scratch = TempDir::new("pg-approvals").unwrap();
    let flags = [
        "--auth-file",
        auth.path_str(),
        "--tools",
        tools.path_str(),
        "--lease-secs",
        "2",
    ];
    let mut node_a = Server::start_on_postgres(&url, &flags, &scratch);
    let node_b = Server::start_on_postgres(&url, &flags, &scratch);

    let charge = json!({"tool": "charge", "args": {"amount": 4200}});
    let (status, waiting) = with(
        &node_a,
        CALLER,
        "POST",
        "/v1/tool-calls",
        Some("big"),
        Some(charge.clone()),
    );
    assert_eq!(
        (status, waiting["status"].as_str()),
        (202, Some("awaiting_approval")),
        "{waiting}"
    );
    let call_id = waiting["call_id"].as_str().unwrap().to_string();
    let (status, same) = with(
        &node_b,
        CALLER,
        "POST",
        "/v1/tool-calls",
        Some("big"),
        Some(charge.clone()),
    );
    assert_eq!(
        (status, same["call_id"].as_str()),
        (202, Some(call_id.as_str()))
    );

    // Node A dies, and so does the primary; the standby takes over.
    node_a.kill();
    primary.kill_all().unwrap_or_else(|e| panic!("{e}"));
    standby.promote().unwrap_or_else(|e| panic!("{e}"));
    let after = read_when_up(&node_b, &call_id);
    assert_eq!(after["status"], "awaiting_approval", "{after}");
    assert_eq!(after["attempt"], 0, "it never ran, on either node: {after}");

    let approve = format!("/v1/tool-calls/{call_id}/approve");
    let (status, approved) = with(
        &node_b,
        APPROVER,
        "POST",
        &approve,
        None,
        Some(json!({"reason": "ok"})),
    );
    assert_eq!(status, 200, "{approved}");
    let mut done = Value::Null;
    eventually("the approved charge ran", || {
        done = read_when_up(&node_b, &call_id);
        done["status"] == "succeeded"
    });
    assert_eq!(done["result"]["charged"], 4200);

    // A restarted node A sees the outcome, and cannot decide it again.
    let node_a = Server::start_on_postgres(&url, &flags, &scratch);
    let (status, again) = with(&node_a, APPROVER, "POST", &approve, None, Some(json!({})));
    assert_eq!(
        (status, again["error"]["code"].as_str()),
        (409, Some("already_decided"))
    );
    let new_primary = standby.url_for(&dbname);
    let mut db = idempotent_tool::temp::postgres::connect(&new_primary);
    let effects: i64 = db
        .query_one("SELECT count(*) FROM idempotent_tool.effects", &[])
        .unwrap()
        .get(0);
    assert_eq!(effects, 1, "approved once, charged once");
    let decisions: i64 = db
        .query_one(
            "SELECT count(*) FROM idempotent_tool.audit WHERE event = 'approved'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(decisions, 1);
}
