//! `claim_due_within`, the runner poll's one-operation claim: oldest first,
//! within a total, and never more calls of a named (capped) tool than its
//! number — whatever else is due.

use super::*;

on_both_backends!(claim_due_within_takes_no_more_of_a_tool_than_its_limit);

/// The ids of `leases`, sorted (PostgreSQL's `RETURNING` has no order).
fn sorted_ids(leases: &[Lease]) -> Vec<String> {
    let mut ids: Vec<String> = leases.iter().map(|l| l.call_id.clone()).collect();
    ids.sort();
    ids
}

/// Due, oldest first: sleep, sleep, charge, sleep, charge, and a call of a
/// tool nobody knows. With `sleep` limited to one, a claim of four takes the
/// oldest sleep and every other call behind the sleeps it passes over; with
/// `sleep` at zero nothing is left to take; the total bounds a generous
/// per-tool limit.
fn claim_due_within_takes_no_more_of_a_tool_than_its_limit(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let mut ids = Vec::new();
    for (n, tool) in ["sleep", "sleep", "charge", "sleep", "charge", "mystery"]
        .iter()
        .enumerate()
    {
        let new = NewCall {
            tool: tool.to_string(),
            ..new_call(&format!("k{n}"), "fp")
        };
        ids.push(created_call(store.create_or_get(new)?).call_id);
    }
    let lease = Duration::from_secs(30);
    let limits = |total: usize, sleep: usize| DueLimits {
        total,
        per_tool: vec![("sleep".to_string(), sleep)],
    };
    let first = store.claim_due_within(&limits(4, 1), "1:poll@a", lease)?;
    let mut expected = vec![
        ids[0].clone(),
        ids[2].clone(),
        ids[4].clone(),
        ids[5].clone(),
    ];
    expected.sort();
    assert_eq!(sorted_ids(&first), expected);
    assert!(store
        .claim_due_within(&limits(10, 0), "1:poll@b", lease)?
        .is_empty());
    let one = store.claim_due_within(&limits(1, 5), "1:poll@c", lease)?;
    assert_eq!(sorted_ids(&one), [ids[1].clone()], "the total holds");
    assert_eq!(
        audit_events(&store, &ids[1]),
        ["created", "claimed"],
        "claimed once"
    );
    Ok(())
}
