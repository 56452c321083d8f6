//! The process's life: what start-up refuses before it touches anything, and
//! (with the library) that a started service stops cleanly.

mod support;

use std::net::TcpListener;
use std::process::{Command, Stdio};
use support::{TempDb, SERVER_BIN};

/// Run the server binary to completion (it is expected to refuse to start).
fn run_server(args: &[&str]) -> std::process::Output {
    Command::new(SERVER_BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run the server binary")
}

/// A taken port fails start-up before the database is created or recovered.
#[test]
fn a_taken_port_fails_before_the_database_is_touched() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let db = TempDb::new("port-taken");
    let out = run_server(&["--port", &port, "--db", db.path_str()]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot bind"), "{stderr}");
    assert!(!db.path.exists(), "the database file was created");
}

/// A database written by a newer release is refused with a clear message.
#[test]
fn a_database_from_a_newer_release_exits_1() {
    let db = TempDb::new("too-new");
    let version = idempotent_tool::store::SCHEMA_VERSION + 1;
    support::open_db(&db.path)
        .pragma_update(None, "user_version", version)
        .unwrap();
    let out = run_server(&["--port", "0", "--db", db.path_str()]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("schema version {version}"))
            && stderr.contains("newer than this release"),
        "{stderr}"
    );
}
