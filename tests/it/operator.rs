//! The operator's actions through the real binary, on both backends: a
//! re-run keeps the call id and the effect id, and the reference downstream
//! sees that effect id again and applies it once; a bulk cancel of "every
//! call this filter matches" acts on each call once, across a `kill -9` of
//! the process working it (SQLite: a restart on the same file; PostgreSQL:
//! another node takes the job over); the list by error code with its total,
//! and the overview's failures by code; a paused tool's calls wait and run
//! after the resume (PostgreSQL: paused on one node, posted to another);
//! and who may do which (`api::operate`).

use crate::support::auth::sha256_hex;
use crate::support::downstream::{Downstream, ToolsFile};
use crate::support::{count, eventually, AuthFile, Http, Server, TempDb, TempDir, DEADLINE};
use idempotent_tool::temp::postgres::{connect, PgServer};
use serde_json::{json, Value};
use std::time::Instant;

/// Where a test's services keep their calls: a SQLite file, or a fresh
/// database of the test PostgreSQL.
enum Db {
    Sqlite(TempDb),
    Postgres(String, TempDir),
}

impl Db {
    fn sqlite(name: &str) -> Db {
        Db::Sqlite(TempDb::new(name))
    }

    fn postgres(name: &str) -> Db {
        let url = PgServer::shared().fresh_database(name);
        Db::Postgres(url, TempDir::new("idem-operator").unwrap())
    }

    /// A service on it (several may share it).
    fn start(&self, extra: &[&str]) -> Server {
        match self {
            Db::Sqlite(db) => Server::start(db, extra),
            Db::Postgres(url, scratch) => Server::start_on_postgres(url, extra, scratch),
        }
    }

    /// The one number `sql` selects.
    fn count(&self, sql: &str) -> i64 {
        match self {
            Db::Sqlite(db) => count(db.path(), sql),
            Db::Postgres(url, _) => connect(url).query_one(sql, &[]).unwrap().get(0),
        }
    }
}

fn id(call: &Value) -> String {
    call["call_id"].as_str().expect("a call id").to_string()
}

fn post_json(server: &Server, path: &str, key: Option<&str>, body: &Value) -> (u16, Value) {
    let headers: Vec<(&str, &str)> = key.map(|k| ("Idempotency-Key", k)).into_iter().collect();
    server.request("POST", path, &headers, Some(&body.to_string()))
}

#[test]
fn a_rerun_keeps_the_call_and_its_effect_id_on_sqlite() {
    rerun_keeps_the_call_and_its_effect_id(&Db::sqlite("operator-rerun"));
}

#[test]
fn a_rerun_keeps_the_call_and_its_effect_id_on_postgres() {
    rerun_keeps_the_call_and_its_effect_id(&Db::postgres("operator_rerun"));
}

/// A refund the downstream refuses once (`400`: a failure the client may
/// not retry) is re-run: same call id, same effect id, a new attempt; the
/// downstream sees the effect id twice and applies it once; the key then
/// answers the success; a second re-run is refused.
fn rerun_keeps_the_call_and_its_effect_id(db: &Db) {
    let downstream = Downstream::start(&["--fail-first", "1", "--status", "400"]);
    let tools = ToolsFile::write(&json!({"tools": {
        "refund": {"kind": "http", "url": downstream.url("/refunds"),
                   "input_schema": {"type": "object", "required": ["amount"],
                                    "properties": {"amount": {"type": "integer"}}}},
        "charge": {"kind": "builtin"},
    }}));
    let server = db.start(&["--tools", tools.path_str()]);
    let body = json!({"tool": "refund", "args": {"amount": 5}});
    let (_, accepted) = server.post("refund-1", &body);
    let failed = server.wait_terminal(&id(&accepted));
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(failed["error"]["code"], "downstream_rejected");
    let effect_id = failed["effect_id"].as_str().unwrap().to_string();

    let path = format!("/v1/tool-calls/{}/rerun", id(&failed));
    let (status, again) = post_json(&server, &path, None, &json!({"reason": "fixed upstream"}));
    assert_eq!(status, 202, "{again}");
    assert_eq!(
        (again["call_id"].clone(), again["effect_id"].clone()),
        (failed["call_id"].clone(), failed["effect_id"].clone())
    );
    assert_eq!(
        (again["status"].as_str(), again["error"].clone()),
        (Some("pending"), Value::Null)
    );
    let done = server.wait_terminal(&id(&again));
    assert_eq!(
        (done["status"].as_str(), done["attempt"].as_i64()),
        (Some("succeeded"), Some(2)),
        "{done}"
    );
    let seen = downstream.requests_for(&effect_id);
    assert_eq!(
        (seen["requests"].as_i64(), seen["effects"].as_i64()),
        (Some(2), Some(1)),
        "{seen}"
    );

    let (status, replay) = server.post("refund-1", &body);
    assert_eq!(
        (status, replay["status"].as_str()),
        (200, Some("succeeded")),
        "the key answers the new outcome"
    );
    let (status, refused) = post_json(&server, &path, None, &json!({}));
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (409, Some("call_succeeded")),
        "{refused}"
    );
    assert_eq!(refused["error"]["call_id"], done["call_id"]);
    let (_, audit) = server.get(&format!("/v1/tool-calls/{}/audit", id(&done)));
    let rerun = audit["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event"] == "rerun")
        .expect("a rerun row");
    assert!(
        rerun["detail"].as_str().unwrap().contains("fixed upstream"),
        "{rerun}"
    );
    assert_eq!(
        audit["effect"]["effect_id"].as_str(),
        Some(effect_id.as_str()),
        "{audit}"
    );
    let (status, missing) = post_json(
        &server,
        "/v1/tool-calls/c_0000000000000000/rerun",
        None,
        &json!({}),
    );
    assert_eq!(
        (status, missing["error"]["code"].as_str()),
        (404, Some("not_found"))
    );
}

#[test]
fn a_bulk_cancel_survives_a_kill_of_its_process_on_sqlite() {
    // The process restarted on the same file after the kill.
    bulk_cancel_goes_on_after_a_kill(&Db::sqlite("operator-bulk"), false);
}

#[test]
fn a_bulk_cancel_is_taken_over_by_another_node_on_postgres() {
    // Another node, already running when the first one is killed.
    bulk_cancel_goes_on_after_a_kill(&Db::postgres("operator_bulk"), true);
}

/// 800 waiting calls of the paused `sleep`, a bulk cancel of "every pending
/// sleep", its process killed (`kill -9`) mid-job: the job goes on (by a
/// second process, started before the kill or after it) below its cursor
/// until done, and every call is cancelled exactly once — one `cancelled`
/// audit row each, the job's counts exact.
fn bulk_cancel_goes_on_after_a_kill(db: &Db, second_before_kill: bool) {
    const CALLS: usize = 800;
    let mut first = db.start(&["--lease-secs", "1"]);
    let (status, _) = post_json(&first, "/v1/tools/sleep/pause", None, &json!({}));
    assert_eq!(status, 200);
    for n in 0..CALLS {
        let (status, call) = first.post(
            &format!("wait-{n}"),
            &json!({"tool": "sleep", "args": {"seconds": 1}}),
        );
        assert_eq!(
            (status, call["waiting_for"].as_str()),
            (202, Some("paused")),
            "{call}"
        );
    }
    let filter = json!({"action": "cancel", "filter": {"status": "pending", "tool": "sleep"}, "reason": "runaway"});
    let (status, job) = post_json(&first, "/v1/bulk-actions", Some("bulk-1"), &filter);
    assert_eq!(status, 202, "{job}");
    let job_path = format!("/v1/bulk-actions/{}", job["job_id"].as_str().unwrap());
    let (status, again) = post_json(&first, "/v1/bulk-actions", Some("bulk-1"), &filter);
    assert_eq!(
        (status, &again["job_id"]),
        (200, &job["job_id"]),
        "the key's job"
    );
    eventually("the job under way", || {
        let (_, job) = first.get(&job_path);
        job["matched"].as_i64().unwrap_or(0) > 0
    });
    let early = second_before_kill.then(|| db.start(&["--lease-secs", "1"]));
    first.kill();
    let second = early.unwrap_or_else(|| db.start(&["--lease-secs", "1"]));
    let started = Instant::now();
    let done = loop {
        let (_, job) = second.get(&job_path);
        if job["state"] == "done" {
            break job;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "the job never finished: {job}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let n = CALLS as i64;
    assert_eq!(
        (
            done["matched"].as_i64(),
            done["changed"].as_i64(),
            done["skipped"].as_i64()
        ),
        (Some(n), Some(n), Some(0)),
        "{done}"
    );
    assert_eq!(
        db.count("SELECT count(*) FROM calls WHERE status = 'cancelled'"),
        n
    );
    assert_eq!(
        db.count("SELECT count(*) FROM audit WHERE event = 'cancelled'"),
        n,
        "each call cancelled once"
    );
    assert!(
        db.count("SELECT max(claims) FROM bulk_jobs") >= 2,
        "taken again after the kill"
    );
}

#[test]
fn the_list_finds_calls_by_error_code_and_the_overview_groups_failures_on_sqlite() {
    list_by_error_code_and_failures_by_code(&Db::sqlite("operator-errors"));
}

/// PostgreSQL keeps the code in a column of its own (`calls_error`, its
/// trigger) and the failures by code in `error_counts`: the same answers.
#[test]
fn the_list_finds_calls_by_error_code_and_the_overview_groups_failures_on_postgres() {
    list_by_error_code_and_failures_by_code(&Db::postgres("operator_errors"));
}

/// Three failures and a success: the list by `error_code` finds exactly the
/// failures, newest first, with their exact total; another code finds none;
/// a malformed code is `400`; the overview groups the failures by code over
/// the shortest and the longest range.
fn list_by_error_code_and_failures_by_code(db: &Db) {
    let server = db.start(&[]);
    // Failures are counted from the first reading on (`rates.since`); on
    // PostgreSQL it is taken once the rates thread has a connection.
    eventually("the first reading", || {
        !server.get("/v1/overview").1["rates"]["since"].is_null()
    });
    let mut failed = Vec::new();
    for n in 0..3 {
        let (_, call) = server.post(&format!("f{n}"), &json!({"tool": "fail", "args": {}}));
        failed.push(id(&server.wait_terminal(&id(&call))));
    }
    let (_, ok) = server.post("ok", &json!({"tool": "charge", "args": {"amount": 1}}));
    server.wait_terminal(&id(&ok));
    let (status, page) = server.get("/v1/tool-calls?error_code=tool_failed&total=true");
    assert_eq!(status, 200, "{page}");
    let ids: Vec<String> = page["calls"].as_array().unwrap().iter().map(id).collect();
    failed.reverse();
    assert_eq!(ids, failed, "newest first, only the failures");
    assert_eq!(page["total"], json!({"calls": 3, "exact": true}));
    assert_eq!(
        db.count("SELECT count(*) FROM calls WHERE error_code = 'tool_failed'"),
        3,
        "the column the list's index holds"
    );
    let (_, none) = server.get("/v1/tool-calls?error_code=downstream_timeout&total=true");
    assert_eq!(none["total"]["calls"], 0);
    let (status, refused) = server.get("/v1/tool-calls?error_code=Not-A-Code");
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (400, Some("bad_request"))
    );
    for range in ["15m", "7d"] {
        let (_, overview) = server.get(&format!("/v1/overview?range={range}"));
        assert_eq!(
            overview["failures_by_code"],
            json!([{"error_code": "tool_failed", "calls": 3}]),
            "{range}: {overview}"
        );
        assert_eq!(overview["rates"]["created"].as_array().unwrap().len(), 90);
    }
    let (status, _) = server.get("/v1/overview?range=2w");
    assert_eq!(status, 400);
}

#[test]
fn a_paused_tools_calls_wait_and_run_after_the_resume_on_sqlite() {
    let db = Db::sqlite("operator-pause");
    let server = db.start(&[]);
    paused_calls_wait_then_run(&server, &server);
}

#[test]
fn a_tool_paused_on_one_node_holds_on_another_on_postgres() {
    let db = Db::postgres("operator_pause");
    let (a, b) = (db.start(&[]), db.start(&[]));
    paused_calls_wait_then_run(&a, &b);
}

/// Paused through `pauser`, `charge`'s calls posted to `poster` are
/// accepted and wait (`waiting_for: paused`) while a later call of another
/// tool runs; the pause shows in `/v1/tools`, MCP `tools/list` and
/// `/metrics`; after the
/// resume they run.
fn paused_calls_wait_then_run(pauser: &Server, poster: &Server) {
    let (status, paused) = post_json(
        pauser,
        "/v1/tools/charge/pause",
        None,
        &json!({"reason": "bank maintenance"}),
    );
    assert_eq!(
        (status, paused["paused"].as_bool()),
        (200, Some(true)),
        "{paused}"
    );
    eventually("the pause known where the calls are posted", || {
        let (_, tools) = poster.get("/v1/tools");
        tools["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "charge" && t["paused"] == true)
    });
    let charge_in_mcp = |server: &Server| {
        mcp_tools(server)
            .into_iter()
            .find(|t| t["name"] == "charge")
            .expect("charge is listed")
    };
    let listed = charge_in_mcp(poster);
    assert_eq!(
        listed["_meta"]["dev.idempotent-tool/paused"]["reason"], "bank maintenance",
        "{listed}"
    );
    let waiting: Vec<String> = (0..3)
        .map(|n| {
            let (status, call) = poster.post(
                &format!("charge-{n}"),
                &json!({"tool": "charge", "args": {"amount": 1}}),
            );
            assert_eq!(
                (status, call["status"].as_str()),
                (202, Some("pending")),
                "{call}"
            );
            id(&call)
        })
        .collect();
    let (_, later) = poster.post(
        "email",
        &json!({"tool": "send_email", "args": {"to": "a@example.com", "subject": "hi"}}),
    );
    assert_eq!(poster.wait_terminal(&id(&later))["status"], "succeeded");
    for call_id in &waiting {
        let (_, call) = poster.get(&format!("/v1/tool-calls/{call_id}"));
        assert_eq!(
            (
                call["status"].as_str(),
                call["attempt"].as_i64(),
                call["waiting_for"].as_str()
            ),
            (Some("pending"), Some(0), Some("paused")),
            "{call}"
        );
    }
    let paused_gauge = pauser
        .scrape()
        .value("idempotent_tool_tool_paused", &[("tool", "charge")]);
    assert_eq!(paused_gauge, Some(1.0));
    let (status, resumed) = post_json(pauser, "/v1/tools/charge/resume", None, &json!({}));
    assert_eq!(
        (status, resumed["paused"].as_bool()),
        (200, Some(false)),
        "{resumed}"
    );
    for call_id in &waiting {
        assert_eq!(poster.wait_terminal(call_id)["status"], "succeeded");
    }
    // Another node hears of the resume within an interval, as of the pause.
    eventually("the resume known in MCP where the calls are posted", || {
        charge_in_mcp(poster)["_meta"]["dev.idempotent-tool/paused"].is_null()
    });
}

/// MCP's `tools/list` on `server`, its tools.
fn mcp_tools(server: &Server) -> Vec<Value> {
    let headers = [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
    let (status, answer) = server.request("POST", "/mcp", &headers, Some(&body.to_string()));
    assert_eq!(status, 200, "{answer}");
    answer["result"]["tools"].as_array().expect("tools").clone()
}

/// Re-runs, bulk jobs and pauses are the operator role's and an admin's
/// (`Action::Operate`): a caller's token (the tenant's own) is refused
/// with `role_required` naming `operator`; an operator re-runs its own
/// tenant's calls only (another tenant's call is not found), pauses a tool,
/// and may not run a bulk job over another tenant's calls; an admin may do
/// all of it.
#[test]
fn who_may_operate_is_an_operator_for_its_tenant_and_an_admin_for_everything() {
    let tenant = |caller: &str, operator: &str| {
        json!({"token_sha256": sha256_hex(caller),
               "tokens": {"olga": {"token_sha256": sha256_hex(operator), "role": "operator"}}})
    };
    let auth = AuthFile::with_tenants(
        json!({
            "acme": tenant("acme-token", "acme-operator-token"),
            "globex": tenant("globex-token", "globex-operator-token"),
            "ops": {"token_sha256": sha256_hex("ops-token"), "admin": true},
        }),
        &[],
    );
    let db = Db::sqlite("operator-who");
    let server = db.start(&["--auth-file", auth.path_str()]);
    let as_ = |token: &str, method: &str, path: &str, key: Option<&str>, body: &Value| {
        let bearer = format!("Bearer {token}");
        let mut headers = vec![("Authorization", bearer.as_str())];
        if let Some(key) = key {
            headers.push(("Idempotency-Key", key));
        }
        server.request(method, path, &headers, Some(&body.to_string()))
    };
    let refusal = |(status, body): (u16, Value)| {
        (
            status,
            body["error"]["code"].as_str().unwrap_or("").to_string(),
            body["error"]["role"].as_str().map(str::to_string),
        )
    };
    let role_required = (
        403,
        "role_required".to_string(),
        Some("operator".to_string()),
    );
    let (_, call) = as_(
        "acme-token",
        "POST",
        "/v1/tool-calls?wait=10",
        Some("k"),
        &json!({"tool": "fail", "args": {}}),
    );
    assert_eq!(call["status"], "failed", "{call}");
    let rerun = format!("/v1/tool-calls/{}/rerun", id(&call));
    let nothing = json!({});
    assert_eq!(
        refusal(as_("acme-token", "POST", &rerun, None, &nothing)),
        role_required,
        "a caller does not re-run, not even its own call"
    );
    assert_eq!(
        as_("globex-operator-token", "POST", &rerun, None, &nothing).0,
        404,
        "another tenant's call is not found"
    );
    let (status, again) = as_("acme-operator-token", "POST", &rerun, None, &nothing);
    assert_eq!((status, again["status"].as_str()), (202, Some("pending")));

    let pause = |token: &str, tool: &str| {
        as_(
            token,
            "POST",
            &format!("/v1/tools/{tool}/pause"),
            None,
            &nothing,
        )
    };
    assert_eq!(refusal(pause("acme-token", "fail")), role_required);
    assert_eq!(pause("acme-operator-token", "fail").0, 200);
    let (status, resumed) = as_(
        "acme-operator-token",
        "POST",
        "/v1/tools/fail/resume",
        None,
        &nothing,
    );
    assert_eq!((status, resumed["paused"].as_bool()), (200, Some(false)));
    assert_eq!(pause("ops-token", "fail").0, 200);
    assert_eq!(pause("ops-token", "nope").0, 404);

    let mine = json!({"action": "cancel", "filter": {"tool": "sleep"}});
    let theirs = json!({"action": "cancel", "filter": {"tenant": "globex"}});
    let bulk = |token: &str, key: &str, body: &Value| {
        refusal(as_(token, "POST", "/v1/bulk-actions", Some(key), body))
    };
    assert_eq!(bulk("acme-token", "b1", &mine), role_required);
    assert_eq!(
        bulk("acme-operator-token", "b2", &theirs),
        (403, "forbidden".to_string(), None),
        "an operator acts on its own tenant's calls only"
    );
    assert_eq!(bulk("acme-operator-token", "b3", &mine).0, 202);
    assert_eq!(bulk("ops-token", "b4", &theirs).0, 202);
}
