//! The server under load: one started in this process on a temp database, or
//! one the caller runs (`--base`), and what the bench may inspect of it; plus
//! the temp folders and run ids that keep runs apart.
//!
//! It starts servers but never loads or measures them, and it never deletes a
//! file it did not create: only a `TempDir` it made is removed.

use idempotent_tool::app::Service;
use idempotent_tool::config::Config as ServiceConfig;
use idempotent_tool::store::now;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Unique per run, so keys never collide with an earlier run's on the same server.
pub fn run_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{}-{:x}-{n}", std::process::id(), (now() * 1e6) as u64)
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
}

/// Start the service in this process on `db`, a free port, default settings.
/// `fill` runs after the schema exists and before the first request.
pub fn start_in_process(
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
