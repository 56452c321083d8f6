//! `--log-file` under logrotate, against the real binary: the file is renamed
//! and the service sent SIGHUP, again and again, while clients keep calling;
//! every request answered has its access line in exactly one of the files,
//! and the service serves on and stops cleanly. SIGHUP without a log file
//! does not stop it either (it used to exit 129 and leave its instance
//! unmarked), and the service never passes it on to a running `command`
//! tool.

use crate::support::downstream::ToolsFile;
use crate::support::{charge, signal, unique_name, Counts, Http, Server, TempDb, DEADLINE};
use idempotent_tool::client::request_once;
use idempotent_tool::temp::TempDir;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const ROTATIONS: usize = 5;
const CLIENTS: usize = 4;
/// Access lines of the load each file holds before it is moved.
const LINES_PER_FILE: usize = 25;

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The request ids of the access lines in `path`.
fn access_ids(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap_or_else(|e| panic!("{line:?}: {e}")))
        .filter(|line| line.get("method").is_some())
        .filter_map(|line| line["request_id"].as_str().map(str::to_string))
        .collect()
}

fn lines_of_the_load(path: &Path) -> usize {
    access_ids(path)
        .iter()
        .filter(|id| id.starts_with("rot-"))
        .count()
}

/// One client: calls (a new charge, or `/healthz`) under its own request
/// ids until told to stop; the ids answered.
fn load(base: &str, client: usize, stop: &AtomicBool, answered: &Mutex<Vec<String>>) {
    for n in 0.. {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let id = format!("rot-{client}-{n}");
        let key = format!("rotate-{client}-{n}");
        let body = charge(1).to_string();
        let sent = if n % 2 == 0 {
            let headers = [
                ("X-Request-Id", id.as_str()),
                ("Idempotency-Key", key.as_str()),
            ];
            request_once(
                base,
                "POST",
                "/v1/tool-calls",
                &headers,
                Some(body.as_bytes()),
                Some(DEADLINE),
            )
        } else {
            let headers = [("X-Request-Id", id.as_str())];
            request_once(base, "GET", "/healthz", &headers, None, Some(DEADLINE))
        };
        let answer = sent.unwrap_or_else(|e| panic!("{id}: {e}"));
        assert_eq!(answer.header("X-Request-Id"), Some(id.as_str()));
        answered.lock().unwrap().push(id);
    }
}

#[test]
fn renaming_the_log_file_and_signalling_under_load_loses_no_line() {
    let dir = TempDir::new("log-rotate").unwrap();
    let log = dir.path().join("service.log");
    let db = TempDb::new("log-rotate");
    let mut server = Server::start(&db, &["--log-file", log.to_str().unwrap()]);
    let (stop, answered) = (AtomicBool::new(false), Mutex::new(Vec::new()));
    let mut rotated: Vec<PathBuf> = Vec::new();
    std::thread::scope(|scope| {
        for client in 0..CLIENTS {
            let (base, stop, answered) = (&server.base, &stop, &answered);
            scope.spawn(move || load(base, client, stop, answered));
        }
        for round in 1..=ROTATIONS {
            // Each file gets lines of the load before it is moved.
            wait_for("access lines in the current file", || {
                lines_of_the_load(&log) >= LINES_PER_FILE
            });
            let moved = dir.path().join(format!("service.log.{round}"));
            std::fs::rename(&log, &moved).unwrap();
            rotated.push(moved);
            signal(&server.proc.child, "HUP");
            wait_for("the log file opened again", || log.exists());
        }
        wait_for("access lines after the last rotation", || {
            lines_of_the_load(&log) >= LINES_PER_FILE
        });
        stop.store(true, Ordering::SeqCst);
    });
    signal(&server.proc.child, "TERM");
    assert_eq!(server.wait_exit().code(), Some(0));

    let answered = answered.into_inner().unwrap();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut per_file = Vec::new();
    for file in rotated.iter().chain([&log]) {
        let ids = access_ids(file);
        per_file.push(ids.len());
        for id in ids {
            *seen.entry(id).or_default() += 1;
        }
    }
    let missing: Vec<&String> = answered
        .iter()
        .filter(|id| !seen.contains_key(*id))
        .collect();
    let repeated: Vec<(&String, &usize)> = seen.iter().filter(|(_, n)| **n > 1).collect();
    eprintln!(
        "log rotation: {} requests answered, {} files, access lines per file {per_file:?}, \
         missing {}, repeated {}",
        answered.len(),
        per_file.len(),
        missing.len(),
        repeated.len()
    );
    assert!(missing.is_empty(), "answered but in no file: {missing:?}");
    assert!(repeated.is_empty(), "in more than one line: {repeated:?}");
    assert!(per_file.iter().all(|n| *n > 0), "{per_file:?}");
    let reopened = std::fs::read_to_string(&log).unwrap();
    assert!(
        reopened.contains("\"event\":\"log_reopened\""),
        "{reopened}"
    );
    assert_eq!(
        db.count("SELECT count(*) FROM instances WHERE stopped_at IS NULL"),
        0
    );
}

#[test]
fn sighup_without_a_log_file_does_not_stop_the_service() {
    let db = TempDb::new("sighup");
    let mut server = Server::start(&db, &[]);
    for _ in 0..2 {
        signal(&server.proc.child, "HUP");
    }
    server.proc.wait_for_stderr("\"event\":\"sighup\"");
    let health = request_once(&server.base, "GET", "/healthz", &[], None, Some(DEADLINE)).unwrap();
    assert_eq!(health.status, 200);
    assert_eq!(
        server.proc.child.try_wait().unwrap(),
        None,
        "SIGHUP stopped it"
    );
    signal(&server.proc.child, "TERM");
    assert_eq!(server.wait_exit().code(), Some(0));
    assert_eq!(
        db.count("SELECT count(*) FROM instances WHERE stopped_at IS NULL"),
        0
    );
}

#[test]
fn a_log_file_that_cannot_be_opened_exits_1_before_anything_starts() {
    let dir = TempDir::new("log-unopenable").unwrap();
    let db = TempDb::new("log-unopenable");
    let path = dir.path().join("no-such-folder").join("service.log");
    let out = std::process::Command::new(crate::support::SERVER_BIN)
        .args(["--port", "0", "--db", db.path_str(), "--log-file"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("cannot open the log file") && said.contains("no-such-folder"),
        "{said}"
    );
    assert!(!db.path.exists(), "the database was created");
}

/// SIGHUP (logrotate's, or a closed terminal's) reaches the service only: a
/// `command` tool running meanwhile is not signalled (it would record the
/// signal and exit 1), and its call ends `succeeded`.
#[test]
fn sighup_is_never_passed_on_to_a_running_command_tool() {
    let dir = TempDir::new("sighup-tool").unwrap();
    let (started, go, got) = (dir.join("started"), dir.join("go"), dir.join("got-hup"));
    let script = format!(
        "trap 'echo HUP > {got}; exit 1' HUP; touch {started}; \
         while [ ! -e {go} ]; do sleep 0.05; done; echo '{{\"done\":true}}'",
        got = got.display(),
        started = started.display(),
        go = go.display()
    );
    let tools = ToolsFile::write(&serde_json::json!({"tools": {"rotate_probe": {
        "kind": "command",
        "argv": ["/bin/sh", "-c", script],
        "timeout_ms": 60000
    }}}));
    let db = TempDb::new("sighup-tool");
    let log = dir.join("service.log");
    let server = Server::start(
        &db,
        &[
            "--tools",
            tools.path_str(),
            "--log-file",
            log.to_str().unwrap(),
        ],
    );
    let body = serde_json::json!({"tool": "rotate_probe", "args": {}});
    let (status, call) = server.post(&unique_name("hup"), &body);
    assert_eq!(status, 202, "{call}");
    wait_for("the tool to start", || started.exists());
    for _ in 0..3 {
        signal(&server.proc.child, "HUP");
    }
    wait_for("the log file reopened", || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.contains("\"event\":\"log_reopened\""))
    });
    std::fs::write(&go, b"").unwrap();
    let done = server.wait_terminal(call["call_id"].as_str().unwrap());
    assert!(!got.exists(), "the tool got SIGHUP: {done}");
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(done["result"], serde_json::json!({"done": true}));
}
