//! No binary panics when the stream it prints to is gone: each is run with
//! its stdout (or stderr) a pipe whose reading end is already closed, so that
//! every write fails (`EPIPE`, as with `idempotent-tool --help | true`), and
//! must exit as it would have with a reader — never 101 with a backtrace.
//! The server keeps serving after its start-up line is lost (it used to exit
//! 101 after it had opened the database and bound the port).

use crate::support::downstream::DOWNSTREAM_BIN;
use crate::support::{
    signal, Http, Server, TempDb, CLIENT_BIN, DEADLINE, INSPECT_BIN, PROXY_BIN, SERVER_BIN,
};
use idempotent_tool::client::request_once;
use std::io::{BufRead, BufReader, PipeWriter};
use std::net::TcpListener;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const BENCH_BIN: &str = env!("CARGO_BIN_EXE_bench");

/// The writing end of a pipe nobody reads: every write to it fails.
fn broken_pipe() -> PipeWriter {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    writer
}

/// Which stream of the child is broken.
#[derive(Clone, Copy, Debug)]
enum Broken {
    Stdout,
    Stderr,
}

/// A child with one stream broken and the other read line by line; killed
/// on drop, whatever happened.
struct Run {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Run {
    fn start(program: &str, args: &[&str], broken: Broken) -> Run {
        let mut command = Command::new(program);
        command.args(args).stdin(Stdio::null());
        match broken {
            Broken::Stdout => command.stdout(broken_pipe()).stderr(Stdio::piped()),
            Broken::Stderr => command.stdout(Stdio::piped()).stderr(broken_pipe()),
        };
        let mut child = command.spawn().expect("spawn");
        let pipe: Box<dyn std::io::Read + Send> = match broken {
            Broken::Stdout => Box::new(child.stderr.take().unwrap()),
            Broken::Stderr => Box::new(child.stdout.take().unwrap()),
        };
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let _ = sender.send(line);
            }
        });
        Run {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// The first line of the readable stream containing `marker`.
    fn line_with(&mut self, marker: &str) -> String {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(marker) => return line,
                Ok(line) => self.seen.push(line),
                Err(_) => panic!("no line with {marker:?}; saw {:?}", self.seen),
            }
        }
    }

    /// Wait for the exit; then everything the readable stream said.
    fn finish(mut self) -> (ExitStatus, String) {
        let deadline = Instant::now() + DEADLINE;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                break status;
            }
            assert!(Instant::now() < deadline, "did not exit: {:?}", self.seen);
            std::thread::sleep(Duration::from_millis(20));
        };
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.seen.push(line);
        }
        (status, self.seen.join("\n"))
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Exit `code`, and no panic message or backtrace on the readable stream.
fn assert_exits_cleanly(what: &str, run: Run, code: i32) {
    let (status, said) = run.finish();
    assert!(
        !said.contains("panicked") && !said.contains("RUST_BACKTRACE"),
        "{what}: {said}"
    );
    assert_eq!(status.code(), Some(code), "{what}: {said}");
}

/// A port free a moment ago, for the binaries that print their port only on
/// the stdout the test breaks.
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().unwrap().port()
}

fn get_ok(base: &str, path: &str) -> bool {
    request_once(base, "GET", path, &[], None, Some(Duration::from_secs(5)))
        .is_ok_and(|r| r.status == 200)
}

fn wait_until_answers(base: &str, path: &str) {
    let deadline = Instant::now() + DEADLINE;
    while !get_ok(base, path) {
        assert!(Instant::now() < deadline, "{base}{path} never answered");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn every_binary_prints_its_help_to_a_closed_stdout_without_panicking() {
    for (name, program) in [
        ("idempotent-tool", SERVER_BIN),
        ("client", CLIENT_BIN),
        ("chaos_proxy", PROXY_BIN),
        ("inspect", INSPECT_BIN),
        ("downstream", DOWNSTREAM_BIN),
        ("bench", BENCH_BIN),
    ] {
        let run = Run::start(program, &["--help"], Broken::Stdout);
        assert_exits_cleanly(&format!("{name} --help"), run, 0);
    }
    for args in [
        &["--version"][..],
        &["--print-config"],
        &["verify", "--help"],
    ] {
        let run = Run::start(SERVER_BIN, args, Broken::Stdout);
        assert_exits_cleanly(&format!("{args:?}"), run, 0);
    }
    // A usage error with stderr gone still exits 2.
    let run = Run::start(SERVER_BIN, &["--frobnicate"], Broken::Stderr);
    assert_exits_cleanly("--frobnicate", run, 2);
}

/// The server's start-up line goes to a closed stdout: it serves anyway, and
/// stops cleanly; then `verify` and `inspect` report on its database to a
/// closed stdout and exit as they would with a reader.
#[test]
fn the_server_serves_with_its_stdout_closed_and_the_tools_report_into_one() {
    let db = TempDb::new("closed-stdout");
    let args = ["--port", "0", "--db", db.path_str()];
    let mut run = Run::start(SERVER_BIN, &args, Broken::Stdout);
    let started: serde_json::Value =
        serde_json::from_str(&run.line_with("\"event\":\"started\"")).expect("a JSON line");
    let base = format!("http://{}", started["addr"].as_str().expect("addr"));
    let posted = request_once(
        &base,
        "POST",
        "/v1/tool-calls?wait=10",
        &[("Idempotency-Key", "closed-1")],
        Some(br#"{"tool":"charge","args":{"amount":1}}"#),
        Some(DEADLINE),
    )
    .expect("the server answers");
    assert_eq!(posted.status, 200, "{}", posted.json());
    // Its client prints the answer into a closed stdout too.
    let client = Run::start(
        CLIENT_BIN,
        &["--base", &base, "--get", "/healthz"],
        Broken::Stdout,
    );
    assert_exits_cleanly("client --get", client, 0);
    signal(&run.child, "TERM");
    let _ = run.line_with("\"event\":\"stopped\"");
    assert_exits_cleanly("the server", run, 0);

    let verify = Run::start(
        SERVER_BIN,
        &["verify", "--db", db.path_str()],
        Broken::Stdout,
    );
    assert_exits_cleanly("verify", verify, 0);
    let inspect = Run::start(
        INSPECT_BIN,
        &["--db", db.path_str(), "--query", "all"],
        Broken::Stdout,
    );
    assert_exits_cleanly("inspect", inspect, 0);
}

/// With stderr closed the server has nowhere to log; it serves and stops as usual.
#[test]
fn the_server_serves_with_its_stderr_closed() {
    let db = TempDb::new("closed-stderr");
    let args = ["--port", "0", "--db", db.path_str(), "--log-level", "debug"];
    let mut run = Run::start(SERVER_BIN, &args, Broken::Stderr);
    let line = run.line_with("listening on http://");
    let base = format!(
        "http://{}",
        crate::support::address_after(&line, "listening on http://")
    );
    assert!(get_ok(&base, "/healthz"));
    signal(&run.child, "TERM");
    assert_exits_cleanly("the server", run, 0);
}

/// The reference downstream and the chaos proxy announce themselves into a
/// closed stdout and go on serving; the bench prints its report into one.
#[test]
fn the_helpers_and_the_bench_run_with_their_stdout_closed() {
    let db = TempDb::new("closed-helpers");
    let server = Server::start(&db, &[]);
    let downstream_db = TempDb::new("closed-downstream");
    let port = free_port().to_string();
    let args = ["--port", &port, "--db", downstream_db.path_str()];
    let downstream = Run::start(DOWNSTREAM_BIN, &args, Broken::Stdout);
    wait_until_answers(&format!("http://127.0.0.1:{port}"), "/healthz");
    drop(downstream);

    let listen = format!("127.0.0.1:{}", free_port());
    let upstream = server.base().trim_start_matches("http://").to_string();
    let args = [
        "--listen",
        &listen,
        "--upstream",
        &upstream,
        "--mode",
        "pass",
    ];
    let proxy = Run::start(PROXY_BIN, &args, Broken::Stdout);
    wait_until_answers(&format!("http://{listen}"), "/healthz");
    drop(proxy);

    let bench_args = [
        "--base",
        &server.base,
        "--db",
        db.path_str(),
        "--n",
        "10",
        "--concurrency",
        "2",
    ];
    let bench = Run::start(BENCH_BIN, &bench_args, Broken::Stdout);
    assert_exits_cleanly("bench", bench, 0);
}

/// Nothing the binaries run prints with the std macros, which panic when the
/// stream is gone (the tests above cover the paths they run; this covers the
/// rest): only the library's `outln!`, `out!` and `errln!`.
#[test]
fn no_binary_prints_with_a_macro_that_panics() {
    let root = crate::support::openapi::ROOT;
    let mut offenders = Vec::new();
    for folder in ["src", "bench"] {
        let mut stack = vec![std::path::Path::new(root).join(folder)];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("a folder") {
                let path = entry.expect("an entry").path();
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                if path.is_dir() {
                    if name != "tests" {
                        stack.push(path);
                    }
                    continue;
                }
                if !name.ends_with(".rs") || name == "tests.rs" {
                    continue;
                }
                let text = std::fs::read_to_string(&path).expect("a source file");
                // Unit tests at the bottom of a file may print as they like.
                let code = text.split("#[cfg(test)]").next().unwrap_or_default();
                for (n, line) in code.lines().enumerate() {
                    let uses = ["println!(", "print!(", "eprintln!(", "eprint!("]
                        .iter()
                        .any(|m| line.contains(m));
                    // The log's one `eprint!` runs in test processes only, for
                    // libtest's capture (`log::CAPTURED`).
                    let test_capture = line.ends_with("// libtest capture");
                    if uses && !test_capture && !line.trim_start().starts_with("//") {
                        offenders.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
                    }
                }
            }
        }
    }
    assert!(offenders.is_empty(), "{}", offenders.join("\n"));
}
