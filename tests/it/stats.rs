//! `/stats`, by the service in this process: it counts calls, effects,
//! statuses and attempts and the writer's batching, and under a stream of new
//! calls each answer is one consistent snapshot.

use crate::support::Http;
use crate::support::{charge, Local, TempDb};
use serde_json::{json, Value};
use std::sync::Arc;

/// `/stats` counts calls, effects, statuses and attempts, and how the writer
/// grouped the operations that got them there.
#[test]
fn stats_reports_calls_effects_statuses_and_attempts() {
    let db = TempDb::new("stats");
    let server = Local::start(&db, &[]);
    let ids: Vec<String> = [
        ("s1", charge(1)),
        ("s2", json!({"tool": "send_email", "args": {"to": "x@y"}})),
        ("s3", json!({"tool": "sleep", "args": {"seconds": 0}})),
        ("s4", json!({"tool": "fail", "args": {"retryable": false}})),
    ]
    .iter()
    .map(|(key, body)| {
        server.post(key, body).1["call_id"]
            .as_str()
            .unwrap()
            .to_string()
    })
    .collect();
    for id in &ids {
        server.wait_terminal(id);
    }
    let mut stats = server.stats();
    let writer = stats
        .as_object_mut()
        .unwrap()
        .remove("writer")
        .expect("writer counters");
    assert_eq!(
        stats,
        json!({"calls": 4, "effects": 2, "by_status": {"succeeded": 3, "failed": 1}, "attempts": {"1": 4}})
    );
    // Each call took a create and an outcome of its own, and a claim that a
    // worker may share with one other call: at least 4 + 4 + 2 operations.
    let counter = |name: &str| writer[name].as_u64().unwrap();
    assert!(counter("ops") >= 10, "{writer}");
    assert!(
        (1..=counter("ops")).contains(&counter("batches")),
        "{writer}"
    );
    for field in ["run_us", "commit_us"] {
        assert!(writer[field].is_u64(), "{writer}");
    }
}

/// `/stats` describes one moment: under a stream of new calls, its status and
/// attempt counts always add up to its call count, and effects never exceed it.
#[test]
fn stats_is_one_consistent_snapshot_under_load() {
    let db = TempDb::new("stats-snapshot");
    let server = Arc::new(Local::start(&db, &[]));
    let posters: Vec<_> = (0..6)
        .map(|t| {
            let server = Arc::clone(&server);
            std::thread::spawn(move || {
                for i in 0..150 {
                    let (status, body) = server.post(&format!("snap-{t}-{i}"), &charge(1));
                    assert_eq!(status, 202, "{body}");
                }
            })
        })
        .collect();
    let sum = |v: &Value| -> i64 {
        v.as_object()
            .unwrap()
            .values()
            .map(|n| n.as_i64().unwrap())
            .sum()
    };
    let mut polls = 0;
    while !posters.iter().all(|p| p.is_finished()) || polls < 50 {
        let stats = server.stats();
        let calls = stats["calls"].as_i64().unwrap();
        assert_eq!(sum(&stats["by_status"]), calls, "{stats}");
        assert_eq!(sum(&stats["attempts"]), calls, "{stats}");
        assert!(stats["effects"].as_i64().unwrap() <= calls, "{stats}");
        polls += 1;
    }
    for p in posters {
        p.join().unwrap();
    }
}
