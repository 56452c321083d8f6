//! The process registry behind instant reclaim. Each process that opens the
//! store registers an instance (id, pid, host, start time) and heart-beats it
//! every second; a stopping process marks its instance stopped. A `running`
//! call's `owner` ends with `@<instance id>`, so recovery can tell a call
//! whose owner is certainly gone — its instance stopped, stopped
//! heart-beating, or (checked at start-up) its pid no longer exists on this
//! host — and take it back at once instead of waiting out the lease.
//!
//! What this module must never do: declare a live process dead. On this host
//! the kernel decides: a process whose pid is alive keeps its calls until
//! their leases expire, however late its heartbeat (a starved process, a slow
//! disk). For a process on another host the heartbeat decides, with a margin
//! of several beats; and even a wrong verdict there (a process paused longer
//! than that) is safe: its completion is fenced by the attempt and discarded,
//! and `effects.call_id UNIQUE` still allows one effect per call — exactly as
//! when a lease expires.

use super::ids::now;
use super::model::LeaseHeld;
use rusqlite::{params, Connection};
use std::time::Duration;

/// How often a live process writes its heartbeat.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);

/// A process whose heartbeat is older than this is taken as gone.
pub const DEAD_AFTER: Duration = Duration::from_secs(5);

/// This process, as recorded in `instances`.
#[derive(Debug, Clone)]
pub struct Instance {
    pub id: String,
    pub pid: u32,
    pub host: String,
}

impl Instance {
    /// A new id for this process: pid and start time, hashed, so two runs of
    /// the same pid never share one.
    pub(super) fn this_process() -> Instance {
        let pid = std::process::id();
        let seed = format!("{pid}:{:?}", std::time::SystemTime::now());
        let hash = crate::fingerprint::hex_sha256(seed.as_bytes());
        Instance {
            id: format!("i_{}", &hash[..12]),
            pid,
            host: host_name(),
        }
    }
}

/// The kernel's host name; instances on the same host can be checked by pid.
pub(super) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// Whether `pid` names a live process on this host.
pub(super) fn pid_is_alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Says in the log that registering found `gone` earlier processes of this
/// host gone (both backends call it after their `register`), whose running
/// calls are reclaimed at once; nothing when there were none.
pub(super) fn log_gone(gone: usize) {
    if gone > 0 {
        crate::log::warn(
            "earlier processes on this host are gone; their running calls are reclaimed now",
        )
        .event("instances_gone")
        .number("processes", gone as u64)
        .emit();
    }
}

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

/// The owner string of a worker of this process: `pid:thread@instance`, so a
/// row tells a person which process and worker held it, and recovery which
/// instance to check.
pub fn owner_name(me: &Instance, thread: &str) -> String {
    format!("{}:{thread}@{}", me.pid, me.id)
}

/// The `WHERE` condition for a `running` call `c` that recovery may take back,
/// joined to its owner's instance `i` (`LEFT JOIN`, so owners without an
/// instance — older releases — are judged by their lease alone). `?1` is now,
/// `?2` the heartbeat cut-off.
pub(super) const RECLAIMABLE: &str = "c.status = 'running' AND (
        c.lease_until IS NULL OR c.lease_until <= ?1
        OR i.stopped_at IS NOT NULL OR i.heartbeat_at <= ?2)";

/// `calls c LEFT JOIN instances i` on the owner's instance id.
pub(super) const CALLS_WITH_OWNER_INSTANCE: &str = "calls c LEFT JOIN instances i
        ON c.owner LIKE '%@%' AND i.instance_id = substr(c.owner, instr(c.owner, '@') + 1)";

/// Whether the lease `owner` holds on attempt `attempt` of `call_id` is one
/// of `running_here`: the leases this process's own workers hold on tools
/// running now, which it goes on extending. Recovery leaves such a call alone
/// even once its lease has lapsed: its executor is known to be alive, and
/// what let the lease lapse was a write that could not commit in time (a
/// stalled disk, another process holding the write lock), which the next
/// extension makes good. Taking it back would run the call a second time.
pub(super) fn held_by_a_worker_here(
    me: &Instance,
    running_here: &[LeaseHeld],
    call_id: &str,
    attempt: i64,
    owner: Option<&str>,
) -> bool {
    owner.is_some_and(|o| {
        o.strip_suffix(me.id.as_str())
            .is_some_and(|rest| rest.ends_with('@'))
    }) && running_here
        .iter()
        .any(|lease| lease.call_id == call_id && lease.attempt == attempt)
}

/// `?2` for `RECLAIMABLE`.
pub(super) fn heartbeat_cutoff(now: f64) -> f64 {
    now - DEAD_AFTER.as_secs_f64()
}
