//! The process registry behind instant reclaim. Each process that opens the
//! store registers an instance (id, pid, host, start time) and heart-beats it
//! every second; a stopping process marks its instance stopped. A `running`
//! call's `owner` ends with `@<instance id>`, so recovery can tell a call
//! whose owner is certainly gone — its instance stopped, stopped
//! heart-beating, or (checked at start-up) its pid no longer exists on this
//! host — and take it back at once instead of waiting out the lease. The
//! SQLite recovery itself is here too (`recover_expired`, `has_reclaimable`);
//! PostgreSQL's is in `postgres::instances`, under the same rules.
//!
//! What this module must never do: declare a live process dead, or take a
//! call from a worker of this process that still holds and extends its
//! lease. On this host the kernel decides: a process whose pid is alive keeps
//! its calls until their leases expire, however late its heartbeat (a
//! starved process, a slow disk). For a process on another host the heartbeat decides, with a margin
//! of several beats; and even a wrong verdict there (a process paused longer
//! than that) is safe: its completion is fenced by the attempt and discarded,
//! and `effects.call_id UNIQUE` still allows one effect per call — exactly as
//! when a lease expires.

use super::ids::now;
use super::model::LeaseHeld;
use super::sqlite::sql::audit;
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

/// The instance an owner string names: what follows its `@`, as the SQL
/// joins read it (`CALLS_WITH_OWNER_INSTANCE`). `None` for an owner written by
/// a release before instances.
fn instance_of(owner: &str) -> Option<&str> {
    owner.split_once('@').map(|(_, instance)| instance)
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

/// `?2` for `RECLAIMABLE`.
pub(super) fn heartbeat_cutoff(now: f64) -> f64 {
    now - DEAD_AFTER.as_secs_f64()
}

/// Return to `pending` every `running` call whose lease has expired or whose
/// owner's process is gone (`RECLAIMABLE`), naming each with the owner it
/// was taken from and why — except those that must stay
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
                  WHERE call_id = ?2 AND status = 'running' AND attempt = ?3",
            )?
            .execute(params![now, call.call_id, call.attempt])?;
        if changed == 1 {
            audit(
                conn,
                now,
                &call.call_id,
                call.attempt,
                "recover",
                &call.why(),
            )?;
            recovered.push(call.call_id);
        }
    }
    Ok(recovered)
}

/// A `running` call recovery may take back, and what its owner left behind:
/// what both backends read before they decide.
pub(super) struct Reclaimable {
    pub(super) call_id: String,
    pub(super) attempt: i64,
    pub(super) owner: Option<String>,
    pub(super) lease_until: Option<f64>,
    pub(super) heartbeat_at: Option<f64>,
    pub(super) stopped_at: Option<f64>,
    pub(super) host: Option<String>,
    pub(super) pid: Option<u32>,
    /// The clock the lease is judged by, when this was read.
    pub(super) now: f64,
}

impl Reclaimable {
    /// Whether recovery must leave this call where it is after all: its owner
    /// is alive on this host and its lease valid, or its lease is one this
    /// process's own workers still hold and extend.
    pub(super) fn must_stay(&self, me: &Instance, running_here: &[LeaseHeld]) -> bool {
        self.owner_is_alive_here(me) || self.held_by_a_worker_here(me, running_here)
    }

    /// A silent heartbeat only suggests the owner is gone (it may be starved of
    /// CPU or stuck behind a slow disk). On this host the kernel knows: a live
    /// pid keeps its calls until its lease expires.
    fn owner_is_alive_here(&self, me: &Instance) -> bool {
        let lease_valid = self.lease_until.is_some_and(|until| until > self.now);
        lease_valid
            && self.stopped_at.is_none()
            && self.host.as_deref() == Some(me.host.as_str())
            && self.pid.is_some_and(pid_is_alive)
    }

    /// Whether this lease is one of `running_here`: the leases this process's
    /// own workers hold on tools running now, which it goes on extending.
    /// Such a call stays even once its lease has lapsed: its executor is known
    /// to be alive, and what let the lease lapse was a write that could not
    /// commit in time (a stalled disk, another process holding the write
    /// lock), which the next extension makes good. Taking it back would run
    /// the call a second time.
    fn held_by_a_worker_here(&self, me: &Instance, running_here: &[LeaseHeld]) -> bool {
        let mine = self.owner.as_deref().and_then(instance_of) == Some(me.id.as_str());
        mine && running_here
            .iter()
            .any(|lease| lease.call_id == self.call_id && lease.attempt == self.attempt)
    }

    /// The audit detail: whose lease, and why it was taken.
    pub(super) fn why(&self) -> String {
        let owner = self.owner.as_deref().unwrap_or("-");
        if self.lease_until.is_none_or(|until| until <= self.now) {
            format!("lease expired (owner {owner})")
        } else if self.stopped_at.is_some() {
            format!("owner {owner} is gone (its process stopped or died)")
        } else {
            let silent = self.now - self.heartbeat_at.unwrap_or(self.now);
            format!("owner {owner} is gone (no heartbeat for {silent:.1} s)")
        }
    }
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
