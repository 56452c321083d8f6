//! Key retention against the service in this process: with a short `--key-ttl`,
//! a terminal call is purged by the background thread (its audit rows with it,
//! its `effects` row kept), a reused key then starts a new call, a running
//! `sleep` call is never purged, no cached answer outlives its call, the purges
//! are counted in `/metrics`, and `verify` still passes.

use crate::support::Counts;
use crate::support::Http;
use crate::support::{charge, eventually, Local, TempDb, SERVER_BIN};
use serde_json::{json, Value};
use std::process::Command;

fn purged_total(server: &Local) -> f64 {
    server.counter("idempotent_tool_calls_purged_total")
}

/// A settled call expires `--key-ttl` after its last update, is purged, and
/// its key then makes a new call (and a new effect); a `sleep` running all
/// that time is still there; the first call's effect row stays.
#[test]
fn an_expired_call_is_purged_and_its_key_starts_a_new_call() {
    let db = TempDb::new("retention");
    let server = Local::start(&db, &["--key-ttl", "1"]);
    let (status, long) = server.post("long", &json!({"tool": "sleep", "args": {"seconds": 4}}));
    assert_eq!(status, 202, "{long}");
    let (_, first) = server.post("reused", &charge(5));
    let first_id = first["call_id"].as_str().unwrap().to_string();
    let done = server.wait_terminal(&first_id);
    let expires_at = done["expires_at"]
        .as_f64()
        .expect("a terminal call shows expires_at");
    let updated_at = done["updated_at"].as_f64().unwrap();
    assert!((expires_at - updated_at - 1.0).abs() < 1e-3, "{done}");
    // Settle the answer into the cache, so a purge that left it there would show.
    assert_eq!(server.post("reused", &charge(5)).0, 200);
    assert_eq!(server.post("reused", &charge(5)).0, 200);

    eventually("the expired call is purged", || {
        db.count(&format!(
            "SELECT count(*) FROM calls WHERE call_id = '{first_id}'"
        )) == 0
    });
    assert_eq!(server.get(&format!("/v1/tool-calls/{first_id}")).0, 404);
    assert_eq!(server.by_key("reused").0, 404);
    assert_eq!(
        db.count(&format!(
            "SELECT count(*) FROM audit WHERE call_id = '{first_id}'"
        )),
        0,
        "audit rows go with their call"
    );
    assert_eq!(
        db.count(&format!(
            "SELECT count(*) FROM effects WHERE call_id = '{first_id}' AND call_purged_at IS NOT NULL"
        )),
        1,
        "the effect stays as the ledger"
    );
    assert!(purged_total(&server) >= 1.0);

    let (status, again) = server.post("reused", &charge(5));
    assert_eq!(status, 202, "a purged key starts a new call: {again}");
    assert_ne!(again["call_id"].as_str(), Some(first_id.as_str()));
    server.wait_terminal(again["call_id"].as_str().unwrap());
    assert_eq!(db.effects(), 2, "the new call is a new charge");

    let long_id = long["call_id"].as_str().unwrap();
    let (status, still) = server.get(&format!("/v1/tool-calls/{long_id}"));
    assert_eq!(status, 202, "a running call is never purged: {still}");
    assert_eq!(still["expires_at"], Value::Null);
    assert_eq!(server.wait_terminal(long_id)["status"], "succeeded");

    let verified = Command::new(SERVER_BIN)
        .args(["verify", "--db", db.path_str()])
        .output()
        .expect("run verify");
    let report = String::from_utf8_lossy(&verified.stdout);
    assert!(verified.status.success(), "{report}");
}

/// `--key-ttl 0` keeps keys forever: no `expires_at`, nothing purged.
#[test]
fn a_zero_ttl_keeps_calls_forever() {
    let db = TempDb::new("retention-forever");
    let server = Local::start(&db, &["--key-ttl", "0"]);
    let (_, call) = server.post("kept", &charge(1));
    let done = server.wait_terminal(call["call_id"].as_str().unwrap());
    assert_eq!(done["expires_at"], Value::Null, "{done}");
    assert_eq!(purged_total(&server), 0.0);
    assert_eq!(db.calls(), 1);
}
