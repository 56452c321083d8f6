//! Whether the writer may commit without SQLite's own sync, leaving it to
//! the syncer (`synchronous=NORMAL`), or must let SQLite sync before a
//! commit becomes visible (`synchronous=FULL`).
//!
//! The syncer's read gate only covers this process's readers. Another
//! process on the same file would see our committed-but-unsynced frames
//! without passing it, so while any other instance is registered and not
//! stopped, commits are `FULL`. The check runs inside each batch's
//! `BEGIN IMMEDIATE`, so no other process can register between the check and
//! the commit; and since SQLite refuses to change `synchronous` inside a
//! transaction, a change of mode ends the (still empty) transaction, switches,
//! and begins again. `PRAGMA data_version` moves only when another
//! connection — another process; our readers never write — has committed, so
//! the `instances` table is read again only then. An instance that died
//! without being marked stopped keeps this process on `FULL` (slower, never
//! wrong) until a process on its host marks it.
//!
//! This module never writes a row.

use rusqlite::Connection;

/// The writer connection's current mode, and what the last check saw.
pub(super) struct SyncMode {
    /// The pipeline is allowed at all (a database file with a WAL to sync).
    enabled: bool,
    /// `synchronous=NORMAL` is in effect (the connection starts `FULL`).
    pipelined: bool,
    /// `PRAGMA data_version` at the last look at `instances`.
    seen_version: Option<i64>,
    pid: u32,
    host: String,
}

impl SyncMode {
    pub(super) fn new(enabled: bool) -> SyncMode {
        SyncMode {
            enabled,
            pipelined: false,
            seen_version: None,
            pid: std::process::id(),
            host: super::super::instance::host_name(),
        }
    }

    /// `BEGIN IMMEDIATE` in the mode the registered instances allow,
    /// switching modes (outside any transaction) when they changed.
    pub(super) fn begin(&mut self, conn: &Connection) -> rusqlite::Result<()> {
        loop {
            conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
            let wanted = self.wanted(conn)?;
            if wanted == self.pipelined {
                return Ok(());
            }
            conn.prepare_cached("COMMIT")?.execute([])?;
            conn.execute_batch(if wanted {
                "PRAGMA synchronous=NORMAL"
            } else {
                "PRAGMA synchronous=FULL"
            })?;
            self.pipelined = wanted;
        }
    }

    fn wanted(&mut self, conn: &Connection) -> rusqlite::Result<bool> {
        if !self.enabled {
            return Ok(false);
        }
        let version: i64 = conn
            .prepare_cached("PRAGMA data_version")?
            .query_row([], |r| r.get(0))?;
        if self.seen_version == Some(version) {
            return Ok(self.pipelined);
        }
        // Another process is any live instance not of this pid on this host
        // (so this process's own registration never counts, before or after
        // it commits); a table that cannot be read counts as company.
        let others: i64 = conn
            .prepare_cached(
                "SELECT count(*) FROM instances
                  WHERE stopped_at IS NULL AND NOT (pid = ?1 AND host = ?2)",
            )?
            .query_row(rusqlite::params![self.pid, self.host], |r| r.get(0))
            .unwrap_or(1);
        self.seen_version = Some(version);
        Ok(others == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::super::schema;
    use super::*;
    use crate::store::StoreOptions;
    use crate::temp::TempDir;

    fn synchronous(conn: &Connection) -> i64 {
        conn.query_row("PRAGMA synchronous", [], |r| r.get(0))
            .unwrap()
    }

    fn begin_and_commit(mode: &mut SyncMode, conn: &Connection) -> i64 {
        mode.begin(conn).unwrap();
        let level = synchronous(conn);
        conn.execute_batch("COMMIT").unwrap();
        level
    }

    /// Alone on the file, batches commit `NORMAL` (the syncer syncs); while
    /// another process is registered and not stopped, `FULL`; once it is
    /// marked stopped, `NORMAL` again.
    #[test]
    fn commits_are_full_while_another_process_shares_the_file() {
        const NORMAL: i64 = 1;
        const FULL: i64 = 2;
        let dir = TempDir::new("idem-sync-mode").unwrap();
        let path = dir.join("t.db");
        let conn = schema::open_writer(&path, &StoreOptions::default()).unwrap();
        let mut mode = SyncMode::new(true);
        assert_eq!(begin_and_commit(&mut mode, &conn), NORMAL);

        let other = Connection::open(&path).unwrap();
        other
            .execute(
                "INSERT INTO instances (instance_id, pid, host, started_at, heartbeat_at)
                 VALUES ('i_other', ?1, 'elsewhere', 0, 0)",
                [std::process::id()],
            )
            .unwrap();
        assert_eq!(begin_and_commit(&mut mode, &conn), FULL);
        assert_eq!(begin_and_commit(&mut mode, &conn), FULL);

        other
            .execute(
                "UPDATE instances SET stopped_at = 1 WHERE instance_id = 'i_other'",
                [],
            )
            .unwrap();
        assert_eq!(begin_and_commit(&mut mode, &conn), NORMAL);
    }
}
