//! Load test for idempotent-tool: how many tool calls per second the service
//! accepts, how long a `POST` takes (p50/p95/p99/max), how fast the accepted
//! calls then complete (including the drain after the load stops), and whether
//! the idempotency invariants still hold afterwards.
//!
//! How to read it: absolute figures depend on the machine and on whoever else
//! is using it, so every run also measures two baselines on the same machine,
//! in the same run, and prints each headline figure as a ratio to them:
//! `healthz` (the same load generator against `GET /healthz`: the cost of HTTP
//! alone) and `single-commit` (one-row durable SQLite commits per second on the
//! same disk: the cost of one fsync). `rps=9000 (0.3x healthz)` means the call
//! path keeps 30% of what HTTP alone could do; `completed/s=1200 (2.0x
//! single-commit)` means group commit is paying for more than one call per
//! fsync. `--sweep` shows how the cost grows with load (concurrency) and with
//! data (a database already holding 1,000,000 calls). A single run also sends
//! the same load once more straight into a fresh service's request handler,
//! with no HTTP at all: the rate HTTP work could at best approach. The first
//! lines of the report have the shape of the seed's Python bench (section 12.12.2).
//! `--mode http-tool` measures the worker pool instead: every call is an
//! `http` tool whose downstream answers after `--downstream-latency-ms`, and
//! completed calls/s is held against the ideal `workers / latency`.
//!
//! This file owns the flags and the order of a single run; it never measures
//! or prints figures itself. The rest, one concern per module: `target` (the
//! server under load and the temp folders), `load` (the client threads),
//! `downstream` (http-tool's in-process downstream), `calibrate` (the two
//! baselines), `error` (`BenchError`, why a run could not start or finish), `measure` (load, drain, `/stats`),
//! `invariants` (the checks after a run), `sweep` (the `--sweep` run and its
//! pre-filled database), `report` (text and JSON), `cluster` (`--db
//! postgres://…`: PostgreSQL with one and several nodes beside SQLite),
//! `list_latency`, `console_load` and `bulk_load` (`--console`: the list's
//! latency at a million calls, what the console costs the write path, and
//! what a bulk job costs new calls), `cpu` (what the server spends: CPU time
//! and context switches per request) and `check` (`--check`: that CPU per
//! call held to the committed `bench/baseline.json`).
#![forbid(unsafe_code)]
// Without the `testing` feature the loading runs are left out (`loaders`), and
// what only they use goes unused; with it (`cargo test`, `cargo clippy
// --all-targets`) every part is built and linted.
#![cfg_attr(not(feature = "testing"), allow(dead_code, unused_imports))]

mod bulk_load;
mod calibrate;
mod check;
mod cluster;
mod console_load;
mod cpu;
mod downstream;
mod error;
mod invariants;
#[cfg(feature = "testing")]
mod list_latency;
mod load;
mod loaders;
mod measure;
mod report;
#[cfg(feature = "testing")]
mod sweep;
mod target;

use calibrate::{single_commit_sample, CommitRate};
use error::BenchError;
use idempotent_tool::client::authority;
use idempotent_tool::config::Config as ServiceConfig;
use idempotent_tool::flag::{FlagError, Flags};
use idempotent_tool::log::{self, parse_access_log, Level, Logger};
use idempotent_tool::store::{DbSchema, DB_SCHEMA_RULE};
use idempotent_tool::temp::TempDir;
use measure::{measure, measure_without_http, peak_rss_kib};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;
use target::{spawn_server, start_with, Setup, Target};

const USAGE: &str = "\
usage: bench [options]

  --base URL           load a running server (default: start one in-process on
                       a temp database and a free port)
  --db PATH            with --base: the server's database, for invariant checks
  --db postgres://URL  PostgreSQL beside SQLite: distinct and same-key loads on
                       one in-process service on a temp SQLite file, one on this
                       database, and --nodes N on it, load spread over them;
                       one table (an empty database is best: rows accumulate)
  --db-schema NAME     with --db postgres://: the schema of the services' tables
                       (default idempotent_tool)
  --nodes N            with --db postgres://: the many-node row (default 3)
  --pgbench            with --db postgres://: measure the pgbench ceiling on the
                       same database first (bench/pgbench_ceiling.sh)
  --server-pid PID     with --base: read the server's peak RSS and its CPU from
                       /proc/PID
  --server-bin PATH    start this server binary (this build's
                       target/release/idempotent-tool, or another build's) on a
                       temp database and a free port, and load it: the server's
                       CPU is then its own process's, read from /proc
  --mode MODE          distinct (default): a new key per request, charge 1;
                       same-key: every request one key;
                       mixed: 40% charge, 10% send_email, 10% sleep 0.01 s,
                       10% fail once, 30% same-key retries of earlier calls;
                       http-tool: a new key per request, an http tool whose
                       downstream (in this process) answers after
                       --downstream-latency-ms; in-process only
  --workers N          the in-process service's workers (default 8)
  --downstream-latency-ms MS  http-tool's downstream latency (default 50)
  --n N                requests per run (default 300; http-tool: five
                       seconds' worth at the ideal workers / latency)
  --concurrency N      client threads, one connection each (default 20)
  --duration SECS      run for this long instead of --n requests
  --keep-alive         reuse each thread's connection (default)
  --new-connection     open a connection per request, like the seed's urllib
  --drain-timeout SECS how long to wait for accepted calls to finish (default 60)
  --sweep              concurrency 1, 4, 16, 64, 256, then a fresh empty database
                       and one of 1,000,000 calls, alternately, twice;
                       --duration per point (default 3 s); in-process only
  --access-log on|off  the in-process server's access log (default on, as the
                       server's), written to a temp file; either way the report
                       says what one line costs
  --console WHAT       the console's costs (docs/performance.md): list: a page of
                       GET /v1/tool-calls under each filter, the overview and
                       /stats, p50/p99, with --rows mixed calls in a temp
                       SQLite file (or in --db postgres://, which must be empty);
                       poll: the distinct load with and without a console
                       polling every 2 s; writes: the distinct load as built,
                       with the old status index, and with migration 11's
                       count triggers put back; bulk: the distinct load with
                       and without a bulk job cancelling --rows waiting calls
                       (default 100000); each comparison interleaved, --rounds
                       rounds, --duration per run (default 10 s)
  --rows N             with --console list: calls to load (default 1000000)
  --samples N          with --console list: requests per query (default 200)
  --rounds N           with --console poll or writes: rounds (default 3)
  --check              measure this build's server CPU per new key, per same-key
                       answer and per /healthz (in-process, --access-log off,
                       --rounds rounds of --duration each, default 3 and 5 s;
                       medians) and compare them with the baseline file: exit 1
                       when new keys or same-key answers, per /healthz, are
                       more than 10% worse
  --baseline PATH      with --check: the baseline file (default
                       bench/baseline.json in the source tree)
  --write-baseline     with --check: write the figures to the baseline file
                       instead of comparing
  --json               print one JSON object instead of the text report
  --help               print this help
";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Distinct,
    SameKey,
    Mixed,
    /// A new key per request, each call an `http` tool with a slow downstream.
    HttpTool,
    /// `GET /healthz`: the HTTP-only calibration.
    Healthz,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Distinct => "distinct",
            Mode::SameKey => "same-key",
            Mode::Mixed => "mixed",
            Mode::HttpTool => "http-tool",
            Mode::Healthz => "healthz",
        }
    }

    /// What one accepted request of this mode is, in the report's CPU line.
    fn call_name(self) -> &'static str {
        match self {
            Mode::Distinct | Mode::HttpTool => "new key",
            Mode::SameKey => "same-key answer",
            Mode::Mixed => "accepted call",
            Mode::Healthz => "/healthz",
        }
    }
}

/// When a load run stops issuing requests.
#[derive(Debug, Clone, Copy)]
enum Stop {
    Count(u64),
    After(Duration),
}

/// What `--console` measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Console {
    List,
    Poll,
    Writes,
    Bulk,
}

/// What the command line asked for.
#[derive(Debug)]
struct Config {
    base: Option<String>,
    db: Option<PathBuf>,
    /// `--db postgres://…`: the PostgreSQL comparison (`cluster`).
    postgres: Option<String>,
    /// `--db-schema`: the schema its services keep their tables in.
    db_schema: DbSchema,
    /// Its many-node row's node count.
    nodes: usize,
    /// Measure the pgbench ceiling first.
    pgbench: bool,
    server_pid: Option<u32>,
    /// `--server-bin`: a server binary to start and load.
    server_bin: Option<PathBuf>,
    /// `--check` (and `--write-baseline`): the CPU guard instead of a load run.
    check: Option<check::Check>,
    /// `--baseline`: the file `--check` compares with.
    baseline: PathBuf,
    mode: Mode,
    stop: Stop,
    concurrency: usize,
    keep_alive: bool,
    drain_timeout: Duration,
    sweep: bool,
    /// `--console`: the console's costs instead of a load run.
    console: Option<Console>,
    /// `--rows`: calls `--console list` loads.
    rows: u64,
    /// `--samples`: requests per query of `--console list`.
    samples: usize,
    /// `--rounds`: rounds of `--console poll` and `writes`.
    rounds: usize,
    json: bool,
    /// The in-process service writes an access log (to a temp file).
    access_log: bool,
    /// `--workers` and, for http-tool, the downstream's latency.
    setup: Setup,
}

impl Config {
    /// `Ok(None)` means `--help`.
    fn parse(args: impl IntoIterator<Item = String>) -> Result<Option<Config>, BenchError> {
        let mut c = Config {
            base: None,
            db: None,
            postgres: None,
            db_schema: DbSchema::default(),
            nodes: 3,
            pgbench: false,
            server_pid: None,
            server_bin: None,
            check: None,
            baseline: PathBuf::from(check::DEFAULT_BASELINE),
            mode: Mode::Distinct,
            stop: Stop::Count(300),
            concurrency: 20,
            keep_alive: true,
            drain_timeout: Duration::from_secs(60),
            sweep: false,
            console: None,
            rows: 1_000_000,
            samples: 200,
            rounds: 3,
            json: false,
            access_log: true,
            setup: Setup::default(),
        };
        let (mut duration, mut count, mut latency) = (None, None, Duration::from_millis(50));
        let mut access_log_given = false;
        let mut rows = None;
        let mut flags = Flags::new(args);
        while let Some(flag) = flags.next_flag()? {
            let mut value = || flags.value();
            match flag.as_str() {
                "--help" | "-h" => return Ok(None),
                "--base" => c.base = Some(value()?),
                "--db" => {
                    let value = value()?;
                    if value.starts_with("postgres://") || value.starts_with("postgresql://") {
                        c.postgres = Some(value);
                    } else {
                        c.db = Some(PathBuf::from(value));
                    }
                }
                "--db-schema" => {
                    let name = value()?;
                    c.db_schema = DbSchema::parse(&name).ok_or(FlagError::BadValue {
                        flag: flag.clone(),
                        value: name,
                        expected: DB_SCHEMA_RULE,
                    })?
                }
                "--nodes" => c.nodes = number(&flag, &value()?)? as usize,
                "--pgbench" => c.pgbench = true,
                "--server-pid" => c.server_pid = Some(number(&flag, &value()?)? as u32),
                "--server-bin" => c.server_bin = Some(PathBuf::from(value()?)),
                "--check" => c.check = Some(c.check.unwrap_or(check::Check::Compare)),
                "--write-baseline" => c.check = Some(check::Check::Write),
                "--baseline" => c.baseline = PathBuf::from(value()?),
                "--mode" => {
                    c.mode = match value()?.as_str() {
                        "distinct" => Mode::Distinct,
                        "same-key" => Mode::SameKey,
                        "mixed" => Mode::Mixed,
                        "http-tool" => Mode::HttpTool,
                        other => return Err(BenchError::UnknownMode(other.to_string())),
                    }
                }
                "--n" => count = Some(number(&flag, &value()?)?),
                "--workers" => c.setup.workers = Some(number(&flag, &value()?)? as usize),
                "--downstream-latency-ms" => {
                    latency = Duration::from_millis(number(&flag, &value()?)?)
                }
                "--concurrency" => c.concurrency = number(&flag, &value()?)? as usize,
                "--duration" => duration = Some(seconds(&flag, &value()?)?),
                "--keep-alive" => c.keep_alive = true,
                "--new-connection" => c.keep_alive = false,
                "--drain-timeout" => c.drain_timeout = seconds(&flag, &value()?)?,
                "--sweep" => c.sweep = true,
                "--console" => {
                    c.console = Some(match value()?.as_str() {
                        "list" => Console::List,
                        "poll" => Console::Poll,
                        "writes" => Console::Writes,
                        "bulk" => Console::Bulk,
                        other => {
                            return Err(bad_value("--console", other, "list, poll, writes or bulk"))
                        }
                    })
                }
                "--rows" => rows = Some(number(&flag, &value()?)?),
                "--samples" => c.samples = number(&flag, &value()?)? as usize,
                "--rounds" => c.rounds = number(&flag, &value()?)? as usize,
                "--json" => c.json = true,
                "--access-log" => {
                    c.access_log = parse_access_log(&value()?).map_err(BenchError::Setting)?;
                    access_log_given = true;
                }
                other => return Err(FlagError::Unknown(other.to_string()).into()),
            }
        }
        if c.mode == Mode::HttpTool {
            if c.base.is_some() || c.sweep {
                return Err(BenchError::Usage(
                    "--mode http-tool starts its own service; no --base or --sweep",
                ));
            }
            c.setup.downstream_latency = Some(latency);
        }
        c.rows = match (rows, c.console) {
            (Some(n), _) => n,
            (None, Some(Console::Bulk)) => 100_000,
            (None, _) => c.rows,
        };
        if let Some(d) = duration {
            c.stop = Stop::After(d);
        } else if let Some(n) = count {
            c.stop = Stop::Count(n);
        } else if c.sweep {
            c.stop = Stop::After(Duration::from_secs(3));
        } else if c.check.is_some() {
            c.stop = Stop::After(Duration::from_secs(5));
        } else if c.console.is_some() {
            c.stop = Stop::After(Duration::from_secs(10));
        } else if c.mode == Mode::HttpTool {
            c.stop = Stop::Count((c.ideal_per_s().unwrap_or(60.0) * 5.0).ceil() as u64);
        }
        if c.check.is_some() {
            let alone = c.base.is_none()
                && c.server_bin.is_none()
                && !c.sweep
                && c.console.is_none()
                && c.postgres.is_none()
                && c.mode == Mode::Distinct;
            if !alone {
                return Err(BenchError::Usage(
                    "--check starts its own in-process services and loads them itself; no --base, --server-bin, --sweep, --console, --db postgres:// or --mode",
                ));
            }
            // What a call costs the service, not its logging (unless asked).
            if !access_log_given {
                c.access_log = false;
            }
        }
        if c.server_bin.is_some() && (c.base.is_some() || c.sweep || c.mode == Mode::HttpTool) {
            return Err(BenchError::Usage(
                "--server-bin starts the server it loads; no --base, --sweep or http-tool",
            ));
        }
        if c.setup.workers.is_some_and(|w| w > 1024) {
            return Err(BenchError::Usage(
                "--workers must be at most 1024, as the service's",
            ));
        }
        if c.console.is_some() && (c.base.is_some() || c.sweep || c.mode != Mode::Distinct) {
            return Err(BenchError::Usage(
                "--console starts its own services with distinct keys; no --base, --sweep or --mode",
            ));
        }
        if c.postgres.is_some() && c.console.is_some_and(|w| w != Console::List) {
            return Err(BenchError::Usage(
                "--console poll and writes run on SQLite; --db postgres:// goes with --console list",
            ));
        }
        if c.postgres.is_some() && (c.base.is_some() || c.sweep || c.mode == Mode::HttpTool) {
            return Err(BenchError::Usage(
                "--db postgres:// starts its own services; no --base, --sweep or http-tool",
            ));
        }
        if c.nodes > 64 {
            return Err(BenchError::Usage("--nodes must be at most 64"));
        }
        if c.sweep && c.base.is_some() {
            return Err(BenchError::Usage(
                "--sweep starts its own servers; it cannot use --base",
            ));
        }
        if c.concurrency > 4096 {
            return Err(BenchError::Usage("--concurrency must be at most 4096"));
        }
        Ok(Some(c))
    }

    /// http-tool's ideal rate: every worker always waiting on the downstream.
    fn ideal_per_s(&self) -> Option<f64> {
        let latency = self.setup.downstream_latency?.as_secs_f64().max(1e-3);
        Some(self.workers() as f64 / latency)
    }

    /// The in-process service's workers: `--workers`, or the service's default.
    fn workers(&self) -> usize {
        let default = || ServiceConfig::default().runner.workers;
        self.setup.workers.unwrap_or_else(default)
    }
}

fn number(flag: &str, value: &str) -> Result<u64, BenchError> {
    value
        .parse::<u64>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| bad_value(flag, value, "a positive integer"))
}

fn seconds(flag: &str, value: &str) -> Result<Duration, BenchError> {
    value
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0 && *s <= 86_400.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| bad_value(flag, value, "a number of seconds above 0"))
}

fn bad_value(flag: &str, value: &str, expected: &'static str) -> BenchError {
    BenchError::Flag(FlagError::BadValue {
        flag: flag.to_string(),
        value: value.to_string(),
        expected,
    })
}

fn main() -> ExitCode {
    let config = match Config::parse(std::env::args().skip(1)) {
        Ok(Some(config)) => config,
        Ok(None) => {
            idempotent_tool::out!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            debug_assert!(e.is_usage(), "parsing flags fails only on flags");
            idempotent_tool::cli::console::usage_error("bench", &e);
            return ExitCode::from(2);
        }
    };
    // The in-process service logs like the real one, but to a file: its
    // cost is paid, and a terminal is not flooded with a line per request.
    let log_dir = match TempDir::new("idem-bench-log") {
        Ok(dir) => dir,
        Err(e) => {
            idempotent_tool::errln!("bench: temp folder: {e}");
            return ExitCode::from(1);
        }
    };
    match std::fs::File::create(log_dir.join("server.log")) {
        Ok(file) => {
            let _ = log::init(Logger::file(Level::Info, config.access_log, file));
        }
        Err(e) => {
            idempotent_tool::errln!("bench: log file: {e}");
            return ExitCode::from(1);
        }
    }
    let outcome = if let Some(check) = config.check {
        check::run_check(&config, check)
    } else if let Some(console) = config.console {
        match console {
            Console::List => loaders::run_list_latency(&config),
            Console::Poll => console_load::run_poll_comparison(&config),
            Console::Writes => loaders::run_write_comparison(&config),
            Console::Bulk => bulk_load::run_bulk_comparison(&config),
        }
    } else if let Some(url) = &config.postgres {
        cluster::run_cluster(&config, url)
    } else if config.sweep {
        loaders::run_sweep(&config)
    } else {
        run_single(&config)
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            idempotent_tool::errln!("bench: an invariant check FAILED (see above)");
            ExitCode::from(1)
        }
        Err(e) => {
            idempotent_tool::errln!("bench: {e}");
            ExitCode::from(1)
        }
    }
}

/// One mode at one concurrency: calibrate the disk, measure over HTTP,
/// calibrate the disk again, then the same load without HTTP; report.
fn run_single(config: &Config) -> Result<bool, BenchError> {
    let temp;
    let (target, calibration_dir) = match &config.base {
        Some(base) => {
            let target = Target {
                authority: authority(base).to_string(),
                db: config.db.clone(),
                in_process: false,
                server_pid: config.server_pid,
                _service: None,
                downstream: None,
                child: None,
            };
            (target, calibration_dir_beside(config.db.as_deref()))
        }
        None => {
            temp = TempDir::new("idem-bench").map_err(BenchError::io("temp folder"))?;
            let db = temp.join("idem.db");
            let target = match &config.server_bin {
                Some(bin) => {
                    let log = temp.join("server.log");
                    spawn_server(bin, &db, &log, config.access_log, config.setup)?
                }
                None => start_with(&db, config.setup, || Ok(()))?,
            };
            (target, temp.path().to_path_buf())
        }
    };
    idempotent_tool::errln!(
        "bench: single-commit calibration in {}",
        calibration_dir.display()
    );
    let before = single_commit_sample(&calibration_dir)?;
    let m = measure(&target, config.mode, config.concurrency, config)?;
    let after = single_commit_sample(&calibration_dir)?;
    let commit_rate = CommitRate::new(before, after);
    // Read before the run without HTTP, whose service also lives in this process.
    let rss = if target.in_process {
        peak_rss_kib(None)
    } else {
        target.server_pid.and_then(|p| peak_rss_kib(Some(p)))
    };
    // The run without HTTP measures acceptance; http-tool measures the workers.
    let no_http = match config.mode {
        // Another build's server would be set beside this build's handler.
        _ if config.server_bin.is_some() => None,
        Mode::HttpTool => None,
        _ => Some(measure_without_http(&calibration_dir, config)?),
    };
    let access = report::AccessLog {
        enabled: (target.in_process || target.child.is_some()).then_some(config.access_log),
        micros_per_line: calibrate::access_log_micros_per_line(&calibration_dir)?,
    };
    let downstream = target.downstream.as_ref().map(|d| &d.gauge);
    let ideal = config.ideal_per_s();
    let no_http = no_http.as_ref();
    if config.json {
        let mut v = report::single_json(&m, config, &target, commit_rate, rss, no_http, access);
        if let (Some(ideal), Some(gauge)) = (ideal, downstream) {
            v["http_tool"] = report::http_tool_json(&m, config, ideal, gauge);
        }
        idempotent_tool::outln!("{v}");
    } else {
        report::print_report(&m, config, &target, commit_rate, rss, no_http, access);
        if let (Some(ideal), Some(gauge)) = (ideal, downstream) {
            report::print_http_tool(&m, config, ideal, gauge);
        }
    }
    Ok(m.ok())
}

/// Calibrate on the server's disk when we know where its database is.
fn calibration_dir_beside(db: Option<&Path>) -> PathBuf {
    db.and_then(Path::parent)
        .filter(|p| !p.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}
