//! The settings a store is opened with and the bounds its callers pass:
//! connection settings and retention (`StoreOptions`), how many due calls one
//! claim may take (`DueLimits`), and when a writer counts as stuck.
//!
//! Plain values only: this file never opens a connection or reads a row.

use super::limits::ToolLimit;
use super::Retention;
use std::path::PathBuf;
use std::time::Duration;

/// A writer with work queued and no batch started or finished for this long
/// is stuck (`/healthz` says so): a batch takes milliseconds, and waiting for
/// another process's lock is bounded by the busy timeout.
pub const WRITER_STUCK_AFTER: Duration = Duration::from_secs(5);

/// How many due calls one claim may take (`claim_due_within`): `total` in
/// all, and of each tool named in `per_tool` no more than its number (zero:
/// none) — a capped tool's free slots in the claiming process. Tools not
/// named are bounded by `total` alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DueLimits {
    pub total: usize,
    pub per_tool: Vec<(String, usize)>,
}

/// Connection settings and how long terminal calls are kept.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// SQLite: how long to wait for another process's lock. PostgreSQL: the
    /// `lock_timeout` of the service's sessions.
    pub busy_timeout: Duration,
    pub retention: Retention,
    /// PostgreSQL: the most connections this process opens (`--db-pool`).
    pub pool_size: usize,
    /// PostgreSQL: trust these roots for TLS instead of the system's
    /// (`--db-ca-file`).
    pub ca_file: Option<PathBuf>,
    /// The tools' `max_concurrency` and `rate`, for the backend to hold those
    /// it shares across processes (`limits`).
    pub limits: Vec<ToolLimit>,
}

/// `--db-pool`'s default: as many connections as a node has workers by
/// default, so a busy node does not queue for connections.
pub const DEFAULT_POOL_SIZE: usize = 16;

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            busy_timeout: Duration::from_secs(5),
            retention: Retention::default(),
            pool_size: DEFAULT_POOL_SIZE,
            ca_file: None,
            limits: Vec::new(),
        }
    }
}
