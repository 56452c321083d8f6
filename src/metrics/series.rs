//! The metrics themselves: [`Counter`], [`Gauge`] and [`Histogram`] in
//! atomics, and [`Family`], one metric per label set.
//!
//! `inc`, `set` and `observe` never lock; a family takes its lock only to
//! add a label set (and to list its children for a scrape). Nothing here
//! renders or knows a metric's name.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// A count that only goes up.
#[derive(Debug, Default)]
pub struct Counter {
    value: AtomicU64,
}

impl Counter {
    pub fn inc(&self) {
        self.inc_by(1);
    }

    pub fn inc_by(&self, n: u64) {
        self.value.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.value.load(Ordering::Relaxed)
    }
}

/// A value that goes up and down; an `f64` kept as bits, so `add` is a
/// compare-and-swap loop rather than a lock.
#[derive(Debug, Default)]
pub struct Gauge {
    bits: AtomicU64,
}

impl Gauge {
    pub fn set(&self, value: f64) {
        self.bits.store(value.to_bits(), Ordering::Relaxed);
    }

    pub fn add(&self, delta: f64) {
        add_f64(&self.bits, delta);
    }

    pub fn inc(&self) {
        self.add(1.0);
    }

    pub fn dec(&self) {
        self.add(-1.0);
    }

    pub fn get(&self) -> f64 {
        f64::from_bits(self.bits.load(Ordering::Relaxed))
    }
}

/// Observations counted into fixed buckets, with their sum.
#[derive(Debug)]
pub struct Histogram {
    /// Upper bounds, strictly increasing; `+Inf` is implicit.
    pub(super) bounds: &'static [f64],
    /// Per bucket, not cumulative; one more than `bounds` for `+Inf`.
    counts: Box<[AtomicU64]>,
    sum_bits: AtomicU64,
}

impl Histogram {
    /// Panics when `bounds` are not finite and strictly increasing: they are
    /// constants, so this is a programming error found by any test.
    pub fn new(bounds: &'static [f64]) -> Histogram {
        assert!(
            bounds.iter().all(|b| b.is_finite()) && bounds.windows(2).all(|w| w[0] < w[1]),
            "histogram bounds must be finite and strictly increasing: {bounds:?}"
        );
        Histogram {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_bits: AtomicU64::new(0f64.to_bits()),
        }
    }

    /// Count `value` in the first bucket whose bound is `>= value` (`le`).
    pub fn observe(&self, value: f64) {
        let bucket = self.bounds.partition_point(|bound| *bound < value);
        self.counts[bucket].fetch_add(1, Ordering::Relaxed);
        add_f64(&self.sum_bits, value);
    }

    pub fn observe_duration(&self, elapsed: Duration) {
        self.observe(elapsed.as_secs_f64());
    }

    /// Cumulative counts per bound (the last is `+Inf`, which is the count),
    /// and the sum. The count is the sum of the buckets, so a scrape during
    /// an observation still shows `+Inf` equal to `_count`.
    pub fn snapshot(&self) -> (Vec<u64>, f64) {
        let mut total = 0;
        let cumulative = self
            .counts
            .iter()
            .map(|c| {
                total += c.load(Ordering::Relaxed);
                total
            })
            .collect();
        (
            cumulative,
            f64::from_bits(self.sum_bits.load(Ordering::Relaxed)),
        )
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }
}

fn add_f64(bits: &AtomicU64, delta: f64) {
    let _ = bits.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
        Some((f64::from_bits(old) + delta).to_bits())
    });
}

/// A family member: its label values and its metric.
pub(super) type Child<M> = (Box<[String]>, Arc<M>);

/// One metric per label set, created on first use. Look a child up once and
/// keep the `Arc` where the path is hot.
pub struct Family<M> {
    pub(super) label_names: &'static [&'static str],
    children: RwLock<Vec<Child<M>>>,
    make: Box<dyn Fn() -> M + Send + Sync>,
}

impl<M> Family<M> {
    pub(super) fn new(
        label_names: &'static [&'static str],
        make: impl Fn() -> M + Send + Sync + 'static,
    ) -> Self {
        Family {
            label_names,
            children: RwLock::new(Vec::new()),
            make: Box::new(make),
        }
    }

    /// The metric for these label values, in the order of the label names.
    /// Panics on a wrong number of values: a programming error.
    pub fn with(&self, values: &[&str]) -> Arc<M> {
        assert_eq!(
            values.len(),
            self.label_names.len(),
            "label values for {:?}",
            self.label_names
        );
        let same = |(have, _): &&Child<M>| have.iter().eq(values.iter());
        if let Some((_, child)) = read(&self.children).iter().find(same) {
            return child.clone();
        }
        let mut children = write(&self.children);
        if let Some((_, child)) = children.iter().find(same) {
            return child.clone();
        }
        let child = Arc::new((self.make)());
        children.push((
            values.iter().map(|v| v.to_string()).collect(),
            child.clone(),
        ));
        child
    }

    /// Every child, sorted by label values so a scrape reads the same way twice.
    pub(super) fn children(&self) -> Vec<Child<M>> {
        let mut children = read(&self.children).clone();
        children.sort_by(|a, b| a.0.cmp(&b.0));
        children
    }
}

/// Poisoning is ignored for the `RwLock` as for every lock (see `crate::lock`).
fn read<T>(rw: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    rw.read().unwrap_or_else(|p| p.into_inner())
}

fn write<T>(rw: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    rw.write().unwrap_or_else(|p| p.into_inner())
}
