//! The settings a store is opened with and the bounds its callers pass:
//! connection settings and retention (`StoreOptions`), how many due calls one
//! claim may take (`DueLimits`), and how long one wait on the database may last
//! (`StoreOptions::db_timeout`, both backends).
//!
//! Plain values only: this file never opens a connection or reads a row.

use super::limits::ToolLimit;
use super::Retention;
use std::path::PathBuf;
use std::time::Duration;

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
    /// PostgreSQL: the client's own deadlines (`--db-timeout-ms`,
    /// `--db-connect-timeout-ms`, `--db-tcp-timeout-ms`).
    pub pg_timeouts: PgTimeouts,
    /// SQLite: the snapshot time of a restored copy to start on anyway
    /// (`--accept-restored-copy`); a copy with another, or none given, is
    /// refused.
    pub accept_restored_copy: Option<String>,
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
            pg_timeouts: PgTimeouts::default(),
            accept_restored_copy: None,
        }
    }
}

/// How long the PostgreSQL client waits, by its own clock. A server that is
/// frozen (every process stopped, a host that hangs, a full disk under the
/// database) still has its kernel acknowledge TCP, so neither keepalive nor
/// `TCP_USER_TIMEOUT` ever fires and the server's own `statement_timeout`
/// never runs: only the client can bound the wait, and it does here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PgTimeouts {
    /// Everything one operation does — waiting for a pooled connection,
    /// connecting, its statements — must end within this, or the operation
    /// is answered `Unavailable` and its connection dropped (never lent
    /// again). Also the sessions' `statement_timeout`. The SQLite backend
    /// reads it too (`StoreOptions::db_timeout`): one flag for both.
    pub operation: Duration,
    /// One attempt to connect to one host (TCP, TLS, start-up,
    /// authentication, the session settings), unless the URL gives
    /// `connect_timeout`; a multi-host URL tries the next host after it.
    pub connect: Duration,
    /// `TCP_USER_TIMEOUT` (unless the URL gives `tcp_user_timeout`), and
    /// keepalive probes from half of it idle: a peer that stops
    /// acknowledging (a host gone, a partition) is dropped by the kernel
    /// within about this.
    pub tcp: Duration,
}

/// `--db-timeout-ms`'s default: a `POST` or `GET` that needs a frozen
/// database is answered `503` within about 4 s (under 5 s).
pub const DEFAULT_PG_OPERATION_TIMEOUT: Duration = Duration::from_secs(4);

impl Default for PgTimeouts {
    fn default() -> Self {
        PgTimeouts {
            operation: DEFAULT_PG_OPERATION_TIMEOUT,
            connect: Duration::from_secs(2),
            tcp: Duration::from_secs(10),
        }
    }
}

impl StoreOptions {
    /// `--db-timeout-ms`: the longest any one wait on the database lasts, on
    /// either backend, by this process's own clock (SQLite: a write's batch,
    /// a read, the health check's fresh read; PostgreSQL: see `PgTimeouts`,
    /// where it is kept beside the client's other deadlines).
    pub fn db_timeout(&self) -> Duration {
        self.pg_timeouts.operation
    }

    /// These options with `db_timeout` set to `within`.
    pub fn with_db_timeout(mut self, within: Duration) -> StoreOptions {
        self.pg_timeouts.operation = within;
        self
    }
}
