//! The process registry on SQLite, and recovery: registering this process,
//! its heartbeat, marking it stopped, and taking back the `running` calls
//! whose lease expired or whose owner is gone. The rules are the store's
//! (`store::instance`, where `Reclaimable` decides); PostgreSQL's SQL for
//! the same rules is `postgres::instances`.
//!
//! Never declares a live process dead: every candidate read here is judged
//! by `Reclaimable::must_stay` before it is moved.

use super::super::audit::{self, Event};
use super::super::ids::now;
use super::super::instance::{pid_is_alive, Instance, Node, Reclaimable, DEAD_AFTER, NODES_LISTED};
use super::super::model::LeaseHeld;
use super::cancel::end_cancelled;
use super::steps::{audit, left_running, tenant_and_tool};
use crate::status::Status;
use rusqlite::{params, Connection, OptionalExtension};

/// Record this process, and mark stopped every earlier instance on this host
/// whose pid is gone (it was killed: nothing else marked it). Returns how many
/// were marked. One write operation.
pub(super) fn register(conn: &Connection, me: &Instance) -> rusqlite::Result<usize> {
    let now = now();
    conn.prepare_cached(
        "INSERT INTO instances (instance_id, pid, host, started_at, heartbeat_at)
         VALUES (?1, ?2, ?3, ?4, ?4)",
    )?
    .execute(params![me.id, me.pid, me.host, now])?;
    let same_host: Vec<(String, u32)> = conn
        .prepare_cached(
            "SELECT instance_id, pid FROM instances
              WHERE host = ?1 AND stopped_at IS NULL AND instance_id <> ?2",
        )?
        .query_map(params![me.host, me.id], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let mut marked = 0;
    for (instance_id, pid) in same_host {
        if !pid_is_alive(pid) {
            mark_stopped(conn, &instance_id, now)?;
            marked += 1;
        }
    }
    Ok(marked)
}

pub(super) fn heartbeat(conn: &Connection, me: &Instance) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE instances SET heartbeat_at = ?1 WHERE instance_id = ?2")?
        .execute(params![now(), me.id])?;
    Ok(())
}

pub(super) fn mark_stopped(conn: &Connection, instance_id: &str, now: f64) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE instances SET stopped_at = ?1 WHERE instance_id = ?2 AND stopped_at IS NULL",
    )?
    .execute(params![now, instance_id])?;
    Ok(())
}
/// The `WHERE` condition for a `running` call `c` that recovery may take back,
/// joined to its owner's instance `i` (`LEFT JOIN`, so owners without an
/// instance — older releases — are judged by their lease alone). `?1` is now,
/// `?2` the heartbeat cut-off.
const RECLAIMABLE: &str = "c.status = 'running' AND (
        c.lease_until IS NULL OR c.lease_until <= ?1
        OR i.stopped_at IS NOT NULL OR i.heartbeat_at <= ?2)";

/// `calls c LEFT JOIN instances i` on the owner's instance id.
const CALLS_WITH_OWNER_INSTANCE: &str = "calls c LEFT JOIN instances i
        ON c.owner LIKE '%@%' AND i.instance_id = substr(c.owner, instr(c.owner, '@') + 1)";

/// `?2` for `RECLAIMABLE`.
fn heartbeat_cutoff(now: f64) -> f64 {
    now - DEAD_AFTER.as_secs_f64()
}

/// Return to `pending` every `running` call whose lease has expired or whose
/// owner's process is gone (`RECLAIMABLE`), naming each with the owner it
/// was taken from and why — or end it `cancelled` if its cancel was asked
/// (`cancel::end_cancelled`: still no effect row) — except those that must stay
/// (`Reclaimable::must_stay`). The owners are read first,
/// inside the same write transaction; each row is then moved by its own
/// conditional `UPDATE` on the attempt that was read, whose row count decides.
pub(super) fn recover_expired(
    conn: &Connection,
    me: &Instance,
    running_here: &[LeaseHeld],
) -> rusqlite::Result<Vec<String>> {
    let now = now();
    let candidates: Vec<Reclaimable> = conn
        .prepare_cached(&format!(
            "SELECT c.call_id, c.attempt, c.owner, c.lease_until, i.heartbeat_at, i.stopped_at,
                    i.host, i.pid
               FROM {CALLS_WITH_OWNER_INSTANCE} WHERE {RECLAIMABLE}"
        ))?
        .query_map(params![now, heartbeat_cutoff(now)], |r| {
            Ok(Reclaimable {
                call_id: r.get(0)?,
                attempt: r.get(1)?,
                owner: r.get(2)?,
                lease_until: r.get(3)?,
                heartbeat_at: r.get(4)?,
                stopped_at: r.get(5)?,
                host: r.get(6)?,
                pid: r.get(7)?,
                now,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    let mut recovered = Vec::with_capacity(candidates.len());
    for call in candidates {
        if call.must_stay(me, running_here) {
            continue;
        }
        let changed = conn
            .prepare_cached(
                "UPDATE calls
                    SET status = 'pending', lease_until = NULL, owner = NULL, updated_at = ?1
                  WHERE call_id = ?2 AND status = 'running' AND attempt = ?3
                    AND cancel_requested_at IS NULL
              RETURNING tenant, tool",
            )?
            .query_row(params![now, call.call_id, call.attempt], tenant_and_tool)
            .optional()?;
        let why = call.why();
        if left_running(conn, changed, call.attempt, Status::Pending)? {
            audit(conn, now, &call.call_id, call.attempt, Event::Recover, &why)?;
            recovered.push(call.call_id);
        } else if end_cancelled(
            conn,
            now,
            &call.call_id,
            call.attempt,
            &audit::recovered_after_cancel(call.attempt, &why),
        )? {
            // Its cancel was asked: it never runs again (`store::cancel`).
            recovered.push(call.call_id);
        }
    }
    Ok(recovered)
}
/// Whether any `running` call could be recovered: a cheap read that spares
/// the writer a transaction when there is nothing to recover.
pub(super) fn has_reclaimable(conn: &Connection) -> rusqlite::Result<bool> {
    let now = now();
    conn.prepare_cached(&format!(
        "SELECT EXISTS (SELECT 1 FROM {CALLS_WITH_OWNER_INSTANCE} WHERE {RECLAIMABLE})"
    ))?
    .query_row(params![now, heartbeat_cutoff(now)], |r| r.get(0))
}

/// The instances heard from last (`NODES_LISTED`), each judged alive or not
/// by this host's clock, with the calls running under its owners: the
/// `running` entries of `idx_calls_status`, as few as there are workers.
pub(super) fn nodes(conn: &Connection) -> rusqlite::Result<Vec<Node>> {
    let running: Vec<(String, i64)> = conn
        .prepare_cached(
            "SELECT substr(owner, instr(owner, '@') + 1), count(*) FROM calls
              WHERE status = 'running' AND owner LIKE '%@%'
              GROUP BY substr(owner, instr(owner, '@') + 1)",
        )?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let now = now();
    conn.prepare_cached(
        "SELECT instance_id, host, pid, started_at, heartbeat_at, stopped_at FROM instances
          ORDER BY heartbeat_at DESC LIMIT ?1",
    )?
    .query_map(params![NODES_LISTED as i64], |r| {
        Ok(Node {
            instance_id: r.get(0)?,
            host: r.get(1)?,
            pid: r.get(2)?,
            started_at: r.get(3)?,
            heartbeat_at: r.get(4)?,
            stopped_at: r.get(5)?,
            alive: false,
            running: 0,
        })
    })?
    .map(|node| Ok(node?.judged(now, &running)))
    .collect()
}
