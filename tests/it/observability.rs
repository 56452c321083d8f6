//! What an operator watches the service with, against the running service:
//! `/metrics` (parsed by a strict exposition-format parser, each counter moving
//! when its event happens), a truthful `/healthz` (`503` once the database file
//! cannot be read, `200` again once it can), JSON logs (every line parses, none
//! holds the token, access lines have exactly the documented fields,
//! `--log-level` and `--access-log off` do what they say), and the audit
//! timeline over HTTP. The logs are read from the real binary's stderr; the
//! rest runs the service in this process.

use crate::support::exposition::{self, Exposition};
use crate::support::Http;
use crate::support::{charge, eventually, AuthFile, Local, Server, TempDb};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

fn scrape(server: &impl Http, headers: &[(&str, &str)]) -> Exposition {
    let response = server.call("GET", "/metrics", headers, None);
    assert_eq!(response.status, 200);
    assert_eq!(
        response.header("Content-Type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let text = String::from_utf8(response.body).unwrap();
    exposition::parse(&text).unwrap_or_else(|e| panic!("{e}\n--- scrape ---\n{text}"))
}

fn counter(scrape: &Exposition, name: &str, labels: &[(&str, &str)]) -> f64 {
    scrape
        .value(name, labels)
        .unwrap_or_else(|| panic!("no {name} {labels:?}"))
}

const P: &str = "idempotent_tool_";

/// Each counter moves when its event happens: new calls, replays, a
/// conflict, a retry reset, claims, effects, tool runs by outcome, a lease
/// lost to a stall (a recovery and a stale completion), writer batches,
/// requests by route and status class; the gauges read the database.
#[test]
fn each_counter_moves_when_its_event_happens() {
    let db = TempDb::new("metrics");
    let server = Local::start(&db, &["--chaos", "--lease-secs", "0.3"]);
    let before = scrape(&server, &[]);
    for name in [
        "calls_created_total",
        "replays_total",
        "conflicts_total",
        "claims_total",
    ] {
        assert_eq!(counter(&before, &format!("{P}{name}"), &[]), 0.0, "{name}");
    }
    assert_eq!(
        counter(
            &before,
            &format!("{P}tool_runs_total"),
            &[("tool", "charge"), ("outcome", "succeeded")]
        ),
        0.0,
        "every tool's series exists from the start"
    );

    let (_, a) = server.post("m-a", &charge(1));
    server.wait_terminal(a["call_id"].as_str().unwrap());
    server.post("m-a", &charge(1)); // replay
    assert_eq!(server.post("m-a", &charge(2)).0, 409);
    let (_, flaky) = server.post(
        "m-fail",
        &json!({"tool": "fail", "args": {"fail_times": 1}}),
    );
    server.wait_terminal(flaky["call_id"].as_str().unwrap());
    server.post(
        "m-fail",
        &json!({"tool": "fail", "args": {"fail_times": 1}}),
    ); // reset
    server.wait_terminal(flaky["call_id"].as_str().unwrap());
    let (_, stalled) = server.post(
        "m-stall",
        &json!({"tool": "charge", "args": {"amount": 3, "_stall_ms": 900}}),
    );
    let stalled_id = stalled["call_id"].as_str().unwrap();
    server.wait_terminal(stalled_id);
    server.get("/nope");

    eventually("the stalled attempt's completion is fenced off", || {
        counter(
            &scrape(&server, &[]),
            &format!("{P}stale_completions_total"),
            &[],
        ) >= 1.0
    });
    let after = scrape(&server, &[]);
    let at = |name: &str, labels: &[(&str, &str)]| counter(&after, &format!("{P}{name}"), labels);
    assert_eq!(at("calls_created_total", &[]), 3.0);
    assert_eq!(at("replays_total", &[]), 1.0);
    assert_eq!(at("conflicts_total", &[]), 1.0);
    assert_eq!(at("retry_resets_total", &[]), 1.0);
    assert!(
        at("claims_total", &[]) >= 5.0,
        "a, fail twice, the stalled call twice"
    );
    assert!(at("recoveries_total", &[]) >= 1.0);
    assert_eq!(
        at("effects_written_total", &[]),
        2.0,
        "a and the stalled charge, once each"
    );
    assert_eq!(
        at(
            "tool_runs_total",
            &[("tool", "fail"), ("outcome", "retryable_failure")]
        ),
        1.0
    );
    assert_eq!(
        at(
            "tool_runs_total",
            &[("tool", "fail"), ("outcome", "succeeded")]
        ),
        1.0
    );
    assert!(
        at(
            "tool_runs_total",
            &[("tool", "charge"), ("outcome", "succeeded")]
        ) >= 3.0
    );
    assert!(at("tool_run_duration_seconds_count", &[("tool", "charge")]) >= 3.0);
    assert!(at("writer_batches_total", &[]) >= 5.0);
    assert!(at("writer_batch_operations_count", &[]) >= 5.0);
    assert!(at("writer_commit_duration_seconds_count", &[]) >= 5.0);
    let posts_2xx = at(
        "http_requests_total",
        &[("route", "/v1/tool-calls"), ("status_class", "2xx")],
    );
    assert_eq!(posts_2xx, 5.0);
    assert_eq!(
        at(
            "http_requests_total",
            &[("route", "/v1/tool-calls"), ("status_class", "4xx")]
        ),
        1.0
    );
    assert_eq!(
        at(
            "http_requests_total",
            &[("route", "other"), ("status_class", "4xx")]
        ),
        1.0
    );
    assert!(
        at(
            "http_request_duration_seconds_count",
            &[("route", "/metrics")]
        ) >= 1.0
    );
    assert_eq!(at("calls", &[("status", "succeeded")]), 3.0);
    assert_eq!(at("calls", &[("status", "pending")]), 0.0);
    assert_eq!(at("oldest_pending_age_seconds", &[]), 0.0);
    assert!(
        at("open_connections", &[]) >= 1.0,
        "this scrape's own connection"
    );
    assert_eq!(at("busy_workers", &[]), 0.0);
    assert_eq!(at("queued_calls", &[]), 0.0);
}

/// Makes the database file unreadable for a new connection, and undoes it on
/// drop. `chmod 000` where that stops this user; as root (whom permissions do
/// not stop) the file is moved aside and a folder put in its place.
struct Unreadable {
    path: PathBuf,
    moved: Option<PathBuf>,
}

impl Unreadable {
    fn make(path: &Path) -> Unreadable {
        use std::os::unix::fs::PermissionsExt;
        let set_mode = |mode| std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode));
        set_mode(0o000).unwrap();
        if std::fs::File::open(path).is_err() {
            return Unreadable {
                path: path.to_path_buf(),
                moved: None,
            };
        }
        set_mode(0o644).unwrap();
        let moved = path.with_extension("moved-aside");
        std::fs::rename(path, &moved).unwrap();
        std::fs::create_dir(path).unwrap();
        Unreadable {
            path: path.to_path_buf(),
            moved: Some(moved),
        }
    }
}

impl Drop for Unreadable {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        match self.moved.take() {
            Some(moved) => {
                let _ = std::fs::remove_dir(&self.path);
                let _ = std::fs::rename(moved, &self.path);
            }
            None => {
                let _ =
                    std::fs::set_permissions(&self.path, std::fs::Permissions::from_mode(0o644));
            }
        }
    }
}

/// `/healthz` is `200 {"ok":true}` while the database reads, `503` naming
/// the database once a new connection cannot read the file, and `200` again
/// once it can.
#[test]
fn healthz_tells_the_truth_about_the_database() {
    let db = TempDb::new("healthz");
    let server = Local::start(&db, &[]);
    assert_eq!(server.get("/healthz"), (200, json!({"ok": true})));
    let unreadable = Unreadable::make(&db.path);
    let mut unhealthy = Value::Null;
    eventually("/healthz reports the unreadable database", || {
        let response = server.call("GET", "/healthz", &[], None);
        unhealthy = response.json();
        response.status == 503 && response.header("Retry-After") == Some("1")
    });
    assert_eq!(unhealthy["ok"], false, "{unhealthy}");
    assert_eq!(unhealthy["error"]["code"], "unavailable");
    assert_eq!(unhealthy["checks"]["database"]["ok"], false, "{unhealthy}");
    assert!(unhealthy["checks"]["database"]["detail"].is_string());
    assert_eq!(unhealthy["checks"]["writer"]["ok"], true);
    assert!(unhealthy["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("database: "));
    drop(unreadable);
    eventually("/healthz recovers", || server.get("/healthz").0 == 200);
}

/// Every stderr line is one JSON object; none holds the token; each access
/// line has exactly the documented fields (the query string dropped); an
/// event emitted while serving a request names its request id.
#[test]
fn logs_are_json_lines_without_secrets() {
    let db = TempDb::new("logs");
    let token = "s3cret-token-never-logged";
    let auth = AuthFile::new(&[("acme", token, true)]);
    let server = Server::start(
        &db,
        &["--auth-file", auth.path_str(), "--log-level", "debug"],
    );
    let authorization = format!("Bearer {token}");
    let headers = [
        ("Authorization", authorization.as_str()),
        ("Idempotency-Key", "log-1"),
        ("X-Request-Id", "trace-log-1"),
    ];
    let created = server.call(
        "POST",
        "/v1/tool-calls?wait=5",
        &headers,
        Some(&charge(1).to_string()),
    );
    let call_id = created.json()["call_id"].as_str().unwrap().to_string();
    let replayed = server.call(
        "POST",
        "/v1/tool-calls",
        &headers,
        Some(&charge(1).to_string()),
    );
    assert_eq!(replayed.header("Idempotent-Replayed"), Some("true"));
    server.call("GET", "/stats", &[("Authorization", "Bearer wrong")], None);
    let stderr = server.proc.wait_for_stderr("\"status\":401");

    let lines: Vec<Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(!stderr.contains(token), "a log line holds the token");
    assert!(
        !stderr.contains("Bearer"),
        "a log line holds an Authorization value"
    );
    for line in &lines {
        let ts = line["ts"].as_str().expect("ts");
        assert!(
            ts.len() == 24 && ts.ends_with('Z') && ts.as_bytes()[19] == b'.',
            "{ts}"
        );
        assert!(line["level"].is_string(), "{line}");
    }
    let access: Vec<&Value> = lines.iter().filter(|l| l.get("method").is_some()).collect();
    let keys = |v: &Value| -> Vec<String> {
        let mut keys: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        keys
    };
    let documented = [
        "call_id",
        "client",
        "duration_ms",
        "idem_key",
        "level",
        "method",
        "path",
        "replayed",
        "request_id",
        "status",
        "tenant",
        "ts",
    ];
    for line in &access {
        assert_eq!(keys(line), documented, "{line}");
    }
    let first = access
        .iter()
        .find(|l| l["request_id"] == "trace-log-1")
        .expect("the POST");
    assert_eq!(
        (
            &first["path"],
            &first["tenant"],
            &first["idem_key"],
            &first["call_id"],
            &first["replayed"]
        ),
        (
            &json!("/v1/tool-calls"),
            &json!("acme"),
            &json!("log-1"),
            &json!(call_id),
            &json!(false)
        )
    );
    assert!(access
        .iter()
        .any(|l| l["request_id"] == "trace-log-1" && l["replayed"] == true));
    let refused = access.iter().find(|l| l["status"] == 401).expect("the 401");
    assert_eq!(refused["tenant"], Value::Null);
    // A state change made by the request is logged under its request id.
    let created_event = lines
        .iter()
        .find(|l| l["event"] == "created" && l["call_id"] == call_id.as_str())
        .expect("a created event at debug");
    assert_eq!(created_event["request_id"], "trace-log-1");
    assert!(lines
        .iter()
        .any(|l| l["event"] == "claimed" && l["call_id"] == call_id.as_str()));
}

/// `--log-level error` drops info events but keeps access lines;
/// `--access-log off` drops access lines.
#[test]
fn log_level_and_access_log_switches() {
    let db = TempDb::new("log-switches");
    let quiet = Server::start(&db, &["--log-level", "error"]);
    quiet.get("/healthz");
    let stderr = quiet.proc.wait_for_stderr("\"path\":\"/healthz\"");
    assert!(!stderr.contains("\"level\":\"info\",\"msg\""), "{stderr}");
    drop(quiet);
    let silent = Server::start(&db, &["--access-log", "off"]);
    silent.get("/healthz");
    let stderr = silent.proc.wait_for_stderr("\"event\":\"started\"");
    silent.get("/stats");
    assert!(!silent.stderr().contains("\"method\""), "{stderr}");
}

/// `GET /v1/tool-calls/{id}/audit`: a call that failed, was reset by its
/// client's retry and then succeeded, in order, each row with its attempt.
#[test]
fn the_audit_timeline_is_in_order() {
    let db = TempDb::new("audit-endpoint");
    let server = Local::start(&db, &[]);
    let flaky = json!({"tool": "fail", "args": {"fail_times": 1}});
    let (_, call) = server.post("audit-1", &flaky);
    let id = call["call_id"].as_str().unwrap();
    server.wait_terminal(id);
    server.post("audit-1", &flaky);
    assert_eq!(server.wait_terminal(id)["status"], "succeeded");
    let (status, audit) = server.get(&format!("/v1/tool-calls/{id}/audit"));
    assert_eq!(status, 200, "{audit}");
    assert_eq!(audit["call_id"], id);
    let events = audit["events"].as_array().unwrap();
    let seen: Vec<(&str, i64)> = events
        .iter()
        .map(|e| (e["event"].as_str().unwrap(), e["attempt"].as_i64().unwrap()))
        .collect();
    assert_eq!(
        seen,
        [
            ("created", 0),
            ("claimed", 1),
            ("failed", 1),
            ("retry_reset", 1),
            ("claimed", 2),
            ("succeeded", 2)
        ]
    );
    let times: Vec<f64> = events.iter().map(|e| e["at"].as_f64().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    assert!(events.iter().all(|e| e["detail"].is_string()));
    assert_eq!(server.get("/v1/tool-calls/c_0000000000000000/audit").0, 404);
}
