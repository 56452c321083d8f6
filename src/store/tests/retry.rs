//! Automatic retries and lease extension in the store: a retry waits for its
//! time, both are fenced by the lease's attempt like a completion.

use super::*;

on_both_backends!(
    a_scheduled_retry_is_claimed_only_once_it_is_due,
    retries_and_extensions_are_fenced_by_the_attempt,
);
use std::sync::mpsc;

/// `retry_later_then`, waiting for the commit.
fn retry_later(
    store: &CallStore,
    lease: &Lease,
    error: &Value,
    delay: Duration,
) -> Result<Completion, StoreError> {
    let (tx, rx) = mpsc::channel();
    store.retry_later_then(lease, error, delay, Box::new(move |r| tx.send(r).unwrap()));
    rx.recv().unwrap()
}

fn due_ids(store: &CallStore) -> Vec<String> {
    let due = store.due_calls(100).unwrap();
    due.into_iter().map(|d| d.call_id).collect()
}

/// A retryable failure with attempts left returns the call to `pending` with
/// its error and a not-before time; until then no claim takes it and no scan
/// lists it; after it, the next claim is attempt 2 and clears the time.
fn a_scheduled_retry_is_claimed_only_once_it_is_due(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let call = created_call(store.create_or_get(new_call("k", "fp"))?);
    let lease = store
        .claim(&call.call_id, "1:w", Duration::from_secs(30))?
        .unwrap();
    let error = json!({"code": "downstream_unavailable", "message": "503", "retryable": true});
    let delay = Duration::from_millis(400);
    let scheduled_at = now();
    assert_eq!(
        retry_later(&store, &lease, &error, delay)?,
        Completion::Applied
    );

    let waiting = store.get(&call.call_id)?.unwrap();
    assert_eq!(waiting.status, Status::Pending);
    assert_eq!(waiting.error, Some(error));
    assert_eq!(
        (waiting.lease_until, waiting.owner.as_deref()),
        (None, None)
    );
    let not_before = waiting.next_attempt_at.expect("a retry time");
    assert!(
        (not_before - scheduled_at - 0.4).abs() < 0.3,
        "{not_before} {scheduled_at}"
    );
    assert_eq!(waiting.to_json()["next_attempt_at"], json!(not_before));
    assert!(store
        .claim(&call.call_id, "1:early", Duration::from_secs(30))?
        .is_none());
    assert!(due_ids(&store).is_empty(), "not due yet");

    while now() <= not_before {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(due_ids(&store), std::slice::from_ref(&call.call_id));
    let second = store
        .claim(&call.call_id, "1:w", Duration::from_secs(30))?
        .unwrap();
    assert_eq!(second.attempt, 2);
    assert_eq!(store.get(&call.call_id)?.unwrap().next_attempt_at, None);
    assert_eq!(
        audit_events(&store, &call.call_id),
        ["created", "claimed", "retry_scheduled", "claimed"]
    );
    Ok(())
}

/// A retry scheduled under a lost lease changes nothing (`stale_completion`),
/// and a lease is extended only while its attempt still owns the call.
fn retries_and_extensions_are_fenced_by_the_attempt(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let call = created_call(store.create_or_get(new_call("k", "fp"))?);
    let lost = store.claim(&call.call_id, "1:a", Duration::ZERO)?.unwrap();
    let owner = store
        .claim(&call.call_id, "1:b", Duration::from_secs(30))?
        .unwrap();
    let error = json!({"code": "x", "message": "m", "retryable": true});
    assert_eq!(
        retry_later(&store, &lost, &error, Duration::ZERO)?,
        Completion::Stale
    );
    assert_eq!(
        store.extend(&[lost, owner.clone()], Duration::from_secs(90))?,
        [false, true]
    );
    let running = store.get(&call.call_id)?.unwrap();
    assert_eq!((running.status, running.attempt), (Status::Running, 2));
    assert!(running.lease_until.unwrap() > now() + 60.0, "extended");
    succeed(&store, &owner, &json!({}), None)?;
    assert_eq!(store.extend(&[owner], Duration::from_secs(90))?, [false]);
    assert_eq!(
        audit_events(&store, &call.call_id),
        [
            "created",
            "claimed",
            "claimed",
            "stale_completion",
            "succeeded"
        ]
    );
    Ok(())
}
