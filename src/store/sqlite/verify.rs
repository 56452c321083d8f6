//! `verify` on a SQLite file: `PRAGMA integrity_check` first, then the
//! invariants of `store::verify`. It opens the file read-only
//! (`SQLITE_OPEN_READ_ONLY`: it cannot create, write or checkpoint it) and
//! reads everything in one read transaction, so the report is one
//! consistent snapshot. That makes it safe beside a running server: in WAL
//! mode a reader never blocks the writer, and the writer never changes what
//! the reader sees. The one cost is that the server cannot checkpoint the
//! WAL past that snapshot until `verify` ends. A copy on a read-only mount,
//! where SQLite cannot make the `-shm` a database in WAL mode is read
//! through, is opened `immutable` when no `-wal` beside it holds commits
//! (`open_read_only`).
//!
//! This module only reads; it never repairs.

use super::super::verify::{approval_checks, business_key_check, invariant_checks, Spec};
use super::super::verify::{Check, Report, VerifyError, MAX_EXAMPLES};
use rusqlite::{Connection, ErrorCode, OpenFlags};
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// `verify::tools_outside_database` on the file at `path`.
pub(in crate::store) fn tools_outside(
    path: &Path,
    known: &[&str],
) -> Result<Vec<String>, VerifyError> {
    let open_error = |e| VerifyError::Open(path.to_path_buf(), e);
    let conn = open_service_database(path)?;
    let mut statement = conn
        .prepare("SELECT DISTINCT tool FROM calls ORDER BY tool")
        .map_err(open_error)?;
    let tools = statement
        .query_map([], |r| r.get::<_, String>(0))
        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<String>>>())
        .map_err(open_error)?;
    Ok(tools
        .into_iter()
        .filter(|tool| !known.contains(&tool.as_str()))
        .collect())
}

/// Check every invariant on the database at `path`, read-only, in one snapshot.
pub(in crate::store) fn verify(path: &Path, effect_tools: &[&str]) -> Result<Report, VerifyError> {
    let conn = open_service_database(path)?;
    verify_on(&conn, path, effect_tools)
}

/// `verify`, stopped at `deadline`: past it SQLite is interrupted (a check
/// cut short would otherwise read as a violation) and the answer is
/// `TimedOut`. For the service's `GET /v1/verify`, which must not hold a
/// read snapshot (and with it the WAL's checkpoints) longer than it asked.
pub(in crate::store) fn verify_within(
    path: &Path,
    effect_tools: &[&str],
    deadline: Instant,
) -> Result<Report, VerifyError> {
    let conn = open_service_database(path)?;
    let interrupt = conn.get_interrupt_handle();
    let (finished, watch) = mpsc::channel::<()>();
    let report = std::thread::scope(|scope| {
        scope.spawn(move || {
            let left = deadline.saturating_duration_since(Instant::now());
            if let Err(mpsc::RecvTimeoutError::Timeout) = watch.recv_timeout(left) {
                interrupt.interrupt();
            }
        });
        let report = verify_on(&conn, path, effect_tools);
        drop(finished);
        report
    });
    if Instant::now() >= deadline {
        return Err(VerifyError::TimedOut);
    }
    report
}

/// Every count and check on an open connection, in one read transaction.
fn verify_on(conn: &Connection, path: &Path, effect_tools: &[&str]) -> Result<Report, VerifyError> {
    let open_error = |e| VerifyError::Open(path.to_path_buf(), e);
    // One read transaction: every count and check below sees the same commit.
    conn.execute_batch("BEGIN").map_err(open_error)?;
    let tenant = has_column(conn, "calls", "tenant");
    let purged = has_column(conn, "effects", "call_purged_at");
    let mut checks = vec![integrity(conn)];
    let mut specs = invariant_checks(tenant, purged, effect_tools);
    if has_table(conn, "business_keys") {
        specs.push(business_key_check());
    }
    if has_table(conn, "approvals") {
        specs.extend(approval_checks());
    }
    checks.extend(specs.iter().map(|spec| spec.run(conn)));
    let report = Report {
        path: path.to_path_buf(),
        calls: count(conn, "SELECT count(*) FROM calls"),
        by_status: grouped(
            conn,
            "SELECT status, count(*) FROM calls GROUP BY status ORDER BY status",
        ),
        effects: count(conn, "SELECT count(*) FROM effects"),
        audit: if has_table(conn, "audit") {
            grouped(
                conn,
                "SELECT event, count(*) FROM audit GROUP BY event ORDER BY event",
            )
        } else {
            Vec::new()
        },
        tenants: tenant.then(|| count(conn, "SELECT count(DISTINCT tenant) FROM calls")),
        checks,
    };
    Ok(report)
}

/// The file opened read-only, once it is known to hold `calls` and `effects`.
fn open_service_database(path: &Path) -> Result<Connection, VerifyError> {
    let open_error = |e| VerifyError::Open(path.to_path_buf(), e);
    let conn = open_read_only(path)?;
    let tables: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name IN ('calls', 'effects')",
            [],
            |r| r.get(0),
        )
        .map_err(open_error)?;
    if tables != 2 {
        return Err(VerifyError::NotAServiceDatabase(path.to_path_buf()));
    }
    Ok(conn)
}

/// The file opened read-only (it is never created, written or checkpointed),
/// after a first read. A database in WAL mode is read through its `-shm`,
/// which SQLite makes beside it when it is missing; where it cannot (a copy
/// on a read-only mount or in a folder this user may not write) and no
/// `-wal` holds commits the file lacks, the file alone is the whole
/// database, and it is opened `immutable`: no locks, no `-shm`, still
/// read-only. A `-wal` with content there cannot be read without its `-shm`.
fn open_read_only(path: &Path) -> Result<Connection, VerifyError> {
    let open_error = |e| VerifyError::Open(path.to_path_buf(), e);
    // READ_ONLY without CREATE: a wrong path fails instead of making an empty file.
    let conn = Connection::open_with_flags(path, read_only_flags()).map_err(open_error)?;
    // The server may hold a lock for a moment (e.g. while it recovers the WAL).
    conn.busy_timeout(Duration::from_secs(5))
        .map_err(open_error)?;
    match first_read(&conn) {
        Ok(()) => Ok(conn),
        Err(e) if e.sqlite_error_code() == Some(ErrorCode::CannotOpen) => {
            if wal_has_content(path) {
                return Err(VerifyError::WalWithoutShm(path.to_path_buf()));
            }
            let conn = open_immutable(path).map_err(open_error)?;
            first_read(&conn).map_err(open_error)?;
            Ok(conn)
        }
        Err(e) => Err(open_error(e)),
    }
}

fn read_only_flags() -> OpenFlags {
    OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
}

/// The first read, which opens the `-shm` of a database in WAL mode.
fn first_read(conn: &Connection) -> rusqlite::Result<()> {
    conn.query_row("SELECT count(*) FROM sqlite_schema", [], |_| Ok(()))
}

/// Whether a `-wal` beside the file holds anything (commits the file may lack).
fn wal_has_content(path: &Path) -> bool {
    let mut wal = path.as_os_str().to_os_string();
    wal.push("-wal");
    std::fs::metadata(wal).is_ok_and(|m| m.len() > 0)
}

/// `path` as an `immutable=1` URI: SQLite takes no lock and opens no `-shm`
/// or `-wal`, trusting that nothing changes the file while it reads.
fn open_immutable(path: &Path) -> rusqlite::Result<Connection> {
    let uri = format!("file:{}?immutable=1", uri_path(path));
    Connection::open_with_flags(uri, read_only_flags() | OpenFlags::SQLITE_OPEN_URI)
}

/// A path in a `file:` URI: `%`, `?` and `#` (which would end the path) and
/// any byte outside printable ASCII percent-encoded.
fn uri_path(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut encoded = String::new();
    for &byte in absolute.as_os_str().as_bytes() {
        match byte {
            b'%' | b'?' | b'#' => encoded.push_str(&format!("%{byte:02X}")),
            0x21..=0x7e => encoded.push(byte as char),
            _ => encoded.push_str(&format!("%{byte:02X}")),
        }
    }
    encoded
}

/// `PRAGMA integrity_check`: one row `ok`, or one row per problem found.
fn integrity(conn: &Connection) -> Check {
    let rows = rows_of(conn, "PRAGMA integrity_check", |row| {
        row.get::<_, String>(0)
    });
    let problems = match rows {
        Ok(rows) if rows == ["ok"] => Vec::new(),
        Ok(rows) => rows,
        Err(e) => vec![format!("could not run: {e}")],
    };
    Check {
        name: "integrity_check",
        invariant: "SQLite's structure is sound (PRAGMA integrity_check)".into(),
        violations: problems.len(),
        examples: problems.into_iter().take(MAX_EXAMPLES).collect(),
    }
}

impl Spec {
    /// Run the query; a query SQLite cannot run (a corrupt page it needs) is
    /// itself a violation of this invariant: it could not be shown to hold.
    fn run(&self, conn: &Connection) -> Check {
        // A NULL description means NULLs where the schema forbids them.
        let describe = |row: &rusqlite::Row<'_>| {
            let text: Option<String> = row.get(0)?;
            Ok(text.unwrap_or_else(|| "a row with NULL in a NOT NULL column".into()))
        };
        let found = rows_of(conn, &self.sql, describe)
            .unwrap_or_else(|e| vec![format!("could not run the check: {e}")]);
        Check {
            name: self.name,
            invariant: self.invariant.clone(),
            violations: found.len(),
            examples: found.into_iter().take(MAX_EXAMPLES).collect(),
        }
    }
}

fn rows_of<T>(
    conn: &Connection,
    sql: &str,
    map: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<Vec<T>> {
    conn.prepare(sql)?.query_map([], map)?.collect()
}

/// A count for the report; `-1` when SQLite cannot compute it (the checks
/// then say why).
fn count(conn: &Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |r| r.get(0)).unwrap_or(-1)
}

fn grouped(conn: &Connection, sql: &str) -> Vec<(String, i64)> {
    rows_of(conn, sql, |r| {
        Ok((
            r.get::<_, Option<String>>(0)?.unwrap_or_default(),
            r.get(1)?,
        ))
    })
    .unwrap_or_default()
}

fn has_table(conn: &Connection, table: &str) -> bool {
    conn.query_row(
        "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?1",
        [table],
        |r| r.get::<_, i64>(0),
    )
    .is_ok_and(|n| n > 0)
}

fn has_column(conn: &Connection, table: &str, column: &str) -> bool {
    conn.query_row(
        "SELECT count(*) FROM pragma_table_info(?1) WHERE name = ?2",
        [table, column],
        |r| r.get::<_, i64>(0),
    )
    .is_ok_and(|n| n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::temp::TempDb;

    /// A throwaway database with the service's tables, removed on drop.
    fn scratch(name: &str, extra_column: &str) -> (TempDb, Connection) {
        let db = TempDb::new(&format!("verify-unit-{name}"));
        let conn = Connection::open(&db.path).unwrap();
        conn.execute_batch(&format!(
            "CREATE TABLE calls (call_id TEXT PRIMARY KEY, idem_key TEXT NOT NULL,
                    tool TEXT NOT NULL, status TEXT, lease_until REAL, owner TEXT,
                    effect_id TEXT {extra_column});
                 CREATE TABLE effects (effect_id TEXT PRIMARY KEY, call_id TEXT NOT NULL,
                    tool TEXT NOT NULL, amount INTEGER, created_at REAL);"
        ))
        .unwrap();
        (db, conn)
    }

    fn violated(report: &Report) -> Vec<&'static str> {
        report.violated().map(|c| c.name).collect()
    }

    #[test]
    fn clean_rows_pass_and_each_broken_row_is_named() {
        let (db, conn) = scratch("rows", "");
        conn.execute_batch(
            "INSERT INTO calls VALUES ('c1', 'k1', 'charge', 'succeeded', NULL, NULL, 'e1'),
                                      ('c2', 'k2', 'sleep', 'succeeded', NULL, NULL, 'e2'),
                                      ('c3', 'k3', 'charge', 'running', 9e9, 'p:w', 'e3'),
                                      ('c4', 'k4', 'fail', 'failed', NULL, NULL, 'e4');
             INSERT INTO effects VALUES ('e1', 'c1', 'charge', 1, 0);",
        )
        .unwrap();
        let report = verify(&db.path, &crate::tools::EFFECT_TOOLS).unwrap();
        assert!(report.is_clean(), "{report}");
        assert_eq!(report.calls, 4);
        assert!(report.to_string().contains("violations 0"), "{report}");

        conn.execute_batch(
            "INSERT INTO calls VALUES ('c5', 'k1', 'charge', 'pending', NULL, NULL, 'e5'),
                                      ('c6', 'k6', 'charge', 'running', NULL, NULL, 'e6'),
                                      ('c7', 'k7', 'charge', 'done', NULL, NULL, 'e7'),
                                      ('c8', 'k8', 'send_email', 'succeeded', NULL, NULL, 'e8');
             INSERT INTO effects VALUES ('e1b', 'c1', 'charge', 1, 0),
                                        ('e2', 'c2', 'sleep', NULL, 0),
                                        ('e4', 'c4', 'fail', NULL, 0),
                                        ('e9', 'c9', 'charge', 1, 0);",
        )
        .unwrap();
        let report = verify(&db.path, &crate::tools::EFFECT_TOOLS).unwrap();
        assert_eq!(
            violated(&report),
            [
                "duplicate_key",
                "duplicate_effect",
                "effect_without_succeeded_call",
                "effect_not_its_calls",
                "succeeded_without_effect",
                "running_without_lease",
                "unknown_status",
            ],
            "{report}"
        );
        let text = report.to_string();
        assert!(text.contains("key 'k1': 2 calls"), "{text}");
        assert!(
            text.contains("effect e9 of call c9: no such call"),
            "{text}"
        );
        assert!(text.contains("call c8 (send_email"), "{text}");
    }

    #[test]
    fn keys_are_unique_per_tenant_when_tenants_exist() {
        let (db, conn) = scratch("tenant", ", tenant TEXT");
        conn.execute_batch(
            "INSERT INTO calls VALUES ('c1', 'k', 'sleep', 'pending', NULL, NULL, 'e1', 'a'),
                                      ('c2', 'k', 'sleep', 'pending', NULL, NULL, 'e2', 'b');",
        )
        .unwrap();
        let report = verify(&db.path, &crate::tools::EFFECT_TOOLS).unwrap();
        assert!(report.is_clean(), "{report}");
        assert_eq!(report.tenants, Some(2));
        conn.execute_batch(
            "INSERT INTO calls VALUES ('c3', 'k', 'sleep', 'pending', NULL, NULL, 'e3', 'a')",
        )
        .unwrap();
        let report = verify(&db.path, &crate::tools::EFFECT_TOOLS).unwrap();
        assert_eq!(violated(&report), ["duplicate_key"], "{report}");
        assert!(
            report.to_string().contains("tenant 'a' key 'k'"),
            "{report}"
        );
    }

    /// Key retention deletes a call and keeps its effect, marked: that effect
    /// is the ledger of a purged call, not an orphan. An unmarked one still is.
    #[test]
    fn an_effect_whose_call_was_purged_is_no_violation() {
        let (db, conn) = scratch("purged", "");
        conn.execute_batch(
            "ALTER TABLE effects ADD COLUMN call_purged_at REAL;
             INSERT INTO effects VALUES ('e1', 'c1', 'charge', 1, 0, 5.0);",
        )
        .unwrap();
        let report = verify(&db.path, &crate::tools::EFFECT_TOOLS).unwrap();
        assert!(report.is_clean(), "{report}");
        assert!(report.to_string().contains("purged"), "{report}");
        conn.execute_batch("INSERT INTO effects VALUES ('e2', 'c2', 'charge', 1, 0, NULL)")
            .unwrap();
        let report = verify(&db.path, &crate::tools::EFFECT_TOOLS).unwrap();
        assert_eq!(
            violated(&report),
            ["effect_without_succeeded_call"],
            "{report}"
        );
        assert!(report
            .to_string()
            .contains("effect e2 of call c2: no such call"));
        assert!(!report.to_string().contains("effect e1"), "{report}");
    }

    /// On a migrated file, each way an approval row can disagree with its
    /// call is named: a waiting call that ran, a denied one with an effect,
    /// a waiting call without an open request, an open request of a call
    /// that moved on, and a request without its call.
    #[test]
    fn approval_rows_that_disagree_are_named() {
        let db = TempDb::new("verify-unit-approvals");
        let conn = Connection::open(&db.path).unwrap();
        super::super::schema::migrate(&conn).unwrap();
        let call = |id: &str, status: &str, attempt: i64| {
            format!(
                "INSERT INTO calls (call_id, tenant, idem_key, fingerprint, tool, args_json, status,
                                    attempt, created_at, updated_at)
                 VALUES ('{id}', 't', '{id}', 'fp', 'charge', '{{}}', '{status}', {attempt}, 0, 0);"
            )
        };
        let request = |id: &str, decision: &str| {
            format!(
                "INSERT INTO approvals (call_id, tenant, tool, fingerprint, approvers, requested_at,
                                        expires_at, decision)
                 VALUES ('{id}', 't', 'charge', 'fp', 'people', 0, 1, {decision});"
            )
        };
        let ok = [
            call("c1", "awaiting_approval", 0),
            request("c1", "NULL"),
            call("c2", "denied", 0),
            request("c2", "'denied'"),
        ]
        .concat();
        conn.execute_batch(&ok).unwrap();
        let report = verify(&db.path, &crate::tools::EFFECT_TOOLS).unwrap();
        assert!(report.is_clean(), "{report}");
        let bad = [
            call("c3", "awaiting_approval", 1),
            request("c3", "NULL"),
            call("c4", "denied", 0),
            request("c4", "'denied'"),
            "INSERT INTO effects (effect_id, call_id, tool, created_at) VALUES ('e4', 'c4', 'charge', 0);".into(),
            call("c5", "awaiting_approval", 0),
            call("c6", "pending", 0),
            request("c6", "NULL"),
            request("c7", "'approved'"),
        ]
        .concat();
        conn.execute_batch(&bad).unwrap();
        let report = verify(&db.path, &crate::tools::EFFECT_TOOLS).unwrap();
        let names = violated(&report);
        for name in ["awaiting_holds_nothing", "denied_ran", "approval_agrees"] {
            assert!(names.contains(&name), "{name}: {report}");
        }
        let text = report.to_string();
        assert!(
            text.contains("call c5 is 'awaiting_approval', its request missing"),
            "{text}"
        );
        assert!(
            text.contains("call c6 is 'pending', its request open"),
            "{text}"
        );
        assert!(
            text.contains("approval request of call c7: no such call"),
            "{text}"
        );
    }

    #[test]
    fn a_missing_file_or_a_foreign_database_cannot_be_verified() {
        let missing = std::env::temp_dir().join("verify-unit-no-such-file.db");
        assert!(matches!(
            verify(&missing, &crate::tools::EFFECT_TOOLS),
            Err(VerifyError::Open(..))
        ));
        assert!(!missing.exists(), "verify must never create the file");
        let (db, conn) = scratch("foreign", "");
        conn.execute_batch("DROP TABLE effects").unwrap();
        assert!(matches!(
            verify(&db.path, &crate::tools::EFFECT_TOOLS),
            Err(VerifyError::NotAServiceDatabase(_))
        ));
    }
}
