//! The list's statements on SQLite: each access path of `store::list`'s
//! `Plan`, and the rows of a page without their `args` and `result`. They
//! run on a connection they are given, inside the caller's one read
//! transaction, after the counts the plan was made from.
//!
//! Every statement here is driven by an index: `idx_calls_status` (status,
//! tenant, tool, call_id), the primary key, `UNIQUE (tenant, idem_key)`, or
//! `business_keys`' `idx_business_keys_key`; `docs/performance.md` shows
//! their plans. This module never writes, and never reads a group or a
//! tenant the plan did not name.

use super::super::ids::effect_id_for;
use super::super::list::{IdBounds, ListQuery, Ordered, Plan, Residual, PREFIX_CANDIDATES};
use super::super::model::Call;
use super::sql::{call_from_row, CALL_COLUMNS};
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
        best.extend(ids_of(conn, group, &bounds, residual, ordered.take)?);
        best.sort_unstable_by(|a, b| b.cmp(a));
        best.dedup();
        best.truncate(ordered.take);
    }
    Ok(best)
}

/// Up to `take` ids of one group (or of the whole table), newest first,
/// the key prefix checked on each row when `residual` holds one.
fn ids_of(
    conn: &Connection,
    group: Option<&(String, String, String)>,
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
    match (group, residual.and_then(|r| r.key_prefix.as_ref())) {
        (Some((tenant, tool, status)), None) => {
            rows(GROUP_IDS, &[tenant, tool, status, lower, upper, &take])
        }
        (Some((tenant, tool, status)), Some((prefix, end))) => rows(
            GROUP_IDS_FILTERED,
            &[tenant, tool, status, lower, upper, &take, prefix, end],
        ),
        (None, None) => rows(ALL_IDS, &[lower, upper, &take]),
        (None, Some((prefix, end))) => rows(ALL_IDS_FILTERED, &[lower, upper, &take, prefix, end]),
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
