//! The audit trail's words on both backends: one call driven through every
//! event `audit::Event` names, each written with the name and the detail
//! text `audit.rs` gives it — whether the backend writes them from Rust or
//! inside its own SQL.

use super::super::audit::{self, Event};
use super::*;

on_both_backends!(every_event_is_written_with_the_words_of_audit_rs);

/// Wait for a `*_then` completion's commit.
fn waited(submit: impl FnOnce(Then<Completion>)) -> Result<Completion, StoreError> {
    let (tx, rx) = mpsc::channel();
    submit(Box::new(move |r| tx.send(r).unwrap()));
    rx.recv().unwrap()
}

/// A second call, cancelled while it runs and stopped by its owner, then
/// re-run by an operator: the two cancel events and the re-run, as
/// `audit.rs` words them.
fn cancel_events(store: &CallStore) -> Result<Vec<(String, String)>, StoreError> {
    let call = created_call(store.create_or_get(new_call("cancelled", "fp"))?);
    let id = call.call_id.as_str();
    let lease = store.claim(id, "w", Duration::from_secs(30))?.unwrap();
    store.cancel(crate::auth::ANONYMOUS, id, Some("why"))?;
    waited(|then| store.stopped_then(&lease, true, "how", then))?;
    let rerun = crate::store::RerunRequest {
        tenant: None,
        call_id: id.to_string(),
        by: "ops".into(),
        reason: Some("again".into()),
        key_ttl: None,
    };
    assert!(matches!(store.rerun(rerun)?, crate::store::Rerun::Done(_)));
    let written: Vec<(String, String)> = store
        .audit_for(crate::auth::ANONYMOUS, id)?
        .expect("the call")
        .into_iter()
        .map(|e| (e.event, e.detail.unwrap_or_default()))
        .skip(2)
        .collect();
    let by = crate::auth::ANONYMOUS;
    let expected = [
        (
            Event::CancelRequested,
            audit::cancel_requested(by, Some("why"), 1, Some("w")),
        ),
        (Event::Cancelled, audit::stopped(1, true, "how")),
        (
            Event::Rerun,
            audit::rerun("ops", Some("again"), 1, Status::Cancelled),
        ),
    ];
    let expected: Vec<(String, String)> = expected
        .into_iter()
        .map(|(event, detail)| (event.as_str().to_string(), detail))
        .collect();
    assert_eq!(written, expected);
    Ok(written)
}

/// A third call answered again by its content: one `replayed_by_content`
/// row under its attempt, and none through another tenant.
fn replay_events(store: &CallStore) -> Result<Vec<(String, String)>, StoreError> {
    let call = created_call(store.create_or_get(new_call("content-x", "fp"))?);
    let id = call.call_id.as_str();
    assert!(store.note_replay_by_content(crate::auth::ANONYMOUS, id, 600)?);
    assert!(!store.note_replay_by_content("another-tenant", id, 600)?);
    assert!(!store.note_replay_by_content(crate::auth::ANONYMOUS, "c_none", 600)?);
    let written: Vec<(String, String)> = store
        .audit_for(crate::auth::ANONYMOUS, id)?
        .expect("the call")
        .into_iter()
        .map(|e| (e.event, e.detail.unwrap_or_default()))
        .skip(1)
        .collect();
    let expected = vec![(
        Event::ReplayedByContent.as_str().to_string(),
        audit::replayed_by_content(600),
    )];
    assert_eq!(written, expected);
    Ok(written)
}

/// A waiting call's answers from its MCP client: one `input_answered` row
/// of the answers as given, written only under the call's own tenant and
/// fingerprint and only while it waits; `input_answers` reads them back.
fn input_events(store: &CallStore) -> Result<Vec<(String, String)>, StoreError> {
    use super::super::approval::{input_answers, Approvers, Decision, Gate, Source, Verdict};
    let new = NewCall {
        gate: Some(Gate {
            approvers: Approvers::PeopleOrClient,
            timeout: Duration::from_secs(60),
            notify: false,
        }),
        ..new_call("asked", "fp-asked")
    };
    let id = created_call(store.create_or_get(new)?).call_id;
    let answers = r#"{"user_name":{"name":"Alice"}}"#;
    let me = crate::auth::ANONYMOUS;
    assert!(store.note_input_answers(me, &id, "fp-asked", answers)?);
    assert!(!store.note_input_answers(me, &id, "fp-other", answers)?);
    assert!(!store.note_input_answers("another-tenant", &id, "fp-asked", answers)?);
    let decision = Decision {
        verdict: Verdict::Approve,
        source: Source::Client,
        by: "mcp client of anonymous".into(),
        reason: None,
        fingerprint: None,
    };
    store.decide(None, &id, &decision)?;
    assert!(!store.note_input_answers(me, &id, "fp-asked", r#"{"late":{}}"#)?);
    let timeline = store.audit_for(me, &id)?.expect("the call");
    assert_eq!(
        serde_json::Value::Object(input_answers(&timeline)),
        json!({"user_name": {"name": "Alice"}})
    );
    let written: Vec<(String, String)> = timeline
        .into_iter()
        .map(|e| (e.event, e.detail.unwrap_or_default()))
        .filter(|(event, _)| event == Event::InputAnswered.as_str())
        .collect();
    assert_eq!(
        written,
        [(
            Event::InputAnswered.as_str().to_string(),
            answers.to_string()
        )]
    );
    Ok(written)
}

/// A retry whose downstream asked for a day, cut to nothing by its cap.
fn capped() -> RetryDelay {
    RetryDelay {
        delay: Duration::ZERO,
        capped_from: Some(Duration::from_secs(86_400)),
    }
}

/// How a stopping process stopped the tool of the lease it gives back.
fn stopped() -> ToolAtRelease {
    ToolAtRelease::Stopped {
        sent: true,
        how: "its process group got SIGTERM and ended".into(),
    }
}

/// Two gated calls, one approved and one denied: the approval events, as
/// `audit.rs` and `approval.rs` word them.
fn approval_events(store: &CallStore) -> Result<Vec<(String, String)>, StoreError> {
    use super::super::approval::{decided_detail, Approvers, Decision, Gate, Source, Verdict};
    let timeout = Duration::from_secs(60);
    let mut written = Vec::new();
    for (key, verdict) in [("approved", Verdict::Approve), ("denied", Verdict::Deny)] {
        let new = NewCall {
            gate: Some(Gate {
                approvers: Approvers::People,
                timeout,
                notify: false,
            }),
            ..new_call(key, "fp")
        };
        let id = created_call(store.create_or_get(new)?).call_id;
        let decision = Decision {
            verdict,
            source: Source::Person,
            by: "alice@acme".into(),
            reason: Some("why".into()),
            fingerprint: None,
        };
        store.decide(None, &id, &decision)?;
        let event = match verdict {
            Verdict::Approve => Event::Approved,
            Verdict::Deny => Event::Denied,
        };
        let expected = [
            (Event::Created, "charge".to_string()),
            (
                Event::ApprovalRequested,
                audit::approval_requested("people", timeout),
            ),
            (event, decided_detail(&decision)),
        ];
        let expected: Vec<(String, String)> = expected
            .into_iter()
            .map(|(event, detail)| (event.as_str().to_string(), detail))
            .collect();
        let found: Vec<(String, String)> = store
            .audit_for(crate::auth::ANONYMOUS, &id)?
            .expect("the call")
            .into_iter()
            .map(|e| (e.event, e.detail.unwrap_or_default()))
            .collect();
        assert_eq!(found, expected);
        written.extend(found);
    }
    Ok(written)
}

fn every_event_is_written_with_the_words_of_audit_rs(db: &TestDb) -> Result<(), StoreError> {
    const LONG: Duration = Duration::from_secs(30);
    let store = db.open()?;
    let call = created_call(store.create_or_get(new_call("k", "fp"))?);
    let id = call.call_id.as_str();
    let claim = |lease: Duration| store.claim(id, "w", lease).map(Option::unwrap);

    let first = claim(LONG)?;
    let busy = json!({"code": "busy", "message": "m", "retryable": true});
    waited(|then| store.retry_later_then(&first, &busy, capped(), then))?;
    let lapsed = claim(Duration::ZERO)?;
    assert_eq!(store.recover(&[])?, [id]);
    let third = claim(LONG)?;
    let stale = waited(|then| store.succeed_then(&lapsed, &json!({}), None, then))?;
    assert_eq!(stale, Completion::Stale);
    assert_eq!(store.release(&third, &stopped())?, Completion::Applied);
    let fourth = claim(LONG)?;
    waited(|then| store.fail_then(&fourth, &busy, then))?;
    assert!(matches!(
        store.create_or_get(new_call("k", "fp"))?,
        Created::RetryReset(_)
    ));
    let fifth = claim(LONG)?;
    waited(|then| store.succeed_then(&fifth, &json!({}), None, then))?;

    let written: Vec<(String, String)> = store
        .audit_for(crate::auth::ANONYMOUS, id)?
        .expect("the call")
        .into_iter()
        .map(|e| (e.event, e.detail.unwrap_or_default()))
        .collect();
    let expected = [
        (Event::Created, "charge".to_string()),
        (Event::Claimed, audit::claimed("w", 1)),
        (
            Event::RetryScheduled,
            audit::retry_scheduled(1, "busy", "m", capped()),
        ),
        (Event::Claimed, audit::claimed("w", 2)),
        (Event::Recover, "lease expired (owner w)".to_string()),
        (Event::Claimed, audit::claimed("w", 3)),
        (
            Event::StaleCompletion,
            audit::stale_completion(2, Event::Succeeded),
        ),
        (Event::Released, audit::released(3, &stopped())),
        (Event::Claimed, audit::claimed("w", 4)),
        (Event::Failed, busy.to_string()),
        (Event::RetryReset, audit::retry_reset(4)),
        (Event::Claimed, audit::claimed("w", 5)),
        (Event::Succeeded, fifth.effect_id.clone()),
    ];
    let expected: Vec<(String, String)> = expected
        .into_iter()
        .map(|(event, detail)| (event.as_str().to_string(), detail))
        .collect();
    assert_eq!(written, expected);
    let mut written = written;
    written.extend(cancel_events(&store)?);
    written.extend(approval_events(&store)?);
    written.extend(replay_events(&store)?);
    written.extend(input_events(&store)?);
    for event in Event::ALL {
        assert!(
            written.iter().any(|(name, _)| name == event.as_str()),
            "{event:?} is never written here"
        );
    }
    Ok(())
}
