//! Recovery: which running calls come back to `pending` (an expired lease,
//! an owner whose instance fell silent where the kernel cannot vouch for
//! it) and what the audit says about whose lease it was.

use super::*;

on_both_backends!(
    recover_resets_only_expired_running_calls,
    recovery_names_the_owner_whose_lease_expired,
    a_silent_heartbeat_reclaims_only_where_the_kernel_cannot_vouch,
    a_lapsed_lease_a_worker_here_still_runs_is_left_alone,
);

/// `recover` returns only running calls whose lease expired to `pending`
/// (and makes them due); live leases and settled calls stay as they are.
fn recover_resets_only_expired_running_calls(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let expired = created_call(store.create_or_get(new_call("a", "fp"))?);
    let live = created_call(store.create_or_get(new_call("b", "fp"))?);
    let done = created_call(store.create_or_get(new_call("c", "fp"))?);
    store
        .claim(&expired.call_id, "1:x", Duration::ZERO)?
        .unwrap();
    store
        .claim(&live.call_id, "1:y", Duration::from_secs(30))?
        .unwrap();
    let lease = store.claim(&done.call_id, "1:z", Duration::ZERO)?.unwrap();
    succeed(&store, &lease, &json!({}), None)?;

    assert_eq!(store.recover(&[])?, vec![expired.call_id.clone()]);
    assert_eq!(
        store.get(&expired.call_id)?.unwrap().status,
        Status::Pending
    );
    assert_eq!(store.get(&live.call_id)?.unwrap().status, Status::Running);
    assert_eq!(store.get(&done.call_id)?.unwrap().status, Status::Succeeded);
    let due: Vec<String> = store
        .due_calls(10)?
        .into_iter()
        .map(|d| d.call_id)
        .collect();
    assert_eq!(due, vec![expired.call_id]);
    assert!(store.recover(&[])?.is_empty());
    Ok(())
}

/// The `recover` audit row names the owner whose lease expired (it used to
/// read the owner after setting it to NULL).
fn recovery_names_the_owner_whose_lease_expired(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let call = created_call(store.create_or_get(new_call("k", "fp"))?);
    store
        .claim(&call.call_id, "4242:worker-7", Duration::ZERO)?
        .expect("claimed");
    assert_eq!(store.recover(&[])?, vec![call.call_id.clone()]);
    let events = store
        .audit_for(crate::auth::ANONYMOUS, &call.call_id)?
        .unwrap();
    let recover = events
        .iter()
        .find(|e| e.event == "recover")
        .expect("recover");
    let detail = recover.detail.clone().unwrap_or_default();
    assert_eq!(detail, "lease expired (owner 4242:worker-7)");
    Ok(())
}

/// A silent heartbeat takes back the calls of a process on another host, but
/// never those of a process whose pid is alive on this one (it may just be
/// starved of CPU); a long lease is no obstacle to the first.
fn a_silent_heartbeat_reclaims_only_where_the_kernel_cannot_vouch(
    db: &TestDb,
) -> Result<(), StoreError> {
    let store = db.open()?;
    let long_ago = now() - 60.0;
    let me = store.instance().clone();
    db.execute(&format!(
        "INSERT INTO instances (instance_id, pid, host, started_at, heartbeat_at)
         VALUES ('i_elsewhere', 1, 'another-host', {long_ago}, {long_ago}),
                ('i_here', {}, '{}', {long_ago}, {long_ago})",
        std::process::id(),
        me.host
    ));
    let mut owners = Vec::new();
    for (key, instance) in [("far", "i_elsewhere"), ("near", "i_here")] {
        let call = created_call(store.create_or_get(new_call(key, "fp"))?);
        let owner = format!("1:worker-0@{instance}");
        store
            .claim(&call.call_id, &owner, Duration::from_secs(600))?
            .expect("claimed");
        owners.push(call.call_id);
    }
    assert_eq!(store.recover(&[])?, vec![owners[0].clone()]);
    let near = store.get(&owners[1])?.unwrap();
    assert_eq!(near.status, Status::Running);
    Ok(())
}

/// A lease that lapsed while this process's own worker still runs its tool
/// (named in `running_here`) is left alone — a stalled write let it lapse,
/// and the next extension renews it — while the same lapse is recovered
/// when no worker here holds it, when the lease named is of another attempt,
/// or when the call's owner is another instance.
fn a_lapsed_lease_a_worker_here_still_runs_is_left_alone(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let mine = crate::store::owner_name(store.instance(), "worker-0");
    let lapse = |key: &str, owner: &str| -> Result<Lease, StoreError> {
        let call = created_call(store.create_or_get(new_call(key, "fp"))?);
        Ok(store
            .claim(&call.call_id, owner, Duration::ZERO)?
            .expect("claimed"))
    };
    let running = lapse("running-here", &mine)?;
    let other_attempt = lapse("other-attempt", &mine)?;
    let elsewhere = lapse("elsewhere", "1:worker-0@i_elsewhere")?;
    let stale = Lease {
        attempt: other_attempt.attempt + 1,
        ..other_attempt.clone()
    };
    let running_here = [&running, &stale, &elsewhere].map(LeaseHeld::from);

    let mut recovered = store.recover(&running_here)?;
    recovered.sort();
    let mut expected = vec![other_attempt.call_id, elsewhere.call_id];
    expected.sort();
    assert_eq!(recovered, expected);
    assert_eq!(
        store.get(&running.call_id)?.unwrap().status,
        Status::Running
    );
    assert_eq!(store.recover(&[])?, vec![running.call_id]);
    Ok(())
}
