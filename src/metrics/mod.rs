//! Metrics: counters, gauges and histograms kept in atomics, and their
//! rendering in the Prometheus text exposition format, version 0.0.4.
//!
//! The hot path only touches atomics: a handle (`Arc<Counter>`, ...) is looked
//! up once and kept, and `inc`/`observe` never lock. Locks are taken only to
//! add a new label set to a family and to render a scrape. The families this
//! service exports, with their names, are in [`service`].
//!
//! This module must never block a request on a scrape, and never export a
//! label value it was not given by the code: no header, key or args ever
//! becomes a label (their cardinality is unbounded and they may be secret).

pub mod service;

pub use service::{
    DatabaseSnapshot, Metrics, ProbeError, Route, Submission, ToolOutcome, Transport,
};

use crate::sync::lock;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

/// The `Content-Type` of [`Registry::render`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

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
    bounds: &'static [f64],
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
type Child<M> = (Box<[String]>, Arc<M>);

/// One metric per label set, created on first use. Look a child up once and
/// keep the `Arc` where the path is hot.
pub struct Family<M> {
    label_names: &'static [&'static str],
    children: RwLock<Vec<Child<M>>>,
    make: Box<dyn Fn() -> M + Send + Sync>,
}

impl<M> Family<M> {
    fn new(
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
    fn children(&self) -> Vec<Child<M>> {
        let mut children = read(&self.children).clone();
        children.sort_by(|a, b| a.0.cmp(&b.0));
        children
    }
}

/// One sample of a gauge computed at scrape time: label values (in the order
/// of the family's label names) and the value.
pub type ComputedSample = (Vec<String>, f64);

/// A gauge family whose samples a callback computes at each scrape.
type Compute = Box<dyn Fn() -> Vec<ComputedSample> + Send + Sync>;

enum Source {
    Counter(Arc<Family<Counter>>),
    Gauge(Arc<Family<Gauge>>),
    Histogram(Arc<Family<Histogram>>),
    Computed(&'static [&'static str], Compute),
}

struct Registered {
    name: &'static str,
    help: &'static str,
    source: Source,
}

/// The metric families a process exports, in registration order.
#[derive(Default)]
pub struct Registry {
    families: Mutex<Vec<Registered>>,
}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    pub fn counter(&self, name: &'static str, help: &'static str) -> Arc<Counter> {
        self.counter_family(name, help, &[]).with(&[])
    }

    pub fn counter_family(
        &self,
        name: &'static str,
        help: &'static str,
        label_names: &'static [&'static str],
    ) -> Arc<Family<Counter>> {
        let family = Arc::new(Family::new(label_names, Counter::default));
        self.register(name, help, Source::Counter(family.clone()));
        family
    }

    pub fn gauge(&self, name: &'static str, help: &'static str) -> Arc<Gauge> {
        self.gauge_family(name, help, &[]).with(&[])
    }

    pub fn gauge_family(
        &self,
        name: &'static str,
        help: &'static str,
        label_names: &'static [&'static str],
    ) -> Arc<Family<Gauge>> {
        let family = Arc::new(Family::new(label_names, Gauge::default));
        self.register(name, help, Source::Gauge(family.clone()));
        family
    }

    /// A gauge family computed by `compute` at each scrape (it runs on the
    /// scraping thread, so it must be cheap).
    pub fn gauge_fn(
        &self,
        name: &'static str,
        help: &'static str,
        label_names: &'static [&'static str],
        compute: impl Fn() -> Vec<ComputedSample> + Send + Sync + 'static,
    ) {
        self.register(name, help, Source::Computed(label_names, Box::new(compute)));
    }

    pub fn histogram(
        &self,
        name: &'static str,
        help: &'static str,
        bounds: &'static [f64],
    ) -> Arc<Histogram> {
        self.histogram_family(name, help, &[], bounds).with(&[])
    }

    pub fn histogram_family(
        &self,
        name: &'static str,
        help: &'static str,
        label_names: &'static [&'static str],
        bounds: &'static [f64],
    ) -> Arc<Family<Histogram>> {
        Histogram::new(bounds); // check the bounds now, not at first use
        let family = Arc::new(Family::new(label_names, move || Histogram::new(bounds)));
        self.register(name, help, Source::Histogram(family.clone()));
        family
    }

    /// Panics on an invalid or repeated name: names are constants.
    fn register(&self, name: &'static str, help: &'static str, source: Source) {
        assert!(is_metric_name(name), "invalid metric name {name:?}");
        let mut families = lock(&self.families);
        assert!(
            families.iter().all(|f| f.name != name),
            "metric {name:?} registered twice"
        );
        families.push(Registered { name, help, source });
    }

    /// Every family in the text exposition format 0.0.4.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for family in lock(&self.families).iter() {
            render_family(&mut out, family);
        }
        out
    }
}

fn render_family(out: &mut String, family: &Registered) {
    let name = family.name;
    let kind = match family.source {
        Source::Counter(_) => "counter",
        Source::Gauge(_) | Source::Computed(..) => "gauge",
        Source::Histogram(_) => "histogram",
    };
    let _ = writeln!(out, "# HELP {name} {}", escape_help(family.help));
    let _ = writeln!(out, "# TYPE {name} {kind}");
    match &family.source {
        Source::Counter(f) => {
            for (values, c) in f.children() {
                sample(
                    out,
                    name,
                    f.label_names,
                    &values,
                    None,
                    &c.get().to_string(),
                );
            }
        }
        Source::Gauge(f) => {
            for (values, g) in f.children() {
                sample(
                    out,
                    name,
                    f.label_names,
                    &values,
                    None,
                    &format_value(g.get()),
                );
            }
        }
        Source::Computed(label_names, compute) => {
            let mut samples = compute();
            samples.sort_by(|a, b| a.0.cmp(&b.0));
            for (values, value) in samples {
                sample(out, name, label_names, &values, None, &format_value(value));
            }
        }
        Source::Histogram(f) => {
            for (values, h) in f.children() {
                render_histogram(out, name, f.label_names, &values, &h);
            }
        }
    }
}

fn render_histogram(
    out: &mut String,
    name: &str,
    label_names: &[&str],
    values: &[String],
    histogram: &Histogram,
) {
    let (cumulative, sum) = histogram.snapshot();
    let bucket = format!("{name}_bucket");
    let les = histogram.bounds.iter().map(|b| format_value(*b));
    for (le, count) in les.chain(["+Inf".to_string()]).zip(&cumulative) {
        sample(
            out,
            &bucket,
            label_names,
            values,
            Some(&le),
            &count.to_string(),
        );
    }
    let count = cumulative.last().copied().unwrap_or(0);
    sample(
        out,
        &format!("{name}_sum"),
        label_names,
        values,
        None,
        &format_value(sum),
    );
    sample(
        out,
        &format!("{name}_count"),
        label_names,
        values,
        None,
        &count.to_string(),
    );
}

/// `name{a="x",le="0.5"} value`; no braces when there are no labels.
fn sample(
    out: &mut String,
    name: &str,
    label_names: &[&str],
    values: &[String],
    le: Option<&str>,
    value: &str,
) {
    out.push_str(name);
    let mut labels: Vec<(&str, &str)> = label_names
        .iter()
        .copied()
        .zip(values.iter().map(String::as_str))
        .collect();
    labels.extend(le.map(|le| ("le", le)));
    if !labels.is_empty() {
        out.push('{');
        for (i, (label, value)) in labels.iter().enumerate() {
            let comma = if i == 0 { "" } else { "," };
            let _ = write!(out, "{comma}{label}=\"{}\"", escape_label_value(value));
        }
        out.push('}');
    }
    let _ = writeln!(out, " {value}");
}

/// Go's float spelling where it matters: `+Inf`, `-Inf`, `NaN`; integral
/// values without a fraction.
pub fn format_value(value: f64) -> String {
    if value.is_nan() {
        "NaN".into()
    } else if value.is_infinite() {
        if value > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{value}")
    }
}

/// In `# HELP`, only backslash and line feed are escaped.
fn escape_help(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\n', "\\n")
}

/// In a label value: backslash, double quote and line feed.
fn escape_label_value(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// `[a-zA-Z_:][a-zA-Z0-9_:]*`.
fn is_metric_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_' || b == b':')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':')
}

/// Poisoning is ignored for the `RwLock` as for every lock (see `crate::sync`).
fn read<T>(rw: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    rw.read().unwrap_or_else(|p| p.into_inner())
}

fn write<T>(rw: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    rw.write().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
#[path = "../../tests/it/support/exposition.rs"]
pub(crate) mod exposition;

#[cfg(test)]
mod tests;
