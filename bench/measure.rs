//! One measurement: the `/healthz` calibration, the load, the drain until no
//! accepted call is left unfinished, and the checks; and the same load sent
//! without HTTP. Also what the bench reads of the server while it runs: its
//! `/stats` and its peak memory.
//!
//! It decides nothing about how figures are printed, and it reads the server
//! only through `/stats` (and `/proc`); the database is the invariants' to read.

use crate::calibrate::{healthz_calibration, CommitRate};
use crate::cpu::{CpuUse, Window};
use crate::error::BenchError;
use crate::invariants::{check_invariants, Check};
use crate::load::{parsed_request, run_load, Load, LoadResult, Via, REQUEST_TIMEOUT};
use crate::target::{run_id, service_config, Setup, Target};
use crate::{Config, Mode};
use idempotent_tool::app::Service;
use idempotent_tool::client::HttpConnection;
use idempotent_tool::store::WriterStats;
use idempotent_tool::temp::TempDir;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// `GET /stats`.
pub struct Stats {
    pub calls: i64,
    pub effects: i64,
    pub by_status: BTreeMap<String, i64>,
    pub attempts: BTreeMap<String, i64>,
    pub writer: WriterStats,
}

impl Stats {
    pub fn unfinished(&self) -> i64 {
        ["pending", "running"]
            .iter()
            .filter_map(|s| self.by_status.get(*s))
            .sum()
    }

    pub fn from_json(v: &Value) -> Stats {
        let counts = |field: &str| serde_json::from_value(v[field].clone()).unwrap_or_default();
        Stats {
            calls: v["calls"].as_i64().unwrap_or(0),
            effects: v["effects"].as_i64().unwrap_or(0),
            by_status: counts("by_status"),
            attempts: counts("attempts"),
            writer: WriterStats::from_json(&v["writer"]),
        }
    }
}

pub fn fetch_stats(authority: &str) -> Result<Stats, BenchError> {
    let mut conn = HttpConnection::open(authority, Some(REQUEST_TIMEOUT))
        .map_err(BenchError::io(format!("connect to {authority}")))?;
    let resp = conn
        .request("GET", "/stats", &[], None)
        .map_err(BenchError::io("GET /stats"))?;
    if resp.status != 200 {
        return Err(BenchError::StatsStatus(resp.status));
    }
    Ok(Stats::from_json(&resp.json()))
}

/// Poll `/stats` (through `fetch`) until no call is pending or running, or the timeout passes.
/// Returns how long it took, the last snapshot, and whether it drained.
pub fn wait_for_drain(
    mut fetch: impl FnMut() -> Result<Stats, BenchError>,
    timeout: Duration,
) -> Result<(Duration, Stats, bool), BenchError> {
    let start = Instant::now();
    loop {
        let stats = fetch()?;
        if stats.unfinished() == 0 || start.elapsed() >= timeout {
            let drained = stats.unfinished() == 0;
            return Ok((start.elapsed(), stats, drained));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Peak resident set (VmHWM) in KiB of this process or of `pid`.
pub fn peak_rss_kib(pid: Option<u32>) -> Option<u64> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/status"),
        None => "/proc/self/status".to_string(),
    };
    let status = std::fs::read_to_string(path).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// `value` as a multiple of `base` (a baseline that measured nothing counts as tiny, not zero).
pub fn ratio(value: f64, base: f64) -> f64 {
    value / base.max(1e-9)
}

/// Everything measured for one mode at one concurrency on one server.
pub struct Measurement {
    pub mode: Mode,
    pub concurrency: usize,
    pub healthz: LoadResult,
    pub load: LoadResult,
    pub before: Stats,
    pub after: Stats,
    /// From the end of the load until no call was pending or running.
    pub drain: Duration,
    pub checks: Vec<Check>,
    /// What the server spent answering the `/healthz` calibration, and over
    /// the load and the drain (`None`: a `--base` server without its pid).
    pub healthz_cpu: Option<CpuUse>,
    pub cpu: Option<CpuUse>,
}

impl Measurement {
    /// Calls added by this run that reached a terminal state.
    pub fn completed(&self) -> i64 {
        self.after.calls - self.before.calls - self.after.unfinished()
    }
    /// Completions per second over the load and the drain together.
    pub fn completed_per_s(&self) -> f64 {
        self.completed() as f64 / (self.load.wall + self.drain).as_secs_f64().max(1e-9)
    }
    pub fn ok(&self) -> bool {
        self.checks.iter().all(|c| c.ok)
    }
    pub fn rps_x(&self) -> f64 {
        ratio(self.load.rps(), self.healthz.rps())
    }
    pub fn accepted_x(&self) -> f64 {
        ratio(self.load.accepted_per_s(), self.healthz.rps())
    }
    pub fn p99_x(&self) -> f64 {
        ratio(self.load.ms(0.99), self.healthz.ms(0.99))
    }
    /// The writer's work over the load and the drain.
    pub fn writer(&self) -> WriterStats {
        self.after.writer.since(self.before.writer)
    }
    pub fn completed_x(&self, single_commit: CommitRate) -> f64 {
        ratio(self.completed_per_s(), single_commit.mean())
    }
    /// The server's CPU per accepted (2xx) request of the load, drain included,
    /// in microseconds, and its context switches per request.
    pub fn cpu_per_call(&self) -> Option<(f64, f64)> {
        let (cpu, n) = (self.cpu?, self.load.accepted());
        Some((cpu.micros_per(n), cpu.switches_per(n)))
    }
    /// The same per `/healthz` answered in the calibration.
    pub fn cpu_per_healthz(&self) -> Option<(f64, f64)> {
        let (cpu, n) = (self.healthz_cpu?, self.healthz.requests());
        Some((cpu.micros_per(n), cpu.switches_per(n)))
    }
    /// How many of the box's CPUs the server kept busy over the load and drain.
    pub fn server_cpus(&self) -> Option<f64> {
        let wall = (self.load.wall + self.drain).as_secs_f64().max(1e-9);
        Some(self.cpu?.micros as f64 / 1e6 / wall)
    }
    /// The attempts histogram of the calls this run added (section 12.12.5).
    pub fn attempts(&self) -> BTreeMap<String, i64> {
        let before = |a: &String| self.before.attempts.get(a).copied().unwrap_or(0);
        let added = self
            .after
            .attempts
            .iter()
            .map(|(a, n)| (a.clone(), n - before(a)));
        added.filter(|(_, n)| *n != 0).collect()
    }
}

/// Calibrate on `/healthz`, load, drain, check.
pub fn measure(
    target: &Target,
    mode: Mode,
    concurrency: usize,
    config: &Config,
) -> Result<Measurement, BenchError> {
    let plan = |mode| Load {
        via: Via::Http(&target.authority),
        mode,
        concurrency,
        keep_alive: config.keep_alive,
        stop: config.stop,
        prefix: format!("bench-{}", run_id()),
        hold_open: !target.in_process,
    };
    let server = target.cpu_server();
    let window = Window::open(server);
    let mut healthz = healthz_calibration(&plan(Mode::Healthz));
    let healthz_cpu = window.close(healthz.cpu);
    healthz.open.clear();
    let before = fetch_stats(&target.authority)?;
    idempotent_tool::errln!(
        "bench: concurrency {concurrency}: {} load ({} calls already)",
        mode.name(),
        before.calls
    );
    let window = Window::open(server);
    let mut load = run_load(&plan(mode));
    let (drain, after, drained) =
        wait_for_drain(|| fetch_stats(&target.authority), config.drain_timeout)?;
    let cpu = window.close(load.cpu);
    load.open.clear();
    let checks = check_invariants(target, mode, &load, &before, &after, drained);
    Ok(Measurement {
        mode,
        concurrency,
        healthz,
        load,
        before,
        after,
        drain,
        checks,
        healthz_cpu,
        cpu,
    })
}

/// The same load sent straight into the handler of a fresh service on a fresh
/// database in `dir` (see `Via::Direct`), then drained. Its accepted rate is
/// what the service could reach if HTTP cost nothing: a target above it cannot
/// be reached by work on the HTTP side.
pub fn measure_without_http(dir: &Path, config: &Config) -> Result<LoadResult, BenchError> {
    let dir = TempDir::new_in(dir, "idem-bench").map_err(BenchError::io("temp folder"))?;
    let setup = Setup {
        workers: config.setup.workers,
        downstream_latency: None,
    };
    let (service, _) = service_config(&dir.join("no-http.db"), setup)?;
    let service = Service::start(service)?;
    let handler = service.handler();
    idempotent_tool::errln!(
        "bench: the same load without HTTP, straight into a fresh service's handler"
    );
    let load = run_load(&Load {
        via: Via::Direct(&handler),
        mode: config.mode,
        concurrency: config.concurrency,
        keep_alive: true,
        stop: config.stop,
        prefix: format!("bench-{}", run_id()),
        hold_open: false,
    });
    let stats_request = parsed_request("GET", "/stats");
    let fetch = || {
        let body = handler(&stats_request).body;
        let stats = serde_json::from_slice(&body).map_err(BenchError::StatsBody)?;
        Ok(Stats::from_json(&stats))
    };
    wait_for_drain(fetch, config.drain_timeout)?;
    Ok(load)
}
