//! The count table's vocabulary: what `/stats`, `/metrics`, the overview and
//! the list's planner read instead of counting `calls`.
//!
//! Each backend keeps two small tables beside `calls`, written by triggers in
//! the same transaction as every insert, transition and delete of a call or
//! an effect, whoever writes it (this release, an older one sharing the
//! file, the bulk loader, an operator's SQL):
//! - `call_counts`, one row per (tenant, tool, status, attempt): how many
//!   calls are there now (`calls`), and two running totals that never go
//!   down — how many were inserted with that key (`inserted`) and how many
//!   moved into it later (`entered`);
//! - `effect_counts`, per tenant: effects written for its calls (`effects`),
//!   and how many of those lost their call to key retention (`detached`);
//!   effects are never deleted, so a tenant's kept effects are the
//!   difference, and every effect ever written is the sum of `effects`;
//! - `error_counts`, per (tenant, tool, error code): how many calls ever
//!   entered `failed` with that code (`failed`, a running total that never
//!   goes down): the overview's failures by code over a range are
//!   differences of it (`store::readings`).
//!
//! On PostgreSQL each row is also keyed by the writing backend (see
//! `postgres/counts.rs`), and a read sums them; here they are already one.
//! The migration that makes them fills them from the rows already there.
//!
//! This file decides nothing and speaks no SQL: it adds up what a wing read
//! in one snapshot. It treats a status as a string, so a new status is one
//! more value here, not a new case.

use super::model::{Backlog, CallCounts, Stats, WriterStats};

/// One row of `call_counts` (summed over PostgreSQL's shards).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountRow {
    pub tenant: String,
    pub tool: String,
    pub status: String,
    pub attempt: i64,
    /// Calls with this key now.
    pub calls: i64,
    /// Calls ever inserted with this key (never decreases).
    pub inserted: i64,
    /// Calls that ever moved into this key by a transition (never decreases).
    pub entered: i64,
}

/// One row of `error_counts` (summed over PostgreSQL's shards).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureRow {
    pub tenant: String,
    pub tool: String,
    /// `""` for a failure that carried no code.
    pub error_code: String,
    /// Calls that ever entered `failed` with this code (never decreases).
    pub failed: i64,
}

/// The counts of one scope (a tenant, or every tenant), read in one
/// snapshot: the calls' rows, the failures by code, the effects, the
/// oldest pending call and the oldest open approval request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counts {
    pub rows: Vec<CountRow>,
    pub failures: Vec<FailureRow>,
    /// Effects of this scope: every effect for every tenant; a tenant's
    /// effects of the calls it still has.
    pub effects: i64,
    /// `created_at` of the oldest `pending` call in the scope.
    pub oldest_pending_created_at: Option<f64>,
    /// When the oldest open approval request in the scope was made (a
    /// gated call's `created_at`); read only when calls await approval.
    pub oldest_awaiting_since: Option<f64>,
}

/// Per tenant, calls created and calls that failed since the database began
/// (both only ever grow): what the overview's rates are differences of.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub created: i64,
    pub failed: i64,
}

impl Counts {
    /// Calls in the scope now.
    pub fn calls(&self) -> i64 {
        self.rows.iter().map(|r| r.calls).sum()
    }

    /// Calls of the scope in `status` now.
    pub fn in_status(&self, status: &str) -> i64 {
        self.rows
            .iter()
            .filter(|r| r.status == status)
            .map(|r| r.calls)
            .sum()
    }

    /// Calls by status, sorted by status, only statuses with calls (as
    /// `GROUP BY status` answers).
    pub fn by_status(&self) -> Vec<(String, i64)> {
        self.call_counts().by_status
    }

    /// The calls of `tool` in `status` now.
    pub fn of_tool(&self, tool: &str, status: &str) -> i64 {
        self.rows
            .iter()
            .filter(|r| r.tool == tool && r.status == status)
            .map(|r| r.calls)
            .sum()
    }

    /// `/stats`' counts: in all, by status and by attempt, exactly as
    /// `GROUP BY status, attempt` over `calls` would answer them.
    pub(in crate::store) fn call_counts(&self) -> CallCounts {
        self.rows
            .iter()
            .filter(|r| r.calls != 0)
            .map(|r| (r.status.clone(), r.attempt, r.calls))
            .collect()
    }

    /// What `/stats` answers for these counts, with the writer's figures.
    pub(in crate::store) fn into_stats(self, writer: WriterStats) -> Stats {
        let effects = self.effects;
        self.call_counts().into_stats(effects, writer)
    }

    /// The backlog a metrics scrape reports.
    pub(in crate::store) fn backlog(&self) -> Backlog {
        Backlog {
            calls_by_status: self.by_status(),
            oldest_pending_created_at: self.oldest_pending_created_at,
            oldest_awaiting_since: self.oldest_awaiting_since,
        }
    }

    /// Per tenant, calls created and failed so far, sorted by tenant.
    pub fn totals_by_tenant(&self) -> Vec<(String, Totals)> {
        let mut totals = std::collections::BTreeMap::<String, Totals>::new();
        for row in &self.rows {
            let t = totals.entry(row.tenant.clone()).or_default();
            t.created += row.inserted;
            if row.status == FAILED {
                t.failed += row.inserted + row.entered;
            }
        }
        totals.into_iter().collect()
    }

    /// The (tenant, tool, status) groups that hold calls now, each once:
    /// where the list looks for calls.
    pub(in crate::store) fn groups(&self) -> Vec<(&str, &str, &str)> {
        let mut groups: Vec<(&str, &str, &str)> = self
            .rows
            .iter()
            .filter(|r| r.calls > 0)
            .map(|r| (r.tenant.as_str(), r.tool.as_str(), r.status.as_str()))
            .collect();
        groups.sort_unstable();
        groups.dedup();
        groups
    }

    /// The tenants that hold calls now.
    pub(in crate::store) fn tenants(&self) -> Vec<&str> {
        let mut tenants: Vec<&str> = self.groups().into_iter().map(|g| g.0).collect();
        tenants.dedup();
        tenants
    }

    /// The (tenant, tool) pairs that hold calls now.
    pub(in crate::store) fn tenant_tools(&self) -> Vec<(&str, &str)> {
        let mut pairs: Vec<(&str, &str)> = self.groups().into_iter().map(|g| (g.0, g.1)).collect();
        pairs.dedup();
        pairs
    }
}

/// The status whose arrivals the overview's `failed` rate counts.
const FAILED: &str = "failed";

#[cfg(test)]
mod tests {
    use super::*;

    fn row(tenant: &str, tool: &str, status: &str, attempt: i64, calls: i64) -> CountRow {
        CountRow {
            tenant: tenant.into(),
            tool: tool.into(),
            status: status.into(),
            attempt,
            calls,
            inserted: 0,
            entered: 0,
        }
    }

    /// Rows with no calls left are not statuses or attempts `/stats` shows;
    /// the rest add up by status and by attempt.
    #[test]
    fn empty_rows_are_left_out_and_the_rest_add_up() {
        let counts = Counts {
            rows: vec![
                row("a", "charge", "succeeded", 1, 3),
                row("b", "charge", "succeeded", 2, 1),
                row("a", "fail", "failed", 1, 2),
                row("a", "charge", "pending", 0, 0),
            ],
            ..Counts::default()
        };
        let counts_of = counts.call_counts();
        assert_eq!(counts_of.calls, 6);
        assert_eq!(
            counts_of.by_status,
            [("failed".to_string(), 2), ("succeeded".to_string(), 4)]
        );
        assert_eq!(counts_of.attempts, [(1, 5), (2, 1)]);
        assert_eq!(counts.tenants(), ["a", "b"]);
        assert_eq!(
            counts.tenant_tools(),
            [("a", "charge"), ("a", "fail"), ("b", "charge")]
        );
        assert_eq!(counts.of_tool("charge", "succeeded"), 4);
    }

    /// `failed` counts calls inserted failed and calls that became failed.
    #[test]
    fn totals_add_inserts_and_arrivals_in_failed() {
        let mut failed = row("a", "fail", "failed", 1, 0);
        failed.entered = 4;
        failed.inserted = 1;
        let mut created = row("a", "fail", "running", 1, 0);
        created.inserted = 7;
        let counts = Counts {
            rows: vec![failed, created],
            ..Counts::default()
        };
        assert_eq!(
            counts.totals_by_tenant(),
            [(
                "a".to_string(),
                Totals {
                    created: 8,
                    failed: 5
                }
            )]
        );
    }
}
