//! Listing calls, newest first, a page at a time: the query (`ListQuery`),
//! and the plan both backends follow to answer it from indexes, never by
//! reading `calls` in full.
//!
//! Call ids grow with time (`ids::new_call_id`), so newest first is
//! `call_id DESC`, a page goes on below the last id it showed (keyset, no
//! `OFFSET`: calls created meanwhile sort above it and never shift a later
//! page), and a creation time is a bound on ids: `created_after` and
//! `created_before` select by the millisecond an id begins with, the
//! creating process's clock when it made the call (on SQLite the same clock,
//! and moment, as `created_at`; on PostgreSQL `created_at` is the
//! database's clock), exact to the millisecond and read from the index alone.
//!
//! How a query is answered (`Plan`), by its most selective filter:
//! - `effect_id`: the call id inside it, by primary key — one row at most;
//! - `key`: `UNIQUE (tenant, idem_key)`, in each tenant of the scope;
//! - `business_key`: `business_keys`' `(tenant, tool, bkey, …)` index, in
//!   each (tenant, tool) of the scope;
//! - `key_prefix`, while it matches at most `PREFIX_CANDIDATES` keys: a
//!   range of `UNIQUE (tenant, idem_key)`;
//! - anything else (no filter, `status`, `tool`, `error_code`, times, a
//!   prefix matching many keys): `(tenant, tool, status, call_id)` read
//!   backwards in every group the count table says holds calls and the
//!   filters admit, at most a page from each, merged — or, for every tenant
//!   with neither `tool`, `status` nor `error_code`, the primary key
//!   backwards. With `error_code` each group is read from the error index
//!   instead, `(tenant, tool, status, error_code, call_id)` (its entries are
//!   only the calls that hold an error), so a code found on few of a
//!   group's million calls costs a seek, not a scan. A prefix that matches many keys is
//!   checked on the page's rows, a page of ids at a time from the index alone
//!   (`Ordered::read`), for a few rounds; if it still has not filled a page
//!   (it matches only some), the database checks it on every row it reads.
//!
//! The first four read a handful of rows and are then sorted; the last reads
//! at most a page per group. Every row a plan returns is checked against
//! the whole query again (`ListQuery::admits`), so a plan may only ever
//! read too much, never show what the query excludes.
//!
//! This file speaks no SQL (each wing's `list.rs` does) and never widens a
//! query's scope: a tenant's query reads only that tenant's groups.

use super::counts::Counts;
use super::ids::{call_id_of_effect, MILLIS_HEX};
use super::model::Call;

/// The most keys a `key_prefix` is read by its range for; past it, the
/// ordered plan with the prefix as a filter answers faster (the prefix
/// matches many calls, so a page of them is near the top).
#[cfg(not(test))]
pub(in crate::store) const PREFIX_CANDIDATES: usize = 1_000;
/// Small in the unit tests, so that they take both plans with a few calls.
#[cfg(test)]
pub(in crate::store) const PREFIX_CANDIDATES: usize = 8;

/// Rounds of ids read from the index alone and checked on their rows,
/// before a filter the index cannot apply is left to the database.
const UNFILTERED_ROUNDS: usize = 3;

/// How far a total is counted (`ListQuery::total`): past it, the answer is
/// "at least this many". A bulk job acts on at most as many calls
/// (`bulk_job::MAX_BULK_CALLS` is this).
pub const TOTAL_CAP: usize = 100_000;

/// What to list. Every filter given must hold (`AND`); `statuses`, when not
/// empty, is any of them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListQuery {
    /// One tenant's calls, or every tenant's (`None`, admins only: the API
    /// decides who may ask).
    pub tenant: Option<String>,
    pub statuses: Vec<String>,
    pub tool: Option<String>,
    /// The exact idempotency key.
    pub key: Option<String>,
    pub key_prefix: Option<String>,
    /// The business key as `business_keys` stores it (canonical JSON).
    pub business_key: Option<String>,
    pub effect_id: Option<String>,
    /// The call's error code (`error.code`): its last failure's, or
    /// `cancelled`.
    pub error_code: Option<String>,
    /// Created at or after this (seconds), by the call id's millisecond.
    pub created_after: Option<f64>,
    /// Created before this (seconds), by the call id's millisecond.
    pub created_before: Option<f64>,
    /// Only calls whose id sorts below this one: the previous page's last.
    pub before_call_id: Option<String>,
    /// Calls per page.
    pub limit: usize,
}

/// How many calls a query matches, counted up to a cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Total {
    pub calls: i64,
    /// `false`: the count stopped at its cap; there may be more.
    pub exact: bool,
}

/// One page: at most `limit` calls, newest first, without `args` and
/// `result` (`args_json` is empty, `result` is `None`: a page carries
/// neither), and the id to continue below when there are more.
#[derive(Debug, Clone, PartialEq)]
pub struct ListPage {
    pub calls: Vec<Call>,
    pub next: Option<String>,
}

/// How a wing answers a query.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::store) enum Plan {
    /// Nothing can match (no group holds such calls, or a malformed effect id).
    Empty,
    /// The call whose id the effect id holds, if its effect id is exactly this.
    ByEffect { call_id: String, effect_id: String },
    /// The key's call in each of these tenants.
    ByKey { tenants: Vec<String>, key: String },
    /// The business key's calls in each (tenant, tool).
    ByBusinessKey {
        groups: Vec<(String, String)>,
        bkey: String,
    },
    /// Keys in `[prefix, upper)` in each tenant — when they are at most
    /// `PREFIX_CANDIDATES`; otherwise `fallback`.
    ByKeyPrefix {
        tenants: Vec<String>,
        prefix: String,
        upper: Option<String>,
        fallback: Box<Plan>,
    },
    /// Newest first in each group, merged.
    Ordered(Ordered),
}

/// The ordered plan: where to read, between which ids, with what filter.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::store) struct Ordered {
    /// (tenant, tool, status) groups of `(tenant, tool, status, call_id)`;
    /// empty with `whole_table`: the primary key.
    pub groups: Vec<(String, String, String)>,
    pub whole_table: bool,
    /// Read each group from the error index, only the calls with this
    /// error code (never with `whole_table`).
    pub error_code: Option<String>,
    pub bounds: IdBounds,
    /// Filters the index does not hold, checked on each row it reads.
    pub residual: Residual,
    /// Ids to read: a page and one more, to know whether there is a next.
    pub take: usize,
}

impl Ordered {
    /// The rows of this plan's page, read through a wing's two statements:
    /// `ids` (the newest `take` ids within `bounds`, the residual applied by
    /// the database or not) and `rows` (those ids' rows). With a residual,
    /// first `UNFILTERED_ROUNDS` pages of ids from the index alone, each
    /// checked on its rows (`admits`) and continued below its lowest id — a
    /// prefix most keys start with fills a page at once, from the index —
    /// then, if the page is still not full, the database applies it to
    /// every row it reads from there on.
    pub(in crate::store) fn read<E>(
        &self,
        query: &ListQuery,
        mut ids: impl FnMut(&Ordered, bool) -> Result<Vec<String>, E>,
        mut rows: impl FnMut(&[String]) -> Result<Vec<Call>, E>,
    ) -> Result<Vec<Call>, E> {
        if self.residual.is_empty() {
            return rows(&ids(self, false)?);
        }
        let mut admitted = Vec::new();
        let mut rest = self.clone();
        for _ in 0..UNFILTERED_ROUNDS {
            let found = ids(&rest, false)?;
            let exhausted = found.len() < rest.take;
            admitted.extend(rows(&found)?.into_iter().filter(|c| query.admits(c)));
            match found.last() {
                Some(lowest) if admitted.len() < self.take && !exhausted => {
                    rest.bounds.upper = lowest.clone();
                }
                _ => return Ok(admitted),
            }
        }
        rest.take = self.take - admitted.len();
        admitted.extend(rows(&ids(&rest, true)?)?);
        Ok(admitted)
    }
}

/// Ids `>= lower` and `< upper`.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::store) struct IdBounds {
    pub lower: String,
    pub upper: String,
}

/// What the ordered plan checks on each row beyond its index: a key
/// prefix, and its range's exclusive upper end (`None`: no end).
#[derive(Debug, Clone, Default, PartialEq)]
pub(in crate::store) struct Residual {
    pub key_prefix: Option<(String, Option<String>)>,
}

impl Residual {
    pub(in crate::store) fn is_empty(&self) -> bool {
        self.key_prefix.is_none()
    }
}

impl ListQuery {
    /// The plan for this query, given the scope's counts (read in the same
    /// snapshot as the rows will be, so a group with no calls there has
    /// none to read).
    pub(in crate::store) fn plan(&self, counts: &Counts) -> Plan {
        if let Some(effect_id) = &self.effect_id {
            return match call_id_of_effect(effect_id) {
                Some(call_id) => Plan::ByEffect {
                    call_id,
                    effect_id: effect_id.clone(),
                },
                None => Plan::Empty,
            };
        }
        let tenants: Vec<String> = counts.tenants().into_iter().map(String::from).collect();
        if let Some(key) = &self.key {
            return Plan::ByKey {
                tenants,
                key: key.clone(),
            };
        }
        if let Some(bkey) = &self.business_key {
            let groups = counts
                .tenant_tools()
                .into_iter()
                .filter(|(_, tool)| self.tool.as_deref().is_none_or(|t| t == *tool))
                .map(|(tenant, tool)| (tenant.to_string(), tool.to_string()))
                .collect();
            return Plan::ByBusinessKey {
                groups,
                bkey: bkey.clone(),
            };
        }
        let ordered = self.ordered(counts);
        match &self.key_prefix {
            Some(prefix) => Plan::ByKeyPrefix {
                tenants,
                prefix: prefix.clone(),
                upper: prefix_upper_bound(prefix),
                fallback: Box::new(ordered),
            },
            None => ordered,
        }
    }

    /// The ordered plan: every group the filters admit, or the primary key.
    fn ordered(&self, counts: &Counts) -> Plan {
        let whole_table =
            self.tool.is_none() && self.statuses.is_empty() && self.error_code.is_none();
        let groups: Vec<(String, String, String)> = counts
            .groups()
            .into_iter()
            .filter(|(_, tool, status)| {
                self.tool.as_deref().is_none_or(|t| t == *tool)
                    && (self.statuses.is_empty() || self.statuses.iter().any(|s| s == status))
                    && !(self.error_code.is_some() && never_has_an_error(status))
            })
            .map(|(tenant, tool, status)| (tenant.into(), tool.into(), status.into()))
            .collect();
        if groups.is_empty() {
            return Plan::Empty;
        }
        Plan::Ordered(Ordered {
            // For every tenant, one read of the primary key beats a merge.
            groups: if whole_table && self.tenant.is_none() {
                Vec::new()
            } else {
                groups
            },
            whole_table: whole_table && self.tenant.is_none(),
            error_code: self.error_code.clone(),
            bounds: self.id_bounds(),
            residual: Residual {
                key_prefix: self
                    .key_prefix
                    .as_ref()
                    .map(|p| (p.clone(), prefix_upper_bound(p))),
            },
            take: self.limit + 1,
        })
    }

    /// The ids a page may hold: below the cursor, and within the creation
    /// times (an id's first 11 hex digits are its millisecond).
    pub(in crate::store) fn id_bounds(&self) -> IdBounds {
        let lower = self
            .created_after
            .map(|t| id_at_millis(millis(t)))
            .unwrap_or_default();
        let mut upper = self
            .created_before
            .map(|t| id_at_millis(millis(t)))
            .unwrap_or_else(|| ABOVE_EVERY_CALL_ID.to_string());
        if let Some(before) = &self.before_call_id {
            if *before < upper {
                upper = before.clone();
            }
        }
        IdBounds { lower, upper }
    }

    /// Whether `call` belongs on this query's pages: in its scope, every
    /// filter holding, below its cursor.
    pub(in crate::store) fn admits(&self, call: &Call) -> bool {
        let some_is = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        some_is(&self.tenant, &call.tenant)
            && some_is(&self.tool, &call.tool)
            && some_is(&self.key, &call.idem_key)
            && some_is(&self.effect_id, &call.effect_id)
            && self
                .error_code
                .as_deref()
                .is_none_or(|code| call.error_code() == Some(code))
            && (self.statuses.is_empty() || self.statuses.iter().any(|s| s == call.status.as_str()))
            && self
                .key_prefix
                .as_deref()
                .is_none_or(|p| call.idem_key.starts_with(p))
            && self
                .created_after
                .is_none_or(|t| id_millis(&call.call_id).is_some_and(|ms| ms >= millis(t)))
            && self
                .created_before
                .is_none_or(|t| id_millis(&call.call_id).is_some_and(|ms| ms < millis(t)))
            && self
                .before_call_id
                .as_deref()
                .is_none_or(|before| call.call_id.as_str() < before)
    }

    /// `rows` (any order, possibly more than a page, possibly some the
    /// query excludes) as the page: admitted, newest first, `limit` of
    /// them, and where the next page starts.
    pub(in crate::store) fn page(&self, mut rows: Vec<Call>) -> ListPage {
        rows.retain(|c| self.admits(c));
        rows.sort_by(|a, b| b.call_id.cmp(&a.call_id));
        rows.dedup_by(|a, b| a.call_id == b.call_id);
        let more = rows.len() > self.limit;
        rows.truncate(self.limit);
        let next = more
            .then(|| rows.last().map(|c| c.call_id.clone()))
            .flatten();
        ListPage { calls: rows, next }
    }
}

impl Plan {
    /// The total of `query` straight from the count table, when its plan
    /// reads whole groups (no times, no cursor, no key prefix, no error
    /// code): the sum of the groups' calls, exact however many.
    pub(in crate::store) fn total_from_counts(
        &self,
        query: &ListQuery,
        counts: &Counts,
    ) -> Option<i64> {
        let Plan::Ordered(o) = self else {
            return None;
        };
        let whole = query.created_after.is_none()
            && query.created_before.is_none()
            && query.before_call_id.is_none()
            && o.residual.is_empty()
            && o.error_code.is_none();
        if !whole {
            return None;
        }
        let admitted = |(tenant, tool, status): (&str, &str, &str)| {
            query.tenant.as_deref().is_none_or(|t| t == tenant)
                && query.tool.as_deref().is_none_or(|t| t == tool)
                && (query.statuses.is_empty() || query.statuses.iter().any(|s| s == status))
        };
        Some(
            counts
                .rows
                .iter()
                .filter(|r| admitted((&r.tenant, &r.tool, &r.status)))
                .map(|r| r.calls)
                .sum(),
        )
    }
}

/// A group of this status holds no call with an error: a success clears
/// the error of the attempts before it (`finish_fenced`). Its groups — the
/// largest, usually — are left out of a query by error code, so no backend
/// has to prove each of their calls has no code.
fn never_has_an_error(status: &str) -> bool {
    status == crate::status::Status::Succeeded.as_str()
}

/// Greater than every call id (`c_` and 16 hex digits, in any collation:
/// a letter past `f`).
pub(in crate::store) const ABOVE_EVERY_CALL_ID: &str = "c_g";

/// Milliseconds since the epoch, as a call id counts them.
/// The millisecond after `t`'s: a `created_before` bound that admits every
/// call of `t`'s millisecond (bounds are read to the millisecond).
pub fn next_millisecond(t: f64) -> f64 {
    (millis(t) + 1) as f64 / 1000.0
}

fn millis(seconds: f64) -> i64 {
    // To the microsecond first: `…:02.642Z` is 1796528982.642 only to
    // within a ulp, and a thousand times it may fall just below …642.
    ((seconds * 1e6).round() as i64).div_euclid(1000)
}

/// The millisecond a call id begins with.
fn id_millis(call_id: &str) -> Option<i64> {
    let hex = call_id.strip_prefix("c_")?.get(..MILLIS_HEX)?;
    i64::from_str_radix(hex, 16).ok()
}

/// The smallest call id of millisecond `ms` (clamped to what ids can say).
fn id_at_millis(ms: i64) -> String {
    let ms = ms.clamp(0, (1_i64 << (4 * MILLIS_HEX)) - 1);
    format!("c_{ms:0width$x}00000", width = MILLIS_HEX)
}

/// The least string above every string that starts with `prefix`: the
/// prefix with its last character raised by one (dropping characters that
/// cannot be raised). Byte order is code point order in UTF-8, so
/// `[prefix, upper)` is exactly the strings starting with `prefix`. `None`
/// when nothing is above them.
pub(in crate::store) fn prefix_upper_bound(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let next = (last as u32 + 1..=char::MAX as u32).find_map(char::from_u32);
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::counts::CountRow;

    fn counts(groups: &[(&str, &str, &str)]) -> Counts {
        Counts {
            rows: groups
                .iter()
                .map(|(tenant, tool, status)| CountRow {
                    tenant: tenant.to_string(),
                    tool: tool.to_string(),
                    status: status.to_string(),
                    attempt: 1,
                    calls: 1,
                    inserted: 1,
                    entered: 0,
                })
                .collect(),
            ..Counts::default()
        }
    }

    fn query() -> ListQuery {
        ListQuery {
            tenant: Some("a".into()),
            limit: 50,
            ..ListQuery::default()
        }
    }

    /// A prefix's range holds exactly the strings that start with it.
    #[test]
    fn a_prefix_range_is_exactly_its_strings() {
        assert_eq!(prefix_upper_bound("order-4").as_deref(), Some("order-5"));
        assert_eq!(prefix_upper_bound("a~").as_deref(), Some("a\u{7f}"));
        assert_eq!(prefix_upper_bound("\u{10FFFF}"), None);
        assert_eq!(
            prefix_upper_bound("x\u{D7FF}").as_deref(),
            Some("x\u{E000}")
        );
        let upper = prefix_upper_bound("ab").unwrap();
        for (s, inside) in [
            ("ab", true),
            ("abz", true),
            ("ab\u{10FFFF}", true),
            ("ac", false),
            ("aa", false),
            ("a", false),
        ] {
            assert_eq!(("ab" <= s && s < upper.as_str()), inside, "{s:?}");
        }
    }

    /// Times become id bounds (a fraction of a second read exactly); the
    /// cursor narrows them.
    #[test]
    fn times_and_the_cursor_bound_the_ids() {
        let mut q = query();
        q.created_after = Some(1.0);
        q.created_before = Some(2.5);
        let bounds = q.id_bounds();
        assert_eq!(bounds.lower, format!("c_{:011x}00000", 1000));
        assert_eq!(bounds.upper, format!("c_{:011x}00000", 2500));
        assert_eq!(millis(1_796_528_982.642), 1_796_528_982_642);
        assert_eq!(millis(-0.0005), -1);
        q.before_call_id = Some("c_0000000000100000".into());
        assert_eq!(q.id_bounds().upper, "c_0000000000100000");
        assert_eq!(query().id_bounds().upper, ABOVE_EVERY_CALL_ID);
        assert!("c_ffffffffffffffff" < ABOVE_EVERY_CALL_ID);
    }

    /// A tenant's query reads only groups that hold its calls and pass the
    /// filters; every tenant with no filter reads the primary key.
    #[test]
    fn the_ordered_plan_reads_only_admitted_groups() {
        let c = counts(&[
            ("a", "charge", "succeeded"),
            ("a", "fail", "failed"),
            ("b", "charge", "failed"),
        ]);
        let mut q = query();
        q.statuses = vec!["failed".into()];
        // The scope is applied by the wing's count read; here both tenants
        // are in the counts, as for an admin's query of every tenant.
        q.tenant = None;
        let Plan::Ordered(o) = q.plan(&c) else {
            panic!("ordered")
        };
        assert_eq!(
            o.groups,
            [
                ("a".to_string(), "fail".to_string(), "failed".to_string()),
                ("b".into(), "charge".into(), "failed".into())
            ]
        );
        let mut all = query();
        all.tenant = None;
        let Plan::Ordered(o) = all.plan(&c) else {
            panic!("ordered")
        };
        assert!(o.whole_table && o.groups.is_empty());
        let mut none = query();
        none.tool = Some("nope".into());
        assert_eq!(none.plan(&c), Plan::Empty);
    }

    /// By error code, a group of successes is never read (a success holds
    /// no error), and the groups are read from the error index.
    #[test]
    fn an_error_code_reads_no_group_of_successes() {
        let c = counts(&[
            ("a", "charge", "succeeded"),
            ("a", "charge", "failed"),
            ("a", "charge", "cancelled"),
        ]);
        let mut q = query();
        q.error_code = Some("downstream_timeout".into());
        let Plan::Ordered(o) = q.plan(&c) else {
            panic!("ordered")
        };
        let statuses: Vec<&str> = o.groups.iter().map(|g| g.2.as_str()).collect();
        assert_eq!(statuses, ["cancelled", "failed"]);
        assert_eq!(o.error_code.as_deref(), Some("downstream_timeout"));
        assert!(!o.whole_table);
    }

    /// The most selective filter decides the plan.
    #[test]
    fn the_most_selective_filter_picks_the_plan() {
        let c = counts(&[("a", "charge", "succeeded")]);
        let mut q = query();
        q.key = Some("k".into());
        q.effect_id = Some("eff_0123456789abcdef".into());
        assert!(
            matches!(q.plan(&c), Plan::ByEffect { call_id, .. } if call_id == "c_0123456789abcdef")
        );
        q.effect_id = Some("eff_nope".into());
        assert_eq!(q.plan(&c), Plan::Empty);
        q.effect_id = None;
        assert!(matches!(q.plan(&c), Plan::ByKey { .. }));
        q.key = None;
        q.key_prefix = Some("k".into());
        assert!(matches!(q.plan(&c), Plan::ByKeyPrefix { .. }));
    }

    #[test]
    fn the_next_millisecond_admits_every_id_of_this_one() {
        let t = 1_796_692_330.767_295_1;
        assert_eq!(millis(next_millisecond(t)), millis(t) + 1);
    }
}
