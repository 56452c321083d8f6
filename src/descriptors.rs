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

use crate::store::MAX_READERS;
use std::fmt;

/// Descriptors one open connection holds: its socket, and the server's
/// registry handle on it (`server.rs`, which stop uses to end a wait at once).
pub const PER_CONNECTION: u64 = 2;

/// Descriptors the process needs besides its connections: stdin, stdout and
/// stderr; the listener; the signal handler's pipe pair; the writer's SQLite
/// connection (the database file and its WAL) and the `-shm` file every
/// connection of the process shares; the checkpointer's connection (two)
/// and the syncer's handle on the WAL (one); up to `MAX_READERS` read
/// connections, two each; and a margin for what comes and goes (a connection accepted only
/// to be answered `503`, the stop path's wake-up connection, a `/proc` read, a
/// SQLite temporary file).
pub const RESERVED: u64 = 3 + 1 + 2 + 3 + 2 + 1 + 2 * MAX_READERS as u64 + MARGIN;
const MARGIN: u64 = 16;

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
}

impl fmt::Display for TooFewDescriptors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the open-file limit ({}) leaves no descriptor for connections; \
             it must be at least {} (ulimit -n)",
            self.open_file_limit,
            RESERVED + PER_CONNECTION
        )
    }
}

impl std::error::Error for TooFewDescriptors {}

/// Raise the soft open-file limit as far as the hard limit allows and return
/// the soft limit now in force. A hard limit of "unlimited" cannot be the soft
/// limit on Linux (the kernel caps it at `fs.nr_open`), so the second try asks
/// for the kernel's default cap. If both fail, the limit is left as it was.
pub fn raise_open_file_limit() -> u64 {
    let raised =
        rlimit::increase_nofile_limit(u64::MAX).or_else(|_| rlimit::increase_nofile_limit(1 << 20));
    match raised {
        Ok(limit) => limit,
        Err(e) => {
            eprintln!("idempotent-tool: cannot raise the open-file limit: {e}");
            rlimit::Resource::NOFILE
                .get()
                .map_or(u64::MAX, |(soft, _)| soft)
        }
    }
}

/// The connection cap that `open_file_limit` allows, at most `asked`.
pub fn budget(open_file_limit: u64, asked: usize) -> Result<Budget, TooFewDescriptors> {
    let room = open_file_limit.saturating_sub(RESERVED) / PER_CONNECTION;
    if room == 0 {
        return Err(TooFewDescriptors { open_file_limit });
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

    #[test]
    fn the_cap_is_lowered_to_what_the_descriptors_allow() {
        let b = budget(256, 1024).unwrap();
        assert_eq!(b.max_connections as u64, (256 - RESERVED) / 2);
        assert!(b.lowered());
        assert!(b.max_connections as u64 * PER_CONNECTION + RESERVED <= 256);
    }

    #[test]
    fn the_cap_asked_for_is_never_raised() {
        let b = budget(1 << 20, 1024).unwrap();
        assert_eq!(b.max_connections, 1024);
        assert!(!b.lowered());
        assert_eq!(budget(u64::MAX, 7).unwrap().max_connections, 7);
    }

    #[test]
    fn a_limit_without_room_for_one_connection_is_refused() {
        assert!(budget(RESERVED + 1, 10).is_err());
        assert_eq!(budget(RESERVED + 2, 10).unwrap().max_connections, 1);
        let message = budget(20, 10).unwrap_err().to_string();
        assert!(message.contains("open-file limit (20)"), "{message}");
    }
}
