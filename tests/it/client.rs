//! The client's retry policy (section 12.8), end to end: the real `client`
//! binary against the service (in this process; with the chaos proxy where a
//! response must be lost), plus library checks against a scripted in-process
//! upstream. Each test's doc line names the rule it proves.

use crate::support;

use crate::support::Counts;
use crate::support::Http;
use crate::support::{
    run_client, run_client_with_env, AuthFile, FakeUpstream, Local, Proxy, Reply, TempDb,
};
use idempotent_tool::client::{call_tool, poll_until_terminal, CallOptions, CallResult};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn keys_of(attempts: &[Value]) -> Vec<&str> {
    attempts
        .iter()
        .map(|a| a["key"].as_str().unwrap())
        .collect()
}

/// A timed-out POST is retried with the same key, and the retry returns the
/// original call instead of executing again: one call, one effect.
#[test]
fn retries_a_timeout_with_the_same_key() {
    let db = TempDb::new("client-timeout");
    let server = Local::start(&db, &["--chaos"]);
    // The hook holds only the first attempt's response; 4 s against a 1 s
    // timeout leaves a wide margin on a slow machine.
    let run = run_client(&[
        "--base",
        &server.base,
        "--key",
        "timeout-k1",
        "--tool",
        "charge",
        "--args",
        r#"{"amount":100,"_delay_response_ms":4000}"#,
        "--timeout",
        "1",
        "--retries",
        "8",
        "--poll",
        "--poll-timeout",
        "30",
    ]);
    assert!(run.output.status.success(), "{}", run.describe());
    let attempts = run.attempts();
    assert_eq!(attempts[0]["error"], "timed out", "{}", run.describe());
    assert!(attempts.len() >= 2, "{}", run.describe());
    assert!(keys_of(attempts).iter().all(|k| *k == "timeout-k1"));
    assert_eq!(run.last()["status"], "succeeded");
    assert_eq!(db.calls(), 1);
    assert_eq!(db.effects(), 1);
}

/// A 409 (same key, different args) is returned at once, never retried.
#[test]
fn does_not_retry_a_conflict() {
    let db = TempDb::new("client-409");
    let server = Local::start(&db, &[]);
    let first = run_client(&[
        "--base",
        &server.base,
        "--key",
        "k409",
        "--tool",
        "charge",
        "--amount",
        "1",
        "--poll",
    ]);
    assert!(first.output.status.success(), "{}", first.describe());
    let second = run_client(&[
        "--base",
        &server.base,
        "--key",
        "k409",
        "--tool",
        "charge",
        "--amount",
        "2",
        "--retries",
        "5",
    ]);
    assert_eq!(
        second.output.status.code(),
        Some(1),
        "{}",
        second.describe()
    );
    assert_eq!(second.attempts().len(), 1, "{}", second.describe());
    assert_eq!(second.attempts()[0]["http"], 409);
    assert_eq!(second.last()["error"]["code"], "idempotency_conflict");
    assert_eq!(db.effects(), 1);
}

/// When no response ever carried a `call_id`, the client finds the call by
/// key (section 12.8.4) instead of giving up or inventing a key.
#[test]
fn finds_the_call_by_key_when_every_response_was_lost() {
    let db = TempDb::new("client-bykey");
    let server = Local::start(&db, &[]);
    // Both POSTs lose their response; the third request (the lookup) passes.
    let proxy = Proxy::start(server.addr(), "drop-response", &["--times", "2"]);
    let run = run_client(&[
        "--base",
        &proxy.base,
        "--key",
        "bykey-k1",
        "--tool",
        "charge",
        "--amount",
        "100",
        "--timeout",
        "10",
        "--retries",
        "1",
        "--poll",
        "--poll-timeout",
        "30",
    ]);
    assert!(run.output.status.success(), "{}", run.describe());
    let attempts = run.attempts();
    assert_eq!(attempts.len(), 3, "{}", run.describe());
    assert!(attempts[..2].iter().all(|a| a["error"].is_string()));
    assert_eq!(attempts[2]["lookup"], "by-key");
    assert_eq!(attempts[2]["http"], 200);
    assert_eq!(run.last()["call_id"], attempts[2]["call_id"]);
    assert_eq!(db.calls(), 1);
    assert_eq!(db.effects(), 1);
}

/// The seed's deliberate mistake reproduces the bug it exists to show: a new
/// key per retry turns one lost response into two calls and two effects.
#[test]
fn new_key_on_retry_produces_two_effects() {
    let db = TempDb::new("client-newkey");
    let server = Local::start(&db, &[]);
    let proxy = Proxy::start(server.addr(), "drop-response", &["--times", "1"]);
    let run = run_client(&[
        "--base",
        &proxy.base,
        "--key",
        "demo-bad",
        "--tool",
        "charge",
        "--amount",
        "100",
        "--timeout",
        "10",
        "--retries",
        "3",
        "--new-key-on-retry",
        "--poll",
        "--poll-timeout",
        "30",
    ]);
    assert!(run.output.status.success(), "{}", run.describe());
    assert_eq!(keys_of(run.attempts()), ["demo-bad-0", "demo-bad-1"]);
    // The dropped call runs in the background; wait for it, not for a time.
    support::eventually("both charges to land", || db.effects() == 2);
    assert_eq!(db.calls(), 2);
}

/// Nothing listening: every attempt and the lookup fail, the final line is
/// `retry_exhausted` and the exit status is 1.
#[test]
fn gives_up_with_retry_exhausted_when_nothing_answers() {
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", free.local_addr().unwrap());
    drop(free);
    let run = run_client(&[
        "--base",
        &base,
        "--key",
        "nobody",
        "--tool",
        "charge",
        "--amount",
        "1",
        "--retries",
        "2",
        "--timeout",
        "5",
    ]);
    assert_eq!(run.output.status.code(), Some(1), "{}", run.describe());
    assert_eq!(run.attempts().len(), 4, "3 POSTs and one lookup");
    assert_eq!(run.attempts()[3]["lookup"], "by-key");
    assert_eq!(keys_of(run.attempts()), ["nobody"; 4]);
    assert_eq!(run.last()["error"]["code"], "retry_exhausted");
}

fn pending_call() -> Value {
    json!({"call_id": "c_0000000000000001", "status": "pending", "attempt": 0})
}

/// 503 and 429 are retried (honouring `Retry-After`) with the same key.
#[test]
fn retries_503_and_429_with_the_same_key() {
    let upstream = FakeUpstream::start(|_, index| match index {
        0 => {
            let mut reply = Reply::json(503, json!({"error": {"code": "unavailable"}}));
            reply.headers.push(("Retry-After".into(), "0".into()));
            reply
        }
        1 => Reply::json(429, json!({"error": {"code": "too_many_requests"}})),
        _ => Reply::json(202, pending_call()),
    });
    let mut opts = CallOptions::new(&upstream.base(), "k-busy", "charge", json!({"amount": 1}));
    // Not a timeout test: the default 1 s per attempt timed one out (an extra
    // attempt) on a box loaded to 35.
    opts.timeout = Some(Duration::from_secs(30));
    let outcome = call_tool(&opts);
    let statuses: Vec<_> = outcome.attempts.iter().map(|a| a.http).collect();
    assert_eq!(statuses, [Some(503), Some(429), Some(202)]);
    assert!(matches!(outcome.result, CallResult::Call(_)));
    let seen = upstream.seen();
    assert_eq!(seen.len(), 3);
    assert!(seen
        .iter()
        .all(|r| r.header("idempotency-key") == Some("k-busy")));
}

/// 400 and 422 are final: one attempt, the server's body returned.
#[test]
fn does_not_retry_400_or_422() {
    for status in [400, 422] {
        let upstream = FakeUpstream::start(move |_, _| {
            Reply::json(status, json!({"error": {"code": "bad_request"}}))
        });
        let opts = CallOptions::new(&upstream.base(), "k-bad", "charge", json!({}));
        let outcome = call_tool(&opts);
        assert_eq!(outcome.attempts.len(), 1);
        assert!(matches!(outcome.result, CallResult::Rejected { http, .. } if http == status));
        assert_eq!(upstream.seen().len(), 1);
    }
}

/// Polling is bounded: a call that never finishes returns an error carrying
/// the last state seen once the deadline passes.
#[test]
fn polling_stops_at_its_deadline() {
    let upstream = FakeUpstream::start(|_, _| Reply::json(200, pending_call()));
    let deadline = Instant::now() + Duration::from_millis(300);
    let error = poll_until_terminal(&upstream.base(), "c_0000000000000001", deadline)
        .expect_err("a call that stays pending never polls to a terminal state");
    assert_eq!(error.last_seen.unwrap()["status"], "pending");
    assert!(upstream.seen()[0]
        .target
        .ends_with("/v1/tool-calls/c_0000000000000001"));
}

/// Polling returns as soon as the call is terminal.
#[test]
fn polling_returns_the_terminal_call() {
    let upstream = FakeUpstream::start(|_, index| {
        let status = if index < 2 { "running" } else { "succeeded" };
        Reply::json(200, json!({"call_id": "c_1", "status": status}))
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let call = poll_until_terminal(&upstream.base(), "c_1", deadline).unwrap();
    assert_eq!(call["status"], "succeeded");
    assert_eq!(upstream.seen().len(), 3);
}

/// Against a server with `--auth-file`, the client sends its bearer token —
/// from `--token`, else `IDEMPOTENT_TOOL_TOKEN` — on the POST and the polls
/// after it, on `--get` and on `--mcp`; without one it is refused `401`.
#[test]
fn a_token_from_the_flag_or_the_variable_reaches_every_request() {
    let auth = AuthFile::new(&[("acme", "tok-acme", true)]);
    let db = TempDb::new("client-token");
    let server = Local::start(&db, &["--auth-file", auth.path_str()]);
    let charge = |key: &str, extra: &[&str], env: &[(&str, &str)]| {
        let mut args = vec!["--base", &server.base, "--tool", "charge", "--amount", "5"];
        args.extend_from_slice(&["--key", key, "--poll"]);
        args.extend_from_slice(extra);
        run_client_with_env(&args, env)
    };
    let refused = charge("tok-0", &[], &[]);
    assert_eq!(
        refused.last()["error"]["code"],
        "unauthorized",
        "{}",
        refused.describe()
    );
    for (key, extra, env) in [
        ("tok-1", &["--token", "tok-acme"][..], &[][..]),
        ("tok-2", &[], &[("IDEMPOTENT_TOOL_TOKEN", "tok-acme")]),
        (
            "tok-3",
            &["--token", "tok-acme"],
            &[("IDEMPOTENT_TOOL_TOKEN", "wrong")],
        ),
        ("tok-4", &["--mcp", "--token", "tok-acme"], &[]),
    ] {
        let run = charge(key, extra, env);
        assert!(run.output.status.success(), "{key}: {}", run.describe());
        assert_eq!(run.last()["status"], "succeeded", "{}", run.describe());
    }
    assert_eq!(db.calls(), 4);
    let get = |env: &[(&str, &str)]| {
        std::process::Command::new(support::CLIENT_BIN)
            .args(["--base", &server.base, "--get", "/stats"])
            .env_remove("IDEMPOTENT_TOOL_TOKEN")
            .envs(env.iter().copied())
            .output()
            .unwrap()
    };
    assert!(!get(&[]).status.success());
    assert!(get(&[("IDEMPOTENT_TOOL_TOKEN", "tok-acme")])
        .status
        .success());
    let bad = charge("tok-5", &["--token", "tok\r\nX-Injected: 1"], &[]);
    assert_eq!(bad.output.status.code(), Some(2), "{}", bad.describe());
}
