//! `--sweep`: how the cost grows with load and with data. One in-process
//! server is measured at each concurrency in turn; then a fresh empty database
//! and one pre-filled with a million calls are measured alternately, in
//! adjacent pairs.
//!
//! It only starts in-process servers on databases it creates in its own temp
//! folder; it never loads a server given with `--base`.

use crate::calibrate::{single_commit_sample, CommitRate};
use crate::measure::{measure, Measurement};
use crate::report;
use crate::target::{run_id, start_in_process, Target, TempDir};
use crate::Config;
use idempotent_tool::fingerprint::{canonical, fingerprint, hex_sha256};
use idempotent_tool::store::{effect_id_for, now};
use rusqlite::params;
use serde_json::json;
use std::path::Path;
use std::time::Instant;

const SWEEP_CONCURRENCY: [usize; 5] = [1, 4, 16, 64, 256];
pub const PREFILL_CALLS: u64 = 1_000_000;
/// How many empty/filled pairs the data comparison alternates.
pub const DATA_PAIRS: usize = 2;

pub fn run_sweep(config: &Config) -> Result<bool, String> {
    let dir = TempDir::new()?;
    eprintln!("bench: single-commit calibration in {}", dir.0.display());
    let before = single_commit_sample(&dir.0)?;
    let empty = start_in_process(&dir.0.join("sweep.db"), || Ok(()))?;
    let reference = config.concurrency;
    let mut points = vec![measure(&empty, config.mode, reference, config)?];
    for c in SWEEP_CONCURRENCY.into_iter().filter(|c| *c != reference) {
        points.push(measure(&empty, config.mode, c, config)?);
    }
    let filled_db = dir.0.join("filled.db");
    eprintln!("bench: pre-filling {PREFILL_CALLS} succeeded calls");
    let started = Instant::now();
    let filled = start_in_process(&filled_db, || prefill(&filled_db, PREFILL_CALLS))?;
    eprintln!(
        "bench: pre-filled in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    let data_ratio = compare_with_empty(&filled, &dir.0, config, &mut points)?;
    let after = single_commit_sample(&dir.0)?;
    let commit_rate = CommitRate::new(before, after);
    if config.json {
        let v = report::sweep_json(&points, config, commit_rate, data_ratio);
        println!("{v}");
    } else {
        report::print_sweep(&points, config, commit_rate, data_ratio);
    }
    Ok(points.iter().all(Measurement::ok))
}

/// The rate with a million calls over the rate on a fresh empty database,
/// measured alternately in adjacent pairs: the shared disk's speed drifts by
/// 2x within minutes, and the pre-fill alone takes a minute, so comparing with
/// the sweep's first point would measure the disk as much as the data.
fn compare_with_empty(
    filled: &Target,
    dir: &Path,
    config: &Config,
    points: &mut Vec<Measurement>,
) -> Result<f64, String> {
    let empty = start_in_process(&dir.join("empty.db"), || Ok(()))?;
    let (mut empty_rps, mut filled_rps) = (0.0, 0.0);
    for _ in 0..DATA_PAIRS {
        for (target, sum) in [(&empty, &mut empty_rps), (filled, &mut filled_rps)] {
            let m = measure(target, config.mode, config.concurrency, config)?;
            *sum += m.load.rps();
            points.push(m);
        }
    }
    Ok(filled_rps / empty_rps.max(1e-9))
}

/// Fill `db` (schema already created by the service) with `rows` succeeded
/// `charge` calls and their effects, with one fsync at the end.
fn prefill(db: &Path, rows: u64) -> Result<(), String> {
    insert_succeeded_charges(db, rows).map_err(|e| format!("prefill {}: {e}", db.display()))?;
    // The pre-fill's dirty pages must reach the disk now, not during the
    // measurement, where their write-back would compete with its fsyncs.
    let file = std::fs::File::open(db).map_err(|e| format!("{}: {e}", db.display()))?;
    file.sync_all()
        .map_err(|e| format!("sync {}: {e}", db.display()))
}

/// The pre-fill's SQL: `rows` succeeded `charge` calls, each with its effect,
/// in transactions of 100,000 without syncing (the caller syncs once).
// TODO(store): prefill through a store function. This restates the columns of
// `calls` and `effects` outside the store, the one module that should speak SQL.
fn insert_succeeded_charges(db: &Path, rows: u64) -> rusqlite::Result<()> {
    let mut conn = rusqlite::Connection::open(db)?;
    conn.execute_batch("PRAGMA synchronous=OFF; PRAGMA cache_size=-65536;")?;
    let args = json!({"amount": 1});
    let args = args.as_object().expect("a JSON object");
    let (fp, args_json) = (fingerprint("charge", args), canonical(&json!(args)));
    let (prefix, ts) = (format!("prefill-{}", run_id()), now());
    for first in (0..rows).step_by(100_000) {
        let tx = conn.transaction()?;
        {
            let mut call = tx.prepare(
                "INSERT INTO calls (call_id, idem_key, fingerprint, tool, args_json, status,
                                    result_json, attempt, effect_id, created_at, updated_at)
                 VALUES (?1, ?2, ?3, 'charge', ?4, 'succeeded', ?5, 1, ?6, ?7, ?7)",
            )?;
            let mut effect = tx.prepare(
                "INSERT INTO effects (effect_id, call_id, tool, amount, created_at)
                 VALUES (?1, ?2, 'charge', 1, ?3)",
            )?;
            for i in first..(first + 100_000).min(rows) {
                let key = format!("{prefix}-{i}");
                let call_id = format!("c_{}", &hex_sha256(key.as_bytes())[..16]);
                let effect_id = effect_id_for(&call_id);
                let result = json!({"charged": 1, "effect_id": effect_id}).to_string();
                call.execute(params![call_id, key, fp, args_json, result, effect_id, ts])?;
                effect.execute(params![effect_id, call_id, ts])?;
            }
        }
        tx.commit()?;
    }
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
}
