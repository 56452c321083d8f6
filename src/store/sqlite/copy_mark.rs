//! The mark `backup` leaves in every copy, and what a start-up does with it,
//! so that a restored copy cannot silently forget keys.
//!
//! A copy holds every call acknowledged before its snapshot and none of the
//! keys accepted after it: a client that retries one of those after a
//! restore finds no call, and its tool runs a second time. So `backup`
//! writes one row into the copy only, `backup_mark` (the snapshot's time,
//! the file copied, the host), and a service started on a file that holds
//! it refuses (`RestoredCopy`, exit 3) before writing a byte, naming the
//! snapshot and what may run again, until it is started with
//! `--accept-restored-copy` and that snapshot's time: then it records the
//! acceptance in the audit (a row with no call), drops the mark, and logs
//! it. A time that names another snapshot is refused too, so a setting left
//! behind never accepts a later copy.
//!
//! It owns the mark's table and its statements; it never touches another
//! table's rows but the one audit row of an acceptance.

use super::super::audit;
use super::super::error::{Cause, StoreError};
use super::super::instance::host_name;
use rusqlite::{params, Connection, OptionalExtension};
use std::fmt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The mark's table, in a copy only; a live database never has it.
pub(super) const MARK_TABLE: &str = "
CREATE TABLE IF NOT EXISTS backup_mark (
  snapshot_ms  INTEGER NOT NULL,
  source       TEXT NOT NULL,
  host         TEXT NOT NULL
)";

/// A copy `backup` made: every call acknowledged before `snapshot` is in
/// it; keys accepted after it may not be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoredCopy {
    /// The snapshot: milliseconds since the epoch.
    pub snapshot_ms: i64,
    /// The database file that was copied.
    pub source: String,
    /// The host it was copied on.
    pub host: String,
    /// What `--accept-restored-copy` gave, when it named another snapshot.
    pub offered: Option<String>,
}

impl RestoredCopy {
    /// When the snapshot was taken.
    pub fn snapshot_time(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.snapshot_ms.max(0) as u64)
    }

    /// The snapshot's time as `backup` printed it and as
    /// `--accept-restored-copy` takes it (RFC 3339, UTC, milliseconds).
    pub fn snapshot(&self) -> String {
        crate::rfc3339::rfc3339_millis(self.snapshot_time())
    }
}

/// The refusal, one line: what the copy is and what may run again.
impl fmt::Display for RestoredCopy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let snapshot = self.snapshot();
        write!(
            f,
            "it is a restored copy: `backup` made it from {} (host {}), its snapshot at \
             {snapshot}; calls accepted after then are not in it, and a client's retry of one \
             of their keys would run its tool again. Find them (docs/operations.md, \
             \"Restoring a SQLite copy\"), then start once with --accept-restored-copy \
             {snapshot}",
            self.source, self.host
        )?;
        if let Some(offered) = &self.offered {
            write!(
                f,
                " (--accept-restored-copy {offered} names another snapshot)"
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for RestoredCopy {}

/// Mark `copy` as taken at `snapshot` from `source`, unless it already
/// holds a mark (a copy of a copy keeps the first snapshot: it holds
/// nothing newer).
pub(super) fn mark(copy: &Connection, snapshot: SystemTime, source: &Path) -> rusqlite::Result<()> {
    let snapshot_ms = snapshot
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as i64;
    let source = std::path::absolute(source).unwrap_or_else(|_| source.to_path_buf());
    copy.execute_batch(MARK_TABLE)?;
    copy.execute(
        "INSERT INTO backup_mark (snapshot_ms, source, host)
         SELECT ?1, ?2, ?3 WHERE NOT EXISTS (SELECT 1 FROM backup_mark)",
        params![snapshot_ms, source.display().to_string(), host_name()],
    )?;
    Ok(())
}

/// The mark the file holds, if any (read-only).
pub(super) fn find(conn: &Connection) -> rusqlite::Result<Option<RestoredCopy>> {
    let has_table: bool = conn.query_row(
        "SELECT count(*) > 0 FROM sqlite_schema WHERE type = 'table' AND name = 'backup_mark'",
        [],
        |r| r.get(0),
    )?;
    if !has_table {
        return Ok(None);
    }
    conn.query_row(
        "SELECT snapshot_ms, source, host FROM backup_mark ORDER BY snapshot_ms LIMIT 1",
        [],
        |r| {
            Ok(RestoredCopy {
                snapshot_ms: r.get(0)?,
                source: r.get(1)?,
                host: r.get(2)?,
                offered: None,
            })
        },
    )
    .optional()
}

/// At start-up, before anything is written: a marked file is refused
/// unless `accept` names its snapshot; the mark to accept once the schema
/// is current, if there is one.
pub(super) fn refuse_unaccepted(
    conn: &Connection,
    accept: Option<&str>,
) -> Result<Option<RestoredCopy>, StoreError> {
    let Some(mut copy) = find(conn)? else {
        if accept.is_some() {
            crate::log::warn(
                "--accept-restored-copy is set, but the database is not a restored copy: \
                 nothing to accept; remove the setting",
            )
            .event("no_restored_copy")
            .emit();
        }
        return Ok(None);
    };
    match accept.map(str::trim) {
        Some(given) if given == copy.snapshot() => Ok(Some(copy)),
        given => {
            copy.offered = given.map(str::to_string);
            Err(StoreError::Internal(Cause::with_source(
                copy.to_string(),
                copy,
            )))
        }
    }
}

/// Accept a restored copy: the audit records it (a row of no call), the
/// mark goes, in one transaction; then the log says it.
pub(super) fn accept(conn: &Connection, copy: &RestoredCopy) -> rusqlite::Result<()> {
    let tx = rusqlite::Transaction::new_unchecked(conn, rusqlite::TransactionBehavior::Immediate)?;
    let detail = audit::restored_copy_accepted(
        &copy.snapshot(),
        &copy.source,
        &copy.host,
        std::process::id(),
        &host_name(),
    );
    tx.execute(
        "INSERT INTO audit (ts, call_id, attempt, event, detail) VALUES (?1, NULL, NULL, ?2, ?3)",
        params![
            super::super::ids::now(),
            audit::RESTORED_COPY_ACCEPTED,
            detail
        ],
    )?;
    tx.execute_batch("DROP TABLE backup_mark")?;
    tx.commit()?;
    crate::log::warn(
        "started on a restored copy, as --accept-restored-copy allowed: keys accepted after \
         its snapshot are not in it, and a retry of one runs its tool again",
    )
    .event("restored_copy_accepted")
    .time("snapshot", copy.snapshot_time())
    .file("source", Path::new(&copy.source))
    .emit();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::temp::TempDb;

    /// A copy is marked once (a copy of a copy keeps the first snapshot); a
    /// start without the snapshot's time is refused, with it accepted: one
    /// audit row of no call, and the mark gone.
    #[test]
    fn a_marked_copy_is_refused_until_its_snapshot_is_named() {
        let db = TempDb::new("copy-mark-unit");
        let conn = Connection::open(&db.path).unwrap();
        conn.execute_batch(
            "CREATE TABLE audit (id INTEGER PRIMARY KEY, ts REAL NOT NULL, call_id TEXT,
                                 event TEXT NOT NULL, detail TEXT, attempt INTEGER)",
        )
        .unwrap();
        assert_eq!(refuse_unaccepted(&conn, None).unwrap(), None);
        let first = UNIX_EPOCH + Duration::from_millis(1_796_526_825_821);
        mark(&conn, first, Path::new("/srv/idem.db")).unwrap();
        mark(&conn, first + Duration::from_secs(60), Path::new("/x.db")).unwrap();
        let copy = find(&conn).unwrap().expect("a mark");
        assert_eq!(copy.snapshot(), "2026-12-06T03:13:45.821Z");
        assert_eq!(copy.source, "/srv/idem.db");

        for given in [None, Some("2026-12-06T03:13:45.820Z")] {
            let refused = refuse_unaccepted(&conn, given).unwrap_err();
            let said = refused.to_string();
            assert!(
                said.contains("--accept-restored-copy 2026-12-06T03:13:45.821Z"),
                "{said}"
            );
            let source = std::error::Error::source(&refused).expect("the mark");
            assert!(source.downcast_ref::<RestoredCopy>().is_some());
        }
        let accepted = refuse_unaccepted(&conn, Some("2026-12-06T03:13:45.821Z"))
            .unwrap()
            .expect("accepted");
        accept(&conn, &accepted).unwrap();
        assert_eq!(find(&conn).unwrap(), None);
        let (call_id, event): (Option<String>, String) = conn
            .query_row("SELECT call_id, event FROM audit", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .unwrap();
        assert_eq!((call_id, event.as_str()), (None, "restored_copy_accepted"));
    }
}
