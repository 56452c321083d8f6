//! Instance identity and liveness, the rules behind instant reclaim on both
//! backends. Each process that opens the store registers an instance (id,
//! pid, host, start time) and heart-beats it every `HEARTBEAT_EVERY`; a
//! stopping process marks its instance stopped. A `running` call's `owner`
//! ends with `@<instance id>`, so recovery can tell a call whose owner is
//! certainly gone — its instance stopped, stopped heart-beating, or (checked
//! at start-up) its pid no longer exists on this host — and take it back at
//! once instead of waiting out the lease. `Reclaimable` decides, call by
//! call; each backend's `instances` reads the candidates and writes the
//! registry in its own SQL.
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

use super::model::LeaseHeld;
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

/// The owner string of a worker of this process: `pid:thread@instance`, so a
/// row tells a person which process and worker held it, and recovery which
/// instance to check.
pub fn owner_name(me: &Instance, thread: &str) -> String {
    format!("{}:{thread}@{}", me.pid, me.id)
}

/// The instance an owner string names: what follows its `@`, as each
/// backend's recovery query joins it. `None` for an owner written by
/// a release before instances.
fn instance_of(owner: &str) -> Option<&str> {
    owner.split_once('@').map(|(_, instance)| instance)
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
        self.owned_by(me)
            && running_here
                .iter()
                .any(|lease| lease.call_id == self.call_id && lease.attempt == self.attempt)
    }

    /// Whether the owner is this process's instance.
    pub(super) fn owned_by(&self, me: &Instance) -> bool {
        self.owner.as_deref().and_then(instance_of) == Some(me.id.as_str())
    }

    /// Whether the owner's instance is marked stopped: certainly gone.
    pub(super) fn owner_stopped(&self) -> bool {
        self.stopped_at.is_some()
    }

    /// Whether the owner has an instance row to judge it by (an owner
    /// written before instances existed, or unregistered, has none: only
    /// its lease speaks for it).
    pub(super) fn owner_registered(&self) -> bool {
        self.heartbeat_at.is_some()
    }

    /// Whether the owner ran on this host and its pid is gone: the kernel
    /// says it is dead, whatever its heartbeat.
    pub(super) fn owner_is_dead_here(&self, me: &Instance) -> bool {
        self.host.as_deref() == Some(me.host.as_str()) && self.pid.is_some_and(|p| !pid_is_alive(p))
    }

    /// Whether the owner's last heartbeat is `DEAD_AFTER` old or older, by
    /// the clock the lease is judged by.
    pub(super) fn heartbeat_is_stale(&self) -> bool {
        self.heartbeat_at
            .is_some_and(|at| at <= self.now - DEAD_AFTER.as_secs_f64())
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

/// Whether an instance is alive by recovery's rule: not stopped, and heard
/// from within `DEAD_AFTER` of `now` (the clock its heartbeat was written
/// by: this host's on SQLite, the database's on PostgreSQL). Recovery takes
/// back the calls of an instance this says is not alive.
pub(super) fn is_alive(heartbeat_at: f64, stopped_at: Option<f64>, now: f64) -> bool {
    stopped_at.is_none() && heartbeat_at > now - DEAD_AFTER.as_secs_f64()
}

/// One service instance, as `GET /v1/nodes` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub instance_id: String,
    pub host: String,
    pub pid: i64,
    pub started_at: f64,
    pub heartbeat_at: f64,
    pub stopped_at: Option<f64>,
    /// By `is_alive`, at the moment it was read.
    pub alive: bool,
    /// Calls `running` under an owner of this instance.
    pub running: i64,
}

/// The most instances `nodes` lists: the ones heard from last. Every
/// restart adds one, and stopped ones are kept (recovery reads them).
pub const NODES_LISTED: usize = 100;

impl Node {
    /// `row` with `alive` judged at `now` and its running calls, from the
    /// `(instance id, running)` counts (an instance with none is absent).
    pub(super) fn judged(mut self, now: f64, running: &[(String, i64)]) -> Node {
        self.alive = is_alive(self.heartbeat_at, self.stopped_at, now);
        self.running = running
            .iter()
            .find(|(id, _)| *id == self.instance_id)
            .map_or(0, |(_, n)| *n);
        self
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "instance_id": self.instance_id,
            "host": self.host,
            "pid": self.pid,
            "started_at": self.started_at,
            "heartbeat_at": self.heartbeat_at,
            "stopped_at": self.stopped_at,
            "alive": self.alive,
            "running": self.running,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Alive is recovery's rule: stopped or silent past `DEAD_AFTER` is not.
    #[test]
    fn alive_follows_the_rule_recovery_uses() {
        let now = 1_000.0;
        let dead_after = DEAD_AFTER.as_secs_f64();
        assert!(is_alive(now - 1.0, None, now));
        assert!(!is_alive(now - dead_after, None, now));
        assert!(!is_alive(now, Some(now - 1.0), now));
        let node = Node {
            instance_id: "i_a".into(),
            host: "h".into(),
            pid: 1,
            started_at: 0.0,
            heartbeat_at: now,
            stopped_at: None,
            alive: false,
            running: 0,
        }
        .judged(now, &[("i_b".into(), 2), ("i_a".into(), 3)]);
        assert!(node.alive);
        assert_eq!(node.running, 3);
    }
}
