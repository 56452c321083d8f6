//! The reference downstream (`src/bin/downstream.rs`) on a free port with its
//! own temp database, a tools file in a temp folder of its own, and a call's
//! audit rows with their times and details: what the tests of real tools
//! share. The downstream and the file are removed on drop, like everything here.

use super::{address_after, open_db, Proc, TempDb, DEADLINE};
use idempotent_tool::client::{encode_path_segment, request_once};
use idempotent_tool::temp::TempDir;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub const DOWNSTREAM_BIN: &str = env!("CARGO_BIN_EXE_downstream");

/// The reference downstream, deduplicating on `Idempotency-Key`.
pub struct Downstream {
    pub proc: Proc,
    /// `http://127.0.0.1:PORT`
    pub base: String,
    _db: TempDb,
}

impl Downstream {
    /// Start with extra flags (`--fail-first N`, `--status CODE`, `--delay-ms MS`, ...).
    pub fn start(flags: &[&str]) -> Downstream {
        let db = TempDb::new("downstream");
        let mut args = vec!["--port", "0", "--db", db.path_str()];
        args.extend_from_slice(flags);
        let (proc, line) = Proc::start("downstream", DOWNSTREAM_BIN, &args, "listening on http://");
        let base = format!("http://{}", address_after(&line, "listening on http://"));
        Downstream {
            proc,
            base,
            _db: db,
        }
    }

    /// A URL on this downstream, e.g. `url("/refunds")`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn get(&self, path: &str) -> Value {
        let resp = request_once(&self.base, "GET", path, &[], None, Some(DEADLINE))
            .unwrap_or_else(|e| panic!("GET {path} on the downstream: {e}"));
        assert_eq!(resp.status, 200, "GET {path} on the downstream");
        resp.json()
    }

    /// `{"key", "requests", "effects"}` for one `Idempotency-Key`.
    pub fn requests_for(&self, key: &str) -> Value {
        self.get(&format!("/requests/{}", encode_path_segment(key)))
    }

    /// `{"keys", "requests", "effects", "in_flight", "max_in_flight", "max_per_second"}`.
    pub fn stats(&self) -> Value {
        self.get("/stats")
    }

    /// The keys of the POSTs it logged, in order (`key=...` in each line),
    /// once at least `expected` are there: a line reaches our pipe reader
    /// after the downstream has answered, so the caller may be ahead of it.
    pub fn logged_keys(&self, expected: usize) -> Vec<String> {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let keys: Vec<String> = self
                .proc
                .stderr()
                .lines()
                .filter_map(|line| line.split(" key=").nth(1))
                .filter_map(|rest| rest.split_whitespace().next())
                .map(str::to_string)
                .collect();
            if keys.len() >= expected || Instant::now() >= deadline {
                return keys;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A tools file written into a temp folder of its own, removed on drop.
pub struct ToolsFile {
    pub path: PathBuf,
    _dir: TempDir,
}

impl ToolsFile {
    pub fn write(tools: &Value) -> ToolsFile {
        ToolsFile::write_text(&tools.to_string())
    }

    /// A file of exactly this text (for JSON a `Value` cannot hold, such as
    /// a member named twice).
    pub fn write_text(text: &str) -> ToolsFile {
        let dir = TempDir::new("tools-file").expect("a temp folder");
        let path = dir.join("tools.json");
        std::fs::write(&path, text).expect("write the tools file");
        ToolsFile { path, _dir: dir }
    }

    pub fn path_str(&self) -> &str {
        self.path.to_str().expect("temp paths are UTF-8 here")
    }
}

/// The audit rows of one call, in order: (ts, event, detail).
pub fn audit_rows(db: &Path, call_id: &str) -> Vec<(f64, String, String)> {
    let conn = open_db(db);
    let mut stmt = conn
        .prepare("SELECT ts, event, coalesce(detail, '') FROM audit WHERE call_id = ?1 ORDER BY id")
        .unwrap();
    stmt.query_map([call_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}
