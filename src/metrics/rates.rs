//! The overview's rate history: calls created and calls failed per second
//! over the last 15 minutes, per tenant. A sampler thread (`RateSampler`,
//! named `rates`) reads the count tables' running totals every `STEP` and
//! keeps the last `SLOTS` + 1 readings here (`RateHistory`); a rate is the
//! difference of two readings over the time between them, so it costs one
//! small read per step whatever the load, and a read of the history costs
//! no database read at all.
//!
//! The totals only grow (see `store::counts`), and they are the database's,
//! not this process's: on PostgreSQL every node's calls are in them. This
//! module never reads `calls`, and keeps each tenant's readings apart, so a
//! tenant's rates are its own.

use crate::lock::lock;
use crate::store::Totals;
use std::collections::{BTreeMap, VecDeque};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How far apart the readings are.
pub const STEP: Duration = Duration::from_secs(10);

/// How many rates the history answers: 15 minutes of `STEP`s.
pub const SLOTS: usize = 90;

/// One reading: when, and each tenant's totals then.
#[derive(Debug, Clone)]
struct Reading {
    at: f64,
    totals: BTreeMap<String, Totals>,
}

/// The last `SLOTS` + 1 readings.
#[derive(Debug, Default)]
pub struct RateHistory {
    readings: Mutex<VecDeque<Reading>>,
}

/// What the overview shows: per second, oldest first, `SLOTS` of each.
#[derive(Debug, Clone, PartialEq)]
pub struct Rates {
    pub step_s: f64,
    /// When the newest reading was taken (0 before the first).
    pub until: f64,
    pub created: Vec<f64>,
    pub failed: Vec<f64>,
}

impl RateHistory {
    /// Keep a reading taken at `at`, dropping the oldest past `SLOTS` + 1.
    pub fn record(&self, at: f64, totals: Vec<(String, Totals)>) {
        let mut readings = lock(&self.readings);
        readings.push_back(Reading {
            at,
            totals: totals.into_iter().collect(),
        });
        while readings.len() > SLOTS + 1 {
            readings.pop_front();
        }
    }

    /// The rates of `tenant` (`None`: every tenant together): one per pair
    /// of consecutive readings, zeros before the first reading there is.
    pub fn rates(&self, tenant: Option<&str>) -> Rates {
        let readings = lock(&self.readings);
        let total = |r: &Reading| -> Totals {
            r.totals
                .iter()
                .filter(|(t, _)| tenant.is_none_or(|want| want == t.as_str()))
                .fold(Totals::default(), |sum, (_, t)| Totals {
                    created: sum.created + t.created,
                    failed: sum.failed + t.failed,
                })
        };
        let mut created = vec![0.0; SLOTS];
        let mut failed = vec![0.0; SLOTS];
        let pairs = readings.iter().zip(readings.iter().skip(1));
        let count = readings.len().saturating_sub(1);
        for (slot, (before, after)) in (SLOTS - count..).zip(pairs) {
            let seconds = (after.at - before.at).max(1e-3);
            let (a, b) = (total(before), total(after));
            // Only grows; a database swapped under a running process (a
            // restore) must not show a negative rate.
            created[slot] = (b.created - a.created).max(0) as f64 / seconds;
            failed[slot] = (b.failed - a.failed).max(0) as f64 / seconds;
        }
        Rates {
            step_s: STEP.as_secs_f64(),
            until: readings.back().map_or(0.0, |r| r.at),
            created,
            failed,
        }
    }
}

/// How the sampler reads the totals: (time of the reading, per tenant).
pub type TotalsProbe =
    Box<dyn Fn() -> Result<(f64, Vec<(String, Totals)>), super::ProbeError> + Send>;

/// The `rates` thread; `stop` (or drop) ends and joins it.
pub struct RateSampler {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl RateSampler {
    /// Read `probe` into `history` now and every `STEP` until stopped. A
    /// failed reading is skipped (the next pair spans the gap).
    pub fn start(history: Arc<RateHistory>, probe: TotalsProbe) -> std::io::Result<RateSampler> {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("rates".into())
            .spawn(move || loop {
                if let Ok((at, totals)) = probe() {
                    history.record(at, totals);
                }
                match stopped.recv_timeout(STEP) {
                    Err(RecvTimeoutError::Timeout) => continue,
                    _ => return,
                }
            })?;
        Ok(RateSampler {
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// End the thread and join it. Idempotent.
    pub fn stop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for RateSampler {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(pairs: &[(&str, i64, i64)]) -> Vec<(String, Totals)> {
        pairs
            .iter()
            .map(|(t, created, failed)| {
                let totals = Totals {
                    created: *created,
                    failed: *failed,
                };
                (t.to_string(), totals)
            })
            .collect()
    }

    /// Rates are differences over time, per tenant or summed, newest last,
    /// zeros where there is no reading yet.
    #[test]
    fn rates_are_differences_of_readings_per_tenant() {
        let history = RateHistory::default();
        assert_eq!(history.rates(None).created, vec![0.0; SLOTS]);
        history.record(100.0, totals(&[("a", 10, 1), ("b", 0, 0)]));
        history.record(110.0, totals(&[("a", 30, 1), ("b", 50, 10)]));
        history.record(120.0, totals(&[("a", 30, 2), ("b", 50, 10)]));
        let all = history.rates(None);
        assert_eq!(all.until, 120.0);
        assert_eq!(all.created.len(), SLOTS);
        assert_eq!(all.created[SLOTS - 2..], [7.0, 0.0]);
        assert_eq!(all.failed[SLOTS - 2..], [1.0, 0.1]);
        assert!(all.created[..SLOTS - 2].iter().all(|r| *r == 0.0));
        let a = history.rates(Some("a"));
        assert_eq!(a.created[SLOTS - 2..], [2.0, 0.0]);
        assert_eq!(history.rates(Some("nobody")).created, vec![0.0; SLOTS]);
    }

    /// Only the last `SLOTS` + 1 readings are kept: the history is bounded.
    #[test]
    fn the_history_keeps_fifteen_minutes() {
        let history = RateHistory::default();
        for i in 0..200 {
            history.record(i as f64 * 10.0, totals(&[("a", i * 10, 0)]));
        }
        assert_eq!(lock(&history.readings).len(), SLOTS + 1);
        assert_eq!(history.rates(None).created, vec![1.0; SLOTS]);
    }

    /// The sampler reads at once, then stops and joins when asked.
    #[test]
    fn the_sampler_reads_at_once_and_stops() {
        let history = Arc::new(RateHistory::default());
        let probe: TotalsProbe = Box::new(|| Ok((5.0, totals(&[("a", 1, 0)]))));
        let mut sampler = RateSampler::start(Arc::clone(&history), probe).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while history.rates(None).until == 0.0 {
            assert!(std::time::Instant::now() < deadline, "no reading");
            std::thread::sleep(Duration::from_millis(5));
        }
        sampler.stop();
        assert!(sampler.thread.is_none());
    }
}
