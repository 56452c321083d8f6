//! Create-or-get, the store's one entry: one call per key under any race,
//! a conflict for another fingerprint, and a retryable failure reset by the
//! same key. (The bulk loader's rows are tested beside it, `sqlite/bulk.rs`.)

use super::*;

on_both_backends!(
    same_key_gives_one_call_and_other_fingerprint_conflicts,
    retryable_failure_is_reset_by_same_key_and_permanent_one_is_not,
    many_threads_same_key_share_one_call,
);

/// The same key and fingerprint give the same call; the same key with
/// another fingerprint is a conflict, never a second call.
fn same_key_gives_one_call_and_other_fingerprint_conflicts(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let first = store.create_or_get(new_call("k", "fp1"))?;
    assert!(matches!(first, Created::New(_)));
    let again = store.create_or_get(new_call("k", "fp1"))?;
    assert!(matches!(again, Created::Existing(_)));
    assert_eq!(
        created_call(first.clone()).call_id,
        created_call(again).call_id
    );
    assert!(matches!(
        store.create_or_get(new_call("k", "fp2"))?,
        Created::Conflict(_)
    ));
    let call = created_call(first);
    assert!(call.call_id.starts_with("c_") && call.call_id.len() == 18);
    assert_eq!(
        crate::store::call_id_of_effect(&call.effect_id).as_deref(),
        Some(call.call_id.as_str()),
        "the effect id names its call"
    );
    Ok(())
}

/// A same-key request resets a retryable failure to `pending`; a permanent
/// failure stays what it is.
fn retryable_failure_is_reset_by_same_key_and_permanent_one_is_not(
    db: &TestDb,
) -> Result<(), StoreError> {
    let store = db.open()?;
    for (key, retryable) in [("r", true), ("p", false)] {
        let call = created_call(store.create_or_get(new_call(key, "fp"))?);
        let lease = store
            .claim(&call.call_id, "1:w", Duration::from_secs(30))?
            .unwrap();
        fail(
            &store,
            &lease,
            &json!({"code": "tool_failed", "retryable": retryable}),
        )?;
        let again = store.create_or_get(new_call(key, "fp"))?;
        if retryable {
            assert!(matches!(&again, Created::RetryReset(c) if c.status == Status::Pending));
        } else {
            assert!(matches!(&again, Created::Existing(c) if c.status == Status::Failed));
        }
    }
    Ok(())
}

/// Sixteen threads racing on one key all get the one call the store made.
fn many_threads_same_key_share_one_call(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let ids: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..16)
            .map(|_| {
                s.spawn(|| created_call(store.create_or_get(new_call("k", "fp")).unwrap()).call_id)
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(ids.iter().all(|id| id == &ids[0]));
    assert_eq!(store.stats(Scope::All)?.calls, 1);
    Ok(())
}
