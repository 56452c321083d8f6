//! What the console costs the write path, measured as the distinct-key
//! load's accepted calls per second, each run on a fresh in-process service
//! and temp database, variants interleaved round by round (the shared disk
//! drifts within minutes, so only runs of the same round are compared):
//!
//! - `--console poll`: the load alone, and the load with a console polling
//!   `GET /v1/overview` and `GET /v1/tool-calls` every `POLL_EVERY`, as the
//!   console's pages do, side by side (target: with ≥ 0.95× without);
//! - `--console writes`: the load on the schema as built, with
//!   `idx_calls_status` back on its columns before migration 11, and with
//!   migration 11's count triggers put back (which migration 14 replaced by
//!   the writer's own bookkeeping), via `store::bulk::strip_console_writes`.
//!
//! It starts and stops its own services only, and prints each round and the
//! spread; it never judges a figure beyond the ratio it prints.

use crate::error::BenchError;
use crate::load::{run_load, Load, LoadResult, Via};
use crate::measure::fetch_stats;
use crate::target::{run_id, start_in_process, Target};
use crate::{Config, Mode};
use idempotent_tool::client::HttpConnection;
#[cfg(feature = "testing")]
use idempotent_tool::store::bulk::strip_console_writes;
use idempotent_tool::store::WriterStats;
use idempotent_tool::temp::TempDir;
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the console polls (its pages refresh every 2 s).
const POLL_EVERY: Duration = Duration::from_secs(2);

/// One variant of a run.
#[derive(Clone, Copy)]
struct Variant {
    name: &'static str,
    poll: bool,
    /// Put the old status index back; put migration 11's count triggers back
    /// (`strip_console_writes`).
    strip: (bool, bool),
}

/// One run's figures.
struct Run {
    load: LoadResult,
    /// What the writer did during the run: its time per operation is the
    /// write path's own cost, less shaken by the shared disk than the rate.
    writer: WriterStats,
    /// Console requests made during the run, and their mean latency.
    polls: usize,
    poll_ms: f64,
}

/// `--console poll`.
pub fn run_poll_comparison(config: &Config) -> Result<bool, BenchError> {
    let variants = [
        Variant {
            name: "no console",
            poll: false,
            strip: (false, false),
        },
        Variant {
            name: "console polling",
            poll: true,
            strip: (false, false),
        },
    ];
    compare(config, &variants, "poll")
}

/// `--console writes`.
#[cfg(feature = "testing")]
pub fn run_write_comparison(config: &Config) -> Result<bool, BenchError> {
    let variants = [
        Variant {
            name: "old status index",
            poll: false,
            strip: (true, false),
        },
        Variant {
            name: "count triggers back (migration 11)",
            poll: false,
            strip: (false, true),
        },
        Variant {
            name: "as built (the writer keeps the counts)",
            poll: false,
            strip: (false, false),
        },
    ];
    compare(config, &variants, "writes")
}

/// `--rounds` rounds of every variant, the order turned around every other
/// round; print the table and each variant's ratio to the first.
fn compare(config: &Config, variants: &[Variant], what: &str) -> Result<bool, BenchError> {
    let mut runs: Vec<Vec<Run>> = variants.iter().map(|_| Vec::new()).collect();
    for round in 0..config.rounds {
        let mut order: Vec<usize> = (0..variants.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            idempotent_tool::errln!("bench: {what} round {}: {}", round + 1, variants[i].name);
            runs[i].push(run(config, variants[i])?);
        }
    }
    print(config, variants, &runs, what);
    Ok(runs.iter().flatten().all(|r| r.load.status0 == 0))
}

/// The distinct load on a fresh service, as `variant` says.
fn run(config: &Config, variant: Variant) -> Result<Run, BenchError> {
    let dir = TempDir::new("idem-bench-console").map_err(BenchError::io("temp folder"))?;
    let db = dir.join("idem.db");
    let target = start_in_process(&db, || strip(&db, variant.strip))?;
    let before = fetch_stats(&target.authority)?.writer;
    let stop = Arc::new(AtomicBool::new(false));
    let poller = variant
        .poll
        .then(|| std::thread::spawn(poll(&target, Arc::clone(&stop))));
    let load = run_load(&Load {
        via: Via::Http(&target.authority),
        mode: Mode::Distinct,
        concurrency: config.concurrency,
        keep_alive: config.keep_alive,
        stop: config.stop,
        prefix: format!("console-{}", run_id()),
        hold_open: false,
    });
    stop.store(true, Ordering::SeqCst);
    let (polls, poll_ms) = match poller {
        Some(thread) => thread.join().unwrap_or((0, 0.0)),
        None => (0, 0.0),
    };
    let writer = fetch_stats(&target.authority)?.writer.since(before);
    drop(target);
    Ok(Run {
        load,
        writer,
        polls,
        poll_ms,
    })
}

/// The console: the overview and the first page of the list, every
/// `POLL_EVERY`, until `stop`; returns how many requests it made and their
/// mean latency in milliseconds.
fn poll(target: &Target, stop: Arc<AtomicBool>) -> impl FnOnce() -> (usize, f64) + Send {
    let authority = target.authority.clone();
    move || {
        let Ok(mut conn) = HttpConnection::open(&authority, Some(Duration::from_secs(10))) else {
            return (0, 0.0);
        };
        let (mut made, mut total) = (0, Duration::ZERO);
        let mut next = Instant::now();
        while !stop.load(Ordering::SeqCst) {
            if Instant::now() >= next {
                for path in ["/v1/overview", "/v1/tool-calls"] {
                    let started = Instant::now();
                    if conn.request("GET", path, &[], None).is_ok() {
                        made += 1;
                        total += started.elapsed();
                    }
                }
                next += POLL_EVERY;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        (made, total.as_secs_f64() * 1e3 / made.max(1) as f64)
    }
}

fn print(config: &Config, variants: &[Variant], runs: &[Vec<Run>], what: &str) {
    let rate = |r: &Run| r.load.accepted_per_s();
    let us = |r: &Run| r.writer.run_us_per_op();
    let ratios: Vec<Vec<f64>> = runs
        .iter()
        .map(|v| {
            v.iter()
                .zip(&runs[0])
                .map(|(r, base)| rate(r) / rate(base).max(1e-9))
                .collect()
        })
        .collect();
    if config.json {
        let rows: Vec<_> = variants
            .iter()
            .zip(runs)
            .zip(&ratios)
            .map(|((v, runs), ratios)| {
                let of = |f: &dyn Fn(&Run) -> f64| runs.iter().map(f).collect::<Vec<f64>>();
                json!({"variant": v.name, "accepted_per_s": of(&rate),
                       "p99_ms": of(&|r| r.load.ms(0.99)), "ratio_to_first": ratios,
                       "writer_run_us_per_op": of(&us),
                       "polls": runs.iter().map(|r| r.polls).collect::<Vec<_>>()})
            })
            .collect();
        let rounds = runs[0].len();
        idempotent_tool::outln!(
            "{}",
            json!({"comparison": what, "rounds": rounds, "variants": rows})
        );
        return;
    }
    idempotent_tool::outln!(
        "{what}: distinct keys, concurrency {}, {} rounds, variants interleaved \
         (accepted/s, POST p99, ratio to {:?} of the same round, the writer's time per operation)",
        config.concurrency,
        runs[0].len(),
        variants[0].name
    );
    for round in 0..runs[0].len() {
        let cells: Vec<String> = variants
            .iter()
            .zip(runs)
            .zip(&ratios)
            .map(|((v, r), q)| {
                let r = &r[round];
                let polls = match v.poll {
                    true => format!(", {} polls {:.1} ms", r.polls, r.poll_ms),
                    false => String::new(),
                };
                let (rps, p99) = (rate(r), r.load.ms(0.99));
                let line = format!(
                    "{rps:.0}/s p99 {p99:.1} ms {:.3}x {:.1} µs/op",
                    q[round],
                    us(r)
                );
                format!("{}: {line}{polls}", v.name)
            })
            .collect();
        idempotent_tool::outln!("round {}: {}", round + 1, cells.join(" | "));
    }
    for ((v, q), r) in variants.iter().zip(&ratios).zip(runs) {
        let us: Vec<f64> = r.iter().map(us).collect();
        let (lo, hi) = spread(q);
        let (us_lo, us_hi) = spread(&us);
        idempotent_tool::outln!(
            "{}: {:.3}x of {:?} (rounds {lo:.3}–{hi:.3}); writer {:.1} µs/op (rounds {us_lo:.1}–{us_hi:.1})",
            v.name,
            mean(q),
            variants[0].name,
            mean(&us)
        );
    }
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len().max(1) as f64
}

/// The least and the greatest of `values`.
fn spread(values: &[f64]) -> (f64, f64) {
    values
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), x| (lo.min(*x), hi.max(*x)))
}

/// Put the old status index back, or migration 11's count triggers, as
/// `strip` says, before the service opens `db` (`--console writes` only).
#[cfg(feature = "testing")]
fn strip(db: &std::path::Path, (list_index, triggers): (bool, bool)) -> Result<(), BenchError> {
    if list_index || triggers {
        strip_console_writes(db, list_index, triggers).map_err(|source| BenchError::Store {
            doing: "strip the console's writes".into(),
            source,
        })?;
    }
    Ok(())
}

/// Without the loaders no variant strips anything (`--console writes`,
/// the one that does, needs them: `loaders`).
#[cfg(not(feature = "testing"))]
fn strip(_: &std::path::Path, _: (bool, bool)) -> Result<(), BenchError> {
    Ok(())
}
