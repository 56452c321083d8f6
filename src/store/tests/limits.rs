//! Limits shared through the database (`claim_limited`): a tool's `rate` on
//! both backends — a token bucket every store on the database spends from,
//! refilled by the clock — and on PostgreSQL its `max_concurrency` counted
//! over every node's running calls, a dead node's included until recovery
//! takes them back.

use super::*;
use crate::store::{owner_name, Limit, Rate, ToolLimit};
use std::time::Instant;

on_both_backends!(
    a_rated_tool_is_claimed_no_faster_than_its_bucket_by_every_store,
    only_the_limits_a_backend_holds_are_in_its_database,
);

const LEASE: Duration = Duration::from_secs(30);

fn limited(max_concurrency: Option<usize>, rate: Option<Rate>) -> StoreOptions {
    StoreOptions {
        limits: vec![ToolLimit {
            tool: "charge".into(),
            max_concurrency,
            rate,
        }],
        ..StoreOptions::default()
    }
}

fn charges(store: &CallStore, n: usize) -> Result<Vec<String>, StoreError> {
    (0..n)
        .map(|i| Ok(created_call(store.create_or_get(new_call(&format!("c{i}"), "fp"))?).call_id))
        .collect()
}

/// What one poll of `store` may take: `free` of `charge`, `total` in all.
fn due(total: usize, free: usize) -> DueLimits {
    DueLimits {
        total,
        per_tool: vec![("charge".to_string(), free)],
    }
}

/// Three tokens, two a second: two stores on one database claiming at once
/// take three calls between them, then none (held back by the rate, with
/// the time of the next token); what they take over a measured span is
/// never more than the burst plus the rate times it, and the bucket does
/// refill. Each claimed call says how long it waited, under `rate`.
fn a_rated_tool_is_claimed_no_faster_than_its_bucket_by_every_store(
    db: &TestDb,
) -> Result<(), StoreError> {
    let rate = Rate {
        per_second: 2.0,
        burst: 3,
    };
    let stores = [
        db.open_with(limited(None, Some(rate)))?,
        db.open_with(limited(None, Some(rate)))?,
    ];
    assert_eq!(stores[0].limits_in_database().len(), 1);
    charges(&stores[0], 12)?;
    let started = Instant::now();
    let mut taken = 0;
    for (n, store) in stores.iter().cycle().take(4).enumerate() {
        let claim = store.claim_limited(&due(10, 10), &format!("{n}:poll"), LEASE)?;
        assert_eq!(claim.leases.len(), claim.waited.len());
        assert!(claim.waited.iter().all(|(_, limit)| *limit == Limit::Rate));
        taken += claim.leases.len();
    }
    assert!(taken <= 3, "{taken} claimed from a bucket of 3");
    let held = stores[1].claim_limited(&due(10, 10), "9:poll", LEASE)?;
    if held.leases.is_empty() {
        assert_eq!(held.held_back, [("charge".to_string(), Limit::Rate)]);
        assert!(held.more_due);
        let next = held.next_token_in.expect("when the next token comes");
        assert!(next <= Duration::from_millis(500), "{next:?}");
    }
    taken += held.leases.len();
    std::thread::sleep(Duration::from_millis(600));
    for store in &stores {
        taken += store
            .claim_limited(&due(10, 10), "9:poll", LEASE)?
            .leases
            .len();
    }
    let span = started.elapsed().as_secs_f64();
    let bound = 3.0 + 2.0 * span;
    assert!(
        taken as f64 <= bound,
        "{taken} claims in {span:.2} s, bound {bound:.1}"
    );
    assert!(taken >= 4, "the bucket refilled: {taken}");
    let running = "SELECT count(*) FROM calls WHERE status = 'running'";
    assert_eq!(db.count(running), taken as i64);
    Ok(())
}

/// PostgreSQL holds a tool's `max_concurrency` and its rate; SQLite only
/// its rate (its cap stays the runner's, per process). A tool without
/// either is claimed as it always was.
fn only_the_limits_a_backend_holds_are_in_its_database(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open_with(limited(Some(2), None))?;
    let held = store.limits_in_database();
    match db {
        TestDb::Sqlite(_) => assert!(held.is_empty(), "{held:?}"),
        TestDb::Postgres(_) => assert_eq!(held[0].max_concurrency, Some(2)),
    }
    Ok(())
}

/// PostgreSQL: three stores (nodes) on one database, `charge` capped at 2:
/// however they claim, two run at once; a completion frees one slot for
/// any node; a node that died keeps its slots until recovery takes its
/// calls back, then they are free again — never lost, never doubled.
#[test]
fn a_capped_tool_runs_no_more_than_its_cap_across_nodes() -> Result<(), StoreError> {
    let db = TestDb::postgres("limits_cap");
    let nodes = [(); 3].map(|_| db.open_with(limited(Some(2), None)).unwrap());
    charges(&nodes[0], 8)?;
    let running = "SELECT count(*) FROM calls WHERE status = 'running'";
    let owner = |n: usize| owner_name(nodes[n].instance(), "poll");
    let first = nodes[0].claim_limited(&due(1, 2), &owner(0), LEASE)?;
    let second = nodes[1].claim_limited(&due(8, 2), &owner(1), LEASE)?;
    assert_eq!((first.leases.len(), second.leases.len()), (1, 1));
    let third = nodes[2].claim_limited(&due(8, 2), &owner(2), LEASE)?;
    assert!(third.leases.is_empty(), "the cap is full: {third:?}");
    assert_eq!(
        third.held_back,
        [("charge".to_string(), Limit::Concurrency)]
    );
    assert_eq!(db.count(running), 2);

    succeed(&nodes[1], &second.leases[0], &json!({}), charged(1))?;
    let after = nodes[2].claim_limited(&due(8, 2), &owner(2), LEASE)?;
    assert_eq!(after.leases.len(), 1, "a completion freed one slot");
    assert!(after.waited.iter().all(|(_, l)| *l == Limit::Concurrency));
    assert_eq!(db.count(running), 2);

    nodes[0].stop(); // node 0 is gone, its call still `running`
    let before_recovery = nodes[1].claim_limited(&due(8, 2), &owner(1), LEASE)?;
    assert!(before_recovery.leases.is_empty(), "its slot still counts");
    assert_eq!(nodes[1].recover(&[])?, [first.leases[0].call_id.clone()]);
    let freed = nodes[1].claim_limited(&due(8, 2), &owner(1), LEASE)?;
    assert_eq!(freed.leases.len(), 1, "recovered, its slot is free again");
    assert_eq!(db.count(running), 2);
    Ok(())
}
