//! The files the service and `backup` create hold every call's args and
//! results, so they are readable by their owner only, whatever the umask
//! allows: the database, its `-wal` and `-shm`, and a backup copy are 0600;
//! a `--log-file` stays 0640 (an operator's group may read logs). The real
//! binary is started under `umask 022`, which would leave 0644 files.

use crate::support::{charge, run_bounded, Counts, Http, Proc, Server, TempDb};
use idempotent_tool::temp::TempDir;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// `program ARGS` under `umask 022`.
fn under_umask_022<'a>(program: &'a str, args: &[&'a str]) -> Vec<&'a str> {
    let mut line = vec!["-c", "umask 022 && exec \"$0\" \"$@\"", program];
    line.extend_from_slice(args);
    line
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

#[test]
fn the_database_its_wal_and_shm_and_a_backup_are_0600_the_log_0640() {
    let dir = TempDir::new("file-modes").unwrap();
    let db = TempDb::at(dir.join("idem.db"));
    let log = dir.join("service.log");
    let args = [
        "--port",
        "0",
        "--db",
        db.path_str(),
        "--log-file",
        log.to_str().unwrap(),
    ];
    let marker = "listening on http://";
    let line = under_umask_022(crate::support::SERVER_BIN, &args);
    let (proc, banner) = Proc::start("server", "/bin/sh", &line, marker);
    let server = Server {
        proc,
        base: format!("http://{}", crate::support::address_after(&banner, marker)),
        db: db.path.clone(),
    };
    let (status, call) = server.post("modes-1", &charge(1));
    assert_eq!(status, 202, "{call}");
    server.wait_terminal(call["call_id"].as_str().unwrap());
    assert_eq!(db.calls(), 1);
    for suffix in ["", "-wal", "-shm"] {
        let path = dir.join(&format!("idem.db{suffix}"));
        assert_eq!(mode(&path), 0o600, "{}", path.display());
    }
    assert_eq!(mode(&log), 0o640);

    let copy = dir.join("copy.db");
    let backup = [
        "backup",
        "--db",
        db.path_str(),
        "--to",
        copy.to_str().unwrap(),
    ];
    let out = run_bounded(
        "/bin/sh",
        &under_umask_022(crate::support::SERVER_BIN, &backup),
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(mode(&copy), 0o600);
}
