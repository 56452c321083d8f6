//! Claims and fencing: who may run a call, and what a completion under a
//! lease that is no longer the call's changes (nothing). Also the queue the
//! claims take from: `claim_due`, a released lease, the backlog.

use super::*;

on_both_backends!(
    claim_many_decides_each_call_on_its_own,
    only_one_claim_wins_and_a_stale_completion_is_discarded,
    claim_due_takes_the_oldest_due_calls_once,
    a_released_lease_returns_the_call_to_pending_once,
    backlog_and_stats_describe_the_queue,
);

/// Several claims in one operation are decided one by one: a call under a
/// live lease is refused while the others are taken, answers in order.
fn claim_many_decides_each_call_on_its_own(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let ids: Vec<String> = ["a", "b", "c"]
        .iter()
        .map(|k| Ok(created_call(store.create_or_get(new_call(k, "fp"))?).call_id))
        .collect::<Result<_, StoreError>>()?;
    let held = store.claim(&ids[1], "1:other", Duration::from_secs(30))?;
    assert!(held.is_some());
    let leases = store.claim_many(&ids, "1:w", Duration::from_secs(30))?;
    let won: Vec<Option<&str>> = leases
        .iter()
        .map(|l| l.as_ref().map(|l| l.call_id.as_str()))
        .collect();
    assert_eq!(won, [Some(ids[0].as_str()), None, Some(ids[2].as_str())]);
    assert!(leases.iter().flatten().all(|l| l.attempt == 1));
    assert_eq!(audit_events(&store, &ids[0]), ["created", "claimed"]);
    assert_eq!(audit_events(&store, &ids[1]), ["created", "claimed"]);
    Ok(())
}

/// A live lease admits no second claim, an expired one is taken over with
/// the next attempt, and the first holder's late completion is discarded
/// (audited `stale_completion`): one result, one effect.
fn only_one_claim_wins_and_a_stale_completion_is_discarded(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let call = created_call(store.create_or_get(new_call("k", "fp"))?);
    // A zero-length lease expires at once, as after a long pause.
    let a = store
        .claim(&call.call_id, "1:a", Duration::ZERO)?
        .expect("first claim");
    assert_eq!(a.attempt, 1);
    let b = store
        .claim(&call.call_id, "1:b", Duration::from_secs(30))?
        .expect("an expired lease can be taken over");
    assert_eq!(b.attempt, 2);
    assert_eq!(
        store.claim(&call.call_id, "1:c", Duration::from_secs(30))?,
        None
    );

    assert_eq!(
        succeed(&store, &b, &json!({"by": "b"}), charged(1))?,
        Completion::Applied
    );
    assert_eq!(
        succeed(&store, &a, &json!({"by": "a"}), charged(1))?,
        Completion::Stale
    );
    assert_eq!(
        fail(&store, &a, &json!({"retryable": true}))?,
        Completion::Stale
    );
    let after = store.get(&call.call_id)?.unwrap();
    assert_eq!(after.status, Status::Succeeded);
    assert_eq!(after.result, Some(json!({"by": "b"})));
    assert_eq!(effects(&store), 1);
    assert_eq!(
        audit_events(&store, &call.call_id),
        [
            "created",
            "claimed",
            "claimed",
            "succeeded",
            "stale_completion",
            "stale_completion"
        ]
    );
    Ok(())
}

/// `claim_due` takes up to `limit` due calls, oldest first, each once; a
/// call waiting for its retry time, or already running, is not taken.
fn claim_due_takes_the_oldest_due_calls_once(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let ids: Vec<String> = (0..5)
        .map(|n| Ok(created_call(store.create_or_get(new_call(&format!("k{n}"), "fp"))?).call_id))
        .collect::<Result<_, StoreError>>()?;
    let first = store.claim_due(2, "1:a", Duration::from_secs(30))?;
    let taken: Vec<&str> = first.iter().map(|l| l.call_id.as_str()).collect();
    assert_eq!(taken, [ids[0].as_str(), ids[1].as_str()]);
    assert!(first.iter().all(|l| l.attempt == 1));
    let rest = store.claim_due(10, "1:b", Duration::from_secs(30))?;
    let taken: Vec<&str> = rest.iter().map(|l| l.call_id.as_str()).collect();
    assert_eq!(taken, [ids[2].as_str(), ids[3].as_str(), ids[4].as_str()]);
    assert!(store
        .claim_due(10, "1:c", Duration::from_secs(30))?
        .is_empty());
    assert_eq!(audit_events(&store, &ids[4]), ["created", "claimed"]);
    Ok(())
}

/// A stopping process gives back a lease whose tool still runs: the call is
/// `pending` again (audited `released`), and giving it back twice, or after
/// another attempt took it, changes nothing.
fn a_released_lease_returns_the_call_to_pending_once(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let call = created_call(store.create_or_get(new_call("k", "fp"))?);
    let lease = store
        .claim(&call.call_id, "1:w", Duration::from_secs(30))?
        .unwrap();
    assert_eq!(
        store.release(&lease, &ToolAtRelease::Idle)?,
        Completion::Applied
    );
    assert_eq!(store.get(&call.call_id)?.unwrap().status, Status::Pending);
    assert_eq!(
        store.release(&lease, &ToolAtRelease::Idle)?,
        Completion::Stale
    );
    let next = store
        .claim(&call.call_id, "1:v", Duration::from_secs(30))?
        .unwrap();
    assert_eq!(next.attempt, 2);
    assert_eq!(
        store.release(&lease, &ToolAtRelease::Idle)?,
        Completion::Stale
    );
    assert_eq!(
        audit_events(&store, &call.call_id),
        ["created", "claimed", "released", "claimed"]
    );
    Ok(())
}

/// `/metrics`' backlog and `/stats` count the same calls by status, and the
/// oldest pending call is the first one created.
fn backlog_and_stats_describe_the_queue(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    assert_eq!(store.backlog()?.oldest_pending_created_at, None);
    let first = created_call(store.create_or_get(new_call("a", "fp"))?);
    store.create_or_get(new_call("b", "fp"))?;
    let running = created_call(store.create_or_get(new_call("c", "fp"))?);
    store
        .claim(&running.call_id, "1:w", Duration::from_secs(30))?
        .unwrap();
    let backlog = store.backlog()?;
    let pending = |counts: &[(String, i64)], status: &str| {
        counts
            .iter()
            .find(|(s, _)| s == status)
            .map_or(0, |(_, n)| *n)
    };
    assert_eq!(pending(&backlog.calls_by_status, "pending"), 2);
    assert_eq!(pending(&backlog.calls_by_status, "running"), 1);
    assert_eq!(backlog.oldest_pending_created_at, Some(first.created_at));
    let stats = store.stats(Scope::All)?;
    assert_eq!((stats.calls, stats.effects), (3, 0));
    assert_eq!(stats.by_status, backlog.calls_by_status);
    assert_eq!(stats.attempts, [(0, 2), (1, 1)]);
    assert_eq!(store.health().database, Ok(()));
    Ok(())
}
