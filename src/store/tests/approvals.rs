//! Approval gates in the store, on both backends (`store::approval` has the
//! rules): a gated call waits holding nothing, a same-key retry finds it,
//! a decision is single-use and audited, a denial and an expiry end it
//! `denied` with no effect, the fingerprint and the client's right bind a
//! decision, a cancel closes the request, the queue stays in its tenant,
//! the webhook outbox gives each attempt to one deliverer, and `verify`
//! finds every row consistent — then retention takes them all.

use super::super::approval::{
    Approvers, Decided, Decision, Delivery, Gate, Source, Verdict, APPROVAL_REQUESTED,
};
use super::super::business_key::{BusinessKey, Guarded};
use super::*;

on_both_backends!(
    a_gated_call_waits_holding_nothing_and_its_key_finds_it,
    a_decision_is_single_use_and_audited,
    a_denial_and_an_expiry_end_it_denied_with_no_effect,
    the_fingerprint_and_the_clients_right_bind_a_decision,
    a_cancel_closes_the_request,
    the_queue_stays_in_its_tenant,
    a_notification_attempt_goes_to_one_deliverer,
    verify_finds_every_approval_row_consistent_and_retention_takes_them,
);

const LONG: Duration = Duration::from_secs(30);

fn gate(timeout: Duration, notify: bool) -> Option<Gate> {
    Some(Gate {
        approvers: Approvers::People,
        timeout,
        notify,
    })
}

fn gated_in(tenant: &str, key: &str, timeout: Duration, notify: bool) -> NewCall {
    NewCall {
        gate: gate(timeout, notify),
        ..new_call_in(tenant, key, "fp")
    }
}

fn gated(key: &str) -> NewCall {
    gated_in(
        crate::auth::ANONYMOUS,
        key,
        Duration::from_secs(3600),
        false,
    )
}

fn decision(verdict: Verdict, source: Source, reason: Option<&str>) -> Decision {
    Decision {
        verdict,
        source,
        by: "alice@acme".into(),
        reason: reason.map(str::to_string),
        fingerprint: None,
    }
}

fn approve() -> Decision {
    decision(Verdict::Approve, Source::Person, Some("looks right"))
}

fn new_call_of(created: Created) -> Call {
    match created {
        Created::New(call) => call,
        other => panic!("expected a new call, got {other:?}"),
    }
}

fn a_gated_call_waits_holding_nothing_and_its_key_finds_it(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let call = new_call_of(store.create_or_get(gated("g"))?);
    assert_eq!(call.status, Status::AwaitingApproval);
    assert_eq!(
        (call.attempt, call.lease_until, call.owner.as_deref()),
        (0, None, None)
    );
    // Created claimed is refused for it: it waits, no lease.
    let claimed = store.create_claimed(gated("g2"), "w", LONG)?;
    assert!(claimed.lease.is_none());
    assert_eq!(
        created_call(claimed.created).status,
        Status::AwaitingApproval
    );
    assert!(store.claim(&call.call_id, "w", LONG)?.is_none());
    assert!(store.claim_due(10, "w", LONG)?.is_empty());
    assert!(store.due_calls(10)?.is_empty());
    // The same key answers the same waiting call, and asks nothing twice.
    match store.create_or_get(gated("g"))? {
        Created::Existing(again) => assert_eq!(again.call_id, call.call_id),
        other => panic!("{other:?}"),
    }
    assert_eq!(store.waiting(None, None, 10)?.len(), 2);
    let events = audit_events(&store, &call.call_id);
    assert_eq!(events, ["created", "approval_requested"]);
    let counts = store.counts(Scope::All)?;
    assert_eq!(counts.in_status("awaiting_approval"), 2);
    let since = counts.oldest_awaiting_since.expect("an open request");
    assert!(
        (since - call.created_at).abs() < 1.0,
        "{since} vs {}",
        call.created_at
    );
    let approval = store.approval(None, &call.call_id)?.expect("its request");
    assert_eq!(approval.fingerprint, call.fingerprint);
    assert!(approval.outcome.is_none());
    assert!(approval.expires_at > approval.requested_at + 3599.0);
    Ok(())
}

fn a_decision_is_single_use_and_audited(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let call = new_call_of(store.create_or_get(gated("d"))?);
    let id = call.call_id.as_str();
    let decided = store.decide(None, id, &approve())?;
    let Decided::Applied {
        call: approved,
        approval,
    } = decided
    else {
        panic!("{decided:?}");
    };
    assert_eq!(approved.status, Status::Pending);
    let ruling = approval.outcome.expect("decided");
    assert_eq!(ruling.decision, "approved");
    assert_eq!(ruling.by.as_deref(), Some("alice@acme"));
    assert_eq!(ruling.source, Some(Source::Person));
    // A second decision, either way, finds the first and changes nothing.
    for second in [
        approve(),
        decision(Verdict::Deny, Source::Person, Some("no")),
    ] {
        match store.decide(None, id, &second)? {
            Decided::AlreadyDecided { call, approval } => {
                assert_eq!(call.status, Status::Pending);
                assert_eq!(approval.outcome.unwrap().decision, "approved");
            }
            other => panic!("{other:?}"),
        }
    }
    let timeline = store.audit_for(crate::auth::ANONYMOUS, id)?.unwrap();
    let approved_rows: Vec<_> = timeline.iter().filter(|e| e.event == "approved").collect();
    assert_eq!(approved_rows.len(), 1, "{timeline:?}");
    assert_eq!(
        approved_rows[0].detail.as_deref(),
        Some("by alice@acme (person): looks right")
    );
    // Approved, it runs as any call.
    let lease = store
        .claim(id, "w", LONG)?
        .expect("a pending call is claimed");
    succeed(&store, &lease, &json!({"ok": true}), charged(1))?;
    assert_eq!(store.get(id)?.unwrap().status, Status::Succeeded);
    assert_eq!(effects(&store), 1);
    Ok(())
}

fn a_denial_and_an_expiry_end_it_denied_with_no_effect(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let key = |v: &str| {
        Some(BusinessKey {
            value: v.into(),
            window_secs: 3600.0,
        })
    };
    let Guarded::Created(Created::New(held)) =
        store.create_or_get_guarded(gated("n"), key("[1]"))?
    else {
        panic!("a new call");
    };
    // While it waits it holds its business key.
    assert!(matches!(
        store.create_or_get_guarded(gated("n2"), key("[1]"))?,
        Guarded::Duplicate(c) if c.call_id == held.call_id
    ));
    let deny = decision(Verdict::Deny, Source::Person, Some("too much"));
    let Decided::Applied { call: denied, .. } = store.decide(None, &held.call_id, &deny)? else {
        panic!("denied");
    };
    assert_eq!(denied.status, Status::Denied);
    assert!(denied.is_settled() && denied.status.is_terminal());
    let error = denied.error.clone().unwrap();
    assert_eq!(error["code"], "approval_denied");
    assert_eq!(error["message"], "too much");
    assert!(store.claim(&held.call_id, "w", LONG)?.is_none());
    // Its key replays it; its business key no longer holds.
    assert!(
        matches!(store.create_or_get(gated("n"))?, Created::Existing(c) if c.status == Status::Denied)
    );
    assert!(matches!(
        store.create_or_get_guarded(gated("n3"), key("[1]"))?,
        Guarded::Created(Created::New(_))
    ));

    let soon = gated_in(crate::auth::ANONYMOUS, "e", Duration::from_millis(1), false);
    let expiring = new_call_of(store.create_or_get(soon)?);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let ended = loop {
        let ended = store.expire_approvals(10)?;
        if !ended.is_empty() {
            break ended;
        }
        assert!(std::time::Instant::now() < deadline, "never expired");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(ended.len(), 1);
    assert_eq!(ended[0].call_id, expiring.call_id);
    assert_eq!(ended[0].status, Status::Denied);
    assert_eq!(ended[0].error.as_ref().unwrap()["code"], "approval_expired");
    assert!(
        store.expire_approvals(10)?.is_empty(),
        "expiry is single-use too"
    );
    assert!(matches!(
        store.decide(None, &expiring.call_id, &approve())?,
        Decided::AlreadyDecided { .. }
    ));
    let approval = store.approval(None, &expiring.call_id)?.unwrap();
    assert_eq!(approval.outcome.unwrap().source, Some(Source::Expiry));
    assert_eq!(effects(&store), 0);
    Ok(())
}

fn the_fingerprint_and_the_clients_right_bind_a_decision(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let call = new_call_of(store.create_or_get(gated("f"))?);
    let mut wrong = approve();
    wrong.fingerprint = Some("0".repeat(64));
    assert!(matches!(
        store.decide(None, &call.call_id, &wrong)?,
        Decided::FingerprintMismatch { .. }
    ));
    let client = decision(Verdict::Approve, Source::Client, None);
    assert!(matches!(
        store.decide(None, &call.call_id, &client)?,
        Decided::ClientNotAllowed { .. }
    ));
    assert_eq!(
        store.get(&call.call_id)?.unwrap().status,
        Status::AwaitingApproval
    );
    // A request open to the client takes the client's answer.
    let open = NewCall {
        gate: Some(Gate {
            approvers: Approvers::PeopleOrClient,
            timeout: LONG,
            notify: false,
        }),
        ..new_call("c", "fp")
    };
    let open = new_call_of(store.create_or_get(open)?);
    assert!(matches!(
        store.decide(None, &open.call_id, &client)?,
        Decided::Applied { call, .. } if call.status == Status::Pending
    ));
    // The right fingerprint binds like none.
    let mut right = approve();
    right.fingerprint = Some(call.fingerprint.clone());
    assert!(matches!(
        store.decide(None, &call.call_id, &right)?,
        Decided::Applied { .. }
    ));
    // An ungated call has no request.
    let plain = created_call(store.create_or_get(new_call("p", "fp"))?);
    assert!(matches!(
        store.decide(None, &plain.call_id, &approve())?,
        Decided::NoRequest(_)
    ));
    assert!(store.approval(None, &plain.call_id)?.is_none());
    Ok(())
}

fn a_cancel_closes_the_request(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let call = new_call_of(store.create_or_get(gated("x"))?);
    let cancelled = store.cancel(crate::auth::ANONYMOUS, &call.call_id, Some("not needed"))?;
    assert!(
        matches!(&cancelled, super::super::cancel::Cancel::Cancelled { call, now: true }
            if call.status == Status::Cancelled),
        "{cancelled:?}"
    );
    let approval = store.approval(None, &call.call_id)?.unwrap();
    let ruling = approval.outcome.unwrap();
    assert_eq!(
        (ruling.decision.as_str(), ruling.source),
        ("cancelled", Some(Source::Cancel))
    );
    assert!(matches!(
        store.decide(None, &call.call_id, &approve())?,
        Decided::AlreadyDecided { .. }
    ));
    assert!(store.waiting(None, None, 10)?.is_empty());
    assert_eq!(
        audit_events(&store, &call.call_id),
        ["created", "approval_requested", "cancelled"]
    );
    Ok(())
}

fn the_queue_stays_in_its_tenant(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let hour = Duration::from_secs(3600);
    let a1 = new_call_of(store.create_or_get(gated_in("a", "1", hour, false))?);
    let a2 = new_call_of(store.create_or_get(gated_in("a", "2", hour, false))?);
    let b1 = new_call_of(store.create_or_get(gated_in("b", "1", hour, false))?);
    let ids = |w: Vec<super::super::approval::Waiting>| -> Vec<String> {
        w.into_iter().map(|w| w.call.call_id).collect()
    };
    assert_eq!(
        ids(store.waiting(Some("a"), None, 10)?),
        [a1.call_id.clone(), a2.call_id.clone()]
    );
    assert_eq!(
        ids(store.waiting(Some("a"), Some(&a1.call_id), 10)?),
        [a2.call_id.as_str()]
    );
    assert_eq!(
        ids(store.waiting(Some("a"), None, 1)?),
        [a1.call_id.as_str()]
    );
    assert_eq!(ids(store.waiting(None, None, 10)?).len(), 3);
    // Another tenant's call is not found by a tenant's decision or read.
    assert!(matches!(
        store.decide(Some("a"), &b1.call_id, &approve())?,
        Decided::NotFound
    ));
    assert!(store.approval(Some("a"), &b1.call_id)?.is_none());
    assert!(matches!(
        store.decide(Some("b"), &b1.call_id, &approve())?,
        Decided::Applied { .. }
    ));
    assert_eq!(
        ids(store.waiting(Some("b"), None, 10)?),
        Vec::<String>::new()
    );
    Ok(())
}

fn a_notification_attempt_goes_to_one_deliverer(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let call = new_call_of(store.create_or_get(gated_in("a", "w", LONG, true))?);
    new_call_of(store.create_or_get(gated_in("a", "quiet", LONG, false))?);
    let taken = store.take_notifications(10, LONG)?;
    assert_eq!(taken.len(), 1, "only the call whose tenant has a webhook");
    let first = &taken[0];
    assert_eq!(
        (first.event.as_str(), first.attempts),
        (APPROVAL_REQUESTED, 1)
    );
    assert_eq!(first.call.call_id, call.call_id);
    assert_eq!(first.approval.call_id, call.call_id);
    // Held: nobody else takes it meanwhile.
    assert!(store.take_notifications(10, LONG)?.is_empty());
    store.settle_notification(&first.msg_id, 1, Delivery::RetryIn(Duration::ZERO))?;
    let again = store.take_notifications(10, LONG)?;
    assert_eq!((again.len(), again[0].attempts), (1, 2));
    assert_eq!(
        again[0].msg_id, first.msg_id,
        "the same message on every attempt"
    );
    // A stale settle (attempt 1's) changes nothing; attempt 2's does.
    store.settle_notification(&first.msg_id, 1, Delivery::Delivered)?;
    store.settle_notification(&first.msg_id, 2, Delivery::RetryIn(Duration::ZERO))?;
    let third = store.take_notifications(10, LONG)?;
    assert_eq!(third[0].attempts, 3);
    store.settle_notification(&first.msg_id, 3, Delivery::Delivered)?;
    store.settle_notification(&first.msg_id, 3, Delivery::RetryIn(Duration::ZERO))?;
    assert!(
        store.take_notifications(10, LONG)?.is_empty(),
        "delivered: gone"
    );
    Ok(())
}

fn verify_finds_every_approval_row_consistent_and_retention_takes_them(
    db: &TestDb,
) -> Result<(), StoreError> {
    let options = StoreOptions {
        retention: Retention {
            key_ttl: Some(Duration::from_millis(1)),
        },
        ..Default::default()
    };
    let store = db.open_with(options)?;
    let hour = Duration::from_secs(3600);
    let approved = new_call_of(store.create_or_get(gated_in("t", "a", hour, true))?);
    let denied = new_call_of(store.create_or_get(gated_in("t", "d", hour, true))?);
    let waiting = new_call_of(store.create_or_get(gated_in("t", "w", hour, false))?);
    store.decide(None, &approved.call_id, &approve())?;
    let deny = decision(Verdict::Deny, Source::Person, Some("no"));
    store.decide(None, &denied.call_id, &deny)?;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let report = store
        .verify_until(&crate::tools::EFFECT_TOOLS, deadline)
        .expect("verify runs");
    assert!(report.is_clean(), "{report}");
    assert!(report.checks.iter().any(|c| c.name == "approval_agrees"));
    // The denied call goes with its request and its queued notification;
    // the waiting and the approved (pending) ones stay.
    let purge_deadline = std::time::Instant::now() + Duration::from_secs(30);
    while store.purge_expired(10)?.is_empty() {
        assert!(std::time::Instant::now() < purge_deadline, "never purged");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(store.get(&denied.call_id)?.is_none());
    assert!(store.approval(None, &denied.call_id)?.is_none());
    let notified: Vec<String> = store
        .take_notifications(10, LONG)?
        .into_iter()
        .map(|n| n.call.call_id)
        .collect();
    assert_eq!(notified, [approved.call_id.as_str()]);
    assert!(store.approval(None, &waiting.call_id)?.is_some());
    let report = store
        .verify_until(&crate::tools::EFFECT_TOOLS, deadline)
        .expect("verify runs");
    assert!(report.is_clean(), "{report}");
    Ok(())
}
