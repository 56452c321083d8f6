//! The process's life: what start-up refuses before it touches anything, and
//! (with the library) that a started service stops cleanly.

use crate::support;

use crate::support::tmpfs::{is_root, Tmpfs};
use crate::support::Http;
use crate::support::{charge, Server, TempDb, SERVER_BIN};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

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

/// A database with its schema and one call, written and closed cleanly by
/// the server itself (SIGTERM), so no `-wal` or `-shm` file is left beside it.
fn write_a_database(db: &TempDb) {
    let mut server = Server::start(db, &[]);
    assert_eq!(server.post("before", &charge(1)).0, 202);
    support::signal(&server.proc.child, "TERM");
    assert_eq!(server.wait_exit().code(), Some(0));
}

/// Start on `db`, expecting a refusal that says the file cannot be written.
fn assert_refused_as_unwritable(db: &TempDb, why: &str) {
    let out = run_server(&["--port", "0", "--db", db.path_str()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{why}: {stderr}");
    assert!(
        stderr.contains("cannot be written") && stderr.contains(db.path_str()),
        "{why}: {stderr}"
    );
}

/// `chattr +i` on a file, undone on drop (even if the test failed).
struct Immutable(PathBuf);

impl Immutable {
    /// `None` where the file system does not support the flag.
    fn set(path: &Path) -> Option<Immutable> {
        let set = Command::new("chattr").arg("+i").arg(path).output();
        set.is_ok_and(|out| out.status.success())
            .then(|| Immutable(path.to_path_buf()))
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        let _ = Command::new("chattr").arg("-i").arg(&self.0).output();
    }
}

/// A database this process cannot write is refused at start-up — exit 1 and
/// a message that says so — instead of serving `503` for every new key: on a
/// read-only mount, and as an immutable file in a writable folder (as root,
/// which ignores permission bits); without root, as a file without write
/// permission. Writable again, the same file starts.
#[test]
fn a_database_it_cannot_write_exits_1() {
    let Some(fs) = Tmpfs::mount("16m") else {
        assert!(!is_root(), "root, but no tmpfs could be mounted");
        let db = TempDb::new("read-only");
        write_a_database(&db);
        let mut permissions = std::fs::metadata(&db.path).unwrap().permissions();
        permissions.set_readonly(true);
        std::fs::set_permissions(&db.path, permissions).unwrap();
        assert_refused_as_unwritable(&db, "a file without write permission");
        return;
    };
    let db = TempDb::at(fs.dir.join("idem.db"));
    write_a_database(&db);

    fs.set_read_only(true);
    assert_refused_as_unwritable(&db, "a read-only mount");
    fs.set_read_only(false);

    match Immutable::set(&db.path) {
        Some(immutable) => {
            assert_refused_as_unwritable(&db, "an immutable file");
            drop(immutable);
        }
        None => eprintln!("lifecycle: chattr +i is not supported here; skipped that case"),
    }

    let mut server = Server::start(&db, &[]);
    let (status, call) = server.by_key("before");
    assert_eq!((status, call["status"].as_str()), (200, Some("succeeded")));
    server.kill();
    drop(server);
    drop(db);
    drop(fs);
}

/// A misspelled scheme (`postgress://`) is a usage error naming the
/// schemes, never a SQLite file created under that name, and never printed
/// with its password.
#[test]
fn a_url_of_another_scheme_is_refused_not_taken_for_a_file() {
    let dir = idempotent_tool::temp::TempDir::new("odd-scheme").unwrap();
    let out = Command::new(SERVER_BIN)
        .args([
            "--port",
            "0",
            "--db",
            "postgress://idem:s3cret@db.example/calls",
        ])
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .output()
        .expect("run the server binary");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("postgres://"), "{stderr}");
    assert!(!stderr.contains("s3cret"), "{stderr}");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "start-up created {left:?}");
}

/// Another program's SQLite file is refused in one line and left as it was
/// (not a byte changed, no WAL made): one with tables of its own, and one
/// whose `calls` table only shares the name. An empty file is taken.
#[test]
fn another_programs_sqlite_file_is_refused_in_one_line_and_left_alone() {
    for (name, ddl, why) in [
        (
            "theirs",
            "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT); \
             INSERT INTO users VALUES (1, 'ann');",
            "tables this service does not make (users)",
        ),
        (
            "other-calls",
            "CREATE TABLE calls (id INTEGER PRIMARY KEY, phone TEXT);",
            "its calls table is another program's",
        ),
    ] {
        let db = TempDb::new(name);
        rusqlite::Connection::open(&db.path)
            .unwrap()
            .execute_batch(ddl)
            .unwrap();
        let before = std::fs::read(&db.path).unwrap();
        let out = refused_start(&["--port", "0", "--db", db.path_str()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{name}: {stderr}");
        assert!(
            stderr.contains("not an idempotent-tool database") && stderr.contains(why),
            "{stderr}"
        );
        assert_eq!(
            std::fs::read(&db.path).unwrap(),
            before,
            "{name} was changed"
        );
        let wal = PathBuf::from(format!("{}-wal", db.path.display()));
        assert!(!wal.exists(), "{name}: a WAL was made");
    }
    let empty = TempDb::new("empty-file");
    std::fs::write(&empty.path, b"").unwrap();
    let server = Server::start(&empty, &[]);
    let (status, _) = server.post("k-empty", &charge(1));
    assert_eq!(status, 202);
}

/// Run the server expecting it to refuse to start: if it is still running
/// after a generous deadline, it started, which fails the test.
fn refused_start(args: &[&str]) -> std::process::Output {
    support::run_bounded(SERVER_BIN, args)
}
