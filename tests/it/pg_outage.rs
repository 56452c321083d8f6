//! A short PostgreSQL outage under two nodes with calls in flight (issue 35,
//! item 3). Before, with a 2 s lease a 5 s outage made calls that had
//! finished on their node run a second time: the node held their
//! completions, the leases lapsed on the database's clock meanwhile, and the
//! first node back reclaimed them.
//!
//! The invariant: an outage shorter than `DEAD_AFTER` (5 s), longer than
//! the lease, with `pay` calls running on both nodes (finishing while the
//! database is down), ends with every call succeeded on attempt 1 — one
//! arrival per effect id at the reference downstream, no `recover` row: a
//! live node keeps its lapsed leases and commits what it holds. And an
//! outage during which one node really died (`kill -9`) still has that
//! node's calls taken back by the other, which runs them under the same
//! effect ids: one effect per key at the downstream.

use crate::support::downstream::Downstream;
use crate::support::pg_faults::{pay, post, Acks, PayRig};
use crate::support::{eventually, Server};
use idempotent_tool::temp::postgres::{connect, PgServer};
use std::time::{Duration, Instant};

/// Flags of both nodes: a lease well inside the outage, recovery often.
const FLAGS: [&str; 4] = ["--lease-secs", "1.5", "--recover-interval-ms", "100"];

/// `n` `pay` calls on each of `nodes`, accepted; returns once every one is
/// at the downstream.
fn pays_in_flight(nodes: &[&Server], round: &str, n: u64, downstream: &Downstream) -> Acks {
    let mut acks = Acks::default();
    for (i, node) in nodes.iter().enumerate() {
        for j in 0..n {
            let key = format!("{round}-{i}-{j}");
            let answer = post(node, &key, &pay(100 * i as u64 + j));
            assert!(acks.record(&key, &answer), "{answer:?}");
        }
    }
    let expected = (n as usize * nodes.len()) as i64;
    eventually("every pay at the downstream", || {
        downstream.stats()["in_flight"].as_i64() == Some(expected)
    });
    acks
}

/// How many `recover` audit rows the accepted calls have.
fn recovered(url: &str, acks: &Acks) -> i64 {
    let ids: Vec<&str> = acks.accepted.values().map(String::as_str).collect();
    connect(url)
        .query_one(
            "SELECT count(*) FROM audit WHERE event = 'recover' AND call_id = ANY($1)",
            &[&ids],
        )
        .unwrap()
        .get(0)
}

#[test]
fn a_short_outage_reruns_nothing_and_a_node_dead_in_one_is_still_taken_over() {
    let pg = PgServer::start().unwrap_or_else(|e| panic!("{e}"));
    let url = pg.fresh_database("outage");
    // Each pay spends a second at the downstream: it finishes while the
    // database is down, and its completion waits on its node.
    let rig = PayRig::new("pg-outage", &["--delay-ms", "1000"]);
    let downstream = &rig.downstream;
    let a = rig.node("node-a", &url, &FLAGS);
    let mut b = rig.node("node-b", &url, &FLAGS);

    // A 3 s outage: past the 1.5 s lease, short of DEAD_AFTER.
    let short = pays_in_flight(&[&a, &b], "short", 3, downstream);
    pg.stop_immediate().unwrap_or_else(|e| panic!("{e}"));
    let down_at = Instant::now();
    eventually("the pays to return", || {
        downstream.stats()["in_flight"].as_i64() == Some(0)
    });
    while down_at.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(50));
    }
    pg.start_again().unwrap_or_else(|e| panic!("{e}"));
    let outage = down_at.elapsed();
    let found = rig.settle("short outage", &url, &short, down_at, &[("outage", outage)]);
    found.assert_nothing_lost();
    assert_eq!(found.rerun_calls, 0, "nothing ran twice: {found:?}");
    assert_eq!(recovered(&url, &short), 0, "no lease was taken back");

    // Another outage, during which node b really dies with calls in flight.
    let dead = pays_in_flight(&[&b], "dead", 3, downstream);
    pg.stop_immediate().unwrap_or_else(|e| panic!("{e}"));
    let down_at = Instant::now();
    b.kill();
    std::thread::sleep(Duration::from_millis(500));
    pg.start_again().unwrap_or_else(|e| panic!("{e}"));
    let outage = down_at.elapsed();
    let found = rig.settle(
        "node dead in the outage",
        &url,
        &dead,
        down_at,
        &[("outage", outage)],
    );
    found.assert_nothing_lost();
    assert_eq!(recovered(&url, &dead), 3, "b's calls taken back");
    let mut db = connect(&url);
    for call_id in dead.accepted.values() {
        let owner: String = db
            .query_one(
                "SELECT detail FROM audit WHERE call_id = $1 AND event = 'claimed'
                  ORDER BY id DESC LIMIT 1",
                &[call_id],
            )
            .unwrap()
            .get(0);
        let a_pid = a.proc.child.id().to_string();
        assert!(owner.starts_with(&format!("{a_pid}:")), "{owner}");
    }
}
