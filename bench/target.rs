//! The server under load: one started in this process on a temp database, or
//! one the caller runs (`--base`), and what the bench may inspect of it; plus
//! the temp folders and run ids that keep runs apart. For `--mode http-tool`
//! the in-process service gets one `http` tool, `remote`, pointing at an
//! in-process downstream that answers after a fixed latency.
//!
//! It starts servers but never loads or measures them, and it never deletes a
//! file it did not create: only a `TempDir` it made is removed.

use crate::cpu::Server;
use crate::downstream::LatencyDownstream;
use crate::error::BenchError;
use idempotent_tool::app::Service;
use idempotent_tool::config::Config as ServiceConfig;
use idempotent_tool::store::{now, Database};
use idempotent_tool::tools::ToolRegistry;
use serde_json::json;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The tool `--mode http-tool` posts.
pub const REMOTE_TOOL: &str = "remote";

/// Unique per run, so keys never collide with an earlier run's on the same server.
pub fn run_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{}-{:x}-{n}", std::process::id(), (now() * 1e6) as u64)
}

/// How an in-process service differs from the defaults.
#[derive(Debug, Clone, Copy, Default)]
pub struct Setup {
    /// `--workers`; the service's default when `None`.
    pub workers: Option<usize>,
    /// For `--mode http-tool`: the downstream's latency.
    pub downstream_latency: Option<Duration>,
}

/// The server under load, and what we may inspect of it.
pub struct Target {
    pub authority: String,
    /// The database file, when known: invariants are then checked in SQL.
    pub db: Option<PathBuf>,
    /// Whether the server runs in this process (its RSS is ours).
    pub in_process: bool,
    pub server_pid: Option<u32>,
    /// The in-process service, stopped (every thread joined) when the target
    /// is dropped, before the next measurement starts.
    pub _service: Option<Service>,
    /// `--mode http-tool`'s downstream; declared after the service, so it is
    /// dropped after the service's workers stopped calling it.
    pub downstream: Option<LatencyDownstream>,
    /// `--server-bin`: the server's own process, killed when the target is dropped.
    pub child: Option<ServerProcess>,
}

impl Target {
    /// Where to read what the server spends (`cpu`).
    pub fn cpu_server(&self) -> Server {
        match (self.in_process, self.server_pid) {
            (true, _) => Server::InProcess,
            (false, Some(pid)) => Server::Pid(pid),
            (false, None) => Server::Unknown,
        }
    }
}

/// Start the service in this process on `db`, a free port, default settings.
/// `fill` runs after the schema exists and before the first request.
pub fn start_in_process(
    db: &Path,
    fill: impl FnOnce() -> Result<(), BenchError>,
) -> Result<Target, BenchError> {
    start_with(db, Setup::default(), fill)
}

/// `start_in_process` with `setup`'s workers and downstream.
pub fn start_with(
    db: &Path,
    setup: Setup,
    fill: impl FnOnce() -> Result<(), BenchError>,
) -> Result<Target, BenchError> {
    let (config, downstream) = service_config(db, setup)?;
    let service = Service::start(config)?;
    fill()?;
    Ok(Target {
        authority: service.addr().to_string(),
        db: Some(db.to_path_buf()),
        in_process: true,
        server_pid: None,
        _service: Some(service),
        downstream,
        child: None,
    })
}

/// Start the service in this process on `db` (a SQLite file or a PostgreSQL
/// database), a free port, default settings; `fill` runs after the schema
/// exists and before the first request.
pub fn start_db(
    db: Database,
    fill: impl FnOnce() -> Result<(), BenchError>,
) -> Result<Target, BenchError> {
    let file = match &db {
        Database::Sqlite(path) => Some(path.clone()),
        Database::Postgres(_) => None,
    };
    let config = ServiceConfig {
        port: 0,
        db,
        ..ServiceConfig::default()
    };
    let service = Service::start(config)?;
    fill()?;
    Ok(Target {
        authority: service.addr().to_string(),
        db: file,
        in_process: true,
        server_pid: None,
        _service: Some(service),
        downstream: None,
        child: None,
    })
}

/// The service's settings for `setup`, and the downstream it calls, if any.
pub fn service_config(
    db: &Path,
    setup: Setup,
) -> Result<(ServiceConfig, Option<LatencyDownstream>), BenchError> {
    let mut config = ServiceConfig {
        port: 0,
        db: db.into(),
        ..ServiceConfig::default()
    };
    if let Some(workers) = setup.workers {
        config.runner.workers = workers;
    }
    let Some(latency) = setup.downstream_latency else {
        return Ok((config, None));
    };
    let downstream = LatencyDownstream::start(latency)?;
    let file = json!({"tools": {REMOTE_TOOL: {
        "kind": "http", "url": downstream.url, "timeout_ms": 30_000, "max_attempts": 1
    }}});
    let no_vars = |_: &str| None;
    let tools = ToolRegistry::from_json("bench", &file.to_string(), Path::new("."), &no_vars)
        .map_err(BenchError::Tools)?;
    config.tools = Arc::new(tools);
    Ok((config, Some(downstream)))
}

/// A server binary the bench started (`--server-bin`), on a database in a
/// folder of the bench's: the process is killed and reaped on drop.
pub struct ServerProcess {
    child: Child,
    /// Kept open: the server may write to it again, and a closed pipe
    /// would fail that write.
    stdout: BufReader<ChildStdout>,
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start `bin` (this build's `idempotent-tool`, or another build's, to
/// compare the two with one load generator) on `db` and a free port, with the
/// access log as `access_log` says and `setup`'s workers; its stderr goes to
/// `log`. Returns once it printed where it listens.
pub fn spawn_server(
    bin: &Path,
    db: &Path,
    log: &Path,
    access_log: bool,
    setup: Setup,
) -> Result<Target, BenchError> {
    let stderr = std::fs::File::create(log).map_err(BenchError::io(log.display().to_string()))?;
    let mut command = Command::new(bin);
    command
        .arg("--port")
        .arg("0")
        .arg("--db")
        .arg(db)
        .arg("--access-log")
        .arg(if access_log { "on" } else { "off" })
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr);
    if let Some(workers) = setup.workers {
        command.arg("--workers").arg(workers.to_string());
    }
    let doing = format!("start {}", bin.display());
    let mut child = command.spawn().map_err(BenchError::io(doing.clone()))?;
    let pid = child.id();
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut server = ServerProcess {
        child,
        stdout: BufReader::new(stdout),
    };
    // "idempotent-tool listening on http://127.0.0.1:PORT (…)"
    let mut line = String::new();
    let _ = server.stdout.read_line(&mut line);
    let authority = line
        .split_once("http://")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .map(str::to_string)
        .ok_or_else(|| BenchError::Io {
            doing,
            source: std::io::Error::other(format!(
                "it printed no address ({line:?}); its log: {}",
                log.display()
            )),
        })?;
    Ok(Target {
        authority,
        db: Some(db.to_path_buf()),
        in_process: false,
        server_pid: Some(pid),
        _service: None,
        downstream: None,
        child: Some(server),
    })
}
