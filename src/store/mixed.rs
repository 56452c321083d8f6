//! The shape of the bench's mixed million: calls as a service that ran for
//! half a day would hold them, for measuring the list and the counts at scale —
//! several tenants, four tools, every status, automatic retries, business
//! keys, effects, and ids and creation times spread over those hours in
//! order.
//! Each row is a pure function of its number, so the bench can ask for a
//! key, an effect id or a time that is there without reading the database.
//!
//! Only the bulk loaders (`bulk::insert_mixed_calls`) write these rows; the
//! shape is shared so that SQLite and PostgreSQL hold the same million.

use super::ids::effect_id_for;
use super::readings::{kept, Reading, TenantTotals, READING_EVERY};

/// How many calls, in how many tenants, ending when.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MixedCalls {
    pub count: u64,
    /// Tenants `t0`, `t1`, … in turn.
    pub tenants: u64,
    /// The newest call's creation time; the oldest is 12 hours before.
    pub now: f64,
}

/// One call of the mix, as the loaders write it.
#[derive(Debug, Clone, PartialEq)]
pub struct MixedRow {
    pub call_id: String,
    pub tenant: String,
    pub idem_key: String,
    pub tool: &'static str,
    pub status: &'static str,
    pub attempt: i64,
    pub args_json: &'static str,
    pub result_json: Option<&'static str>,
    pub error_json: Option<&'static str>,
    pub lease_until: Option<f64>,
    pub owner: Option<&'static str>,
    pub next_attempt_at: Option<f64>,
    pub created_at: f64,
    pub effect_id: String,
    /// Whether it has an effect row (`succeeded` `charge` and `send_email`).
    pub effect: bool,
    /// The business key a `charge` of every tenth call carried.
    pub business_key: Option<String>,
}

/// How long before `now` the oldest call was created: 12 hours, well within
/// the default `--key-ttl` (a day), so the running service purges none.
const SPAN_S: f64 = 43_200.0;

/// Of the newest calls, how many are still in flight (a quarter `pending`
/// with a retry scheduled a day from now, a quarter `running` under a lease
/// as long, so the running service neither claims nor recovers them).
const IN_FLIGHT: u64 = 2_000;

/// The errors failed and waiting calls carry, by a third each: the codes
/// the list's `error_code` filter and the overview's failures by code read.
const ERRORS: [&str; 3] = [
    r#"{"code":"tool_failed","message":"bulk","retryable":false}"#,
    r#"{"code":"downstream_timeout","message":"bulk","retryable":false}"#,
    r#"{"code":"downstream_rejected","message":"bulk","retryable":false}"#,
];

/// Distinct business keys: about twenty calls each.
const BUSINESS_KEYS: u64 = 50_000;

impl MixedCalls {
    /// Row `n` (0 is the oldest).
    pub fn row(&self, n: u64) -> MixedRow {
        let created_at = self.now - SPAN_S * (self.count - 1 - n) as f64 / self.count as f64;
        let ms = (created_at * 1000.0) as u64;
        let call_id = format!("c_{:011x}{:05x}", ms & 0xFFF_FFFF_FFFF, n & 0xF_FFFF);
        // Tool and state by a hash of the number, not the number itself,
        // so that every tenant (`n % tenants`) has every kind.
        let h = n.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
        let tool = match h % 20 {
            0..=13 => "charge",
            14..=16 => "send_email",
            17..=18 => "fail",
            _ => "sleep",
        };
        let fresh = n + IN_FLIGHT >= self.count;
        let (status, attempt) = match (tool, fresh && h.is_multiple_of(4), fresh && h % 4 == 1) {
            (_, true, _) => ("pending", 1),
            (_, _, true) => ("running", 2),
            ("fail", _, _) => ("failed", (h % 3) as i64 + 1),
            _ => ("succeeded", 1),
        };
        let later = self.now + 86_400.0;
        MixedRow {
            // The stored form since issue 35: the call id's hex, then 32 hex
            // (here from the call id, so a row is the same on every draw).
            effect_id: format!(
                "{}_{}",
                effect_id_for(&call_id),
                &crate::fingerprint::hex_sha256(call_id.as_bytes())[..32]
            ),
            call_id,
            tenant: self.tenant_of(n),
            idem_key: format!("order-{n}"),
            tool,
            status,
            attempt,
            args_json: r#"{"amount":1}"#,
            result_json: (status == "succeeded").then_some(r#"{"ok":true}"#),
            error_json: (status == "failed" || status == "pending")
                .then_some(ERRORS[(h % 3) as usize]),
            lease_until: (status == "running").then_some(later),
            owner: (status == "running").then_some("bulk:loader"),
            next_attempt_at: (status == "pending").then_some(later),
            created_at,
            effect: status == "succeeded" && (tool == "charge" || tool == "send_email"),
            business_key: (tool == "charge" && h.is_multiple_of(10))
                .then(|| format!(r#"["user-{}"]"#, n % BUSINESS_KEYS)),
        }
    }

    /// A week of the overview's readings ending at `now`, as the `rates`
    /// thread would have left them (one every `READING_EVERY`, thinned as
    /// `readings::kept` keeps them): each tenant's totals growing steadily
    /// to what the mix holds, failures by the mix's three codes.
    pub fn readings(&self) -> Vec<Reading> {
        let step = READING_EVERY.as_secs_f64();
        let end = (self.now / step).floor() * step;
        let week = 7.0 * 86_400.0;
        let per_tenant = (self.count / self.tenants.max(1)) as f64;
        let mut out = Vec::new();
        let mut at = end - week;
        while at <= end {
            if kept(at, end) {
                let share = (at - (end - week)) / week;
                let created = (per_tenant * share) as i64;
                let failed = created / 10;
                let tenants = (0..self.tenants)
                    .map(|t| {
                        let codes = ["tool_failed", "downstream_timeout", "downstream_rejected"]
                            .iter()
                            .map(|c| (c.to_string(), failed / 3))
                            .collect();
                        let totals = TenantTotals {
                            created,
                            failed,
                            failed_by_code: codes,
                        };
                        (format!("t{t}"), totals)
                    })
                    .collect();
                out.push(Reading { at, tenants });
            }
            at += step;
        }
        out
    }

    /// The tenant of row `n`.
    pub fn tenant_of(&self, n: u64) -> String {
        format!("t{}", n % self.tenants)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ids grow with the row number and carry its creation time; every
    /// status is there.
    #[test]
    fn rows_are_in_order_and_of_every_kind() {
        let mix = MixedCalls {
            count: 10_000,
            tenants: 4,
            now: 1_800_000_000.0,
        };
        let rows: Vec<MixedRow> = (0..mix.count).map(|n| mix.row(n)).collect();
        assert!(rows.windows(2).all(|w| w[0].call_id < w[1].call_id));
        for status in ["pending", "running", "succeeded", "failed"] {
            assert!(rows.iter().any(|r| r.status == status), "{status}");
        }
        assert_eq!(rows[9_999].created_at, mix.now);
        assert!(rows.iter().any(|r| r.business_key.is_some()));
    }
}
