//! A small, strict parser for the Prometheus text exposition format 0.0.4,
//! shared by the metrics module's unit tests (through `#[path]`) and the
//! service tests that scrape `/metrics`. Every line must parse; anything the
//! format allows but a careful exporter never writes (a sample with no
//! `# TYPE`, a family split in two, a repeated series, a histogram whose
//! buckets are not cumulative or whose `+Inf` is not its `_count`) is an error
//! naming the line.
#![allow(dead_code)] // shared with `metrics`' unit tests, which read only part of it

use std::collections::{HashMap, HashSet};

/// Label names and values, in the order written.
pub type Labels = Vec<(String, String)>;

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One `# TYPE`d family and its samples.
#[derive(Debug, Clone)]
pub struct Family {
    pub name: String,
    pub kind: String,
    pub help: Option<String>,
    pub samples: Vec<Sample>,
}

/// A parsed scrape.
#[derive(Debug, Clone, Default)]
pub struct Exposition {
    pub families: Vec<Family>,
}

impl Exposition {
    pub fn family(&self, name: &str) -> Option<&Family> {
        self.families.iter().find(|f| f.name == name)
    }

    /// The value of the one sample named `name` whose labels include every
    /// pair in `labels`; `None` if there is none. Panics if there are several.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let matching: Vec<&Sample> = self.samples(name, labels).collect();
        assert!(
            matching.len() <= 1,
            "{name} {labels:?} matches {} samples",
            matching.len()
        );
        matching.first().map(|s| s.value)
    }

    /// The sum over every sample named `name` whose labels include `labels`.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples(name, labels).map(|s| s.value).sum()
    }

    fn samples<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&str, &str)],
    ) -> impl Iterator<Item = &'a Sample> + 'a {
        self.families
            .iter()
            .flat_map(|f| &f.samples)
            .filter(move |s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(v)))
    }
}

/// Parse a whole scrape, or say which line is wrong and why.
pub fn parse(text: &str) -> Result<Exposition, String> {
    if !text.is_empty() && !text.ends_with('\n') {
        return Err("the last line does not end with a line feed".into());
    }
    let mut parser = Parser::default();
    for (index, line) in text.lines().enumerate() {
        parser
            .line(line)
            .map_err(|e| format!("line {}: {e}: {line:?}", index + 1))?;
    }
    for family in &parser.out.families {
        check_family(family)?;
    }
    Ok(parser.out)
}

#[derive(Default)]
struct Parser {
    out: Exposition,
    helps: HashMap<String, String>,
    /// Families whose samples have ended (another family's began).
    closed: HashSet<String>,
    series: HashSet<String>,
}

impl Parser {
    fn line(&mut self, line: &str) -> Result<(), String> {
        if line.is_empty() {
            return Err("empty line".into());
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            check_metric_name(name)?;
            let help = unescape(help, false)?;
            if self.helps.insert(name.to_string(), help).is_some() {
                return Err(format!("second HELP for {name}"));
            }
            return Ok(());
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            return self.type_line(rest);
        }
        if line.starts_with('#') {
            return Ok(()); // a comment
        }
        let sample = parse_sample(line)?;
        self.add_sample(sample)
    }

    fn type_line(&mut self, rest: &str) -> Result<(), String> {
        let (name, kind) = rest.split_once(' ').ok_or("TYPE without a type")?;
        check_metric_name(name)?;
        if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind) {
            return Err(format!("unknown type {kind:?}"));
        }
        if self.out.families.iter().any(|f| f.name == name) {
            return Err(format!("second TYPE for {name}"));
        }
        if let Some(current) = self.out.families.last() {
            self.closed.insert(current.name.clone());
        }
        self.out.families.push(Family {
            name: name.to_string(),
            kind: kind.to_string(),
            help: self.helps.get(name).cloned(),
            samples: Vec::new(),
        });
        Ok(())
    }

    fn add_sample(&mut self, sample: Sample) -> Result<(), String> {
        let family = self
            .out
            .families
            .last_mut()
            .ok_or("a sample before any TYPE line")?;
        if !belongs_to(&sample.name, family) {
            return Err(format!(
                "sample {} is not of the family {} ({}) above it",
                sample.name, family.name, family.kind
            ));
        }
        if self.closed.contains(&family.name) {
            return Err(format!(
                "family {} continues after another began",
                family.name
            ));
        }
        let series = format!("{}{:?}", sample.name, sorted(&sample.labels));
        if !self.series.insert(series) {
            return Err("the same series twice".into());
        }
        family.samples.push(sample);
        Ok(())
    }
}

fn belongs_to(sample: &str, family: &Family) -> bool {
    let suffixes: &[&str] = match family.kind.as_str() {
        "histogram" => &["_bucket", "_sum", "_count"],
        "summary" => &["", "_sum", "_count"],
        _ => &[""],
    };
    suffixes
        .iter()
        .any(|s| sample.strip_suffix(s) == Some(family.name.as_str()))
}

/// `name{label="value",...} value [timestamp]`.
fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line.find(['{', ' ']).ok_or("no value")?;
    let name = &line[..name_end];
    check_metric_name(name)?;
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        let (parsed, after) = parse_labels(after)?;
        labels = parsed;
        rest = after;
    }
    let rest = rest.strip_prefix(' ').ok_or("no space before the value")?;
    let mut fields = rest.split(' ');
    let value = parse_value(fields.next().unwrap_or(""))?;
    if let Some(timestamp) = fields.next() {
        timestamp
            .parse::<i64>()
            .map_err(|_| format!("bad timestamp {timestamp:?}"))?;
    }
    if fields.next().is_some() {
        return Err("text after the timestamp".into());
    }
    Ok(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// The labels after `{`, and what follows the closing `}`.
fn parse_labels(mut rest: &str) -> Result<(Labels, &str), String> {
    let mut labels = Labels::new();
    loop {
        if let Some(after) = rest.strip_prefix('}') {
            return Ok((labels, after));
        }
        if !labels.is_empty() {
            rest = rest
                .strip_prefix(',')
                .ok_or("expected , or } between labels")?;
        }
        let (name, after) = rest.split_once("=\"").ok_or("a label without =\"")?;
        check_label_name(name)?;
        if labels.iter().any(|(n, _)| n == name) {
            return Err(format!("label {name} twice"));
        }
        let (raw, after) = split_quoted(after)?;
        labels.push((name.to_string(), unescape(raw, true)?));
        rest = after;
    }
}

/// The text up to the closing unescaped `"`, and what follows it.
fn split_quoted(text: &str) -> Result<(&str, &str), String> {
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        match (escaped, c) {
            (false, '\\') => escaped = true,
            (false, '"') => return Ok((&text[..i], &text[i + 1..])),
            _ => escaped = false,
        }
    }
    Err("an unterminated label value".into())
}

/// `\\` and `\n` everywhere, `\"` in label values only.
fn unescape(text: &str, quotes: bool) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('\\') => out.push('\\'),
            Some('n') => out.push('\n'),
            Some('"') if quotes => out.push('"'),
            other => {
                return Err(format!(
                    "bad escape \\{}",
                    other.map(String::from).unwrap_or_default()
                ))
            }
        }
    }
    Ok(out)
}

fn parse_value(text: &str) -> Result<f64, String> {
    match text {
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ if text
            .bytes()
            .any(|b| b.is_ascii_alphabetic() && b != b'e' && b != b'E') =>
        {
            Err(format!("bad value {text:?}"))
        }
        _ => text.parse().map_err(|_| format!("bad value {text:?}")),
    }
}

fn check_metric_name(name: &str) -> Result<(), String> {
    let ok = |first: bool, b: u8| {
        b.is_ascii_alphabetic() || b == b'_' || b == b':' || (!first && b.is_ascii_digit())
    };
    check_name(name, ok).map_err(|_| format!("bad metric name {name:?}"))
}

fn check_label_name(name: &str) -> Result<(), String> {
    let ok =
        |first: bool, b: u8| b.is_ascii_alphabetic() || b == b'_' || (!first && b.is_ascii_digit());
    check_name(name, ok).map_err(|_| format!("bad label name {name:?}"))
}

fn check_name(name: &str, ok: impl Fn(bool, u8) -> bool) -> Result<(), ()> {
    let valid = !name.is_empty() && name.bytes().enumerate().all(|(i, b)| ok(i == 0, b));
    valid.then_some(()).ok_or(())
}

fn sorted(labels: &[(String, String)]) -> Vec<(String, String)> {
    let mut labels = labels.to_vec();
    labels.sort();
    labels
}

/// Family-wide rules: counters are never negative, histograms are whole.
fn check_family(family: &Family) -> Result<(), String> {
    let histogram = family.kind == "histogram";
    for sample in &family.samples {
        let is_bucket = histogram && sample.name.ends_with("_bucket");
        if sample.label("le").is_some() != is_bucket {
            return Err(format!(
                "{}: le belongs on histogram buckets, and only there",
                sample.name
            ));
        }
        if family.kind == "counter" && (sample.value.is_nan() || sample.value < 0.0) {
            return Err(format!("{}: counter value {}", sample.name, sample.value));
        }
    }
    if family.kind == "histogram" {
        let mut series: Vec<Vec<(String, String)>> = family
            .samples
            .iter()
            .map(|s| without_le(&s.labels))
            .collect();
        series.dedup();
        for labels in series {
            check_histogram(family, &labels)?;
        }
    }
    Ok(())
}

/// Buckets in increasing `le`, cumulative, ending at `+Inf` equal to `_count`,
/// with a `_sum`.
fn check_histogram(family: &Family, labels: &[(String, String)]) -> Result<(), String> {
    let name = &family.name;
    let of = |suffix: &str| {
        let full = format!("{name}{suffix}");
        family
            .samples
            .iter()
            .filter(move |s| s.name == full && without_le(&s.labels) == labels)
    };
    let mut previous: Option<(f64, f64)> = None;
    for bucket in of("_bucket") {
        let le = parse_value(bucket.label("le").unwrap_or(""))?;
        if let Some((last_le, last_count)) = previous {
            if le <= last_le || bucket.value < last_count {
                return Err(format!(
                    "{name} {labels:?}: buckets not increasing at le={le}"
                ));
            }
        }
        previous = Some((le, bucket.value));
    }
    let count = of("_count").next().map(|s| s.value);
    match previous {
        Some((le, inf)) if le == f64::INFINITY && Some(inf) == count => {}
        _ => {
            return Err(format!(
                "{name} {labels:?}: the +Inf bucket must exist and equal _count"
            ))
        }
    }
    if of("_sum").next().is_none() {
        return Err(format!("{name} {labels:?}: no _sum"));
    }
    Ok(())
}

fn without_le(labels: &[(String, String)]) -> Vec<(String, String)> {
    sorted(labels)
        .into_iter()
        .filter(|(n, _)| n != "le")
        .collect()
}
