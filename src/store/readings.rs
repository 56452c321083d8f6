//! The overview's history: readings of the count tables' running totals,
//! one about every `READING_EVERY`, kept in the database (`rate_readings`)
//! so that a restart loses none of it and every node reads the same. A rate
//! over any range is the difference of two readings over the time between
//! them (the totals only grow, `store::counts`); failures by error code
//! over a range, likewise. Readings thin out with age — all of the last
//! hour, one a minute to a day, one every ten minutes to eight days — so a
//! week costs a few thousand small rows, and the overview reads at most a
//! reading per point of its chart.
//!
//! This file is the readings' vocabulary and their arithmetic; each wing's
//! `readings.rs` writes and reads the rows. It never reads `calls`.

use super::counts::Counts;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::time::Duration;

/// How far apart readings are taken.
pub const READING_EVERY: Duration = Duration::from_secs(10);

/// Readings older than this are deleted.
pub const READINGS_KEPT_SECS: f64 = 8.0 * 86_400.0;

/// The ages past which readings thin out, and the spacing each keeps:
/// (older than, keep one every).
pub const THINNING: [(f64, f64); 2] = [(3_600.0, 60.0), (86_400.0, 600.0)];

/// One tenant's running totals at a reading.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TenantTotals {
    /// Calls ever created.
    pub created: i64,
    /// Calls that ever entered `failed`.
    pub failed: i64,
    /// Of those, by error code (`""` for a failure without one).
    pub failed_by_code: BTreeMap<String, i64>,
}

/// A reading: when, and every tenant's totals then.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reading {
    pub at: f64,
    pub tenants: BTreeMap<String, TenantTotals>,
}

impl Reading {
    /// The reading `counts` (every tenant's, one snapshot) make at `at`.
    pub fn of(at: f64, counts: &Counts) -> Reading {
        let mut tenants: BTreeMap<String, TenantTotals> = counts
            .totals_by_tenant()
            .into_iter()
            .map(|(tenant, t)| {
                let totals = TenantTotals {
                    created: t.created,
                    failed: t.failed,
                    failed_by_code: BTreeMap::new(),
                };
                (tenant, totals)
            })
            .collect();
        for row in &counts.failures {
            *tenants
                .entry(row.tenant.clone())
                .or_default()
                .failed_by_code
                .entry(row.error_code.clone())
                .or_insert(0) += row.failed;
        }
        Reading { at, tenants }
    }

    /// The totals of `tenant` (`None`: every tenant's, added up).
    pub fn totals(&self, tenant: Option<&str>) -> TenantTotals {
        let mut sum = TenantTotals::default();
        for (name, t) in &self.tenants {
            if tenant.is_some_and(|want| want != name) {
                continue;
            }
            sum.created += t.created;
            sum.failed += t.failed;
            for (code, n) in &t.failed_by_code {
                *sum.failed_by_code.entry(code.clone()).or_insert(0) += n;
            }
        }
        sum
    }

    /// As stored: `{"tenant": [created, failed, {"code": n}]}`.
    pub fn totals_json(&self) -> String {
        let tenants: Map<String, Value> = self
            .tenants
            .iter()
            .map(|(name, t)| (name.clone(), json!([t.created, t.failed, t.failed_by_code])))
            .collect();
        Value::Object(tenants).to_string()
    }

    /// `totals_json` read back; a malformed one reads as no tenants.
    pub fn from_stored(at: f64, totals: &str) -> Reading {
        let parsed: Value = serde_json::from_str(totals).unwrap_or(Value::Null);
        let tenants = parsed
            .as_object()
            .map(|o| {
                o.iter()
                    .map(|(name, v)| {
                        let by_code = v[2]
                            .as_object()
                            .map(|codes| {
                                codes
                                    .iter()
                                    .map(|(c, n)| (c.clone(), n.as_i64().unwrap_or(0)))
                                    .collect()
                            })
                            .unwrap_or_default();
                        let totals = TenantTotals {
                            created: v[0].as_i64().unwrap_or(0),
                            failed: v[1].as_i64().unwrap_or(0),
                            failed_by_code: by_code,
                        };
                        (name.clone(), totals)
                    })
                    .collect()
            })
            .unwrap_or_default();
        Reading { at, tenants }
    }
}

/// Whether a reading at `at` is kept at `now`: every reading of the last
/// hour; older, only those in the first `READING_EVERY` of each spacing
/// `THINNING` names (readings are taken on the clock's multiples of
/// `READING_EVERY`, so one per spacing).
pub fn kept(at: f64, now: f64) -> bool {
    let age = now - at;
    if age > READINGS_KEPT_SECS {
        return false;
    }
    let step = READING_EVERY.as_secs_f64();
    THINNING
        .iter()
        .rev()
        .find(|(older, _)| age > *older)
        .is_none_or(|(_, every)| at.rem_euclid(*every) < step)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::counts::{CountRow, FailureRow};

    /// A reading holds each tenant's totals, failures by code included, and
    /// reads back from its stored form as it was.
    #[test]
    fn a_reading_reads_back_and_adds_up() {
        let row = |tenant: &str, status: &str, inserted, entered| CountRow {
            tenant: tenant.into(),
            tool: "t".into(),
            status: status.into(),
            attempt: 1,
            calls: 0,
            inserted,
            entered,
        };
        let counts = Counts {
            rows: vec![
                row("a", "succeeded", 5, 0),
                row("a", "failed", 0, 2),
                row("b", "failed", 1, 0),
            ],
            failures: vec![
                FailureRow {
                    tenant: "a".into(),
                    tool: "t".into(),
                    error_code: "x".into(),
                    failed: 2,
                },
                FailureRow {
                    tenant: "b".into(),
                    tool: "t".into(),
                    error_code: "x".into(),
                    failed: 1,
                },
            ],
            ..Counts::default()
        };
        let reading = Reading::of(100.0, &counts);
        assert_eq!(Reading::from_stored(100.0, &reading.totals_json()), reading);
        let all = reading.totals(None);
        assert_eq!((all.created, all.failed), (6, 3));
        assert_eq!(all.failed_by_code["x"], 3);
        assert_eq!(reading.totals(Some("a")).failed_by_code["x"], 2);
        assert_eq!(reading.totals(Some("nobody")), TenantTotals::default());
    }

    /// The last hour keeps everything; a day keeps one a minute; a week one
    /// every ten minutes; past eight days, nothing.
    #[test]
    fn readings_thin_out_with_age() {
        let now = 10_000_200.0;
        assert!(kept(now - 1_234.0, now));
        assert!(kept(now - 7_200.0, now), "a minute boundary, two hours old");
        assert!(!kept(now - 7_210.0, now));
        assert!(kept(now - 2.0 * 86_400.0, now), "a ten-minute boundary");
        assert!(!kept(now - 2.0 * 86_400.0 - 60.0, now));
        assert!(!kept(now - 9.0 * 86_400.0, now));
    }
}
