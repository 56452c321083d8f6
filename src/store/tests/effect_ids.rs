//! Effect ids: every create path stores a new call's effect id — the call
//! id's hex and 128 random bits — and every attempt, the effect row and
//! `verify` use the stored one; a call stored without one (made before
//! effect ids had a random part) keeps `eff_` + its hex; two databases side
//! by side never hand out the same effect id.

use super::*;
use crate::store::ids::{call_id_of_effect, effect_id_for};
use std::collections::HashSet;

on_both_backends!(
    every_create_path_stores_a_random_effect_id_that_every_attempt_gets,
    a_call_stored_without_an_effect_id_keeps_the_one_it_had,
    two_databases_side_by_side_give_disjoint_effect_ids,
);

const LEASE: Duration = Duration::from_secs(30);

/// `eff_` + the call's 16 hex + `_` + 32 hex: the call is found from it.
fn assert_new_format(call: &Call) {
    let random = call
        .effect_id
        .strip_prefix(&format!("{}_", effect_id_for(&call.call_id)))
        .unwrap_or_else(|| panic!("{} starts with the call's hex", call.effect_id));
    assert!(
        random.len() == 32 && random.bytes().all(|b| b.is_ascii_hexdigit()),
        "{}",
        call.effect_id
    );
    assert_eq!(
        call_id_of_effect(&call.effect_id),
        Some(call.call_id.clone())
    );
}

/// `create_or_get`, `create_claimed` and the guarded create each store a
/// new-format effect id; a claim, a retry after a reset, and the effect row
/// all carry that same id.
fn every_create_path_stores_a_random_effect_id_that_every_attempt_gets(
    db: &TestDb,
) -> Result<(), StoreError> {
    let store = db.open()?;
    let call = created_call(store.create_or_get(new_call("plain", "fp"))?);
    assert_new_format(&call);
    let first = store.claim(&call.call_id, "1:w", LEASE)?.unwrap();
    assert_eq!(first.effect_id, call.effect_id);
    let retryable = json!({"code": "tool_failed", "retryable": true});
    fail(&store, &first, &retryable)?;
    let reset = created_call(store.create_or_get(new_call("plain", "fp"))?);
    assert_eq!(reset.effect_id, call.effect_id, "a reset keeps it");
    let second = store.claim(&call.call_id, "1:w", LEASE)?.unwrap();
    assert_eq!(
        (second.attempt, second.effect_id.as_str()),
        (2, call.effect_id.as_str())
    );
    succeed(&store, &second, &json!({}), charged(1))?;
    let stored = format!(
        "SELECT count(*) FROM effects WHERE effect_id = '{}' AND call_id = '{}'",
        call.effect_id, call.call_id
    );
    assert_eq!(db.count(&stored), 1, "the effect row carries it");

    let claimed = store.create_claimed(new_call("claimed", "fp"), "1:api", LEASE)?;
    let claimed_call = created_call(claimed.created);
    assert_new_format(&claimed_call);
    assert_eq!(claimed.lease.unwrap().effect_id, claimed_call.effect_id);

    let key = BusinessKey {
        value: "[\"u1\"]".into(),
        window_secs: 60.0,
    };
    let guarded = store.create_or_get_guarded(new_call("guarded", "fp"), Some(key))?;
    let Guarded::Created(Created::New(guarded)) = guarded else {
        panic!("a new business key creates a call: {guarded:?}");
    };
    assert_new_format(&guarded);
    assert_eq!(
        store.get(&guarded.call_id)?.unwrap().effect_id,
        guarded.effect_id
    );
    let ids: HashSet<&str> = [&call, &claimed_call, &guarded]
        .map(|c| c.effect_id.as_str())
        .into();
    assert_eq!(ids.len(), 3);
    Ok(())
}

/// A row with no stored effect id reads, claims and completes under
/// `eff_` + its hex, and `verify` counts that effect as its call's.
fn a_call_stored_without_an_effect_id_keeps_the_one_it_had(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let call = created_call(store.create_or_get(new_call("old", "fp"))?);
    db.execute(&format!(
        "UPDATE calls SET effect_id = NULL WHERE call_id = '{}'",
        call.call_id
    ));
    let legacy = effect_id_for(&call.call_id);
    assert_eq!(store.get(&call.call_id)?.unwrap().effect_id, legacy);
    let lease = store.claim(&call.call_id, "1:w", LEASE)?.unwrap();
    assert_eq!(lease.effect_id, legacy);
    succeed(&store, &lease, &json!({}), charged(1))?;
    let stored = format!("SELECT count(*) FROM effects WHERE effect_id = '{legacy}'");
    assert_eq!(db.count(&stored), 1);
    store.stop();
    let report = crate::store::verify::verify_database(&db.database(), &["charge"])
        .expect("verify reads it");
    assert!(report.is_clean(), "{report}");
    Ok(())
}

/// Two databases filled side by side, as two deployments calling one
/// downstream would be: no effect id of one is ever the other's, and none
/// is derived from its call id alone.
fn two_databases_side_by_side_give_disjoint_effect_ids(db: &TestDb) -> Result<(), StoreError> {
    const CALLS: usize = 300;
    let other = match db {
        TestDb::Sqlite(_) => TestDb::sqlite("effect_ids_other"),
        TestDb::Postgres(_) => TestDb::postgres("effect_ids_other"),
    };
    let stores = [db.open()?, other.open()?];
    let mut seen: [HashSet<String>; 2] = Default::default();
    for n in 0..CALLS {
        for (store, seen) in stores.iter().zip(seen.iter_mut()) {
            let call = created_call(store.create_or_get(new_call(&format!("k{n}"), "fp"))?);
            assert_new_format(&call);
            seen.insert(call.effect_id);
        }
    }
    assert_eq!((seen[0].len(), seen[1].len()), (CALLS, CALLS));
    let shared = seen[0].intersection(&seen[1]).count();
    assert_eq!(shared, 0, "effect ids shared by the two databases");
    Ok(())
}
