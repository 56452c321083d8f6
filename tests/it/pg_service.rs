//! The service binary on PostgreSQL (`--db postgres://...`): a call made,
//! run, waited for, replayed and read back over HTTP; `/stats`, `/healthz`
//! and `/metrics` answer; and the database password appears nowhere the
//! service prints — the start-up line, stderr, any endpoint.

use crate::support::{address_after, charge, Http, Proc, Server, SERVER_BIN};
use idempotent_tool::temp::postgres::PgServer;
use idempotent_tool::temp::TempDir;

/// The real binary on a fresh database of the test process's PostgreSQL.
fn start_on_postgres(url: &str, scratch: &TempDir) -> (Server, String) {
    let args = ["--port", "0", "--db", url];
    let (proc, line) = Proc::start("server", SERVER_BIN, &args, "listening on http://");
    let base = format!("http://{}", address_after(&line, "listening on http://"));
    // `Server` dumps a SQLite file's rows when a test fails; this one has
    // none, so it is pointed at an empty scratch path.
    let db = scratch.join("not-used.db");
    (Server { proc, base, db }, line)
}

/// One call through the whole API on PostgreSQL, and the password never shown.
#[test]
fn the_service_runs_on_postgres_and_never_prints_its_password() {
    let pg = PgServer::shared();
    let url = pg.fresh_database("service");
    let scratch = TempDir::new("idem-pg-service").unwrap();
    let (server, line) = start_on_postgres(&url, &scratch);
    assert!(!line.contains(pg.password()), "start-up line: {line}");
    assert!(line.contains("postgres:***@127.0.0.1"), "{line}");

    let (status, first) = server.post("pg-key", &charge(7));
    assert_eq!(status, 202, "{first}");
    let call_id = first["call_id"].as_str().unwrap().to_string();
    let done = server.wait_terminal(&call_id);
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(done["attempt"], 1);

    let (status, again) = server.post("pg-key", &charge(7));
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["call_id"], first["call_id"]);
    assert_eq!(again["attempt"], 1, "never re-executed");
    let (status, conflict) = server.post("pg-key", &charge(8));
    assert_eq!(status, 409, "{conflict}");
    let (status, by_key) = server.by_key("pg-key");
    assert_eq!((status, &by_key["call_id"]), (200, &first["call_id"]));
    let (status, audit) = server.get(&format!("/v1/tool-calls/{call_id}/audit"));
    assert_eq!(status, 200, "{audit}");

    let stats = server.stats();
    assert_eq!(
        (stats["calls"].as_i64(), stats["effects"].as_i64()),
        (Some(1), Some(1))
    );
    let (status, health) = server.get("/healthz");
    assert_eq!(status, 200, "{health}");
    let metrics = server.call("GET", "/metrics", &[], None);
    assert_eq!(metrics.status, 200);
    let metrics = String::from_utf8_lossy(&metrics.body).to_string();
    assert!(metrics.contains("idempotent_tool_"), "{metrics}");
    for (place, text) in [
        ("/metrics", metrics),
        ("/stats", stats.to_string()),
        ("/healthz", health.to_string()),
        ("stderr", server.stderr()),
    ] {
        assert!(!text.contains(pg.password()), "the password in {place}");
    }
}

/// A database that cannot be reached stops the start with exit 1 and a
/// message that names the URL without its password.
#[test]
fn an_unreachable_database_fails_the_start_without_the_password() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://idem:hunter2-secret@127.0.0.1:{port}/calls?connect_timeout=2");
    let out = std::process::Command::new(SERVER_BIN)
        .args(["--port", "0", "--db", &url])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("idem:***@127.0.0.1"), "{stderr}");
    assert!(
        !stderr.contains("hunter2") && !stdout.contains("hunter2"),
        "{stderr}"
    );
}
