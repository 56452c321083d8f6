//! The chaos proxy, one test per mode, against a recording in-process upstream
//! (plus one run against the service, in this process): each test names what
//! the mode must do to the exchange and checks both sides of it, the client's
//! view and what the upstream physically received.

use crate::support;

use crate::support::Counts;
use crate::support::Http;
use crate::support::{FakeUpstream, Local, Proxy, Reply, TempDb};
use idempotent_tool::client::{request_once, Connection};
use serde_json::json;
use std::time::Duration;

/// Generous: the proxy and upstream are local, but the machine may be busy.
const TIMEOUT: Option<Duration> = Some(Duration::from_secs(30));

/// An upstream that echoes the request target and its index, so a mixed-up
/// response would show the wrong path.
fn echo_upstream() -> FakeUpstream {
    FakeUpstream::start(|request, index| {
        Reply::json(200, json!({"path": request.target, "index": index}))
    })
}

/// `pass` keeps a keep-alive connection's responses in request order.
#[test]
fn pass_keeps_keep_alive_responses_in_order() {
    let upstream = echo_upstream();
    let proxy = Proxy::start(&upstream.addr, "pass", &[]);
    let mut conn = Connection::open(proxy.addr(), TIMEOUT).unwrap();
    for path in ["/a", "/b", "/c"] {
        let response = conn.request("GET", path, &[], None).unwrap();
        assert_eq!(response.status, 200);
        assert_eq!(response.json()["path"], path);
    }
    assert_eq!(upstream.seen().len(), 3);
    proxy.proc.wait_for_stderr("[pass] forwarded, upstream 200");
}

/// `pass` forwards the body and headers unchanged.
#[test]
fn pass_forwards_body_and_headers() {
    let upstream = echo_upstream();
    let proxy = Proxy::start(&upstream.addr, "pass", &[]);
    let body = br#"{"tool":"charge","args":{"amount":7}}"#;
    let response = request_once(
        &proxy.base,
        "POST",
        "/v1/tool-calls",
        &[("Idempotency-Key", "k-pass")],
        Some(body),
        TIMEOUT,
    )
    .unwrap();
    assert_eq!(response.status, 200);
    let seen = upstream.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].body, body);
    assert_eq!(seen[0].header("idempotency-key"), Some("k-pass"));
}

/// `drop-response` lets the upstream answer in full, then closes the client's
/// connection without the answer; `--times 1` passes the next request.
#[test]
fn drop_response_closes_the_client_after_the_upstream_answered() {
    let upstream = echo_upstream();
    let proxy = Proxy::start(&upstream.addr, "drop-response", &["--times", "1"]);
    let dropped = request_once(&proxy.base, "GET", "/first", &[], None, TIMEOUT);
    let error = dropped.expect_err("the first response must be dropped");
    assert_eq!(error.kind(), std::io::ErrorKind::UnexpectedEof, "{error}");
    assert_eq!(upstream.seen().len(), 1, "the request reached the upstream");
    proxy
        .proc
        .wait_for_stderr("[drop-response] upstream 200; closed client without the response");

    let passed = request_once(&proxy.base, "GET", "/second", &[], None, TIMEOUT).unwrap();
    assert_eq!(passed.json()["path"], "/second");
    proxy.proc.wait_for_stderr("#2 GET /second [pass]");
}

/// `delay-response` still delivers the upstream's response, intact.
#[test]
fn delay_response_delivers_the_held_response() {
    let upstream = echo_upstream();
    let proxy = Proxy::start(&upstream.addr, "delay-response", &["--delay-ms", "200"]);
    let mut conn = Connection::open(proxy.addr(), TIMEOUT).unwrap();
    for path in ["/slow-1", "/slow-2"] {
        let response = conn.request("GET", path, &[], None).unwrap();
        assert_eq!(response.json()["path"], path);
    }
    proxy.proc.wait_for_stderr("held the response 200 ms");
}

/// A delayed response makes a client with a shorter timeout give up while the
/// upstream has already answered: the "timed out" of section 12.11.3.
#[test]
fn delay_response_longer_than_the_client_timeout_times_it_out() {
    let upstream = echo_upstream();
    let proxy = Proxy::start(&upstream.addr, "delay-response", &["--delay-ms", "3000"]);
    let short = Some(Duration::from_millis(200));
    let error = request_once(&proxy.base, "GET", "/late", &[], None, short).unwrap_err();
    assert!(
        matches!(
            error.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
        "{error}"
    );
    support::eventually("the upstream to see the request", || {
        upstream.seen().len() == 1
    });
}

/// `duplicate-request` sends two physical requests and answers once; the next
/// request on the same keep-alive connection gets its own response, not the copy's.
#[test]
fn duplicate_request_sends_two_physical_requests_and_answers_once() {
    let upstream = echo_upstream();
    let proxy = Proxy::start(&upstream.addr, "duplicate-request", &["--times", "1"]);
    let mut conn = Connection::open(proxy.addr(), TIMEOUT).unwrap();
    let body = br#"{"tool":"charge","args":{"amount":1}}"#;
    let first = conn
        .request(
            "POST",
            "/v1/tool-calls",
            &[("Idempotency-Key", "k-dup")],
            Some(body),
        )
        .unwrap();
    assert_eq!(first.json()["index"], 0, "answered with the first response");
    let next = conn.request("GET", "/after", &[], None).unwrap();
    assert_eq!(next.json()["path"], "/after");

    let seen = upstream.seen();
    assert_eq!(seen.len(), 3, "{seen:?}");
    let posts: Vec<_> = seen.iter().filter(|r| r.method == "POST").collect();
    assert_eq!(posts.len(), 2);
    assert_eq!(posts[0].body, posts[1].body);
    assert_eq!(posts[0].header("idempotency-key"), Some("k-dup"));
    assert_eq!(posts[1].header("idempotency-key"), Some("k-dup"));
    assert_ne!(
        posts[0].connection, posts[1].connection,
        "the copy is a separate physical request on its own connection"
    );
    proxy
        .proc
        .wait_for_stderr("sent twice: upstream 200 and 200");
}

/// An unreachable upstream becomes a 502, never a hang.
#[test]
fn unreachable_upstream_answers_502() {
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = free.local_addr().unwrap().to_string();
    drop(free);
    let proxy = Proxy::start(&dead, "pass", &[]);
    let response = request_once(&proxy.base, "GET", "/x", &[], None, TIMEOUT).unwrap();
    assert_eq!(response.status, 502);
    assert_eq!(response.json()["error"]["code"], "bad_gateway");
}

/// Against the real server, a duplicated request with one key is absorbed by
/// the idempotency table: two physical requests, one call, one effect.
#[test]
fn duplicate_request_to_the_server_keeps_one_effect() {
    let db = TempDb::new("proxy-dup");
    let server = Local::start(&db, &[]);
    let proxy = Proxy::start(server.addr(), "duplicate-request", &[]);
    let run = support::run_client(&[
        "--base",
        &proxy.base,
        "--key",
        "dup-k1",
        "--tool",
        "charge",
        "--amount",
        "100",
        "--timeout",
        "10",
        "--poll",
        "--poll-timeout",
        "30",
    ]);
    assert!(run.output.status.success(), "{}", run.describe());
    proxy.proc.wait_for_stderr("sent twice");
    assert_eq!(db.calls(), 1);
    assert_eq!(db.effects(), 1);
}
