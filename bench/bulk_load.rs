//! `--console bulk`: what a bulk job costs new calls. Each run starts a
//! fresh in-process service and temp database, pauses the `sleep` tool and
//! creates `--rows` calls of it over HTTP (they wait, `pending`), then runs
//! the distinct-key load for `--duration`: alone, or with a bulk job that
//! cancels every one of those calls (`POST /v1/bulk-actions`, filter
//! `status=pending&tool=sleep`) started with it. Variants interleaved round
//! by round, as `console_load`'s; the ratio of accepted new calls per second
//! with the job to without, and how long the job took to finish (target:
//! ≥ 0.9×, docs/performance.md).
//!
//! It starts and stops its own services only.

use crate::error::BenchError;
use crate::load::{run_load, Load, LoadResult, Via};
use crate::target::{run_id, start_in_process, Target};
use crate::{Config, Mode};
use idempotent_tool::client::HttpConnection;
use idempotent_tool::temp::TempDir;
use serde_json::json;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Threads that create the waiting calls.
const MAKERS: u64 = 8;
/// How long a job may take once the load has stopped, before the run fails.
const JOB_DEADLINE: Duration = Duration::from_secs(600);

/// One run's figures.
struct Run {
    load: LoadResult,
    /// With the job: seconds from its POST to `done`, and the calls it changed.
    job: Option<(f64, i64)>,
}

/// `--console bulk`.
pub fn run_bulk_comparison(config: &Config) -> Result<bool, BenchError> {
    let calls = config.rows;
    let mut runs: [Vec<Run>; 2] = [Vec::new(), Vec::new()];
    for round in 0..config.rounds {
        let order: [bool; 2] = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for with_job in order {
            let name = if with_job { "bulk job" } else { "no job" };
            idempotent_tool::errln!("bench: bulk round {}: {name}", round + 1);
            runs[usize::from(with_job)].push(run(config, calls, with_job)?);
        }
    }
    print(config, calls, &runs);
    let all_done = runs[1]
        .iter()
        .all(|r| r.job.is_some_and(|(_, n)| n == calls as i64));
    Ok(all_done && runs.iter().flatten().all(|r| r.load.status0 == 0))
}

fn run(config: &Config, calls: u64, with_job: bool) -> Result<Run, BenchError> {
    let dir = TempDir::new("idem-bench-bulk").map_err(BenchError::io("temp folder"))?;
    let target = start_in_process(&dir.join("idem.db"), || Ok(()))?;
    expect(
        &mut connect(&target)?,
        "POST",
        "/v1/tools/sleep/pause",
        None,
        200,
    )?;
    make_waiting_calls(&target, calls)?;
    let job_started = Instant::now();
    let job_id = match with_job {
        true => {
            let body = json!({"action": "cancel", "filter": {"status": "pending", "tool": "sleep"},
                              "max_calls": calls})
            .to_string();
            // A new connection for each request made after a long wait: one
            // left idle past the server's idle timeout is closed.
            let answer = connect(&target)?
                .request(
                    "POST",
                    "/v1/bulk-actions",
                    &[("Idempotency-Key", &format!("bench-bulk-{}", run_id()))],
                    Some(body.as_bytes()),
                )
                .map_err(BenchError::io("POST /v1/bulk-actions"))?;
            answer.json()["job_id"].as_str().map(str::to_string)
        }
        false => None,
    };
    let load = run_load(&Load {
        via: Via::Http(&target.authority),
        mode: Mode::Distinct,
        concurrency: config.concurrency,
        keep_alive: config.keep_alive,
        stop: config.stop,
        prefix: format!("bulk-{}", run_id()),
        hold_open: false,
    });
    let job = match job_id {
        Some(id) => Some(wait_done(&mut connect(&target)?, &id, job_started)?),
        None => None,
    };
    drop(target);
    Ok(Run { load, job })
}

/// `calls` calls of the paused `sleep` tool, by `MAKERS` threads.
fn make_waiting_calls(target: &Target, calls: u64) -> Result<(), BenchError> {
    let next = Arc::new(AtomicU64::new(0));
    let prefix = format!("waiting-{}", run_id());
    let threads: Vec<_> = (0..MAKERS)
        .map(|_| {
            let (next, prefix) = (Arc::clone(&next), prefix.clone());
            let authority = target.authority.clone();
            std::thread::spawn(move || -> Result<(), String> {
                let mut conn = HttpConnection::open(&authority, Some(Duration::from_secs(30)))
                    .map_err(|e| e.to_string())?;
                let body = br#"{"tool":"sleep","args":{"seconds":1}}"#;
                loop {
                    let n = next.fetch_add(1, Ordering::SeqCst);
                    if n >= calls {
                        return Ok(());
                    }
                    let key = format!("{prefix}-{n}");
                    let answer = conn
                        .request(
                            "POST",
                            "/v1/tool-calls",
                            &[("Idempotency-Key", &key)],
                            Some(body),
                        )
                        .map_err(|e| e.to_string())?;
                    if answer.status != 202 {
                        return Err(format!("a waiting call answered {}", answer.status));
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        thread
            .join()
            .map_err(|_| BenchError::Usage("a thread making waiting calls panicked"))?
            .map_err(|e| BenchError::io("make the waiting calls")(std::io::Error::other(e)))?;
    }
    Ok(())
}

/// Poll the job until it is done: its time from `started`, and what it changed.
fn wait_done(
    conn: &mut HttpConnection,
    job_id: &str,
    started: Instant,
) -> Result<(f64, i64), BenchError> {
    let path = format!("/v1/bulk-actions/{job_id}");
    loop {
        let job = conn
            .request("GET", &path, &[], None)
            .map_err(BenchError::io(format!("GET {path}")))?
            .json();
        if job["state"] == "done" {
            return Ok((
                started.elapsed().as_secs_f64(),
                job["changed"].as_i64().unwrap_or(0),
            ));
        }
        if started.elapsed() > JOB_DEADLINE {
            return Err(BenchError::Usage("the bulk job did not finish in time"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn connect(target: &Target) -> Result<HttpConnection, BenchError> {
    HttpConnection::open(&target.authority, Some(Duration::from_secs(30)))
        .map_err(BenchError::io("connect"))
}

fn expect(
    conn: &mut HttpConnection,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
    status: u16,
) -> Result<(), BenchError> {
    let answer = conn
        .request(method, path, &[], body)
        .map_err(BenchError::io(format!("{method} {path}")))?;
    match answer.status == status {
        true => Ok(()),
        false => Err(BenchError::Usage(
            "the service refused a bench setup request",
        )),
    }
}

fn print(config: &Config, calls: u64, runs: &[Vec<Run>; 2]) {
    let rate = |r: &Run| r.load.accepted_per_s();
    let ratios: Vec<f64> = runs[1]
        .iter()
        .zip(&runs[0])
        .map(|(with, without)| rate(with) / rate(without).max(1e-9))
        .collect();
    if config.json {
        let of = |v: &[Run]| v.iter().map(rate).collect::<Vec<f64>>();
        let jobs: Vec<_> = runs[1].iter().map(|r| r.job.map(|j| j.0)).collect();
        let out = json!({"comparison": "bulk", "waiting_calls": calls,
                         "without_job_per_s": of(&runs[0]), "with_job_per_s": of(&runs[1]),
                         "ratio": ratios, "job_s": jobs});
        idempotent_tool::outln!("{out}");
        return;
    }
    idempotent_tool::outln!(
        "bulk: distinct keys, concurrency {}, {} rounds; a bulk cancel of {calls} waiting calls \
         started with the load (accepted/s, POST p99, ratio to no job of the same round)",
        config.concurrency,
        runs[0].len()
    );
    for (round, ratio) in ratios.iter().enumerate() {
        let (a, b) = (&runs[0][round], &runs[1][round]);
        let (secs, changed) = b.job.unwrap_or((0.0, 0));
        idempotent_tool::outln!(
            "round {}: no job {:.0}/s p99 {:.1} ms | bulk job {:.0}/s p99 {:.1} ms {ratio:.3}x; \
             job done in {secs:.1} s, {changed} cancelled",
            round + 1,
            rate(a),
            a.load.ms(0.99),
            rate(b),
            b.load.ms(0.99)
        );
    }
    let mean = ratios.iter().sum::<f64>() / ratios.len().max(1) as f64;
    let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = ratios.iter().copied().fold(0.0, f64::max);
    idempotent_tool::outln!("bulk job: {mean:.3}x of no job (rounds {lo:.3}–{hi:.3})");
}
