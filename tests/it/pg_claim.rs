//! The runner's poll claims due work in ONE store operation (issue 16): as
//! many calls as the node has free workers, no more of a capped tool than
//! its free slots, and the leases go straight to workers (no second claim).
//! The backlog is written into the database by the test itself (a
//! `CallStore` of its own), so only a poll can take it; the nodes are real
//! `idempotent-tool` processes, and the evidence is read from the database
//! while they work: how many calls are `running` at once, who claimed each
//! (the poll's owner is `PID:poll@INSTANCE`; a worker's claim by id names
//! the worker), and how many attempts and effects each call has.

use crate::pg_contract::{both_backends, Backend};
use crate::support::{address_after, count, Proc, TempDb, DEADLINE, SERVER_BIN};
use idempotent_tool::store::{CallStore, Created, Database, NewCall, StoreOptions};
use idempotent_tool::temp::postgres::{connect, PgServer};
use idempotent_tool::temp::TempDir;
use std::cell::{RefCell, RefMut};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// One test's database: a temp SQLite file or a fresh PostgreSQL database.
struct Db {
    /// What `--db` gets.
    arg: String,
    /// The SQLite file's folder, removed on drop.
    sqlite: Option<TempDb>,
    /// PostgreSQL: one connection for every read, so sampling is quick.
    client: RefCell<Option<postgres::Client>>,
}

impl Db {
    fn new(backend: Backend, prefix: &str) -> Db {
        match backend {
            Backend::Sqlite => {
                let temp = TempDb::new(prefix);
                Db {
                    arg: temp.path_str().to_string(),
                    sqlite: Some(temp),
                    client: RefCell::new(None),
                }
            }
            Backend::Postgres => Db {
                arg: PgServer::shared().fresh_database(prefix),
                sqlite: None,
                client: RefCell::new(None),
            },
        }
    }

    /// Open the database as a store of the test's own.
    fn store(&self) -> std::sync::Arc<CallStore> {
        let database = Database::parse(&self.arg).expect("a database");
        CallStore::open(&database, StoreOptions::default()).expect("store opens")
    }

    /// Write `calls` (tool, args) as `pending` calls, oldest first, through a
    /// store of the test's own: no node has them queued.
    fn backlog(&self, calls: &[(&str, String)]) {
        let store = self.store();
        for (n, (tool, args)) in calls.iter().enumerate() {
            let created = store
                .create_or_get(NewCall {
                    tenant: "anonymous".into(),
                    idem_key: format!("backlog-{n}"),
                    fingerprint: format!("fp-{n}"),
                    tool: tool.to_string(),
                    args_json: args.clone(),
                    client_id: None,
                    seq: None,
                    gate: None,
                })
                .expect("create");
            assert!(matches!(created, Created::New(_)), "{created:?}");
        }
        store.stop();
    }

    /// `SELECT count(*) …`, meaning the same in both dialects.
    fn count(&self, sql: &str) -> i64 {
        match &self.sqlite {
            Some(temp) => count(&temp.path, sql),
            None => self
                .pg()
                .query_one(sql, &[])
                .unwrap_or_else(|e| panic!("{sql}: {e}"))
                .get(0),
        }
    }

    /// The PostgreSQL connection, opened on first use.
    fn pg(&self) -> RefMut<'_, postgres::Client> {
        RefMut::map(self.client.borrow_mut(), |client| {
            client.get_or_insert_with(|| connect(&self.arg))
        })
    }

    /// The owner named by each `claimed` audit row, in no order.
    fn claim_owners(&self) -> Vec<String> {
        let sql = "SELECT detail FROM audit WHERE event = 'claimed'";
        let details: Vec<String> = match &self.sqlite {
            Some(temp) => {
                let conn = rusqlite::Connection::open(&temp.path).expect("open");
                let mut stmt = conn.prepare(sql).expect(sql);
                let rows = stmt.query_map([], |r| r.get(0)).expect(sql);
                rows.map(|r| r.expect("row")).collect()
            }
            None => self
                .pg()
                .query(sql, &[])
                .expect(sql)
                .iter()
                .map(|r| r.get(0))
                .collect(),
        };
        details
            .iter()
            .map(|d| d.split(' ').next().unwrap_or_default().to_string())
            .collect()
    }

    /// A node on this database.
    fn node(&self, name: &str, extra: &[&str]) -> Proc {
        let mut args = vec!["--port", "0", "--db", self.arg.as_str()];
        args.extend_from_slice(extra);
        let (proc, line) = Proc::start(name, SERVER_BIN, &args, "listening on http://");
        address_after(&line, "listening on http://");
        proc
    }
}

/// Sample `running_sql` every few milliseconds until `done_sql` reaches
/// `total` (or the deadline fails the test); the most seen at once.
fn most_at_once(db: &Db, running_sql: &str, done_sql: &str, total: i64) -> i64 {
    let deadline = Instant::now() + DEADLINE;
    let mut most = 0;
    loop {
        most = most.max(db.count(running_sql));
        if db.count(done_sql) == total {
            return most;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {total} calls finished",
            db.count(done_sql)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn sleep_args(seconds: f64) -> String {
    format!(r#"{{"seconds":{seconds}}}"#)
}

both_backends!(
    a_poll_claims_as_many_calls_as_free_workers_and_no_more,
    a_capped_tool_is_never_claimed_past_its_free_slots,
);

/// Ten due calls, three workers: the poll claims three at once (never more
/// `running` than workers, so no lease waits in a queue), every call is
/// claimed by the poll itself — no worker claims it a second time — and
/// every call finishes on its first attempt.
fn a_poll_claims_as_many_calls_as_free_workers_and_no_more(backend: Backend) {
    let db = Db::new(backend, "pg-claim-free");
    let calls: Vec<(&str, String)> = (0..10).map(|_| ("sleep", sleep_args(0.4))).collect();
    db.backlog(&calls);
    let _node = db.node("node", &["--workers", "3", "--recover-interval-ms", "50"]);
    let most = most_at_once(
        &db,
        "SELECT count(*) FROM calls WHERE status = 'running'",
        "SELECT count(*) FROM calls WHERE status = 'succeeded'",
        10,
    );
    assert_eq!(most, 3, "running at once: as many as free workers, no more");
    assert_eq!(db.count("SELECT count(*) FROM calls WHERE attempt <> 1"), 0);
    let owners = db.claim_owners();
    assert_eq!(owners.len(), 10, "one claim per call: {owners:?}");
    assert!(
        owners.iter().all(|o| o.contains(":poll@")),
        "claimed by the poll, not by a worker: {owners:?}"
    );
}

/// `sleep` capped at one per node, four `sleep` calls due before four
/// `charge` calls, four workers: never two `sleep` calls `running` at once
/// (the claim took no more than the one free slot; the others stayed
/// `pending`), while the `charge` calls behind them are claimed and finish
/// before the `sleep` backlog does. A call of a tool this node does not know
/// is claimed like any uncapped one and fails `bad_args`, as before.
fn a_capped_tool_is_never_claimed_past_its_free_slots(backend: Backend) {
    let db = Db::new(backend, "pg-claim-capped");
    let dir = TempDir::new("pg-claim-tools").expect("temp folder");
    let tools = dir.join("tools.json");
    std::fs::write(
        &tools,
        r#"{"tools": {
            "sleep": {"kind": "builtin", "max_concurrency": 1},
            "charge": {"kind": "builtin"}
        }}"#,
    )
    .expect("tools file");
    let mut calls: Vec<(&str, String)> = (0..4).map(|_| ("sleep", sleep_args(0.3))).collect();
    calls.extend((0..4).map(|n| ("charge", format!(r#"{{"amount":{}}}"#, n + 1))));
    calls.push(("mystery", "{}".to_string()));
    db.backlog(&calls);
    let _node = db.node(
        "node",
        &[
            "--workers",
            "4",
            "--recover-interval-ms",
            "50",
            "--tools",
            tools.to_str().expect("utf-8 path"),
        ],
    );
    let charges_done = "SELECT count(*) FROM calls WHERE tool = 'charge' AND status = 'succeeded'";
    let sleeps_done = "SELECT count(*) FROM calls WHERE tool = 'sleep' AND status = 'succeeded'";
    let most = most_at_once(
        &db,
        "SELECT count(*) FROM calls WHERE tool = 'sleep' AND status = 'running'",
        charges_done,
        4,
    );
    assert!(
        db.count(sleeps_done) <= 2,
        "the charges waited for the capped sleeps: {} of 4 sleeps done",
        db.count(sleeps_done)
    );
    let most = most.max(most_at_once(
        &db,
        "SELECT count(*) FROM calls WHERE tool = 'sleep' AND status = 'running'",
        sleeps_done,
        4,
    ));
    assert_eq!(most, 1, "sleep is capped at one per node");
    assert_eq!(db.count("SELECT count(*) FROM calls WHERE attempt <> 1"), 0);
    assert_eq!(
        db.count("SELECT count(*) FROM effects"),
        4,
        "one per charge"
    );
    let unknown_failed = "SELECT count(*) FROM calls WHERE tool = 'mystery' \
        AND status = 'failed' AND error_json LIKE '%\"bad_args\"%'";
    assert_eq!(
        db.count(unknown_failed),
        1,
        "the unknown tool's call failed"
    );
}

/// Three nodes poll one backlog on one PostgreSQL database, woken together
/// by the test's own creates (`NOTIFY`): `FOR UPDATE SKIP LOCKED` hands each
/// call to one node only — every call is claimed once, runs on attempt 1,
/// and each charge has one effect — and more than one node does the work
/// (two workers each, with slow calls among the quick ones).
#[test]
fn three_nodes_polling_one_backlog_run_every_call_once() {
    let db = Db::new(Backend::Postgres, "pg-claim-nodes");
    db.backlog(&[]); // the schema, before three nodes race to migrate it
    let _nodes: Vec<Proc> = (0..3)
        .map(|n| {
            db.node(
                &format!("node-{n}"),
                &["--workers", "2", "--recover-interval-ms", "50"],
            )
        })
        .collect();
    let calls: Vec<(&str, String)> = (0..60)
        .map(|n| match n % 3 {
            0 => ("sleep", sleep_args(0.1)),
            _ => ("charge", format!(r#"{{"amount":{n}}}"#)),
        })
        .collect();
    db.backlog(&calls);
    let deadline = Instant::now() + DEADLINE;
    while db.count("SELECT count(*) FROM calls WHERE status = 'succeeded'") < 60 {
        assert!(Instant::now() < deadline, "not every call finished");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(db.count("SELECT count(*) FROM calls"), 60);
    assert_eq!(
        db.count("SELECT count(*) FROM effects"),
        40,
        "one per charge"
    );
    assert_eq!(db.count("SELECT count(*) FROM calls WHERE attempt <> 1"), 0);
    let owners = db.claim_owners();
    assert_eq!(owners.len(), 60, "one claim per call");
    let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
    for owner in &owners {
        let pid = owner.split(':').next().unwrap_or_default();
        *per_node.entry(pid).or_default() += 1;
    }
    assert!(per_node.len() >= 2, "one node did everything: {per_node:?}");
}
