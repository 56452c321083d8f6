//! The reports: the text a person reads (a single run, or the sweep's table)
//! and the one JSON object `--json` prints instead. Every output line and JSON
//! field the bench has is written here.
//!
//! It only formats figures already measured; it never measures, and its
//! "target ... met/MISSED" lines are figures beside thresholds, not checks:
//! only the invariants decide the exit code.

use crate::calibrate::CommitRate;
use crate::downstream::Gauge;
use crate::load::LoadResult;
use crate::measure::{peak_rss_kib, ratio, Measurement};
#[cfg(feature = "testing")]
use crate::sweep::{DATA_PAIRS, PREFILL_CALLS};
use crate::target::Target;
use crate::{Config, Mode, Stop};
use idempotent_tool::store::WriterStats;
use serde_json::{json, Value};

fn stop_text(stop: Stop) -> String {
    match stop {
        Stop::Count(n) => format!("n={n}"),
        Stop::After(d) => format!("duration={}s", d.as_secs_f64()),
    }
}

fn connections_text(keep_alive: bool) -> &'static str {
    if keep_alive {
        "keep-alive"
    } else {
        "new-connection"
    }
}

fn print_commit_rate(c: CommitRate) {
    let (mean, before, after) = (c.mean(), c.before, c.after);
    idempotent_tool::out!(
        "calibration: single-commit={mean:.1}/s (before {before:.1}, after {after:.1})"
    );
    idempotent_tool::outln!("  one commit p50={:.2}ms p99={:.2}ms", c.p50_ms, c.p99_ms);
}

/// Where the server's single writer spent the run: how many operations each
/// commit carried, and running them versus committing them.
fn print_writer(w: WriterStats) {
    if w.batches == 0 {
        return idempotent_tool::outln!("writer: - (the server reports no writer counters)");
    }
    let busy = (w.run_us + w.commit_us).max(1) as f64;
    idempotent_tool::outln!(
        "writer: batches={}  ops/batch={:.1}  run={:.1}us/op  commit={:.2}ms/batch ({:.0}% of its busy time)",
        w.batches,
        w.ops_per_batch(),
        w.run_us_per_op(),
        w.commit_ms_per_batch(),
        100.0 * w.commit_us as f64 / busy
    );
}

/// The server's CPU and context switches per accepted request, and per
/// `/healthz` of the calibration: the figures a change is judged by.
fn print_cpu(m: &Measurement) {
    let (Some((us, switches)), Some(cpus)) = (m.cpu_per_call(), m.server_cpus()) else {
        return idempotent_tool::outln!("cpu: - (give --server-pid)");
    };
    idempotent_tool::out!(
        "cpu: {us:.1}us per {} ({switches:.2} switches; the server over the load and the drain, {cpus:.2} CPUs)",
        m.mode.call_name()
    );
    match m.cpu_per_healthz() {
        Some((us, switches)) => {
            idempotent_tool::outln!("  /healthz {us:.1}us ({switches:.2} switches)")
        }
        None => idempotent_tool::outln!(),
    }
}

/// What the service's access log was doing, and what one line costs.
#[derive(Debug, Clone, Copy)]
pub struct AccessLog {
    /// Whether the server under load wrote one (`None`: a `--base` server,
    /// whose flags the bench does not know).
    pub enabled: Option<bool>,
    /// Building and writing one line to a file, measured on this machine.
    pub micros_per_line: f64,
}

impl AccessLog {
    /// One line per request at `rps`, as a share of one core.
    fn core_share(self, rps: f64) -> f64 {
        self.micros_per_line * rps / 1e6
    }
}

fn print_access_log(access: AccessLog, rps: f64) {
    let state = match access.enabled {
        Some(true) => "on (to a file)",
        Some(false) => "off",
        None => "as the server was started",
    };
    idempotent_tool::outln!(
        "access log: {state}; one line costs {:.2}us, {:.1}% of one core at this rps",
        access.micros_per_line,
        100.0 * access.core_share(rps)
    );
}

pub fn print_report(
    m: &Measurement,
    config: &Config,
    target: &Target,
    commit: CommitRate,
    rss: Option<u64>,
    no_http: Option<&LoadResult>,
    access: AccessLog,
) {
    let (l, h) = (&m.load, &m.healthz);
    let server = match target.in_process {
        true => format!("in-process@{}", target.authority),
        false => target.authority.clone(),
    };
    let conns = connections_text(config.keep_alive);
    let stop = stop_text(config.stop);
    idempotent_tool::outln!(
        "mode={} concurrency={} {conns} {stop} server={server}",
        m.mode.name(),
        m.concurrency
    );
    let wall = l.wall.as_secs_f64();
    idempotent_tool::outln!(
        "n={}  wall={wall:.3}s  rps={:.1} ({:.2}x healthz)",
        l.requests(),
        l.rps(),
        m.rps_x()
    );
    let (p50, p95, p99, max) = (l.ms(0.50), l.ms(0.95), l.ms(0.99), l.ms(1.0));
    let p99_x = m.p99_x();
    idempotent_tool::outln!(
        "p50={p50:.2}ms  p95={p95:.2}ms  p99={p99:.2}ms ({p99_x:.1}x healthz)  max={max:.2}ms"
    );
    let codes: Vec<String> = l
        .codes
        .iter()
        .map(|(c, n)| format!("http_{c}={n}"))
        .collect();
    idempotent_tool::outln!("{}  status0={}", codes.join("  "), l.status0);
    let (calls, effects) = (
        m.after.calls - m.before.calls,
        m.after.effects - m.before.effects,
    );
    idempotent_tool::outln!("calls={calls}  effects={effects}");
    let attempts: Vec<String> = m
        .attempts()
        .iter()
        .map(|(a, n)| format!("{a}={n}"))
        .collect();
    idempotent_tool::outln!("attempts: {}", attempts.join(" "));
    idempotent_tool::out!(
        "accepted/s={:.1} ({:.2}x healthz)  ",
        l.accepted_per_s(),
        m.accepted_x()
    );
    idempotent_tool::out!("completed/s={:.1} ", m.completed_per_s());
    idempotent_tool::outln!(
        "({:.2}x single-commit)  drain={:.3}s",
        m.completed_x(commit),
        m.drain.as_secs_f64()
    );
    let whose = match target.in_process {
        true => "this process: server and load generator",
        false => "server pid",
    };
    match rss {
        Some(kib) => idempotent_tool::outln!("peak_rss={:.1}MiB ({whose})", kib as f64 / 1024.0),
        None => idempotent_tool::outln!("peak_rss=- (give --server-pid)"),
    }
    idempotent_tool::out!(
        "calibration: healthz rps={:.1} p99={:.2}ms ",
        h.rps(),
        h.ms(0.99)
    );
    idempotent_tool::outln!("({} requests)", h.requests());
    print_cpu(m);
    print_writer(m.writer());
    print_commit_rate(commit);
    print_access_log(access, l.rps());
    if let Some(no_http) = no_http {
        idempotent_tool::out!(
            "without HTTP: accepted/s={:.1} ({:.2}x healthz)  ",
            no_http.accepted_per_s(),
            ratio(no_http.accepted_per_s(), h.rps())
        );
        idempotent_tool::outln!(
            "p50={:.2}ms  p99={:.2}ms  (same load into a fresh service's handler)",
            no_http.ms(0.50),
            no_http.ms(0.99)
        );
    }
    print_targets(m, commit);
    for c in &m.checks {
        idempotent_tool::outln!("check {}: {}", if c.ok { "ok  " } else { "FAIL" }, c.name);
    }
}

/// `--mode http-tool`: completed calls/s beside the ideal `workers / latency`,
/// and what the downstream saw.
pub fn print_http_tool(m: &Measurement, config: &Config, ideal: f64, downstream: &Gauge) {
    let done = m.completed_per_s();
    let latency_ms = config
        .setup
        .downstream_latency
        .unwrap_or_default()
        .as_secs_f64()
        * 1e3;
    idempotent_tool::outln!(
        "http-tool: workers={} downstream latency={latency_ms:.0}ms  completed/s={done:.1}  \
         ideal workers/latency={ideal:.1}/s  ratio={:.2}",
        config.workers(),
        done / ideal.max(1e-9)
    );
    idempotent_tool::outln!(
        "http-tool: downstream requests={} max_in_flight={}",
        downstream.requests(),
        downstream.max_in_flight()
    );
    let ratio = done / ideal.max(1e-9);
    let mark = if ratio >= 0.8 { "met" } else { "MISSED" };
    idempotent_tool::outln!("target completed/s >= 0.8x ideal: {ratio:.2}x {mark}");
}

/// `print_http_tool`'s figures for `--json`.
pub fn http_tool_json(m: &Measurement, config: &Config, ideal: f64, downstream: &Gauge) -> Value {
    let latency = config.setup.downstream_latency.unwrap_or_default();
    json!({
        "workers": config.workers(),
        "downstream_latency_ms": latency.as_secs_f64() * 1e3,
        "completed_per_s": m.completed_per_s(),
        "ideal_per_s": ideal,
        "ratio_to_ideal": m.completed_per_s() / ideal.max(1e-9),
        "downstream_requests": downstream.requests(),
        "downstream_max_in_flight": downstream.max_in_flight(),
    })
}

/// The targets, as figures next to their thresholds (not assertions).
fn print_targets(m: &Measurement, commit: CommitRate) {
    let mark = |ok: bool| if ok { "met" } else { "MISSED" };
    let (acc_x, p99, done_x, rps_x) = (
        m.accepted_x(),
        m.load.ms(0.99),
        m.completed_x(commit),
        m.rps_x(),
    );
    match m.mode {
        Mode::Distinct => {
            idempotent_tool::outln!(
                "target accepted/s >= 0.25x healthz: {acc_x:.2}x {}",
                mark(acc_x >= 0.25)
            );
            idempotent_tool::outln!("target POST p99 <= 5ms: {p99:.2}ms {}", mark(p99 <= 5.0));
            idempotent_tool::outln!(
                "target completed/s >= 1.0x single-commit: {done_x:.2}x {}",
                mark(done_x >= 1.0)
            );
        }
        Mode::SameKey => idempotent_tool::outln!(
            "target same-key rps >= 0.5x healthz: {rps_x:.2}x {}",
            mark(rps_x >= 0.5)
        ),
        _ => {}
    }
}

#[cfg(feature = "testing")]
pub fn print_sweep(points: &[Measurement], config: &Config, commit: CommitRate, data_ratio: f64) {
    let conns = connections_text(config.keep_alive);
    let stop = stop_text(config.stop);
    let mode = points[0].mode.name();
    idempotent_tool::outln!("sweep: mode={mode} {conns} {stop} per point");
    print_commit_rate(commit);
    idempotent_tool::out!("conc    calls0       rps  x_hlth   p99ms  x_hlth");
    idempotent_tool::outln!(
        "  hlth_rps  hlth_p99  completed/s  ops/batch  commit_ms  status0  checks"
    );
    for p in points {
        let (l, h) = (&p.load, &p.healthz);
        idempotent_tool::out!(
            "{:>4} {:>9} {:>9.1} ",
            p.concurrency,
            p.before.calls,
            l.rps()
        );
        idempotent_tool::out!("{:>7.2} {:>7.2} {:>7.1} ", p.rps_x(), l.ms(0.99), p.p99_x());
        idempotent_tool::out!(
            "{:>9.1} {:>9.2} {:>12.1} ",
            h.rps(),
            h.ms(0.99),
            p.completed_per_s()
        );
        let w = p.writer();
        idempotent_tool::out!(
            "{:>10.1} {:>10.2} ",
            w.ops_per_batch(),
            w.commit_ms_per_batch()
        );
        idempotent_tool::outln!("{:>8} {:>7}", l.status0, if p.ok() { "ok" } else { "FAIL" });
    }
    idempotent_tool::outln!(
        "data: rps with {PREFILL_CALLS} calls = {data_ratio:.2}x a fresh empty db, \
         {DATA_PAIRS} adjacent pairs (target >= 0.8)"
    );
    if let Some(kib) = peak_rss_kib(None) {
        let mib = kib as f64 / 1024.0;
        idempotent_tool::outln!(
            "peak_rss={mib:.1}MiB (this process: servers, load generator, pre-fill)"
        );
    }
    for p in points {
        for c in p.checks.iter().filter(|c| !c.ok) {
            let (conc, before) = (p.concurrency, p.before.calls);
            idempotent_tool::outln!(
                "check FAIL (concurrency {conc}, {before} calls before): {}",
                c.name
            );
        }
    }
}

/// `print_cpu`'s figures (`null` when the server's process could not be read).
fn cpu_json(m: &Measurement) -> Value {
    let (Some((us, switches)), Some((healthz_us, healthz_switches))) =
        (m.cpu_per_call(), m.cpu_per_healthz())
    else {
        return Value::Null;
    };
    json!({
        "per": m.mode.call_name(), "us_per_call": us, "switches_per_call": switches,
        "healthz_us": healthz_us, "healthz_switches": healthz_switches,
        "server_cpus": m.server_cpus(),
    })
}

fn measurement_json(m: &Measurement, commit: CommitRate) -> Value {
    let (l, h, w) = (&m.load, &m.healthz, m.writer());
    let checks: Vec<Value> = m
        .checks
        .iter()
        .map(|c| json!({"name": c.name, "ok": c.ok}))
        .collect();
    json!({
        "mode": m.mode.name(), "concurrency": m.concurrency, "calls_before": m.before.calls,
        "n": l.requests(), "wall_s": l.wall.as_secs_f64(),
        "rps": l.rps(), "rps_x_healthz": m.rps_x(),
        "accepted_per_s": l.accepted_per_s(), "accepted_x_healthz": m.accepted_x(),
        "p50_ms": l.ms(0.50), "p95_ms": l.ms(0.95), "p99_ms": l.ms(0.99), "max_ms": l.ms(1.0),
        "p99_x_healthz": m.p99_x(), "http": l.codes_by_name(), "status0": l.status0,
        "calls": m.after.calls - m.before.calls, "effects": m.after.effects - m.before.effects,
        "attempts": m.attempts(), "completed": m.completed(), "drain_s": m.drain.as_secs_f64(),
        "completed_per_s": m.completed_per_s(), "completed_x_single_commit": m.completed_x(commit),
        "healthz": {"n": h.requests(), "rps": h.rps(), "p99_ms": h.ms(0.99), "status0": h.status0},
        "single_commit_per_s": commit.mean(), "single_commit_p99_ms": commit.p99_ms,
        "cpu": cpu_json(m),
        "writer": {"batches": w.batches, "ops": w.ops, "ops_per_batch": w.ops_per_batch(),
                   "run_us_per_op": w.run_us_per_op(), "commit_ms_per_batch": w.commit_ms_per_batch()},
        "checks": checks, "ok": m.ok(),
    })
}

/// A single run's `--json` object: the measurement, the run without HTTP, and
/// how the run was made.
pub fn single_json(
    m: &Measurement,
    config: &Config,
    target: &Target,
    commit: CommitRate,
    rss: Option<u64>,
    no_http: Option<&LoadResult>,
    access: AccessLog,
) -> Value {
    let mut v = measurement_json(m, commit);
    v["access_log"] = json!({
        "enabled": access.enabled, "us_per_line": access.micros_per_line,
        "core_share": access.core_share(m.load.rps()),
    });
    v["no_http"] = no_http.map_or(Value::Null, |no_http| json!({
        "n": no_http.requests(), "http": no_http.codes_by_name(), "accepted_per_s": no_http.accepted_per_s(),
        "accepted_x_healthz": ratio(no_http.accepted_per_s(), m.healthz.rps()),
        "p50_ms": no_http.ms(0.50), "p99_ms": no_http.ms(0.99),
    }));
    v["stop"] = json!(stop_text(config.stop));
    v["keep_alive"] = json!(config.keep_alive);
    v["server"] = json!(match (target.in_process, target.child.is_some()) {
        (true, _) => "in-process",
        (false, true) => "server-bin",
        (false, false) => "base",
    });
    v["peak_rss_kib"] = json!(rss);
    v
}

/// The sweep's `--json` object: every point, the calibration, and the data ratio.
#[cfg(feature = "testing")]
pub fn sweep_json(
    points: &[Measurement],
    config: &Config,
    commit: CommitRate,
    data_ratio: f64,
) -> Value {
    let status0_256 = points
        .iter()
        .find(|p| p.concurrency == 256)
        .map(|p| p.load.status0);
    json!({
        "sweep": points.iter().map(|p| measurement_json(p, commit)).collect::<Vec<_>>(),
        "stop": stop_text(config.stop),
        "keep_alive": config.keep_alive,
        "single_commit_per_s": commit.mean(),
        "single_commit_before_after": [commit.before, commit.after],
        "single_commit_p50_ms": commit.p50_ms,
        "single_commit_p99_ms": commit.p99_ms,
        "rps_filled_over_empty": data_ratio,
        "status0_at_256": status0_256,
        "peak_rss_kib": peak_rss_kib(None),
    })
}
