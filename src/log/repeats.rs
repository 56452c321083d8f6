//! [`Repeats`]: one line for a failure that repeats, not one per occurrence.
//! A background job that fails on every pass — recovery every 200 ms on a
//! disk gone read-only, a heartbeat to a database that went away — would
//! otherwise write lines many times a second for as long as the fault lasts,
//! burying the first line, the one that says what happened. The first
//! occurrence is written at once; after it, at most one line per interval,
//! carrying how many were held back meanwhile (`suppressed`), so nothing is
//! hidden, only counted.
//!
//! It decides whether to write; it never writes, and never blocks longer than
//! a mutex held for a comparison.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often a failing background job may say so again.
pub const BACKGROUND_FAILURE_EVERY: Duration = Duration::from_secs(10);

/// One repeating event's gate. `const`, so a call site can keep its own in a
/// `static`.
pub struct Repeats {
    every: Duration,
    gate: Mutex<Gate>,
}

struct Gate {
    last_written: Option<Instant>,
    suppressed: u64,
}

impl Repeats {
    pub const fn every(every: Duration) -> Repeats {
        Repeats {
            every,
            gate: Mutex::new(Gate {
                last_written: None,
                suppressed: 0,
            }),
        }
    }

    /// Whether to write the line now: `Some(n)` with the `n` occurrences
    /// held back since the last line written, or `None` (counted).
    pub fn admit(&self) -> Option<u64> {
        self.admit_at(Instant::now())
    }

    fn admit_at(&self, now: Instant) -> Option<u64> {
        let mut gate = crate::lock::lock(&self.gate);
        let too_soon = gate
            .last_written
            .is_some_and(|last| now.saturating_duration_since(last) < self.every);
        if too_soon {
            gate.suppressed += 1;
            return None;
        }
        gate.last_written = Some(now);
        Some(std::mem::take(&mut gate.suppressed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_is_written_the_repeats_counted_until_the_interval_passes() {
        let repeats = Repeats::every(Duration::from_secs(10));
        let start = Instant::now();
        assert_eq!(repeats.admit_at(start), Some(0));
        for s in 1..=9 {
            assert_eq!(repeats.admit_at(start + Duration::from_secs(s)), None);
        }
        assert_eq!(
            repeats.admit_at(start + Duration::from_secs(10)),
            Some(9),
            "the next line carries what was held back"
        );
        assert_eq!(repeats.admit_at(start + Duration::from_secs(11)), None);
        assert_eq!(repeats.admit_at(start + Duration::from_secs(25)), Some(1));
    }

    #[test]
    fn a_gate_counts_only_its_own_event() {
        let (a, b) = (
            Repeats::every(Duration::from_secs(10)),
            Repeats::every(Duration::from_secs(10)),
        );
        let now = Instant::now();
        assert_eq!(a.admit_at(now), Some(0));
        assert_eq!(a.admit_at(now), None);
        assert_eq!(b.admit_at(now), Some(0), "b has not been written yet");
    }
}
