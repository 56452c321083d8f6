//! `idempotent-tool backup` against the real binaries: a copy taken while
//! clients post new keys the whole time holds every call acknowledged before
//! the backup began, verifies clean, and the service kept acknowledging
//! calls while it ran (a reader does not stop the writer); and its refusals
//! (an existing destination, another program's file, a PostgreSQL URL, a
//! deployment's tools file it was not given) with their exit statuses,
//! leaving nothing behind.

use crate::support::{charge, run_bounded, Counts, Http, Server, TempDb, SERVER_BIN};
use idempotent_tool::temp::TempDir;
use std::collections::HashSet;
use std::process::Output;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// Keys acknowledged (`202`/`200`), when the answer arrived and how long
/// the request took.
type Acknowledged = Arc<Mutex<Vec<(String, Instant, Duration)>>>;

/// Clients posting new keys until `stop`, recording each acknowledgement.
fn start_load(
    server: &Server,
    clients: usize,
    stop: &Arc<AtomicBool>,
    acked: &Acknowledged,
) -> Vec<thread::JoinHandle<()>> {
    (0..clients)
        .map(|client| {
            let base = server.base.clone();
            let (stop, acked) = (Arc::clone(stop), Arc::clone(acked));
            thread::spawn(move || {
                let server = Remote(base);
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("load-{client}-{n}");
                    let sent = Instant::now();
                    let (status, _) = server.post(&key, &charge(1));
                    if status == 202 || status == 200 {
                        let now = Instant::now();
                        acked.lock().unwrap().push((key, now, now - sent));
                    }
                    n += 1;
                }
            })
        })
        .collect()
}

/// A server known only by its address, for the load threads.
struct Remote(String);

impl Http for Remote {
    fn base(&self) -> &str {
        &self.0
    }

    fn context(&self) -> String {
        String::new()
    }
}

/// Run a subcommand to completion (killed past the deadline).
fn run(args: &[&str]) -> Output {
    run_bounded(SERVER_BIN, args)
}

fn keys_in(copy: &std::path::Path) -> HashSet<String> {
    let conn = rusqlite::Connection::open(copy).expect("open the copy");
    let mut keys = conn.prepare("SELECT idem_key FROM calls").unwrap();
    let found = keys
        .query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    found
}

/// Under a steady load of new keys, the copy holds every call acknowledged
/// before the backup began and verifies clean, while the service went on
/// acknowledging calls during the copy.
#[test]
fn a_backup_under_load_holds_every_call_acknowledged_before_it_and_verifies_clean() {
    let db = TempDb::new("backup-load");
    let server = Server::start(&db, &["--access-log", "off"]);
    let dir = TempDir::new("backup-copy").unwrap();
    let copy = dir.join("copy.db");
    let (stop, acked): (Arc<AtomicBool>, Acknowledged) = Default::default();
    let load = start_load(&server, 3, &stop, &acked);
    crate::support::eventually("300 calls acknowledged", || {
        acked.lock().unwrap().len() >= 300
    });

    let began = Instant::now();
    let before: Vec<String> = acked
        .lock()
        .unwrap()
        .iter()
        .map(|(k, ..)| k.clone())
        .collect();
    // Small steps with a pause between them: the copy takes a while, and
    // the load goes on throughout it.
    let args = [
        "backup",
        "--db",
        db.path_str(),
        "--to",
        copy.to_str().unwrap(),
    ];
    let out = run(&[&args[..], &["--step-pages", "4", "--pause-ms", "10"]].concat());
    let ended = Instant::now();
    stop.store(true, Ordering::Relaxed);
    load.into_iter().for_each(|t| t.join().unwrap());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains("backup ok") && stdout.contains("violations 0"),
        "{stdout}"
    );

    let in_copy = keys_in(&copy);
    let missing: Vec<&String> = before.iter().filter(|k| !in_copy.contains(*k)).collect();
    assert!(
        missing.is_empty(),
        "acknowledged before the backup, not in the copy: {missing:?}"
    );
    let acked = acked.lock().unwrap();
    let slowest = |from: Instant, to: Instant| {
        let answered = acked.iter().filter(|(_, at, _)| *at > from && *at < to);
        let took: Vec<Duration> = answered.map(|(.., took)| *took).collect();
        (took.len(), took.into_iter().max().unwrap_or_default())
    };
    let (during, slowest_during) = slowest(began, ended);
    let (_, slowest_before) = slowest(began - (ended - began), began);
    assert!(
        during > 0,
        "no call was acknowledged while the backup ran:\n{stdout}"
    );
    let verify = run(&["verify", "--db", copy.to_str().unwrap()]);
    assert_eq!(verify.status.code(), Some(0), "{verify:?}");
    // Restored, the copy serves: a key from before the backup replays its call.
    let copied_id: String = rusqlite::Connection::open(&copy)
        .unwrap()
        .query_row(
            "SELECT call_id FROM calls WHERE idem_key = ?1",
            [&before[0]],
            |r| r.get(0),
        )
        .unwrap();
    let restored_db = TempDb::at(copy.clone());
    let snapshot = snapshot_of(&stdout);
    let restored = Server::start(&restored_db, &["--accept-restored-copy", &snapshot]);
    let (status, call) = restored.post(&before[0], &charge(1));
    assert!(status == 200 || status == 202, "{status} {call}");
    assert_eq!(call["call_id"].as_str(), Some(copied_id.as_str()), "{call}");
    println!(
        "backup under load: {} acknowledged before, {} in the copy, {} acknowledged during \
         the {} ms backup (slowest POST {:?}; {:?} in as long before it), {} in the live \
         database after\n{stdout}",
        before.len(),
        in_copy.len(),
        during,
        (ended - began).as_millis(),
        slowest_during,
        slowest_before,
        db.calls()
    );
}

/// An existing destination (2), another program's file or no file (3), and
/// a PostgreSQL URL (2) are refused, and no copy is left behind.
#[test]
fn backup_refuses_what_it_must_not_copy_or_overwrite() {
    let dir = TempDir::new("backup-refusals").unwrap();
    let (to, path) = (dir.join("copy.db"), |p: &std::path::PathBuf| {
        p.to_str().unwrap().to_string()
    });
    let other = dir.join("other.db");
    rusqlite::Connection::open(&other)
        .unwrap()
        .execute_batch("CREATE TABLE users (id INTEGER)")
        .unwrap();
    std::fs::write(dir.join("taken.db"), b"mine").unwrap();
    let db = TempDb::new("backup-source");
    drop(Server::start(&db, &[]));
    for (from, dest, status, says) in [
        (
            path(&other),
            path(&to),
            3,
            "not an idempotent-tool database",
        ),
        (path(&dir.join("none.db")), path(&to), 3, "no such file"),
        (
            db.path_str().into(),
            path(&dir.join("taken.db")),
            2,
            "never overwrites",
        ),
        ("postgres://u@h/db".into(), path(&to), 2, "pg_dump"),
    ] {
        let out = run(&["backup", "--db", &from, "--to", &dest]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(status), "{from}: {stderr}");
        assert!(
            stderr.contains(says) && stderr.lines().count() == 1,
            "{stderr}"
        );
    }
    assert!(!to.exists());
    assert_eq!(std::fs::read(dir.join("taken.db")).unwrap(), b"mine");
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".partial"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let stopped = run(&["backup", "--db", db.path_str(), "--to", &path(&to)]);
    assert_eq!(stopped.status.code(), Some(0), "{stopped:?}");
}

/// On a deployment with a tools file, `backup` without `--tools` cannot
/// tell which tools write effects: it makes no copy (exit 2), so the same
/// command run again fails the same way rather than on a copy it left
/// behind; with `--tools` the copy is made and verifies clean (exit 0).
#[test]
fn without_the_tools_file_it_needs_no_copy_is_made() {
    let tools = crate::support::downstream::ToolsFile::write(&serde_json::json!({"tools": {
        "probe": {"kind": "command", "argv": ["/bin/echo", "{}"], "timeout_ms": 10000}
    }}));
    let db = TempDb::new("backup-tools");
    let server = Server::start(&db, &["--tools", tools.path_str()]);
    let body = serde_json::json!({"tool": "probe", "args": {}});
    let (status, call) = server.post("probe-1", &body);
    assert_eq!(status, 202, "{call}");
    server.wait_terminal(call["call_id"].as_str().unwrap());
    let dir = TempDir::new("backup-tools-copy").unwrap();
    let to = dir.join("nightly.db");
    let args = [
        "backup",
        "--db",
        db.path_str(),
        "--to",
        to.to_str().unwrap(),
    ];
    for _ in 0..2 {
        let out = run(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("(probe)") && stderr.contains("--tools FILE"),
            "{stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert!(left.is_empty(), "a copy was left: {left:?}");
    }
    let out = run(&[&args[..], &["--tools", tools.path_str()]].concat());
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(to.exists());
}

/// The snapshot's time `backup` printed (`marked ... --accept-restored-copy TIME`).
fn snapshot_of(stdout: &str) -> String {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("marked "))
        .unwrap_or_else(|| panic!("no `marked` line in {stdout}"));
    line.rsplit(' ').next().unwrap().to_string()
}

/// A restored copy cannot silently forget: the service refuses to start on
/// it (exit 3, one line naming the snapshot and what may run again, the
/// file not written), until started with `--accept-restored-copy` and that
/// snapshot's time, which it records in the audit (a row of no call) and
/// the log; a time naming another snapshot is refused too. The key
/// accepted after the snapshot then makes a new call: the hazard accepted.
#[test]
fn a_restored_copy_is_refused_until_its_snapshot_is_accepted() {
    let db = TempDb::new("backup-restore");
    let server = Server::start(&db, &[]);
    let (status, before) = server.post("before-1", &charge(1));
    assert_eq!(status, 202, "{before}");
    server.wait_terminal(before["call_id"].as_str().unwrap());
    let dir = TempDir::new("backup-restore-copy").unwrap();
    let copy = dir.join("idem-1.db");
    let out = run(&[
        "backup",
        "--db",
        db.path_str(),
        "--to",
        copy.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let snapshot = snapshot_of(&stdout);
    assert!(
        stdout.contains(&format!("snapshot  taken after {snapshot} ")),
        "{stdout}"
    );
    let (status, after) = server.post("after-1", &charge(1));
    assert_eq!(status, 202, "{after}");
    drop(server);

    let restored = TempDb::at(copy.clone());
    let bytes = std::fs::read(&copy).unwrap();
    let start = |extra: &[&str]| {
        let args = [&["--port", "0", "--db", restored.path_str()][..], extra].concat();
        run(&args)
    };
    for (extra, names_another) in [
        (&[][..], false),
        (
            &["--accept-restored-copy", "2020-01-01T00:00:00.000Z"][..],
            true,
        ),
    ] {
        let refused = start(extra);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(3), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        for says in [
            format!("its snapshot at {snapshot}"),
            "calls accepted after then are not in it".to_string(),
            format!("start once with --accept-restored-copy {snapshot}"),
            db.path_str().to_string(),
        ] {
            assert!(stderr.contains(&says), "{says:?} in {stderr}");
        }
        assert_eq!(stderr.contains("names another snapshot"), names_another);
        assert_eq!(
            std::fs::read(&copy).unwrap(),
            bytes,
            "a refused copy was written"
        );
    }

    let server = Server::start(&restored, &["--accept-restored-copy", &snapshot]);
    let logged = server
        .proc
        .wait_for_stderr("\"event\":\"restored_copy_accepted\"");
    assert!(
        logged.contains(&format!("\"snapshot\":\"{snapshot}\"")),
        "{logged}"
    );
    let audit: Vec<(Option<String>, String, String)> = {
        let conn = server.sql();
        let mut rows = conn
            .prepare("SELECT call_id, event, detail FROM audit WHERE call_id IS NULL")
            .unwrap();
        let found = rows
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        found
    };
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!(audit[0].1, "restored_copy_accepted");
    assert!(audit[0].2.contains(&snapshot), "{audit:?}");
    let (_, replay) = server.post("before-1", &charge(1));
    assert_eq!(replay["call_id"], before["call_id"], "{replay}");
    let (status, again) = server.post("after-1", &charge(1));
    assert_eq!(status, 202, "{again}");
    assert_ne!(again["call_id"], after["call_id"], "the copy knew after-1");
    drop(server);
    // Accepted once: the mark is gone, and the next start needs no flag.
    drop(Server::start(&restored, &[]));
}
