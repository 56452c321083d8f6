//! `--sweep`: how the cost grows with load and with data. One in-process
//! server is measured at each concurrency in turn; then a fresh empty database
//! and one pre-filled with a million calls are measured alternately, in
//! adjacent pairs.
//!
//! It only starts in-process servers on databases it creates in its own temp
//! folder; it never loads a server given with `--base`.

use crate::calibrate::{single_commit_sample, CommitRate};
use crate::error::BenchError;
use crate::measure::{measure, Measurement};
use crate::report;
use crate::target::{run_id, start_in_process, Target};
use crate::Config;
use idempotent_tool::fingerprint::{canonical, fingerprint};
use idempotent_tool::store::bulk::{self, BulkCharge};
use idempotent_tool::store::StoreError;
use idempotent_tool::temp::TempDir;
use serde_json::json;
use std::path::Path;
use std::time::Instant;

const SWEEP_CONCURRENCY: [usize; 5] = [1, 4, 16, 64, 256];
pub const PREFILL_CALLS: u64 = 1_000_000;
/// How many empty/filled pairs the data comparison alternates.
pub const DATA_PAIRS: usize = 2;

pub fn run_sweep(config: &Config) -> Result<bool, BenchError> {
    let dir = TempDir::new("idem-bench").map_err(BenchError::io("temp folder"))?;
    idempotent_tool::errln!(
        "bench: single-commit calibration in {}",
        dir.path().display()
    );
    let before = single_commit_sample(dir.path())?;
    let empty = start_in_process(&dir.join("sweep.db"), || Ok(()))?;
    let reference = config.concurrency;
    let mut points = vec![measure(&empty, config.mode, reference, config)?];
    for c in SWEEP_CONCURRENCY.into_iter().filter(|c| *c != reference) {
        points.push(measure(&empty, config.mode, c, config)?);
    }
    let filled_db = dir.join("filled.db");
    idempotent_tool::errln!("bench: pre-filling {PREFILL_CALLS} succeeded calls");
    let started = Instant::now();
    let filled = start_in_process(&filled_db, || prefill(&filled_db, PREFILL_CALLS))?;
    idempotent_tool::errln!(
        "bench: pre-filled in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    let data_ratio = compare_with_empty(&filled, dir.path(), config, &mut points)?;
    let after = single_commit_sample(dir.path())?;
    let commit_rate = CommitRate::new(before, after);
    if config.json {
        let v = report::sweep_json(&points, config, commit_rate, data_ratio);
        idempotent_tool::outln!("{v}");
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
) -> Result<f64, BenchError> {
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
fn prefill(db: &Path, rows: u64) -> Result<(), BenchError> {
    insert_succeeded_charges(db, rows).map_err(|source| BenchError::Store {
        doing: format!("prefill {}", db.display()),
        source,
    })?;
    // The pre-fill's dirty pages must reach the disk now, not during the
    // measurement, where their write-back would compete with its fsyncs.
    let file = std::fs::File::open(db).map_err(BenchError::io(db.display().to_string()))?;
    file.sync_all()
        .map_err(BenchError::io(format!("sync {}", db.display())))
}

/// `rows` succeeded `charge` calls of one amount, each with its effect,
/// through the store's bulk loader (no fsync; the caller syncs once).
fn insert_succeeded_charges(db: &Path, rows: u64) -> Result<(), StoreError> {
    let args = json!({"amount": 1});
    let args = args.as_object().expect("a JSON object");
    let (fingerprint, args_json) = (fingerprint("charge", args), canonical(&json!(args)));
    let key_prefix = format!("prefill-{}", run_id());
    let charge = BulkCharge {
        fingerprint: &fingerprint,
        args_json: &args_json,
        amount: 1,
        key_prefix: &key_prefix,
    };
    bulk::insert_succeeded_charges(db, &charge, rows)
}
