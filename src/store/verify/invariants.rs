//! The invariants past SQLite's own, each as one query that selects a
//! described row per violation. Both backends run these same queries (the
//! PostgreSQL side rewrites them into its dialect); this file runs none.

/// One invariant as a query returning one described row per violation.
pub(in crate::store) struct Spec {
    pub(in crate::store) name: &'static str,
    pub(in crate::store) invariant: String,
    pub(in crate::store) sql: String,
}

/// The invariants past SQLite's own. Each query selects one text per
/// violation, describing it (`quote()` keeps keys and statuses readable).
///
/// `purged`: `effects` has `call_purged_at`, set when key retention deleted
/// the effect's call (the effect stays as the ledger); such an effect has no
/// call, and that is no violation.
pub(in crate::store) fn invariant_checks(
    tenant: bool,
    purged: bool,
    effect_tools: &[&str],
) -> Vec<Spec> {
    let effect_tools = effect_tools
        .iter()
        // SQL string literals: a quote inside a name is doubled.
        .map(|t| format!("'{}'", t.replace('\'', "''")))
        .collect::<Vec<_>>()
        .join(", ");
    let (key_group, key_scope, key_label) = if tenant {
        (
            "tenant, idem_key",
            "per tenant",
            "'tenant ' || quote(tenant) || ' key ' || quote(idem_key)",
        )
    } else {
        ("idem_key", "", "'key ' || quote(idem_key)")
    };
    vec![
        Spec {
            name: "duplicate_key",
            invariant: format!("one call per Idempotency-Key{}", prefixed(key_scope)),
            sql: format!(
                "SELECT {key_label} || ': ' || count(*) || ' calls ' || group_concat(call_id, ', ')
                   FROM calls GROUP BY {key_group} HAVING count(*) > 1"
            ),
        },
        Spec {
            name: "duplicate_effect",
            invariant: "at most one effect per call".into(),
            sql: "SELECT 'call ' || call_id || ': ' || count(*) || ' effects ' || group_concat(effect_id, ', ')
                    FROM effects GROUP BY call_id HAVING count(*) > 1"
                .into(),
        },
        Spec {
            name: "effect_without_succeeded_call",
            invariant: if purged {
                "every effect belongs to a succeeded call, or to one purged after its TTL".into()
            } else {
                "every effect belongs to a succeeded call".into()
            },
            sql: format!(
                "SELECT 'effect ' || e.effect_id || ' of call ' || e.call_id || ': '
                         || CASE WHEN c.call_id IS NULL THEN 'no such call'
                                 ELSE 'the call is ' || quote(c.status) END
                    FROM effects e LEFT JOIN calls c ON c.call_id = e.call_id
                   WHERE (c.call_id IS NULL{unpurged})
                      OR (c.call_id IS NOT NULL AND c.status IS NOT 'succeeded')",
                unpurged = if purged {
                    " AND e.call_purged_at IS NULL"
                } else {
                    ""
                }
            ),
        },
        Spec {
            name: "effect_not_its_calls",
            invariant: format!(
                "every effect is its call's (same effect_id and tool; tool one of {effect_tools})"
            ),
            sql: format!(
                "SELECT 'effect ' || e.effect_id || ' (' || quote(e.tool) || ') of call '
                         || c.call_id || ' (' || quote(c.tool) || ', effect_id '
                         || quote(c.effect_id) || ')'
                    FROM effects e JOIN calls c ON c.call_id = e.call_id
                   WHERE c.status = 'succeeded'
                     AND (e.effect_id <> coalesce(c.effect_id, 'eff_' || substr(c.call_id, 3))
                          OR e.tool IS NOT c.tool
                          OR c.tool NOT IN ({effect_tools}))"
            ),
        },
        Spec {
            name: "succeeded_without_effect",
            invariant: format!("every succeeded call of {effect_tools} has its effect"),
            sql: format!(
                "SELECT 'call ' || c.call_id || ' (' || c.tool || ', key ' || quote(c.idem_key)
                         || ') succeeded without an effect'
                    FROM calls c
                   WHERE c.status = 'succeeded' AND c.tool IN ({effect_tools})
                     AND NOT EXISTS (SELECT 1 FROM effects e WHERE e.call_id = c.call_id)"
            ),
        },
        Spec {
            name: "running_without_lease",
            invariant: "every running call holds a lease (lease_until and owner)".into(),
            sql: "SELECT 'call ' || call_id || ': running, lease_until ' || quote(lease_until)
                         || ', owner ' || quote(owner)
                    FROM calls
                   WHERE status = 'running' AND (lease_until IS NULL OR owner IS NULL)"
                .into(),
        },
        Spec {
            name: "unknown_status",
            invariant: "every status is awaiting_approval, pending, running, succeeded, failed, \
                        cancelled or denied"
                .into(),
            sql: "SELECT 'call ' || call_id || ': status ' || quote(status)
                    FROM calls
                   WHERE status IS NULL
                      OR status NOT IN ('awaiting_approval', 'pending', 'running', 'succeeded',
                                        'failed', 'cancelled', 'denied')"
                .into(),
        },
    ]
}

/// The second layer (migration 8): two calls of one tenant and tool with the
/// same business key, none of them `failed`, `cancelled` or `denied`, the
/// later created within the earlier's window, mean a duplicate intent got
/// through.
pub(in crate::store) fn business_key_check() -> Spec {
    Spec {
        name: "duplicate_intent",
        invariant: "no two live (not failed, cancelled or denied) calls share a business key within its window".into(),
        sql: "SELECT 'tenant ' || quote(a.tenant) || ' tool ' || quote(a.tool) || ' business key '
                     || a.bkey || ': calls ' || a.call_id || ' and ' || b.call_id
                FROM business_keys a
                JOIN business_keys b
                  ON b.tenant = a.tenant AND b.tool = a.tool AND b.bkey = a.bkey
                 AND b.call_id <> a.call_id
                 AND (b.created_at > a.created_at
                      OR (b.created_at = a.created_at AND b.call_id > a.call_id))
                 AND b.created_at < a.expires_at
                JOIN calls ca ON ca.call_id = a.call_id
                 AND ca.status NOT IN ('failed', 'cancelled', 'denied')
                JOIN calls cb ON cb.call_id = b.call_id
                 AND cb.status NOT IN ('failed', 'cancelled', 'denied')"
            .into(),
    }
}

/// Approval gates (`store::approval`, on a database that has them): a call
/// awaiting approval never ran and holds no lease; a denied one never ran
/// and has no effect; a call awaiting approval has an open request and an
/// open request's call awaits approval; a denied call was denied by its
/// request; a request binds its call's own fingerprint.
pub(in crate::store) fn approval_checks() -> Vec<Spec> {
    vec![
        Spec {
            name: "awaiting_holds_nothing",
            invariant: "a call awaiting approval never ran and holds no lease".into(),
            sql: "SELECT 'call ' || call_id || ': awaiting approval, attempt ' || attempt
                         || ', lease_until ' || quote(lease_until) || ', owner ' || quote(owner)
                    FROM calls
                   WHERE status = 'awaiting_approval'
                     AND (attempt <> 0 OR lease_until IS NOT NULL OR owner IS NOT NULL)"
                .into(),
        },
        Spec {
            name: "denied_ran",
            invariant: "a denied call never ran and has no effect".into(),
            sql: "SELECT 'call ' || c.call_id || ': denied, attempt ' || c.attempt
                         || CASE WHEN EXISTS (SELECT 1 FROM effects e WHERE e.call_id = c.call_id)
                                 THEN ', with an effect' ELSE '' END
                    FROM calls c
                   WHERE c.status = 'denied'
                     AND (c.attempt <> 0
                          OR EXISTS (SELECT 1 FROM effects e WHERE e.call_id = c.call_id))"
                .into(),
        },
        Spec {
        name: "approval_agrees",
        invariant: "every approval request agrees with its call (open while it awaits \
                    approval, denied only by a denial, the call's own fingerprint)"
            .into(),
        sql: "SELECT 'call ' || c.call_id || ' is ' || quote(c.status) || ', its request '
                     || CASE WHEN a.call_id IS NULL THEN 'missing'
                             WHEN a.decision IS NULL THEN 'open'
                             ELSE quote(a.decision) END
                     || CASE WHEN a.fingerprint IS NOT c.fingerprint
                             THEN ' with another fingerprint' ELSE '' END
                FROM calls c LEFT JOIN approvals a ON a.call_id = c.call_id
               WHERE (c.status = 'awaiting_approval' AND (a.call_id IS NULL OR a.decision IS NOT NULL))
                  OR (c.status = 'denied' AND (a.decision IS NULL OR a.decision <> 'denied'))
                  OR (a.call_id IS NOT NULL AND a.decision IS NULL
                      AND c.status <> 'awaiting_approval')
                  OR (a.call_id IS NOT NULL AND a.fingerprint IS NOT c.fingerprint)
              UNION ALL
              SELECT 'approval request of call ' || a.call_id || ': no such call'
                FROM approvals a LEFT JOIN calls c ON c.call_id = a.call_id
               WHERE c.call_id IS NULL"
                .into(),
        },
    ]
}

fn prefixed(scope: &str) -> String {
    if scope.is_empty() {
        String::new()
    } else {
        format!(" {scope}")
    }
}
