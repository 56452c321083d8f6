//! A partition (issue 35, item 5): node x reaches PostgreSQL through the
//! `tcp_proxy` binary, node a directly; the proxy cuts x alone off — first
//! a black hole (nothing relayed, nothing answered: only x's own deadline
//! ends a wait), then resets (every connection RST at once).
//!
//! The invariant: while cut off, x answers `503` + `Retry-After` within its
//! deadline and starts no new work (every claim needs the database), while
//! a goes on accepting; x's running calls — their tools finish meanwhile —
//! are taken back by a once x's heartbeat is 5 s stale, and run again there
//! under the same effect ids; when x is back, its late completions are
//! fenced off (`stale_completion`), and nothing acknowledged is lost: every
//! key succeeded, one effect per key at the reference downstream.

use crate::support::pg_faults::{pay, post, wait_all_terminal, Acks, PayRig, TcpProxy};
use crate::support::{charge, eventually};
use idempotent_tool::temp::postgres::{connect, PgServer, USER};
use std::time::{Duration, Instant};

/// `--db-timeout-ms`'s default and the slack of a loaded test machine.
const ANSWERED_WITHIN: Duration = Duration::from_millis(5_500);

#[test]
fn a_node_cut_off_from_postgres_loses_its_calls_to_the_others_and_nothing_acknowledged() {
    let pg = PgServer::shared();
    let url = pg.fresh_database("partition");
    let dbname = url.rsplit('/').next().unwrap();
    let mut proxy = TcpProxy::start(pg.port());
    let via_proxy = format!(
        "postgres://{USER}:{}@127.0.0.1:{}/{dbname}",
        pg.password(),
        proxy.port
    );
    let rig = PayRig::new("pg-partition", &["--delay-ms", "3000"]);
    let downstream = &rig.downstream;
    let flags = ["--lease-secs", "1.5", "--recover-interval-ms", "100"];
    let x = rig.node("node-x", &via_proxy, &flags);
    let a = rig.node("node-a", &url, &flags);

    let mut acks = Acks::default();
    for (name, node) in [("x", &x), ("a", &a)] {
        for i in 0..3 {
            let key = format!("{name}-{i}");
            assert!(acks.record(&key, &post(node, &key, &pay(i))), "{acks:?}");
        }
    }
    eventually("six pays at the downstream", || {
        downstream.stats()["in_flight"].as_i64() == Some(6)
    });
    let x_calls: Vec<String> = (0..3)
        .map(|i| acks.accepted[&format!("x-{i}")].clone())
        .collect();

    proxy.black_hole();
    let cut_at = Instant::now();
    let refused = post(&x, "x-during-cut", &charge(1));
    assert!(
        refused.is_503_with_retry_after() && refused.took <= ANSWERED_WITHIN,
        "x while cut off: {refused:?}"
    );
    acks.record("x-during-cut", &refused);
    // Which of x's calls the cut caught is read, not assumed: on a slow
    // machine x may have committed its first call just before the cut.
    let mut db = connect(&url);
    let on_x = unsettled(&mut db, &x_calls);
    assert!(!on_x.is_empty(), "the cut caught none of x's calls");
    let on_a = post(&a, "a-during-cut", &charge(2));
    assert!(
        acks.record("a-during-cut", &on_a),
        "a keeps serving: {on_a:?}"
    );
    let taken_over = loop {
        let running_on_a: i64 = db
            .query_one(
                "SELECT count(*) FROM calls WHERE call_id = ANY($1) AND attempt = 2",
                &[&on_x],
            )
            .unwrap()
            .get(0);
        if running_on_a == on_x.len() as i64 {
            break cut_at.elapsed();
        }
        assert!(
            cut_at.elapsed() < Duration::from_secs(60),
            "x's calls never moved"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let x_claims_while_cut: i64 = db
        .query_one(
            "SELECT count(*) FROM audit WHERE event = 'claimed' AND detail LIKE $1
                AND ts > extract(epoch FROM now())::float8 - $2",
            &[
                &format!("{}:%", x.proc.child.id()),
                &cut_at.elapsed().as_secs_f64(),
            ],
        )
        .unwrap()
        .get(0);
    assert_eq!(x_claims_while_cut, 0, "x started nothing while cut off");

    proxy.heal();
    wait_all_terminal(&url, &acks);
    eventually("x's late completions fenced off", || {
        let stale: i64 = connect(&url)
            .query_one(
                "SELECT count(*) FROM audit WHERE event = 'stale_completion'
                    AND attempt = 1 AND call_id = ANY($1)",
                &[&on_x],
            )
            .unwrap()
            .get(0);
        stale == on_x.len() as i64
    });

    // Resets: every connection of x fails at once, and so does every answer.
    proxy.reset();
    let reset = post(&x, "x-during-reset", &charge(3));
    assert!(
        reset.is_503_with_retry_after() && reset.took <= ANSWERED_WITHIN,
        "x while reset: {reset:?}"
    );
    acks.record("x-during-reset", &reset);
    proxy.heal();
    acks.retry_refused(&x, |_| charge(1));
    let found = rig.settle(
        "partition",
        &url,
        &acks,
        cut_at,
        &[
            ("503 from x (black hole) within", refused.took),
            ("503 from x (reset) within", reset.took),
            ("x's calls taken over after the cut", taken_over),
        ],
    );
    assert_eq!(found.lost + found.unfinished, 0, "{found:?}");
    assert_eq!(found.effects_not_one, 0, "one effect per key: {found:?}");
    assert_eq!(
        found.rerun_calls,
        on_x.len(),
        "only x's calls caught by the cut ran again: {found:?}"
    );
}

/// Those of `calls` not yet succeeded, failed or cancelled.
fn unsettled(db: &mut postgres::Client, calls: &[String]) -> Vec<String> {
    db.query(
        "SELECT call_id FROM calls WHERE call_id = ANY($1)
            AND status NOT IN ('succeeded', 'failed', 'cancelled')",
        &[&calls],
    )
    .unwrap()
    .iter()
    .map(|row| row.get(0))
    .collect()
}
