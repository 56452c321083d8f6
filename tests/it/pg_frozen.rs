//! A frozen PostgreSQL: every process of the server stopped with `SIGSTOP`,
//! as a hung host or a disk that stopped answering under the database looks
//! to a client — the kernel still accepts connections and acknowledges what
//! is sent, and nothing answers, so neither TCP keepalive nor the server's
//! `statement_timeout` ever ends a wait. Only the node's own deadline
//! (`--db-timeout-ms`, default 4 s) does.
//!
//! The invariant: with the defaults, `POST`, `GET` and `/healthz` are
//! answered `503` + `Retry-After` within 5 s, again and again while the
//! freeze lasts (no thread or pooled connection is left stuck on the frozen
//! server); when it runs again the node serves at once, and every call it
//! accepted — tools that finished while it was frozen included — completes
//! exactly once: one arrival per effect id at the downstream, one effect
//! per key. The server is always resumed (the guard's drop), even when an
//! assertion fails.

use crate::support::pg_faults::{pay, post, timed, Acks, PayRig, Timed};
use crate::support::{charge, procfs, Server};
use idempotent_tool::temp::postgres::PgServer;
use std::thread;
use std::time::{Duration, Instant};

/// What the defaults promise: `--db-timeout-ms` 4 s, so an answer within
/// 5 s; the slack is for a loaded test machine's scheduling only.
const ANSWERED_WITHIN: Duration = Duration::from_millis(5_500);

/// A node's answers to one wave of requests sent at once while the server
/// is frozen: new keys, a running call by id and by key, `/healthz`.
fn wave(node: &Server, round: &str, running: &(String, String)) -> Vec<(String, Timed)> {
    let (key, call_id) = running;
    thread::scope(|s| {
        let mut asked = Vec::new();
        for i in 0..4 {
            let new_key = format!("frozen-{round}-{i}");
            asked.push(s.spawn(move || {
                let answer = post(node, &new_key, &charge(1));
                (new_key, answer)
            }));
        }
        let by_id = format!("/v1/tool-calls/{call_id}");
        asked.push(s.spawn(move || ("GET by id".into(), timed(node, "GET", &by_id, None, None))));
        let by_key = format!("/v1/tool-calls/by-key/{key}");
        asked.push(s.spawn(move || ("GET by key".into(), timed(node, "GET", &by_key, None, None))));
        asked.push(s.spawn(move || {
            (
                "/healthz".into(),
                timed(node, "GET", "/healthz", None, None),
            )
        }));
        asked.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn assert_all_503_in_time(answers: &[(String, Timed)], node: &Server) -> Duration {
    for (what, answer) in answers {
        assert!(
            answer.is_503_with_retry_after() && answer.took <= ANSWERED_WITHIN,
            "{what} while frozen: {answer:?}\n{}",
            node.stderr()
        );
    }
    answers
        .iter()
        .map(|(_, a)| a.took)
        .max()
        .unwrap_or_default()
}

#[test]
fn a_frozen_database_is_answered_503_in_time_and_everything_accepted_completes_once() {
    let pg = PgServer::start().unwrap_or_else(|e| panic!("{e}"));
    let url = pg.fresh_database("frozen");
    // Each `pay` spends 1.5 s at the downstream: in flight when the server
    // freezes, finished while it is frozen.
    let rig = PayRig::new("pg-frozen", &["--delay-ms", "1500"]);
    let downstream = &rig.downstream;
    let lease = ["--lease-secs", "2", "--recover-interval-ms", "100"];
    let node = rig.node("node", &url, &lease);
    let pid = node.proc.child.id();

    let mut acks = Acks::default();
    for i in 0..3 {
        let key = format!("pay-{i}");
        assert!(
            acks.record(&key, &post(&node, &key, &pay(10 + i))),
            "{acks:?}"
        );
    }
    let running = acks
        .accepted
        .iter()
        .next()
        .map(|(k, v)| (k.clone(), v.clone()));
    let running = running.expect("a call");
    crate::support::eventually("every pay at the downstream", || {
        downstream.stats()["in_flight"].as_i64() == Some(3)
    });
    let threads_before = procfs::thread_count(pid);

    let frozen = pg.freeze().unwrap_or_else(|e| panic!("{e}"));
    let frozen_at = Instant::now();
    let first = wave(&node, "first", &running);
    let to_503 = assert_all_503_in_time(&first, &node);
    // The tools finished meanwhile; their completions wait for the server.
    crate::support::eventually("the pays to return", || {
        downstream.stats()["in_flight"].as_i64() == Some(0)
    });
    // Frozen past the leases (2 s) and a second wave: nothing piled up.
    while frozen_at.elapsed() < Duration::from_secs(7) {
        thread::sleep(Duration::from_millis(50));
    }
    let second = wave(&node, "second", &running);
    let to_503_again = assert_all_503_in_time(&second, &node);
    for (key, answer) in first.iter().chain(&second) {
        if key.starts_with("frozen-") {
            acks.record(key, answer);
        }
    }

    frozen.thaw();
    let thawed_at = Instant::now();
    let back = loop {
        let answer = post(&node, "after-thaw", &charge(2));
        if acks.record("after-thaw", &answer) {
            break thawed_at.elapsed();
        }
        assert!(thawed_at.elapsed() < ANSWERED_WITHIN * 4, "{answer:?}");
        thread::sleep(Duration::from_millis(50));
    };
    acks.retry_refused(&node, |_| charge(1));
    let found = rig.settle(
        "frozen",
        &url,
        &acks,
        frozen_at,
        &[
            ("503 within", to_503),
            ("503 again within", to_503_again),
            ("first 2xx after the thaw", back),
        ],
    );
    found.assert_nothing_lost();
    assert_eq!(found.rerun_calls, 0, "{found:?}");
    assert_eq!(found.acknowledged, 3 + 8 + 1, "{found:?}");
    crate::support::eventually("the threads of the freeze to end", || {
        procfs::thread_count(pid) <= threads_before + 2
    });
}
