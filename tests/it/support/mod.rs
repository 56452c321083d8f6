//! Test support shared by every integration test: start the real binaries
//! (server, proxy, client) on free ports with a unique temp database, talk HTTP
//! to them, and clean up in `Drop` even when an assertion fails. `raw` is the one
//! raw-socket client, `procfs` reads a server's memory, threads and open files,
//! `tmpfs` mounts a small file system to fill up or make read-only, `downstream`
//! runs the reference downstream and writes tools files, `fake_upstream`
//! records what reached a downstream the test controls, and `rust_source`
//! reads this crate's source as text.
//!
//! On failure every child's captured stderr is printed, so a red test shows
//! what the server or proxy was doing. Nothing here sleeps for a fixed time:
//! waits are polls against generous deadlines (the CI box is small and noisy).

pub mod auth;
pub mod browser;
pub mod downstream;
pub mod exposition;
pub mod fake_upstream;
pub mod in_process;
pub mod loop_ext4;
pub mod mcp_stateless;
pub mod openapi;
pub mod own_process;
pub mod pg_faults;
pub mod procfs;
pub mod raw;
pub mod requests;
pub mod rust_source;
pub mod tmpfs;

use idempotent_tool::client::authority;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// How long a child may take to print its start-up line on a loaded machine.
pub const STARTUP_DEADLINE: Duration = Duration::from_secs(60);

pub const SERVER_BIN: &str = env!("CARGO_BIN_EXE_idempotent-tool");
pub const CLIENT_BIN: &str = env!("CARGO_BIN_EXE_client");
pub const PROXY_BIN: &str = env!("CARGO_BIN_EXE_chaos_proxy");
pub const INSPECT_BIN: &str = env!("CARGO_BIN_EXE_inspect");

pub use auth::AuthFile;
pub use fake_upstream::{FakeUpstream, Reply};
pub use idempotent_tool::temp::{unique_name, TempDb, TempDir};
pub use in_process::Local;
pub use requests::Http;

/// Counting rows of a test's database file (live, beside a running server).
pub trait Counts {
    /// `SELECT count(*) ...` on the live file.
    fn count(&self, sql: &str) -> i64;

    fn calls(&self) -> i64 {
        self.count("SELECT count(*) FROM calls")
    }

    fn effects(&self) -> i64 {
        self.count("SELECT count(*) FROM effects")
    }
}

impl Counts for TempDb {
    fn count(&self, sql: &str) -> i64 {
        count(&self.path, sql)
    }
}

/// A running child whose stdout and stderr are drained by threads (so it never
/// blocks on a full pipe); killed on drop, stderr printed if the test failed.
pub struct Proc {
    pub name: String,
    pub child: Child,
    stderr: Arc<Mutex<String>>,
}

impl Proc {
    /// Start `program` and wait for the stdout line containing `marker`.
    pub fn start(name: &str, program: &str, args: &[&str], marker: &str) -> (Proc, String) {
        Proc::start_with_env(name, program, args, &[], marker)
    }

    /// `start`, with variables added to the child's environment.
    pub fn start_with_env(
        name: &str,
        program: &str,
        args: &[&str],
        env: &[(&str, &str)],
        marker: &str,
    ) -> (Proc, String) {
        let mut child = Command::new(program)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {program}: {e}"));
        let stderr = drain(child.stderr.take().unwrap(), None);
        let (tx, rx) = mpsc::channel();
        // stdout is read for the start-up line only; later lines are drained so
        // the child never blocks on a full pipe.
        drain(child.stdout.take().unwrap(), Some(tx));
        let proc = Proc {
            name: name.to_string(),
            child,
            stderr,
        };
        let deadline = Instant::now() + STARTUP_DEADLINE;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(remaining) {
                Ok(line) if line.contains(marker) => return (proc, line),
                Ok(_) => continue,
                Err(_) => panic!(
                    "{name} did not print {marker:?} in time; stderr:\n{}",
                    proc.stderr()
                ),
            }
        }
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Wait until stderr contains `needle` (logs reach the pipe asynchronously).
    pub fn wait_for_stderr(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let text = self.stderr();
            if text.contains(needle) {
                return text;
            }
            assert!(
                Instant::now() < deadline,
                "{} never logged {needle:?}; stderr:\n{text}",
                self.name
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// `kill -9`, then reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Wait (bounded) for the child to exit by itself, e.g. after a chaos crash.
    pub fn wait_exit(&mut self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if thread::panicking() {
            eprintln!("----- {} stderr -----\n{}", self.name, self.stderr());
        }
    }
}

/// Copy a pipe into a shared string; optionally forward each line.
fn drain<R: Read + Send + 'static>(
    pipe: R,
    lines: Option<mpsc::Sender<String>>,
) -> Arc<Mutex<String>> {
    let buffer = Arc::new(Mutex::new(String::new()));
    let sink = Arc::clone(&buffer);
    thread::spawn(move || {
        let mut reader = BufReader::new(pipe);
        let mut line = String::new();
        while matches!(reader.read_line(&mut line), Ok(n) if n > 0) {
            sink.lock().unwrap().push_str(&line);
            if let Some(tx) = &lines {
                let _ = tx.send(line.trim_end().to_string());
            }
            line.clear();
        }
    });
    buffer
}

/// The text after `marker` up to the next whitespace: the address in a start-up line.
pub fn address_after(line: &str, marker: &str) -> String {
    let rest = &line[line.find(marker).expect("marker in line") + marker.len()..];
    rest.split_whitespace().next().unwrap_or("").to_string()
}

/// Generous: CI is a noisy 2-core machine.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// The real server on a free port.
pub struct Server {
    pub proc: Proc,
    /// `http://127.0.0.1:PORT`
    pub base: String,
    pub db: PathBuf,
}

impl Server {
    /// Start on `db` with `--port 0` and extra flags; several servers may share a db.
    pub fn start(db: &TempDb, extra: &[&str]) -> Server {
        Server::start_with_env(db, extra, &[])
    }

    /// `start`, with variables added to the server's environment (the
    /// `${NAME}`s of a tools file).
    pub fn start_with_env(db: &TempDb, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let mut args = vec!["--port", "0", "--db", db.path_str()];
        args.extend_from_slice(extra);
        let (proc, line) =
            Proc::start_with_env("server", SERVER_BIN, &args, env, "listening on http://");
        let base = format!("http://{}", address_after(&line, "listening on http://"));
        Server {
            proc,
            base,
            db: db.path.clone(),
        }
    }

    /// Start on a PostgreSQL `url` with `--port 0` and extra flags. Its
    /// `db` is an unused file in `scratch`: a failing test's dump of a SQLite
    /// file has nothing to show here.
    pub fn start_on_postgres(url: &str, extra: &[&str], scratch: &TempDir) -> Server {
        let mut args = vec!["--port", "0", "--db", url];
        args.extend_from_slice(extra);
        let (proc, line) = Proc::start("server", SERVER_BIN, &args, "listening on http://");
        let base = format!("http://{}", address_after(&line, "listening on http://"));
        let db = scratch.join("not-used.db");
        Server { proc, base, db }
    }

    pub fn stderr(&self) -> String {
        self.proc.stderr()
    }

    /// `kill -9`, then reap.
    pub fn kill(&mut self) {
        self.proc.kill();
    }

    /// Wait for the process to exit by itself (a chaos crash) and return how.
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        assert!(
            self.proc.wait_exit(DEADLINE),
            "server did not exit; stderr:\n{}",
            self.stderr()
        );
        self.proc.child.try_wait().unwrap().expect("exited")
    }

    /// A direct connection to the database file, for inspection.
    pub fn sql(&self) -> rusqlite::Connection {
        open_db(&self.db)
    }
}

impl Http for Server {
    fn base(&self) -> &str {
        &self.base
    }

    fn context(&self) -> String {
        self.stderr()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if thread::panicking() {
            if let Ok(rows) = dump_calls(&self.db) {
                eprintln!("----- calls in {} -----\n{rows}", self.db.display());
            }
        }
    }
}

pub fn open_db(db: &Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(db).expect("open db");
    conn.busy_timeout(Duration::from_secs(10)).unwrap();
    conn
}

/// `SELECT count(*)` of any query, for assertions.
pub fn count(db: &Path, sql: &str) -> i64 {
    open_db(db).query_row(sql, [], |r| r.get(0)).expect(sql)
}

fn dump_calls(db: &Path) -> rusqlite::Result<String> {
    let conn = rusqlite::Connection::open(db)?;
    let mut stmt = conn.prepare(
        "SELECT call_id, idem_key, status, attempt, owner FROM calls ORDER BY created_at LIMIT 50",
    )?;
    let rows: Vec<String> = stmt
        .query_map([], |r| {
            Ok(format!(
                "{}|{}|{}|{}|{}",
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, Option<String>>(4)?.unwrap_or_default()
            ))
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows.join("\n"))
}

/// The audit events of one call, in order.
pub fn audit_events(db: &Path, call_id: &str) -> Vec<String> {
    let conn = open_db(db);
    let mut stmt = conn
        .prepare("SELECT event FROM audit WHERE call_id = ?1 ORDER BY id")
        .unwrap();
    stmt.query_map([call_id], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

/// The audit events of one call, in order, each with the attempt it belongs to.
pub fn audit_events_and_attempts(db: &Path, call_id: &str) -> Vec<(String, i64)> {
    let conn = open_db(db);
    let mut stmt = conn
        .prepare("SELECT event, attempt FROM audit WHERE call_id = ?1 ORDER BY id")
        .unwrap();
    stmt.query_map([call_id], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

pub fn charge(amount: i64) -> Value {
    serde_json::json!({"tool": "charge", "args": {"amount": amount}})
}

/// The chaos proxy on a free port.
pub struct Proxy {
    pub proc: Proc,
    /// `http://127.0.0.1:PORT`
    pub base: String,
}

impl Proxy {
    pub fn start(upstream: &str, mode: &str, extra: &[&str]) -> Proxy {
        let mut args = vec![
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            upstream,
            "--mode",
            mode,
        ];
        args.extend_from_slice(extra);
        let (proc, line) = Proc::start("chaos_proxy", PROXY_BIN, &args, "listening on http://");
        let base = format!("http://{}", address_after(&line, "listening on http://"));
        Proxy { proc, base }
    }

    pub fn addr(&self) -> &str {
        authority(&self.base)
    }
}

/// A finished run of the `client` binary.
pub struct ClientRun {
    pub output: Output,
    /// Every stdout line, parsed as JSON.
    pub lines: Vec<Value>,
}

impl ClientRun {
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }

    /// The per-attempt lines (POSTs and the by-key lookup), without the final call.
    pub fn attempts(&self) -> &[Value] {
        &self.lines[..self.lines.len().saturating_sub(1)]
    }

    pub fn last(&self) -> &Value {
        self.lines
            .last()
            .expect("the client always prints a final line")
    }

    pub fn describe(&self) -> String {
        format!(
            "status {:?}\nstdout:\n{}\nstderr:\n{}",
            self.output.status,
            self.stdout(),
            String::from_utf8_lossy(&self.output.stderr)
        )
    }
}

pub fn run_client(args: &[&str]) -> ClientRun {
    run_client_with_env(args, &[])
}

/// `run_client` with variables set (and no `IDEMPOTENT_TOOL_TOKEN` but theirs).
pub fn run_client_with_env(args: &[&str], env: &[(&str, &str)]) -> ClientRun {
    let output = Command::new(CLIENT_BIN)
        .args(args)
        .env_remove("IDEMPOTENT_TOOL_TOKEN")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("run the client binary");
    let lines = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON {l:?}: {e}")))
        .collect();
    ClientRun { output, lines }
}

/// Poll `check` until it returns true or the (generous) deadline passes.
pub fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(20));
    }
}

/// The folder holding the binaries cargo built for this test run.
pub fn bin_dir() -> &'static Path {
    Path::new(SERVER_BIN).parent().expect("binary has a folder")
}

/// Send a signal (`"TERM"`, `"INT"`, `"STOP"`, ...) to a child process.
pub fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(child.id().to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{name} {}", child.id());
}

/// A call's `status` and `attempt`, to compare as one pair.
pub fn status_and_attempt(call: &Value) -> (Option<&str>, Option<i64>) {
    (call["status"].as_str(), call["attempt"].as_i64())
}

/// An error's `code` and `retryable`, to compare as one pair.
pub fn code_and_retryable(error: &Value) -> (Option<&str>, Option<bool>) {
    (error["code"].as_str(), error["retryable"].as_bool())
}

/// `idempotent-tool verify` on `db` passes: every invariant holds.
pub fn assert_verify_passes(db: &TempDb) {
    let verify = std::process::Command::new(SERVER_BIN)
        .args(["verify", "--db", db.path_str()])
        .output()
        .expect("run verify");
    assert!(
        verify.status.success(),
        "verify: {}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
}

/// `idempotent-tool verify --tools` on `db` (a path or a PostgreSQL URL)
/// passes, and its business-key check ran.
pub fn assert_verify_passes_with_business_keys(db: &str, tools: &downstream::ToolsFile) {
    let text = assert_verify_passes_with_tools(db, tools);
    assert!(
        text.contains("share a business key"),
        "the check ran: {text}"
    );
}

/// `idempotent-tool verify --tools` on `db` passes (the tools file says
/// which tools write effects); returns its report.
pub fn assert_verify_passes_with_tools(db: &str, tools: &downstream::ToolsFile) -> String {
    let report = Command::new(SERVER_BIN)
        .args(["verify", "--db", db, "--tools", tools.path_str()])
        .output()
        .expect("run verify");
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(
        report.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&report.stderr)
    );
    text.into_owned()
}

/// Flags for a stall test: a one-second lease, recovery every 50 ms, and the
/// given busy timeout for the service's own writes.
pub fn one_second_lease_flags(busy_timeout_ms: &str) -> [&str; 6] {
    [
        "--lease-secs",
        "1",
        "--recover-interval-ms",
        "50",
        "--busy-timeout-ms",
        busy_timeout_ms,
    ]
}

/// Take the write lock of `db` from outside and hold it until a second past
/// the lease of `call_id` (read inside the lock, so no extension moves it);
/// returns the connection, still inside its transaction, for the caller to
/// roll back.
pub fn hold_the_write_lock_past_the_lease(db: &Path, call_id: &str) -> rusqlite::Connection {
    let blocker = open_db(db);
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let lease_until: f64 = blocker
        .query_row(
            "SELECT lease_until FROM calls WHERE call_id = ?1",
            [call_id],
            |r| r.get(0),
        )
        .unwrap();
    eventually("the lease to be a second past its expiry", || {
        idempotent_tool::store::now() > lease_until + 1.0
    });
    blocker
}

/// Every `(key, call_id)` answered `202` is on file under its key, with that
/// call id.
pub fn assert_each_accepted_call_kept(conn: &rusqlite::Connection, accepted: &[(String, String)]) {
    for (key, call_id) in accepted {
        let found: Option<String> = conn
            .query_row(
                "SELECT call_id FROM calls WHERE idem_key = ?1",
                [key],
                |r| r.get(0),
            )
            .ok();
        assert_eq!(
            found.as_deref(),
            Some(call_id.as_str()),
            "{key} was answered 202, then lost"
        );
    }
}

/// What `idempotent-tool ARGS --print-config` prints with these variables
/// set; it must exit 0.
pub fn print_config(args: &[&str], variables: &[(&str, &std::ffi::OsStr)]) -> String {
    let out = Command::new(SERVER_BIN)
        .args(args)
        .arg("--print-config")
        .envs(variables.iter().copied())
        .output()
        .expect("run the server");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Run `program` to completion and return its output; past the (generous)
/// deadline it is killed and the test fails, rather than hanging the run
/// (e.g. a server that starts where it should have refused to).
pub fn run_bounded(program: &str, args: &[&str]) -> Output {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {program}: {e}"));
    let deadline = Instant::now() + DEADLINE;
    while child.try_wait().expect("wait for the child").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{program} {args:?} was still running after {DEADLINE:?}");
        }
        thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("the child's output")
}
