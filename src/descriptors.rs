//! The process's file-descriptor budget. At start-up the soft open-file limit
//! (`RLIMIT_NOFILE`) is raised to the hard limit, and the connection cap is
//! lowered to what the descriptors then allow, so that a flood of connections
//! meets the cap (`503` with `Retry-After`) before it meets the limit — where
//! it would fail deep inside SQLite (`unable to open database file`) or in
//! `accept`.
//!
//! This module owns that arithmetic and the one call that changes the limit.
//! It must never raise the cap the operator asked for, only lower it, and
//! never fail start-up merely because the limit could not be raised.

use crate::store::{Database, MAX_READERS};
use nix::sys::resource::{getrlimit, setrlimit, Resource};
use std::fmt;

/// Descriptors one open connection holds: its socket, and the server's
/// registry handle on it (`server.rs`, which stop uses to end a wait at once).
pub const PER_CONNECTION: u64 = 2;

/// Descriptors the process needs besides its connections and its store:
/// stdin, stdout and stderr; the listener; the signal handler's pipe pair; and a
/// margin for what comes and goes (a connection accepted only to be answered
/// `503`, the stop path's wake-up connection, a `/proc` read, a SQLite
/// temporary file).
pub const BASE: u64 = 3 + 1 + 2 + MARGIN;
const MARGIN: u64 = 16;

/// What a SQLite store holds open: the writer's connection (the database file
/// and its WAL) and the `-shm` file every connection of the process shares;
/// the checkpointer's connection (two) and the syncer's handle on the WAL
/// (one); up to `MAX_READERS` read connections, two each.
pub const SQLITE: u64 = 3 + 2 + 1 + 2 * MAX_READERS as u64;

/// Sockets a PostgreSQL store holds besides its pool: the `pg-listen` and
/// `pg-notify` sessions (`store/postgres/listen.rs`).
pub const POSTGRES_BESIDE_POOL: u64 = 2;

/// What the store opened on `db` may hold at once: SQLite's files, or one
/// socket per pooled PostgreSQL connection (`--db-pool`) and the two wake-up
/// sessions.
pub fn store_descriptors(db: &Database, pool_size: usize) -> u64 {
    match db {
        Database::Sqlite(_) => SQLITE,
        Database::Postgres(_) => pool_size as u64 + POSTGRES_BESIDE_POOL,
    }
}

/// What the descriptors allow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    /// The soft open-file limit in force after raising it.
    pub open_file_limit: u64,
    /// The connection cap to use: the one asked for, or lower.
    pub max_connections: usize,
    /// The cap asked for (`--max-connections`).
    pub asked: usize,
}

impl Budget {
    /// Whether the limit forced a lower cap than the one asked for.
    pub fn lowered(&self) -> bool {
        self.max_connections < self.asked
    }
}

/// The open-file limit leaves no descriptor for a single connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooFewDescriptors {
    pub open_file_limit: u64,
    /// The least limit that leaves room for one connection.
    pub needed: u64,
}

impl fmt::Display for TooFewDescriptors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the open-file limit ({}) leaves no descriptor for connections; \
             it must be at least {} (ulimit -n)",
            self.open_file_limit, self.needed
        )
    }
}

impl std::error::Error for TooFewDescriptors {}

/// Raise the soft open-file limit as far as the hard limit allows and return
/// the soft limit now in force. A hard limit of "unlimited" cannot be the soft
/// limit on Linux (the kernel caps it at `fs.nr_open`), so the second try asks
/// for the kernel's default cap. If both fail, the limit is left as it was.
pub fn raise_open_file_limit() -> u64 {
    match raise_soft_limit_to(u64::MAX).or_else(|_| raise_soft_limit_to(1 << 20)) {
        Ok(limit) => limit,
        Err(e) => {
            crate::errln!("idempotent-tool: cannot raise the open-file limit: {e}");
            getrlimit(Resource::RLIMIT_NOFILE).map_or(u64::MAX, |(soft, _)| soft)
        }
    }
}

/// Raise the soft open-file limit to `wanted` or the hard limit, whichever is
/// lower (never lower it), and return the soft limit now in force.
fn raise_soft_limit_to(wanted: u64) -> nix::Result<u64> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    let target = wanted.min(hard);
    if target <= soft {
        return Ok(soft);
    }
    setrlimit(Resource::RLIMIT_NOFILE, target, hard)?;
    Ok(target)
}

/// The connection cap that `open_file_limit` allows, at most `asked`, beside
/// the `store` descriptors its store holds (`store_descriptors`).
pub fn budget(open_file_limit: u64, asked: usize, store: u64) -> Result<Budget, TooFewDescriptors> {
    let reserved = BASE + store;
    let room = open_file_limit.saturating_sub(reserved) / PER_CONNECTION;
    if room == 0 {
        return Err(TooFewDescriptors {
            open_file_limit,
            needed: reserved + PER_CONNECTION,
        });
    }
    let max_connections = usize::try_from(room).unwrap_or(usize::MAX).min(asked);
    Ok(Budget {
        open_file_limit,
        max_connections,
        asked,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::PgTarget;

    const SQLITE_RESERVED: u64 = BASE + SQLITE;

    #[test]
    fn the_cap_is_lowered_to_what_the_descriptors_allow() {
        let b = budget(256, 1024, SQLITE).unwrap();
        assert_eq!(b.max_connections as u64, (256 - SQLITE_RESERVED) / 2);
        assert!(b.lowered());
        assert!(b.max_connections as u64 * PER_CONNECTION + SQLITE_RESERVED <= 256);
    }

    #[test]
    fn the_cap_asked_for_is_never_raised() {
        let b = budget(1 << 20, 1024, SQLITE).unwrap();
        assert_eq!(b.max_connections, 1024);
        assert!(!b.lowered());
        assert_eq!(budget(u64::MAX, 7, SQLITE).unwrap().max_connections, 7);
    }

    #[test]
    fn a_limit_without_room_for_one_connection_is_refused() {
        assert!(budget(SQLITE_RESERVED + 1, 10, SQLITE).is_err());
        assert_eq!(
            budget(SQLITE_RESERVED + 2, 10, SQLITE)
                .unwrap()
                .max_connections,
            1
        );
        let message = budget(20, 10, SQLITE).unwrap_err().to_string();
        assert!(message.contains("open-file limit (20)"), "{message}");
        let least = (SQLITE_RESERVED + PER_CONNECTION).to_string();
        assert!(message.contains(&format!("at least {least}")), "{message}");
    }

    /// A PostgreSQL store's pool sockets come out of the same limit: a bigger
    /// pool leaves fewer connections, and SQLite's files are not counted.
    #[test]
    fn a_postgres_pool_is_counted_against_the_limit() {
        let pg =
            Database::Postgres(PgTarget::parse("postgres://u:secret@127.0.0.1:5432/idem").unwrap());
        assert_eq!(store_descriptors(&pg, 16), 16 + POSTGRES_BESIDE_POOL);
        let sqlite = Database::Sqlite("idem.db".into());
        assert_eq!(store_descriptors(&sqlite, 16), SQLITE);
        let small = budget(256, 1024, store_descriptors(&pg, 16)).unwrap();
        let large = budget(256, 1024, store_descriptors(&pg, 64)).unwrap();
        assert_eq!(small.max_connections - large.max_connections, 24);
        let reserved = BASE + 64 + POSTGRES_BESIDE_POOL;
        assert_eq!(large.max_connections as u64, (256 - reserved) / 2);
    }
}
