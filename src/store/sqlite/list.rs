//! The list's statements on SQLite: each access path of `store::list`'s
//! `Plan`, and the rows of a page without their `args` and `result`. They
//! run on a connection they are given, inside the caller's one read
//! transaction, after the counts the plan was made from.
//!
//! Every statement here is driven by an index: `idx_calls_status` (status,
//! tenant, tool, call_id), `idx_calls_error` (tenant, tool, status,
//! error_code, call_id: only calls with an error), the primary key, `UNIQUE
//! (tenant, idem_key)`, or `business_keys`' `idx_business_keys_key`;
//! `docs/performance.md` shows their plans. A filter's total (`total`)
//! follows the same plan, counting index entries up to `TOTAL_CAP`. This
//! module never writes, and never reads a group or a tenant the plan did
//! not name.

use super::super::counts::Counts;
use super::super::ids::effect_id_for;
use super::super::list::{
    IdBounds, ListQuery, Ordered, Plan, Residual, Total, PREFIX_CANDIDATES, TOTAL_CAP,
};
use super::super::model::Call;
use super::steps::{call_from_row, CALL_COLUMNS};
use rusqlite::{params, Connection, Params, ToSql};

/// Newest first within one group of `idx_calls_status`, between two ids.
pub const GROUP_IDS: &str = "SELECT call_id FROM calls
  WHERE tenant = ?1 AND tool = ?2 AND status = ?3 AND call_id >= ?4 AND call_id < ?5
  ORDER BY call_id DESC LIMIT ?6";

/// `GROUP_IDS` with a key prefix checked on the row each id leads to
/// (`+idem_key`: the range must not steer the plan to the key index, whose
/// order is not the list's); `?8` is NULL when the prefix has no end.
pub const GROUP_IDS_FILTERED: &str = "SELECT call_id FROM calls
  WHERE tenant = ?1 AND tool = ?2 AND status = ?3 AND call_id >= ?4 AND call_id < ?5
    AND +idem_key >= ?7 AND (?8 IS NULL OR +idem_key < ?8)
  ORDER BY call_id DESC LIMIT ?6";

/// Migration 15: `calls.error_code`, the code of the call's error as a
/// column computed from `error_json` (virtual: nothing more is written per
/// call), and the list's index of it — partial, so only the calls that hold
/// an error (a failure, a retry waiting, a cancel) have an entry, and a
/// call's create, claim and success write none.
pub(super) const ERROR_COLUMN: &str =
    "ALTER TABLE calls ADD COLUMN error_code TEXT GENERATED ALWAYS AS (json_extract(error_json, '$.code')) VIRTUAL";
pub(super) const ERROR_INDEX: &str = "CREATE INDEX IF NOT EXISTS idx_calls_error
    ON calls(tenant, tool, status, error_code, call_id) WHERE error_code IS NOT NULL";

/// Newest first within one group's calls with one error code (`?7`), by
/// `idx_calls_error`, between two ids.
pub const ERROR_IDS: &str = "SELECT call_id FROM calls
  WHERE tenant = ?1 AND tool = ?2 AND status = ?3 AND error_code = ?7
    AND call_id >= ?4 AND call_id < ?5
  ORDER BY call_id DESC LIMIT ?6";

/// `ERROR_IDS` with a key prefix checked on each row (`?8`, `?9` as in
/// `GROUP_IDS_FILTERED`'s `?7`, `?8`).
pub const ERROR_IDS_FILTERED: &str = "SELECT call_id FROM calls
  WHERE tenant = ?1 AND tool = ?2 AND status = ?3 AND error_code = ?7
    AND call_id >= ?4 AND call_id < ?5
    AND +idem_key >= ?8 AND (?9 IS NULL OR +idem_key < ?9)
  ORDER BY call_id DESC LIMIT ?6";

/// How many of one group's calls lie between two ids, up to `?6`.
pub const GROUP_COUNT: &str = "SELECT count(*) FROM (
    SELECT 1 FROM calls
     WHERE tenant = ?1 AND tool = ?2 AND status = ?3 AND call_id >= ?4 AND call_id < ?5
     LIMIT ?6)";

/// How many of one group's calls with one error code (`?7`) lie between
/// two ids, up to `?6`.
pub const ERROR_COUNT: &str = "SELECT count(*) FROM (
    SELECT 1 FROM calls
     WHERE tenant = ?1 AND tool = ?2 AND status = ?3 AND error_code = ?7
       AND call_id >= ?4 AND call_id < ?5
     LIMIT ?6)";

/// How many calls lie between two ids, up to `?3`.
pub const ALL_COUNT: &str = "SELECT count(*) FROM (
    SELECT 1 FROM calls WHERE call_id >= ?1 AND call_id < ?2 LIMIT ?3)";

/// How many of one tenant's keys starting with a prefix (`[?2, ?3)`, `?3`
/// NULL: no end) belong to calls the other filters admit (each NULL when
/// not given; `?7` the statuses as a JSON array), up to `?4`: a prefix too
/// common to read key by key, counted on its range of `UNIQUE (tenant,
/// idem_key)`.
pub const PREFIX_TOTAL: &str = "SELECT count(*) FROM (
    SELECT 1 FROM calls
     WHERE tenant = ?1 AND idem_key >= ?2 AND (?3 IS NULL OR idem_key < ?3)
       AND (?5 IS NULL OR tool = ?5) AND (?6 IS NULL OR error_code = ?6)
       AND (?7 IS NULL OR status IN (SELECT value FROM json_each(?7)))
       AND call_id >= ?8 AND call_id < ?9
     LIMIT ?4)";

/// Newest first over every call, by the primary key, between two ids.
pub const ALL_IDS: &str = "SELECT call_id FROM calls
  WHERE call_id >= ?1 AND call_id < ?2
  ORDER BY call_id DESC LIMIT ?3";

/// `ALL_IDS` with a key prefix checked on each row.
pub const ALL_IDS_FILTERED: &str = "SELECT call_id FROM calls
  WHERE call_id >= ?1 AND call_id < ?2
    AND +idem_key >= ?4 AND (?5 IS NULL OR +idem_key < ?5)
  ORDER BY call_id DESC LIMIT ?3";

/// How many keys start with the prefix in one tenant, counted up to a limit
/// on `UNIQUE (tenant, idem_key)` alone.
pub const PREFIX_COUNT: &str = "SELECT count(*) FROM (
    SELECT 1 FROM calls WHERE tenant = ?1 AND idem_key >= ?2 AND idem_key < ?3 LIMIT ?4)";

/// The query's page rows (at most `limit` + 1, in any order; `page` sorts,
/// checks and cuts them), following `plan`.
pub(super) fn rows(
    conn: &Connection,
    query: &ListQuery,
    plan: &Plan,
) -> rusqlite::Result<Vec<Call>> {
    match plan {
        Plan::Empty => Ok(Vec::new()),
        Plan::ByEffect { call_id, effect_id } => summaries(
            conn,
            "call_id = ?1 AND coalesce(effect_id, ?2) = ?3",
            params![call_id, effect_id_for(call_id), effect_id],
        ),
        Plan::ByKey { tenants, key } => each(tenants, |tenant| {
            summaries(conn, "tenant = ?1 AND idem_key = ?2", params![tenant, key])
        }),
        Plan::ByBusinessKey { groups, bkey } => each(groups, |(tenant, tool)| {
            summaries(
                conn,
                "call_id IN (SELECT call_id FROM business_keys
                              WHERE tenant = ?1 AND tool = ?2 AND bkey = ?3)",
                params![tenant, tool, bkey],
            )
        }),
        Plan::ByKeyPrefix {
            tenants,
            prefix,
            upper: Some(upper),
            fallback,
        } => {
            if prefix_matches(conn, tenants, prefix, upper)? > PREFIX_CANDIDATES {
                return rows(conn, query, fallback);
            }
            each(tenants, |tenant| {
                summaries(
                    conn,
                    "tenant = ?1 AND idem_key >= ?2 AND idem_key < ?3",
                    params![tenant, prefix, upper],
                )
            })
        }
        Plan::ByKeyPrefix { fallback, .. } => rows(conn, query, fallback),
        Plan::Ordered(ordered) => ordered.read(
            query,
            |o, filtered| ordered_ids(conn, o, filtered),
            |ids| each(ids, |id| summaries(conn, "call_id = ?1", params![id])),
        ),
    }
}

/// How many calls `query` matches, by `plan` (made from `counts`, read in
/// the same snapshot), counted up to `TOTAL_CAP`.
pub(super) fn total(
    conn: &Connection,
    query: &ListQuery,
    plan: &Plan,
    counts: &Counts,
) -> rusqlite::Result<Total> {
    if let Some(calls) = plan.total_from_counts(query, counts) {
        return Ok(Total { calls, exact: true });
    }
    let found = match plan {
        Plan::Ordered(ordered) => ordered_total(conn, ordered)?,
        Plan::ByKeyPrefix {
            tenants,
            prefix,
            upper,
            ..
        } if upper.is_none()
            || prefix_matches(conn, tenants, prefix, upper.as_deref().unwrap_or(""))?
                > PREFIX_CANDIDATES =>
        {
            prefix_total(conn, query, tenants, prefix, upper.as_deref())?
        }
        _ => {
            let mut all = query.clone();
            all.limit = TOTAL_CAP;
            all.page(rows(conn, &all, plan)?).calls.len()
        }
    };
    Ok(Total {
        calls: found.min(TOTAL_CAP) as i64,
        exact: found <= TOTAL_CAP,
    })
}

/// The ordered plan's calls, group by group, up to one past `TOTAL_CAP`.
fn ordered_total(conn: &Connection, ordered: &Ordered) -> rusqlite::Result<usize> {
    let (lower, upper) = (&ordered.bounds.lower, &ordered.bounds.upper);
    let mut found = 0;
    let left = |found: usize| (TOTAL_CAP + 1 - found) as i64;
    if ordered.whole_table {
        let n: i64 = conn
            .prepare_cached(ALL_COUNT)?
            .query_row(params![lower, upper, left(0)], |r| r.get(0))?;
        return Ok(n as usize);
    }
    for (tenant, tool, status) in &ordered.groups {
        let n: i64 = match &ordered.error_code {
            None => conn.prepare_cached(GROUP_COUNT)?.query_row(
                params![tenant, tool, status, lower, upper, left(found)],
                |r| r.get(0),
            )?,
            Some(code) => conn.prepare_cached(ERROR_COUNT)?.query_row(
                params![tenant, tool, status, lower, upper, left(found), code],
                |r| r.get(0),
            )?,
        };
        found += n as usize;
        if found > TOTAL_CAP {
            break;
        }
    }
    Ok(found)
}

/// A common key prefix's calls, tenant by tenant, up to one past
/// `TOTAL_CAP`, every other filter checked on the rows.
fn prefix_total(
    conn: &Connection,
    query: &ListQuery,
    tenants: &[String],
    prefix: &str,
    upper: Option<&str>,
) -> rusqlite::Result<usize> {
    let statuses = (!query.statuses.is_empty())
        .then(|| serde_json::Value::from(query.statuses.clone()).to_string());
    let bounds = query.id_bounds();
    let mut found = 0;
    for tenant in tenants {
        let left = (TOTAL_CAP + 1 - found) as i64;
        let n: i64 = conn.prepare_cached(PREFIX_TOTAL)?.query_row(
            params![
                tenant,
                prefix,
                upper,
                left,
                query.tool,
                query.error_code,
                statuses,
                bounds.lower,
                bounds.upper
            ],
            |r| r.get(0),
        )?;
        found += n as usize;
        if found > TOTAL_CAP {
            break;
        }
    }
    Ok(found)
}

/// `f` for each item, its rows together.
fn each<T>(
    items: &[T],
    f: impl Fn(&T) -> rusqlite::Result<Vec<Call>>,
) -> rusqlite::Result<Vec<Call>> {
    let mut all = Vec::new();
    for item in items {
        all.extend(f(item)?);
    }
    Ok(all)
}

/// Keys starting with the prefix in these tenants, counted no further than
/// one past `PREFIX_CANDIDATES`.
fn prefix_matches(
    conn: &Connection,
    tenants: &[String],
    prefix: &str,
    upper: &str,
) -> rusqlite::Result<usize> {
    let mut stmt = conn.prepare_cached(PREFIX_COUNT)?;
    let mut found = 0;
    for tenant in tenants {
        let left = (PREFIX_CANDIDATES + 1 - found) as i64;
        let n: i64 = stmt.query_row(params![tenant, prefix, upper, left], |r| r.get(0))?;
        found += n as usize;
        if found > PREFIX_CANDIDATES {
            break;
        }
    }
    Ok(found)
}

/// The newest `take` ids of the ordered plan: each group read newest first
/// from the top of what is still wanted — once `take` ids are in hand, a
/// group is read only above the lowest of them, so most groups yield a few
/// entries or none.
fn ordered_ids(
    conn: &Connection,
    ordered: &Ordered,
    filtered: bool,
) -> rusqlite::Result<Vec<String>> {
    let mut best: Vec<String> = Vec::new();
    let groups: Vec<Option<&(String, String, String)>> = if ordered.whole_table {
        vec![None]
    } else {
        ordered.groups.iter().map(Some).collect()
    };
    let residual = filtered.then_some(&ordered.residual);
    for group in groups {
        let lower = match best.get(ordered.take - 1) {
            Some(lowest) if *lowest > ordered.bounds.lower => lowest.clone(),
            _ => ordered.bounds.lower.clone(),
        };
        let bounds = IdBounds {
            lower,
            upper: ordered.bounds.upper.clone(),
        };
        let code = ordered.error_code.as_ref();
        best.extend(ids_of(conn, group, code, &bounds, residual, ordered.take)?);
        best.sort_unstable_by(|a, b| b.cmp(a));
        best.dedup();
        best.truncate(ordered.take);
    }
    Ok(best)
}

/// Up to `take` ids of one group (or of the whole table), newest first,
/// only those with error code `code` when one is given (from the error
/// index), the key prefix checked on each row when `residual` holds one.
fn ids_of(
    conn: &Connection,
    group: Option<&(String, String, String)>,
    code: Option<&String>,
    bounds: &IdBounds,
    residual: Option<&Residual>,
    take: usize,
) -> rusqlite::Result<Vec<String>> {
    let take = take as i64;
    let (lower, upper) = (&bounds.lower, &bounds.upper);
    let rows = |sql: &str, values: &[&dyn ToSql]| -> rusqlite::Result<Vec<String>> {
        conn.prepare_cached(sql)?
            .query_map(values, |r| r.get(0))?
            .collect()
    };
    match (group, residual.and_then(|r| r.key_prefix.as_ref()), code) {
        (Some((tenant, tool, status)), None, None) => {
            rows(GROUP_IDS, &[tenant, tool, status, lower, upper, &take])
        }
        (Some((tenant, tool, status)), Some((prefix, end)), None) => rows(
            GROUP_IDS_FILTERED,
            &[tenant, tool, status, lower, upper, &take, prefix, end],
        ),
        (Some((tenant, tool, status)), None, Some(code)) => rows(
            ERROR_IDS,
            &[tenant, tool, status, lower, upper, &take, code],
        ),
        (Some((tenant, tool, status)), Some((prefix, end)), Some(code)) => rows(
            ERROR_IDS_FILTERED,
            &[tenant, tool, status, lower, upper, &take, code, prefix, end],
        ),
        (None, None, _) => rows(ALL_IDS, &[lower, upper, &take]),
        (None, Some((prefix, end)), _) => {
            rows(ALL_IDS_FILTERED, &[lower, upper, &take, prefix, end])
        }
    }
}

/// The rows `condition` selects, without `args` and `result`.
fn summaries(
    conn: &Connection,
    condition: &str,
    params: impl Params,
) -> rusqlite::Result<Vec<Call>> {
    conn.prepare_cached(&format!(
        "SELECT {} FROM calls WHERE {condition}",
        summary_columns()
    ))?
    .query_map(params, call_from_row)?
    .collect()
}

/// `CALL_COLUMNS` with `args_json`, `result_json` and `progress_json` read
/// as empty: a page is a list of summaries, and a call's args may be 64 KiB.
fn summary_columns() -> String {
    CALL_COLUMNS
        .replace("args_json", "'' AS args_json")
        .replace("result_json", "NULL AS result_json")
        .replace("progress_json", "NULL AS progress_json")
}
