//! Effect ids across deployments: two services with databases of their own,
//! started side by side and calling one downstream (two regions, staging
//! and production sharing a sandbox), never send it the same effect id; and
//! every attempt of one call sends the same one. The downstream is the
//! reference one (`src/bin/downstream.rs`), failing the first request of
//! each key, so every call takes two attempts.

use crate::support::downstream::{Downstream, ToolsFile};
use crate::support::{Http, Server, TempDb};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::thread;

/// Calls per service: enough that a derived id (time and a counter) would
/// have had many chances to meet the other service's.
const CALLS: usize = 150;
const SENDERS: usize = 5;

/// POST `CALLS` refunds to `server` from `SENDERS` threads; each call once
/// it has settled.
fn refunds(server: &Server) -> Vec<Value> {
    let per_sender = CALLS / SENDERS;
    thread::scope(|s| {
        let senders: Vec<_> = (0..SENDERS)
            .map(|t| {
                s.spawn(move || {
                    (0..per_sender)
                        .map(|n| {
                            let body = json!({"tool": "refund", "args": {"amount": n + 1}});
                            let (status, call) = server.post(&format!("r-{t}-{n}"), &body);
                            assert_eq!(status, 202, "{call}");
                            server.wait_terminal(call["call_id"].as_str().unwrap())
                        })
                        .collect::<Vec<Value>>()
                })
            })
            .collect();
        senders
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    })
}

/// `eff_` + the call's 16 hex + `_` + 32 hex.
fn assert_effect_id_of(call: &Value) {
    let effect_id = call["effect_id"].as_str().unwrap();
    let hex = call["call_id"].as_str().unwrap().trim_start_matches("c_");
    let random = effect_id
        .strip_prefix(&format!("eff_{hex}_"))
        .unwrap_or_else(|| panic!("{effect_id} starts with its call's hex"));
    assert!(
        random.len() == 32 && random.bytes().all(|b| b.is_ascii_hexdigit()),
        "{effect_id}"
    );
}

/// Two services on two databases, filled at the same time: no effect id is
/// shared; the downstream saw one key per call and two requests under it
/// (the failed attempt and the retry), and answered each call's retry under
/// the key the call shows.
#[test]
fn two_deployments_side_by_side_never_send_the_same_effect_id() {
    let downstream = Downstream::start(&["--fail-first", "1"]);
    let tools = ToolsFile::write(&json!({"tools": {"refund": {
        "kind": "http", "url": downstream.url("/refunds"), "max_attempts": 3,
        "backoff_ms": {"initial": 20, "max": 50}
    }}}));
    let dbs = [TempDb::new("effect-ids-a"), TempDb::new("effect-ids-b")];
    let servers: Vec<Server> = dbs
        .iter()
        .map(|db| {
            Server::start(
                db,
                &["--tools", tools.path_str(), "--recover-interval-ms", "50"],
            )
        })
        .collect();
    let calls: Vec<Vec<Value>> = thread::scope(|s| {
        let each: Vec<_> = servers.iter().map(|srv| s.spawn(|| refunds(srv))).collect();
        each.into_iter().map(|h| h.join().unwrap()).collect()
    });

    let mut by_service: Vec<BTreeSet<String>> = Vec::new();
    for service in &calls {
        for call in service {
            assert_eq!(call["status"], "succeeded", "{call}");
            assert_eq!(call["attempt"], 2, "{call}");
            assert_effect_id_of(call);
            assert_eq!(
                call["result"]["idempotency_key"], call["effect_id"],
                "the retry was sent under the call's effect id: {call}"
            );
        }
        let ids = service.iter().map(|c| c["effect_id"].to_string()).collect();
        by_service.push(ids);
    }
    let shared = by_service[0].intersection(&by_service[1]).count();
    let stats = downstream.stats();
    eprintln!(
        "effect ids: {} + {} calls, {} distinct effect ids per service, {shared} shared; \
         downstream: {stats}",
        calls[0].len(),
        calls[1].len(),
        by_service[0].len()
    );
    assert_eq!(
        (by_service[0].len(), by_service[1].len()),
        (CALLS, CALLS),
        "one effect id per call"
    );
    assert_eq!(shared, 0, "effect ids shared by the two deployments");
    let total = 2 * CALLS as i64;
    assert_eq!(
        (&stats["keys"], &stats["requests"], &stats["effects"]),
        (&json!(total), &json!(2 * total), &json!(total)),
        "every attempt of a call sent the same key: {stats}"
    );
}
