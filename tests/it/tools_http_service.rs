//! `http` tools through the real service (`--tools FILE`) against the
//! reference downstream binary: the `effect_id` as the `Idempotency-Key` on
//! every attempt, automatic retries (backoff, `Retry-After`, timeouts, the
//! last attempt), permanent failures, a crash between the downstream's answer
//! and the local commit, `GET /v1/tools`, argument schemas refused at POST,
//! and no secret in anything a client or operator can read.

use crate::support;

use crate::support::downstream::audit_rows;
use crate::support::downstream::{Downstream, ToolsFile};
use crate::support::Counts;
use crate::support::Http;
use crate::support::{unique_name, FakeUpstream, Reply, Server, TempDb, DEADLINE};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const SECRET: &str = "tok-SERVICE-SECRET-93";
const TOKEN_VAR: (&str, &str) = ("TOOLS_HTTP_TEST_TOKEN", SECRET);

/// A tools file with `refund` (an `http` tool at `url`, `entry` merged into
/// its defaults: 5 attempts, quick backoff, a schema) and the built-in `charge`.
fn tools_file(url: &str, entry: Value) -> ToolsFile {
    let mut refund = json!({
        "kind": "http",
        "url": url,
        "headers": {"Authorization": format!("Bearer ${{{}}}", TOKEN_VAR.0)},
        "max_attempts": 5,
        "backoff_ms": {"initial": 50, "max": 200},
        "input_schema": {
            "type": "object",
            "required": ["amount"],
            "properties": {"amount": {"type": "integer", "minimum": 1}},
            "additionalProperties": false
        }
    });
    for (k, v) in entry.as_object().unwrap() {
        refund[k] = v.clone();
    }
    ToolsFile::write(&json!({"tools": {"refund": refund, "charge": {"kind": "builtin"}}}))
}

fn start(db: &TempDb, tools: &ToolsFile, extra: &[&str]) -> Server {
    let mut args = vec!["--tools", tools.path_str()];
    args.extend_from_slice(extra);
    Server::start_with_env(db, &args, &[TOKEN_VAR])
}

/// POST one refund of `amount` under a fresh key; returns the call as accepted.
fn post_refund(server: &Server, args: Value) -> Value {
    let (status, call) = server.post(
        &unique_name("refund"),
        &json!({"tool": "refund", "args": args}),
    );
    assert_eq!(status, 202, "{call}");
    call
}

fn events(server: &Server, call: &Value) -> Vec<String> {
    let rows = audit_rows(&server.db, call["call_id"].as_str().unwrap());
    rows.into_iter().map(|(_, event, _)| event).collect()
}

/// The local `effects` rows of one call: (tool, detail as JSON).
fn local_effects(server: &Server, call_id: &str) -> Vec<(String, Value)> {
    let conn = server.sql();
    let mut stmt = conn
        .prepare("SELECT tool, detail FROM effects WHERE call_id = ?1")
        .unwrap();
    stmt.query_map([call_id], |r| {
        let detail: Option<String> = r.get(1)?;
        Ok((
            r.get(0)?,
            serde_json::from_str(&detail.unwrap_or_default()).unwrap_or(Value::Null),
        ))
    })
    .unwrap()
    .collect::<rusqlite::Result<_>>()
    .unwrap()
}

/// 503, 503, then the effect: every attempt carries the call's `effect_id`
/// as its key, the call succeeds on attempt 3 with the downstream's answer,
/// the downstream saw 3 requests under one key and applied one effect, and
/// the local `effects` row records the downstream's status and body.
#[test]
fn two_503s_then_200_succeed_on_attempt_3_with_one_key_and_one_effect() {
    let downstream = Downstream::start(&["--fail-first", "2"]);
    let tools = tools_file(&downstream.url("/refunds"), json!({}));
    let db = TempDb::new("tools-http-503");
    let server = start(&db, &tools, &[]);
    let call = post_refund(&server, json!({"amount": 5}));
    let effect_id = call["effect_id"].as_str().unwrap().to_string();
    let done = server.wait_terminal(call["call_id"].as_str().unwrap());
    assert_eq!(
        support::status_and_attempt(&done),
        (Some("succeeded"), Some(3)),
        "{done}"
    );
    assert_eq!(
        done["result"]["idempotency_key"],
        effect_id.as_str(),
        "{done}"
    );
    assert_eq!(done["result"]["attempt"], 3);
    assert_eq!(done["next_attempt_at"], Value::Null);
    assert_eq!(downstream.logged_keys(3), vec![effect_id.clone(); 3]);
    let per_key = downstream.requests_for(&effect_id);
    assert_eq!(
        (per_key["requests"].as_i64(), per_key["effects"].as_i64()),
        (Some(3), Some(1))
    );
    let effects = local_effects(&server, done["call_id"].as_str().unwrap());
    assert_eq!(effects.len(), 1, "{effects:?}");
    assert_eq!(effects[0].0, "refund");
    assert_eq!(effects[0].1["status"], 200, "{effects:?}");
    assert!(
        effects[0].1["body"].as_str().unwrap().contains("d_1"),
        "{effects:?}"
    );
    assert_eq!(
        events(&server, &call),
        [
            "created",
            "claimed",
            "retry_scheduled",
            "claimed",
            "retry_scheduled",
            "claimed",
            "succeeded"
        ]
    );
    // Each scheduled retry moves its counter.
    let metrics = server.call("GET", "/metrics", &[], None);
    let text = String::from_utf8(metrics.body).unwrap();
    let scrape = support::exposition::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(
        scrape.value("idempotent_tool_retries_scheduled_total", &[]),
        Some(2.0),
        "{text}"
    );
}

/// A 400 is permanent: `failed` after one attempt, one request downstream,
/// and a same-key POST answers the failure without running it again.
#[test]
fn a_400_fails_at_once_and_is_never_retried() {
    let downstream = Downstream::start(&["--status", "400"]);
    let tools = tools_file(&downstream.url("/refunds"), json!({}));
    let db = TempDb::new("tools-http-400");
    let server = start(&db, &tools, &[]);
    let key = unique_name("refund-400");
    let body = json!({"tool": "refund", "args": {"amount": 5}});
    let (_, call) = server.post(&key, &body);
    let done = server.wait_terminal(call["call_id"].as_str().unwrap());
    assert_eq!(
        support::status_and_attempt(&done),
        (Some("failed"), Some(1)),
        "{done}"
    );
    let error = &done["error"];
    assert_eq!(
        support::code_and_retryable(error),
        (Some("downstream_rejected"), Some(false))
    );
    assert_eq!(error["http_status"], 400);
    let (status, again) = server.post(&key, &body);
    assert_eq!(
        (status, again["attempt"].as_i64()),
        (200, Some(1)),
        "{again}"
    );
    assert_eq!(downstream.stats()["requests"], 1);
    assert_eq!(events(&server, &call), ["created", "claimed", "failed"]);
}

/// `Retry-After: 1` on a 503 sets the earliest next attempt (within the
/// tool's `retry_after_max_ms`, past its backoff's `max`): the call waits
/// `pending` with `next_attempt_at` a second after the failure, and the
/// second claim comes no sooner.
#[test]
fn retry_after_from_the_downstream_is_honoured() {
    let downstream = Downstream::start(&["--fail-first", "1", "--retry-after", "1"]);
    let tools = tools_file(
        &downstream.url("/refunds"),
        json!({"retry_after_max_ms": 5000}),
    );
    let db = TempDb::new("tools-http-retry-after");
    let server = start(&db, &tools, &[]);
    let call = post_refund(&server, json!({"amount": 7}));
    let call_id = call["call_id"].as_str().unwrap();
    let deadline = Instant::now() + DEADLINE;
    let waiting = loop {
        let (_, now) = server.get(&format!("/v1/tool-calls/{call_id}"));
        if now["status"] == "pending" && now["attempt"] == 1 {
            break now;
        }
        assert!(
            Instant::now() < deadline,
            "never saw the retry scheduled: {now}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let not_before = waiting["next_attempt_at"]
        .as_f64()
        .expect("next_attempt_at");
    let gap = not_before - waiting["updated_at"].as_f64().unwrap();
    assert!(
        (0.99..1.2).contains(&gap),
        "next attempt {gap} s after the failure"
    );
    assert_eq!(waiting["error"]["code"], "downstream_unavailable");
    let done = server.wait_terminal(call_id);
    assert_eq!(
        support::status_and_attempt(&done),
        (Some("succeeded"), Some(2)),
        "{done}"
    );
    let rows = audit_rows(&server.db, call_id);
    let claims: Vec<f64> = rows
        .iter()
        .filter(|r| r.1 == "claimed")
        .map(|r| r.0)
        .collect();
    assert!(claims[1] - claims[0] >= 1.0, "claims at {claims:?}");
    let scheduled = rows
        .iter()
        .find(|r| r.1 == "retry_scheduled")
        .expect("retry_scheduled");
    assert!(scheduled.2.contains("in 1.000 s"), "{scheduled:?}");
    assert!(!scheduled.2.contains("capped"), "{scheduled:?}");
}

/// `Retry-After: 86400` ("come back tomorrow") is honoured only up to the
/// tool's cap, here its backoff's `max` of 1 s: the call waits a second,
/// not a day, succeeds on attempt 2, and the audit says the hint was cut.
#[test]
fn a_retry_after_past_the_cap_is_cut_to_it_and_the_audit_says_so() {
    let downstream = Downstream::start(&["--fail-first", "1", "--retry-after", "86400"]);
    let entry = json!({"backoff_ms": {"initial": 50, "max": 1000}});
    let tools = tools_file(&downstream.url("/refunds"), entry);
    let db = TempDb::new("tools-http-retry-after-cap");
    let server = start(&db, &tools, &[]);
    let call = post_refund(&server, json!({"amount": 8}));
    let call_id = call["call_id"].as_str().unwrap();
    let done = server.wait_terminal(call_id);
    assert_eq!(
        support::status_and_attempt(&done),
        (Some("succeeded"), Some(2)),
        "{done}"
    );
    let rows = audit_rows(&server.db, call_id);
    let scheduled = rows
        .iter()
        .find(|r| r.1 == "retry_scheduled")
        .expect("retry_scheduled");
    assert!(
        scheduled.2.ends_with(
            "attempt 2 in 1.000 s: the downstream's Retry-After of 86400.000 s was capped \
             at the tool's retry_after_max_ms"
        ),
        "{scheduled:?}"
    );
    let claims: Vec<f64> = rows
        .iter()
        .filter(|r| r.1 == "claimed")
        .map(|r| r.0)
        .collect();
    let gap = claims[1] - claims[0];
    assert!((1.0..30.0).contains(&gap), "claims at {claims:?}");
    assert_eq!(
        downstream.requests_for(call["effect_id"].as_str().unwrap())["requests"],
        2
    );
}

/// A downstream slower than `timeout_ms` is a retryable timeout: both
/// attempts time out, the call ends `failed` with the last error, and a
/// same-key POST still resets it for another attempt (the chapter's rule).
#[test]
fn a_delay_past_the_timeout_is_retried_then_failed_and_a_same_key_post_resets_it() {
    let downstream = Downstream::start(&["--delay-ms", "3000"]);
    let entry = json!({"timeout_ms": 300, "max_attempts": 2});
    let tools = tools_file(&downstream.url("/refunds"), entry);
    let db = TempDb::new("tools-http-timeout");
    let server = start(&db, &tools, &[]);
    let key = unique_name("refund-timeout");
    let body = json!({"tool": "refund", "args": {"amount": 1}});
    let (_, call) = server.post(&key, &body);
    let call_id = call["call_id"].as_str().unwrap();
    let done = server.wait_terminal(call_id);
    assert_eq!(
        support::status_and_attempt(&done),
        (Some("failed"), Some(2)),
        "{done}"
    );
    assert_eq!(done["error"]["code"], "downstream_timeout");
    assert_eq!(done["error"]["retryable"], true);
    let (status, reset) = server.post(&key, &body);
    assert_eq!(
        (status, reset["status"].as_str()),
        (202, Some("pending")),
        "{reset}"
    );
    let again = server.wait_terminal(call_id);
    assert_eq!(
        (again["status"].as_str(), again["attempt"].as_i64()),
        (Some("failed"), Some(3)),
        "{again}"
    );
    assert_eq!(
        events(&server, &call),
        [
            "created",
            "claimed",
            "retry_scheduled",
            "claimed",
            "failed",
            "retry_reset",
            "claimed",
            "failed"
        ]
    );
}

/// The server dies after the downstream applied the effect and before the
/// local commit (`_crash_before_commit`); after a restart the call runs
/// again with the same key, the downstream answers with its first answer,
/// and there is one effect on each side.
#[test]
fn a_crash_between_the_downstream_answer_and_the_local_commit_leaves_one_effect_each_side() {
    let downstream = Downstream::start(&[]);
    let tools = tools_file(&downstream.url("/refunds"), json!({}));
    let db = TempDb::new("tools-http-crash");
    let flags = ["--chaos", "--lease-secs", "1"];
    let mut first = start(&db, &tools, &flags);
    let key = unique_name("refund");
    let body = json!({"tool": "refund", "args": {"amount": 9, "_crash_before_commit": true}});
    if let Some((status, call)) = first.post_maybe_lost(&key, &body) {
        assert_eq!(status, 202, "{call}");
    }
    assert!(!first.wait_exit().success());
    let (call_id, effect_id): (String, String) = first
        .sql()
        .query_row("SELECT call_id, effect_id FROM calls", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    let effect_id = effect_id.as_str();
    assert_eq!(
        downstream.requests_for(effect_id)["effects"],
        1,
        "the downstream applied it"
    );
    assert_eq!(db.effects(), 0, "nothing was committed locally");
    let second = start(&db, &tools, &flags);
    let done = second.wait_terminal(&call_id);
    assert_eq!(
        support::status_and_attempt(&done),
        (Some("succeeded"), Some(2)),
        "{done}"
    );
    assert_eq!(
        done["result"]["attempt"], 1,
        "the downstream's first answer, replayed"
    );
    let per_key = downstream.requests_for(effect_id);
    assert_eq!(
        (per_key["requests"].as_i64(), per_key["effects"].as_i64()),
        (Some(2), Some(1))
    );
    assert_eq!(downstream.logged_keys(2), [effect_id, effect_id]);
    assert_eq!(db.effects(), 1);
}

/// `GET /v1/tools` lists exactly the file's tools with their contract, and
/// never a URL, header or secret; other methods get `405`.
#[test]
fn get_tools_shows_the_contract_and_nothing_else() {
    let downstream = Downstream::start(&[]);
    let tools = tools_file(
        &downstream.url("/refunds"),
        json!({"max_concurrency": 4, "timeout_ms": 2500}),
    );
    let db = TempDb::new("tools-http-list");
    let server = start(&db, &tools, &[]);
    let (status, list) = server.get("/v1/tools");
    assert_eq!(status, 200, "{list}");
    let names: Vec<&str> = list["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["charge", "refund"]);
    let refund = &list["tools"][1];
    assert_eq!(
        (
            refund["kind"].as_str(),
            refund["max_attempts"].as_i64(),
            refund["timeout_ms"].as_i64()
        ),
        (Some("http"), Some(5), Some(2500))
    );
    assert_eq!(refund["max_concurrency"], 4);
    assert_eq!(refund["input_schema"]["required"], json!(["amount"]));
    assert_eq!(refund["business_key"], Value::Null, "none configured");
    assert_eq!(refund["rate"], Value::Null, "none configured");
    assert_eq!(refund["approval"], Value::Null, "none configured");
    assert_eq!(
        (&refund["paused"], &refund["pause"]),
        (&json!(false), &Value::Null)
    );
    assert_eq!(refund.as_object().unwrap().len(), 11, "{refund}");
    let text = list.to_string();
    for hidden in [SECRET, "Authorization", downstream.base.as_str()] {
        assert!(!text.contains(hidden), "{hidden} in {text}");
    }
    let (status, _) = server.request("POST", "/v1/tools", &[], Some("{}"));
    assert_eq!(status, 405);
}

/// Arguments that fail the tool's `input_schema` are `400 bad_request`
/// naming the failing path, and nothing is stored.
#[test]
fn args_failing_the_schema_are_refused_and_nothing_is_stored() {
    let downstream = Downstream::start(&[]);
    let tools = tools_file(&downstream.url("/refunds"), json!({}));
    let db = TempDb::new("tools-http-schema");
    let server = start(&db, &tools, &[]);
    for (args, path) in [
        (json!({}), "args"),
        (json!({"amount": 0}), "args.amount"),
        (json!({"amount": "5"}), "args.amount"),
        (json!({"amount": 1.5}), "args.amount"),
        (json!({"amount": 5, "note": "x"}), "args"),
    ] {
        let (status, body) = server.post(
            &unique_name("bad"),
            &json!({"tool": "refund", "args": args}),
        );
        assert_eq!(status, 400, "{args}: {body}");
        assert_eq!(body["error"]["code"], "bad_request");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.starts_with(path), "{args}: {message}");
    }
    assert_eq!(db.calls(), 0);
    assert_eq!(downstream.stats()["requests"], 0);
}

/// A downstream that echoes the configured token back in a failure: the
/// header reached it, but the token is in no answer, row, log line or
/// endpoint the service produces.
#[test]
fn no_secret_reaches_any_output() {
    let upstream = FakeUpstream::start(|request, _| {
        let echoed = request.header("authorization").unwrap_or("").to_string();
        Reply::json(500, json!({"echo": echoed}))
    });
    let tools = tools_file(
        &format!("{}/refunds", upstream.base()),
        json!({"max_attempts": 2}),
    );
    let db = TempDb::new("tools-http-secret");
    let server = start(&db, &tools, &[]);
    let call = post_refund(&server, json!({"amount": 3}));
    let done = server.wait_terminal(call["call_id"].as_str().unwrap());
    assert_eq!(done["status"], "failed", "{done}");
    let seen = upstream.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        seen[0].header("authorization"),
        Some(format!("Bearer {SECRET}").as_str())
    );
    assert!(
        done["error"]["body"].as_str().unwrap().contains("***"),
        "{done}"
    );
    let dump: String = {
        let conn = server.sql();
        let mut stmt = conn
            .prepare(
                "SELECT coalesce(result_json,'') || coalesce(error_json,'') || args_json FROM calls
                 UNION ALL SELECT coalesce(detail, '') FROM audit
                 UNION ALL SELECT coalesce(detail, '') FROM effects",
            )
            .unwrap();
        let rows = stmt.query_map([], |r| r.get::<_, String>(0)).unwrap();
        rows.map(Result::unwrap).collect()
    };
    let (_, list) = server.get("/v1/tools");
    let (_, stats) = server.get("/stats");
    for (what, text) in [
        ("call", done.to_string()),
        ("rows", dump),
        ("stderr", server.stderr()),
        ("tools", list.to_string()),
        ("stats", stats.to_string()),
    ] {
        assert!(
            !text.contains(SECRET),
            "the secret is in the {what}: {text}"
        );
    }
}
