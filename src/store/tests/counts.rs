//! The count tables, on both backends: after every kind of write — create
//! (plain, claimed, guarded), claim, a lapsed lease taken over, automatic
//! retry, fail, succeed with an effect, a same-key retry reset, release,
//! recovery, a cancel (of a pending call, and of a running one its owner
//! ends), an approval gate (approved, denied, cancelled while it waits), a
//! re-run and purge — `/stats`, the backlog and `counts` answer exactly what counting `calls` and
//! `effects` answers, for every tenant and for each one.

use super::super::approval::{Approvers, Decided, Decision, Gate, Source, Verdict};
use super::*;
use crate::store::business_key::BusinessKey;
use crate::store::rerun::{Rerun, RerunRequest};

on_both_backends!(
    counts_stay_exact_through_every_transition,
    a_rerun_keeps_the_counts_exact,
);

const TENANTS: [&str; 2] = ["acme", "beta"];

/// What counting the rows answers, against what the count tables answer,
/// for every tenant together and each alone.
fn assert_exact(db: &TestDb, store: &CallStore, step: &str) {
    let scopes = [(Scope::All, String::new())]
        .into_iter()
        .chain(TENANTS.map(|t| (Scope::Tenant(t), format!(" AND c.tenant = '{t}'"))));
    for (scope, in_scope) in scopes {
        let stats = store.stats(scope).unwrap();
        let counted = |condition: &str| {
            db.count(&format!(
                "SELECT count(*) FROM calls c WHERE true{in_scope}{condition}"
            ))
        };
        assert_eq!(stats.calls, counted(""), "{step}: {scope:?} calls");
        for status in Status::words() {
            let shown = stats.by_status.iter().find(|(s, _)| s == status);
            let want = counted(&format!(" AND status = '{status}'"));
            assert_eq!(shown.map_or(0, |s| s.1), want, "{step}: {scope:?} {status}");
            assert!(
                shown.is_none_or(|s| s.1 > 0),
                "{step}: a status with no calls shows"
            );
        }
        for attempt in 0..4 {
            let shown = stats.attempts.iter().find(|(a, _)| *a == attempt);
            let want = counted(&format!(" AND attempt = {attempt}"));
            assert_eq!(
                shown.map_or(0, |a| a.1),
                want,
                "{step}: {scope:?} attempt {attempt}"
            );
        }
        let effects = match scope {
            Scope::All => db.count("SELECT count(*) FROM effects"),
            Scope::Tenant(_) => db.count(&format!(
                "SELECT count(*) FROM effects e JOIN calls c ON c.call_id = e.call_id
                  WHERE true{in_scope}"
            )),
        };
        assert_eq!(stats.effects, effects, "{step}: {scope:?} effects");
        let oldest = db.real(&format!(
            "SELECT min(created_at) FROM calls c WHERE status = 'pending'{in_scope}"
        ));
        let counts = store.counts(scope).unwrap();
        assert_eq!(
            counts.oldest_pending_created_at, oldest,
            "{step}: {scope:?} oldest"
        );
        assert_eq!(counts.calls(), stats.calls);
    }
    let backlog = store.backlog().unwrap();
    assert_eq!(
        backlog.calls_by_status,
        store.stats(Scope::All).unwrap().by_status
    );
}

fn counts_stay_exact_through_every_transition(db: &TestDb) -> Result<(), StoreError> {
    let options = StoreOptions {
        retention: Retention {
            key_ttl: Some(Duration::from_millis(1)),
        },
        ..StoreOptions::default()
    };
    let store = db.open_with(options)?;
    assert_exact(db, &store, "empty");
    let lease = Duration::from_secs(30);
    let mut calls = Vec::new();
    for (i, tenant) in TENANTS.iter().cycle().take(6).enumerate() {
        calls.push(created_call(store.create_or_get(new_call_in(
            tenant,
            &format!("k{i}"),
            "fp",
        ))?));
    }
    let claimed = store.create_claimed(new_call_in("acme", "claimed", "fp"), "1:w", lease)?;
    let guarded = BusinessKey {
        value: r#"["order-42"]"#.into(),
        window_secs: 60.0,
    };
    store.create_or_get_guarded(new_call_in("beta", "guarded", "fp"), Some(guarded))?;
    assert_exact(db, &store, "created");

    let first = store
        .claim(&calls[0].call_id, "1:w", lease)?
        .expect("claimed");
    assert_exact(db, &store, "claimed");
    succeed(&store, &first, &json!({"charged": 1}), charged(1))?;
    succeed(
        &store,
        &claimed.lease.expect("created claimed"),
        &json!({}),
        None,
    )?;
    assert_exact(db, &store, "succeeded");

    let second = store
        .claim(&calls[1].call_id, "1:w", lease)?
        .expect("claimed");
    let retryable = json!({"code": "tool_failed", "message": "x", "retryable": true});
    let (tx, rx) = std::sync::mpsc::channel();
    store.retry_later_then(
        &second,
        &retryable,
        Duration::ZERO,
        Box::new(move |r| tx.send(r).unwrap()),
    );
    assert_eq!(rx.recv().unwrap()?, Completion::Applied);
    assert_exact(db, &store, "retry scheduled");
    let again = store
        .claim(&calls[1].call_id, "1:w", lease)?
        .expect("due again");
    fail(&store, &again, &retryable)?;
    assert_exact(db, &store, "failed");
    let reset = store.create_or_get(new_call_in("beta", "k1", "fp"))?;
    assert!(matches!(reset, Created::RetryReset(_)), "{reset:?}");
    assert_exact(db, &store, "retry reset");

    let released = store
        .claim(&calls[2].call_id, "1:w", lease)?
        .expect("claimed");
    store.release(&released, &ToolAtRelease::Idle)?;
    assert_exact(db, &store, "released");
    store.claim(&calls[3].call_id, "1:w", Duration::from_millis(1))?;
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(store.recover(&[])?, [calls[3].call_id.clone()]);
    assert_exact(db, &store, "recovered");

    // A lapsed lease taken over, that call asked to stop and ended
    // `cancelled` by its new owner, and a pending call cancelled at once.
    store.claim(&calls[4].call_id, "1:w", Duration::from_millis(1))?;
    let taken = taken_over_when_lapsed(&store, &calls[4].call_id, lease)?;
    assert_eq!(taken.attempt, 2);
    assert_exact(db, &store, "taken over");
    store.cancel(&calls[4].tenant, &calls[4].call_id, None)?;
    let (tx, rx) = std::sync::mpsc::channel();
    store.stopped_then(
        &taken,
        true,
        "stopped",
        Box::new(move |r| tx.send(r).unwrap()),
    );
    assert_eq!(rx.recv().unwrap()?, Completion::Applied);
    store.cancel(&calls[5].tenant, &calls[5].call_id, None)?;
    assert_exact(db, &store, "cancelled");

    let gated = [0, 1, 2, 3].map(|i| {
        let new = NewCall {
            gate: Some(Gate {
                approvers: Approvers::People,
                timeout: Duration::from_secs(3600),
                notify: false,
            }),
            ..new_call_in(TENANTS[i % 2], &format!("g{i}"), "fp")
        };
        store.create_or_get(new).map(created_call)
    });
    let gated = gated.into_iter().collect::<Result<Vec<_>, _>>()?;
    assert_exact(db, &store, "awaiting approval");
    for (call, verdict) in gated.iter().zip([Verdict::Approve, Verdict::Deny]) {
        let decision = store.decide(None, &call.call_id, &decided(verdict))?;
        assert!(matches!(decision, Decided::Applied { .. }), "{decision:?}");
    }
    store.cancel(&gated[2].tenant, &gated[2].call_id, None)?;
    assert_exact(db, &store, "approved, denied, cancelled while waiting");

    std::thread::sleep(Duration::from_millis(20));
    let purged = store.purge_expired(100)?;
    assert_eq!(
        purged.len(),
        6,
        "the two succeeded calls, the three cancelled and the denied: {purged:?}"
    );
    assert_exact(db, &store, "purged");
    Ok(())
}

/// A re-run moves a failed call back to `pending`, and its next claim on to
/// a new attempt: the counts follow each move (`count_book` on SQLite).
fn a_rerun_keeps_the_counts_exact(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let call = created_call(store.create_or_get(new_call_in(TENANTS[0], "r1", "fp"))?);
    let lease = store.claim(&call.call_id, "1:w", Duration::from_secs(30))?;
    let permanent = json!({"code": "tool_failed", "message": "x", "retryable": false});
    fail(&store, &lease.expect("claimed"), &permanent)?;
    assert_exact(db, &store, "failed");
    let rerun = RerunRequest {
        tenant: None,
        call_id: call.call_id.clone(),
        by: "ops".into(),
        reason: None,
        key_ttl: None,
    };
    let again = store.rerun(rerun)?;
    assert!(matches!(again, Rerun::Done(_)), "{again:?}");
    assert_exact(db, &store, "re-run");
    let lease = store.claim(&call.call_id, "1:w", Duration::from_secs(30))?;
    assert_eq!(lease.expect("claimed again").attempt, 2);
    assert_exact(db, &store, "claimed after the re-run");
    Ok(())
}

/// A person's decision.
fn decided(verdict: Verdict) -> Decision {
    Decision {
        verdict,
        source: Source::Person,
        by: "alice@acme".into(),
        reason: None,
        fingerprint: None,
    }
}

/// Claim `call_id` under a new owner once its lease has lapsed (within a
/// deadline): the lapsed lease taken over.
fn taken_over_when_lapsed(
    store: &CallStore,
    call_id: &str,
    lease: Duration,
) -> Result<Lease, StoreError> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(taken) = store.claim(call_id, "2:w", lease)? {
            return Ok(taken);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the lease never lapsed"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}
