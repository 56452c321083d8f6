//! A tool's `rate` in the tools file: `{"per_second": N, "burst": M}`, how
//! many of its calls may start per second across every process on the
//! database, and how many at once after a quiet spell. Read strictly here:
//! both numbers in range, no other field. Enforcing it is the store's (a
//! token bucket in the database) and the runner's (claims of a rated tool go
//! through that bucket alone); a tool knows only its numbers.

use super::file_error::{field_error, FieldError};
pub use crate::rate::Rate;
use serde_json::{json, Value};

/// The most calls per second a rate may allow.
const MAX_PER_SECOND: f64 = 1_000_000.0;
/// The largest burst.
const MAX_BURST: u64 = 100_000;

impl Rate {
    /// `rate` as the tools file gives it; `burst` defaults to 1.
    pub fn parse(value: &Value) -> Result<Rate, FieldError> {
        let object = value.as_object().ok_or_else(|| {
            field_error(
                "rate",
                "must be an object {\"per_second\": N, \"burst\": N}",
            )
        })?;
        if let Some(extra) = object
            .keys()
            .find(|k| !matches!(k.as_str(), "per_second" | "burst"))
        {
            return Err(field_error(
                format!("rate.{extra}"),
                "is not a field (per_second, burst)",
            ));
        }
        let per_second = object
            .get("per_second")
            .and_then(Value::as_f64)
            .filter(|n| n.is_finite() && *n > 0.0 && *n <= MAX_PER_SECOND)
            .ok_or_else(|| {
                field_error(
                    "rate.per_second",
                    format!("is required: a number above 0, at most {MAX_PER_SECOND}"),
                )
            })?;
        let burst = match object.get("burst") {
            None => 1,
            Some(burst) => burst
                .as_u64()
                .filter(|n| (1..=MAX_BURST).contains(n))
                .ok_or_else(|| {
                    field_error(
                        "rate.burst",
                        format!("must be an integer from 1 to {MAX_BURST}"),
                    )
                })? as u32,
        };
        Ok(Rate { per_second, burst })
    }

    /// What `GET /v1/tools` shows.
    pub fn public_view(&self) -> Value {
        json!({"per_second": self.per_second, "burst": self.burst})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_is_read_strictly() {
        let rate = Rate::parse(&json!({"per_second": 20, "burst": 5})).unwrap();
        assert_eq!(
            rate,
            Rate {
                per_second: 20.0,
                burst: 5
            }
        );
        let slow = Rate::parse(&json!({"per_second": 0.5})).unwrap();
        assert_eq!((slow.per_second, slow.burst), (0.5, 1));
        for (bad, field) in [
            (json!(20), "rate"),
            (json!({"burst": 5}), "rate.per_second"),
            (json!({"per_second": 0}), "rate.per_second"),
            (json!({"per_second": -1}), "rate.per_second"),
            (json!({"per_second": "20"}), "rate.per_second"),
            (json!({"per_second": 2e6}), "rate.per_second"),
            (json!({"per_second": 1, "burst": 0}), "rate.burst"),
            (json!({"per_second": 1, "burst": 1.5}), "rate.burst"),
            (json!({"per_second": 1, "burst": 200000}), "rate.burst"),
            (json!({"per_second": 1, "per_minute": 5}), "rate.per_minute"),
        ] {
            let error = Rate::parse(&bad).unwrap_err();
            assert_eq!(error.field.as_deref(), Some(field), "{bad}");
        }
    }
}
