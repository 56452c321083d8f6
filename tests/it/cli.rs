//! The command line: help (exit 0 with usage) and bad flags (exit 2 with usage)
//! for every binary, the server's flags, and a database that cannot be opened
//! (exit 1 with a clear message).

use crate::support::downstream::DOWNSTREAM_BIN;
use crate::support::pg_faults::TCP_PROXY_BIN;
use crate::support::{unique_name, CLIENT_BIN, INSPECT_BIN, PROXY_BIN, SERVER_BIN};
use std::process::Command;

#[test]
fn help_prints_usage_and_exits_0() {
    let out = Command::new(SERVER_BIN).arg("--help").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--host",
        "--port",
        "--db",
        "--workers",
        "--lease-secs",
        "--recover-interval-ms",
        "--tools",
        "--chaos",
        "--auth-file",
        "--insecure-no-auth",
        "--key-ttl",
        "--log-level",
        "--access-log",
    ] {
        assert!(text.contains(flag), "usage lacks {flag}");
    }
}

#[test]
fn unknown_flag_or_bad_value_exits_2_with_usage() {
    for args in [
        &["--frobnicate"][..],
        &["--port", "http"],
        &["--workers", "0"],
        &["--lease-secs"],
        &["--key-ttl", "-1"],
        &["--log-level", "loud"],
        &["--access-log", "yes"],
        &["--host", "0.0.0.0"],
    ] {
        let out = Command::new(SERVER_BIN).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_one_line_with_a_pointer_to_help(&err, "idempotent-tool", &format!("{args:?}"));
    }
}

/// A usage error is one line — the cause, then where the usage is — so the
/// cause stays on screen (it used to be followed by 50 lines of usage).
fn assert_one_line_with_a_pointer_to_help(stderr: &str, program: &str, context: &str) {
    assert_eq!(stderr.lines().count(), 1, "{context}: {stderr}");
    let pointer = format!("(see '{program} --help')");
    assert!(stderr.trim_end().ends_with(&pointer), "{context}: {stderr}");
}

#[test]
fn unopenable_database_exits_1() {
    // A folder that does not exist: SQLite cannot create the file.
    let db = std::env::temp_dir()
        .join(unique_name("cli-no-such-dir"))
        .join("idem.db");
    let out = Command::new(SERVER_BIN)
        .args(["--port", "0", "--db"])
        .arg(&db)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot open the database"), "{err}");
}

const BENCH_BIN: &str = env!("CARGO_BIN_EXE_bench");

/// Every binary, by the name its usage line starts with, and a flag of its
/// own that takes a value.
const BINARIES: [(&str, &str, &str); 7] = [
    ("idempotent-tool", SERVER_BIN, "--port"),
    ("downstream", DOWNSTREAM_BIN, "--port"),
    ("client", CLIENT_BIN, "--base"),
    ("chaos_proxy", PROXY_BIN, "--listen"),
    ("tcp_proxy", TCP_PROXY_BIN, "--listen"),
    ("inspect", INSPECT_BIN, "--db"),
    ("bench", BENCH_BIN, "--n"),
];

/// `--help` and `-h` print the binary's usage on stdout and exit 0, whatever
/// the binary (`inspect --help` used to ask for a value and exit 2).
#[test]
fn every_binary_prints_usage_for_help_and_exits_0() {
    for (name, bin, _) in BINARIES {
        for help in ["--help", "-h"] {
            let out = Command::new(bin).arg(help).output().unwrap();
            let (stdout, stderr) = (
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
            );
            assert_eq!(out.status.code(), Some(0), "{name} {help}: {stderr}");
            let usage = format!("usage: {name}");
            assert!(stdout.starts_with(&usage), "{name} {help}: {stdout}");
        }
    }
}

/// An unknown flag, or a flag without its value, exits 2 with one line naming
/// the flag and pointing to `--help`, whatever the binary.
#[test]
fn every_binary_refuses_a_bad_flag_with_exit_2() {
    for (name, bin, value_flag) in BINARIES {
        let unknown: &[&str] = &["--frobnicate"];
        let missing: &[&str] = &[value_flag];
        for (args, message) in [
            (unknown, "\"--frobnicate\"".to_string()),
            (missing, format!("{value_flag} needs a value")),
        ] {
            let out = Command::new(bin).args(args).output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{name} {args:?}: {stderr}");
            assert!(stderr.contains(&message), "{name} {args:?}: {stderr}");
            assert_one_line_with_a_pointer_to_help(&stderr, name, &format!("{name} {args:?}"));
        }
    }
}

/// `--version` and `-V`: the release and the schema version written to each
/// backend, one line on stdout, exit 0.
#[test]
fn version_names_the_release_and_the_schema_versions() {
    use idempotent_tool::store::{PG_SCHEMA_VERSION, SCHEMA_VERSION};
    let expected = format!(
        "idempotent-tool {} (writes SQLite schema {SCHEMA_VERSION}, PostgreSQL schema {PG_SCHEMA_VERSION})\n",
        env!("CARGO_PKG_VERSION")
    );
    for flag in ["--version", "-V"] {
        let out = Command::new(SERVER_BIN).arg(flag).output().unwrap();
        assert!(out.status.success(), "{flag}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), expected, "{flag}");
    }
}

/// `--help` names every subcommand (each one's own `--help` works) before
/// the options.
#[test]
fn help_lists_the_subcommands() {
    let out = Command::new(SERVER_BIN).arg("--help").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let commands = text
        .split("commands:\n")
        .nth(1)
        .and_then(|rest| rest.split("\noptions:").next())
        .expect("a commands section");
    let names: Vec<&str> = commands
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    let known: Vec<&str> = idempotent_tool::cli::SUBCOMMANDS
        .iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, known);
    assert!(names.contains(&"verify"), "{text}");
    for name in names {
        let out = Command::new(SERVER_BIN)
            .args([name, "--help"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{name} --help");
        let usage = format!("usage: idempotent-tool {name}");
        assert!(
            String::from_utf8_lossy(&out.stdout).starts_with(&usage),
            "{name}"
        );
    }
}
