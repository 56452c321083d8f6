//! The routes' edges, by the service in this process: `?wait=` and its
//! bound, lookups by id and by percent-encoded key, 404 and 405 (with
//! `Allow`), and bad or oversized requests refused with a stable code while
//! creating nothing. The test that posts a crash hook uses the real binary,
//! so a regression there kills a child rather than the test run.

use crate::support::Http;
use crate::support::{charge, Local, Server, TempDb};
use serde_json::json;

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
        "DELETE",
        "/v1/tool-calls",
        &[],
        None,
        None,
    )
    .unwrap();
    assert_eq!(resp.status, 405);
    assert_eq!(resp.header("allow"), Some("GET, POST"));
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

/// Every JSON body ends with a newline — a created call, its replay from
/// memory, a read, an error, `/healthz`, `/stats`, `/v1/tools` and MCP — so
/// a pasted `curl` leaves the prompt on its own line.
#[test]
fn every_json_body_ends_with_a_newline() {
    let db = TempDb::new("newline");
    let server = Local::start(&db, &[]);
    let body = charge(1).to_string();
    let post = |key: &str| {
        server.call(
            "POST",
            "/v1/tool-calls?wait=5",
            &[("Idempotency-Key", key)],
            Some(&body),
        )
    };
    let first = post("nl-1");
    let call_id = first.json()["call_id"].as_str().unwrap().to_string();
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    let answers = [
        first,
        post("nl-1"),
        post("nl-1"),
        server.call("GET", &format!("/v1/tool-calls/{call_id}"), &[], None),
        server.call("GET", "/v1/tool-calls/c_0000000000000000", &[], None),
        server.call("POST", "/v1/tool-calls", &[], Some(&body)),
        server.call("GET", "/healthz", &[], None),
        server.call("GET", "/stats", &[], None),
        server.call("GET", "/v1/tools", &[], None),
        server.call("POST", "/mcp", &[], Some(&ping)),
    ];
    for answer in answers {
        let text = String::from_utf8_lossy(&answer.body).into_owned();
        assert!(
            text.ends_with("}\n") && !text.ends_with("\n\n"),
            "{} {text:?}",
            answer.status
        );
    }
}
