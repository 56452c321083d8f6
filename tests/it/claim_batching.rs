//! A worker claims a second waiting call in the same write as the first, by
//! the service in this process: the audit shows one worker and one instant
//! for both claims, and each call still runs once.

use crate::support::Counts;
use crate::support::Http;
use crate::support::{charge, Local, TempDb};
use serde_json::json;

/// Behind a quick call a worker claims a second waiting call in the same
/// operation: with one worker busy on a `sleep`, two charges queue up, and
/// their `claimed` audit rows carry the same worker and the same instant. Both
/// still run once.
#[test]
fn a_worker_claims_a_second_call_behind_a_quick_one() {
    let db = TempDb::new("claim-pair");
    let server = Local::start(&db, &["--workers", "1"]);
    let (_, sleeper) = server.post(
        "pair-sleep",
        &json!({"tool": "sleep", "args": {"seconds": 2}}),
    );
    let ids: Vec<String> = ["pair-a", "pair-b"]
        .iter()
        .map(|key| {
            server.post(key, &charge(1)).1["call_id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    for id in &ids {
        assert_eq!(server.wait_terminal(id)["status"], "succeeded");
    }
    server.wait_terminal(sleeper["call_id"].as_str().unwrap());
    let claims: Vec<(f64, String)> = ids
        .iter()
        .map(|id| {
            server
                .sql()
                .query_row(
                    "SELECT ts, detail FROM audit WHERE call_id = ?1 AND event = 'claimed'",
                    [id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .unwrap()
        })
        .collect();
    assert_eq!(claims[0], claims[1], "claimed together: {claims:?}");
    assert_eq!(db.effects(), 2);
}
