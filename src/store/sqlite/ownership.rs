//! Whether a SQLite file is this service's to open: one without tables yet
//! (a new or empty file), or one whose every table is a table this service
//! makes, with at least the columns the oldest shape of that table has (a
//! database made by the first design's DDL qualifies, and migrates in place).
//!
//! Anything else belongs to another program. The service must not add its
//! tables beside that program's, nor run its migrations on a table that only
//! shares a name with its own: it refuses in one line, before anything is
//! written (the WAL switch and the page size come after this check). This
//! file only reads the schema.

use super::super::error::StoreError;
use rusqlite::Connection;

/// Each table this service makes, with the columns every version of it has.
const OUR_TABLES: &[(&str, &[&str])] = &[
    (
        "calls",
        &[
            "call_id",
            "idem_key",
            "fingerprint",
            "tool",
            "args_json",
            "status",
            "attempt",
            "created_at",
            "updated_at",
        ],
    ),
    ("effects", &["effect_id", "call_id", "tool", "created_at"]),
    ("audit", &["id", "ts", "call_id", "event"]),
    (
        "instances",
        &["instance_id", "pid", "host", "started_at", "heartbeat_at"],
    ),
    (
        "business_keys",
        &["call_id", "tenant", "tool", "bkey", "holding"],
    ),
    ("tool_limits", &["tool", "tokens", "refilled_at"]),
    (
        "approvals",
        &[
            "call_id",
            "tenant",
            "fingerprint",
            "approvers",
            "expires_at",
        ],
    ),
    (
        "notifications",
        &["msg_id", "tenant", "call_id", "event", "next_attempt_at"],
    ),
    (
        "call_counts",
        &[
            "tenant", "tool", "status", "attempt", "calls", "inserted", "entered",
        ],
    ),
    ("effect_counts", &["tenant", "effects", "detached"]),
    ("error_counts", &["tenant", "tool", "error_code", "failed"]),
    ("rate_readings", &["at", "totals"]),
    ("paused_tools", &["tool", "paused_at", "paused_by"]),
    (
        "bulk_jobs",
        &[
            "job_id",
            "tenant",
            "idem_key",
            "action",
            "filter_json",
            "state",
        ],
    ),
    // In a copy `backup` made, until a start accepts it (`copy_mark`).
    ("backup_mark", &["snapshot_ms", "source", "host"]),
];

/// Refuse a file another program made; say why in one line.
pub(super) fn refuse_foreign(conn: &Connection) -> Result<(), StoreError> {
    match foreign_reason(conn)? {
        None => Ok(()),
        Some(why) => Err(StoreError::internal(format!(
            "it is not an idempotent-tool database: {why}; give --db a new file, or one \
             this service made"
        ))),
    }
}

/// Why the file is another program's, or `None` when it is empty or ours.
pub(super) fn foreign_reason(conn: &Connection) -> Result<Option<String>, StoreError> {
    let mut tables = conn.prepare(
        "SELECT name FROM sqlite_schema
          WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'
          ORDER BY name",
    )?;
    let names: Vec<String> = tables
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let (ours, theirs): (Vec<&String>, Vec<&String>) = names
        .iter()
        .partition(|name| OUR_TABLES.iter().any(|(table, _)| table == name));
    if !theirs.is_empty() {
        let list: Vec<&str> = theirs.iter().map(|s| s.as_str()).collect();
        return Ok(Some(format!(
            "it holds tables this service does not make ({})",
            list.join(", ")
        )));
    }
    for table in ours {
        let missing = missing_columns(conn, table)?;
        if !missing.is_empty() {
            return Ok(Some(format!(
                "its {table} table is another program's (no {})",
                missing.join(", ")
            )));
        }
    }
    Ok(None)
}

/// The columns `table` should have and does not.
fn missing_columns(conn: &Connection, table: &str) -> rusqlite::Result<Vec<&'static str>> {
    let expected = OUR_TABLES
        .iter()
        .find(|(name, _)| *name == table)
        .map_or(&[][..], |(_, columns)| columns);
    let mut has = conn.prepare("SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2")?;
    let mut missing = Vec::new();
    for column in expected {
        if !has.exists([table, column])? {
            missing.push(*column);
        }
    }
    Ok(missing)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(ddl: &str) -> Option<String> {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(ddl).unwrap();
        foreign_reason(&conn).unwrap()
    }

    #[test]
    fn an_empty_file_or_our_tables_are_ours_anything_else_is_not() {
        assert_eq!(reason(""), None);
        assert_eq!(reason(super::super::schema::TABLES), None);
        let seed_audit = "CREATE TABLE audit (id INTEGER PRIMARY KEY AUTOINCREMENT, \
                          ts REAL, call_id TEXT, event TEXT, detail TEXT)";
        assert_eq!(reason(seed_audit), None, "sqlite_sequence is SQLite's");
        let theirs = reason("CREATE TABLE users (id INTEGER); CREATE TABLE orders (id INTEGER)");
        assert_eq!(
            theirs.as_deref(),
            Some("it holds tables this service does not make (orders, users)")
        );
        let other_calls = reason("CREATE TABLE calls (id INTEGER PRIMARY KEY, phone TEXT)");
        assert!(
            other_calls
                .as_deref()
                .is_some_and(|r| r.starts_with("its calls table is another program's (no call_id")),
            "{other_calls:?}"
        );
    }

    /// A migration that adds a table must list it here, or the next start
    /// refuses the file the previous start made.
    #[test]
    fn every_table_the_migrations_make_is_ours() {
        let conn = Connection::open_in_memory().unwrap();
        super::super::schema::migrate(&conn).unwrap();
        assert_eq!(foreign_reason(&conn).unwrap(), None);
        let mut names = conn
            .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'")
            .unwrap();
        let made: Vec<String> = names
            .query_map([], |row| row.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        for table in &made {
            assert!(
                OUR_TABLES.iter().any(|(ours, _)| ours == table),
                "{table} is made by a migration but missing from OUR_TABLES"
            );
        }
    }
}
