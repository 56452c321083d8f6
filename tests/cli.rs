//! The command line: help, bad flags (exit 2 with usage), and a database that
//! cannot be opened (exit 1 with a clear message).

mod support;

use std::process::Command;
use support::{unique_name, SERVER_BIN};

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
        "--chaos",
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
    ] {
        let out = Command::new(SERVER_BIN).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("usage:"), "{args:?}: {err}");
    }
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
