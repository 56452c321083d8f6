//! The list's statements on PostgreSQL: each access path of `store::list`'s
//! `Plan`, as ONE statement (a round trip each), and the rows of a page
//! without their `args` and `result`. They run in the caller's read-only
//! snapshot, after the counts the plan was made from.
//!
//! Every statement is driven by an index: `calls_list` (tenant, tool,
//! status, call_id) once per group through a `LATERAL` join, the primary
//! key, `calls_tenant_idem_key` (whose `idem_key` is in the "C" collation
//! since step 5, so a prefix is a range of it), `calls_error` (tenant, tool,
//! status, the error's code, call_id: only calls with an error, step 8), or
//! `business_keys_key`; `docs/performance.md` shows their plans. A filter's
//! total (`total`) follows the same plan, counting index entries up to
//! `TOTAL_CAP`. This module never writes, and never reads a group or a
//! tenant the plan did not name.

use super::super::counts::Counts;
use super::super::ids::effect_id_for;
use super::super::list::{ListQuery, Ordered, Plan, Total, PREFIX_CANDIDATES, TOTAL_CAP};
use super::super::model::Call;
use super::session::GenericClient;
use super::steps::call_from_row;
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

/// Schema step 8: a call's error code as a column of its own, kept by a
/// trigger, and the list's index of it.
///
/// `error_code` is `error_json`'s `code`, set by a `BEFORE` trigger on any
/// insert or update that changes `error_json` (or `error_code` itself), so
/// whoever writes a call (another node, an older release, an operator's
/// SQL) leaves the two agreeing; the `WHEN` keeps the function out of every
/// other write — a new call has no error, a success after a first attempt
/// keeps `NULL`. A column, not an expression index: an index-only scan can
/// read a plain column (a page of ids, a total counted up to `TOTAL_CAP`,
/// no table page read), which PostgreSQL cannot do for an expression. The
/// column is added without a default, so no row is rewritten but the calls
/// that hold an error (the backfill). `calls_error` is partial: only those
/// calls have an entry, and a call's create, claim and success write none.
pub(super) const ERROR_CODE_COLUMN: &str = "
ALTER TABLE calls ADD COLUMN error_code text;

CREATE FUNCTION idem_error_code() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.error_code := (NEW.error_json::jsonb) ->> 'code';
  RETURN NEW;
END $$;

CREATE TRIGGER calls_error_code BEFORE INSERT ON calls
  FOR EACH ROW WHEN (NEW.error_json IS NOT NULL OR NEW.error_code IS NOT NULL)
  EXECUTE FUNCTION idem_error_code();
CREATE TRIGGER calls_error_code_on_update BEFORE UPDATE ON calls
  FOR EACH ROW
  WHEN (NEW.error_json IS DISTINCT FROM OLD.error_json
        OR NEW.error_code IS DISTINCT FROM OLD.error_code)
  EXECUTE FUNCTION idem_error_code();

UPDATE calls SET error_code = (error_json::jsonb) ->> 'code' WHERE error_json IS NOT NULL;

CREATE INDEX calls_error ON calls (tenant, tool, status, error_code, call_id)
  WHERE error_code IS NOT NULL;
";

/// Newest first in each group's calls with error code `$7`, by
/// `calls_error`, between two ids, at most `$6` from each and in all.
pub const ERROR_IDS: &str = "
SELECT x.call_id FROM unnest($1::text[], $2::text[], $3::text[]) AS g(tenant, tool, status)
 CROSS JOIN LATERAL (
   SELECT call_id FROM calls
    WHERE calls.tenant = g.tenant AND calls.tool = g.tool AND calls.status = g.status
      AND error_code = $7
      AND call_id >= $4 AND call_id < $5
    ORDER BY call_id DESC LIMIT $6) AS x
 ORDER BY x.call_id DESC LIMIT $6";

/// `ERROR_IDS` with a key prefix (`$8`) checked on each row.
pub const ERROR_IDS_FILTERED: &str = "
SELECT x.call_id FROM unnest($1::text[], $2::text[], $3::text[]) AS g(tenant, tool, status)
 CROSS JOIN LATERAL (
   SELECT call_id FROM calls
    WHERE calls.tenant = g.tenant AND calls.tool = g.tool AND calls.status = g.status
      AND error_code = $7
      AND call_id >= $4 AND call_id < $5 AND starts_with(idem_key, $8)
    ORDER BY call_id DESC LIMIT $6) AS x
 ORDER BY x.call_id DESC LIMIT $6";

/// How many calls of the groups lie between two ids, up to `$6` in all.
const GROUP_TOTAL: &str = "
SELECT count(*) FROM (
  SELECT 1 FROM unnest($1::text[], $2::text[], $3::text[]) AS g(tenant, tool, status)
   CROSS JOIN LATERAL (
     SELECT 1 FROM calls
      WHERE calls.tenant = g.tenant AND calls.tool = g.tool AND calls.status = g.status
        AND call_id >= $4 AND call_id < $5
      LIMIT $6) AS x
  LIMIT $6) AS m";

/// How many calls of the groups with error code `$7` lie between two ids,
/// up to `$6` in all.
const ERROR_TOTAL: &str = "
SELECT count(*) FROM (
  SELECT 1 FROM unnest($1::text[], $2::text[], $3::text[]) AS g(tenant, tool, status)
   CROSS JOIN LATERAL (
     SELECT 1 FROM calls
      WHERE calls.tenant = g.tenant AND calls.tool = g.tool AND calls.status = g.status
        AND error_code = $7
        AND call_id >= $4 AND call_id < $5
      LIMIT $6) AS x
  LIMIT $6) AS m";

/// How many calls lie between two ids, up to `$3`.
const ALL_TOTAL: &str = "
SELECT count(*) FROM (SELECT 1 FROM calls WHERE call_id >= $1 AND call_id < $2 LIMIT $3) AS m";

/// How many keys of tenants `$1` starting with a prefix (`[$2, $3)`, `$3`
/// NULL: no end) belong to calls the other filters admit (each NULL when
/// not given), up to `$4`: a prefix too common to read key by key.
const PREFIX_TOTAL: &str = "
SELECT count(*) FROM (
  SELECT 1 FROM calls
   WHERE tenant = ANY($1) AND idem_key >= $2 AND ($3::text IS NULL OR idem_key < $3)
     AND ($5::text IS NULL OR tool = $5)
     AND ($6::text IS NULL OR error_code = $6)
     AND ($7::text[] IS NULL OR status = ANY($7))
     AND call_id >= $8 AND call_id < $9
   LIMIT $4) AS m";

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
            match (prefix, &ordered.error_code) {
                (None, None) => client.query(GROUP_IDS, &head)?,
                (Some(prefix), None) => {
                    let mut all = head.to_vec();
                    all.push(&prefix);
                    client.query(GROUP_IDS_FILTERED, &all)?
                }
                (None, Some(code)) => {
                    let mut all = head.to_vec();
                    all.push(code);
                    client.query(ERROR_IDS, &all)?
                }
                (Some(prefix), Some(code)) => {
                    let mut all = head.to_vec();
                    all.push(code);
                    all.push(&prefix);
                    client.query(ERROR_IDS_FILTERED, &all)?
                }
            }
        }
    };
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// How many calls `query` matches, by `plan` (made from `counts`, read in
/// the same snapshot), counted up to `TOTAL_CAP`.
pub(super) fn total(
    client: &mut impl GenericClient,
    query: &ListQuery,
    plan: &Plan,
    counts: &Counts,
) -> Result<Total, tokio_postgres::Error> {
    if let Some(calls) = plan.total_from_counts(query, counts) {
        return Ok(Total { calls, exact: true });
    }
    let left = TOTAL_CAP as i64 + 1;
    let found: i64 = match plan {
        Plan::Ordered(o) if o.whole_table => {
            let (lower, upper) = (&o.bounds.lower, &o.bounds.upper);
            client.query_one(ALL_TOTAL, &[lower, upper, &left])?.get(0)
        }
        Plan::Ordered(o) => {
            let (lower, upper) = (&o.bounds.lower, &o.bounds.upper);
            let tenants: Vec<&str> = o.groups.iter().map(|g| g.0.as_str()).collect();
            let tools: Vec<&str> = o.groups.iter().map(|g| g.1.as_str()).collect();
            let statuses: Vec<&str> = o.groups.iter().map(|g| g.2.as_str()).collect();
            match &o.error_code {
                None => client.query_one(
                    GROUP_TOTAL,
                    &[&tenants, &tools, &statuses, lower, upper, &left],
                )?,
                Some(code) => client.query_one(
                    ERROR_TOTAL,
                    &[&tenants, &tools, &statuses, lower, upper, &left, code],
                )?,
            }
            .get(0)
        }
        Plan::ByKeyPrefix {
            tenants,
            prefix,
            upper,
            ..
        } if upper.is_none() || prefix_candidates(client, tenants, prefix, upper)? => {
            let statuses = (!query.statuses.is_empty()).then_some(&query.statuses);
            let bounds = query.id_bounds();
            let params: [&(dyn ToSql + Sync); 9] = [
                tenants,
                prefix,
                upper,
                &left,
                &query.tool,
                &query.error_code,
                &statuses,
                &bounds.lower,
                &bounds.upper,
            ];
            client.query_one(PREFIX_TOTAL, &params)?.get(0)
        }
        _ => {
            let mut all = query.clone();
            all.limit = TOTAL_CAP;
            all.page(rows(client, &all, plan)?).calls.len() as i64
        }
    };
    Ok(Total {
        calls: found.min(TOTAL_CAP as i64),
        exact: found <= TOTAL_CAP as i64,
    })
}

/// Whether a key prefix matches more keys than are read one by one.
fn prefix_candidates(
    client: &mut impl GenericClient,
    tenants: &[String],
    prefix: &str,
    upper: &Option<String>,
) -> Result<bool, tokio_postgres::Error> {
    let cap = PREFIX_CANDIDATES as i64 + 1;
    let found: i64 = client
        .query_one(PREFIX_COUNT, &[&tenants, &prefix, upper, &cap])?
        .get(0);
    Ok(found > PREFIX_CANDIDATES as i64)
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
