//! Failover (issue 35, item 4): two nodes on a multi-host URL
//! (`postgres://…@127.0.0.1:P1,127.0.0.1:P2/db?target_session_attrs=
//! read-write`) over a primary and its streaming standby, both from the
//! distribution's binaries (`pg_basebackup -R`), replication synchronous
//! (`synchronous_standby_names = '*'`). Under load the primary is killed
//! (`kill -9` of every process: its machine died) and the standby promoted.
//!
//! The invariant: both nodes find the new primary by themselves (the first
//! host refuses, the second answers read-only until promoted, then
//! read-write) and serve again within seconds of the promotion; every key a
//! client was answered `2xx` for is on the new primary with its call and
//! succeeds — 0 acknowledged calls lost, because a commit returned only once
//! the standby had it — with one effect per key at the downstream.

use crate::support::pg_faults::{pay, post, Acks, PayRig};
use crate::support::{Server, DEADLINE};
use idempotent_tool::temp::postgres::{PgServer, USER};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

/// What the load saw: the keys answered and refused, and when each node
/// first answered `2xx` after `since` (set when the primary dies).
#[derive(Default)]
struct Seen {
    acks: Acks,
    since: Option<Instant>,
    back: [Option<Duration>; 2],
}

/// Four clients posting `pay`s with new keys, alternating nodes; a refused
/// key is sent again (same key, the other node) until accepted or `stop`.
fn load(nodes: &[Server; 2], seen: &Mutex<Seen>, stop: &AtomicBool) {
    thread::scope(|s| {
        for t in 0..4u64 {
            s.spawn(move || {
                let mut n = 0u64;
                let mut tries = 0usize;
                while !stop.load(Ordering::SeqCst) {
                    let key = format!("fo-{t}-{n}");
                    let which = (t as usize + tries) % 2;
                    let answer = post(&nodes[which], &key, &pay(t * 1_000 + n));
                    let mut seen = seen.lock().unwrap();
                    if seen.acks.record(&key, &answer) {
                        if let Some(since) = seen.since {
                            seen.back[which].get_or_insert_with(|| since.elapsed());
                        }
                        n += 1;
                        tries = 0;
                    } else {
                        tries += 1;
                        drop(seen);
                        thread::sleep(Duration::from_millis(50));
                    }
                }
            });
        }
    });
}

fn wait_until(what: &str, seen: &Mutex<Seen>, done: impl Fn(&Seen) -> bool) {
    let started = Instant::now();
    while !done(&seen.lock().unwrap()) {
        assert!(started.elapsed() < DEADLINE, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_nodes_follow_a_promoted_standby_and_lose_nothing_acknowledged() {
    let primary = PgServer::start().unwrap_or_else(|e| panic!("{e}"));
    let first_url = primary.fresh_database("failover");
    let dbname = first_url.rsplit('/').next().unwrap().to_string();
    let standby = primary.start_standby().unwrap_or_else(|e| panic!("{e}"));
    primary.set("synchronous_standby_names", "*");
    primary
        .wait_for_standby(true)
        .unwrap_or_else(|e| panic!("{e}"));
    let url = format!(
        "postgres://{USER}:{}@127.0.0.1:{},127.0.0.1:{}/{dbname}?target_session_attrs=read-write",
        primary.password(),
        primary.port(),
        standby.port()
    );
    let rig = PayRig::new("pg-failover", &[]);
    let flags = ["--lease-secs", "2", "--recover-interval-ms", "100"];
    let nodes = [
        rig.node("node-a", &url, &flags),
        rig.node("node-b", &url, &flags),
    ];

    let seen = Mutex::new(Seen::default());
    let stop = AtomicBool::new(false);
    let (killed_after, killed_at, promoted_after) = thread::scope(|s| {
        s.spawn(|| load(&nodes, &seen, &stop));
        wait_until("30 acknowledged", &seen, |s| s.acks.accepted.len() >= 30);
        primary.kill_all().unwrap_or_else(|e| panic!("{e}"));
        let killed_at = Instant::now();
        let before = seen.lock().unwrap().acks.accepted.len();
        seen.lock().unwrap().since = Some(killed_at);
        standby.promote().unwrap_or_else(|e| panic!("{e}"));
        let promoted = killed_at.elapsed();
        wait_until("both nodes back", &seen, |s| {
            s.back.iter().all(Option::is_some)
        });
        wait_until("20 more acknowledged", &seen, |s| {
            s.acks.accepted.len() >= before + 20
        });
        stop.store(true, Ordering::SeqCst);
        (before, killed_at, promoted)
    });
    let mut seen = seen.into_inner().unwrap();
    seen.acks.retry_refused(&nodes[0], |key| {
        let mut parts = key.split('-').skip(1).map(|p| p.parse::<u64>().unwrap());
        let (t, n) = (parts.next().unwrap(), parts.next().unwrap());
        pay(t * 1_000 + n)
    });
    let new_primary = standby.url_for(&dbname);
    let back = |i: usize| seen.back[i].unwrap_or_default();
    let found = rig.settle(
        "failover (synchronous)",
        &new_primary,
        &seen.acks,
        killed_at,
        &[
            ("promoted after the kill", promoted_after),
            ("node a serving after the kill", back(0)),
            ("node b serving after the kill", back(1)),
        ],
    );
    eprintln!("[failover] {killed_after} acknowledged before the kill");
    found.assert_nothing_lost();
    for (node, took) in ["a", "b"].iter().zip(&seen.back) {
        let took = took.unwrap_or_default();
        assert!(
            took < promoted_after + Duration::from_secs(15),
            "node {node} served again {took:?} after the kill (promoted after {promoted_after:?})"
        );
    }
}
