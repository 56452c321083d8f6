//! The two baselines every run is read against, measured on the same machine
//! in the same run: `GET /healthz` with the same load generator (the cost of
//! HTTP alone), and one-row durable SQLite commits on the same disk (the cost
//! of one fsync).
//!
//! The commit calibration writes only to a database file of its own, which it
//! removes; it never touches the service's database. A third, small one says
//! what access logging costs: the time to build and write one access-log line
//! to a file, as the service does for every request.

use crate::error::BenchError;
use crate::load::{quantile_ms, run_load, Load, LoadResult};
use crate::target::run_id;
use idempotent_tool::log::{AccessRecord, Level, Logger};
use std::path::Path;
use std::time::{Duration, Instant};

/// Access-log lines written to time one.
const ACCESS_LINES: u32 = 20_000;

/// Microseconds to build and write one access-log line (a typical POST's) to
/// a file in `dir`, averaged over `ACCESS_LINES`; the file is removed.
pub fn access_log_micros_per_line(dir: &Path) -> Result<f64, BenchError> {
    let path = dir.join(format!("access-calibration-{}.log", run_id()));
    let file = std::fs::File::create(&path).map_err(BenchError::io(path.display().to_string()))?;
    let logger = Logger::file(Level::Info, true, file);
    let key = format!("bench-{}-000123", run_id());
    let record = AccessRecord {
        request_id: "r0123456789ab-123456",
        client: Some(std::net::Ipv4Addr::LOCALHOST.into()),
        tenant: Some("anonymous"),
        method: "POST",
        path: "/v1/tool-calls",
        status: 202,
        duration: Duration::from_micros(3_456),
        idem_key: Some(&key),
        call_id: Some("c_19a3b5c7d9e1f2a3"),
        replayed: false,
    };
    let started = Instant::now();
    for _ in 0..ACCESS_LINES {
        logger.access(&record);
    }
    let elapsed = started.elapsed();
    let _ = std::fs::remove_file(&path);
    Ok(elapsed.as_secs_f64() * 1e6 / f64::from(ACCESS_LINES))
}

/// How long the single-commit calibration runs.
const COMMIT_CALIBRATION: Duration = Duration::from_millis(1500);

/// The HTTP-only baseline: `load` (in `Mode::Healthz`) against `GET /healthz`,
/// on the same connections and with the same stop rule as the run it calibrates.
pub fn healthz_calibration(load: &Load) -> LoadResult {
    idempotent_tool::errln!(
        "bench: concurrency {}: GET /healthz calibration",
        load.concurrency
    );
    run_load(load)
}

/// Single-row durable commits per second, measured before and after the load:
/// other tenants of a shared disk move it a lot, and the two show by how much.
/// Also how long one such commit takes: no accepted request can be faster,
/// since each waits for at least one commit.
#[derive(Debug, Clone, Copy)]
pub struct CommitRate {
    pub before: f64,
    pub after: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

impl CommitRate {
    pub fn new(before: CommitSample, after: CommitSample) -> CommitRate {
        let mut latencies_us = before.latencies_us;
        latencies_us.extend(after.latencies_us);
        latencies_us.sort_unstable();
        CommitRate {
            before: before.per_s,
            after: after.per_s,
            p50_ms: quantile_ms(&latencies_us, 0.50),
            p99_ms: quantile_ms(&latencies_us, 0.99),
        }
    }

    pub fn mean(self) -> f64 {
        (self.before + self.after) / 2.0
    }
}

/// One calibration pass: the rate and each commit's latency.
pub struct CommitSample {
    per_s: f64,
    latencies_us: Vec<u32>,
}

/// One-row durable commits in `dir` for a while, timed one by one: WAL,
/// `synchronous=FULL`, one `INSERT` per transaction. The floor a store without
/// group commit would hit.
pub fn single_commit_sample(dir: &Path) -> Result<CommitSample, BenchError> {
    let path = dir.join(format!("calibrate-{}.db", run_id()));
    let sample = (|| -> rusqlite::Result<CommitSample> {
        let conn = rusqlite::Connection::open(&path)?;
        let _: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
        conn.execute_batch(
            "PRAGMA synchronous=FULL; CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL);",
        )?;
        let mut insert = conn.prepare("INSERT INTO t (v) VALUES (?1)")?;
        let start = Instant::now();
        let mut latencies_us = Vec::new();
        while start.elapsed() < COMMIT_CALIBRATION {
            let one = Instant::now();
            insert.execute(["c_0123456789abcdef"])?;
            latencies_us.push(one.elapsed().as_micros().min(u32::MAX as u128) as u32);
        }
        let per_s = latencies_us.len() as f64 / start.elapsed().as_secs_f64();
        Ok(CommitSample {
            per_s,
            latencies_us,
        })
    })();
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    sample.map_err(|source| BenchError::Sqlite {
        doing: format!("single-commit calibration in {}", dir.display()),
        source,
    })
}
