//! Several service processes on one PostgreSQL database (issue 16): the
//! guarantees hold across nodes, not only inside one. Every test starts real
//! `idempotent-tool` processes with `--db postgres://…` on a database of the
//! private test PostgreSQL (`idempotent_tool::temp::postgres`), talks HTTP to
//! them, and reads the database directly for the evidence. Nodes are killed on
//! drop, and on failure their stderr is printed.
//!
//! Which node runs a call is not up to the test (every node polls for pending
//! work and is woken by the others): a test that needs "the node running
//! calls" finds it from the call's `owner`, which starts with the owner's pid.

use crate::support::{address_after, charge, signal, Proc, DEADLINE, SERVER_BIN};
use idempotent_tool::temp::postgres::{connect, PgServer};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

/// The service's default lease. A call of a dead or stopped node finished well
/// before it was taken back by the node's instance record, not by the lease.
const LEASE: Duration = Duration::from_secs(30);

/// One service process on the shared database.
struct Node {
    proc: Proc,
    /// `http://127.0.0.1:PORT`
    base: String,
}

impl Node {
    fn start(name: &str, url: &str, extra: &[&str]) -> Node {
        let mut args = vec!["--port", "0", "--db", url];
        args.extend_from_slice(extra);
        let (proc, line) = Proc::start(name, SERVER_BIN, &args, "listening on http://");
        let base = format!("http://{}", address_after(&line, "listening on http://"));
        Node { proc, base }
    }

    fn pid(&self) -> u32 {
        self.proc.child.id()
    }

    fn call(&self, method: &str, path: &str, key: Option<&str>, body: Option<&Value>) -> Answer {
        let headers: Vec<(&str, &str)> = key.map(|k| ("Idempotency-Key", k)).into_iter().collect();
        let body = body.map(Value::to_string);
        let resp = idempotent_tool::client::request_once(
            &self.base,
            method,
            path,
            &headers,
            body.as_deref().map(str::as_bytes),
            Some(DEADLINE),
        );
        match resp {
            Ok(resp) => Answer {
                status: resp.status,
                retry_after: resp.header("retry-after").map(str::to_string),
                body: resp.json(),
            },
            Err(e) => panic!(
                "{method} {path} on {}: {e}; stderr:\n{}",
                self.proc.name,
                self.proc.stderr()
            ),
        }
    }

    fn post(&self, key: &str, body: &Value) -> Answer {
        self.call("POST", "/v1/tool-calls", Some(key), Some(body))
    }

    /// Long-poll the call on this node until it is terminal.
    fn wait_terminal(&self, call_id: &str) -> Value {
        let start = Instant::now();
        loop {
            let answer = self.call(
                "GET",
                &format!("/v1/tool-calls/{call_id}?wait=5"),
                None,
                None,
            );
            assert!(matches!(answer.status, 200 | 202), "{answer:?}");
            if matches!(answer.body["status"].as_str(), Some("succeeded" | "failed")) {
                return answer.body;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "call {call_id} never finished on {}: {answer:?}",
                self.proc.name
            );
        }
    }
}

/// One HTTP answer: what the tests look at.
#[derive(Debug)]
struct Answer {
    status: u16,
    retry_after: Option<String>,
    body: Value,
}

impl Answer {
    fn call_id(&self) -> String {
        let id = self.body["call_id"].as_str();
        id.unwrap_or_else(|| panic!("no call id in {self:?}"))
            .to_string()
    }
}

/// A fresh database on the shared test PostgreSQL and `n` nodes on it.
struct Cluster {
    url: String,
    nodes: Vec<Node>,
}

impl Cluster {
    fn start(prefix: &str, n: usize, extra: &[&str]) -> Cluster {
        let url = PgServer::shared().fresh_database(prefix);
        Cluster::on(url, n, extra)
    }

    fn on(url: String, n: usize, extra: &[&str]) -> Cluster {
        let nodes = (0..n)
            .map(|i| Node::start(&format!("node-{i}"), &url, extra))
            .collect();
        Cluster { url, nodes }
    }

    fn db(&self) -> postgres::Client {
        connect(&self.url)
    }

    fn count(&self, sql: &str) -> i64 {
        self.db()
            .query_one(sql, &[])
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .get(0)
    }

    /// The pid of the process holding each `running` call's lease.
    fn running_owners(&self) -> BTreeMap<String, u32> {
        let rows = self
            .db()
            .query(
                "SELECT call_id, owner FROM calls WHERE status = 'running'",
                &[],
            )
            .expect("read running calls");
        rows.iter()
            .map(|row| {
                let owner: String = row.get(1);
                (row.get(0), owner_pid(&owner))
            })
            .collect()
    }

    fn audit_events(&self, call_id: &str) -> Vec<String> {
        let rows = self
            .db()
            .query(
                "SELECT event FROM audit WHERE call_id = $1 ORDER BY id",
                &[&call_id],
            )
            .expect("read audit");
        rows.iter().map(|row| row.get(0)).collect()
    }

    /// Poll until every call in `ids` is `running`; their owners' pids.
    fn wait_all_running(&self, ids: &[String]) -> BTreeMap<String, u32> {
        let start = Instant::now();
        loop {
            let owners = self.running_owners();
            if ids.iter().all(|id| owners.contains_key(id)) {
                return owners;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "not all of {ids:?} started running: {owners:?}"
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    fn node_with_pid(&self, pid: u32) -> usize {
        let found = self.nodes.iter().position(|n| n.pid() == pid);
        found.unwrap_or_else(|| panic!("no node has pid {pid}"))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if thread::panicking() {
            if let Ok(mut db) = postgres::Client::connect(&self.url, postgres::NoTls) {
                let _ = db.batch_execute("SET search_path = idempotent_tool");
                let rows = db.query(
                    "SELECT call_id || '|' || idem_key || '|' || status || '|' || attempt \
                            || '|' || coalesce(owner, '') FROM calls ORDER BY created_at LIMIT 50",
                    &[],
                );
                let rows: Vec<String> = rows.into_iter().flatten().map(|r| r.get(0)).collect();
                eprintln!("----- calls -----\n{}", rows.join("\n"));
            }
        }
    }
}

/// An owner is `{pid}:{thread}@{instance}`.
fn owner_pid(owner: &str) -> u32 {
    let pid = owner.split(':').next().and_then(|p| p.parse().ok());
    pid.unwrap_or_else(|| panic!("owner {owner:?} does not start with a pid"))
}

fn sleep_call(seconds: f64) -> Value {
    json!({"tool": "sleep", "args": {"seconds": seconds}})
}

fn assert_accepted(answer: &Answer) {
    assert!(matches!(answer.status, 200..=202), "{answer:?}");
}

/// The same key sent to all three nodes at the same moment makes one call and
/// one effect: `UNIQUE (tenant, idem_key)` decides across processes, and every
/// node answers with the winner's call.
#[test]
fn one_key_sent_to_three_nodes_at_once_makes_one_call_and_one_effect() {
    let cluster = Cluster::start("nodes_same_key", 3, &[]);
    const ROUNDS: usize = 5;
    const SENDERS: usize = 9;
    for round in 0..ROUNDS {
        let key = format!("same-key-{round}");
        let barrier = Barrier::new(SENDERS);
        let answers: Vec<Answer> = thread::scope(|s| {
            let senders: Vec<_> = (0..SENDERS)
                .map(|i| {
                    let (node, key, barrier) = (&cluster.nodes[i % 3], &key, &barrier);
                    s.spawn(move || {
                        barrier.wait();
                        node.post(key, &charge(7))
                    })
                })
                .collect();
            senders.into_iter().map(|h| h.join().unwrap()).collect()
        });
        answers.iter().for_each(assert_accepted);
        let ids: BTreeSet<String> = answers.iter().map(Answer::call_id).collect();
        assert_eq!(ids.len(), 1, "round {round}: {answers:?}");
        let id = ids.into_iter().next().unwrap();
        let done = cluster.nodes[round % 3].wait_terminal(&id);
        assert_eq!(done["status"], "succeeded", "{done}");
    }
    assert_eq!(cluster.count("SELECT count(*) FROM calls"), ROUNDS as i64);
    assert_eq!(cluster.count("SELECT count(*) FROM effects"), ROUNDS as i64);
    let claims = cluster.count("SELECT count(*) FROM audit WHERE event = 'claimed'");
    assert_eq!(claims, ROUNDS as i64, "each call was claimed once");
}

/// `kill -9` of a node running calls: another node finishes them within
/// seconds — long before their 30 s leases expire — because the dead node's
/// heartbeat stops and its instance counts as gone.
#[test]
fn calls_of_a_killed_node_are_finished_by_another_within_seconds() {
    let mut cluster = Cluster::start("nodes_kill", 3, &[]);
    let ids: Vec<String> = (0..6)
        .map(|i| {
            let answer = cluster.nodes[i % 3].post(&format!("kill-{i}"), &sleep_call(6.0));
            assert_accepted(&answer);
            answer.call_id()
        })
        .collect();
    let owners = cluster.wait_all_running(&ids);
    let victim_pid = *owners.values().next().unwrap();
    let orphaned: Vec<String> = owners
        .iter()
        .filter(|(_, pid)| **pid == victim_pid)
        .map(|(id, _)| id.clone())
        .collect();
    let victim = cluster.node_with_pid(victim_pid);
    cluster.nodes[victim].proc.kill();
    let killed_at = Instant::now();
    let survivor = &cluster.nodes[(victim + 1) % 3];
    for id in &ids {
        let done = survivor.wait_terminal(id);
        assert_eq!(done["status"], "succeeded", "{done}");
    }
    let took = killed_at.elapsed();
    assert!(
        took < LEASE - Duration::from_secs(5),
        "the killed node's calls took {took:?}: they waited for their leases"
    );
    for id in &orphaned {
        let done = survivor.wait_terminal(id);
        assert_eq!(done["attempt"], 2, "{done}");
        let pid = owner_pid(done["owner"].as_str().unwrap_or("0:"));
        assert_ne!(pid, victim_pid, "{done}");
        let events = cluster.audit_events(id);
        assert_eq!(
            events.iter().filter(|e| *e == "claimed").count(),
            2,
            "{events:?}"
        );
    }
}

/// A `?wait` on one node is answered as soon as another node completes the
/// call (the nodes share no memory: the waiter learns it from the database,
/// woken by the completing node's NOTIFY or its own re-read).
#[test]
fn a_wait_on_one_node_is_answered_for_a_call_another_node_runs() {
    let cluster = Cluster::start("nodes_wait", 2, &[]);
    let answer = cluster.nodes[0].post("wait-across", &sleep_call(1.5));
    assert_accepted(&answer);
    let id = answer.call_id();
    let owners = cluster.wait_all_running(std::slice::from_ref(&id));
    let runner = cluster.node_with_pid(owners[&id]);
    let waiter = &cluster.nodes[1 - runner];
    let asked = Instant::now();
    let answer = waiter.call("GET", &format!("/v1/tool-calls/{id}?wait=30"), None, None);
    let answered = Instant::now();
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(answer.body["status"], "succeeded", "{answer:?}");
    // How long ago the call completed, by the database's clock, at the moment
    // the waiter answered: the wake-up's delay.
    let since_completion: f64 = cluster
        .db()
        .query_one(
            "SELECT extract(epoch FROM clock_timestamp())::float8 - updated_at \
               FROM calls WHERE call_id = $1",
            &[&id],
        )
        .unwrap()
        .get(0);
    let delay = since_completion - answered.elapsed().as_secs_f64();
    eprintln!(
        "wait answered {:.0} ms after the other node's completion (asked {:.0} ms before)",
        delay * 1e3,
        (answered - asked).as_secs_f64() * 1e3
    );
    assert!(
        delay < 1.0,
        "the waiter answered {delay:.3} s after the completion"
    );
}

/// SIGTERM of a node whose tools outlast the stop's grace period: it gives its
/// leases back, and the other node runs the calls at once, not after the
/// leases expire.
#[test]
fn sigterm_of_one_node_releases_its_leases_to_the_others() {
    let mut cluster = Cluster::start("nodes_sigterm", 2, &["--shutdown-grace-secs", "0.5"]);
    let ids: Vec<String> = (0..4)
        .map(|i| {
            let answer = cluster.nodes[i % 2].post(&format!("term-{i}"), &sleep_call(5.0));
            assert_accepted(&answer);
            answer.call_id()
        })
        .collect();
    let owners = cluster.wait_all_running(&ids);
    let stopping_pid = *owners.values().next().unwrap();
    let released: Vec<String> = owners
        .iter()
        .filter(|(_, pid)| **pid == stopping_pid)
        .map(|(id, _)| id.clone())
        .collect();
    let stopping = cluster.node_with_pid(stopping_pid);
    signal(&cluster.nodes[stopping].proc.child, "TERM");
    let stopped_at = Instant::now();
    assert!(
        cluster.nodes[stopping].proc.wait_exit(DEADLINE),
        "the node did not stop"
    );
    let other = &cluster.nodes[1 - stopping];
    for id in &released {
        let done = other.wait_terminal(id);
        assert_eq!(done["status"], "succeeded", "{done}");
        assert_eq!(done["attempt"], 2, "{done}");
        assert_ne!(
            owner_pid(done["owner"].as_str().unwrap_or("0:")),
            stopping_pid
        );
        let events = cluster.audit_events(id);
        assert!(events.iter().any(|e| e == "released"), "{events:?}");
    }
    let took = stopped_at.elapsed();
    assert!(
        took < LEASE - Duration::from_secs(5),
        "the released calls took {took:?}: they waited for their leases"
    );
}

/// PostgreSQL goes down under a client and comes back: while it is down the
/// node answers `503` with `Retry-After` (never `500`, never a hang), it
/// reconnects by itself when the database is back, every call it accepted is
/// still there and finishes, and a same-key retry of each refused request
/// makes exactly one call: no duplicate effect anywhere.
#[test]
fn postgres_restart_under_a_client_costs_only_503s() {
    let pg = PgServer::start().unwrap_or_else(|e| panic!("{e}"));
    let cluster = Cluster::on(pg.fresh_database("nodes_restart"), 1, &[]);
    let node = &cluster.nodes[0];
    let mut accepted = BTreeMap::new();
    let mut refused = Vec::new();
    let mut n = 0;
    let mut send = |accepted: &mut BTreeMap<String, String>, refused: &mut Vec<String>| {
        n += 1;
        let key = format!("restart-{n}");
        let answer = node.post(&key, &charge(1));
        match answer.status {
            200..=202 => {
                accepted.insert(key, answer.call_id());
                true
            }
            503 => {
                assert!(
                    answer.retry_after.is_some(),
                    "503 without Retry-After: {answer:?}"
                );
                assert_eq!(answer.body["error"]["code"], "unavailable", "{answer:?}");
                refused.push(key);
                false
            }
            _ => panic!("only 2xx or 503 while PostgreSQL restarts: {answer:?}"),
        }
    };
    for _ in 0..20 {
        assert!(
            send(&mut accepted, &mut refused),
            "refused before the fault"
        );
    }
    pg.stop_immediate().expect("stop PostgreSQL");
    let down_at = Instant::now();
    while refused.is_empty() {
        send(&mut accepted, &mut refused);
        assert!(
            down_at.elapsed() < DEADLINE,
            "never answered 503 while down"
        );
    }
    for _ in 0..5 {
        send(&mut accepted, &mut refused);
    }
    pg.start_again().expect("start PostgreSQL again");
    let up_at = Instant::now();
    while !send(&mut accepted, &mut refused) {
        assert!(up_at.elapsed() < DEADLINE, "the node never reconnected");
        thread::sleep(Duration::from_millis(50));
    }
    for _ in 0..20 {
        send(&mut accepted, &mut refused);
    }
    for key in &refused {
        let answer = node.post(key, &charge(1));
        assert_accepted(&answer);
        accepted.insert(key.clone(), answer.call_id());
    }
    for (key, id) in &accepted {
        let done = node.wait_terminal(id);
        assert_eq!(done["status"], "succeeded", "{key}: {done}");
    }
    let calls = cluster.count("SELECT count(*) FROM calls");
    assert_eq!(calls, accepted.len() as i64, "one call per key");
    let effects = cluster.count("SELECT count(*) FROM effects");
    assert_eq!(effects, calls, "one effect per call, none twice");
    eprintln!(
        "{} calls accepted, {} requests refused with 503 while down",
        accepted.len(),
        refused.len()
    );
}
