//! The idempotency contract over HTTP: one key is one call (a repeat returns
//! the original and never runs it again, a settled call's retries match its
//! record), a new key is a new call, the same key with other arguments is
//! 409, equivalent arguments are the same request, and a client that timed
//! out gets the same call on its retry (the seed's scenarios, section
//! 12.10.1). The first three run on both backends (the real binary, through
//! `both_backends!`), as do the race and the retryable failure in
//! `pg_contract.rs`; the rest use the service in this process on SQLite.

use crate::pg_contract::{both_backends, Backend, Db};
use crate::support::Http;
use crate::support::{charge, Counts, Local, TempDb};
use serde_json::json;

both_backends!(
    same_key_returns_same_call,
    different_key_creates_new_call,
    same_key_different_args_conflict,
);

/// One key, one call: a repeated request returns the original call and never
/// runs it again.
fn same_key_returns_same_call(backend: Backend) {
    let db = Db::new(backend, "same-key");
    let server = db.server(&[]);
    let (status, first) = server.post("k-same", &charge(100));
    assert_eq!(status, 202, "{first}");
    // Its workers are idle: the call is created already claimed.
    assert_eq!(
        (first["status"].as_str(), first["attempt"].as_i64()),
        (Some("running"), Some(1)),
        "{first}"
    );
    let done = server.wait_terminal(first["call_id"].as_str().unwrap());
    let (status, again) = server.post("k-same", &charge(100));
    assert_eq!(status, 200, "a terminal call answers 200: {again}");
    assert_eq!(again["call_id"], first["call_id"]);
    assert_eq!(again["attempt"], 1, "never re-executed");
    assert_eq!(again["result"], done["result"]);
    assert_eq!(server.stats()["effects"], 1);
}

/// A new key is a new logical request.
fn different_key_creates_new_call(backend: Backend) {
    let db = Db::new(backend, "diff-key");
    let server = db.server(&[]);
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
fn same_key_different_args_conflict(backend: Backend) {
    let db = Db::new(backend, "conflict");
    let server = db.server(&[]);
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

/// A retry whose body is byte for byte the one a settled call was last
/// answered for is answered from the key cache before its JSON is parsed. It
/// must be exactly the full path's answer (status, headers, body) and count
/// as a replay; a body that only means the same takes the full path and gets
/// the same answer; a changed body is still 409, and the same bytes under
/// another key are a new call.
#[test]
fn a_byte_identical_retry_gets_exactly_the_full_paths_answer() {
    const REPLAYS: &str = "idempotent_tool_replays_total";
    let db = TempDb::new("same-bytes");
    let server = Local::start(&db, &[]);
    let post = |key: &str, text: &str| {
        let headers = [
            ("Idempotency-Key", key),
            ("Content-Type", "application/json"),
        ];
        server.call("POST", "/v1/tool-calls", &headers, Some(text))
    };
    let bytes = r#"{"tool":"charge","args":{"amount":7}}"#;
    let first = post("k-bytes", bytes);
    assert_eq!(first.status, 202, "{}", first.json());
    let call_id = first.json()["call_id"].as_str().unwrap().to_string();
    server.wait_terminal(&call_id);
    // The first retry of a settled call takes the full path, and leaves its
    // answer and its request's bytes in the cache.
    let full = post("k-bytes", bytes);
    let before = server.counter(REPLAYS);
    let cached = post("k-bytes", bytes);
    assert_eq!(server.counter(REPLAYS) - before, 1.0, "counted as a replay");
    let location = format!("/v1/tool-calls/{call_id}");
    for answer in [&full, &cached] {
        assert_eq!(
            (
                answer.status,
                answer.header("Idempotent-Replayed"),
                answer.header("Location")
            ),
            (200, Some("true"), Some(location.as_str()))
        );
    }
    assert_eq!(cached.body, full.body, "the very bytes of the full answer");

    let same_meaning = post(
        "k-bytes",
        r#"{ "args": {"amount": 7.0}, "tool": "charge" }"#,
    );
    assert_eq!((same_meaning.status, &same_meaning.body), (200, &full.body));
    let changed = post("k-bytes", r#"{"tool":"charge","args":{"amount":8}}"#);
    assert_eq!(changed.status, 409, "{}", changed.json());
    let other_key = post("k-bytes-2", bytes);
    assert_eq!(other_key.status, 202, "{}", other_key.json());
    assert_ne!(other_key.json()["call_id"].as_str(), Some(call_id.as_str()));
    server.wait_terminal(other_key.json()["call_id"].as_str().unwrap());
    assert_eq!(
        db.count(&format!(
            "SELECT count(*) FROM effects WHERE call_id = '{call_id}'"
        )),
        1
    );
}
