//! docs/operations.md's restore recipe ("Restoring a SQLite copy") works as
//! written under the shipped unit, shown by running its commands on the
//! same layout: the state directory owned by a user of its own, reached
//! through a symlink as `DynamicUser` makes it, the service run as that user,
//! `backup` and the recipe run as root. The server stops cleanly first, so
//! no `-wal` is left to move. Then the copy is refused (exit 3) until the
//! snapshot is accepted through the variable the recipe sets, and the
//! service, as its user, writes to the restored file.
//!
//! Without systemd running, `systemctl` is the one thing done by hand: the
//! test stops and starts the server itself. Needs root (CI runs as root).

use crate::support::openapi::ROOT;
use crate::support::tmpfs::is_root;
use crate::support::TempDir;
use crate::support::{address_after, charge, run_bounded, signal, Http, Proc, Server, SERVER_BIN};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

/// A user of its own, as `DynamicUser` allocates one (61184–65519).
const SERVICE_UID: u32 = 61_999;
const UNIT_STATE: &str = "/var/lib/idempotent-tool";
const DOCS_COPY: &str = "/tmp/idem-backups/idem-1.db";

/// `SERVER_BIN ARGS` run as the service's user.
fn as_service_user<'a>(args: &[&'a str]) -> Vec<&'a str> {
    let mut line = vec![
        "--reuid=61999",
        "--regid=61999",
        "--clear-groups",
        SERVER_BIN,
    ];
    line.extend_from_slice(args);
    line
}

/// The service, as its user, on `db`, with `env` set.
fn start_as_service_user(db: &Path, env: &[(&str, &str)]) -> Server {
    let args = ["--port", "0", "--db", db.to_str().unwrap()];
    let marker = "listening on http://";
    let line = as_service_user(&args);
    let (proc, banner) = Proc::start_with_env("server", "setpriv", &line, env, marker);
    Server {
        proc,
        base: format!("http://{}", address_after(&banner, marker)),
        db: db.to_path_buf(),
    }
}

/// The recipe's first block: stop, move aside, install, own, verify.
fn recipe() -> Vec<String> {
    let text = std::fs::read_to_string(format!("{ROOT}/docs/operations.md")).unwrap();
    let section = text
        .split("\n### Restoring a SQLite copy\n")
        .nth(1)
        .expect("a Restoring a SQLite copy section");
    let block = section
        .split("```sh\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap())
        .find(|b| b.contains("systemctl stop"))
        .expect("the recipe's block");
    block.lines().map(str::to_string).collect()
}

/// The block that starts the service once with the snapshot accepted.
fn accepting_block() -> String {
    let text = std::fs::read_to_string(format!("{ROOT}/docs/operations.md")).unwrap();
    let section = text
        .split("\n### Restoring a SQLite copy\n")
        .nth(1)
        .unwrap();
    section
        .split("```sh\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap().to_string())
        .find(|b| b.contains("systemctl start"))
        .expect("the block that starts the service")
}

fn owner_and_mode(path: &Path) -> (u32, u32) {
    let meta = std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (meta.uid(), meta.permissions().mode() & 0o777)
}

#[test]
fn the_restore_recipe_works_as_written_under_the_unit() {
    assert!(
        is_root(),
        "the restore recipe test needs root (CI runs as root)"
    );
    let dir = TempDir::new("restore-recipe").unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // /var/lib/private/NAME, owned by the service's user, and /var/lib/NAME
    // a symlink to it. systemd opens `private` to the service inside its
    // own namespace; here it is only traversable (0711) for the same effect.
    let private = dir.join("private");
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o711)).unwrap();
    let real_state = private.join("idempotent-tool");
    std::fs::create_dir(&real_state).unwrap();
    std::fs::set_permissions(&real_state, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::chown(&real_state, Some(SERVICE_UID), Some(SERVICE_UID)).unwrap();
    let state = dir.join("idempotent-tool");
    std::os::unix::fs::symlink("private/idempotent-tool", &state).unwrap();
    let db = state.join("idem.db");
    let copy = dir.join("idem-1.db");

    let mut server = start_as_service_user(&db, &[]);
    let (status, before) = server.post("before-1", &charge(1));
    assert_eq!(status, 202, "{before}");
    server.wait_terminal(before["call_id"].as_str().unwrap());
    let out = run_bounded(
        SERVER_BIN,
        &[
            "backup",
            "--db",
            db.to_str().unwrap(),
            "--to",
            copy.to_str().unwrap(),
        ],
    );
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let snapshot = said
        .lines()
        .find(|l| l.starts_with("marked "))
        .and_then(|l| l.rsplit(' ').next())
        .expect("the snapshot's time")
        .to_string();
    let (status, after) = server.post("after-1", &charge(1));
    assert_eq!(status, 202, "{after}");
    server.wait_terminal(after["call_id"].as_str().unwrap());
    // `systemctl stop`: SIGTERM, a clean stop that leaves no -wal behind.
    signal(&server.proc.child, "TERM");
    assert_eq!(server.wait_exit().code(), Some(0));
    assert!(
        !state.join("idem.db-wal").exists(),
        "a clean stop leaves no -wal"
    );

    let mut lines = recipe();
    assert_eq!(lines.remove(0), "sudo systemctl stop idempotent-tool");
    let script: String = lines
        .iter()
        .map(|line| {
            let line = line.strip_prefix("sudo ").expect("each step runs as root");
            let line = line
                .replace(UNIT_STATE, state.to_str().unwrap())
                .replace(DOCS_COPY, copy.to_str().unwrap())
                .replace("idempotent-tool verify", &format!("{SERVER_BIN} verify"));
            format!("{line}\n")
        })
        .collect();
    let ran = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&ran.stdout);
    assert!(
        ran.status.success(),
        "the recipe failed:\n{script}\n{said}{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    assert!(said.contains("violations 0"), "{said}");
    assert!(state.join("damaged/idem.db").exists());
    assert_eq!(owner_and_mode(&db), (SERVICE_UID, 0o600));

    // The restored copy is refused, as the service's user, until accepted.
    let refused = run_bounded(
        "setpriv",
        &as_service_user(&["--port", "0", "--db", db.to_str().unwrap()]),
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains(&format!("--accept-restored-copy {snapshot}")),
        "{stderr}"
    );

    let accepting = accepting_block();
    let variable = "IDEMPOTENT_TOOL_ACCEPT_RESTORED_COPY";
    assert!(
        accepting.contains(&format!("set-environment {variable}=$SNAPSHOT")),
        "{accepting}"
    );
    let server = start_as_service_user(&db, &[(variable, &snapshot)]);
    let (_, replay) = server.post("before-1", &charge(1));
    assert_eq!(replay["call_id"], before["call_id"], "{replay}");
    let (status, again) = server.post("after-1", &charge(1));
    assert_eq!(
        status, 202,
        "the service cannot write the restored file: {again}"
    );
    server.wait_terminal(again["call_id"].as_str().unwrap());
    assert_eq!(owner_and_mode(&db), (SERVICE_UID, 0o600));
    assert_eq!(owner_and_mode(&state.join("idem.db-wal")).0, SERVICE_UID);
}
