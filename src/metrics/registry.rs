//! [`Registry`]: the metric families a process exports, in registration
//! order, and their rendering in the Prometheus text exposition format,
//! version 0.0.4 (names checked, label values and help escaped).
//!
//! A scrape locks only the list of families and each family's children, one
//! at a time: it never blocks a request's `inc` or `observe`.

use super::series::{Counter, Family, Gauge, Histogram};
use crate::lock::lock;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

/// The `Content-Type` of [`Registry::render`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

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
