//! What an operator does, on both backends (`store::operator`): a re-run
//! keeps the call's id and effect id and is refused for what it must not
//! touch; a paused tool's calls are created `pending` and never claimed by
//! any claim until it is resumed; a bulk job acts on each matching call
//! once, its batches fenced by its claim; the list by error code, a
//! filter's total, failures by code, and the overview's readings.

use super::*;
use crate::store::bulk_job::{BulkAction, JobCreated, NewBulkJob, MAX_BULK_CALLS};
use crate::store::business_key::{BusinessKey, Guarded};
use crate::store::operator::StepPlan;
use crate::store::paused::Toggled;
use crate::store::readings::{Reading, READING_EVERY};
use crate::store::rerun::{Rerun, RerunRequest};

on_both_backends!(
    a_rerun_keeps_the_call_and_effect_ids_and_its_next_claim_is_a_new_attempt,
    a_rerun_is_refused_for_a_success_a_call_in_flight_and_an_expired_call,
    a_rerun_takes_its_business_key_back_or_is_refused,
    a_paused_tools_calls_wait_pending_and_no_claim_takes_them,
    a_bulk_job_acts_on_each_matching_call_once_under_its_claim,
    the_list_finds_calls_by_error_code_and_totals_count_a_filter,
    readings_are_kept_once_a_step_and_read_at_points,
);

const LONG: Duration = Duration::from_secs(30);

fn request(call_id: &str) -> RerunRequest {
    RerunRequest {
        tenant: Some(crate::auth::ANONYMOUS.into()),
        call_id: call_id.into(),
        by: "ops".into(),
        reason: Some("downstream fixed".into()),
        key_ttl: None,
    }
}

fn failed(store: &CallStore, key: &str, code: &str) -> Result<Call, StoreError> {
    let call = created_call(store.create_or_get(new_call(key, "fp"))?);
    let lease = store.claim(&call.call_id, "1:w", LONG)?.expect("claimed");
    fail(
        store,
        &lease,
        &json!({"code": code, "message": "m", "retryable": false}),
    )?;
    Ok(store.get(&call.call_id)?.expect("the call"))
}

fn a_rerun_keeps_the_call_and_effect_ids_and_its_next_claim_is_a_new_attempt(
    db: &TestDb,
) -> Result<(), StoreError> {
    let store = db.open()?;
    let before = failed(&store, "k", "downstream_timeout")?;
    let Rerun::Done(again) = store.rerun(request(&before.call_id))? else {
        panic!("re-run")
    };
    assert_eq!(again.status, Status::Pending);
    assert_eq!(
        (&again.call_id, &again.effect_id),
        (&before.call_id, &before.effect_id)
    );
    assert_eq!((again.error.clone(), again.attempt), (None, 1));
    let events = store
        .audit_for(crate::auth::ANONYMOUS, &again.call_id)?
        .unwrap();
    let rerun = events.last().unwrap();
    assert_eq!(rerun.event, "rerun");
    assert_eq!(rerun.attempt, Some(1));
    let detail = rerun.detail.as_deref().unwrap();
    assert!(
        detail.contains("by ops: downstream fixed") && detail.contains("(failed)"),
        "{detail}"
    );
    let second = store
        .claim(&again.call_id, "2:w", LONG)?
        .expect("claimable again");
    assert_eq!((second.attempt, &second.effect_id), (2, &before.effect_id));
    succeed(&store, &second, &json!({"ok": true}), charged(1))?;
    assert!(matches!(
        store.rerun(request(&again.call_id))?,
        Rerun::Succeeded(_)
    ));
    assert_eq!(effects(&store), 1, "one effect, under the one effect id");
    // A cancelled call runs again too; another tenant's is not found.
    let pending = created_call(store.create_or_get(new_call("c", "fp"))?);
    store.cancel(crate::auth::ANONYMOUS, &pending.call_id, None)?;
    let Rerun::Done(uncancelled) = store.rerun(request(&pending.call_id))? else {
        panic!("a cancelled call re-runs")
    };
    assert_eq!(uncancelled.cancel_requested_at, None);
    assert!(store.claim(&pending.call_id, "3:w", LONG)?.is_some());
    let mut elsewhere = request(&before.call_id);
    elsewhere.tenant = Some("beta".into());
    assert_eq!(store.rerun(elsewhere)?, Rerun::NotFound);
    store.stop();
    Ok(())
}

fn a_rerun_is_refused_for_a_success_a_call_in_flight_and_an_expired_call(
    db: &TestDb,
) -> Result<(), StoreError> {
    let options = StoreOptions {
        retention: Retention {
            key_ttl: Some(Duration::from_secs(3600)),
        },
        ..StoreOptions::default()
    };
    let store = db.open_with(options)?;
    let pending = created_call(store.create_or_get(new_call("p", "fp"))?);
    assert!(matches!(
        store.rerun(request(&pending.call_id))?,
        Rerun::InFlight(_)
    ));
    let old = failed(&store, "old", "tool_failed")?;
    db.execute(&format!(
        "UPDATE calls SET updated_at = updated_at - 7200 WHERE call_id = '{}'",
        old.call_id
    ));
    let Rerun::Expired(expired) = store.rerun(request(&old.call_id))? else {
        panic!("past its retention")
    };
    assert_eq!(expired.status, Status::Failed, "nothing changed");
    assert!(matches!(
        store.rerun(request("c_0000000000000000"))?,
        Rerun::NotFound
    ));
    store.stop();
    Ok(())
}

fn a_rerun_takes_its_business_key_back_or_is_refused(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let key = || BusinessKey {
        value: r#"["order-1"]"#.into(),
        window_secs: 3600.0,
    };
    let guarded = |idem: &str| -> Result<Call, StoreError> {
        match store.create_or_get_guarded(new_call(idem, "fp"), Some(key()))? {
            Guarded::Created(created) => Ok(created_call(created)),
            Guarded::Duplicate(holder) => Ok(holder),
        }
    };
    let first = guarded("a")?;
    let lease = store.claim(&first.call_id, "1:w", LONG)?.unwrap();
    fail(
        &store,
        &lease,
        &json!({"code": "tool_failed", "retryable": false}),
    )?;
    // The failure let the key go; a second intent takes it.
    let second = guarded("b")?;
    assert_ne!(second.call_id, first.call_id);
    let Rerun::Duplicate { holder, call } = store.rerun(request(&first.call_id))? else {
        panic!("refused while b holds the key")
    };
    assert_eq!(
        (holder, call.status),
        (second.call_id.clone(), Status::Failed)
    );
    store.cancel(crate::auth::ANONYMOUS, &second.call_id, None)?;
    assert!(matches!(
        store.rerun(request(&first.call_id))?,
        Rerun::Done(_)
    ));
    // The re-run call holds the key again: a third intent finds it.
    assert_eq!(guarded("c")?.call_id, first.call_id);
    store.stop();
    Ok(())
}

fn a_paused_tools_calls_wait_pending_and_no_claim_takes_them(
    db: &TestDb,
) -> Result<(), StoreError> {
    let store = db.open()?;
    let made = store.create_or_get(new_call("before", "fp"))?;
    let waiting = created_call(made);
    assert!(matches!(
        store.pause_tool("charge", "ops", Some("downstream down"))?,
        Toggled::Now(Some(_))
    ));
    assert!(matches!(
        store.pause_tool("charge", "ops", None)?,
        Toggled::Already(Some(_))
    ));
    let paused = store.paused_tools()?;
    assert_eq!(paused.len(), 1);
    assert_eq!(
        (paused[0].paused_by.as_str(), paused[0].reason.as_deref()),
        ("ops", Some("downstream down"))
    );
    let claimed = store.create_claimed(new_call("during", "fp"), "1:api", LONG)?;
    assert_eq!(claimed.lease, None, "created pending, not claimed");
    let during = created_call(claimed.created);
    assert_eq!(during.status, Status::Pending);
    assert_eq!(store.claim(&waiting.call_id, "1:w", LONG)?, None);
    assert!(store.claim_due(10, "1:poll", LONG)?.is_empty());
    assert!(
        store.due_calls(10)?.is_empty(),
        "a paused tool's calls are not due"
    );
    assert!(matches!(store.resume_tool("charge")?, Toggled::Now(None)));
    assert!(matches!(
        store.resume_tool("charge")?,
        Toggled::Already(None)
    ));
    let leases = store.claim_due(10, "1:poll", LONG)?;
    let ids: Vec<&str> = leases.iter().map(|l| l.call_id.as_str()).collect();
    assert_eq!(
        ids,
        [waiting.call_id.as_str(), during.call_id.as_str()],
        "oldest first"
    );
    store.stop();
    Ok(())
}

/// A bulk job of `action` over every pending call, or `filter`'s.
fn job(action: BulkAction, filter: ListQuery, key: &str) -> NewBulkJob {
    NewBulkJob {
        tenant: crate::auth::ANONYMOUS.into(),
        idem_key: key.into(),
        fingerprint: format!("fp-{key}"),
        action,
        filter,
        reason: Some("runaway agent".into()),
        max_calls: MAX_BULK_CALLS,
    }
}

/// One batch as the runner makes it: the next `size` calls of the job's
/// list, below its cursor.
fn plan(store: &CallStore, job: &BulkJob, size: usize) -> Result<StepPlan, StoreError> {
    let query = ListQuery {
        before_call_id: job.cursor.clone(),
        limit: size,
        ..job.filter.clone()
    };
    let page = store.list(&query)?;
    let calls: Vec<(String, String)> = page
        .calls
        .iter()
        .map(|c| (c.call_id.clone(), c.tenant.clone()))
        .collect();
    Ok(StepPlan {
        cursor: calls.last().map(|c| c.0.clone()),
        finished: page.next.is_none(),
        truncated: false,
        calls,
    })
}

fn a_bulk_job_acts_on_each_matching_call_once_under_its_claim(
    db: &TestDb,
) -> Result<(), StoreError> {
    let store = db.open()?;
    let ids: Vec<String> = (0..5)
        .map(|n| Ok(created_call(store.create_or_get(new_call(&format!("k{n}"), "fp"))?).call_id))
        .collect::<Result<_, StoreError>>()?;
    let running = store.claim(&ids[4], "1:w", LONG)?.unwrap();
    let done = failed(&store, "done", "tool_failed")?;
    let filter = ListQuery {
        tenant: Some(crate::auth::ANONYMOUS.into()),
        statuses: vec!["pending".into(), "running".into()],
        created_before: Some(now() + 1.0),
        ..ListQuery::default()
    };
    let JobCreated::New(created) =
        store.create_job(job(BulkAction::Cancel, filter.clone(), "j"))?
    else {
        panic!("a new job")
    };
    assert!(matches!(
        store.create_job(job(BulkAction::Cancel, filter.clone(), "j"))?,
        JobCreated::Existing(_)
    ));
    let mut other = job(BulkAction::Rerun, filter, "j");
    other.fingerprint = "another request".into();
    assert!(matches!(store.create_job(other)?, JobCreated::Conflict(_)));
    let first = store.claim_job("1:bulk", LONG)?.expect("claimed");
    assert_eq!(
        (first.job_id.as_str(), first.claims),
        (created.job_id.as_str(), 1)
    );
    assert_eq!(store.claim_job("2:bulk", LONG)?, None, "held by the first");
    let batch = plan(&store, &first, 2)?;
    let step = store
        .job_step(&first, &batch, LONG)?
        .expect("under its claim");
    assert_eq!((step.changed, step.cancelled.len()), (2, 1), "{step:?}");
    assert_eq!(step.stop_requested, [(ids[4].clone(), running.attempt)]);
    // The claim lapses; another process takes the job and goes on below the
    // cursor; the first one's next batch is fenced off.
    db.execute("UPDATE bulk_jobs SET lease_until = 0");
    let second = store.claim_job("2:bulk", LONG)?.expect("taken over");
    assert_eq!(
        (second.claims, second.matched, second.cursor.clone()),
        (2, 2, batch.cursor.clone())
    );
    let stale = plan(&store, &first, 10)?;
    assert_eq!(store.job_step(&first, &stale, LONG)?, None);
    let rest = plan(&store, &second, 10)?;
    assert!(rest.finished);
    assert_eq!(rest.calls.len(), 3, "the three calls below the cursor");
    let step = store.job_step(&second, &rest, LONG)?.unwrap();
    assert_eq!((step.changed, step.skipped), (3, 0));
    let finished = store.job(None, &created.job_id)?.unwrap();
    assert_eq!(finished.state, crate::store::JobState::Done);
    assert_eq!(
        (finished.matched, finished.changed, finished.skipped),
        (5, 5, 0)
    );
    for id in &ids[..4] {
        let events = audit_events(&store, id);
        assert_eq!(
            events.iter().filter(|e| *e == "cancelled").count(),
            1,
            "{id}: {events:?}"
        );
    }
    assert_eq!(store.get(&done.call_id)?.unwrap().status, Status::Failed);
    assert_eq!(store.job(Some("beta"), &created.job_id)?, None);
    store.stop();
    Ok(())
}

fn the_list_finds_calls_by_error_code_and_totals_count_a_filter(
    db: &TestDb,
) -> Result<(), StoreError> {
    let store = db.open()?;
    let timeouts: Vec<String> = (0..3)
        .map(|n| Ok(failed(&store, &format!("t{n}"), "downstream_timeout")?.call_id))
        .collect::<Result<_, StoreError>>()?;
    failed(&store, "r", "downstream_rejected")?;
    for n in 0..4 {
        store.create_or_get(new_call(&format!("p{n}"), "fp"))?;
    }
    let scope = Some(crate::auth::ANONYMOUS.to_string());
    let by_code = ListQuery {
        tenant: scope.clone(),
        error_code: Some("downstream_timeout".into()),
        limit: 2,
        ..ListQuery::default()
    };
    let page = store.list(&by_code)?;
    let mut newest: Vec<String> = timeouts.clone();
    newest.reverse();
    let listed: Vec<String> = page.calls.iter().map(|c| c.call_id.clone()).collect();
    assert_eq!(listed, newest[..2], "newest first, a page at a time");
    assert!(page.next.is_some());
    assert_eq!(
        store.total(&by_code)?,
        Total {
            calls: 3,
            exact: true
        }
    );
    let pending = ListQuery {
        tenant: scope.clone(),
        statuses: vec!["pending".into()],
        ..ListQuery::default()
    };
    assert_eq!(
        store.total(&pending)?,
        Total {
            calls: 4,
            exact: true
        }
    );
    let recent = ListQuery {
        created_after: Some(now() - 3600.0),
        ..pending
    };
    assert_eq!(
        store.total(&recent)?.calls,
        4,
        "by the index, with a time bound"
    );
    let failures = store.counts(Scope::All)?.failures;
    let mut seen: Vec<(String, i64)> = failures
        .into_iter()
        .map(|f| (f.error_code, f.failed))
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            ("downstream_rejected".to_string(), 1),
            ("downstream_timeout".to_string(), 3)
        ]
    );
    // A re-run and a second failure count the code again: it is a total.
    store.rerun(request(&timeouts[0]))?;
    let lease = store.claim(&timeouts[0], "1:w", LONG)?.unwrap();
    fail(
        &store,
        &lease,
        &json!({"code": "downstream_timeout", "retryable": false}),
    )?;
    let again = store.counts(Scope::All)?.failures;
    assert!(again
        .iter()
        .any(|f| f.error_code == "downstream_timeout" && f.failed == 4));
    store.stop();
    Ok(())
}

fn readings_are_kept_once_a_step_and_read_at_points(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let step = READING_EVERY.as_secs_f64();
    let base = (now() / step).floor() * step - 100.0 * step;
    let counts = store.counts(Scope::All)?;
    assert!(store.record_reading(&Reading::of(base, &counts))?);
    assert!(
        !store.record_reading(&Reading::of(base + 1.0, &counts))?,
        "within half a step"
    );
    store.create_or_get(new_call("k", "fp"))?;
    let later = store.counts(Scope::All)?;
    assert!(store.record_reading(&Reading::of(base + step, &later))?);
    let at = store.readings_at(&[base - 1.0, base + 5.0, base + step + 5.0])?;
    assert_eq!(at[0], None);
    assert_eq!(at[1].as_ref().map(|r| r.at), Some(base));
    let last = at[2].as_ref().expect("the second reading");
    assert_eq!(last.totals(None).created, 1);
    store.stop();
    Ok(())
}
