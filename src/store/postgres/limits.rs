//! Limits shared by every node on PostgreSQL (schema step 4): each limited
//! tool has one `tool_limits` row — its token bucket, and the lock its
//! claims take. A claim of limited tools is one short transaction of two
//! statements: first `SELECT … FOR UPDATE` of the tools' rows, in name
//! order, so the claims of one tool queue one behind the other across
//! nodes (and two never deadlock); then, in a fresh READ COMMITTED snapshot
//! taken after the lock (so it sees every claim committed before), one
//! statement that counts each capped tool's `running` calls (the
//! `calls_running` index), refills each bucket by the statement's clock,
//! takes at most the room left of each tool with `FOR UPDATE SKIP LOCKED`,
//! moves those calls to `running` with their audit rows, and spends their
//! tokens. A dead node's calls are `running` until recovery takes them
//! back, so they count: no slot is ever lost, nor given twice.
//!
//! Tools without limits never come here: their claims are `sql`'s, with no
//! lock and no extra statement. This module never runs a tool.

use super::super::limits::{LimitedClaim, ToolLimit, ToolRoom};
use super::super::model::Lease;
use super::super::options::DueLimits;
use super::session::{GenericClient, Session};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio_postgres::Row;

/// Schema step 4: a row per limited tool, made when a node that limits it
/// starts (`declare`). `tokens` and `refilled_at` are its bucket, seconds by
/// the database's clock.
pub(super) const TOOL_LIMITS_TABLE: &str = "
CREATE TABLE tool_limits (
  tool        text PRIMARY KEY,
  tokens      double precision NOT NULL,
  refilled_at double precision NOT NULL
);
";

/// Give each limited tool its row, with a full bucket; a row another node
/// made is left as it is.
pub(super) fn declare(
    client: &mut impl GenericClient,
    limits: &[ToolLimit],
) -> Result<(), tokio_postgres::Error> {
    let tools: Vec<&str> = limits.iter().map(|l| l.tool.as_str()).collect();
    let burst: Vec<f64> = limits
        .iter()
        .map(|l| l.rate.map_or(0.0, |r| f64::from(r.burst)))
        .collect();
    client.execute(
        "INSERT INTO tool_limits (tool, tokens, refilled_at)
             SELECT tool, burst, extract(epoch FROM now())::float8
               FROM unnest($1::text[], $2::float8[]) AS t(tool, burst)
             ON CONFLICT (tool) DO NOTHING",
        &[&tools, &burst],
    )?;
    Ok(())
}

/// The claim's statement, once the tools' rows are locked. `$4..$8` are the
/// tools with this node's free slots (or workers) for each, their cap and
/// rate (NULL where they have none); `$1` the most calls in all. One row per
/// claimed call, and one with NULL call columns per tool that got none,
/// each with the tool's room, its tokens before the claim and whether due
/// calls of it remain.
const CLAIM_LIMITED: &str = "WITH lim AS (
       SELECT l.tool, l.free, l.cap, l.per_second, l.burst, b.tokens, b.refilled_at,
              extract(epoch FROM statement_timestamp())::float8 AS at
         FROM unnest($4::text[], $5::int8[], $6::int8[], $7::float8[], $8::float8[])
              AS l(tool, free, cap, per_second, burst)
         JOIN tool_limits b ON b.tool = l.tool
     ), room AS (
       SELECT tool, free, per_second, at, refilled_at,
              CASE WHEN per_second IS NOT NULL
                   THEN least(burst, tokens + greatest(at - refilled_at, 0) * per_second) END
                AS tokens,
              CASE WHEN cap IS NOT NULL
                   THEN greatest(cap - (SELECT count(*) FROM calls c
                                         WHERE c.status = 'running' AND c.tool = lim.tool), 0) END
                AS cap_room
         FROM lim
     ), allowed AS (
       SELECT tool, per_second, at, refilled_at, tokens, cap_room,
              CASE WHEN EXISTS (SELECT 1 FROM paused_tools p WHERE p.tool = room.tool) THEN 0
                   ELSE least(free, coalesce(cap_room, free), coalesce(floor(tokens)::int8, free))
              END AS n
         FROM room
     ), picked AS MATERIALIZED (
       SELECT d.call_id, d.created_seq, d.due_since
         FROM allowed CROSS JOIN LATERAL (
           SELECT call_id, created_seq, greatest(updated_at, coalesce(next_attempt_at, 0)) AS due_since
             FROM calls
            WHERE status = 'pending' AND tool = allowed.tool
              AND (next_attempt_at IS NULL OR next_attempt_at <= extract(epoch FROM now())::float8)
            ORDER BY created_seq LIMIT allowed.n FOR UPDATE SKIP LOCKED
         ) d
     ), due AS MATERIALIZED (
       SELECT call_id, due_since FROM picked ORDER BY created_seq LIMIT $1
     ), still_due AS (
       SELECT allowed.tool, EXISTS (
           SELECT 1 FROM calls
            WHERE status = 'pending' AND tool = allowed.tool
              AND (next_attempt_at IS NULL OR next_attempt_at <= extract(epoch FROM now())::float8)
              AND call_id NOT IN (SELECT call_id FROM due)
         ) AS waiting
         FROM allowed
     ), u AS (
       UPDATE calls SET status = 'running', attempt = calls.attempt + 1,
              lease_until = extract(epoch FROM now())::float8 + $2, owner = $3,
              updated_at = extract(epoch FROM now())::float8, next_attempt_at = NULL
         FROM due WHERE calls.call_id = due.call_id
       RETURNING calls.call_id, calls.attempt, calls.tool, calls.args_json,
                 calls.effect_id, calls.lease_until, calls.updated_at
     ), a AS (
       INSERT INTO audit (ts, call_id, attempt, event, detail)
       SELECT updated_at, call_id, attempt, 'claimed', $3::text || ' attempt=' || attempt FROM u
     ), spent AS (
       UPDATE tool_limits b
          SET tokens = al.tokens - (SELECT count(*) FROM u WHERE u.tool = al.tool),
              refilled_at = greatest(al.at, al.refilled_at)
         FROM allowed al
        WHERE b.tool = al.tool AND al.per_second IS NOT NULL
     )
     SELECT al.tool, al.n, al.cap_room, al.tokens, sd.waiting,
            u.call_id, u.attempt, u.args_json, u.effect_id, u.lease_until,
            extract(epoch FROM now())::float8 - d.due_since
       FROM allowed al JOIN still_due sd ON sd.tool = al.tool
       LEFT JOIN (u JOIN due d ON d.call_id = u.call_id) ON u.tool = al.tool";

/// Claim due calls of `limited` (those of `limits.per_tool`), under their
/// rows' locks, in one transaction.
pub(super) fn claim(
    client: &mut Session,
    limited: &[ToolLimit],
    limits: &DueLimits,
    owner: &str,
    lease_secs: f64,
) -> Result<LimitedClaim, tokio_postgres::Error> {
    let mut tools: Vec<&ToolLimit> = limits
        .per_tool
        .iter()
        .filter(|(_, free)| *free > 0)
        .filter_map(|(tool, _)| limited.iter().find(|l| &l.tool == tool))
        .collect();
    tools.sort_by(|a, b| a.tool.cmp(&b.tool));
    if tools.is_empty() || limits.total == 0 {
        return Ok(LimitedClaim::default());
    }
    let names: Vec<&str> = tools.iter().map(|l| l.tool.as_str()).collect();
    let free: Vec<i64> = tools
        .iter()
        .map(|l| free_for(limits, &l.tool) as i64)
        .collect();
    let cap: Vec<Option<i64>> = tools
        .iter()
        .map(|l| l.max_concurrency.map(|c| c as i64))
        .collect();
    let per_second: Vec<Option<f64>> = tools.iter().map(|l| l.rate.map(|r| r.per_second)).collect();
    let burst: Vec<Option<f64>> = tools
        .iter()
        .map(|l| l.rate.map(|r| f64::from(r.burst)))
        .collect();
    let total = limits.total as i64;
    let mut tx = client.transaction()?;
    tx.execute(
        "SELECT tool FROM tool_limits WHERE tool = ANY($1) ORDER BY tool FOR UPDATE",
        &[&names],
    )?;
    let rows = tx.query(
        CLAIM_LIMITED,
        &[
            &total,
            &lease_secs,
            &owner,
            &names,
            &free,
            &cap,
            &per_second,
            &burst,
        ],
    )?;
    tx.commit()?;
    Ok(LimitedClaim::from_rooms(rooms(&rows, &tools)))
}

fn free_for(limits: &DueLimits, tool: &str) -> usize {
    let free = limits.per_tool.iter().find(|(t, _)| t == tool);
    free.map_or(0, |(_, n)| *n)
}

/// The statement's rows, one `ToolRoom` per tool.
fn rooms(rows: &[Row], tools: &[&ToolLimit]) -> Vec<ToolRoom> {
    let mut by_tool: BTreeMap<String, ToolRoom> = BTreeMap::new();
    for row in rows {
        let tool: String = row.get(0);
        let limit = tools.iter().find(|l| l.tool == tool);
        let room = by_tool.entry(tool.clone()).or_insert_with(|| ToolRoom {
            tool: tool.clone(),
            allowed: usize::try_from(row.get::<_, i64>(1)).unwrap_or(0),
            cap_room: row
                .get::<_, Option<i64>>(2)
                .map(|n| usize::try_from(n).unwrap_or(0)),
            tokens: row.get(3),
            rate: limit.and_then(|l| l.rate),
            waiting: row.get(4),
            claimed: Vec::new(),
        });
        let Some(call_id) = row.get::<_, Option<String>>(5) else {
            continue;
        };
        let lease = Lease {
            effect_id: super::super::ids::stored_effect_id(row.get(8), &call_id),
            call_id,
            attempt: row.get(6),
            tool,
            args_json: row.get(7),
            lease_until: row.get(9),
        };
        let waited = Duration::from_secs_f64(row.get::<_, f64>(10).max(0.0));
        room.claimed.push((lease, waited));
    }
    by_tool.into_values().collect()
}
