//! The overview's history: calls created and failed per second, and
//! failures by error code, over a chosen range (`Range`: 15 minutes to 7
//! days), per tenant. A sampler thread (`RateSampler`, named `rates`) takes
//! a reading of the count tables' running totals every
//! `store::READING_EVERY`, on the clock's multiples of it, and hands it to
//! the store, which keeps it in the database (`store::readings`): a restart
//! loses none of the history, and every node reads the same one. A rate is
//! the difference of two readings over the time between them
//! (`Rates::between`), so a chart costs one read of at most a reading per
//! point, whatever the load.
//!
//! The totals only grow (see `store::counts`), and they are the database's,
//! not this process's: on PostgreSQL every node's calls are in them. This
//! module never reads `calls`, and keeps each tenant's readings apart, so a
//! tenant's rates are its own.

use crate::store::{Reading, TenantTotals, READING_EVERY};
use std::collections::BTreeMap;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How many rates a chart shows, whatever its range.
pub const SLOTS: usize = 90;

/// The ranges the overview offers: its name and its length in seconds.
pub const RANGES: [(&str, f64); 6] = [
    ("15m", 900.0),
    ("1h", 3_600.0),
    ("6h", 21_600.0),
    ("24h", 86_400.0),
    ("3d", 259_200.0),
    ("7d", 604_800.0),
];

/// A range of `RANGES`, by name.
pub fn range_secs(name: &str) -> Option<f64> {
    RANGES.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
}

/// The times a chart of `range` seconds ending at `until` reads at: one
/// more than `SLOTS`, evenly spaced, the last one `until`.
pub fn points(until: f64, range: f64) -> Vec<f64> {
    let step = range / SLOTS as f64;
    (0..=SLOTS)
        .map(|i| until - range + step * i as f64)
        .collect()
}

/// What the overview shows for a range: per second, oldest first, `SLOTS`
/// of each (`None` where no reading covers the slot), and the failures by
/// code over the whole range.
#[derive(Debug, Clone, PartialEq)]
pub struct Rates {
    pub step_s: f64,
    pub range_s: f64,
    /// The end of the last slot (now).
    pub until: f64,
    /// The first reading the range could use: the failures by code are
    /// counted since then (later than `until - range_s` when the history is
    /// younger than the range). `None`: no reading yet.
    pub since: Option<f64>,
    pub created: Vec<Option<f64>>,
    pub failed: Vec<Option<f64>>,
    /// Calls that entered `failed` since `since`, by error code, largest
    /// first (`""`: no code).
    pub failed_by_code: Vec<(String, i64)>,
}

impl Rates {
    /// The rates of `tenant` (`None`: every tenant's) between the readings
    /// at each point (`at_points[i]`: the last reading at or before the
    /// i-th of `points(until, range)`), the last slot ending at `live`, the
    /// totals read now.
    pub fn between(
        at_points: &[Option<Reading>],
        live: &Reading,
        range: f64,
        tenant: Option<&str>,
    ) -> Rates {
        let mut ends: Vec<Option<(f64, TenantTotals)>> = at_points
            .iter()
            .map(|r| r.as_ref().map(|r| (r.at, r.totals(tenant))))
            .collect();
        if let Some(last) = ends.last_mut() {
            *last = Some((live.at, live.totals(tenant)));
        }
        let mut created = Vec::with_capacity(SLOTS);
        let mut failed = Vec::with_capacity(SLOTS);
        for pair in ends.windows(2).take(SLOTS) {
            let rate = match (&pair[0], &pair[1]) {
                (Some((t0, a)), Some((t1, b))) if t1 > t0 => {
                    let seconds = t1 - t0;
                    // Only grows; a database swapped under a running process
                    // (a restore) must not show a negative rate.
                    Some((
                        (b.created - a.created).max(0) as f64 / seconds,
                        (b.failed - a.failed).max(0) as f64 / seconds,
                    ))
                }
                _ => None,
            };
            created.push(rate.map(|r| r.0));
            failed.push(rate.map(|r| r.1));
        }
        // The earliest reading the points found (the one at the last point
        // too: a history younger than a step still has one).
        let base = at_points
            .iter()
            .flatten()
            .next()
            .map(|r| (r.at, r.totals(tenant)));
        let failed_by_code = match &base {
            Some((_, before)) => {
                by_code(&before.failed_by_code, &live.totals(tenant).failed_by_code)
            }
            None => Vec::new(),
        };
        Rates {
            step_s: range / SLOTS as f64,
            range_s: range,
            until: live.at,
            since: base.map(|(at, _)| at),
            created,
            failed,
            failed_by_code,
        }
    }
}

/// The failures by code between two readings' totals, largest first.
fn by_code(before: &BTreeMap<String, i64>, after: &BTreeMap<String, i64>) -> Vec<(String, i64)> {
    let mut out: Vec<(String, i64)> = after
        .iter()
        .map(|(code, n)| (code.clone(), n - before.get(code).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect();
    out.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    out
}

/// What the sampler does at each reading: read the totals and keep them
/// (the store's `record_reading`), at the time it is given.
pub type ReadingProbe = Box<dyn Fn(f64) -> Result<(), super::ProbeError> + Send>;

/// The `rates` thread; `stop` (or drop) ends and joins it.
pub struct RateSampler {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl RateSampler {
    /// Run `probe` now and on every multiple of `READING_EVERY` of the
    /// clock until stopped. A failed reading is skipped (the next pair of
    /// readings spans the gap).
    pub fn start(probe: ReadingProbe) -> std::io::Result<RateSampler> {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("rates".into())
            .spawn(move || loop {
                let _ = probe(clock());
                match stopped.recv_timeout(until_next_step()) {
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

fn clock() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The time to the clock's next multiple of `READING_EVERY` (readings on
/// those multiples let the store thin them to one a minute, or ten).
fn until_next_step() -> Duration {
    let step = READING_EVERY.as_secs_f64();
    let left = step - clock().rem_euclid(step);
    Duration::from_secs_f64(left.clamp(0.001, step))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::TenantTotals;

    /// A tenant's totals at a reading: name, created, failed, by code.
    type Row<'a> = (&'a str, i64, i64, &'a [(&'a str, i64)]);

    fn reading(at: f64, tenants: &[Row<'_>]) -> Reading {
        Reading {
            at,
            tenants: tenants
                .iter()
                .map(|(t, created, failed, codes)| {
                    let totals = TenantTotals {
                        created: *created,
                        failed: *failed,
                        failed_by_code: codes.iter().map(|(c, n)| (c.to_string(), *n)).collect(),
                    };
                    (t.to_string(), totals)
                })
                .collect(),
        }
    }

    /// Rates are differences over time, per tenant or summed, newest last;
    /// a slot no reading covers is `None`, never a made-up zero; failures
    /// by code are counted since the first reading of the range.
    #[test]
    fn rates_are_differences_of_readings_per_tenant() {
        let range = SLOTS as f64 * 10.0;
        let mut at: Vec<Option<Reading>> = vec![None; SLOTS + 1];
        at[SLOTS - 2] = Some(reading(
            100.0,
            &[("a", 10, 1, &[("x", 1)]), ("b", 0, 0, &[])],
        ));
        at[SLOTS - 1] = Some(reading(
            110.0,
            &[("a", 30, 1, &[("x", 1)]), ("b", 50, 10, &[("y", 10)])],
        ));
        let live = reading(
            120.0,
            &[("a", 30, 2, &[("x", 2)]), ("b", 50, 10, &[("y", 10)])],
        );
        let all = Rates::between(&at, &live, range, None);
        assert_eq!(all.until, 120.0);
        assert_eq!(all.since, Some(100.0));
        assert_eq!(all.created.len(), SLOTS);
        assert_eq!(all.created[SLOTS - 2..], [Some(7.0), Some(0.0)]);
        assert_eq!(all.failed[SLOTS - 2..], [Some(1.0), Some(0.1)]);
        assert!(all.created[..SLOTS - 2].iter().all(Option::is_none));
        assert_eq!(
            all.failed_by_code,
            [("y".to_string(), 10), ("x".to_string(), 1)]
        );
        let a = Rates::between(&at, &live, range, Some("a"));
        assert_eq!(a.created[SLOTS - 2..], [Some(2.0), Some(0.0)]);
        assert_eq!(a.failed_by_code, [("x".to_string(), 1)]);
        let nobody = Rates::between(&at, &live, range, Some("nobody"));
        assert_eq!(nobody.failed_by_code, []);
    }

    /// A chart reads at evenly spaced points ending now, one per slot edge.
    #[test]
    fn points_cover_the_range_and_end_now() {
        let p = points(1000.0, 900.0);
        assert_eq!(p.len(), SLOTS + 1);
        assert_eq!((p[0], p[SLOTS]), (100.0, 1000.0));
        assert_eq!(range_secs("7d"), Some(604_800.0));
        assert_eq!(range_secs("2w"), None);
    }

    /// The sampler reads at once, then stops and joins when asked.
    #[test]
    fn the_sampler_reads_at_once_and_stops() {
        let (tx, rx) = mpsc::channel();
        let probe: ReadingProbe = Box::new(move |at| {
            let _ = tx.send(at);
            Ok(())
        });
        let mut sampler = RateSampler::start(probe).unwrap();
        assert!(
            rx.recv_timeout(Duration::from_secs(10)).is_ok(),
            "no reading"
        );
        sampler.stop();
        assert!(sampler.thread.is_none());
    }
}
