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

use idempotent_tool::app::Service;
use idempotent_tool::client::{authority, Connection};
use idempotent_tool::config::Config as ServiceConfig;
use idempotent_tool::fingerprint::{canonical, fingerprint, hex_sha256};
use idempotent_tool::http::{Request, Version};
use idempotent_tool::server::Handler;
use idempotent_tool::store::{effect_id_for, now, WriterStats};
use rusqlite::{params, OpenFlags};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

const USAGE: &str = "\
usage: bench [options]

  --base URL           load a running server (default: start one in-process on
                       a temp database and a free port)
  --db PATH            with --base: the server's database, for invariant checks
  --server-pid PID     with --base: read the server's peak RSS from /proc/PID
  --mode MODE          distinct (default): a new key per request, charge 1;
                       same-key: every request one key;
                       mixed: 40% charge, 10% send_email, 10% sleep 0.01 s,
                       10% fail once, 30% same-key retries of earlier calls
  --n N                requests per run (default 300)
  --concurrency N      client threads, one connection each (default 20)
  --duration SECS      run for this long instead of --n requests
  --keep-alive         reuse each thread's connection (default)
  --new-connection     open a connection per request, like the seed's urllib
  --drain-timeout SECS how long to wait for accepted calls to finish (default 60)
  --sweep              concurrency 1, 4, 16, 64, 256, then a fresh empty database
                       and one of 1,000,000 calls, alternately, twice;
                       --duration per point (default 3 s); in-process only
  --json               print one JSON object instead of the text report
  --help               print this help
";

/// Timeout for connecting and for each read and write of a request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the single-commit calibration runs.
const COMMIT_CALIBRATION: Duration = Duration::from_millis(1500);
const SWEEP_CONCURRENCY: [usize; 5] = [1, 4, 16, 64, 256];
const PREFILL_CALLS: u64 = 1_000_000;

const CHARGE: &[u8] = br#"{"tool":"charge","args":{"amount":1}}"#;
const EMAIL: &[u8] = br#"{"tool":"send_email","args":{"to":"bench@example.com"}}"#;
const SLEEP: &[u8] = br#"{"tool":"sleep","args":{"seconds":0.01}}"#;
const FAIL_ONCE: &[u8] = br#"{"tool":"fail","args":{"retryable":true,"fail_times":1}}"#;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Distinct,
    SameKey,
    Mixed,
    /// `GET /healthz`: the HTTP-only calibration.
    Healthz,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Distinct => "distinct",
            Mode::SameKey => "same-key",
            Mode::Mixed => "mixed",
            Mode::Healthz => "healthz",
        }
    }
}

/// When a load run stops issuing requests.
#[derive(Debug, Clone, Copy)]
enum Stop {
    Count(u64),
    After(Duration),
}

/// What the command line asked for.
#[derive(Debug)]
struct Config {
    base: Option<String>,
    db: Option<PathBuf>,
    server_pid: Option<u32>,
    mode: Mode,
    stop: Stop,
    concurrency: usize,
    keep_alive: bool,
    drain_timeout: Duration,
    sweep: bool,
    json: bool,
}

impl Config {
    /// `Ok(None)` means `--help`.
    fn parse(args: impl IntoIterator<Item = String>) -> Result<Option<Config>, String> {
        let mut c = Config {
            base: None,
            db: None,
            server_pid: None,
            mode: Mode::Distinct,
            stop: Stop::Count(300),
            concurrency: 20,
            keep_alive: true,
            drain_timeout: Duration::from_secs(60),
            sweep: false,
            json: false,
        };
        let mut duration = None;
        let mut args = args.into_iter();
        while let Some(flag) = args.next() {
            let mut value = || args.next().ok_or(format!("{flag} needs a value"));
            match flag.as_str() {
                "--help" | "-h" => return Ok(None),
                "--base" => c.base = Some(value()?),
                "--db" => c.db = Some(PathBuf::from(value()?)),
                "--server-pid" => c.server_pid = Some(number(&flag, &value()?)? as u32),
                "--mode" => {
                    c.mode = match value()?.as_str() {
                        "distinct" => Mode::Distinct,
                        "same-key" => Mode::SameKey,
                        "mixed" => Mode::Mixed,
                        other => return Err(format!("unknown mode {other:?}")),
                    }
                }
                "--n" => c.stop = Stop::Count(number(&flag, &value()?)?),
                "--concurrency" => c.concurrency = number(&flag, &value()?)? as usize,
                "--duration" => duration = Some(seconds(&flag, &value()?)?),
                "--keep-alive" => c.keep_alive = true,
                "--new-connection" => c.keep_alive = false,
                "--drain-timeout" => c.drain_timeout = seconds(&flag, &value()?)?,
                "--sweep" => c.sweep = true,
                "--json" => c.json = true,
                other => return Err(format!("unknown flag {other:?}")),
            }
        }
        if let Some(d) = duration {
            c.stop = Stop::After(d);
        } else if c.sweep {
            c.stop = Stop::After(Duration::from_secs(3));
        }
        if c.sweep && c.base.is_some() {
            return Err("--sweep starts its own servers; it cannot use --base".into());
        }
        if c.concurrency > 4096 {
            return Err("--concurrency must be at most 4096".into());
        }
        Ok(Some(c))
    }
}

fn number(flag: &str, value: &str) -> Result<u64, String> {
    value
        .parse::<u64>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or(format!("{flag} must be a positive integer, not {value:?}"))
}

fn seconds(flag: &str, value: &str) -> Result<Duration, String> {
    value
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0 && *s <= 86_400.0)
        .map(Duration::from_secs_f64)
        .ok_or(format!(
            "{flag} must be a number of seconds above 0, not {value:?}"
        ))
}

fn main() -> ExitCode {
    let config = match Config::parse(std::env::args().skip(1)) {
        Ok(Some(config)) => config,
        Ok(None) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("bench: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let outcome = if config.sweep {
        run_sweep(&config)
    } else {
        run_single(&config)
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("bench: an invariant check FAILED (see above)");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("bench: {e}");
            ExitCode::from(1)
        }
    }
}

/// A unique folder under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<TempDir, String> {
        TempDir::new_in(&std::env::temp_dir())
    }

    fn new_in(parent: &Path) -> Result<TempDir, String> {
        let dir = parent.join(format!("idem-bench-{}", run_id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(TempDir(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Unique per run, so keys never collide with an earlier run's on the same server.
fn run_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{}-{:x}-{n}", std::process::id(), (now() * 1e6) as u64)
}

/// The server under load, and what we may inspect of it.
struct Target {
    authority: String,
    /// The database file, when known: invariants are then checked in SQL.
    db: Option<PathBuf>,
    /// Whether the server runs in this process (its RSS is ours).
    in_process: bool,
    server_pid: Option<u32>,
    /// The in-process service, stopped (every thread joined) when the target
    /// is dropped, before the next measurement starts.
    _service: Option<Service>,
}

/// Start the service in this process on `db`, a free port, default settings.
/// `fill` runs after the schema exists and before the first request.
fn start_in_process(
    db: &Path,
    fill: impl FnOnce() -> Result<(), String>,
) -> Result<Target, String> {
    let config = ServiceConfig {
        port: 0,
        db: db.to_path_buf(),
        ..ServiceConfig::default()
    };
    let service = Service::start(config).map_err(|e| e.to_string())?;
    fill()?;
    Ok(Target {
        authority: service.addr().to_string(),
        db: Some(db.to_path_buf()),
        in_process: true,
        server_pid: None,
        _service: Some(service),
    })
}

// ---------------------------------------------------------------- load

/// Where a load run's requests go.
#[derive(Clone, Copy)]
enum Via<'a> {
    /// Over TCP to this `host:port`, through the whole HTTP stack.
    Http(&'a str),
    /// Straight into a service's request handler in this process: no sockets,
    /// no parsing, no serializing. What is left is the service's own work
    /// (fingerprint, store, runner), so this rate is the ceiling for HTTP.
    Direct(&'a Handler),
}

/// One load run's parameters.
struct Load<'a> {
    via: Via<'a>,
    mode: Mode,
    concurrency: usize,
    keep_alive: bool,
    stop: Stop,
    /// Prefix of this run's idempotency keys.
    prefix: String,
}

/// What a load run saw (or one of its client threads, before the merge).
#[derive(Default)]
struct LoadResult {
    wall: Duration,
    /// Sorted once merged.
    latencies_us: Vec<u32>,
    codes: BTreeMap<u16, u64>,
    status0: u64,
}

impl LoadResult {
    fn requests(&self) -> u64 {
        self.latencies_us.len() as u64
    }
    fn rps(&self) -> f64 {
        self.requests() as f64 / self.wall.as_secs_f64().max(1e-9)
    }
    fn accepted(&self) -> u64 {
        self.codes.range(200..300).map(|(_, n)| n).sum()
    }
    fn accepted_per_s(&self) -> f64 {
        self.accepted() as f64 / self.wall.as_secs_f64().max(1e-9)
    }
    /// The responses by status code, keyed by its text (for JSON).
    fn codes_by_name(&self) -> BTreeMap<String, u64> {
        self.codes
            .iter()
            .map(|(c, n)| (c.to_string(), *n))
            .collect()
    }
    /// The latency at quantile `q` (0..=1), in milliseconds.
    fn ms(&self, q: f64) -> f64 {
        quantile_ms(&self.latencies_us, q)
    }
}

/// The `q` quantile of sorted latencies in microseconds, in milliseconds (0 if none).
fn quantile_ms(sorted_us: &[u32], q: f64) -> f64 {
    let n = sorted_us.len();
    if n == 0 {
        return 0.0;
    }
    let i = ((q * n as f64).ceil() as usize).clamp(1, n) - 1;
    f64::from(sorted_us[i]) / 1000.0
}

/// Run `load.concurrency` client threads, released together by a barrier.
fn run_load(load: &Load) -> LoadResult {
    let next = AtomicU64::new(0);
    let barrier = Barrier::new(load.concurrency + 1);
    std::thread::scope(|scope| {
        let clients: Vec<_> = (0..load.concurrency)
            .map(|i| {
                std::thread::Builder::new()
                    .name(format!("client-{i}"))
                    .spawn_scoped(scope, || client_loop(load, &next, &barrier))
                    .expect("spawn a client thread")
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let tallies: Vec<LoadResult> = clients
            .into_iter()
            .map(|c| c.join().expect("a client thread panicked"))
            .collect();
        let mut merged = LoadResult {
            wall: start.elapsed(),
            ..LoadResult::default()
        };
        for t in tallies {
            merged.latencies_us.extend(t.latencies_us);
            for (code, n) in t.codes {
                *merged.codes.entry(code).or_default() += n;
            }
            merged.status0 += t.status0;
        }
        merged.latencies_us.sort_unstable();
        merged
    })
}

/// One client: take a ticket, send its request, record the latency; until the
/// count or the deadline is reached. Every ticket taken is sent, so the mixed
/// mode's retries always name a key that was (or is being) sent.
fn client_loop(load: &Load, next: &AtomicU64, barrier: &Barrier) -> LoadResult {
    let mut tally = LoadResult::default();
    let mut conn = None;
    let mut key = String::with_capacity(load.prefix.len() + 24);
    barrier.wait();
    let deadline = match load.stop {
        Stop::After(d) => Some(Instant::now() + d),
        Stop::Count(_) => None,
    };
    loop {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        let ticket = next.fetch_add(1, Ordering::Relaxed);
        if matches!(load.stop, Stop::Count(n) if ticket >= n) {
            break;
        }
        let body = request_for(load.mode, ticket, &load.prefix, &mut key);
        let started = Instant::now();
        match send(&mut conn, load, &key, body) {
            Some(status) => *tally.codes.entry(status).or_default() += 1,
            None => tally.status0 += 1,
        }
        let micros = started.elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
        tally.latencies_us.push(micros);
    }
    tally
}

/// Write the ticket's key into `key` and return its body (`None`: `/healthz`).
fn request_for(mode: Mode, ticket: u64, prefix: &str, key: &mut String) -> Option<&'static [u8]> {
    let (key_ticket, body) = match mode {
        Mode::Healthz => return None,
        Mode::Distinct => (Some(ticket), CHARGE),
        Mode::SameKey => (None, CHARGE),
        Mode::Mixed => mixed_request(ticket),
    };
    key.clear();
    // Writing into a String cannot fail.
    let _ = match key_ticket {
        Some(t) => write!(key, "{prefix}-{t}"),
        None => write!(key, "{prefix}-same"),
    };
    Some(body)
}

/// The mixed mode's cycle of ten tickets: four new charges, a send_email, a
/// sleep, a fail-once, two same-key retries of this cycle's first two charges,
/// and a same-key retry of the fail-once ten cycles back (which resets it if it
/// has failed by then, so its attempt 2 succeeds: the attempt distribution shows it).
fn mixed_request(ticket: u64) -> (Option<u64>, &'static [u8]) {
    match ticket % 10 {
        0..=3 => (Some(ticket), CHARGE),
        4 => (Some(ticket), EMAIL),
        5 => (Some(ticket), SLEEP),
        6 => (Some(ticket), FAIL_ONCE),
        7 | 8 => (Some(ticket - 7), CHARGE),
        _ => (
            Some(ticket.checked_sub(103).unwrap_or(ticket - 3)),
            FAIL_ONCE,
        ),
    }
}

/// Send one request, (re)connecting when needed. `None` means no HTTP response.
fn send(conn: &mut Option<Connection>, load: &Load, key: &str, body: Option<&[u8]>) -> Option<u16> {
    let authority = match load.via {
        Via::Http(authority) => authority,
        Via::Direct(handler) => return Some(handler(&direct_request(key, body)).status),
    };
    if conn.is_none() {
        *conn = Connection::open(authority, Some(REQUEST_TIMEOUT)).ok();
    }
    let c = conn.as_mut()?;
    let key_header = [("Idempotency-Key", key)];
    let result = match body {
        Some(body) => c.request("POST", "/v1/tool-calls", &key_header, Some(body)),
        None => c.request("GET", "/healthz", &[], None),
    };
    // An error leaves the stream in an unknown state; the server may also have closed it.
    if !load.keep_alive || result.is_err() || c.is_closed() {
        *conn = None;
    }
    result.ok().map(|r| r.status)
}

/// The request `send` would put on the wire, as the parser would hand it over.
fn direct_request(key: &str, body: Option<&[u8]>) -> Request {
    match body {
        Some(body) => {
            let mut post = parsed_request("POST", "/v1/tool-calls");
            post.headers = vec![
                ("idempotency-key".to_string(), key.to_string()),
                ("content-type".to_string(), "application/json".to_string()),
            ];
            post.body = body.to_vec();
            post
        }
        None => parsed_request("GET", "/healthz"),
    }
}

/// An HTTP/1.1 request without headers or body, as the parser would hand it over.
fn parsed_request(method: &str, path: &str) -> Request {
    Request {
        method: method.to_string(),
        target: path.to_string(),
        path: path.to_string(),
        query: None,
        version: Version::Http11,
        headers: Vec::new(),
        body: Vec::new(),
    }
}

// ---------------------------------------------------------------- server state

/// `GET /stats`.
struct Stats {
    calls: i64,
    effects: i64,
    by_status: BTreeMap<String, i64>,
    attempts: BTreeMap<String, i64>,
    writer: WriterStats,
}

impl Stats {
    fn unfinished(&self) -> i64 {
        ["pending", "running"]
            .iter()
            .filter_map(|s| self.by_status.get(*s))
            .sum()
    }

    fn from_json(v: &Value) -> Stats {
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

fn fetch_stats(authority: &str) -> Result<Stats, String> {
    let mut conn = Connection::open(authority, Some(REQUEST_TIMEOUT))
        .map_err(|e| format!("connect to {authority}: {e}"))?;
    let resp = conn
        .request("GET", "/stats", &[], None)
        .map_err(|e| format!("GET /stats: {e}"))?;
    if resp.status != 200 {
        return Err(format!("GET /stats answered {}", resp.status));
    }
    Ok(Stats::from_json(&resp.json()))
}

/// Poll `/stats` (through `fetch`) until no call is pending or running, or the timeout passes.
/// Returns how long it took, the last snapshot, and whether it drained.
fn wait_for_drain(
    mut fetch: impl FnMut() -> Result<Stats, String>,
    timeout: Duration,
) -> Result<(Duration, Stats, bool), String> {
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
fn peak_rss_kib(pid: Option<u32>) -> Option<u64> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/status"),
        None => "/proc/self/status".to_string(),
    };
    let status = std::fs::read_to_string(path).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

// ---------------------------------------------------------------- calibration

/// Single-row durable commits per second, measured before and after the load:
/// other tenants of a shared disk move it a lot, and the two show by how much.
/// Also how long one such commit takes: no accepted request can be faster,
/// since each waits for at least one commit.
#[derive(Debug, Clone, Copy)]
struct CommitRate {
    before: f64,
    after: f64,
    p50_ms: f64,
    p99_ms: f64,
}

impl CommitRate {
    fn new(before: CommitSample, after: CommitSample) -> CommitRate {
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

    fn mean(self) -> f64 {
        (self.before + self.after) / 2.0
    }
}

/// One calibration pass: the rate and each commit's latency.
struct CommitSample {
    per_s: f64,
    latencies_us: Vec<u32>,
}

/// One-row durable commits in `dir` for a while, timed one by one: WAL,
/// `synchronous=FULL`, one `INSERT` per transaction. The floor a store without
/// group commit would hit.
fn single_commit_sample(dir: &Path) -> Result<CommitSample, String> {
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
    sample.map_err(|e| format!("single-commit calibration in {}: {e}", dir.display()))
}

/// Fill `db` (schema already created by the service) with `rows` succeeded
/// `charge` calls and their effects, in big transactions, with one fsync at the end.
fn prefill(db: &Path, rows: u64) -> Result<(), String> {
    let fill = || -> rusqlite::Result<()> {
        let mut conn = rusqlite::Connection::open(db)?;
        conn.execute_batch("PRAGMA synchronous=OFF; PRAGMA cache_size=-65536;")?;
        let args = json!({"amount": 1});
        let args = args.as_object().expect("a JSON object");
        let (fp, args_json) = (fingerprint("charge", args), canonical(&json!(args)));
        let (prefix, ts) = (format!("prefill-{}", run_id()), now());
        for first in (0..rows).step_by(100_000) {
            let tx = conn.transaction()?;
            {
                let mut call = tx.prepare(
                    "INSERT INTO calls (call_id, idem_key, fingerprint, tool, args_json, status,
                                        result_json, attempt, effect_id, created_at, updated_at)
                     VALUES (?1, ?2, ?3, 'charge', ?4, 'succeeded', ?5, 1, ?6, ?7, ?7)",
                )?;
                let mut effect = tx.prepare(
                    "INSERT INTO effects (effect_id, call_id, tool, amount, created_at)
                     VALUES (?1, ?2, 'charge', 1, ?3)",
                )?;
                for i in first..(first + 100_000).min(rows) {
                    let key = format!("{prefix}-{i}");
                    let call_id = format!("c_{}", &hex_sha256(key.as_bytes())[..16]);
                    let effect_id = effect_id_for(&call_id);
                    let result = json!({"charged": 1, "effect_id": effect_id}).to_string();
                    call.execute(params![call_id, key, fp, args_json, result, effect_id, ts])?;
                    effect.execute(params![effect_id, call_id, ts])?;
                }
            }
            tx.commit()?;
        }
        conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
    };
    fill().map_err(|e| format!("prefill {}: {e}", db.display()))?;
    // The pre-fill's dirty pages must reach the disk now, not during the
    // measurement, where their write-back would compete with its fsyncs.
    let file = std::fs::File::open(db).map_err(|e| format!("{}: {e}", db.display()))?;
    file.sync_all()
        .map_err(|e| format!("sync {}: {e}", db.display()))
}

// ---------------------------------------------------------------- invariants

/// One named check and whether it held.
struct Check {
    name: String,
    ok: bool,
}

fn check(name: impl Into<String>, ok: bool) -> Check {
    Check {
        name: name.into(),
        ok,
    }
}

/// The invariants after a run: in SQL on the database file when we know it,
/// else from `/stats`; plus what the mode promises about the calls it added.
fn check_invariants(
    target: &Target,
    mode: Mode,
    load: &LoadResult,
    before: &Stats,
    after: &Stats,
    drained: bool,
) -> Vec<Check> {
    let mut checks = vec![check("drained before the deadline", drained)];
    match &target.db {
        Some(db) => checks.extend(sql_checks(db).unwrap_or_else(|e| vec![check(e, false)])),
        None => checks.push(check(
            "effects <= calls (/stats)",
            after.effects <= after.calls,
        )),
    }
    let (calls, effects) = (after.calls - before.calls, after.effects - before.effects);
    let accepted = load.accepted() as i64;
    match mode {
        Mode::SameKey if accepted > 0 => {
            checks.push(check(
                format!("same-key: calls=1 effects=1 (got {calls}, {effects})"),
                calls == 1 && effects == 1,
            ));
        }
        Mode::Distinct => {
            let upper = accepted + load.status0 as i64;
            checks.push(check(
                format!(
                    "distinct: calls = accepted ({calls} vs {accepted}, +{} status0)",
                    load.status0
                ),
                accepted <= calls && calls <= upper,
            ));
            if drained {
                checks.push(check(
                    format!("distinct: one effect per call ({effects} vs {calls})"),
                    effects == calls,
                ));
            }
        }
        Mode::Mixed => {
            // Slots 0..=6 of every ten tickets carry a new key; every ticket is sent.
            let sent = load.requests() as i64;
            let new_keys = sent / 10 * 7 + (sent % 10).min(7);
            let all_answered = load.accepted() == load.requests();
            let ok = calls <= new_keys && (calls == new_keys || !all_answered);
            checks.push(check(
                format!("mixed: calls = new keys ({calls} vs {new_keys})"),
                ok,
            ));
        }
        _ => {}
    }
    checks
}

fn sql_checks(db: &Path) -> Result<Vec<Check>, String> {
    let conn = rusqlite::Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|e| format!("open {} read-only: {e}", db.display()))?;
    let empty = |sql: &str| -> Result<bool, String> {
        let mut stmt = conn.prepare(sql).map_err(|e| e.to_string())?;
        let mut rows = stmt.query([]).map_err(|e| e.to_string())?;
        Ok(rows.next().map_err(|e| e.to_string())?.is_none())
    };
    let count = |table: &str| -> Result<i64, String> {
        conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
            .map_err(|e| e.to_string())
    };
    Ok(vec![
        check(
            "one call per key",
            empty("SELECT idem_key FROM calls GROUP BY idem_key HAVING count(*) > 1")?,
        ),
        check(
            "at most one effect per call",
            empty("SELECT call_id FROM effects GROUP BY call_id HAVING count(*) > 1")?,
        ),
        check("effects <= calls", count("effects")? <= count("calls")?),
    ])
}

// ---------------------------------------------------------------- runs

/// Everything measured for one mode at one concurrency on one server.
struct Measurement {
    mode: Mode,
    concurrency: usize,
    healthz: LoadResult,
    load: LoadResult,
    before: Stats,
    after: Stats,
    /// From the end of the load until no call was pending or running.
    drain: Duration,
    checks: Vec<Check>,
}

impl Measurement {
    /// Calls added by this run that reached a terminal state.
    fn completed(&self) -> i64 {
        self.after.calls - self.before.calls - self.after.unfinished()
    }
    /// Completions per second over the load and the drain together.
    fn completed_per_s(&self) -> f64 {
        self.completed() as f64 / (self.load.wall + self.drain).as_secs_f64().max(1e-9)
    }
    fn ok(&self) -> bool {
        self.checks.iter().all(|c| c.ok)
    }
    fn rps_x(&self) -> f64 {
        ratio(self.load.rps(), self.healthz.rps())
    }
    fn accepted_x(&self) -> f64 {
        ratio(self.load.accepted_per_s(), self.healthz.rps())
    }
    fn p99_x(&self) -> f64 {
        ratio(self.load.ms(0.99), self.healthz.ms(0.99))
    }
    /// The writer's work over the load and the drain.
    fn writer(&self) -> WriterStats {
        self.after.writer.since(self.before.writer)
    }
    fn completed_x(&self, single_commit: CommitRate) -> f64 {
        ratio(self.completed_per_s(), single_commit.mean())
    }
    /// The attempts histogram of the calls this run added (section 12.12.5).
    fn attempts(&self) -> BTreeMap<String, i64> {
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
fn measure(
    target: &Target,
    mode: Mode,
    concurrency: usize,
    config: &Config,
) -> Result<Measurement, String> {
    let plan = |mode| Load {
        via: Via::Http(&target.authority),
        mode,
        concurrency,
        keep_alive: config.keep_alive,
        stop: config.stop,
        prefix: format!("bench-{}", run_id()),
    };
    eprintln!("bench: concurrency {concurrency}: GET /healthz calibration");
    let healthz = run_load(&plan(Mode::Healthz));
    let before = fetch_stats(&target.authority)?;
    eprintln!(
        "bench: concurrency {concurrency}: {} load ({} calls already)",
        mode.name(),
        before.calls
    );
    let load = run_load(&plan(mode));
    let (drain, after, drained) =
        wait_for_drain(|| fetch_stats(&target.authority), config.drain_timeout)?;
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
    })
}

/// The same load sent straight into the handler of a fresh service on a fresh
/// database in `dir` (see `Via::Direct`), then drained. Its accepted rate is
/// what the service could reach if HTTP cost nothing: a target above it cannot
/// be reached by work on the HTTP side.
fn measure_without_http(dir: &Path, config: &Config) -> Result<LoadResult, String> {
    let dir = TempDir::new_in(dir)?;
    let service = ServiceConfig {
        port: 0,
        db: dir.0.join("no-http.db"),
        ..ServiceConfig::default()
    };
    let service = Service::start(service).map_err(|e| e.to_string())?;
    let handler = service.handler();
    eprintln!("bench: the same load without HTTP, straight into a fresh service's handler");
    let load = run_load(&Load {
        via: Via::Direct(&handler),
        mode: config.mode,
        concurrency: config.concurrency,
        keep_alive: true,
        stop: config.stop,
        prefix: format!("bench-{}", run_id()),
    });
    let stats_request = parsed_request("GET", "/stats");
    let fetch = || {
        let body = handler(&stats_request).body;
        let stats = serde_json::from_slice(&body).map_err(|e| format!("GET /stats: {e}"))?;
        Ok(Stats::from_json(&stats))
    };
    wait_for_drain(fetch, config.drain_timeout)?;
    Ok(load)
}

fn run_single(config: &Config) -> Result<bool, String> {
    let temp;
    let (target, calibration_dir) = match &config.base {
        Some(base) => {
            let target = Target {
                authority: authority(base).to_string(),
                db: config.db.clone(),
                in_process: false,
                server_pid: config.server_pid,
                _service: None,
            };
            // Calibrate on the server's disk when we know where its database is.
            let dir = config
                .db
                .as_ref()
                .and_then(|db| db.parent())
                .filter(|p| !p.as_os_str().is_empty());
            (
                target,
                dir.map(Path::to_path_buf)
                    .unwrap_or_else(|| PathBuf::from(".")),
            )
        }
        None => {
            temp = TempDir::new()?;
            let db = temp.0.join("idem.db");
            (start_in_process(&db, || Ok(()))?, temp.0.clone())
        }
    };
    eprintln!(
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
    let no_http = measure_without_http(&calibration_dir, config)?;
    if config.json {
        let mut v = measurement_json(&m, commit_rate);
        v["no_http"] = json!({
            "n": no_http.requests(), "http": no_http.codes_by_name(), "accepted_per_s": no_http.accepted_per_s(),
            "accepted_x_healthz": ratio(no_http.accepted_per_s(), m.healthz.rps()),
            "p50_ms": no_http.ms(0.50), "p99_ms": no_http.ms(0.99),
        });
        v["stop"] = json!(stop_text(config.stop));
        v["keep_alive"] = json!(config.keep_alive);
        v["server"] = json!(if target.in_process {
            "in-process"
        } else {
            "base"
        });
        v["peak_rss_kib"] = json!(rss);
        println!("{v}");
    } else {
        print_report(&m, config, &target, commit_rate, rss, &no_http);
    }
    Ok(m.ok())
}

fn run_sweep(config: &Config) -> Result<bool, String> {
    let dir = TempDir::new()?;
    eprintln!("bench: single-commit calibration in {}", dir.0.display());
    let before = single_commit_sample(&dir.0)?;
    let empty = start_in_process(&dir.0.join("sweep.db"), || Ok(()))?;
    let reference = config.concurrency;
    let mut points = vec![measure(&empty, config.mode, reference, config)?];
    for c in SWEEP_CONCURRENCY.into_iter().filter(|c| *c != reference) {
        points.push(measure(&empty, config.mode, c, config)?);
    }
    let filled_db = dir.0.join("filled.db");
    eprintln!("bench: pre-filling {PREFILL_CALLS} succeeded calls");
    let started = Instant::now();
    let filled = start_in_process(&filled_db, || prefill(&filled_db, PREFILL_CALLS))?;
    eprintln!(
        "bench: pre-filled in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    let data_ratio = compare_with_empty(&filled, &dir.0, config, &mut points)?;
    let after = single_commit_sample(&dir.0)?;
    let commit_rate = CommitRate::new(before, after);
    let status0_256 = points
        .iter()
        .find(|p| p.concurrency == 256)
        .map(|p| p.load.status0);
    if config.json {
        let v = json!({
            "sweep": points.iter().map(|p| measurement_json(p, commit_rate)).collect::<Vec<_>>(),
            "stop": stop_text(config.stop),
            "keep_alive": config.keep_alive,
            "single_commit_per_s": commit_rate.mean(),
            "single_commit_before_after": [commit_rate.before, commit_rate.after],
            "single_commit_p50_ms": commit_rate.p50_ms,
            "single_commit_p99_ms": commit_rate.p99_ms,
            "rps_filled_over_empty": data_ratio,
            "status0_at_256": status0_256,
            "peak_rss_kib": peak_rss_kib(None),
        });
        println!("{v}");
    } else {
        print_sweep(&points, config, commit_rate, data_ratio);
    }
    Ok(points.iter().all(Measurement::ok))
}

/// How many empty/filled pairs the data comparison alternates.
const DATA_PAIRS: usize = 2;

/// The rate with a million calls over the rate on a fresh empty database,
/// measured alternately in adjacent pairs: the shared disk's speed drifts by
/// 2x within minutes, and the pre-fill alone takes a minute, so comparing with
/// the sweep's first point would measure the disk as much as the data.
fn compare_with_empty(
    filled: &Target,
    dir: &Path,
    config: &Config,
    points: &mut Vec<Measurement>,
) -> Result<f64, String> {
    let empty = start_in_process(&dir.join("empty.db"), || Ok(()))?;
    let (mut empty_rps, mut filled_rps) = (0.0, 0.0);
    for _ in 0..DATA_PAIRS {
        for (target, sum) in [(&empty, &mut empty_rps), (filled, &mut filled_rps)] {
            let m = measure(target, config.mode, config.concurrency, config)?;
            *sum += m.load.rps();
            points.push(m);
        }
    }
    Ok(filled_rps / empty_rps.max(1e-9))
}

// ---------------------------------------------------------------- reports

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

fn ratio(value: f64, base: f64) -> f64 {
    value / base.max(1e-9)
}

fn print_commit_rate(c: CommitRate) {
    let (mean, before, after) = (c.mean(), c.before, c.after);
    print!("calibration: single-commit={mean:.1}/s (before {before:.1}, after {after:.1})");
    println!("  one commit p50={:.2}ms p99={:.2}ms", c.p50_ms, c.p99_ms);
}

/// Where the server's single writer spent the run: how many operations each
/// commit carried, and running them versus committing them.
fn print_writer(w: WriterStats) {
    if w.batches == 0 {
        return println!("writer: - (the server reports no writer counters)");
    }
    let busy = (w.run_us + w.commit_us).max(1) as f64;
    println!(
        "writer: batches={}  ops/batch={:.1}  run={:.1}us/op  commit={:.2}ms/batch ({:.0}% of its busy time)",
        w.batches,
        w.ops_per_batch(),
        w.run_us_per_op(),
        w.commit_ms_per_batch(),
        100.0 * w.commit_us as f64 / busy
    );
}

fn print_report(
    m: &Measurement,
    config: &Config,
    target: &Target,
    commit: CommitRate,
    rss: Option<u64>,
    no_http: &LoadResult,
) {
    let (l, h) = (&m.load, &m.healthz);
    let server = match target.in_process {
        true => format!("in-process@{}", target.authority),
        false => target.authority.clone(),
    };
    let conns = connections_text(config.keep_alive);
    let stop = stop_text(config.stop);
    println!(
        "mode={} concurrency={} {conns} {stop} server={server}",
        m.mode.name(),
        m.concurrency
    );
    let wall = l.wall.as_secs_f64();
    println!(
        "n={}  wall={wall:.3}s  rps={:.1} ({:.2}x healthz)",
        l.requests(),
        l.rps(),
        m.rps_x()
    );
    let (p50, p95, p99, max) = (l.ms(0.50), l.ms(0.95), l.ms(0.99), l.ms(1.0));
    let p99_x = m.p99_x();
    println!(
        "p50={p50:.2}ms  p95={p95:.2}ms  p99={p99:.2}ms ({p99_x:.1}x healthz)  max={max:.2}ms"
    );
    let codes: Vec<String> = l
        .codes
        .iter()
        .map(|(c, n)| format!("http_{c}={n}"))
        .collect();
    println!("{}  status0={}", codes.join("  "), l.status0);
    let (calls, effects) = (
        m.after.calls - m.before.calls,
        m.after.effects - m.before.effects,
    );
    println!("calls={calls}  effects={effects}");
    let attempts: Vec<String> = m
        .attempts()
        .iter()
        .map(|(a, n)| format!("{a}={n}"))
        .collect();
    println!("attempts: {}", attempts.join(" "));
    print!(
        "accepted/s={:.1} ({:.2}x healthz)  ",
        l.accepted_per_s(),
        m.accepted_x()
    );
    print!("completed/s={:.1} ", m.completed_per_s());
    println!(
        "({:.2}x single-commit)  drain={:.3}s",
        m.completed_x(commit),
        m.drain.as_secs_f64()
    );
    let whose = match target.in_process {
        true => "this process: server and load generator",
        false => "server pid",
    };
    match rss {
        Some(kib) => println!("peak_rss={:.1}MiB ({whose})", kib as f64 / 1024.0),
        None => println!("peak_rss=- (give --server-pid)"),
    }
    print!(
        "calibration: healthz rps={:.1} p99={:.2}ms ",
        h.rps(),
        h.ms(0.99)
    );
    println!("({} requests)", h.requests());
    print_writer(m.writer());
    print_commit_rate(commit);
    print!(
        "without HTTP: accepted/s={:.1} ({:.2}x healthz)  ",
        no_http.accepted_per_s(),
        ratio(no_http.accepted_per_s(), h.rps())
    );
    println!(
        "p50={:.2}ms  p99={:.2}ms  (same load into a fresh service's handler)",
        no_http.ms(0.50),
        no_http.ms(0.99)
    );
    print_targets(m, commit);
    for c in &m.checks {
        println!("check {}: {}", if c.ok { "ok  " } else { "FAIL" }, c.name);
    }
}

/// The issue's targets, as figures next to their thresholds (not assertions).
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
            println!(
                "target accepted/s >= 0.25x healthz: {acc_x:.2}x {}",
                mark(acc_x >= 0.25)
            );
            println!("target POST p99 <= 5ms: {p99:.2}ms {}", mark(p99 <= 5.0));
            println!(
                "target completed/s >= 1.0x single-commit: {done_x:.2}x {}",
                mark(done_x >= 1.0)
            );
        }
        Mode::SameKey => println!(
            "target same-key rps >= 0.5x healthz: {rps_x:.2}x {}",
            mark(rps_x >= 0.5)
        ),
        _ => {}
    }
}

fn print_sweep(points: &[Measurement], config: &Config, commit: CommitRate, data_ratio: f64) {
    let conns = connections_text(config.keep_alive);
    let stop = stop_text(config.stop);
    let mode = points[0].mode.name();
    println!("sweep: mode={mode} {conns} {stop} per point");
    print_commit_rate(commit);
    print!("conc    calls0       rps  x_hlth   p99ms  x_hlth");
    println!("  hlth_rps  hlth_p99  completed/s  ops/batch  commit_ms  status0  checks");
    for p in points {
        let (l, h) = (&p.load, &p.healthz);
        print!(
            "{:>4} {:>9} {:>9.1} ",
            p.concurrency,
            p.before.calls,
            l.rps()
        );
        print!("{:>7.2} {:>7.2} {:>7.1} ", p.rps_x(), l.ms(0.99), p.p99_x());
        print!(
            "{:>9.1} {:>9.2} {:>12.1} ",
            h.rps(),
            h.ms(0.99),
            p.completed_per_s()
        );
        let w = p.writer();
        print!(
            "{:>10.1} {:>10.2} ",
            w.ops_per_batch(),
            w.commit_ms_per_batch()
        );
        println!("{:>8} {:>7}", l.status0, if p.ok() { "ok" } else { "FAIL" });
    }
    println!(
        "data: rps with {PREFILL_CALLS} calls = {data_ratio:.2}x a fresh empty db, \
         {DATA_PAIRS} adjacent pairs (target >= 0.8)"
    );
    if let Some(kib) = peak_rss_kib(None) {
        let mib = kib as f64 / 1024.0;
        println!("peak_rss={mib:.1}MiB (this process: servers, load generator, pre-fill)");
    }
    for p in points {
        for c in p.checks.iter().filter(|c| !c.ok) {
            let (conc, before) = (p.concurrency, p.before.calls);
            println!(
                "check FAIL (concurrency {conc}, {before} calls before): {}",
                c.name
            );
        }
    }
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
        "writer": {"batches": w.batches, "ops": w.ops, "ops_per_batch": w.ops_per_batch(),
                   "run_us_per_op": w.run_us_per_op(), "commit_ms_per_batch": w.commit_ms_per_batch()},
        "checks": checks, "ok": m.ok(),
    })
}
