//! The shared retry matrix (`clients/retry-matrix.json`) through the Rust
//! client (`idempotent_tool::client::call_tool`), against the real binary:
//! each fault is made for real (the chaos proxy, a full queue, a stalled
//! worker, a wrong token, `kill -9` and a restart on the same port and
//! database) and each case must end as the file says — the same file the
//! Python and TypeScript clients' suites read, so the three agree by test.

use crate::support::{
    address_after, eventually, AuthFile, Http, Proc, Proxy, Server, TempDb, SERVER_BIN,
};
use idempotent_tool::client::{call_tool_with, AttemptRecord, CallOptions, CallResult};
use serde_json::{json, Value};
use std::thread;
use std::time::{Duration, Instant};

const RIGHT_TOKEN: &str = "matrix-tenant-token";

fn matrix() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/clients/retry-matrix.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("the matrix")).expect("JSON")
}

/// Where a case runs: the server, the URL the client talks to, the token the
/// runner's own requests carry, and the proxy kept alive for the case.
struct Setup {
    server: Server,
    base: String,
    token: Option<String>,
    _proxy: Option<Proxy>,
    _auth: Option<AuthFile>,
}

impl Setup {
    fn headers(&self) -> Vec<(&'static str, String)> {
        self.token
            .iter()
            .map(|t| ("Authorization", format!("Bearer {t}")))
            .collect()
    }

    fn get(&self, path: &str) -> Value {
        let headers = self.headers();
        let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let (status, body) = self.server.request("GET", path, &headers, None);
        assert_eq!(status, 200, "GET {path}: {body}");
        body
    }

    fn calls_of(&self, tool: &str) -> Vec<Value> {
        let page = self.get(&format!("/v1/tool-calls?tool={tool}&limit=500"));
        assert!(page["next"].is_null(), "one page holds every call");
        page["calls"].as_array().expect("calls").clone()
    }

    fn queued(&self) -> f64 {
        let scrape = self.server.call("GET", "/metrics", &[], None);
        String::from_utf8_lossy(&scrape.body)
            .lines()
            .find_map(|l| l.strip_prefix("idempotent_tool_queued_calls "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    }
}

fn fault_setup(case: &Value, db: &TempDb) -> Setup {
    let plain = |server: Server| Setup {
        base: server.base.clone(),
        server,
        token: None,
        _proxy: None,
        _auth: None,
    };
    match case["fault"].as_str().expect("fault") {
        "drop_first_response" => {
            let server = Server::start(db, &[]);
            let proxy = Proxy::start(server.addr(), "drop-response", &["--times", "1"]);
            Setup {
                base: proxy.base.clone(),
                _proxy: Some(proxy),
                ..plain(server)
            }
        }
        "overloaded" => {
            let setup = plain(Server::start(db, &["--workers", "1", "--max-pending", "1"]));
            let seconds = &case["filler_sleep_s"];
            for n in 1..=2 {
                let body = json!({"tool": "sleep", "args": {"seconds": seconds}});
                assert_eq!(setup.server.post(&format!("filler-{n}"), &body).0, 202);
            }
            eventually("a call queued for the one worker", || setup.queued() >= 1.0);
            setup
        }
        "wrong_token" => {
            let auth = AuthFile::new(&[("matrix", RIGHT_TOKEN, true)]);
            let server = Server::start(db, &["--auth-file", auth.path_str()]);
            Setup {
                token: Some(RIGHT_TOKEN.into()),
                _auth: Some(auth),
                ..plain(server)
            }
        }
        "same_key_in_flight" | "same_key_other_args" | "kill_and_restart" => {
            plain(Server::start(db, &["--chaos"]))
        }
        other => panic!("unknown fault {other}"),
    }
}

/// The runner's own request before the client's, for the faults that need one.
fn prepare_key(case: &Value, setup: &Setup, tool: &str, key: &str) {
    match case["fault"].as_str() {
        Some("same_key_in_flight") => {
            let body = json!({"tool": tool, "args": case["steps"][0]["args"]});
            assert_eq!(setup.server.post(key, &body).0, 202);
            eventually("the call running", || {
                setup.calls_of(tool)[0]["status"] == "running"
            });
        }
        Some("same_key_other_args") => {
            let body = json!({"tool": tool, "args": case["setup_args"]});
            let (_, call) = setup.server.post_path("/v1/tool-calls?wait=10", key, &body);
            assert_eq!(call["status"], "succeeded", "{call}");
        }
        _ => {}
    }
}

/// `kill -9` the server and start it again on the same port and database.
fn kill_and_restart(server: &mut Server) {
    let port = server
        .addr()
        .rsplit(':')
        .next()
        .expect("a port")
        .to_string();
    server.kill();
    let db = server.db.to_str().expect("a UTF-8 path").to_string();
    let args = ["--port", &port, "--db", &db, "--chaos"];
    let (proc, line) = Proc::start("server", SERVER_BIN, &args, "listening on http://");
    assert_eq!(address_after(&line, "listening on http://"), server.addr());
    server.proc = proc;
}

fn options(base: &str, tool: &str, key: &str, args: &Value, token: Option<&str>) -> CallOptions {
    let mut opts = CallOptions::new(base, key, tool, args.clone());
    opts.timeout = Some(Duration::from_secs(20));
    opts.retries = 40;
    opts.wait = Some(matrix()["wait_s"].as_u64().expect("wait_s") as u32);
    opts.poll = true;
    opts.poll_timeout = Duration::from_secs(30);
    opts.token = token.map(str::to_string);
    opts
}

/// One logical call; each attempt record with the moment it was made.
fn run_step(opts: CallOptions) -> (Vec<(AttemptRecord, Instant)>, CallResult) {
    let mut seen = Vec::new();
    let outcome = call_tool_with(&opts, &mut |r| seen.push((r.clone(), Instant::now())));
    (seen, outcome.result)
}

fn check_step(name: &str, expect: &Value, seen: &[(AttemptRecord, Instant)], result: &CallResult) {
    let posts: Vec<&(AttemptRecord, Instant)> = seen.iter().filter(|(r, _)| !r.lookup).collect();
    let (low, high) = (expect["posts"][0].as_u64(), expect["posts"][1].as_u64());
    let count = Some(posts.len() as u64);
    assert!(low <= count && count <= high, "{name}: posts {posts:?}");
    if expect["outcome"] == "error" {
        let CallResult::Rejected { http, body } = result else {
            panic!("{name}: expected {}, got {result:?}", expect["error"]);
        };
        assert_eq!(Some(u64::from(*http)), expect["http"].as_u64(), "{name}");
        assert_eq!(body["error"]["code"], expect["error"], "{name}");
        return;
    }
    let CallResult::Call(call) = result else {
        panic!("{name}: expected a call, got {result:?}");
    };
    let last = &posts.last().expect("a POST").0;
    assert_eq!(call["status"], expect["outcome"], "{name}: {call}");
    assert_eq!(call["attempt"], expect["attempt"], "{name}: {call}");
    assert_eq!(
        Some(last.replayed),
        expect["replayed"].as_bool(),
        "{name}: {last:?}"
    );
    if let Some(first) = expect["first_status"].as_u64() {
        assert_eq!(posts[0].0.http.map(u64::from), Some(first), "{name}");
    }
    if expect["honours_retry_after"] == true {
        // The service's Retry-After on a 503 is 1 s (src/http/message.rs).
        let refusals = posts.windows(2).filter(|w| w[0].0.http == Some(503));
        let mut checked = 0;
        for pair in refusals {
            let waited = pair[1].1 - pair[0].1;
            assert!(
                waited >= Duration::from_millis(990),
                "{name}: waited {waited:?}"
            );
            checked += 1;
        }
        assert!(checked >= 1, "{name}: a Retry-After was seen");
    }
}

fn run_case(case: &Value) {
    let name = case["name"].as_str().expect("name");
    let tool = matrix()["tool"].as_str().expect("tool").to_string();
    let db = TempDb::new(&format!("matrix-{name}"));
    let mut setup = fault_setup(case, &db);
    let key = format!("matrix-{name}-rs");
    if case["key"] == "given" {
        prepare_key(case, &setup, &tool, &key);
    }
    for step in case["steps"].as_array().expect("steps") {
        let token = match step["token"].as_str() {
            Some("wrong") => Some("not-a-token"),
            Some("right") => Some(RIGHT_TOKEN),
            _ => None,
        };
        let opts = options(&setup.base, &tool, &key, &step["args"], token);
        let (seen, result) = if case["fault"] == "kill_and_restart" {
            let running = thread::spawn(move || run_step(opts));
            eventually("the call running", || {
                setup
                    .calls_of(&tool)
                    .iter()
                    .any(|c| c["status"] == "running")
            });
            kill_and_restart(&mut setup.server);
            running.join().expect("the client thread")
        } else {
            run_step(opts)
        };
        check_step(name, &step["expect"], &seen, &result);
    }
    let final_counts = &case["final"];
    assert_eq!(
        Some(setup.calls_of(&tool).len() as u64),
        final_counts["calls"].as_u64(),
        "{name}"
    );
    assert_eq!(
        setup.get("/stats")["effects"],
        final_counts["effects"],
        "{name}"
    );
}

fn case(name: &str) -> Value {
    let all = matrix();
    let found = all["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .find(|c| c["name"] == name);
    found.unwrap_or_else(|| panic!("no case {name}")).clone()
}

/// Every case of the file has a test here, and no test names a case the file lost.
#[test]
fn every_case_of_the_matrix_runs_here() {
    let names: Vec<String> = matrix()["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| c["name"].as_str().expect("name").to_string())
        .collect();
    let source = include_str!("client_matrix.rs");
    for name in &names {
        assert!(
            source.contains(&format!("case(\"{name}\")")),
            "{name} has no test"
        );
    }
    assert_eq!(names.len(), 6, "{names:?}");
}

/// A lost answer: the retry with the same key gets the call, one effect.
#[test]
fn lost_response() {
    run_case(&case("lost_response"));
}

/// `503 overloaded` with `Retry-After`: waited, retried, one call.
#[test]
fn unavailable_with_retry_after() {
    run_case(&case("unavailable_with_retry_after"));
}

/// The same key while the first request's call runs: answered with that call.
#[test]
fn in_flight() {
    run_case(&case("in_flight"));
}

/// The same key with other args: `409 idempotency_conflict`, never retried.
#[test]
fn conflict() {
    run_case(&case("conflict"));
}

/// A wrong token: `401`, never retried, nothing stored; the right one makes the call.
#[test]
fn unauthorized() {
    run_case(&case("unauthorized"));
}

/// `kill -9` while the call runs, a restart on the same port: one call, one effect.
#[test]
fn server_restart() {
    run_case(&case("server_restart"));
}
