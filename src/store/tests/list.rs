//! The list, on both backends: newest first, each filter alone and
//! together, every plan (effect id, key, business key, a prefix by its
//! range and by the ordered fallback, groups, the whole table), pages that
//! go on below their cursor while new calls arrive, and a tenant's query
//! that never returns another tenant's call whatever it asks.

use super::*;
use crate::store::business_key::BusinessKey;
use crate::store::list::PREFIX_CANDIDATES;

on_both_backends!(
    every_filter_finds_exactly_its_calls,
    pages_go_on_below_their_cursor_while_calls_arrive,
    a_tenant_never_lists_another_tenants_call,
);

fn query(tenant: Option<&str>) -> ListQuery {
    ListQuery {
        tenant: tenant.map(String::from),
        limit: 500,
        ..ListQuery::default()
    }
}

fn ids(store: &CallStore, query: &ListQuery) -> Vec<String> {
    let page = store.list(query).unwrap();
    assert!(page.next.is_none(), "one page holds them all: {query:?}");
    page.calls.into_iter().map(|c| c.call_id).collect()
}

/// The ids `condition` selects, newest first, as the list must show them.
fn expected(db: &TestDb, condition: &str) -> Vec<String> {
    db.texts(&format!(
        "SELECT call_id FROM calls WHERE {condition} ORDER BY call_id DESC"
    ))
}

/// Two tenants with the same keys; `acme` has charges, failures, a pending
/// call and a business key. Returns acme's succeeded effect id.
fn fill(store: &CallStore) -> Result<String, StoreError> {
    let lease = Duration::from_secs(30);
    let mut effect_id = String::new();
    for n in 0..24 {
        for tenant in ["acme", "beta"] {
            let key = format!("order-{n}");
            let mut new = new_call_in(tenant, &key, "fp");
            if n % 4 == 3 {
                new.tool = "fail".into();
            }
            let call = created_call(store.create_or_get(new)?);
            if n % 6 == 5 {
                continue; // stays pending
            }
            let l = store.claim(&call.call_id, "1:w", lease)?.expect("claimed");
            if n % 4 == 3 {
                fail(
                    store,
                    &l,
                    &json!({"code": "tool_failed", "retryable": false}),
                )?;
            } else {
                succeed(store, &l, &json!({"charged": 1}), charged(1))?;
                effect_id = l.effect_id.clone();
            }
        }
    }
    let bkey = BusinessKey {
        value: r#"["u-1"]"#.into(),
        window_secs: 60.0,
    };
    store.create_or_get_guarded(new_call_in("acme", "guarded", "fp"), Some(bkey))?;
    Ok(effect_id)
}

fn every_filter_finds_exactly_its_calls(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    let beta_effect = fill(&store)?;
    let acme = || query(Some("acme"));
    assert_eq!(ids(&store, &acme()), expected(db, "tenant = 'acme'"));
    assert_eq!(ids(&store, &query(None)), expected(db, "true"));
    let mut q = acme();
    q.statuses = vec!["failed".into(), "pending".into()];
    assert_eq!(
        ids(&store, &q),
        expected(db, "tenant = 'acme' AND status IN ('failed', 'pending')")
    );
    let mut q = query(None);
    q.statuses = vec!["cancelled".into()];
    assert!(
        ids(&store, &q).is_empty(),
        "a status no call has lists nothing"
    );
    let mut q = acme();
    q.tool = Some("fail".into());
    assert_eq!(
        ids(&store, &q),
        expected(db, "tenant = 'acme' AND tool = 'fail'")
    );
    let mut q = query(None);
    q.key = Some("order-7".into());
    assert_eq!(ids(&store, &q), expected(db, "idem_key = 'order-7'"));
    assert_eq!(ids(&store, &q).len(), 2);
    // A tenant has 5 keys starting "order-2" (read by the key range), 11
    // starting "order-1" and 24 "order-" (past PREFIX_CANDIDATES in the
    // tests: read newest first, filtered).
    for prefix in ["order-2", "order-1", "order-", "nope"] {
        let mut q = acme();
        q.key_prefix = Some(prefix.into());
        let want = expected(
            db,
            &format!("tenant = 'acme' AND idem_key LIKE '{prefix}%'"),
        );
        assert_eq!(ids(&store, &q), want, "{prefix}");
    }
    const { assert!(5 <= PREFIX_CANDIDATES && PREFIX_CANDIDATES < 11) };
    let mut q = query(None);
    q.effect_id = Some(beta_effect.clone());
    let found = store.list(&q)?.calls;
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].effect_id, beta_effect);
    assert_eq!((found[0].args_json.as_str(), &found[0].result), ("", &None));
    q.effect_id = Some(format!("{beta_effect}_{}", "0".repeat(32)));
    assert!(
        ids(&store, &q).is_empty(),
        "the call id alone is not the effect id"
    );
    let mut q = acme();
    q.business_key = Some(r#"["u-1"]"#.into());
    assert_eq!(ids(&store, &q), expected(db, "idem_key = 'guarded'"));
    q.tool = Some("fail".into());
    assert!(ids(&store, &q).is_empty());
    // Times select by the millisecond a call id begins with: the oldest
    // third of acme's calls, and the rest.
    let all = ids(&store, &acme());
    let millis = |id: &str| i64::from_str_radix(&id[2..13], 16).unwrap();
    let cut = millis(&all[all.len() * 2 / 3]);
    let mut q = acme();
    q.created_before = Some(cut as f64 / 1000.0);
    let before: Vec<String> = all.iter().filter(|id| millis(id) < cut).cloned().collect();
    assert!(!before.is_empty());
    assert_eq!(ids(&store, &q), before);
    q.created_before = None;
    q.created_after = Some(cut as f64 / 1000.0);
    let after: Vec<String> = all.iter().filter(|id| millis(id) >= cut).cloned().collect();
    assert_eq!(ids(&store, &q), after);
    Ok(())
}

/// Keyset pages: each page below the last id of the one before, none
/// repeated or skipped, whatever is created meanwhile (new calls sort
/// above the first page and never shift a later one).
fn pages_go_on_below_their_cursor_while_calls_arrive(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    fill(&store)?;
    for (tool, statuses) in [
        (None, vec![]),
        (Some("charge"), vec![]),
        (None, vec!["succeeded".to_string()]),
    ] {
        let before = expected(db, "tenant = 'acme'");
        let mut q = query(Some("acme"));
        q.limit = 4;
        q.tool = tool.map(String::from);
        q.statuses = statuses;
        let mut seen = Vec::new();
        let mut arrivals = 0;
        loop {
            let page = store.list(&q)?;
            assert!(page.calls.len() <= 4);
            seen.extend(page.calls.iter().map(|c| c.call_id.clone()));
            store.create_or_get(new_call_in("acme", &format!("late-{}", now()), "fp"))?;
            arrivals += 1;
            match page.next {
                Some(next) => q.before_call_id = Some(next),
                None => break,
            }
        }
        let admitted: Vec<String> = before
            .iter()
            .filter(|id| {
                let call = store.get(id).unwrap().unwrap();
                q.tool.as_deref().is_none_or(|t| t == call.tool)
                    && (q.statuses.is_empty()
                        || q.statuses.contains(&call.status.as_str().to_string()))
            })
            .cloned()
            .collect();
        assert_eq!(seen, admitted, "{tool:?} after {arrivals} arrivals");
    }
    Ok(())
}

/// Whatever beta asks — acme's key, acme's effect id, a prefix of acme's
/// keys, a cursor from acme's pages, any status — it gets only its own.
fn a_tenant_never_lists_another_tenants_call(db: &TestDb) -> Result<(), StoreError> {
    let store = db.open()?;
    fill(&store)?;
    store.create_or_get(new_call_in("acme", "acme-only", "fp"))?;
    let acme_call = store.find_by_key("acme", "acme-only")?.unwrap();
    let beta = || query(Some("beta"));
    let mut asks = vec![beta()];
    let mut q = beta();
    q.key = Some("acme-only".into());
    asks.push(q);
    let mut q = beta();
    q.key_prefix = Some("acme".into());
    asks.push(q);
    let mut q = beta();
    q.effect_id = Some(acme_call.effect_id.clone());
    asks.push(q);
    let mut q = beta();
    q.before_call_id = Some("c_g".into());
    q.statuses = vec!["pending".into()];
    asks.push(q);
    for ask in asks {
        for call in store.list(&ask)?.calls {
            assert_eq!(call.tenant, "beta", "{ask:?}");
        }
    }
    let mut q = beta();
    q.effect_id = Some(acme_call.effect_id);
    assert!(store.list(&q)?.calls.is_empty());
    Ok(())
}
