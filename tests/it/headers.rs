//! The headers of the ecosystem issue, against the service in this process, on
//! each path where they apply and absent where they do not:
//! `Idempotent-Replayed` (only on a POST that returns an existing call),
//! `Location` (every POST that returns a call), `Retry-After` (every `202`),
//! `X-Request-Id` (every response, the server's own answers included), and
//! `call_id` in a `409`.

use crate::support::raw::RawClient;
use crate::support::Http;
use crate::support::{charge, Local, TempDb};
use idempotent_tool::client::HttpResponse;
use serde_json::{json, Value};

fn post(server: &Local, key: &str, body: &Value, extra: &[(&str, &str)]) -> HttpResponse {
    let mut headers = vec![("Idempotency-Key", key)];
    headers.extend_from_slice(extra);
    server.call("POST", "/v1/tool-calls", &headers, Some(&body.to_string()))
}

fn location_of(response: &HttpResponse) -> Option<String> {
    response.header("Location").map(String::from)
}

/// The first POST creates (no `Idempotent-Replayed`); every later answer
/// with the same call — in progress, settled from the database, settled from
/// memory — says `Idempotent-Replayed: true`; all of them carry the call's
/// `Location`, and only the `202`s carry `Retry-After`.
#[test]
fn a_replay_is_marked_and_every_call_answer_has_its_location() {
    let db = TempDb::new("headers-replay");
    let server = Local::start(&db, &[]);
    let slow = json!({"tool": "sleep", "args": {"seconds": 0.3}});
    let first = post(&server, "h-1", &slow, &[]);
    assert_eq!(first.status, 202);
    let call_id = first.json()["call_id"].as_str().unwrap().to_string();
    let url = format!("/v1/tool-calls/{call_id}");
    assert_eq!(location_of(&first), Some(url.clone()));
    assert_eq!(first.header("Idempotent-Replayed"), None);
    assert_eq!(first.header("Retry-After"), Some("1"));
    assert_eq!(
        first.json()["expires_at"],
        Value::Null,
        "in flight: no expiry"
    );

    let in_progress = post(&server, "h-1", &slow, &[]);
    assert_eq!(in_progress.status, 202);
    assert_eq!(in_progress.header("Idempotent-Replayed"), Some("true"));
    assert_eq!(location_of(&in_progress), Some(url.clone()));
    assert_eq!(in_progress.header("Retry-After"), Some("1"));

    let done = server.wait_terminal(&call_id);
    assert!(done["expires_at"].as_f64().unwrap() > done["updated_at"].as_f64().unwrap());
    for _ in 0..3 {
        // The first settled answer comes from the database, the next from memory.
        let replay = post(&server, "h-1", &slow, &[]);
        assert_eq!(replay.status, 200);
        assert_eq!(replay.header("Idempotent-Replayed"), Some("true"));
        assert_eq!(location_of(&replay), Some(url.clone()));
        assert_eq!(
            replay.header("Retry-After"),
            None,
            "no poll interval on a 200"
        );
        assert_eq!(replay.json()["call_id"], call_id.as_str());
    }
    let fresh = post(&server, "h-2", &charge(1), &[("X-Request-Id", "mine")]);
    assert_eq!(fresh.header("Idempotent-Replayed"), None);
    // GET answers are not POST answers: no Location, no replay marker.
    let got = server.call("GET", &url, &[], None);
    assert_eq!(got.status, 200);
    assert_eq!(
        (got.header("Location"), got.header("Idempotent-Replayed")),
        (None, None)
    );
}

/// A retryable failure reset by a same-key POST runs again: a new attempt,
/// so not a replay; it still carries `Location` and `Retry-After`.
#[test]
fn a_reset_of_a_retryable_failure_is_not_a_replay() {
    let db = TempDb::new("headers-reset");
    let server = Local::start(&db, &[]);
    let flaky = json!({"tool": "fail", "args": {"fail_times": 1}});
    let first = post(&server, "h-reset", &flaky, &[]);
    let call_id = first.json()["call_id"].as_str().unwrap().to_string();
    assert_eq!(server.wait_terminal(&call_id)["status"], "failed");
    let reset = post(&server, "h-reset", &flaky, &[]);
    assert_eq!(reset.status, 202, "{}", reset.json());
    assert_eq!(reset.header("Idempotent-Replayed"), None);
    assert_eq!(
        location_of(&reset),
        Some(format!("/v1/tool-calls/{call_id}"))
    );
    assert_eq!(reset.header("Retry-After"), Some("1"));
}

/// A `409` names the call that owns the key in `error.call_id`; it is no
/// call answer, so it has no `Location` and no replay marker.
#[test]
fn a_conflict_names_the_existing_call() {
    let db = TempDb::new("headers-409");
    let server = Local::start(&db, &[]);
    let first = post(&server, "h-409", &charge(1), &[]);
    let conflict = post(&server, "h-409", &charge(2), &[]);
    assert_eq!(conflict.status, 409);
    let body = conflict.json();
    assert_eq!(body["error"]["code"], "idempotency_conflict");
    assert_eq!(body["error"]["call_id"], first.json()["call_id"], "{body}");
    assert_eq!(location_of(&conflict), None);
    assert_eq!(conflict.header("Idempotent-Replayed"), None);
}

/// `GET` of a call in progress suggests a poll interval; a settled one does not.
#[test]
fn a_202_from_get_has_retry_after() {
    let db = TempDb::new("headers-get-202");
    let server = Local::start(&db, &[]);
    let first = post(
        &server,
        "h-get",
        &json!({"tool": "sleep", "args": {"seconds": 0.5}}),
        &[],
    );
    let call_id = first.json()["call_id"].as_str().unwrap().to_string();
    for path in [
        format!("/v1/tool-calls/{call_id}"),
        "/v1/tool-calls/by-key/h-get".to_string(),
    ] {
        let got = server.call("GET", &path, &[], None);
        if got.status == 202 {
            assert_eq!(got.header("Retry-After"), Some("1"), "{path}");
        }
    }
    server.wait_terminal(&call_id);
    let got = server.call("GET", &format!("/v1/tool-calls/{call_id}"), &[], None);
    assert_eq!((got.status, got.header("Retry-After")), (200, None));
}

/// `X-Request-Id`: a valid client id is echoed; an invalid one (too long,
/// a space) is replaced, never echoed; without one, one is made — on every
/// kind of answer, the server's own `400` for malformed framing included.
#[test]
fn every_response_carries_a_request_id() {
    let db = TempDb::new("headers-request-id");
    let server = Local::start(&db, &[]);
    let echoed = server.call("GET", "/healthz", &[("X-Request-Id", "trace-42")], None);
    assert_eq!(echoed.header("X-Request-Id"), Some("trace-42"));
    let too_long = "x".repeat(129);
    for bad in [too_long.as_str(), "has space"] {
        let replaced = server.call("GET", "/healthz", &[("X-Request-Id", bad)], None);
        let id = replaced.header("X-Request-Id").expect("an id");
        assert_ne!(id, bad);
        assert!(
            !id.is_empty() && id.len() <= 128 && id.bytes().all(|b| (0x21..=0x7e).contains(&b))
        );
    }
    let mut seen = std::collections::HashSet::new();
    for (method, path) in [
        ("GET", "/healthz"),
        ("GET", "/stats"),
        ("GET", "/metrics"),
        ("GET", "/openapi.yaml"),
        ("GET", "/nope"),
        ("DELETE", "/stats"),
        ("POST", "/v1/tool-calls"),
        ("GET", "/v1/tool-calls/c_0000000000000000"),
        ("GET", "/v1/tool-calls/c_0000000000000000/audit"),
    ] {
        let response = server.call(method, path, &[], None);
        let id = response.header("X-Request-Id");
        assert!(id.is_some(), "{method} {path} ({})", response.status);
        assert!(seen.insert(id.unwrap().to_string()), "ids are distinct");
    }
    // The server's own answer to bytes it cannot parse.
    let mut raw = RawClient::connect(server.addr());
    raw.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n");
    let refused = raw.reply();
    assert_eq!(refused.status, 400);
    assert!(
        refused.header("X-Request-Id").is_some(),
        "{:?}",
        refused.headers
    );
}
