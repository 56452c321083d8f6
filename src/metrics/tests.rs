//! Unit tests of the registry, the rendering and the service's families; every
//! rendering goes through the strict exposition parser.

use super::exposition::{self, Exposition};
use super::registry::{format_value, Registry};
use super::series::Histogram;
use super::service::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

fn parsed(text: &str) -> Exposition {
    exposition::parse(text).unwrap_or_else(|e| panic!("{e}\n--- scrape ---\n{text}"))
}

#[test]
fn counters_gauges_and_histograms_render_and_parse() {
    let r = Registry::new();
    let plain = r.counter("demo_events_total", "Events.");
    let by_kind = r.counter_family("demo_by_kind_total", "Events by kind.", &["kind"]);
    let gauge = r.gauge("demo_level", "A level.");
    let histogram = r.histogram("demo_latency_seconds", "Latency.", &[0.1, 0.5, 1.0]);
    plain.inc_by(3);
    by_kind.with(&["b"]).inc();
    by_kind.with(&["a"]).inc_by(2);
    gauge.set(2.5);
    gauge.dec();
    for v in [0.05, 0.1, 0.7, 3.0] {
        histogram.observe(v);
    }
    let text = r.render();
    let scrape = parsed(&text);
    assert_eq!(scrape.value("demo_events_total", &[]), Some(3.0));
    assert_eq!(
        scrape.value("demo_by_kind_total", &[("kind", "a")]),
        Some(2.0)
    );
    assert_eq!(scrape.value("demo_level", &[]), Some(1.5));
    let bucket = |le| scrape.value("demo_latency_seconds_bucket", &[("le", le)]);
    // `le` is inclusive: 0.1 lands in the 0.1 bucket.
    assert_eq!(
        [bucket("0.1"), bucket("0.5"), bucket("1"), bucket("+Inf")],
        [Some(2.0), Some(2.0), Some(3.0), Some(4.0)]
    );
    assert_eq!(scrape.value("demo_latency_seconds_count", &[]), Some(4.0));
    let sum = scrape.value("demo_latency_seconds_sum", &[]).unwrap();
    assert!((sum - 3.85).abs() < 1e-9, "{sum}");
    assert_eq!(scrape.family("demo_level").unwrap().kind, "gauge");
    assert!(text.contains("# HELP demo_events_total Events.\n# TYPE demo_events_total counter\n"));
    // Label sets come out sorted, whatever order they were made in.
    assert!(text.find("kind=\"a\"").unwrap() < text.find("kind=\"b\"").unwrap());
}

#[test]
fn label_values_and_help_are_escaped() {
    let r = Registry::new();
    let family = r.counter_family("demo_total", "Help with \\ and\na line feed.", &["v"]);
    let nasty = "quote \" backslash \\ newline \n end";
    family.with(&[nasty]).inc();
    let text = r.render();
    assert!(
        text.contains(r#"demo_total{v="quote \" backslash \\ newline \n end"} 1"#),
        "{text}"
    );
    assert!(
        text.contains("# HELP demo_total Help with \\\\ and\\na line feed.\n"),
        "{text}"
    );
    let scrape = parsed(&text);
    assert_eq!(scrape.value("demo_total", &[("v", nasty)]), Some(1.0));
    let help = scrape.family("demo_total").unwrap().help.clone();
    assert_eq!(help.as_deref(), Some("Help with \\ and\na line feed."));
}

#[test]
fn special_values_are_spelled_as_prometheus_spells_them() {
    assert_eq!(format_value(f64::INFINITY), "+Inf");
    assert_eq!(format_value(f64::NEG_INFINITY), "-Inf");
    assert_eq!(format_value(f64::NAN), "NaN");
    assert_eq!(format_value(3.0), "3");
    assert_eq!(format_value(0.0005), "0.0005");
    assert_eq!(format_value(-2.5), "-2.5");
    let r = Registry::new();
    r.gauge_fn("demo_special", "Special values.", &["k"], || {
        vec![
            (vec!["inf".into()], f64::INFINITY),
            (vec!["nan".into()], f64::NAN),
            (vec!["neg".into()], f64::NEG_INFINITY),
        ]
    });
    let scrape = parsed(&r.render());
    assert_eq!(
        scrape.value("demo_special", &[("k", "inf")]),
        Some(f64::INFINITY)
    );
    assert!(scrape
        .value("demo_special", &[("k", "nan")])
        .unwrap()
        .is_nan());
}

#[test]
fn computed_gauges_are_read_at_each_scrape() {
    let r = Registry::new();
    let source = Arc::new(AtomicU64::new(1));
    let seen = source.clone();
    r.gauge_fn("demo_computed", "Computed.", &[], move || {
        vec![(vec![], seen.load(Ordering::Relaxed) as f64)]
    });
    assert_eq!(parsed(&r.render()).value("demo_computed", &[]), Some(1.0));
    source.store(7, Ordering::Relaxed);
    assert_eq!(parsed(&r.render()).value("demo_computed", &[]), Some(7.0));
}

#[test]
fn concurrent_updates_are_all_counted() {
    let r = Registry::new();
    let counter = r.counter("demo_total", "Demo.");
    let gauge = r.gauge("demo_gauge", "Demo.");
    let histogram = r.histogram("demo_seconds", "Demo.", &[1.0]);
    let family = r.counter_family("demo_family_total", "Demo.", &["t"]);
    thread::scope(|s| {
        for t in 0..4 {
            let (counter, gauge, histogram, family) = (&counter, &gauge, &histogram, &family);
            s.spawn(move || {
                for _ in 0..10_000 {
                    counter.inc();
                    gauge.inc();
                    histogram.observe(0.5);
                    family
                        .with(&[if t % 2 == 0 { "even" } else { "odd" }])
                        .inc();
                }
            });
        }
    });
    let scrape = parsed(&r.render());
    assert_eq!(scrape.value("demo_total", &[]), Some(40_000.0));
    assert_eq!(scrape.value("demo_gauge", &[]), Some(40_000.0));
    assert_eq!(scrape.value("demo_seconds_count", &[]), Some(40_000.0));
    assert_eq!(scrape.value("demo_seconds_sum", &[]), Some(20_000.0));
    assert_eq!(scrape.sum("demo_family_total", &[]), 40_000.0);
    assert_eq!(scrape.family("demo_family_total").unwrap().samples.len(), 2);
}

#[test]
#[should_panic(expected = "registered twice")]
fn a_name_registered_twice_is_a_bug() {
    let r = Registry::new();
    r.counter("demo_total", "A.");
    r.counter("demo_total", "B.");
}

#[test]
#[should_panic(expected = "strictly increasing")]
fn unsorted_buckets_are_a_bug() {
    Histogram::new(&[1.0, 0.5]);
}

#[test]
fn the_parser_refuses_what_a_careful_exporter_never_writes() {
    let cases = [
        ("demo 1\n", "before any TYPE"),
        ("# TYPE demo counter\ndemo{a=\"x\" 1\n", "expected , or }"),
        ("# TYPE demo counter\ndemo{a=\"x} 1\n", "unterminated"),
        ("# TYPE demo counter\ndemo{a=x} 1\n", "without ="),
        ("# TYPE demo counter\ndemo one\n", "bad value"),
        ("# TYPE demo counter\ndemo -1\n", "counter value"),
        ("# TYPE demo counter\ndemo 1\ndemo 2\n", "same series"),
        ("# TYPE demo counter\ndemo{a=\"1\",a=\"2\"} 1\n", "twice"),
        ("# TYPE demo counter\n# TYPE other gauge\nother 1\ndemo 1\n", "not of the family"),
        ("# TYPE demo frequency\n", "unknown type"),
        ("# TYPE 1demo counter\n", "bad metric name"),
        ("# TYPE demo counter\ndemo 1", "line feed"),
        ("# TYPE demo counter\n\ndemo 1\n", "empty line"),
        ("# TYPE demo counter\ndemo{a=\"\\t\"} 1\n", "bad escape"),
        ("# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n", "not increasing"),
        ("# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_sum 1\nh_count 2\n", "+Inf bucket"),
        ("# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 3\n", "equal _count"),
        ("# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_count 2\n", "no _sum"),
        ("# TYPE h histogram\nh_bucket 2\nh_sum 1\nh_count 2\n", "le belongs"),
    ];
    for (text, expected) in cases {
        let err = exposition::parse(text).unwrap_err();
        assert!(err.contains(expected), "{text:?}: {err}");
    }
    let good = "# HELP h Latency.\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 3.5\nh_count 2\n# a comment\n# TYPE g gauge\ng{x=\"a\\\"b\"} -Inf 1700000000000\n";
    let scrape = parsed(good);
    assert_eq!(scrape.value("g", &[("x", "a\"b")]), Some(f64::NEG_INFINITY));
}

#[test]
fn the_service_families_follow_the_conventions() {
    let metrics = Metrics::new();
    metrics.declare_tool("charge");
    let scrape = parsed(&metrics.render());
    for family in &scrape.families {
        let name = family.name.as_str();
        assert!(name.starts_with("idempotent_tool_"), "{name}");
        assert_eq!(family.kind == "counter", name.ends_with("_total"), "{name}");
        if family.kind == "histogram" {
            assert!(
                name.ends_with("_seconds") || name.ends_with("_operations"),
                "{name}"
            );
        }
        assert!(
            !name.contains("millis") && !name.contains("_ms"),
            "base units: {name}"
        );
        assert!(
            family.help.as_deref().is_some_and(|h| !h.is_empty()),
            "{name} has HELP"
        );
    }
    // `observe_request` indexes by discriminant.
    for (index, route) in Route::ALL.into_iter().enumerate() {
        assert_eq!(route as usize, index);
    }
    // Every fixed series exists at zero before anything happens.
    for route in Route::ALL {
        for class in ["1xx", "2xx", "3xx", "4xx", "5xx"] {
            let labels = [("route", route.label()), ("status_class", class)];
            assert_eq!(
                scrape.value(HTTP_REQUESTS, &labels),
                Some(0.0),
                "{labels:?}"
            );
        }
    }
    let runs = [("tool", "charge"), ("outcome", "succeeded")];
    assert_eq!(scrape.value(TOOL_RUNS, &runs), Some(0.0));
    assert_eq!(scrape.value(CALLS_CREATED, &[]), Some(0.0));
    // Without a probe, the database gauges have no samples (not a made-up 0).
    assert!(scrape.family(CALLS).unwrap().samples.is_empty());
}

#[test]
fn each_service_metric_moves_when_its_event_happens() {
    let metrics = Metrics::new();
    metrics.observe_request(Route::PostToolCall, 202, Duration::from_millis(3));
    metrics.observe_request(Route::PostToolCall, 409, Duration::from_millis(1));
    metrics.observe_request(Route::Other, 404, Duration::from_micros(10));
    metrics.observe_tool_run("charge", ToolOutcome::Succeeded, Duration::from_millis(2));
    metrics.observe_tool_run(
        "fail",
        ToolOutcome::RetryableFailure,
        Duration::from_secs(1),
    );
    metrics.observe_writer_batch(12, Duration::from_micros(800));
    for counter in [
        &metrics.calls_created,
        &metrics.replays,
        &metrics.conflicts,
        &metrics.claims,
    ] {
        counter.inc();
    }
    metrics.open_connections.inc();
    metrics.open_connections.inc();
    metrics.open_connections.dec();
    let scrape = parsed(&metrics.render());
    let post = |class| [("route", "/v1/tool-calls"), ("status_class", class)];
    assert_eq!(scrape.value(HTTP_REQUESTS, &post("2xx")), Some(1.0));
    assert_eq!(scrape.value(HTTP_REQUESTS, &post("4xx")), Some(1.0));
    assert_eq!(
        scrape.value(
            HTTP_REQUESTS,
            &[("route", "other"), ("status_class", "4xx")]
        ),
        Some(1.0)
    );
    let post_count = format!("{HTTP_REQUEST_DURATION}_count");
    assert_eq!(
        scrape.value(&post_count, &[("route", "/v1/tool-calls")]),
        Some(2.0)
    );
    let fail = [("tool", "fail"), ("outcome", "retryable_failure")];
    assert_eq!(scrape.value(TOOL_RUNS, &fail), Some(1.0));
    let tool_sum = format!("{TOOL_RUN_DURATION}_sum");
    assert_eq!(scrape.value(&tool_sum, &[("tool", "fail")]), Some(1.0));
    assert_eq!(scrape.value(WRITER_BATCHES, &[]), Some(1.0));
    let ops = format!("{WRITER_BATCH_OPERATIONS}_bucket");
    assert_eq!(scrape.value(&ops, &[("le", "8")]), Some(0.0));
    assert_eq!(scrape.value(&ops, &[("le", "16")]), Some(1.0));
    let commit = format!("{WRITER_COMMIT_DURATION}_bucket");
    assert_eq!(scrape.value(&commit, &[("le", "0.001")]), Some(1.0));
    for name in [CALLS_CREATED, REPLAYS, CONFLICTS, CLAIMS] {
        assert_eq!(scrape.value(name, &[]), Some(1.0), "{name}");
    }
    assert_eq!(scrape.value(RECOVERIES, &[]), Some(0.0));
    assert_eq!(scrape.value(OPEN_CONNECTIONS, &[]), Some(1.0));
}

#[test]
fn the_database_probe_runs_once_per_scrape() {
    let metrics = Metrics::new();
    let reads = Arc::new(AtomicU64::new(0));
    let counted = reads.clone();
    metrics.set_database_probe(move || match counted.fetch_add(1, Ordering::SeqCst) {
        0 => Ok(DatabaseSnapshot {
            calls_by_status: vec![("succeeded".into(), 5), ("pending".into(), 2)],
            oldest_pending_age: Some(Duration::from_millis(1500)),
            oldest_approval_wait: Some(Duration::from_secs(90)),
        }),
        _ => Err("database is locked".into()),
    });
    let scrape = parsed(&metrics.render());
    assert_eq!(reads.load(Ordering::SeqCst), 1);
    assert_eq!(scrape.value(CALLS, &[("status", "succeeded")]), Some(5.0));
    assert_eq!(scrape.value(CALLS, &[("status", "pending")]), Some(2.0));
    assert_eq!(scrape.value(CALLS, &[("status", "running")]), Some(0.0));
    assert_eq!(
        scrape.value(CALLS, &[("status", "awaiting_approval")]),
        Some(0.0)
    );
    assert_eq!(
        scrape.value(super::approvals::OLDEST_APPROVAL_WAIT, &[]),
        Some(90.0)
    );
    assert_eq!(scrape.value(OLDEST_PENDING_AGE, &[]), Some(1.5));
    assert_eq!(scrape.value(DATABASE_PROBE_ERRORS, &[]), Some(0.0));
    // A failed read leaves the gauges out, rather than showing stale numbers.
    let scrape = parsed(&metrics.render());
    assert!(scrape.family(CALLS).unwrap().samples.is_empty());
    assert_eq!(scrape.value(OLDEST_PENDING_AGE, &[]), None);
    assert_eq!(scrape.value(DATABASE_PROBE_ERRORS, &[]), Some(1.0));
}
