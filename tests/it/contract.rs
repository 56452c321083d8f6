//! The service's contract over HTTP: the seed's seven scenarios (section
//! 12.10.1) and the API's edges, against the service in this process; the test
//! that posts a crash hook uses the real binary, so a regression there kills a
//! child rather than the test run.

use crate::support;

use crate::support::Counts;
use crate::support::Http;
use crate::support::{audit_events, charge, count, open_db, Local, Server, TempDb};
use idempotent_tool::store::COUNT_CALLS_IN_STATUS_INDEX;
use serde_json::{json, Value};
use std::sync::{Arc, Barrier};

/// One key, one call: a repeated request returns the original call and never
/// runs it again.
#[test]
fn same_key_returns_same_call() {
    let db = TempDb::new("same-key");
    let server = Local::start(&db, &[]);
    let (status, first) = server.post("k-same", &charge(100));
    assert_eq!(status, 202, "{first}");
    assert_eq!(first["status"], "pending");
    let done = server.wait_terminal(first["call_id"].as_str().unwrap());
    let (status, again) = server.post("k-same", &charge(100));
    assert_eq!(status, 200, "a terminal call answers 200: {again}");
    assert_eq!(again["call_id"], first["call_id"]);
    assert_eq!(again["attempt"], 1, "never re-executed");
    assert_eq!(again["result"], done["result"]);
    assert_eq!(server.stats()["effects"], 1);
}

/// A new key is a new logical request.
#[test]
fn different_key_creates_new_call() {
    let db = TempDb::new("diff-key");
    let server = Local::start(&db, &[]);
    let (_, a) = server.post("k-a", &charge(1));
    let (status, b) = server.post("k-b", &charge(1));
    assert_eq!(status, 202);
    assert_ne!(a["call_id"], b["call_id"]);
    server.wait_terminal(a["call_id"].as_str().unwrap());
    server.wait_terminal(b["call_id"].as_str().unwrap());
    let stats = server.stats();
    assert_eq!(
        (stats["calls"].clone(), stats["effects"].clone()),
        (json!(2), json!(2))
    );
}

/// Same key, different request: 409, and nothing runs for the second one.
#[test]
fn same_key_different_args_conflict() {
    let db = TempDb::new("conflict");
    let server = Local::start(&db, &[]);
    let (_, first) = server.post("k-conflict", &charge(1));
    let (status, body) = server.post("k-conflict", &charge(2));
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "idempotency_conflict");
    let (status, _) = server.post(
        "k-conflict",
        &json!({"tool": "send_email", "args": {"to": "a@b"}}),
    );
    assert_eq!(status, 409);
    server.wait_terminal(first["call_id"].as_str().unwrap());
    assert_eq!(server.stats()["calls"], 1);
    assert_eq!(server.stats()["effects"], 1);
}

/// Fingerprints follow the documented canonical form: key order, `1` vs `1.0`,
/// null members and NFC do not make a request different.
#[test]
fn equivalent_args_are_the_same_request() {
    let db = TempDb::new("canonical");
    let server = Local::start(&db, &[]);
    let (_, a) = server.post(
        "k-canon",
        &json!({"tool": "send_email", "args": {"to": "caf\u{e9}", "subject": "支付"}}),
    );
    let (status, b) = server.post(
        "k-canon",
        &json!({"args": {"subject": "支付", "body": null, "to": "cafe\u{301}"}, "tool": "send_email"}),
    );
    assert!(status == 200 || status == 202, "{b}");
    assert_eq!(a["call_id"], b["call_id"]);
    let (_, c) = server.post("k-num", &charge(5));
    let (_, d) = server.post("k-num", &json!({"tool": "charge", "args": {"amount": 5.0}}));
    assert_eq!(c["call_id"], d["call_id"]);
}

/// Twelve concurrent requests with one key: one call_id, one effect.
#[test]
fn concurrent_same_key_one_effect() {
    let db = TempDb::new("concurrent");
    let server = Arc::new(Local::start(&db, &[]));
    let barrier = Arc::new(Barrier::new(12));
    let handles: Vec<_> = (0..12)
        .map(|_| {
            let (server, barrier) = (Arc::clone(&server), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                server.post("k-concurrent", &charge(100))
            })
        })
        .collect();
    let results: Vec<(u16, Value)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let ids: std::collections::HashSet<String> = results
        .iter()
        .map(|(status, body)| {
            assert!(*status == 200 || *status == 202, "{status} {body}");
            body["call_id"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(ids.len(), 1, "{results:?}");
    let call_id = ids.into_iter().next().unwrap();
    let done = server.wait_terminal(&call_id);
    assert_eq!(done["status"], "succeeded");
    assert_eq!(done["attempt"], 1);
    assert_eq!(server.stats()["effects"], 1);
    assert_eq!(
        count(
            &server.db,
            "SELECT count(*) FROM calls WHERE idem_key = 'k-concurrent'"
        ),
        1
    );
}

/// A retryable failure is reset to pending by a same-key retry and re-run under
/// the same call; a permanent failure is returned as it is.
#[test]
fn failed_retryable_can_be_retried() {
    let db = TempDb::new("retryable");
    let server = Local::start(&db, &[]);
    let body = json!({"tool": "fail", "args": {"fail_times": 1}});
    let (_, first) = server.post("k-fail", &body);
    let call_id = first["call_id"].as_str().unwrap().to_string();
    let failed = server.wait_terminal(&call_id);
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["error"]["code"], "tool_failed");
    assert_eq!(failed["error"]["retryable"], true);

    let (status, reset) = server.post("k-fail", &body);
    assert_eq!(status, 202, "{reset}");
    assert_eq!(reset["call_id"], call_id.as_str());
    let done = server.wait_terminal(&call_id);
    assert_eq!(done["status"], "succeeded");
    assert_eq!(done["attempt"], 2);
    assert!(audit_events(&server.db, &call_id).contains(&"retry_reset".to_string()));

    let permanent = json!({"tool": "fail", "args": {"retryable": false}});
    let (_, p) = server.post("k-permanent", &permanent);
    let p_id = p["call_id"].as_str().unwrap().to_string();
    assert_eq!(server.wait_terminal(&p_id)["status"], "failed");
    let (status, again) = server.post("k-permanent", &permanent);
    assert_eq!(status, 200);
    assert_eq!(
        (again["status"].clone(), again["attempt"].clone()),
        (json!("failed"), json!(1))
    );
}

/// The client times out while the server delays its response; the same-key
/// retry gets the same call, and there is one effect.
#[test]
fn delay_response_then_retry_same_key() {
    let db = TempDb::new("delay");
    let server = Local::start(&db, &["--chaos"]);
    let body = json!({"tool": "charge", "args": {"amount": 7, "_delay_response_ms": 3000}});
    let first = idempotent_tool::client::request_once(
        &server.base,
        "POST",
        "/v1/tool-calls",
        &[("Idempotency-Key", "k-delay")],
        Some(body.to_string().as_bytes()),
        Some(std::time::Duration::from_millis(300)),
    );
    assert!(
        first.is_err(),
        "the first response must time out: {first:?}"
    );
    let (status, retry) = server.post("k-delay", &body);
    assert!(status == 200 || status == 202, "{retry}");
    let done = server.wait_terminal(retry["call_id"].as_str().unwrap());
    assert_eq!(done["status"], "succeeded");
    assert_eq!(server.stats()["calls"], 1);
    assert_eq!(server.stats()["effects"], 1);
}

/// `?wait=` holds the response until the call is terminal, then answers 200.
#[test]
fn wait_holds_until_terminal() {
    let db = TempDb::new("wait");
    let server = Local::start(&db, &[]);
    let (status, call) = server.post_path(
        "/v1/tool-calls?wait=30",
        "k-wait",
        &json!({"tool": "sleep", "args": {"seconds": 0.2}}),
    );
    assert_eq!(status, 200, "{call}");
    assert_eq!(call["status"], "succeeded");
    let (status, body) = server.post_path("/v1/tool-calls?wait=31", "k-wait2", &charge(1));
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "bad_request");
}

/// Calls can be found by id and by (percent-encoded) key.
#[test]
fn lookup_by_id_and_by_key() {
    let db = TempDb::new("lookup");
    let server = Local::start(&db, &[]);
    let key = "order/42 é?#%"; // needs encoding in a path
    let key_ascii = "order/42?#%&=+";
    let (status, _) = server.post(key, &charge(1));
    assert_eq!(status, 400, "a key must be visible ASCII");
    let (_, call) = server.post(key_ascii, &charge(3));
    let call_id = call["call_id"].as_str().unwrap();
    assert!(
        call_id.starts_with("c_") && call_id.len() == 18,
        "{call_id}"
    );
    assert!(call["effect_id"].as_str().unwrap().starts_with("eff_"));
    assert_eq!(call["query_url"], format!("/v1/tool-calls/{call_id}"));
    let (status, by_key) = server.by_key(key_ascii);
    assert!(status == 200 || status == 202, "{by_key}");
    assert_eq!(by_key["call_id"], call_id);
    assert_eq!(by_key["idem_key"], key_ascii);
    let (_, by_id) = server.get(&format!("/v1/tool-calls/{call_id}?wait=10"));
    assert_eq!(by_id["call_id"], call_id);
    assert_eq!(by_id["status"], "succeeded");
}

/// Unknown calls, keys and paths are 404 `not_found`; a wrong method is 405
/// with `Allow`.
#[test]
fn not_found_and_wrong_method() {
    let db = TempDb::new("404");
    let server = Local::start(&db, &[]);
    for path in [
        "/v1/tool-calls/c_0000000000000000",
        "/v1/tool-calls/by-key/nope",
        "/nope",
        "/v1",
    ] {
        let (status, body) = server.get(path);
        assert_eq!(status, 404, "{path}: {body}");
        assert_eq!(body["error"]["code"], "not_found");
    }
    let resp = idempotent_tool::client::request_once(
        &server.base,
        "GET",
        "/v1/tool-calls",
        &[],
        None,
        None,
    )
    .unwrap();
    assert_eq!(resp.status, 405);
    assert_eq!(resp.header("allow"), Some("POST"));
    assert_eq!(resp.json()["error"]["code"], "method_not_allowed");
    let (status, _) = server.request("DELETE", "/stats", &[], None);
    assert_eq!(status, 405);
}

/// Bad input is refused with a stable code and a message naming the field,
/// and creates nothing.
#[test]
fn bad_requests_are_refused_and_create_nothing() {
    let db = TempDb::new("bad");
    let server = Server::start(&db, &[]);
    let (status, body) =
        server.request("POST", "/v1/tool-calls", &[], Some(&charge(1).to_string()));
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "missing_idempotency_key");
    let long_key = "k".repeat(256);
    let cases: Vec<(&str, String, &str)> = vec![
        ("k1", "{not json".into(), "JSON"),
        ("k1", "[1,2]".into(), "object"),
        ("k1", r#"{"args":{"amount":1}}"#.into(), "tool"),
        ("k1", r#"{"tool":"refund","args":{}}"#.into(), "refund"),
        ("k1", r#"{"tool":"charge","args":[1]}"#.into(), "args"),
        (
            "k1",
            r#"{"tool":"charge","args":{"amount":-5}}"#.into(),
            "args.amount",
        ),
        (
            "k1",
            r#"{"tool":"charge","args":{"amount":"5"}}"#.into(),
            "args.amount",
        ),
        (
            "k1",
            r#"{"tool":"send_email","args":{"to":""}}"#.into(),
            "args.to",
        ),
        (
            "k1",
            r#"{"tool":"sleep","args":{"seconds":11}}"#.into(),
            "args.seconds",
        ),
        (
            "k1",
            r#"{"tool":"charge","args":{"amount":1},"seq":"x"}"#.into(),
            "seq",
        ),
        (
            "k1",
            r#"{"tool":"charge","args":{"amount":1,"_crash_after_commit":true}}"#.into(),
            "--chaos",
        ),
        (long_key.as_str(), charge(1).to_string(), "Idempotency-Key"),
    ];
    for (key, body, names) in &cases {
        let (status, resp) = server.request(
            "POST",
            "/v1/tool-calls",
            &[("Idempotency-Key", key)],
            Some(body),
        );
        assert_eq!(status, 400, "{body}: {resp}");
        assert_eq!(resp["error"]["code"], "bad_request", "{body}");
        let message = resp["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(names),
            "{body}: message {message:?} should name {names}"
        );
    }
    assert_eq!(server.stats()["calls"], 0);
}

/// `/stats` counts calls, effects, statuses and attempts, and how the writer
/// grouped the operations that got them there.
#[test]
fn stats_reports_calls_effects_statuses_and_attempts() {
    let db = TempDb::new("stats");
    let server = Local::start(&db, &[]);
    let ids: Vec<String> = [
        ("s1", charge(1)),
        ("s2", json!({"tool": "send_email", "args": {"to": "x@y"}})),
        ("s3", json!({"tool": "sleep", "args": {"seconds": 0}})),
        ("s4", json!({"tool": "fail", "args": {"retryable": false}})),
    ]
    .iter()
    .map(|(key, body)| {
        server.post(key, body).1["call_id"]
            .as_str()
            .unwrap()
            .to_string()
    })
    .collect();
    for id in &ids {
        server.wait_terminal(id);
    }
    let mut stats = server.stats();
    let writer = stats
        .as_object_mut()
        .unwrap()
        .remove("writer")
        .expect("writer counters");
    assert_eq!(
        stats,
        json!({"calls": 4, "effects": 2, "by_status": {"succeeded": 3, "failed": 1}, "attempts": {"1": 4}})
    );
    // Each call took a create and an outcome of its own, and a claim that a
    // worker may share with one other call: at least 4 + 4 + 2 operations.
    let counter = |name: &str| writer[name].as_u64().unwrap();
    assert!(counter("ops") >= 10, "{writer}");
    assert!(
        (1..=counter("ops")).contains(&counter("batches")),
        "{writer}"
    );
    for field in ["run_us", "commit_us"] {
        assert!(writer[field].is_u64(), "{writer}");
    }
}

/// The schema carries the seed's constraints, and the seed's duplicate-effects
/// query finds nothing after a mixed workload.
#[test]
fn schema_has_unique_constraints_and_no_duplicate_effects() {
    let db = TempDb::new("schema");
    let server = Local::start(&db, &[]);
    for i in 0..20 {
        server.post(&format!("dup-{}", i % 5), &charge(1 + (i % 5)));
    }
    let (_, last) = server.post("dup-4", &charge(5));
    server.wait_terminal(last["call_id"].as_str().unwrap());
    let conn = server.sql();
    let unique_indexes: Vec<(String, String)> = conn
        .prepare(
            "SELECT m.name, ii.name FROM sqlite_master m, pragma_index_list(m.name) il, pragma_index_info(il.name) ii
              WHERE m.type = 'table' AND il.\"unique\" = 1 ORDER BY 1, 2",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    for expected in [
        ("calls", "call_id"),
        ("calls", "idem_key"),
        ("effects", "call_id"),
        ("effects", "effect_id"),
        // One live call per business key (migration 8).
        ("business_keys", "bkey"),
    ] {
        assert!(
            unique_indexes.contains(&(expected.0.to_string(), expected.1.to_string())),
            "{expected:?} not unique: {unique_indexes:?}"
        );
    }
    let index_names = text_column(
        &conn,
        "SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'idx_%' ORDER BY name",
        0,
    );
    assert_eq!(
        index_names,
        [
            "idx_audit_call",
            "idx_business_keys_key",
            "idx_business_keys_live",
            "idx_calls_client_seq",
            "idx_calls_status"
        ]
    );
    // The client index is partial (calls without a client_id skip it), and a
    // lookup by client still finds it.
    let plan: String = conn
        .query_row(
            "EXPLAIN QUERY PLAN SELECT call_id FROM calls WHERE client_id = 'c' AND seq = 1",
            [],
            |r| r.get(3),
        )
        .unwrap();
    assert!(plan.contains("idx_calls_client_seq"), "{plan}");
    // `/stats` counts calls by status and attempt in one pass over
    // idx_calls_status, in its order: no table scan, no sort.
    let columns = text_column(
        &conn,
        "SELECT name FROM pragma_index_info('idx_calls_status') ORDER BY seqno",
        0,
    );
    assert_eq!(columns, ["status", "lease_until", "attempt"]);
    let plan = text_column(
        &conn,
        &format!("EXPLAIN QUERY PLAN {COUNT_CALLS_IN_STATUS_INDEX}"),
        3,
    );
    assert_eq!(plan, ["SCAN calls USING COVERING INDEX idx_calls_status"]);
    let duplicates = count(&server.db, "SELECT count(*) FROM (SELECT call_id, count(*) FROM effects GROUP BY call_id HAVING count(*) > 1)");
    assert_eq!(duplicates, 0);
    assert_eq!(server.stats()["calls"], 5);
    let journal: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(journal, "wal");
}

/// Column `index` (text) of every row `sql` returns.
fn text_column(conn: &rusqlite::Connection, sql: &str, index: usize) -> Vec<String> {
    conn.prepare(sql)
        .unwrap()
        .query_map([], |r| r.get(index))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

/// A database locked past the busy timeout answers 503 with Retry-After and
/// changes nothing; the same-key retry succeeds once the lock is gone.
#[test]
fn locked_database_answers_503_and_retry_succeeds() {
    let db = TempDb::new("locked");
    let server = Local::start(&db, &["--busy-timeout-ms", "200"]);
    let blocker = server.sql();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let resp = idempotent_tool::client::request_once(
        &server.base,
        "POST",
        "/v1/tool-calls",
        &[("Idempotency-Key", "k-locked")],
        Some(charge(9).to_string().as_bytes()),
        Some(support::DEADLINE),
    )
    .unwrap();
    assert_eq!(resp.status, 503, "{:?}", resp.json());
    assert_eq!(resp.json()["error"]["code"], "unavailable");
    assert!(resp.header("retry-after").is_some());
    blocker.execute_batch("ROLLBACK").unwrap();
    assert_eq!(
        server.by_key("k-locked").0,
        404,
        "the refused request left nothing behind"
    );
    let (status, call) = server.post("k-locked", &charge(9));
    assert_eq!(status, 202, "{call}");
    assert_eq!(
        server.wait_terminal(call["call_id"].as_str().unwrap())["status"],
        "succeeded"
    );
}

/// Retries of a settled call (answered from memory after the first) get exactly
/// the stored call, and a different request under its key still gets 409.
#[test]
fn settled_call_retries_match_the_record_and_conflicts_still_409() {
    let db = TempDb::new("settled");
    let server = Local::start(&db, &[]);
    let (_, first) = server.post("k-settled", &charge(4));
    let call_id = first["call_id"].as_str().unwrap().to_string();
    let stored = server.wait_terminal(&call_id);
    for _ in 0..3 {
        let (status, again) = server.post("k-settled", &charge(4));
        assert_eq!(status, 200);
        assert_eq!(again, stored);
    }
    let (status, body) = server.post("k-settled", &charge(5));
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "idempotency_conflict");
    let (status, body) =
        server.request("POST", "/v1/tool-calls", &[], Some(&charge(4).to_string()));
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (400, json!("missing_idempotency_key"))
    );
    assert_eq!(server.stats()["effects"], 1);
}

/// `args` over 64 KiB (canonical) is `413 payload_too_large`, and creates nothing.
#[test]
fn oversized_args_are_413_and_create_nothing() {
    let db = TempDb::new("args-size");
    let server = Local::start(&db, &[]);
    let body = json!({"tool": "send_email", "args": {"to": "a@b", "body": "x".repeat(70 * 1024)}});
    let (status, resp) = server.post("k-big", &body);
    assert_eq!(status, 413, "{resp}");
    assert_eq!(resp["error"]["code"], "payload_too_large");
    assert_eq!(server.by_key("k-big").0, 404);
    let fits = json!({"tool": "send_email", "args": {"to": "a@b", "body": "x".repeat(60 * 1024)}});
    assert_eq!(server.post("k-fits", &fits).0, 202);
}

/// A database created with the seed's exact DDL (section 12.3: the full client
/// index, `AUTOINCREMENT` audit ids) is used as it is: calls run, and audit ids
/// keep coming from `sqlite_sequence`.
#[test]
fn database_with_the_seeds_exact_schema_still_works() {
    let db = TempDb::new("seed-schema");
    open_db(&db.path)
        .execute_batch(
            "PRAGMA journal_mode=WAL;
             CREATE TABLE calls (
               call_id TEXT PRIMARY KEY, idem_key TEXT NOT NULL UNIQUE, fingerprint TEXT NOT NULL,
               client_id TEXT, seq INTEGER, tool TEXT NOT NULL, args_json TEXT NOT NULL,
               status TEXT NOT NULL, result_json TEXT, error_json TEXT,
               attempt INTEGER NOT NULL DEFAULT 0, lease_until REAL, owner TEXT, effect_id TEXT,
               created_at REAL NOT NULL, updated_at REAL NOT NULL);
             CREATE INDEX idx_calls_status ON calls(status, lease_until);
             CREATE INDEX idx_calls_client_seq ON calls(client_id, seq);
             CREATE TABLE effects (
               effect_id TEXT PRIMARY KEY, call_id TEXT NOT NULL UNIQUE, tool TEXT NOT NULL,
               amount INTEGER, created_at REAL NOT NULL);
             CREATE TABLE audit (
               id INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL NOT NULL, call_id TEXT,
               event TEXT NOT NULL, detail TEXT);",
        )
        .unwrap();
    let server = Local::start(&db, &[]);
    let (status, created) = server.post("seed-1", &charge(7));
    assert_eq!(status, 202, "{created}");
    let call_id = created["call_id"].as_str().unwrap();
    assert_eq!(server.wait_terminal(call_id)["status"], "succeeded");
    assert_eq!(
        audit_events(&db.path, call_id),
        ["created", "claimed", "succeeded"]
    );
    assert_eq!(db.effects(), 1);
    assert_eq!(
        db.count("SELECT seq FROM sqlite_sequence WHERE name = 'audit'"),
        3
    );
    // Migration 5 rebuilt `calls` (keys per tenant) with this release's
    // indexes, so /stats now counts from idx_calls_status there too.
    let stats = server.stats();
    assert_eq!(stats["calls"], 1, "{stats}");
    assert_eq!(stats["by_status"], json!({"succeeded": 1}), "{stats}");
    assert_eq!(stats["attempts"], json!({"1": 1}), "{stats}");
}

/// A retry of a call in progress is answered from a read connection: it gets
/// its call back even while another connection holds the write lock, when a new
/// key (which must go through the writer) is refused with 503.
#[test]
fn retry_of_a_call_in_progress_does_not_need_the_writer() {
    let db = TempDb::new("inflight-retry");
    let server = Local::start(&db, &["--busy-timeout-ms", "200"]);
    let slow = json!({"tool": "sleep", "args": {"seconds": 5}});
    let (status, first) = server.post("k-inflight", &slow);
    assert_eq!(status, 202, "{first}");
    let blocker = server.sql();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let (status, retry) = server.post("k-inflight", &slow);
    let (new_status, new_key) = server.post("k-new-while-locked", &charge(1));
    blocker.execute_batch("ROLLBACK").unwrap();
    assert_eq!(status, 202, "{retry}");
    assert_eq!(retry["call_id"], first["call_id"]);
    assert_eq!(new_status, 503, "{new_key}");
    assert_eq!(new_key["error"]["code"], "unavailable");
}

/// Behind a quick call a worker claims a second waiting call in the same
/// operation: with one worker busy on a `sleep`, two charges queue up, and
/// their `claimed` audit rows carry the same worker and the same instant. Both
/// still run once.
#[test]
fn a_worker_claims_a_second_call_behind_a_quick_one() {
    let db = TempDb::new("claim-pair");
    let server = Local::start(&db, &["--workers", "1"]);
    let (_, sleeper) = server.post(
        "pair-sleep",
        &json!({"tool": "sleep", "args": {"seconds": 2}}),
    );
    let ids: Vec<String> = ["pair-a", "pair-b"]
        .iter()
        .map(|key| {
            server.post(key, &charge(1)).1["call_id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    for id in &ids {
        assert_eq!(server.wait_terminal(id)["status"], "succeeded");
    }
    server.wait_terminal(sleeper["call_id"].as_str().unwrap());
    let claims: Vec<(f64, String)> = ids
        .iter()
        .map(|id| {
            server
                .sql()
                .query_row(
                    "SELECT ts, detail FROM audit WHERE call_id = ?1 AND event = 'claimed'",
                    [id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .unwrap()
        })
        .collect();
    assert_eq!(claims[0], claims[1], "claimed together: {claims:?}");
    assert_eq!(db.effects(), 2);
}

/// `/stats` describes one moment: under a stream of new calls, its status and
/// attempt counts always add up to its call count, and effects never exceed it.
#[test]
fn stats_is_one_consistent_snapshot_under_load() {
    let db = TempDb::new("stats-snapshot");
    let server = Arc::new(Local::start(&db, &[]));
    let posters: Vec<_> = (0..6)
        .map(|t| {
            let server = Arc::clone(&server);
            std::thread::spawn(move || {
                for i in 0..150 {
                    let (status, body) = server.post(&format!("snap-{t}-{i}"), &charge(1));
                    assert_eq!(status, 202, "{body}");
                }
            })
        })
        .collect();
    let sum = |v: &Value| -> i64 {
        v.as_object()
            .unwrap()
            .values()
            .map(|n| n.as_i64().unwrap())
            .sum()
    };
    let mut polls = 0;
    while !posters.iter().all(|p| p.is_finished()) || polls < 50 {
        let stats = server.stats();
        let calls = stats["calls"].as_i64().unwrap();
        assert_eq!(sum(&stats["by_status"]), calls, "{stats}");
        assert_eq!(sum(&stats["attempts"]), calls, "{stats}");
        assert!(stats["effects"].as_i64().unwrap() <= calls, "{stats}");
        polls += 1;
    }
    for p in posters {
        p.join().unwrap();
    }
}
