//! README's test command, `bash scripts/test.sh`, sets up what the tests
//! need and then runs them, and `.ci/run` runs that same command after
//! formatting and lints. The script is run for real with stand-ins for
//! `apt-get` and `cargo` first in `PATH`: on a machine without systemd,
//! Chromium and chromedriver it installs exactly those (and PostgreSQL's
//! server if this machine lacks it), then runs `cargo test` with its
//! arguments (and nothing else: a focused run); where everything is there it
//! installs nothing, and a run without arguments also runs the other suites
//! (the clients', MCP conformance).

use crate::support::openapi::ROOT;
use crate::support::tmpfs::is_root;
use idempotent_tool::temp::TempDir;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

/// An executable `name` in `dir` that appends its name and arguments to `log`.
fn stand_in(dir: &Path, name: &str, log: &Path) {
    let path = dir.join(name);
    let script = format!("#!/bin/sh\necho \"{name} $*\" >> '{}'\n", log.display());
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// `bash scripts/test.sh ARGS` with only `dir` in `PATH`; what the
/// stand-ins logged.
fn run_script(dir: &Path, log: &Path, args: &[&str]) -> Vec<String> {
    for tool in ["dirname", "env"] {
        let target = dir.join(tool);
        if !target.exists() {
            std::os::unix::fs::symlink(format!("/usr/bin/{tool}"), target).unwrap();
        }
    }
    let _ = std::fs::remove_file(log);
    let out = Command::new("/bin/bash")
        .arg(format!("{ROOT}/scripts/test.sh"))
        .args(args)
        .env_clear()
        .env("PATH", dir)
        .output()
        .expect("bash");
    assert!(out.status.success(), "{out:?}");
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn the_test_command_installs_what_is_missing_then_runs_cargo_test() {
    assert!(
        is_root(),
        "the script installs packages as root here (CI runs as root)"
    );
    let dir = TempDir::new("test-script").unwrap();
    let bin = dir.join("bin");
    std::fs::create_dir(&bin).unwrap();
    let log = dir.join("calls.log");
    stand_in(&bin, "apt-get", &log);
    stand_in(&bin, "cargo", &log);
    let has_postgres = std::fs::read_dir("/usr/lib/postgresql")
        .map(|versions| {
            versions
                .filter_map(Result::ok)
                .any(|v| v.path().join("bin/initdb").exists())
        })
        .unwrap_or(false);
    let missing = if has_postgres {
        "systemd chromium chromium-driver"
    } else {
        "postgresql systemd chromium chromium-driver"
    };
    let calls = run_script(&bin, &log, &["--test", "it", "backup::"]);
    assert_eq!(
        calls,
        [
            "apt-get update".to_string(),
            format!("apt-get install -y {missing}"),
            "cargo test --test it backup::".to_string(),
        ]
    );

    for present in ["systemd-analyze", "chromium", "chromedriver"] {
        stand_in(&bin, present, &dir.join("unused.log"));
    }
    // Without arguments, the whole run: then every other suite, each a
    // script run by the `bash` first in `PATH` (here a stand-in).
    stand_in(&bin, "bash", &log);
    if has_postgres {
        let calls = run_script(&bin, &log, &[]);
        assert_eq!(
            calls,
            [
                "cargo test",
                "bash scripts/test_clients.sh",
                "bash scripts/mcp_conformance.sh"
            ],
            "nothing to install"
        );
    }
}

/// `.ci/run` runs formatting and lints, then README's command, and no
/// `cargo test` of its own; README's second command is that script.
#[test]
fn ci_and_readme_run_the_test_script() {
    let ci = std::fs::read_to_string(format!("{ROOT}/.ci/run")).unwrap();
    let commands: Vec<&str> = ci
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("cargo ") || l.starts_with("bash "))
        .collect();
    assert_eq!(
        commands,
        [
            "cargo fmt --all -- --check",
            "cargo clippy --all-targets -- -D warnings",
            "bash scripts/test.sh"
        ]
    );
    let readme = std::fs::read_to_string(format!("{ROOT}/README.md")).unwrap();
    let quick_start = readme
        .split("\n## Running it\n")
        .nth(1)
        .and_then(|s| s.split("```sh\n").nth(1))
        .and_then(|s| s.split("```").next())
        .expect("README's two commands");
    assert_eq!(
        quick_start,
        "cargo run --release -- --port 8081\nbash scripts/test.sh\n"
    );
    let script = std::fs::read_to_string(format!("{ROOT}/scripts/test.sh")).unwrap();
    assert!(script.contains("\nset -euo pipefail\n"));
}
