//! Create already claimed (`create_claimed`): a new call is written
//! `running` under the creator's lease in one transaction with its
//! `created` and `claimed` rows; a known key is answered as by
//! `create_or_get`, with no lease; the lease is fenced and recovered like
//! any claim's.

use super::*;

on_both_backends!(
    a_new_call_is_created_running_with_its_lease_and_both_audit_rows,
    a_known_key_is_answered_as_create_or_get_answers_it_with_no_lease,
    many_threads_same_key_one_lease,
    a_lease_won_at_creation_is_fenced_like_any,
    an_expired_lease_won_at_creation_is_recovered,
);

const OWNER: &str = "7:api@i_test";

fn create_claimed(store: &CallStore, key: &str, lease: Duration) -> CreatedClaimed {
    store
        .create_claimed(new_call(key, "fp"), OWNER, lease)
        .unwrap()
}

/// A new call is `running`, attempt 1, leased to the owner from now for
/// the lease, and the row, the lease and the audit agree.
fn a_new_call_is_created_running_with_its_lease_and_both_audit_rows(
    db: &TestDb,
) -> Result<(), StoreError> {
    let store = db.open()?;
    let before = now();
    let CreatedClaimed { created, lease } = create_claimed(&store, "k", Duration::from_secs(30));
    let after = now();
    let Created::New(call) = created else {
        panic!("a new key creates a call: {created:?}");
    };
    let lease = lease.expect("a new call comes with its lease");
    assert_eq!(call.status, Status::Running);
    assert_eq!((call.attempt, lease.attempt), (1, 1));
    assert_eq!(call.owner.as_deref(), Some(OWNER));
    // The database's clock may differ from this process's by a little.
    let until = lease.lease_until;
    assert!(until >= before + 29.0 && until <= after + 31.0, "{until}");
    assert_eq!(call.lease_until, Some(until));
    assert_eq!(
        (
            &lease.call_id,
            &lease.effect_id,
            &lease.tool,
            &lease.args_json
        ),
        (&call.call_id, &call.effect_id, &call.tool, &call.args_json)
    );
    let stored = store.get(&call.call_id)?.expect("committed");
    assert_eq!(stored.status, Status::Running);
    assert_eq!(stored.attempt, 1);
    assert_eq!(stored.owner.as_deref(), Some(OWNER));
    let events = store
        .audit_for(crate::auth::ANONYMOUS, &call.call_id)?
        .unwrap();
    let timeline: Vec<(&str, Option<i64>, Option<&str>)> = events
        .iter()
        .map(|e| (e.event.as_str(), e.attempt, e.detail.as_deref()))
        .collect();
    let claimed = format!("{OWNER} attempt=1");
    assert_eq!(
        timeline,
        [
            ("created", Some(0), Some("charge")),
            ("claimed", Some(1), Some(claimed.as_str()))
        ]
    );
    assert!(store.due_calls(10)?.is_empty(), "a claimed call is not due");
    Ok(())
}

/// The same key again (claimed or not), another fingerprint, a retryable
/// failure: each answer is `create_or_get`'s, and none carries a lease or
/// writes a `claimed` row.
fn a_known_key_is_answered_as_create_or_get_answers_it_with_no_lease(
    db: &TestDb,
) -> Result<(), StoreError> {
    let store = db.open()?;
    let first = create_claimed(&store, "k", Duration::from_secs(30));
    let id = created_call(first.created).call_id;
    let again = create_claimed(&store, "k", Duration::from_secs(30));
    assert_eq!(again.lease, None);
    assert!(matches!(&again.created, Created::Existing(c)
        if c.call_id == id && c.status == Status::Running && c.attempt == 1));
    let other = store.create_claimed(new_call("k", "fp2"), OWNER, Duration::from_secs(30))?;
    assert_eq!(other.lease, None);
    assert!(matches!(&other.created, Created::Conflict(c) if c.call_id == id));
    assert_eq!(audit_events(&store, &id), ["created", "claimed"]);

    let pending = created_call(store.create_or_get(new_call("p", "fp"))?);
    let replay = create_claimed(&store, "p", Duration::from_secs(30));
    assert_eq!(replay.lease, None);
    assert!(matches!(&replay.created, Created::Existing(c)
        if c.call_id == pending.call_id && c.status == Status::Pending));

    let lease = store.claim(&pending.call_id, "1:w", Duration::from_secs(30))?;
    let error = json!({"code": "tool_failed", "retryable": true});
    fail(&store, &lease.unwrap(), &error)?;
    let reset = create_claimed(&store, "p", Duration::from_secs(30));
    assert_eq!(reset.lease, None);
    assert!(matches!(&reset.created, Created::RetryReset(c)
        if c.call_id == pending.call_id && c.status == Status::Pending));
    assert_eq!(
        audit_events(&store, &pending.call_id),
        ["created", "claimed", "failed", "retry_reset"]
    );
    assert_eq!(store.stats(Scope::All)?.calls, 2);
    Ok(())
}

/// Sixteen threads racing on one key: one call, and exactly one of them
/// holds its lease.
fn many_threads_same_key_one_lease(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let answers: Vec<CreatedClaimed> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..16)
            .map(|_| s.spawn(|| create_claimed(&store, "k", Duration::from_secs(30))))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let leases: Vec<&Lease> = answers.iter().filter_map(|a| a.lease.as_ref()).collect();
    assert_eq!(leases.len(), 1, "one creator holds the lease");
    assert!(answers
        .iter()
        .all(|a| created_call(a.created.clone()).call_id == leases[0].call_id));
    assert_eq!(store.stats(Scope::All)?.calls, 1);
    assert_eq!(
        audit_events(&store, &leases[0].call_id),
        ["created", "claimed"]
    );
    Ok(())
}

/// While the lease is live no claim takes the call; a completion under the
/// lease's attempt applies, and one effect is written.
fn a_lease_won_at_creation_is_fenced_like_any(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let CreatedClaimed { created, lease } = create_claimed(&store, "k", Duration::from_secs(30));
    let call = created_call(created);
    let lease = lease.unwrap();
    assert_eq!(
        store.claim(&call.call_id, "1:b", Duration::from_secs(30))?,
        None
    );
    assert!(
        store.recover(&[])?.is_empty(),
        "a live lease of this process"
    );
    assert_eq!(
        succeed(&store, &lease, &json!({"ok": true}), charged(1))?,
        Completion::Applied
    );
    let done = store.get(&call.call_id)?.unwrap();
    assert_eq!((done.status, done.attempt), (Status::Succeeded, 1));
    assert_eq!(effects(&store), 1);
    assert_eq!(
        audit_events(&store, &call.call_id),
        ["created", "claimed", "succeeded"]
    );
    Ok(())
}

/// A creator that never finishes (its lease expired: it died or paused):
/// recovery returns the call to `pending`, the next claim runs attempt 2,
/// and the creator's late completion is discarded. One effect.
fn an_expired_lease_won_at_creation_is_recovered(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let CreatedClaimed { created, lease } = create_claimed(&store, "k", Duration::ZERO);
    let call = created_call(created);
    let first = lease.unwrap();
    assert_eq!(store.recover(&[])?, vec![call.call_id.clone()]);
    assert_eq!(store.get(&call.call_id)?.unwrap().status, Status::Pending);
    let second = store
        .claim(&call.call_id, "1:w", Duration::from_secs(30))?
        .expect("a recovered call is claimed again");
    assert_eq!(second.attempt, 2);
    assert_eq!(
        succeed(&store, &second, &json!({}), charged(1))?,
        Completion::Applied
    );
    assert_eq!(
        succeed(&store, &first, &json!({}), charged(1))?,
        Completion::Stale
    );
    assert_eq!(effects(&store), 1);
    assert_eq!(
        audit_events(&store, &call.call_id),
        [
            "created",
            "claimed",
            "recover",
            "claimed",
            "succeeded",
            "stale_completion"
        ]
    );
    Ok(())
}
