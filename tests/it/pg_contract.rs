//! The service's contract on both backends (issue 16): each test body here
//! runs twice — on a temp SQLite file and on a fresh database of the test
//! process's private PostgreSQL — against the real binary, through
//! `both_backends!`, which emits `NAME::sqlite` and `NAME::postgres`. What
//! they cover is what the store must guarantee whatever the backend:
//! create-or-get races, fencing, recovery after a crash, retries, tenants,
//! key retention, shutdown, and `verify` on what the server wrote. The
//! seed's race (twelve requests, one key) and retryable-failure scenarios
//! (section 12.10.1) live here only, so they hold on both backends.

use crate::support::Http;
use crate::support::{
    address_after, charge, count, signal, AuthFile, Proc, Server, TempDb, DEADLINE, SERVER_BIN,
};
use idempotent_tool::temp::postgres::{connect, PgServer};
use idempotent_tool::temp::TempDir;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::process::Command;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy)]
pub(crate) enum Backend {
    Sqlite,
    Postgres,
}

/// One test's database on one backend, and what `--db` gets for it.
pub(crate) struct Db {
    arg: String,
    /// The SQLite file's folder, removed on drop.
    sqlite: Option<TempDb>,
    /// Where a PostgreSQL test's `Server` points its SQLite-only failure dump.
    scratch: TempDir,
}

impl Db {
    pub(crate) fn new(backend: Backend, prefix: &str) -> Db {
        let scratch = TempDir::new("idem-contract").expect("temp folder");
        match backend {
            Backend::Sqlite => {
                let temp = TempDb::new(prefix);
                let arg = temp.path_str().to_string();
                Db {
                    arg,
                    sqlite: Some(temp),
                    scratch,
                }
            }
            Backend::Postgres => Db {
                arg: PgServer::shared().fresh_database(prefix),
                sqlite: None,
                scratch,
            },
        }
    }

    /// `SELECT count(*) ...` on either backend (the SQL used here means the
    /// same in both dialects).
    fn count(&self, sql: &str) -> i64 {
        match &self.sqlite {
            Some(temp) => count(&temp.path, sql),
            None => connect(&self.arg)
                .query_one(sql, &[])
                .unwrap_or_else(|e| panic!("{sql}: {e}"))
                .get(0),
        }
    }

    pub(crate) fn server(&self, extra: &[&str]) -> Server {
        let mut args = vec!["--port", "0", "--db", self.arg.as_str()];
        args.extend_from_slice(extra);
        let (proc, line) = Proc::start("server", SERVER_BIN, &args, "listening on http://");
        let base = format!("http://{}", address_after(&line, "listening on http://"));
        let db = match &self.sqlite {
            Some(temp) => temp.path.clone(),
            None => self.scratch.join("not-used.db"),
        };
        Server { proc, base, db }
    }

    fn audit_count(&self, call_id: &str, event: &str) -> i64 {
        self.count(&format!(
            "SELECT count(*) FROM audit WHERE call_id = '{call_id}' AND event = '{event}'"
        ))
    }
}

/// `NAME::sqlite` and `NAME::postgres`, each calling `NAME(backend)`; other
/// modules use it too (`same_key.rs`, `pg_claim.rs`), with `Backend` in scope.
macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn sqlite() {
                super::$name(super::Backend::Sqlite)
            }
            #[test]
            fn postgres() {
                super::$name(super::Backend::Postgres)
            }
        }
    )*};
}
pub(crate) use both_backends;

both_backends!(
    concurrent_same_key_makes_one_call_and_one_effect,
    a_completion_after_the_lease_was_lost_is_fenced,
    a_call_interrupted_by_a_crash_is_recovered_after_restart,
    a_retryable_failure_is_retried_under_the_same_call,
    keys_are_scoped_per_tenant,
    an_expired_key_is_purged_and_can_be_used_again,
    sigterm_releases_running_calls_to_the_next_process,
    verify_passes_on_what_the_server_wrote,
);

fn id(call: &Value) -> String {
    let id = call["call_id"].as_str();
    id.unwrap_or_else(|| panic!("no call id: {call}"))
        .to_string()
}

/// Twelve requests with one key, released together: one call, one effect.
fn concurrent_same_key_makes_one_call_and_one_effect(backend: Backend) {
    let db = Db::new(backend, "race");
    let server = Arc::new(db.server(&[]));
    let barrier = Arc::new(Barrier::new(12));
    let senders: Vec<_> = (0..12)
        .map(|_| {
            let (server, barrier) = (Arc::clone(&server), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                server.post("k-race", &charge(100))
            })
        })
        .collect();
    let answers: Vec<(u16, Value)> = senders.into_iter().map(|h| h.join().unwrap()).collect();
    let ids: HashSet<String> = answers
        .iter()
        .map(|(status, call)| {
            assert!(matches!(status, 200 | 202), "{status} {call}");
            id(call)
        })
        .collect();
    assert_eq!(ids.len(), 1, "{answers:?}");
    let done = server.wait_terminal(ids.iter().next().unwrap());
    assert_eq!(
        (done["status"].as_str(), done["attempt"].as_i64()),
        (Some("succeeded"), Some(1))
    );
    assert_eq!(db.count("SELECT count(*) FROM calls"), 1);
    assert_eq!(db.count("SELECT count(*) FROM effects"), 1);
    assert_eq!(server.stats()["effects"], 1);
}

/// A worker that stalls past its lease (after its tool ran, before its
/// completion) loses the call to recovery; attempt 2 completes it, and the
/// stalled attempt's completion is discarded by the fence: one effect.
fn a_completion_after_the_lease_was_lost_is_fenced(backend: Backend) {
    let db = Db::new(backend, "fence");
    let server = db.server(&[
        "--chaos",
        "--lease-secs",
        "1",
        "--recover-interval-ms",
        "100",
    ]);
    let body = json!({"tool": "charge", "args": {"amount": 3, "_stall_ms": 3000}});
    let (status, call) = server.post("k-fence", &body);
    assert_eq!(status, 202, "{call}");
    let call_id = id(&call);
    let done = server.wait_terminal(&call_id);
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(done["attempt"], 2, "{done}");
    let deadline = Instant::now() + DEADLINE;
    while db.audit_count(&call_id, "stale_completion") == 0 {
        assert!(
            Instant::now() < deadline,
            "the stalled completion never came back"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(db.count("SELECT count(*) FROM effects"), 1);
}

/// The server dies after the tool ran and before its completion committed; a
/// new server on the same database recovers the call and runs it again, under
/// the same call and effect id: one effect.
fn a_call_interrupted_by_a_crash_is_recovered_after_restart(backend: Backend) {
    let db = Db::new(backend, "crash");
    let flags = [
        "--chaos",
        "--lease-secs",
        "1",
        "--recover-interval-ms",
        "100",
    ];
    let mut first = db.server(&flags);
    let body = json!({"tool": "charge", "args": {"amount": 9, "_crash_before_commit": true}});
    if let Some((status, call)) = first.post_maybe_lost("k-crash", &body) {
        assert_eq!(status, 202, "{call}");
    }
    first.wait_exit();
    let second = db.server(&flags);
    let (status, call) = second.by_key("k-crash");
    assert!(
        matches!(status, 200 | 202),
        "the call survived the crash: {call}"
    );
    let done = second.wait_terminal(&id(&call));
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(done["attempt"], 2, "{done}");
    assert_eq!(db.count("SELECT count(*) FROM calls"), 1);
    assert_eq!(db.count("SELECT count(*) FROM effects"), 1);
}

/// A retryable failure goes back to `pending` on a same-key retry and runs
/// again under the same call; a permanent one is returned as it is.
fn a_retryable_failure_is_retried_under_the_same_call(backend: Backend) {
    let db = Db::new(backend, "retry");
    let server = db.server(&[]);
    let body = json!({"tool": "fail", "args": {"fail_times": 1}});
    let (_, first) = server.post("k-fail", &body);
    let call_id = id(&first);
    let failed = server.wait_terminal(&call_id);
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(failed["error"]["code"], "tool_failed", "{failed}");
    assert_eq!(failed["error"]["retryable"], true, "{failed}");
    let (status, reset) = server.post("k-fail", &body);
    assert_eq!(status, 202, "{reset}");
    assert_eq!(id(&reset), call_id);
    let done = server.wait_terminal(&call_id);
    assert_eq!(
        (done["status"].as_str(), done["attempt"].as_i64()),
        (Some("succeeded"), Some(2))
    );
    assert_eq!(db.audit_count(&call_id, "retry_reset"), 1);
    let permanent = json!({"tool": "fail", "args": {"retryable": false}});
    let (_, p) = server.post("k-permanent", &permanent);
    assert_eq!(server.wait_terminal(&id(&p))["status"], "failed");
    let (status, again) = server.post("k-permanent", &permanent);
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["status"], "failed", "{again}");
    assert_eq!(again["attempt"], 1, "{again}");
}

/// The same key in two tenants is two calls; neither tenant sees the other's.
fn keys_are_scoped_per_tenant(backend: Backend) {
    let db = Db::new(backend, "tenants");
    let auth = AuthFile::new(&[("acme", "tok-acme", false), ("beta", "tok-beta", false)]);
    let server = db.server(&["--auth-file", auth.path_str()]);
    let post = |token: &str| {
        let bearer = format!("Bearer {token}");
        let headers = [
            ("Idempotency-Key", "k-shared"),
            ("Authorization", bearer.as_str()),
        ];
        server.request(
            "POST",
            "/v1/tool-calls",
            &headers,
            Some(&charge(5).to_string()),
        )
    };
    let (status_a, a) = post("tok-acme");
    let (status_b, b) = post("tok-beta");
    assert_eq!((status_a, status_b), (202, 202), "{a} {b}");
    assert_ne!(id(&a), id(&b));
    let get = |token: &str, call_id: &str| {
        let bearer = format!("Bearer {token}");
        let path = format!("/v1/tool-calls/{call_id}?wait=10");
        server.request("GET", &path, &[("Authorization", bearer.as_str())], None)
    };
    assert_eq!(get("tok-acme", &id(&a)).0, 200);
    assert_eq!(
        get("tok-beta", &id(&a)).0,
        404,
        "another tenant's call reads as absent"
    );
    assert_eq!(get("tok-beta", &id(&b)).0, 200);
    assert_eq!(db.count("SELECT count(*) FROM calls"), 2);
}

/// With `--key-ttl 1` a finished call is purged about a second later (its
/// effect stays), and its key then makes a new call.
fn an_expired_key_is_purged_and_can_be_used_again(backend: Backend) {
    let db = Db::new(backend, "retention");
    let server = db.server(&["--key-ttl", "1"]);
    let (_, first) = server.post("k-ttl", &charge(2));
    server.wait_terminal(&id(&first));
    let deadline = Instant::now() + DEADLINE;
    while server.by_key("k-ttl").0 != 404 {
        assert!(Instant::now() < deadline, "the key was never purged");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (status, second) = server.post("k-ttl", &charge(2));
    assert_eq!(status, 202, "{second}");
    assert_ne!(id(&second), id(&first), "a purged key makes a new call");
    server.wait_terminal(&id(&second));
    assert_eq!(db.count("SELECT count(*) FROM calls"), 1);
    assert_eq!(
        db.count("SELECT count(*) FROM effects"),
        2,
        "effects outlive keys"
    );
}

/// SIGTERM while a tool runs past the grace period: the lease is released
/// (`released` in the audit), and the next process runs the call at once.
fn sigterm_releases_running_calls_to_the_next_process(backend: Backend) {
    let db = Db::new(backend, "sigterm");
    let mut first = db.server(&["--shutdown-grace-secs", "0.3"]);
    let (_, call) = first.post("k-term", &json!({"tool": "sleep", "args": {"seconds": 3}}));
    let call_id = id(&call);
    let deadline = Instant::now() + DEADLINE;
    while db.audit_count(&call_id, "claimed") == 0 {
        assert!(Instant::now() < deadline, "the call never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    signal(&first.proc.child, "TERM");
    first.wait_exit();
    assert_eq!(db.audit_count(&call_id, "released"), 1);
    let second = db.server(&[]);
    let started = Instant::now();
    let done = second.wait_terminal(&call_id);
    assert_eq!(
        (done["status"].as_str(), done["attempt"].as_i64()),
        (Some("succeeded"), Some(2))
    );
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "it waited for the 30 s lease"
    );
}

/// `idempotent-tool verify --db` passes on a database the server wrote.
fn verify_passes_on_what_the_server_wrote(backend: Backend) {
    let db = Db::new(backend, "verify");
    let server = db.server(&[]);
    for (key, body) in [
        ("k-1", charge(1)),
        ("k-2", json!({"tool": "send_email", "args": {"to": "a@b"}})),
        ("k-3", json!({"tool": "fail", "args": {"retryable": false}})),
    ] {
        let (_, call) = server.post(key, &body);
        server.wait_terminal(&id(&call));
    }
    let out = Command::new(SERVER_BIN)
        .args(["verify", "--db", db.arg.as_str()])
        .output()
        .expect("run verify");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{:?}\n{report}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(report.contains("violations 0"), "{report}");
}
