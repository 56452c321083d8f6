//! The list's statements on PostgreSQL: each access path of `store::list`'s
//! `Plan`, as ONE statement (a round trip each), and the rows of a page
//! without their `args` and `result`. They run in the caller's read-only
//! snapshot, after the counts the plan was made from.
//!
//! Every statement is driven by an index: `calls_list` (tenant, tool,
//! status, call_id) once per group through a `LATERAL` join, the primary
//! key, `calls_tenant_idem_key` (whose `idem_key` is in the "C" collation
//! since step 5, so a prefix is a range of it), or `business_keys_key`;
//! `docs/performance.md` shows their plans. This module never writes, and
//! never reads a group or a tenant the plan did not name.

use super::super::ids::effect_id_for;
use super::super::list::{ListQuery, Ordered, Plan, PREFIX_CANDIDATES};
use super::super::model::Call;
use super::session::GenericClient;
use super::sql::call_from_row;
use tokio_postgres::types::ToSql;

/// Newest first in each (tenant, tool, status) group, between two ids, at
/// most `$6` from each and `$6` in all.
pub const GROUP_IDS: &str = "
SELECT x.call_id FROM unnest($1::text[], $2::text[], $3::text[]) AS g(tenant, tool, status)
 CROSS JOIN LATERAL (
   SELECT call_id FROM calls
    WHERE calls.tenant = g.tenant AND calls.tool = g.tool AND calls.status = g.status
      AND call_id >= $4 AND call_id < $5
    ORDER BY call_id DESC LIMIT $6) AS x
 ORDER BY x.call_id DESC LIMIT $6";

/// `GROUP_IDS` with a key prefix checked on each row (`starts_with`, which
/// no index steers).
pub const GROUP_IDS_FILTERED: &str = "
SELECT x.call_id FROM unnest($1::text[], $2::text[], $3::text[]) AS g(tenant, tool, status)
 CROSS JOIN LATERAL (
   SELECT call_id FROM calls
    WHERE calls.tenant = g.tenant AND calls.tool = g.tool AND calls.status = g.status
      AND call_id >= $4 AND call_id < $5 AND starts_with(idem_key, $7)
    ORDER BY call_id DESC LIMIT $6) AS x
 ORDER BY x.call_id DESC LIMIT $6";

/// Newest first over every call, by the primary key, between two ids.
pub const ALL_IDS: &str = "
SELECT call_id FROM calls
 WHERE call_id >= $1 AND call_id < $2
 ORDER BY call_id DESC LIMIT $3";

/// `ALL_IDS` with a key prefix checked on each row.
pub const ALL_IDS_FILTERED: &str = "
SELECT call_id FROM calls
 WHERE call_id >= $1 AND call_id < $2 AND starts_with(idem_key, $4)
 ORDER BY call_id DESC LIMIT $3";

/// Keys starting with the prefix in these tenants, counted up to a limit
/// on `calls_tenant_idem_key` alone.
pub const PREFIX_COUNT: &str = "
SELECT count(*) FROM (
  SELECT 1 FROM calls WHERE tenant = ANY($1) AND idem_key >= $2 AND idem_key < $3 LIMIT $4) AS m";

/// A page's rows are summaries: `args` read as empty and `result` as
/// absent (a call's args may be 64 KiB), and progress as none (a summary
/// shows none). Each statement below selects the columns in the order
/// `call_from_row` reads, those three left out.
///
/// The call whose id is `$1` when its effect id (`$2` when none is stored)
/// is `$3`.
const SUMMARIES_BY_EFFECT: &str = "
SELECT call_id, tenant, idem_key, fingerprint, client_id, seq, tool, '' AS args_json, status,
       NULL AS result_json, error_json, attempt, lease_until, owner, effect_id, created_at,
       updated_at, next_attempt_at, cancel_requested_at, NULL AS progress_json
  FROM calls WHERE call_id = $1 AND coalesce(effect_id, $2) = $3";

/// The calls of key `$2` in tenants `$1`.
const SUMMARIES_BY_KEY: &str = "
SELECT call_id, tenant, idem_key, fingerprint, client_id, seq, tool, '' AS args_json, status,
       NULL AS result_json, error_json, attempt, lease_until, owner, effect_id, created_at,
       updated_at, next_attempt_at, cancel_requested_at, NULL AS progress_json
  FROM calls WHERE tenant = ANY($1) AND idem_key = $2";

/// The calls holding business key `$3` in the (tenant, tool) groups `$1`, `$2`.
const SUMMARIES_BY_BUSINESS_KEY: &str = "
SELECT call_id, tenant, idem_key, fingerprint, client_id, seq, tool, '' AS args_json, status,
       NULL AS result_json, error_json, attempt, lease_until, owner, effect_id, created_at,
       updated_at, next_attempt_at, cancel_requested_at, NULL AS progress_json
  FROM calls
 WHERE call_id IN (SELECT b.call_id FROM unnest($1::text[], $2::text[]) AS g(tenant, tool)
                     JOIN business_keys b
                       ON b.tenant = g.tenant AND b.tool = g.tool AND b.bkey = $3)";

/// The calls of tenants `$1` whose keys are in [`$2`, `$3`): a key prefix.
const SUMMARIES_BY_KEY_RANGE: &str = "
SELECT call_id, tenant, idem_key, fingerprint, client_id, seq, tool, '' AS args_json, status,
       NULL AS result_json, error_json, attempt, lease_until, owner, effect_id, created_at,
       updated_at, next_attempt_at, cancel_requested_at, NULL AS progress_json
  FROM calls WHERE tenant = ANY($1) AND idem_key >= $2 AND idem_key < $3";

/// The calls whose ids are in `$1`.
const SUMMARIES_BY_ID: &str = "
SELECT call_id, tenant, idem_key, fingerprint, client_id, seq, tool, '' AS args_json, status,
       NULL AS result_json, error_json, attempt, lease_until, owner, effect_id, created_at,
       updated_at, next_attempt_at, cancel_requested_at, NULL AS progress_json
  FROM calls WHERE call_id = ANY($1)";

/// The query's page rows (at most `limit` + 1, in any order; `page` sorts,
/// checks and cuts them), following `plan`.
pub(super) fn rows(
    client: &mut impl GenericClient,
    query: &ListQuery,
    plan: &Plan,
) -> Result<Vec<Call>, tokio_postgres::Error> {
    match plan {
        Plan::Empty => Ok(Vec::new()),
        Plan::ByEffect { call_id, effect_id } => summaries(
            client,
            SUMMARIES_BY_EFFECT,
            &[call_id, &effect_id_for(call_id), effect_id],
        ),
        Plan::ByKey { tenants, key } => summaries(client, SUMMARIES_BY_KEY, &[tenants, key]),
        Plan::ByBusinessKey { groups, bkey } => {
            let (tenants, tools): (Vec<&str>, Vec<&str>) = groups
                .iter()
                .map(|(t, tool)| (t.as_str(), tool.as_str()))
                .unzip();
            summaries(client, SUMMARIES_BY_BUSINESS_KEY, &[&tenants, &tools, bkey])
        }
        Plan::ByKeyPrefix {
            tenants,
            prefix,
            upper: Some(upper),
            fallback,
        } => {
            let cap = PREFIX_CANDIDATES as i64 + 1;
            let found: i64 = client
                .query_one(PREFIX_COUNT, &[tenants, prefix, upper, &cap])?
                .get(0);
            if found > PREFIX_CANDIDATES as i64 {
                return rows(client, query, fallback);
            }
            summaries(client, SUMMARIES_BY_KEY_RANGE, &[tenants, prefix, upper])
        }
        Plan::ByKeyPrefix { fallback, .. } => rows(client, query, fallback),
        Plan::Ordered(ordered) => {
            let client = std::cell::RefCell::new(client);
            ordered.read(
                query,
                |o, filtered| ordered_ids(*client.borrow_mut(), o, filtered),
                |ids| summaries(*client.borrow_mut(), SUMMARIES_BY_ID, &[&ids]),
            )
        }
    }
}

/// The newest `take` ids of the ordered plan, in one statement; the key
/// prefix checked on each row when `filtered`.
fn ordered_ids(
    client: &mut impl GenericClient,
    ordered: &Ordered,
    filtered: bool,
) -> Result<Vec<String>, tokio_postgres::Error> {
    let take = ordered.take as i64;
    let (lower, upper) = (&ordered.bounds.lower, &ordered.bounds.upper);
    let prefix = match filtered {
        true => ordered
            .residual
            .key_prefix
            .as_ref()
            .map(|(p, _)| p.as_str()),
        false => None,
    };
    let rows = match (ordered.whole_table, prefix) {
        (true, None) => client.query(ALL_IDS, &[lower, upper, &take])?,
        (true, Some(prefix)) => client.query(ALL_IDS_FILTERED, &[lower, upper, &take, &prefix])?,
        (false, prefix) => {
            let tenants: Vec<&str> = ordered.groups.iter().map(|g| g.0.as_str()).collect();
            let tools: Vec<&str> = ordered.groups.iter().map(|g| g.1.as_str()).collect();
            let statuses: Vec<&str> = ordered.groups.iter().map(|g| g.2.as_str()).collect();
            let head: [&(dyn ToSql + Sync); 6] = [&tenants, &tools, &statuses, lower, upper, &take];
            match prefix {
                None => client.query(GROUP_IDS, &head)?,
                Some(prefix) => {
                    let mut all = head.to_vec();
                    all.push(&prefix);
                    client.query(GROUP_IDS_FILTERED, &all)?
                }
            }
        }
    };
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// The summaries `sql` (one of the `SUMMARIES_*` statements) selects.
fn summaries(
    client: &mut impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Call>, tokio_postgres::Error> {
    client
        .query(sql, params)?
        .iter()
        .map(call_from_row)
        .collect()
}
