//! `--check`: the guard on what a call costs the server. It measures this
//! build's server CPU per new key, per same-key answer and per `/healthz`
//! (`cpu`), and compares them with a committed baseline file
//! (`bench/baseline.json`), failing when one is more than `TOLERANCE` worse;
//! `--write-baseline` records the figures instead.
//!
//! How it measures: `--rounds` rounds (default 3), each on a fresh in-process
//! service and temp database, the access log off: the distinct load, then the
//! same-key load, each after its `/healthz` calibration, `--duration` each
//! (default 5 s), concurrency 20, keep-alive. Each figure is the median over
//! the rounds (`/healthz`: over both of each round's calibrations), so one
//! round disturbed by another program on a shared box does not decide.
//!
//! What it judges: new keys and same-key answers in units of the same run's
//! `/healthz` (a busier or a slower machine makes all three dearer together,
//! and a ratio holds still where the microseconds do not). `/healthz` itself
//! is shown beside the baseline's when the file was recorded on the same
//! kind of CPU, not judged: on a shared box it follows the load. A change to
//! the HTTP path every request takes is compared interleaved instead
//! (`--server-bin`, docs/performance.md#comparing-two-builds).
//!
//! It never changes the baseline file unless asked (`--write-baseline`), and
//! it judges CPU only: rates and latencies are the single run's to report.

use crate::error::BenchError;
use crate::measure::{measure, Measurement};
use crate::target::start_with;
use crate::{Config, Mode, Stop};
use idempotent_tool::temp::TempDir;
use serde_json::{json, Value};

/// The baseline file `--check` reads when `--baseline` does not name one.
pub const DEFAULT_BASELINE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/bench/baseline.json");

/// How much worse than the baseline a figure may be before the check fails.
pub const TOLERANCE: f64 = 0.10;

/// What `--check` does with its figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Compare them with the baseline file (`--check`).
    Compare,
    /// Write them to it (`--write-baseline`).
    Write,
}

/// The three figures, microseconds of the server's CPU per request
/// (medians over the rounds), and the two calls in units of `/healthz`: the
/// median over the rounds of each round's call over its own calibration.
/// The ratios are what is compared: a round that other programs slowed made
/// its `/healthz` dearer too, so a round's ratio moves less than either.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Figures {
    pub new_key: f64,
    pub same_key: f64,
    pub healthz: f64,
    pub new_key_x: f64,
    pub same_key_x: f64,
}

impl Figures {
    fn from_json(v: &Value) -> Option<Figures> {
        let (new_key, same_key, healthz) = (
            v["us_per_new_key"].as_f64()?,
            v["us_per_same_key"].as_f64()?,
            v["us_per_healthz"].as_f64()?,
        );
        // A file written by hand may give the microseconds alone.
        let x = |field: &str, us: f64| v[field].as_f64().unwrap_or(us / healthz.max(1e-9));
        Some(Figures {
            new_key,
            same_key,
            healthz,
            new_key_x: x("new_key_per_healthz", new_key),
            same_key_x: x("same_key_per_healthz", same_key),
        })
    }
}

/// `--check` or `--write-baseline`: measure, then compare or record.
pub fn run_check(config: &Config, check: Check) -> Result<bool, BenchError> {
    let figures = measure_rounds(config)?;
    let machine = machine();
    match check {
        Check::Write => write_baseline(config, figures, &machine),
        Check::Compare => {
            let text = std::fs::read_to_string(&config.baseline)
                .map_err(BenchError::io(config.baseline.display().to_string()))?;
            let file: Value = serde_json::from_str(&text).map_err(|e| BenchError::Baseline {
                path: config.baseline.clone(),
                why: e.to_string(),
            })?;
            let baseline = Figures::from_json(&file).ok_or_else(|| BenchError::Baseline {
                path: config.baseline.clone(),
                why: "no us_per_new_key, us_per_same_key and us_per_healthz numbers".into(),
            })?;
            let same_machine = file["machine"].as_str() == Some(machine.as_str());
            let verdicts = compare(figures, baseline);
            report(config, figures, &file, &verdicts, same_machine);
            match verdicts.iter().all(|v| v.ok) {
                true => Ok(true),
                false => Err(BenchError::Worse(config.baseline.clone())),
            }
        }
    }
}

/// `--rounds` rounds of the distinct and the same-key load, each round on a
/// fresh service; the medians.
fn measure_rounds(config: &Config) -> Result<Figures, BenchError> {
    let rounds = config.rounds.max(1);
    let (mut new_key, mut same_key, mut healthz) = (Vec::new(), Vec::new(), Vec::new());
    let (mut new_key_x, mut same_key_x) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        idempotent_tool::errln!("bench: --check round {round} of {rounds}");
        let temp = TempDir::new("idem-bench-check").map_err(BenchError::io("temp folder"))?;
        let target = start_with(&temp.join("idem.db"), config.setup, || Ok(()))?;
        let (new, new_hz) = per_call(&measure(
            &target,
            Mode::Distinct,
            config.concurrency,
            config,
        )?)?;
        let (same, same_hz) = per_call(&measure(
            &target,
            Mode::SameKey,
            config.concurrency,
            config,
        )?)?;
        idempotent_tool::errln!(
            "bench: --check round {round}: new key {new:.1}us ({:.2}x /healthz {new_hz:.1}us), \
             same-key answer {same:.1}us ({:.2}x /healthz {same_hz:.1}us)",
            new / new_hz,
            same / same_hz
        );
        new_key.extend([new]);
        same_key.extend([same]);
        healthz.extend([new_hz, same_hz]);
        new_key_x.push(new / new_hz);
        same_key_x.push(same / same_hz);
    }
    Ok(Figures {
        new_key: median(new_key),
        same_key: median(same_key),
        healthz: median(healthz),
        new_key_x: median(new_key_x),
        same_key_x: median(same_key_x),
    })
}

/// A measurement's CPU per call and per `/healthz` (an in-process server is
/// always readable), once its invariants held.
fn per_call(m: &Measurement) -> Result<(f64, f64), BenchError> {
    if !m.ok() {
        return Err(BenchError::Usage(
            "an invariant check failed during --check: run the mode alone to see which",
        ));
    }
    match (m.cpu_per_call(), m.cpu_per_healthz()) {
        (Some((call, _)), Some((healthz, _))) => Ok((call, healthz.max(1e-9))),
        _ => Err(BenchError::Usage(
            "the in-process server's CPU could not be read",
        )),
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// One compared figure.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub what: &'static str,
    /// Current over baseline, in the unit compared (above 1: worse).
    pub ratio: f64,
    pub ok: bool,
}

/// New keys and same-key answers in units of `/healthz`, each round's over
/// its own calibration, the median against the baseline's.
pub fn compare(now: Figures, baseline: Figures) -> Vec<Verdict> {
    let verdict = |what, ratio: f64| Verdict {
        what,
        ratio,
        ok: ratio <= 1.0 + TOLERANCE,
    };
    vec![
        verdict(
            "new key per /healthz",
            now.new_key_x / baseline.new_key_x.max(1e-9),
        ),
        verdict(
            "same-key answer per /healthz",
            now.same_key_x / baseline.same_key_x.max(1e-9),
        ),
    ]
}

/// What `--check` found: the figures beside the baseline's, each verdict,
/// and `/healthz` itself, shown (on the machine the baseline names) but not
/// judged: its microseconds follow the box's load more than any change.
fn report(config: &Config, now: Figures, file: &Value, verdicts: &[Verdict], same_machine: bool) {
    let was = |field: &str| file[field].as_f64().unwrap_or(f64::NAN);
    let healthz_x = now.healthz / was("us_per_healthz");
    if config.json {
        let verdicts: Vec<Value> = verdicts
            .iter()
            .map(|v| json!({"what": v.what, "ratio": v.ratio, "ok": v.ok}))
            .collect();
        return idempotent_tool::outln!(
            "{}",
            json!({
                "check": {
                    "us_per_new_key": now.new_key, "us_per_same_key": now.same_key,
                    "us_per_healthz": now.healthz, "new_key_per_healthz": now.new_key_x,
                    "same_key_per_healthz": now.same_key_x, "baseline": file,
                    "healthz_x_baseline": same_machine.then_some(healthz_x),
                    "verdicts": verdicts, "ok": verdicts.iter().all(|v| v["ok"] == true),
                }
            })
        );
    }
    for (what, now, field, x, x_field) in [
        (
            "new key",
            now.new_key,
            "us_per_new_key",
            now.new_key_x,
            "new_key_per_healthz",
        ),
        (
            "same-key answer",
            now.same_key,
            "us_per_same_key",
            now.same_key_x,
            "same_key_per_healthz",
        ),
    ] {
        idempotent_tool::outln!(
            "cpu per {what}: {now:.1}us, {x:.2}x /healthz (baseline {:.1}us, {:.2}x)",
            was(field),
            was(x_field)
        );
    }
    idempotent_tool::outln!(
        "cpu per /healthz: {:.1}us (baseline {:.1}us)",
        now.healthz,
        was("us_per_healthz")
    );
    for v in verdicts {
        let mark = if v.ok { "ok" } else { "WORSE" };
        idempotent_tool::outln!(
            "check {mark}: {} {:.2}x the baseline's (at most {:.2}x)",
            v.what,
            v.ratio,
            1.0 + TOLERANCE
        );
    }
    match same_machine {
        true => idempotent_tool::outln!(
            "/healthz itself: {healthz_x:.2}x the baseline's (not judged: it follows the box's load)"
        ),
        false => idempotent_tool::outln!(
            "/healthz itself: not compared, the baseline was recorded on {}",
            file["machine"].as_str().unwrap_or("another machine")
        ),
    }
}

/// Record `figures` in `path`, with where and how they were measured.
fn write_baseline(config: &Config, figures: Figures, machine: &str) -> Result<bool, BenchError> {
    let path = &config.baseline;
    let seconds = match config.stop {
        Stop::After(d) => d.as_secs_f64(),
        Stop::Count(_) => 0.0,
    };
    let file = json!({
        "about": "The server's CPU per request (microseconds, the whole server), the reference \
                  `bench --check` compares a build with (docs/performance.md#the-guard-bench---check): \
                  medians of `rounds` rounds of `seconds` per load at `concurrency`, keep-alive, --access-log off.",
        "rounds": config.rounds.max(1),
        "concurrency": config.concurrency,
        "seconds": seconds,
        "recorded": idempotent_tool::rfc3339::rfc3339_millis(std::time::SystemTime::now()),
        "machine": machine,
        "command": "cargo run --release --bin bench -- --check --write-baseline",
        "us_per_new_key": round1(figures.new_key),
        "us_per_same_key": round1(figures.same_key),
        "us_per_healthz": round1(figures.healthz),
        "new_key_per_healthz": round2(figures.new_key_x),
        "same_key_per_healthz": round2(figures.same_key_x),
    });
    let text = serde_json::to_string_pretty(&file).expect("a JSON value serializes") + "\n";
    std::fs::write(path, text).map_err(BenchError::io(path.display().to_string()))?;
    idempotent_tool::outln!(
        "wrote {}: new key {:.1}us, same-key answer {:.1}us, /healthz {:.1}us",
        path.display(),
        figures.new_key,
        figures.same_key,
        figures.healthz
    );
    Ok(true)
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// The kind of machine: the CPU's model name and how many CPUs this process
/// may use (the baseline's `/healthz` only means something on its own kind).
fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name")?.split_once(':'))
        .map(|(_, m)| m.trim().to_string())
        .unwrap_or_else(|| "an unknown CPU".to_string());
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    format!("{model}, {cpus} CPUs")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Figures whose ratios follow from their microseconds.
    fn figures(new_key: f64, same_key: f64, healthz: f64) -> Figures {
        Figures {
            new_key,
            same_key,
            healthz,
            new_key_x: new_key / healthz,
            same_key_x: same_key / healthz,
        }
    }

    /// A machine twice as busy makes every figure dearer together: the
    /// ratios to `/healthz` hold, and the check passes; a same-key answer
    /// that got dearer on its own does not.
    #[test]
    fn a_slower_machine_passes_when_the_calls_kept_their_ratio() {
        let base = figures(100.0, 20.0, 10.0);
        let slower = figures(200.0, 40.0, 20.0);
        let verdicts = compare(slower, base);
        assert_eq!(verdicts.len(), 2);
        assert!(verdicts.iter().all(|v| v.ok), "{verdicts:?}");
        let same_key_dearer = compare(figures(200.0, 50.0, 20.0), base);
        assert!(
            verdicts[0].ok && !same_key_dearer[1].ok,
            "{same_key_dearer:?}"
        );
    }

    /// A new key 11% dearer fails; 9% passes.
    #[test]
    fn more_than_ten_percent_worse_fails() {
        let base = figures(100.0, 20.0, 10.0);
        let verdicts = compare(figures(111.0, 20.0, 10.0), base);
        assert!(!verdicts[0].ok && verdicts[1].ok, "{verdicts:?}");
        let within = figures(109.0, 20.0, 10.0);
        assert!(compare(within, base).iter().all(|v| v.ok));
    }

    /// A baseline file written by hand may give microseconds alone: its
    /// ratios are then theirs.
    #[test]
    fn a_baseline_without_ratios_takes_them_from_its_microseconds() {
        let file =
            json!({"us_per_new_key": 100.0, "us_per_same_key": 20.0, "us_per_healthz": 10.0});
        assert_eq!(Figures::from_json(&file), Some(figures(100.0, 20.0, 10.0)));
        assert_eq!(Figures::from_json(&json!({"us_per_new_key": 1.0})), None);
    }

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
