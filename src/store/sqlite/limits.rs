//! A tool's `rate` on SQLite, shared by every process on the file (schema
//! version 10): each rated tool has one `tool_limits` row, its token bucket.
//! A claim of rated tools is one writer operation, so it runs inside the
//! writer's `BEGIN IMMEDIATE` transaction, which every process on the file
//! takes in turn: the bucket is read, refilled by the clock, spent and
//! written back with the claims it paid for, and no other claim comes in
//! between. `max_concurrency` is not held here: on SQLite it stays per
//! process (the runner's slots), which is what `per_tool` brings in.
//!
//! Tools without a rate never come here. This module never runs a tool.

use super::super::ids::now;
use super::super::limits::{LimitedClaim, ToolLimit, ToolRoom};
use super::super::options::DueLimits;
use super::sql::claim_one;
use rusqlite::{params, Connection, OptionalExtension};
use std::time::Duration;

/// Migration 10: a row per rated tool, made when a process that rates it
/// opens the file (`declare_op`).
pub(super) const TOOL_LIMITS_TABLE: &str = "
CREATE TABLE IF NOT EXISTS tool_limits (
  tool        TEXT PRIMARY KEY,
  tokens      REAL NOT NULL,
  refilled_at REAL NOT NULL
)";

/// Give each rated tool its row, with a full bucket; a row another process
/// made is left as it is.
pub(super) fn declare_op(
    limited: Vec<ToolLimit>,
) -> impl FnOnce(&Connection) -> rusqlite::Result<()> + Send + 'static {
    move |conn| {
        let mut insert = conn.prepare_cached(
            "INSERT OR IGNORE INTO tool_limits (tool, tokens, refilled_at) VALUES (?1, ?2, ?3)",
        )?;
        for limit in &limited {
            let burst = limit.rate.map_or(0.0, |r| f64::from(r.burst));
            insert.execute(params![limit.tool, burst, now()])?;
        }
        Ok(())
    }
}

/// Claim due calls of the rated tools `limits.per_tool` names (with this
/// process's free slots or workers for each), oldest first per tool, each
/// paid with a token of its bucket.
pub(super) fn claim_op(
    limited: Vec<ToolLimit>,
    limits: DueLimits,
    owner: String,
    lease: Duration,
) -> impl FnOnce(&Connection) -> rusqlite::Result<LimitedClaim> + Send + 'static {
    move |conn| {
        let now = now();
        let lease_until = now + lease.as_secs_f64();
        let mut left = limits.total;
        let mut rooms = Vec::new();
        for (tool, free) in &limits.per_tool {
            let Some(rate) = limited
                .iter()
                .find(|l| &l.tool == tool)
                .and_then(|l| l.rate)
            else {
                continue;
            };
            if *free == 0 || left == 0 {
                continue;
            }
            let tokens = match bucket(conn, tool)? {
                Some((tokens, refilled_at)) => rate.refill(tokens, now - refilled_at),
                None => f64::from(rate.burst),
            };
            let allowed = (*free).min(tokens.floor().max(0.0) as usize).min(left);
            let due = due_of(conn, tool, now, allowed + 1)?;
            let mut room = ToolRoom {
                tool: tool.clone(),
                allowed,
                cap_room: None,
                tokens: Some(tokens),
                rate: Some(rate),
                waiting: due.len() > allowed,
                claimed: Vec::new(),
            };
            for (call_id, due_since) in due.into_iter().take(allowed) {
                if let Some(lease) = claim_one(conn, &call_id, &owner, now, lease_until)? {
                    let waited = Duration::from_secs_f64((now - due_since).max(0.0));
                    room.claimed.push((lease, waited));
                }
            }
            left -= room.claimed.len();
            spend(conn, tool, tokens - room.claimed.len() as f64, now)?;
            rooms.push(room);
        }
        Ok(LimitedClaim::from_rooms(rooms))
    }
}

/// The tool's bucket as last written: tokens, and when.
fn bucket(conn: &Connection, tool: &str) -> rusqlite::Result<Option<(f64, f64)>> {
    conn.prepare_cached("SELECT tokens, refilled_at FROM tool_limits WHERE tool = ?1")?
        .query_row([tool], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()
}

fn spend(conn: &Connection, tool: &str, tokens: f64, now: f64) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO tool_limits (tool, tokens, refilled_at) VALUES (?1, ?2, ?3)
         ON CONFLICT (tool) DO UPDATE SET tokens = excluded.tokens,
                                          refilled_at = max(refilled_at, excluded.refilled_at)",
    )?
    .execute(params![tool, tokens, now])?;
    Ok(())
}

/// Up to `limit` of the tool's calls due at `now`, oldest first, each with
/// the time it became due (created or set back to `pending`, or its retry's
/// time).
fn due_of(
    conn: &Connection,
    tool: &str,
    now: f64,
    limit: usize,
) -> rusqlite::Result<Vec<(String, f64)>> {
    conn.prepare_cached(
        "SELECT call_id, max(updated_at, coalesce(next_attempt_at, 0)) FROM calls
          WHERE status = 'pending' AND tool = ?1
            AND (next_attempt_at IS NULL OR next_attempt_at <= ?2)
          ORDER BY lease_until, rowid LIMIT ?3",
    )?
    .query_map(params![tool, now, limit as i64], |r| {
        Ok((r.get(0)?, r.get(1)?))
    })?
    .collect()
}
