//! Ambiguous or hostile API input is refused before anything is stored, by the
//! service in this process: repeated JSON member names at any depth, repeated
//! `Idempotency-Key` headers, control characters in `client_id` and the key;
//! integer fields accept exactly the numbers the fingerprint calls integers;
//! and no error message repeats more than 100 bytes of what the client sent.

use crate::support::Counts;
use crate::support::Http;
use crate::support::{Local, TempDb};
use serde_json::{json, Value};

/// POST `body` with these headers; the status and the parsed answer.
fn post_raw(server: &Local, headers: &[(&str, &str)], body: &str) -> (u16, Value) {
    server.request("POST", "/v1/tool-calls", headers, Some(body))
}

/// The answer is `400 bad_request` whose message contains `names`.
fn assert_bad_request(what: &str, (status, answer): (u16, Value), names: &str) {
    assert_eq!(status, 400, "{what}: {answer}");
    assert_eq!(answer["error"]["code"], "bad_request", "{what}: {answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(names),
        "{what}: message {message:?} should name {names:?}"
    );
}

/// `{"args":{"amount":1,"amount":1000}}` must not charge 1000 (serde_json keeps
/// the last member): a name repeated in any object of the body is refused.
#[test]
fn repeated_json_members_at_any_depth_are_refused_and_store_nothing() {
    let db = TempDb::new("api-dup-members");
    let server = Local::start(&db, &[]);
    let cases = [
        (
            r#"{"tool":"charge","tool":"fail","args":{"amount":1}}"#,
            "tool",
        ),
        (
            r#"{"tool":"charge","args":{"amount":1,"amount":1000}}"#,
            "amount",
        ),
        (
            r#"{"tool":"charge","args":{"amount":1},"args":{"amount":2}}"#,
            "args",
        ),
        (
            r#"{"tool":"charge","args":{"amount":1},"seq":1,"seq":2}"#,
            "seq",
        ),
        (
            r#"{"tool":"charge","args":{"amount":1,"\u0061mount":2}}"#,
            "amount",
        ),
        (
            r#"{"tool":"send_email","args":{"to":"a@b","subject":"s","subject":null}}"#,
            "subject",
        ),
        (
            r#"{"tool":"sleep","args":{"seconds":0,"x":[{"y":1,"y":2}]}}"#,
            "y",
        ),
    ];
    for (i, (body, name)) in cases.iter().enumerate() {
        let key = format!("dup-{i}");
        let answer = post_raw(&server, &[("Idempotency-Key", &key)], body);
        assert_bad_request(body, answer.clone(), "more than once");
        assert_bad_request(body, answer, name);
        assert_eq!(server.by_key(&key).0, 404, "{body} left a call behind");
    }
    assert_eq!(db.calls(), 0);
    assert_eq!(db.effects(), 0);
}

/// Two `Idempotency-Key` headers are refused, equal or not, whatever their case:
/// a proxy could act on one and this server on the other.
#[test]
fn repeated_idempotency_key_headers_are_refused_and_store_nothing() {
    let db = TempDb::new("api-dup-key");
    let server = Local::start(&db, &[]);
    let body = r#"{"tool":"charge","args":{"amount":1}}"#;
    for headers in [
        [("Idempotency-Key", "k-a"), ("Idempotency-Key", "k-b")],
        [("Idempotency-Key", "k-a"), ("Idempotency-Key", "k-a")],
        [("idempotency-key", "k-a"), ("IDEMPOTENCY-KEY", "k-b")],
    ] {
        let answer = post_raw(&server, &headers, body);
        assert_bad_request(&format!("{headers:?}"), answer, "more than once");
    }
    assert_eq!(server.by_key("k-a").0, 404);
    assert_eq!(server.by_key("k-b").0, 404);
    assert_eq!(db.calls(), 0);
    let (status, call) = post_raw(&server, &[("Idempotency-Key", "k-a")], body);
    assert_eq!(status, 202, "one header is still fine: {call}");
}

/// Control characters never reach the database through `client_id` or the key.
#[test]
fn control_characters_in_client_id_or_key_are_refused() {
    let db = TempDb::new("api-control");
    let server = Local::start(&db, &[]);
    for client_id in [
        "a\u{1}b",
        "tab\there",
        "line\nbreak",
        "del\u{7f}",
        "c1\u{85}",
    ] {
        let body = json!({"tool": "charge", "args": {"amount": 1}, "client_id": client_id});
        let answer = post_raw(&server, &[("Idempotency-Key", "ctl")], &body.to_string());
        assert_bad_request(&format!("{client_id:?}"), answer, "client_id");
    }
    let body = r#"{"tool":"charge","args":{"amount":1}}"#;
    for key in ["k\u{1}y", "k\u{7f}y", "k y"] {
        let (status, answer) = post_raw(&server, &[("Idempotency-Key", key)], body);
        assert_eq!(status, 400, "{key:?}: {answer}");
        assert_eq!(answer["error"]["code"], "bad_request", "{key:?}: {answer}");
    }
    assert_eq!(db.calls(), 0);
    // Printable Unicode is fine.
    let body = json!({"tool": "charge", "args": {"amount": 1}, "client_id": "客户-1"});
    let (status, call) = post_raw(&server, &[("Idempotency-Key", "ok")], &body.to_string());
    assert_eq!(status, 202, "{call}");
    assert_eq!(call["client_id"], "客户-1");
}

/// `seq`, `amount`, `fail_times` and the chaos millisecond hooks accept the
/// numbers the fingerprint treats as integers (`1`, `1.0`, `1e0`) and no others.
#[test]
fn integer_fields_accept_exactly_the_fingerprints_integers() {
    let db = TempDb::new("api-integers");
    let server = Local::start(&db, &["--chaos"]);
    let accepted = [
        r#"{"tool":"charge","args":{"amount":1.0},"seq":1.0}"#,
        r#"{"tool":"charge","args":{"amount":1e0},"seq":2e0}"#,
        r#"{"tool":"charge","args":{"amount":3},"seq":-0.0}"#,
        r#"{"tool":"fail","args":{"fail_times":1.0}}"#,
        r#"{"tool":"charge","args":{"amount":4,"_delay_response_ms":1.0}}"#,
    ];
    let mut seqs = Vec::new();
    for (i, body) in accepted.iter().enumerate() {
        let (status, call) = post_raw(&server, &[("Idempotency-Key", &format!("int-{i}"))], body);
        assert_eq!(status, 202, "{body}: {call}");
        seqs.push(call["seq"].clone());
    }
    assert_eq!(
        seqs[..3],
        [json!(1), json!(2), json!(0)],
        "stored as integers"
    );
    let refused = [
        (r#"{"tool":"charge","args":{"amount":1},"seq":1.5}"#, "seq"),
        (r#"{"tool":"charge","args":{"amount":1},"seq":"1"}"#, "seq"),
        (
            r#"{"tool":"charge","args":{"amount":1},"seq":9223372036854775808}"#,
            "seq",
        ),
        (
            r#"{"tool":"charge","args":{"amount":1},"seq":1e300}"#,
            "seq",
        ),
        (r#"{"tool":"charge","args":{"amount":1.5}}"#, "args.amount"),
        (
            r#"{"tool":"fail","args":{"fail_times":0.5}}"#,
            "args.fail_times",
        ),
        (
            r#"{"tool":"charge","args":{"amount":1,"_stall_ms":1.5}}"#,
            "_stall_ms",
        ),
    ];
    for (i, (body, name)) in refused.iter().enumerate() {
        let answer = post_raw(&server, &[("Idempotency-Key", &format!("bad-{i}"))], body);
        assert_bad_request(body, answer, name);
    }
    assert_eq!(
        db.calls(),
        accepted.len() as i64,
        "no refused request left a call"
    );
}

/// A 500 KB tool name, field name or key used to come back whole in the error
/// body; now every message repeats at most 100 bytes of client input.
#[test]
fn error_messages_quote_at_most_100_bytes_of_client_input() {
    let db = TempDb::new("api-quote");
    let server = Local::start(&db, &[]);
    let huge = "x".repeat(500_000);
    let bodies = [
        json!({"tool": huge, "args": {}}),
        json!({"tool": "charge", "args": {"amount": 1, huge.clone(): 1}}),
        json!({"tool": "charge", "args": {"amount": 1}, huge.clone(): 1}),
        json!({"tool": "charge", "args": {"amount": 1}, "seq": huge}),
    ];
    for body in &bodies {
        let text = body.to_string();
        let (status, answer) = post_raw(&server, &[("Idempotency-Key", "q")], &text);
        assert_eq!(
            status,
            400,
            "{}",
            &answer.to_string()[..200.min(answer.to_string().len())]
        );
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.len() < 300,
            "{} bytes: {}",
            message.len(),
            &message[..300]
        );
    }
    let repeated = format!(r#"{{"tool":"charge","args":{{"{huge}":1,"{huge}":2}}}}"#);
    let (status, answer) = post_raw(&server, &[("Idempotency-Key", "q")], &repeated);
    assert_eq!(status, 400);
    assert!(
        answer.to_string().len() < 400,
        "{} bytes",
        answer.to_string().len()
    );

    let long_wait = format!("/v1/tool-calls?wait={}", "9".repeat(6000));
    let (status, answer) = server.request(
        "POST",
        &long_wait,
        &[("Idempotency-Key", "q")],
        Some(&json!({"tool": "charge", "args": {"amount": 1}}).to_string()),
    );
    assert_eq!(status, 400);
    assert!(answer.to_string().len() < 400, "{answer}");
    let (status, answer) = server.by_key(&"y".repeat(4000));
    assert_eq!(status, 404);
    assert!(answer.to_string().len() < 400, "{answer}");
    assert_eq!(db.calls(), 0);

    // A conflict names the key, a client's input of up to 255 bytes: 100 of them.
    let key = "k".repeat(255);
    let (status, _) = server.post(&key, &json!({"tool": "charge", "args": {"amount": 1}}));
    assert_eq!(status, 202);
    let (status, answer) = server.post(&key, &json!({"tool": "charge", "args": {"amount": 2}}));
    assert_eq!(status, 409, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains(&"k".repeat(100)), "{message}");
    assert!(!message.contains(&"k".repeat(101)), "{message}");
    assert_eq!(db.calls(), 1);
}
