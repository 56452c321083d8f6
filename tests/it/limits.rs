//! Limits shared by every process on the database, shown with the reference
//! downstream recording what reached it: three nodes on one PostgreSQL with
//! a tool capped at 2 (`max_concurrency`) and one at 5 calls per second with
//! a burst of 2 (`rate`); and two processes on one SQLite file with the same
//! rate. Each node has more workers than the cap, so a limit counted per
//! node would let three times as many through. Calls waiting for a slot or a
//! token stay `pending`; the metrics say how long they waited and what held
//! them back.

use crate::support::downstream::{Downstream, ToolsFile};
use crate::support::{Http, Server, TempDb, TempDir};
use idempotent_tool::temp::postgres::{connect, PgServer};
use serde_json::{json, Value};
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

const CAP: i64 = 2;
const PER_SECOND: f64 = 5.0;
const BURST: i64 = 2;
/// Arrivals at the downstream may bunch by the time between a claim and its
/// request, which differs from call to call (a worker's wake-up, a
/// connection) and grows on a loaded machine: up to two tokens' worth more
/// than the claims in a second — still far below what a limit counted per
/// node would let through (three times the rate). The claims themselves, by
/// the database's clock, are held to the bound exactly.
const ARRIVAL_SLACK: i64 = 2;

/// `slow_refund` (capped) at `capped`, `notify` (rated) at `rated`.
fn tools(capped: &Downstream, rated: &Downstream) -> ToolsFile {
    ToolsFile::write(&json!({"tools": {
        "slow_refund": {"kind": "http", "url": capped.url("/refunds"), "max_attempts": 1,
                        "max_concurrency": CAP},
        "notify": {"kind": "http", "url": rated.url("/notify"), "max_attempts": 1,
                   "rate": {"per_second": PER_SECOND, "burst": BURST}}
    }}))
}

/// POST `n` calls of `tool` spread over `nodes` in turn, all at once (one
/// thread each, released together), so they arrive faster than any limit
/// lets them run however slow the machine is; their call ids.
fn post_spread(nodes: &[Server], tool: &str, n: usize) -> Vec<String> {
    let start = Barrier::new(n);
    thread::scope(|s| {
        let posts: Vec<_> = (0..n)
            .map(|i| {
                let (node, start) = (&nodes[i % nodes.len()], &start);
                s.spawn(move || {
                    let body = json!({"tool": tool, "args": {"n": i}});
                    start.wait();
                    // Two processes on one SQLite file contend for its write
                    // lock: a `503` says retry with the same key, as a client would.
                    let deadline = Instant::now() + Duration::from_secs(30);
                    loop {
                        let (status, call) = node.post(&format!("{tool}-{i}"), &body);
                        if status == 503 && Instant::now() < deadline {
                            thread::sleep(Duration::from_millis(50));
                            continue;
                        }
                        assert_eq!(status, 202, "{call}");
                        break call["call_id"].as_str().unwrap().to_string();
                    }
                })
            })
            .collect();
        posts.into_iter().map(|p| p.join().unwrap()).collect()
    })
}

/// The most of `times` (seconds, sorted) within any one second.
fn most_in_one_second(times: &[f64]) -> usize {
    let mut start = 0;
    let mut most = 0;
    for (end, t) in times.iter().enumerate() {
        while t - times[start] >= 1.0 {
            start += 1;
        }
        most = most.max(end + 1 - start);
    }
    most
}

/// Sum over `nodes` of one series of their `/metrics`.
fn summed(nodes: &[Server], name: &str, labels: &[(&str, &str)]) -> f64 {
    nodes
        .iter()
        .map(|n| n.scrape().value(name, labels).unwrap_or(0.0))
        .sum()
}

/// Right after the calls are posted, some still wait `pending` with no
/// error (the rate holds them; none failed for it); in the end all succeed.
fn waiting_then_succeeded(node: &Server, ids: &[String]) {
    let statuses: Vec<Value> = ids
        .iter()
        .map(|id| node.get(&format!("/v1/tool-calls/{id}")).1)
        .collect();
    let waiting = statuses
        .iter()
        .filter(|c| c["status"] == "pending" && c["error"].is_null())
        .count();
    let seen: Vec<&Value> = statuses.iter().map(|c| &c["status"]).collect();
    assert!(waiting > 0, "none waited: {seen:?}");
    for id in ids {
        let done = node.wait_terminal(id);
        assert_eq!(done["status"], "succeeded", "{done}");
    }
}

/// Three nodes, `--workers 4` each, one database: the capped tool never has
/// more than 2 requests at its downstream at once, the rated one never more
/// than 5 + 2 arrivals in a second (nor claims, by the database's clock),
/// calls wait `pending` meanwhile, every call succeeds once, and the nodes'
/// metrics show waits on each limit.
#[test]
fn three_nodes_share_one_cap_and_one_rate() {
    let url = PgServer::shared().fresh_database("limits_nodes");
    let capped = Downstream::start(&["--delay-ms", "300"]);
    let rated = Downstream::start(&[]);
    let file = tools(&capped, &rated);
    let scratch = TempDir::new("idem-limits").unwrap();
    let flags = ["--tools", file.path_str(), "--workers", "4"];
    let nodes: Vec<Server> = (0..3)
        .map(|_| Server::start_on_postgres(&url, &flags, &scratch))
        .collect();
    let (slow, fast) = thread::scope(|s| {
        let slow = s.spawn(|| post_spread(&nodes, "slow_refund", 18));
        let fast = s.spawn(|| post_spread(&nodes, "notify", 20));
        (slow.join().unwrap(), fast.join().unwrap())
    });
    waiting_then_succeeded(&nodes[1], &fast);
    for id in &slow {
        assert_eq!(nodes[2].wait_terminal(id)["status"], "succeeded");
    }

    let (capped_stats, rated_stats) = (capped.stats(), rated.stats());
    let mut db = connect(&url);
    let claims: Vec<f64> = db
        .query(
            "SELECT a.ts FROM audit a JOIN calls c ON c.call_id = a.call_id
              WHERE a.event = 'claimed' AND c.tool = 'notify' ORDER BY a.ts",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let owners: i64 = db
        .query_one(
            "SELECT count(DISTINCT split_part(detail, ':', 1)) FROM audit
              WHERE event = 'claimed'",
            &[],
        )
        .unwrap()
        .get(0);
    let bound = PER_SECOND as i64 + BURST;
    eprintln!(
        "limits, 3 nodes: slow_refund max in flight {} (cap {CAP}); notify at most {} \
         arrivals and {} claims in one second (rate {PER_SECOND} + burst {BURST}); \
         {owners} nodes claimed",
        capped_stats["max_in_flight"],
        rated_stats["max_per_second"],
        most_in_one_second(&claims)
    );
    assert!(
        capped_stats["max_in_flight"].as_i64().unwrap() <= CAP,
        "{capped_stats}"
    );
    assert!(
        rated_stats["max_per_second"].as_i64().unwrap() <= bound + ARRIVAL_SLACK,
        "{rated_stats}"
    );
    assert!(most_in_one_second(&claims) as i64 <= bound, "{claims:?}");
    assert_eq!(claims.len(), 20, "each call claimed once");
    assert_eq!(
        (&capped_stats["effects"], &rated_stats["effects"]),
        (&json!(18), &json!(20))
    );

    let rate = [("tool", "notify"), ("limit", "rate")];
    let cap = [("tool", "slow_refund"), ("limit", "concurrency")];
    let wait_count = "idempotent_tool_limit_wait_seconds_count";
    assert_eq!(summed(&nodes, wait_count, &rate), 20.0);
    assert_eq!(summed(&nodes, wait_count, &cap), 18.0);
    let deferrals = "idempotent_tool_limit_deferrals_total";
    assert!(
        summed(&nodes, deferrals, &rate) > 0.0,
        "the rate held calls back"
    );
    assert!(
        summed(&nodes, deferrals, &cap) > 0.0,
        "the cap held calls back"
    );
    let waited = summed(&nodes, "idempotent_tool_limit_wait_seconds_sum", &rate);
    assert!(waited > 1.0, "calls waited for tokens: {waited} s in all");
}

/// Two processes on one SQLite file share one bucket: the downstream never
/// sees more than 5 + 2 arrivals in a second, whichever process claims.
#[test]
fn two_processes_on_one_sqlite_file_share_one_rate() {
    let capped = Downstream::start(&[]);
    let rated = Downstream::start(&[]);
    let file = tools(&capped, &rated);
    let db = TempDb::new("limits-sqlite");
    let flags = ["--tools", file.path_str(), "--recover-interval-ms", "100"];
    let nodes = [Server::start(&db, &flags), Server::start(&db, &flags)];
    let ids = post_spread(&nodes, "notify", 16);
    waiting_then_succeeded(&nodes[0], &ids);
    let stats = rated.stats();
    let claims: Vec<f64> = nodes[0]
        .sql()
        .prepare(
            "SELECT a.ts FROM audit a JOIN calls c ON c.call_id = a.call_id
              WHERE a.event = 'claimed' AND c.tool = 'notify' ORDER BY a.ts",
        )
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    eprintln!(
        "limits, SQLite: notify at most {} arrivals and {} claims in one second \
         (rate {PER_SECOND} + burst {BURST})",
        stats["max_per_second"],
        most_in_one_second(&claims)
    );
    let bound = PER_SECOND as i64 + BURST;
    assert!(
        stats["max_per_second"].as_i64().unwrap() <= bound + ARRIVAL_SLACK,
        "{stats}"
    );
    assert!(most_in_one_second(&claims) as i64 <= bound, "{claims:?}");
    assert_eq!(stats["effects"], 16);
}
