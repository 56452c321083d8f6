//! Cancelling in the store, on both backends (`store::cancel` has the
//! rules): each transition, and the races a cancel meets — a claim, the
//! owner's success, a second cancel, a failure, a retry, a lapsed lease, a
//! stopping process — each decided by a conditional update's row count.

use super::super::business_key::{BusinessKey, Guarded};
use super::super::cancel::Cancel;
use super::*;
use std::sync::{Arc, Barrier};

on_both_backends!(
    a_pending_call_is_cancelled_at_once_and_never_claimed,
    a_call_waiting_for_its_retry_is_cancelled_and_never_retried,
    a_running_call_is_asked_to_stop_and_its_owner_ends_it_cancelled,
    a_success_recorded_first_wins_over_the_cancel,
    a_failure_a_retry_or_a_release_after_the_cancel_ends_it_cancelled,
    a_lapsed_lease_whose_cancel_was_asked_is_recovered_cancelled,
    a_cancel_racing_a_claim_leaves_one_outcome,
    another_tenants_call_is_not_found_and_a_cancelled_one_is_purged,
    a_cancelled_call_lets_its_business_key_go,
);

const LONG: Duration = Duration::from_secs(30);

fn cancel(store: &CallStore, call_id: &str, reason: Option<&str>) -> Cancel {
    store
        .cancel(crate::auth::ANONYMOUS, call_id, reason)
        .unwrap()
}

/// `stopped_then`, waiting for the commit.
fn stopped(store: &CallStore, lease: &Lease, sent: bool) -> Result<Completion, StoreError> {
    let (tx, rx) = mpsc::channel();
    let then = Box::new(move |r| tx.send(r).unwrap());
    store.stopped_then(lease, sent, "its process group got SIGTERM", then);
    rx.recv().unwrap()
}

/// `retry_later_then`, waiting for the commit.
fn retry_later(store: &CallStore, lease: &Lease, error: &Value) -> Result<Completion, StoreError> {
    let (tx, rx) = mpsc::channel();
    let then = Box::new(move |r| tx.send(r).unwrap());
    store.retry_later_then(lease, error, Duration::ZERO, then);
    rx.recv().unwrap()
}

fn busy() -> Value {
    json!({"code": "downstream_unavailable", "message": "503", "retryable": true})
}

fn new_id(store: &CallStore, key: &str) -> String {
    created_call(store.create_or_get(new_call(key, "fp")).unwrap()).call_id
}

/// The cancelled call as the API shows it: no lease, an error coded
/// `cancelled` carrying the reason, not retryable.
fn assert_cancelled(call: &Call, message: &str) {
    assert_eq!(call.status, Status::Cancelled, "{call:?}");
    assert!(call.status.is_terminal() && call.is_settled());
    assert_eq!((call.lease_until, call.owner.as_deref()), (None, None));
    let error = call.error.as_ref().expect("an error");
    assert_eq!(error["code"], "cancelled");
    assert_eq!(error["message"], message);
    assert_eq!(error["retryable"], false);
    assert!(call.cancel_requested_at.is_some());
}

/// A pending call becomes `cancelled` at once, with who asked and why in
/// its audit; no claim or poll takes it afterwards; its key replays it; a
/// second cancel finds it cancelled and changes nothing.
fn a_pending_call_is_cancelled_at_once_and_never_claimed(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let id = new_id(&store, "k");
    let Cancel::Cancelled { call, now: true } = cancel(&store, &id, Some("wrong amount")) else {
        panic!("cancelled now");
    };
    assert_cancelled(&call, "wrong amount");
    assert_eq!(call.attempt, 0);
    assert!(store.claim(&id, "w", LONG)?.is_none());
    assert!(store.claim_due(10, "w", LONG)?.is_empty());
    assert!(matches!(
        cancel(&store, &id, Some("again")),
        Cancel::Cancelled { now: false, .. }
    ));
    let replay = store.create_or_get(new_call("k", "fp"))?;
    assert!(matches!(&replay, Created::Existing(c) if c.status == Status::Cancelled));
    let audit = store.audit_for(crate::auth::ANONYMOUS, &id)?.unwrap();
    let last = audit.last().unwrap();
    assert_eq!(last.event, "cancelled");
    let expected = format!(
        "by {}: wrong amount; pending, never ran",
        crate::auth::ANONYMOUS
    );
    assert_eq!(last.detail.as_deref(), Some(expected.as_str()));
    assert_eq!(audit_events(&store, &id), ["created", "cancelled"]);
    assert_eq!(effects(&store), 0);
    Ok(())
}

/// A call waiting for its automatic retry is cancelled like a pending one
/// (its next attempt never runs), without a reason: the default message.
fn a_call_waiting_for_its_retry_is_cancelled_and_never_retried(
    db: &TestDb,
) -> Result<(), StoreError> {
    let store = db.open()?;
    let id = new_id(&store, "k");
    let lease = store.claim(&id, "w", LONG)?.unwrap();
    assert_eq!(retry_later(&store, &lease, &busy())?, Completion::Applied);
    let Cancel::Cancelled { call, now: true } = cancel(&store, &id, None) else {
        panic!("cancelled now");
    };
    assert_cancelled(&call, "cancelled on request");
    assert_eq!(call.next_attempt_at, None);
    assert!(store.claim(&id, "w", LONG)?.is_none());
    assert!(store.due_calls(10)?.is_empty());
    let audit = store.audit_for(crate::auth::ANONYMOUS, &id)?.unwrap();
    let detail = audit.last().unwrap().detail.clone().unwrap();
    assert!(detail.ends_with("waiting to retry after attempt 1; attempt 2 never ran"));
    Ok(())
}

/// A running call's cancel is recorded (once: a second cancel finds it
/// asked), the owner learns of it from `cancels_asked`, and its stop ends
/// the call `cancelled` under the fence; a stop of the wrong attempt is
/// stale. No effect row.
fn a_running_call_is_asked_to_stop_and_its_owner_ends_it_cancelled(
    db: &TestDb,
) -> Result<(), StoreError> {
    let store = db.open()?;
    let id = new_id(&store, "k");
    let lease = store.claim(&id, "1:w@i", LONG)?.unwrap();
    assert!(store.cancels_asked(&[LeaseHeld::from(&lease)])?.is_empty());
    let Cancel::Requested { call, now: true } = cancel(&store, &id, Some("runaway")) else {
        panic!("asked now");
    };
    assert_eq!(call.status, Status::Running);
    let asked_at = call.cancel_requested_at.expect("recorded");
    let Cancel::Requested { call, now: false } = cancel(&store, &id, None) else {
        panic!("asked before");
    };
    assert_eq!(
        call.cancel_requested_at,
        Some(asked_at),
        "the first request stands"
    );
    assert_eq!(
        store.cancels_asked(&[LeaseHeld::from(&lease)])?,
        [LeaseHeld::from(&lease)]
    );
    let older = Lease {
        attempt: 0,
        ..lease.clone()
    };
    assert!(store.cancels_asked(&[LeaseHeld::from(&older)])?.is_empty());
    assert_eq!(stopped(&store, &older, true)?, Completion::Stale);
    assert_eq!(stopped(&store, &lease, true)?, Completion::Applied);
    assert_cancelled(&store.get(&id)?.unwrap(), "runaway");
    assert_eq!(stopped(&store, &lease, true)?, Completion::Stale, "once");
    assert!(matches!(
        cancel(&store, &id, None),
        Cancel::Cancelled { now: false, .. }
    ));
    let audit = store.audit_for(crate::auth::ANONYMOUS, &id)?.unwrap();
    let words: Vec<(String, String)> = audit
        .into_iter()
        .map(|e| (e.event, e.detail.unwrap_or_default()))
        .collect();
    let asked = format!(
        "by {}: runaway; attempt 1 runs under 1:w@i",
        crate::auth::ANONYMOUS
    );
    assert!(
        words.contains(&("cancel_requested".into(), asked)),
        "{words:?}"
    );
    let ended = "attempt 1 stopped, sent=true: its process group got SIGTERM";
    assert!(
        words.contains(&("cancelled".into(), ended.into())),
        "{words:?}"
    );
    assert_eq!(effects(&store), 0);
    Ok(())
}

/// The owner's success committed before its stop: the effect stands, the
/// call is `succeeded`, the stop is stale, and the cancel says settled.
fn a_success_recorded_first_wins_over_the_cancel(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let id = new_id(&store, "k");
    let lease = store.claim(&id, "w", LONG)?.unwrap();
    assert!(matches!(
        cancel(&store, &id, None),
        Cancel::Requested { .. }
    ));
    let done = succeed(&store, &lease, &json!({"ok": 1}), charged(1))?;
    assert_eq!(done, Completion::Applied);
    assert_eq!(stopped(&store, &lease, true)?, Completion::Stale);
    let Cancel::Settled(call) = cancel(&store, &id, None) else {
        panic!("settled");
    };
    assert_eq!(call.status, Status::Succeeded);
    assert_eq!(effects(&store), 1);
    Ok(())
}

/// Whatever ends an attempt short of a success once its cancel was asked —
/// a failure, a retry due, a stopping process giving its lease back — ends
/// the call `cancelled`: never `failed`, never `pending` to run again.
fn a_failure_a_retry_or_a_release_after_the_cancel_ends_it_cancelled(
    db: &TestDb,
) -> Result<(), StoreError> {
    let store = db.open()?;
    type End = fn(&CallStore, &Lease) -> Completion;
    let ends: [(&str, End); 3] = [
        ("fail", |s, l| fail(s, l, &busy()).unwrap()),
        ("retry", |s, l| retry_later(s, l, &busy()).unwrap()),
        ("release", |s, l| {
            s.release(l, &ToolAtRelease::Idle).unwrap()
        }),
    ];
    for (key, end) in ends {
        let id = new_id(&store, key);
        let lease = store.claim(&id, "w", LONG)?.unwrap();
        assert!(matches!(
            cancel(&store, &id, None),
            Cancel::Requested { .. }
        ));
        assert_eq!(end(&store, &lease), Completion::Cancelled, "{key}");
        assert_cancelled(&store.get(&id)?.unwrap(), "cancelled on request");
        assert!(store.claim(&id, "w", LONG)?.is_none(), "{key}");
    }
    assert!(store.due_calls(10)?.is_empty());
    Ok(())
}

/// A lease that lapsed after its cancel was asked is not claimed by anyone
/// (it might run the tool again); recovery ends the call `cancelled`,
/// saying the attempt may have run.
fn a_lapsed_lease_whose_cancel_was_asked_is_recovered_cancelled(
    db: &TestDb,
) -> Result<(), StoreError> {
    let store = db.open()?;
    let id = new_id(&store, "k");
    store.claim(&id, "1:w", Duration::ZERO)?.unwrap();
    assert!(matches!(
        cancel(&store, &id, None),
        Cancel::Requested { .. }
    ));
    assert!(
        store.claim(&id, "2:w", LONG)?.is_none(),
        "never claimed again"
    );
    assert_eq!(store.recover(&[])?, std::slice::from_ref(&id));
    assert_cancelled(&store.get(&id)?.unwrap(), "cancelled on request");
    let audit = store.audit_for(crate::auth::ANONYMOUS, &id)?.unwrap();
    let detail = audit.last().unwrap().detail.clone().unwrap();
    assert!(detail.contains("attempt 1 may have run"), "{detail}");
    assert!(store.recover(&[])?.is_empty());
    Ok(())
}

/// A cancel and a claim at the same moment: either the claim wins (the
/// call runs, its cancel recorded for its owner) or the cancel does (the
/// claim finds nothing, the call never runs) — never both, never neither.
fn a_cancel_racing_a_claim_leaves_one_outcome(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    for round in 0..8 {
        let id = new_id(&store, &format!("k{round}"));
        let start = Arc::new(Barrier::new(2));
        let claimer = {
            let (store, start, id) = (Arc::clone(&store), Arc::clone(&start), id.clone());
            std::thread::spawn(move || {
                start.wait();
                store.claim(&id, "w", LONG).unwrap()
            })
        };
        start.wait();
        let cancelled = cancel(&store, &id, None);
        let claimed = claimer.join().unwrap();
        let call = store.get(&id)?.unwrap();
        match (claimed, cancelled) {
            (Some(lease), Cancel::Requested { .. }) => {
                assert_eq!((call.status, lease.attempt), (Status::Running, 1));
                assert!(call.cancel_requested_at.is_some());
                assert_eq!(stopped(&store, &lease, false)?, Completion::Applied);
            }
            (None, Cancel::Cancelled { now: true, .. }) => {
                assert_eq!((call.status, call.attempt), (Status::Cancelled, 0));
            }
            (claimed, cancelled) => panic!("round {round}: {claimed:?} and {cancelled:?}"),
        }
    }
    Ok(())
}

/// Another tenant's call reads as absent to a cancel (and is left alone);
/// a cancelled call is terminal, so key retention purges it in its time.
fn another_tenants_call_is_not_found_and_a_cancelled_one_is_purged(
    db: &TestDb,
) -> Result<(), StoreError> {
    let options = StoreOptions {
        retention: Retention {
            key_ttl: Some(Duration::from_millis(50)),
        },
        ..StoreOptions::default()
    };
    let store = db.open_with(options)?;
    let theirs = created_call(store.create_or_get(new_call_in("b", "k", "fp"))?);
    assert_eq!(store.cancel("a", &theirs.call_id, None)?, Cancel::NotFound);
    assert_eq!(
        store.cancel("a", "c_0000000000000000", None)?,
        Cancel::NotFound
    );
    assert_eq!(store.get(&theirs.call_id)?.unwrap().status, Status::Pending);
    let Cancel::Cancelled { call, .. } = store.cancel("b", &theirs.call_id, None)? else {
        panic!("cancelled");
    };
    assert!(call.expires_at.is_some(), "terminal: it expires");
    std::thread::sleep(Duration::from_millis(120));
    let purged = store.purge_expired(10)?;
    assert_eq!(purged.len(), 1);
    assert_eq!(purged[0].call_id, theirs.call_id);
    assert!(store.get(&theirs.call_id)?.is_none());
    Ok(())
}

/// Like a failed call, a cancelled one no longer holds its business key: a
/// new intent with the same key (and another idempotency key) goes through.
fn a_cancelled_call_lets_its_business_key_go(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let key = || {
        Some(BusinessKey {
            value: r#"["order-42"]"#.into(),
            window_secs: 3600.0,
        })
    };
    let first = match store.create_or_get_guarded(new_call("k1", "fp1"), key())? {
        Guarded::Created(Created::New(call)) => call,
        other => panic!("{other:?}"),
    };
    let duplicate = store.create_or_get_guarded(new_call("k2", "fp2"), key())?;
    assert!(
        matches!(duplicate, Guarded::Duplicate(_)),
        "held by the first"
    );
    assert!(matches!(
        cancel(&store, &first.call_id, None),
        Cancel::Cancelled { .. }
    ));
    let next = store.create_or_get_guarded(new_call("k3", "fp3"), key())?;
    assert!(
        matches!(next, Guarded::Created(Created::New(_))),
        "{next:?}"
    );
    Ok(())
}
