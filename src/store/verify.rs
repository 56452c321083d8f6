//! `idempotent-tool verify --db FILE`: check every invariant the service
//! promises on a database file, and report counts and each violation.
//!
//! The invariants, each with the name a violation is reported under:
//!
//! | Invariant | Violation |
//! |---|---|
//! | SQLite's own structure is sound (`PRAGMA integrity_check`) | `integrity_check` |
//! | one call per `Idempotency-Key` (per tenant, when `calls` has a `tenant` column) | `duplicate_key` |
//! | at most one effect per call | `duplicate_effect` |
//! | every effect belongs to a `succeeded` call, or to one purged by key retention (`effects.call_purged_at`) | `effect_without_succeeded_call` |
//! | the effect of a `succeeded` call is its own: same `effect_id`, same tool, a tool that writes effects | `effect_not_its_calls` |
//! | every `succeeded` call of a tool that writes effects has its effect | `succeeded_without_effect` |
//! | a `running` call holds a lease (`lease_until` and `owner`) | `running_without_lease` |
//! | `status` is one of `pending`, `running`, `succeeded`, `failed` | `unknown_status` |
//!
//! Which calls must have an effect is decided by the tool, because that is
//! what decides it in the service: `succeed` writes the `effects` row in the
//! same transaction as `succeeded` exactly when the tool's outcome carries an
//! effect, and that is so for every success of the tools in
//! `effect_tools` — the caller passes `tools::EFFECT_TOOLS` (`charge`,
//! `send_email`), or, for a server run with `--tools FILE`, what that file
//! declares (`tools::file::effect_tools`: every `http` and `command` tool,
//! whose executors record the downstream's answer as the effect) — and never
//! for the others (`sleep`, `fail`; a test in `tools` holds the list to
//! `Tool::run`). The store itself knows no tool. A
//! `running` call whose lease has expired is not a violation: it is what a
//! crash leaves, and recovery takes it back.
//!
//! It opens the file read-only (`SQLITE_OPEN_READ_ONLY`: it cannot create,
//! write or checkpoint it) and reads everything in one read transaction, so
//! the report is one consistent snapshot. That makes it safe beside a running
//! server: in WAL mode a reader never blocks the writer, and the writer never
//! changes what the reader sees. The one cost is that the server cannot
//! checkpoint the WAL past that snapshot until `verify` ends.
//!
//! This module only reads; it never repairs.

use super::{Database, StoreError};
use rusqlite::{Connection, OpenFlags};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Examples shown per violated invariant; the count is always complete.
pub(in crate::store) const MAX_EXAMPLES: usize = 5;

/// What `verify` found: counts, and one entry per invariant.
#[derive(Debug)]
pub struct Report {
    pub path: PathBuf,
    pub calls: i64,
    /// Calls by status, in status order.
    pub by_status: Vec<(String, i64)>,
    pub effects: i64,
    /// Audit rows by event (`created`, `claimed`, `recover`, ...).
    pub audit: Vec<(String, i64)>,
    /// Distinct tenants, when `calls` has a `tenant` column.
    pub tenants: Option<i64>,
    pub checks: Vec<Check>,
}

/// One invariant and what breaks it.
#[derive(Debug)]
pub struct Check {
    /// The violation's stable name (`duplicate_key`, ...).
    pub name: &'static str,
    /// The invariant, in words.
    pub invariant: String,
    /// How many rows (keys, calls, effects, problems) break it.
    pub violations: usize,
    /// The first few of them, described.
    pub examples: Vec<String>,
}

impl Report {
    /// Every invariant holds.
    pub fn is_clean(&self) -> bool {
        self.checks.iter().all(|c| c.violations == 0)
    }

    /// The checks that found a violation.
    pub fn violated(&self) -> impl Iterator<Item = &Check> {
        self.checks.iter().filter(|c| c.violations > 0)
    }

    /// Audit rows of one event, e.g. `recover`.
    pub fn audit_events(&self, event: &str) -> i64 {
        self.audit
            .iter()
            .find(|(e, _)| e == event)
            .map_or(0, |(_, n)| *n)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "database  {}", self.path.display())?;
        writeln!(
            f,
            "calls     {}{}",
            self.calls,
            parenthesized(&self.by_status)
        )?;
        writeln!(f, "effects   {}", self.effects)?;
        let audit_rows: i64 = self.audit.iter().map(|(_, n)| n).sum();
        writeln!(
            f,
            "audit     {audit_rows} rows{}",
            parenthesized(&self.audit)
        )?;
        if let Some(tenants) = self.tenants {
            writeln!(f, "tenants   {tenants}")?;
        }
        for check in &self.checks {
            if check.violations == 0 {
                writeln!(f, "ok    {}", check.invariant)?;
                continue;
            }
            writeln!(
                f,
                "FAIL  {}: {} × {}",
                check.invariant, check.violations, check.name
            )?;
            for example in &check.examples {
                writeln!(f, "        {example}")?;
            }
            if check.violations > check.examples.len() {
                writeln!(
                    f,
                    "        … and {} more",
                    check.violations - check.examples.len()
                )?;
            }
        }
        let violated: Vec<&str> = self.violated().map(|c| c.name).collect();
        if violated.is_empty() {
            writeln!(f, "violations 0: every invariant holds")
        } else {
            let total: usize = self.violated().map(|c| c.violations).sum();
            writeln!(f, "violations {total}: {}", violated.join(", "))
        }
    }
}

fn parenthesized(counts: &[(String, i64)]) -> String {
    if counts.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = counts.iter().map(|(k, n)| format!("{k} {n}")).collect();
    format!(" ({})", parts.join(", "))
}

/// Why a file could not be verified at all (as opposed to: verified, and
/// found broken).
#[derive(Debug)]
pub enum VerifyError {
    /// SQLite could not open or read the file (missing, unreadable, not a
    /// database, a header it cannot parse).
    Open(PathBuf, rusqlite::Error),
    /// A database, but without the service's `calls` and `effects` tables.
    NotAServiceDatabase(PathBuf),
    /// PostgreSQL could not be reached or read (the URL, masked, and why).
    Postgres(String, StoreError),
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VerifyError::Open(path, e) => write!(f, "cannot read {}: {e}", path.display()),
            VerifyError::NotAServiceDatabase(path) => write!(
                f,
                "{} has no calls and effects tables: not an idempotent-tool database",
                path.display()
            ),
            VerifyError::Postgres(url, e) => write!(f, "cannot read {url}: {e}"),
        }
    }
}

impl std::error::Error for VerifyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            VerifyError::Open(_, e) => Some(e),
            VerifyError::NotAServiceDatabase(_) => None,
            VerifyError::Postgres(_, e) => Some(e),
        }
    }
}

/// Check every invariant on `db` (a SQLite file or a PostgreSQL database),
/// read-only, in one snapshot.
pub fn verify_database(db: &Database, effect_tools: &[&str]) -> Result<Report, VerifyError> {
    match db {
        Database::Sqlite(path) => verify(path, effect_tools),
        Database::Postgres(target) => super::postgres::verify(target, effect_tools),
    }
}

/// Check every invariant on the database at `path`, read-only, in one snapshot.
pub fn verify(path: &Path, effect_tools: &[&str]) -> Result<Report, VerifyError> {
    let open_error = |e| VerifyError::Open(path.to_path_buf(), e);
    let conn = open_read_only(path).map_err(open_error)?;
    // One read transaction: every count and check below sees the same commit.
    conn.execute_batch("BEGIN").map_err(open_error)?;
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
    let tenant = has_column(&conn, "calls", "tenant");
    let purged = has_column(&conn, "effects", "call_purged_at");
    let mut checks = vec![integrity(&conn)];
    checks.extend(
        invariant_checks(tenant, purged, effect_tools)
            .iter()
            .map(|spec| spec.run(&conn)),
    );
    let report = Report {
        path: path.to_path_buf(),
        calls: count(&conn, "SELECT count(*) FROM calls"),
        by_status: grouped(
            &conn,
            "SELECT status, count(*) FROM calls GROUP BY status ORDER BY status",
        ),
        effects: count(&conn, "SELECT count(*) FROM effects"),
        audit: if has_table(&conn, "audit") {
            grouped(
                &conn,
                "SELECT event, count(*) FROM audit GROUP BY event ORDER BY event",
            )
        } else {
            Vec::new()
        },
        tenants: tenant.then(|| count(&conn, "SELECT count(DISTINCT tenant) FROM calls")),
        checks,
    };
    Ok(report)
}

fn open_read_only(path: &Path) -> rusqlite::Result<Connection> {
    // READ_ONLY without CREATE: a wrong path fails instead of making an empty file.
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    // The server may hold a lock for a moment (e.g. while it recovers the WAL).
    conn.busy_timeout(Duration::from_secs(5))?;
    Ok(conn)
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

/// One invariant as a query returning one described row per violation.
pub(in crate::store) struct Spec {
    pub(in crate::store) name: &'static str,
    pub(in crate::store) invariant: String,
    pub(in crate::store) sql: String,
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

/// The invariants past SQLite's own. Each query selects one text per
/// violation, describing it (`quote()` keeps keys and statuses readable).
///
/// `purged`: `effects` has `call_purged_at`, set when key retention deleted
/// the effect's call (the effect stays as the ledger); such an effect has no
/// call, and that is no violation.
pub(in crate::store) fn invariant_checks(
    tenant: bool,
    purged: bool,
    effect_tools: &[&str],
) -> Vec<Spec> {
    let effect_tools = effect_tools
        .iter()
        // SQL string literals: a quote inside a name is doubled.
        .map(|t| format!("'{}'", t.replace('\'', "''")))
        .collect::<Vec<_>>()
        .join(", ");
    let (key_group, key_scope, key_label) = if tenant {
        (
            "tenant, idem_key",
            "per tenant",
            "'tenant ' || quote(tenant) || ' key ' || quote(idem_key)",
        )
    } else {
        ("idem_key", "", "'key ' || quote(idem_key)")
    };
    vec![
        Spec {
            name: "duplicate_key",
            invariant: format!("one call per Idempotency-Key{}", prefixed(key_scope)),
            sql: format!(
                "SELECT {key_label} || ': ' || count(*) || ' calls ' || group_concat(call_id, ', ')
                   FROM calls GROUP BY {key_group} HAVING count(*) > 1"
            ),
        },
        Spec {
            name: "duplicate_effect",
            invariant: "at most one effect per call".into(),
            sql: "SELECT 'call ' || call_id || ': ' || count(*) || ' effects ' || group_concat(effect_id, ', ')
                    FROM effects GROUP BY call_id HAVING count(*) > 1"
                .into(),
        },
        Spec {
            name: "effect_without_succeeded_call",
            invariant: if purged {
                "every effect belongs to a succeeded call, or to one purged after its TTL".into()
            } else {
                "every effect belongs to a succeeded call".into()
            },
            sql: format!(
                "SELECT 'effect ' || e.effect_id || ' of call ' || e.call_id || ': '
                         || CASE WHEN c.call_id IS NULL THEN 'no such call'
                                 ELSE 'the call is ' || quote(c.status) END
                    FROM effects e LEFT JOIN calls c ON c.call_id = e.call_id
                   WHERE (c.call_id IS NULL{unpurged})
                      OR (c.call_id IS NOT NULL AND c.status IS NOT 'succeeded')",
                unpurged = if purged {
                    " AND e.call_purged_at IS NULL"
                } else {
                    ""
                }
            ),
        },
        Spec {
            name: "effect_not_its_calls",
            invariant: format!(
                "every effect is its call's (same effect_id and tool; tool one of {effect_tools})"
            ),
            sql: format!(
                "SELECT 'effect ' || e.effect_id || ' (' || quote(e.tool) || ') of call '
                         || c.call_id || ' (' || quote(c.tool) || ', effect_id '
                         || quote(c.effect_id) || ')'
                    FROM effects e JOIN calls c ON c.call_id = e.call_id
                   WHERE c.status = 'succeeded'
                     AND (e.effect_id IS NOT c.effect_id OR e.tool IS NOT c.tool
                          OR c.tool NOT IN ({effect_tools}))"
            ),
        },
        Spec {
            name: "succeeded_without_effect",
            invariant: format!("every succeeded call of {effect_tools} has its effect"),
            sql: format!(
                "SELECT 'call ' || c.call_id || ' (' || c.tool || ', key ' || quote(c.idem_key)
                         || ') succeeded without an effect'
                    FROM calls c
                   WHERE c.status = 'succeeded' AND c.tool IN ({effect_tools})
                     AND NOT EXISTS (SELECT 1 FROM effects e WHERE e.call_id = c.call_id)"
            ),
        },
        Spec {
            name: "running_without_lease",
            invariant: "every running call holds a lease (lease_until and owner)".into(),
            sql: "SELECT 'call ' || call_id || ': running, lease_until ' || quote(lease_until)
                         || ', owner ' || quote(owner)
                    FROM calls
                   WHERE status = 'running' AND (lease_until IS NULL OR owner IS NULL)"
                .into(),
        },
        Spec {
            name: "unknown_status",
            invariant: "every status is pending, running, succeeded or failed".into(),
            sql: "SELECT 'call ' || call_id || ': status ' || quote(status)
                    FROM calls
                   WHERE status IS NULL
                      OR status NOT IN ('pending', 'running', 'succeeded', 'failed')"
                .into(),
        },
    ]
}

fn prefixed(scope: &str) -> String {
    if scope.is_empty() {
        String::new()
    } else {
        format!(" {scope}")
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

    /// A throwaway database with the service's tables, in a temp folder
    /// removed on drop.
    struct Scratch(PathBuf, #[allow(dead_code)] crate::temp::TempDir);

    impl Scratch {
        fn new(name: &str, extra_column: &str) -> (Scratch, Connection) {
            let dir = crate::temp::TempDir::new(&format!("verify-unit-{name}")).unwrap();
            let path = dir.join("v.db");
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(&format!(
                "CREATE TABLE calls (call_id TEXT PRIMARY KEY, idem_key TEXT NOT NULL,
                    tool TEXT NOT NULL, status TEXT, lease_until REAL, owner TEXT,
                    effect_id TEXT {extra_column});
                 CREATE TABLE effects (effect_id TEXT PRIMARY KEY, call_id TEXT NOT NULL,
                    tool TEXT NOT NULL, amount INTEGER, created_at REAL);"
            ))
            .unwrap();
            (Scratch(path, dir), conn)
        }
    }

    fn violated(report: &Report) -> Vec<&'static str> {
        report.violated().map(|c| c.name).collect()
    }

    #[test]
    fn clean_rows_pass_and_each_broken_row_is_named() {
        let (db, conn) = Scratch::new("rows", "");
        conn.execute_batch(
            "INSERT INTO calls VALUES ('c1', 'k1', 'charge', 'succeeded', NULL, NULL, 'e1'),
                                      ('c2', 'k2', 'sleep', 'succeeded', NULL, NULL, 'e2'),
                                      ('c3', 'k3', 'charge', 'running', 9e9, 'p:w', 'e3'),
                                      ('c4', 'k4', 'fail', 'failed', NULL, NULL, 'e4');
             INSERT INTO effects VALUES ('e1', 'c1', 'charge', 1, 0);",
        )
        .unwrap();
        let report = verify(&db.0, &crate::tools::EFFECT_TOOLS).unwrap();
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
        let report = verify(&db.0, &crate::tools::EFFECT_TOOLS).unwrap();
        assert_eq!(
            violated(&report),
            [
                "duplicate_key",
                "duplicate_effect",
                "effect_without_succeeded_call",
                "effect_not_its_calls",
                "succeeded_without_effect",
                "running_without_lease",
                "unknown_status"
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
        let (db, conn) = Scratch::new("tenant", ", tenant TEXT");
        conn.execute_batch(
            "INSERT INTO calls VALUES ('c1', 'k', 'sleep', 'pending', NULL, NULL, 'e1', 'a'),
                                      ('c2', 'k', 'sleep', 'pending', NULL, NULL, 'e2', 'b');",
        )
        .unwrap();
        let report = verify(&db.0, &crate::tools::EFFECT_TOOLS).unwrap();
        assert!(report.is_clean(), "{report}");
        assert_eq!(report.tenants, Some(2));
        conn.execute_batch(
            "INSERT INTO calls VALUES ('c3', 'k', 'sleep', 'pending', NULL, NULL, 'e3', 'a')",
        )
        .unwrap();
        let report = verify(&db.0, &crate::tools::EFFECT_TOOLS).unwrap();
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
        let (db, conn) = Scratch::new("purged", "");
        conn.execute_batch(
            "ALTER TABLE effects ADD COLUMN call_purged_at REAL;
             INSERT INTO effects VALUES ('e1', 'c1', 'charge', 1, 0, 5.0);",
        )
        .unwrap();
        let report = verify(&db.0, &crate::tools::EFFECT_TOOLS).unwrap();
        assert!(report.is_clean(), "{report}");
        assert!(report.to_string().contains("purged"), "{report}");
        conn.execute_batch("INSERT INTO effects VALUES ('e2', 'c2', 'charge', 1, 0, NULL)")
            .unwrap();
        let report = verify(&db.0, &crate::tools::EFFECT_TOOLS).unwrap();
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

    #[test]
    fn a_missing_file_or_a_foreign_database_cannot_be_verified() {
        let missing = std::env::temp_dir().join("verify-unit-no-such-file.db");
        assert!(matches!(
            verify(&missing, &crate::tools::EFFECT_TOOLS),
            Err(VerifyError::Open(..))
        ));
        assert!(!missing.exists(), "verify must never create the file");
        let (db, conn) = Scratch::new("foreign", "");
        conn.execute_batch("DROP TABLE effects").unwrap();
        assert!(matches!(
            verify(&db.0, &crate::tools::EFFECT_TOOLS),
            Err(VerifyError::NotAServiceDatabase(_))
        ));
    }
}
