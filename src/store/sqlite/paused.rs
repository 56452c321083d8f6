//! Paused tools on SQLite (migration 17; `store::paused` has the rules):
//! the table, the pause and the resume (each one writer operation), and the
//! one read of every paused tool. Every claim statement of this wing checks
//! the table itself (`sql::claim_one`, the created-claimed insert, the scan
//! for due calls), so a pause committed by any process on the file holds
//! for all of them at once.
//!
//! Never runs a tool; never touches `calls`.

use super::super::ids::now;
use super::super::paused::{PausedTool, Toggled};
use rusqlite::{params, Connection, OptionalExtension, Row};

/// Migration 17: a row per paused tool. Small (a handful of rows, usually
/// none), read by primary key on every claim.
pub(super) const PAUSED_TOOLS_TABLE: &str = "
CREATE TABLE IF NOT EXISTS paused_tools (
  tool       TEXT PRIMARY KEY,
  paused_at  REAL NOT NULL,
  paused_by  TEXT NOT NULL,
  reason     TEXT
) WITHOUT ROWID";

/// Whether `tool` is paused now, in the caller's transaction.
pub(super) fn is_paused(conn: &Connection, tool: &str) -> rusqlite::Result<bool> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM paused_tools WHERE tool = ?1")?
        .query_row([tool], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Pause `tool`, unless it already is.
pub(super) fn pause_op(
    tool: String,
    by: String,
    reason: Option<String>,
) -> impl FnOnce(&Connection) -> rusqlite::Result<Toggled> + Send + 'static {
    move |conn| {
        if let Some(paused) = one(conn, &tool)? {
            return Ok(Toggled::Already(Some(paused)));
        }
        conn.prepare_cached(
            "INSERT INTO paused_tools (tool, paused_at, paused_by, reason) VALUES (?1, ?2, ?3, ?4)",
        )?
        .execute(params![tool, now(), by, reason])?;
        Ok(Toggled::Now(one(conn, &tool)?))
    }
}

/// Resume `tool`, if it is paused: its row goes, its calls are due again.
pub(super) fn resume_op(
    tool: String,
) -> impl FnOnce(&Connection) -> rusqlite::Result<Toggled> + Send + 'static {
    move |conn| {
        let deleted = conn
            .prepare_cached("DELETE FROM paused_tools WHERE tool = ?1")?
            .execute([&tool])?;
        Ok(match deleted {
            0 => Toggled::Already(None),
            _ => Toggled::Now(None),
        })
    }
}

/// Every paused tool, by name.
pub(super) fn all(conn: &Connection) -> rusqlite::Result<Vec<PausedTool>> {
    conn.prepare_cached(
        "SELECT tool, paused_at, paused_by, reason FROM paused_tools ORDER BY tool",
    )?
    .query_map([], paused_from_row)?
    .collect()
}

fn one(conn: &Connection, tool: &str) -> rusqlite::Result<Option<PausedTool>> {
    conn.prepare_cached(
        "SELECT tool, paused_at, paused_by, reason FROM paused_tools WHERE tool = ?1",
    )?
    .query_row([tool], paused_from_row)
    .optional()
}

fn paused_from_row(r: &Row) -> rusqlite::Result<PausedTool> {
    Ok(PausedTool {
        tool: r.get(0)?,
        paused_at: r.get(1)?,
        paused_by: r.get(2)?,
        reason: r.get(3)?,
    })
}
