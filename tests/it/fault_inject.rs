//! `scripts/fault_inject.sh`, run by `cargo test` so the script cannot rot:
//! every scenario (the `--downstream` one with a real http tool included, and
//! the PostgreSQL ones: three nodes on one database, a failover to a promoted
//! standby, a partition of one node) must
//! PASS against the binaries cargo just built (the script
//! finds them through `IDEM_BIN_DIR`, so no release build happens here).

use crate::support;

use std::process::{Command, Output};

fn run_script(args: &[&str], force_inspect: bool) -> Output {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/fault_inject.sh");
    let mut command = Command::new("bash");
    command
        .arg(script)
        .args(args)
        .env("IDEM_BIN_DIR", support::bin_dir());
    if force_inspect {
        // Prove the fresh-machine path: no sqlite3 CLI, the `inspect` binary instead.
        command.env("IDEM_FORCE_INSPECT", "1");
    }
    command.output().expect("run bash")
}

fn describe(output: &Output) -> String {
    format!(
        "status {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Every fault-injection scenario passes: one effect per call whatever breaks,
/// and the deliberate new-key mistake reproduces its duplicate.
#[test]
fn every_fault_injection_scenario_passes() {
    let output = run_script(&["--all"], true);
    let text = describe(&output);
    assert!(output.status.success(), "{text}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    for scenario in [
        "drop-response",
        "crash",
        "concurrent",
        "duplicate-request",
        "new-key",
        "downstream",
        "mcp",
        "pause",
        // PostgreSQL is installed wherever the tests run (scripts/test.sh installs it).
        "postgres",
        "pg-failover",
        "pg-partition",
    ] {
        assert!(
            stdout.contains(&format!("PASS {scenario}")),
            "no PASS for {scenario}\n{text}"
        );
    }
    assert!(!stdout.contains("MISMATCH"), "{text}");
    assert!(stdout.contains("all 11 scenarios passed"), "{text}");
}

/// One scenario run alone is summed up as one, not as "all 1 scenarios".
#[test]
fn one_scenario_alone_is_summed_up_as_one() {
    let output = run_script(&["--duplicate-request"], false);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}", describe(&output));
    assert!(
        stdout.contains("scenario duplicate-request passed"),
        "{stdout}"
    );
    assert!(!stdout.contains("all 1 scenarios"), "{stdout}");
}

/// `--dry-run` prints the plan and starts nothing.
#[test]
fn dry_run_prints_the_plan_and_runs_nothing() {
    let output = run_script(&["--dry-run"], false);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}", describe(&output));
    assert!(stdout.contains("nothing is built or started"));
    assert!(stdout.contains("new-key: two fresh servers"));
    assert!(!stdout.contains("listening on"), "{stdout}");
}
