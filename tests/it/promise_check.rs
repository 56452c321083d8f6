//! `GET /v1/verify`, the promise check, against the real binary on both
//! backends: a clean database answers `ok` with every check, a row that
//! breaks an invariant (an effect without its call, written from outside)
//! is named with its example, a tenant that is not an admin is refused, bad
//! parameters are `400`, and a check that cannot finish in the time asked
//! answers `503 unavailable` — after which the next one runs (the one slot
//! was given back: the run was stopped, not left behind).

use crate::support::{address_after, charge, AuthFile, Http, Proc, Server, TempDb, SERVER_BIN};
use idempotent_tool::temp::postgres::{connect, PgServer};
use idempotent_tool::temp::TempDir;
use serde_json::Value;
use std::time::{Duration, Instant};

/// The check named `name` in a verify answer.
fn check<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name} in {report}"))
}

/// Two charges run to the end: a database with calls and effects.
fn two_charges(server: &impl Http) {
    for (key, amount) in [("pc-1", 100), ("pc-2", 250)] {
        let (_, call) = server.post(key, &charge(amount));
        let done = server.wait_terminal(call["call_id"].as_str().unwrap());
        assert_eq!(done["status"], "succeeded", "{done}");
    }
}

/// A clean verdict: every check holds, and the counts are the database's.
fn assert_clean(server: &impl Http, backend: &str) {
    let (status, report) = server.get("/v1/verify?timeout_s=30");
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["ok"], true, "{report}");
    assert_eq!(report["backend"], backend);
    assert_eq!(
        (report["calls"].as_i64(), report["effects"].as_i64()),
        (Some(2), Some(2))
    );
    let checks = report["checks"].as_array().unwrap();
    assert!(checks.len() >= 7, "{report}");
    assert!(checks
        .iter()
        .all(|c| c["ok"] == true && c["detail"].is_null()));
    assert!(report["elapsed_s"].as_f64().is_some() && report["checked_at"].as_f64().is_some());
}

/// The orphan effect written from outside is named, with its call.
fn assert_orphan_named(server: &impl Http) {
    let (status, report) = server.get("/v1/verify");
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["ok"], false, "{report}");
    let orphan = check(&report, "effect_without_succeeded_call");
    assert_eq!(
        (orphan["ok"].as_bool(), orphan["violations"].as_i64()),
        (Some(false), Some(1))
    );
    let detail = orphan["detail"].as_str().unwrap_or("");
    assert!(detail.contains("c_0000000000000bad"), "{orphan}");
    assert_eq!(check(&report, "duplicate_key")["ok"], true);
}

#[test]
fn the_promise_check_gives_the_verdict_and_names_each_violation_on_sqlite() {
    let db = TempDb::new("promise-check");
    let server = Server::start(&db, &[]);
    two_charges(&server);
    assert_clean(&server, "sqlite");
    server
        .sql()
        .execute(
            "INSERT INTO effects (effect_id, call_id, tool, amount, created_at)
             VALUES ('eff_0000000000000bad', 'c_0000000000000bad', 'charge', 1, 0)",
            [],
        )
        .unwrap();
    assert_orphan_named(&server);
    for (path, code) in [
        ("/v1/verify?timeout_s=0", "bad_request"),
        ("/v1/verify?timeout_s=61", "bad_request"),
        ("/v1/verify?timeout_s=x", "bad_request"),
        ("/v1/verify?scope=all", "bad_request"),
    ] {
        let (status, body) = server.get(path);
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (400, Some(code)),
            "{path}: {body}"
        );
    }
}

#[test]
fn the_promise_check_gives_the_verdict_and_names_each_violation_on_postgres() {
    let pg = PgServer::shared();
    let url = pg.fresh_database("promise_check");
    let scratch = TempDir::new("idem-pg-promise").unwrap();
    let args = ["--port", "0", "--db", url.as_str()];
    let (proc, line) = Proc::start("server", SERVER_BIN, &args, "listening on http://");
    let base = format!("http://{}", address_after(&line, "listening on http://"));
    let server = Server {
        proc,
        base,
        db: scratch.join("not-used.db"),
    };
    two_charges(&server);
    assert_clean(&server, "postgres");
    connect(&url)
        .execute(
            "INSERT INTO effects (effect_id, call_id, tool, amount, created_at)
             VALUES ('eff_0000000000000bad', 'c_0000000000000bad', 'charge', 1, 0)",
            &[],
        )
        .unwrap();
    assert_orphan_named(&server);
    let (status, report) = server.get("/v1/verify");
    assert!(
        !report.to_string().contains(pg.password()),
        "{status} {report}"
    );
}

/// Only an admin runs the check; a tenant gets `403`, a wrong token `401`.
#[test]
fn only_an_admin_runs_the_promise_check() {
    let db = TempDb::new("promise-check-auth");
    let auth = AuthFile::new(&[("acme", "acme-token", false), ("ops", "ops-token", true)]);
    let server = Server::start(&db, &["--auth-file", auth.path_str()]);
    let ask = |token: &str| {
        let bearer = format!("Bearer {token}");
        server.request(
            "GET",
            "/v1/verify",
            &[("Authorization", bearer.as_str())],
            None,
        )
    };
    let (status, body) = ask("acme-token");
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("forbidden")),
        "{body}"
    );
    assert_eq!(ask("wrong").0, 401);
    let (status, body) = ask("ops-token");
    assert_eq!((status, body["ok"].as_bool()), (200, Some(true)), "{body}");
}

/// A check that cannot finish in time is stopped and answered `503`, in
/// about the time asked; the next one, given time, runs and holds.
#[test]
fn a_check_past_its_time_is_stopped_and_answered_503() {
    let db = TempDb::new("promise-check-slow");
    let server = Server::start(&db, &[]);
    two_charges(&server);
    // Enough rows that the check (integrity_check, the scans) takes far
    // longer than the 20 ms asked for below, on any machine.
    server
        .sql()
        .execute_batch(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 400000)
             INSERT INTO audit (ts, call_id, event, detail)
             SELECT i, 'c_filler' || i, 'filler', printf('%080d', i) FROM n",
        )
        .unwrap();
    let asked = Instant::now();
    let (status, body) = server.get("/v1/verify?timeout_s=0.02");
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (503, Some("unavailable")),
        "{body}"
    );
    assert!(
        asked.elapsed() < Duration::from_secs(30),
        "{:?}",
        asked.elapsed()
    );
    let (status, report) = server.get("/v1/verify?timeout_s=60");
    assert_eq!(
        (status, report["ok"].as_bool()),
        (200, Some(true)),
        "{report}"
    );
}
