//! A PostgreSQL node paused with `SIGSTOP` (a VM freeze, a stopped
//! container) **inside a transaction**, beside a second node on the same
//! database. Most of the backend's operations are one statement, which
//! PostgreSQL finishes whether or not the client reads the answer; a create
//! under a business key is a transaction of several, and a node paused in one
//! holds its row and index locks for as long as it stays paused — unless the
//! session's `idle_in_transaction_session_timeout` (10 s, set for every
//! pooled connection in `src/store/postgres/pool.rs`) ends it.
//!
//! The invariant: the other node keeps accepting new intents throughout; a
//! request that needs a lock the paused node holds is answered `503
//! unavailable` with `Retry-After` after `lock_timeout`, never held for ever;
//! PostgreSQL ends the paused node's transaction by itself; once resumed the
//! paused node replaces its killed connection and serves again; and every
//! call either node answered `202` is on file once, one call per intent, and
//! `verify` passes.

use crate::support::downstream::ToolsFile;
use crate::support::{address_after, procfs, signal, Http, Proc, Server, DEADLINE, SERVER_BIN};
use idempotent_tool::temp::postgres::{connect, PgServer};
use idempotent_tool::temp::TempDir;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

/// The paused node's `application_name`: how the test finds its sessions in
/// `pg_stat_activity`.
const PAUSED_APP: &str = "paused-node";
const LOAD_THREADS: u64 = 4;

/// `charge` with a business key on its amount: every create is a
/// multi-statement transaction, and two calls for one amount are one intent.
fn tools() -> ToolsFile {
    ToolsFile::write(&json!({"tools": {"charge": {
        "kind": "builtin",
        "business_key": {"fields": ["/amount"], "window_secs": 3600, "on_duplicate": "reject"}
    }}}))
}

fn intent(amount: u64) -> Value {
    json!({"tool": "charge", "args": {"amount": amount}})
}

fn start_node(url: &str, tools: &ToolsFile, scratch: &TempDir) -> Server {
    // `lock_timeout` 1 s: a request blocked by the paused node's locks is
    // answered quickly.
    let args = [
        "--port",
        "0",
        "--db",
        url,
        "--tools",
        tools.path_str(),
        "--busy-timeout-ms",
        "1000",
    ];
    let (proc, line) = Proc::start("node", SERVER_BIN, &args, "listening on http://");
    let base = format!("http://{}", address_after(&line, "listening on http://"));
    let db = scratch.join("not-used.db");
    Server { proc, base, db }
}

/// Whether a session of the paused node is inside a transaction, waiting for
/// its client.
fn paused_node_in_transaction(db: &mut postgres::Client) -> bool {
    let open: i64 = db
        .query_one(
            "SELECT count(*) FROM pg_stat_activity
              WHERE application_name = $1 AND state LIKE 'idle in transaction%'",
            &[&PAUSED_APP],
        )
        .expect("read pg_stat_activity")
        .get(0);
    open > 0
}

/// Pause `node` at a moment when one of its sessions is inside a transaction:
/// pause, look five times 50 ms apart, resume and try again if it is not.
fn pause_inside_a_transaction(node: &Server, db: &mut postgres::Client) {
    let pid = node.proc.child.id();
    let deadline = Instant::now() + DEADLINE;
    loop {
        signal(&node.proc.child, "STOP");
        while !procfs::all_threads_stopped(pid) {
            assert!(Instant::now() < deadline, "the node never stopped");
            thread::sleep(Duration::from_millis(2));
        }
        let held = (0..5).all(|i| {
            if i > 0 {
                thread::sleep(Duration::from_millis(50));
            }
            paused_node_in_transaction(db)
        });
        if held {
            return;
        }
        signal(&node.proc.child, "CONT");
        assert!(
            Instant::now() < deadline,
            "never paused the node inside a transaction"
        );
        thread::sleep(Duration::from_millis(3));
    }
}

/// What the load on the paused node sent and was answered.
#[derive(Default)]
struct Load {
    /// Per thread, the key and amount sent and not yet answered.
    in_flight: BTreeMap<u64, (String, u64)>,
    /// (key, status, body) of every answer.
    answers: Vec<(String, u16, Value)>,
}

/// Four threads posting a new intent each to `node` until `stop`.
fn post_intents_until(node: &Server, load: &Mutex<Load>, stop: &AtomicBool) {
    thread::scope(|scope| {
        for t in 0..LOAD_THREADS {
            scope.spawn(move || {
                for n in 0.. {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let (key, amount) = (format!("a-{t}-{n}"), 1 + t * 1_000_000 + n);
                    load.lock()
                        .unwrap()
                        .in_flight
                        .insert(t, (key.clone(), amount));
                    let (status, body) = node.post(&key, &intent(amount));
                    let mut load = load.lock().unwrap();
                    load.in_flight.remove(&t);
                    load.answers.push((key, status, body));
                }
            });
        }
    });
}

/// `202`, `409 duplicate_intent`, or `503 unavailable` with `Retry-After`:
/// what any create may be answered while a node is paused.
fn assert_an_answer_a_pause_allows(node: &Server, key: &str, amount: u64) -> u16 {
    let response = node.call(
        "POST",
        "/v1/tool-calls",
        &[("Idempotency-Key", key)],
        Some(&intent(amount).to_string()),
    );
    let body: Value = response.json();
    match response.status {
        202 => {}
        409 => assert_eq!(body["error"]["code"], "duplicate_intent", "{body}"),
        503 => {
            assert_eq!(body["error"]["code"], "unavailable", "{body}");
            assert!(response.header("retry-after").is_some(), "{body}");
        }
        other => panic!("{key}: {other} {body}"),
    }
    response.status
}

/// On a failing assertion, stop the load and resume the paused node, so the
/// load threads' requests end and the scope can unwind.
struct ResumeOnPanic<'a>(&'a Server, &'a AtomicBool);

impl Drop for ResumeOnPanic<'_> {
    fn drop(&mut self) {
        if thread::panicking() {
            self.1.store(true, Ordering::SeqCst);
            let _ = Command::new("kill")
                .args(["-CONT", &self.0.proc.child.id().to_string()])
                .status();
        }
    }
}

#[test]
fn a_node_paused_inside_a_transaction_blocks_no_one_for_long_and_loses_nothing() {
    let url = PgServer::shared().fresh_database("paused_node");
    let scratch = TempDir::new("idem-pg-paused").unwrap();
    let tools = tools();
    let paused = start_node(
        &format!("{url}?application_name={PAUSED_APP}"),
        &tools,
        &scratch,
    );
    let other = start_node(&url, &tools, &scratch);
    let mut db = connect(&url);

    let (load, stop) = (Mutex::new(Load::default()), AtomicBool::new(false));
    let mut answered_by_other = Vec::new();
    thread::scope(|scope| {
        scope.spawn(|| post_intents_until(&paused, &load, &stop));
        let _resume = ResumeOnPanic(&paused, &stop);
        while load.lock().unwrap().answers.len() < 40 {
            thread::sleep(Duration::from_millis(10));
        }
        pause_inside_a_transaction(&paused, &mut db);
        let paused_at = Instant::now();

        // A new intent does not touch the paused node's rows: answered at once,
        // while its transaction is still open.
        let (status, fresh) = other.post("b-fresh", &intent(999_999_999));
        assert_eq!(status, 202, "{fresh}");
        answered_by_other.push("b-fresh".to_string());
        assert!(
            paused_node_in_transaction(&mut db),
            "the paused node's transaction ended before the other node answered ({:?})",
            paused_at.elapsed()
        );

        // The intents the paused node was creating, under new keys on the other
        // node: one may wait on the paused node's locks, for `lock_timeout` only.
        let in_flight: Vec<(String, u64)> =
            load.lock().unwrap().in_flight.values().cloned().collect();
        let mut refused = Vec::new();
        for (key, amount) in &in_flight {
            let key = format!("b-{key}");
            match assert_an_answer_a_pause_allows(&other, &key, *amount) {
                202 => answered_by_other.push(key),
                503 => refused.push((key, *amount)),
                _ => {}
            }
        }

        // PostgreSQL ends the paused node's transaction (it cannot: it is
        // still stopped), and with it the locks.
        while paused_node_in_transaction(&mut db) {
            assert!(
                paused_at.elapsed() < DEADLINE,
                "the paused node's transaction was never ended"
            );
            thread::sleep(Duration::from_millis(100));
        }
        assert!(procfs::all_threads_stopped(paused.proc.child.id()));
        eprintln!(
            "pg_paused_node: transaction ended {:.1} s into the pause; {} of {} in-flight intents refused meanwhile",
            paused_at.elapsed().as_secs_f64(),
            refused.len(),
            in_flight.len()
        );
        for (key, amount) in &refused {
            let status = assert_an_answer_a_pause_allows(&other, key, *amount);
            assert_ne!(status, 503, "{key} still refused once the locks were gone");
            if status == 202 {
                answered_by_other.push(key.clone());
            }
        }

        // Resumed, the node replaces its killed connection and serves again.
        signal(&paused.proc.child, "CONT");
        let resumed_at = Instant::now();
        loop {
            let (status, body) = paused.post("a-after", &intent(888_888_888));
            if status == 202 {
                break;
            }
            assert_eq!(
                (status, &body["error"]["code"]),
                (503, &json!("unavailable")),
                "{body}"
            );
            assert!(
                resumed_at.elapsed() < DEADLINE,
                "the resumed node never served"
            );
            thread::sleep(Duration::from_millis(50));
        }
        stop.store(true, Ordering::SeqCst);
    });

    let load = load.into_inner().unwrap();
    let mut accepted: Vec<String> = answered_by_other;
    accepted.push("a-after".to_string());
    for (key, status, body) in &load.answers {
        match status {
            202 => accepted.push(key.clone()),
            409 => assert_eq!(body["error"]["code"], "duplicate_intent", "{key}: {body}"),
            503 => assert_eq!(body["error"]["code"], "unavailable", "{key}: {body}"),
            _ => panic!("{key}: {status} {body}"),
        }
    }
    for key in &accepted {
        let on_file: i64 = db
            .query_one("SELECT count(*) FROM calls WHERE idem_key = $1", &[key])
            .unwrap()
            .get(0);
        assert_eq!(on_file, 1, "{key} was answered 202 but is not on file once");
    }
    let deadline = Instant::now() + DEADLINE;
    loop {
        let unfinished: i64 = db
            .query_one(
                "SELECT count(*) FROM calls WHERE status <> 'succeeded'",
                &[],
            )
            .unwrap()
            .get(0);
        if unfinished == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{unfinished} calls never finished"
        );
        thread::sleep(Duration::from_millis(50));
    }
    crate::support::assert_verify_passes_with_business_keys(&url, &tools);
}
