//! Test support: start the real `idempotent-tool` binary on a free port with a
//! temporary database, talk HTTP to it, and clean everything up on `Drop` —
//! also when the test fails, in which case the server's stderr is printed.
#![allow(dead_code)]

use idempotent_tool::client::{encode_path_segment, request_once};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// Generous: CI is a noisy 2-core machine.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// A unique folder under the system temp dir, removed on drop.
pub struct TempDir {
    pub path: PathBuf,
}

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let path = std::env::temp_dir().join(format!(
            "idem-test-{name}-{}-{nanos}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir { path }
    }

    pub fn db(&self) -> PathBuf {
        self.path.join("idem.db")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// A running server process.
pub struct Server {
    child: Child,
    pub base: String,
    pub db: PathBuf,
    stderr: Arc<Mutex<Vec<u8>>>,
}

pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_idempotent-tool")
}

impl Server {
    /// Start on `dir`'s database with `--port 0` and extra flags.
    pub fn start(dir: &TempDir, extra: &[&str]) -> Server {
        Server::start_on(&dir.db(), extra)
    }

    pub fn start_on(db: &Path, extra: &[&str]) -> Server {
        let mut child = Command::new(binary())
            .args(["--port", "0", "--db"])
            .arg(db)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn idempotent-tool");
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&stderr);
        let mut err_pipe = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err_pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        let (tx, rx) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let line = rx.recv_timeout(DEADLINE);
        let mut server = Server {
            child,
            base: String::new(),
            db: db.to_path_buf(),
            stderr,
        };
        let line =
            line.unwrap_or_else(|_| panic!("no start-up line; stderr:\n{}", server.stderr()));
        let addr = line
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("bad start-up line {line:?}"));
        server.base = format!("http://{addr}");
        server
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    /// The `host:port` part of the base URL.
    pub fn addr(&self) -> &str {
        self.base.trim_start_matches("http://")
    }

    /// One request; returns the status and the JSON body (`Null` if not JSON).
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> (u16, Value) {
        let resp = request_once(
            &self.base,
            method,
            path,
            headers,
            body.map(str::as_bytes),
            Some(DEADLINE),
        )
        .unwrap_or_else(|e| panic!("{method} {path}: {e}; stderr:\n{}", self.stderr()));
        (resp.status, resp.json())
    }

    pub fn post(&self, key: &str, body: &Value) -> (u16, Value) {
        self.post_path("/v1/tool-calls", key, body)
    }

    pub fn post_path(&self, path: &str, key: &str, body: &Value) -> (u16, Value) {
        self.request(
            "POST",
            path,
            &[("Idempotency-Key", key)],
            Some(&body.to_string()),
        )
    }

    pub fn get(&self, path: &str) -> (u16, Value) {
        self.request("GET", path, &[], None)
    }

    pub fn by_key(&self, key: &str) -> (u16, Value) {
        self.get(&format!(
            "/v1/tool-calls/by-key/{}",
            encode_path_segment(key)
        ))
    }

    /// Poll the call until it is terminal, with a deadline.
    pub fn wait_terminal(&self, call_id: &str) -> Value {
        let start = Instant::now();
        loop {
            let (status, call) = self.get(&format!("/v1/tool-calls/{call_id}?wait=1"));
            assert!(status == 200 || status == 202, "{status} {call}");
            if call["status"] == "succeeded" || call["status"] == "failed" {
                return call;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "call {call_id} never finished: {call}\nstderr:\n{}",
                self.stderr()
            );
        }
    }

    pub fn stats(&self) -> Value {
        let (status, stats) = self.get("/stats");
        assert_eq!(status, 200, "{stats}");
        stats
    }

    /// `kill -9`, then reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Wait for the process to exit by itself (a chaos crash).
    pub fn wait_exit(&mut self) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "server did not exit; stderr:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A direct connection to the database file, for inspection.
    pub fn sql(&self) -> rusqlite::Connection {
        open_db(&self.db)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!("--- server stderr ({}) ---\n{}", self.base, self.stderr());
            if let Ok(rows) = dump_calls(&self.db) {
                eprintln!("--- calls ---\n{rows}");
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

pub fn charge(amount: i64) -> Value {
    serde_json::json!({"tool": "charge", "args": {"amount": amount}})
}
