//! A real full file system under the real server: a small tmpfs holds the
//! database, 48 clients post calls with 60 KB args until it fills, and one
//! filler file is freed each time it has filled again. Batches that
//! large spill SQLite's page cache into the WAL mid-transaction, and when that
//! write hits `ENOSPC` SQLite rolls the whole transaction back. The invariant:
//! no call answered `202` is lost — every one is still there after space is
//! freed and after a restart — and the requests that could not be written are
//! answered `503` (never `500`).
//!
//! Mounting needs root (CI runs as root); the mount is undone on drop, after the
//! server that holds its files has been killed.

use crate::support;

use crate::support::tmpfs::{is_root, Tmpfs};
use crate::support::Http;
use crate::support::{Server, TempDb};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

/// Fill the rest of the file system with 256 KiB files, so the next writes
/// meet `ENOSPC`; returns them in the order to free them.
fn fill(dir: &Path) -> Vec<PathBuf> {
    let block = vec![0u8; 256 * 1024];
    let mut files = Vec::new();
    loop {
        let path = dir.join(format!("filler-{}", files.len()));
        let written = std::fs::write(&path, &block);
        files.push(path);
        if written.is_err() {
            return files;
        }
    }
}

/// Each time the load has met a full disk again, free one filler file: the
/// disk keeps filling up again, mid-batch, under a load that keeps writing,
/// however fast or slow this machine is.
fn free_after_each_full(files: &mut Vec<PathBuf>, outcomes: &Mutex<Outcomes>, done: &AtomicBool) {
    let mut seen = 0;
    while !done.load(Ordering::SeqCst) {
        let unavailable = outcomes.lock().unwrap().unavailable();
        if unavailable > seen {
            seen = unavailable;
            if let Some(file) = files.pop() {
                let _ = std::fs::remove_file(file);
            }
        }
        thread::sleep(Duration::from_millis(20));
    }
}

#[derive(Default)]
struct Outcomes {
    /// (key, call_id) of every answer `202`.
    accepted: Vec<(String, String)>,
    statuses: Vec<u16>,
}

impl Outcomes {
    fn unavailable(&self) -> usize {
        self.statuses.iter().filter(|s| **s == 503).count()
    }

    /// Enough of both: calls written between full disks, and refusals.
    fn enough(&self) -> bool {
        self.accepted.len() >= 40 && self.unavailable() >= 40
    }
}

/// 48 clients, each posting new keys with 60 KB args until `outcomes` has
/// enough of both answers (or a generous deadline passes).
fn post_until_enough(server: &Server, outcomes: &Mutex<Outcomes>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let padding = "x".repeat(60 * 1024);
    thread::scope(|scope| {
        for client in 0..48 {
            let padding = padding.clone();
            scope.spawn(move || {
                let mut n = 0;
                while Instant::now() < deadline && !outcomes.lock().unwrap().enough() {
                    let key = format!("full-{client}-{n}");
                    n += 1;
                    let body = json!({"tool": "send_email", "args": {"to": "a@example.com", "body": padding}});
                    let (status, reply) = server.post(&key, &body);
                    let mut o = outcomes.lock().unwrap();
                    o.statuses.push(status);
                    if status == 202 {
                        let call_id = reply["call_id"].as_str().unwrap().to_string();
                        o.accepted.push((key, call_id));
                    }
                }
            });
        }
    });
}

/// Every call answered `202` while the disk filled is still there once space
/// is freed, and again after a restart; what could not be written got `503`.
#[test]
fn a_full_disk_during_large_batches_loses_no_accepted_call() {
    let Some(fs) = Tmpfs::mount("24m") else {
        assert!(
            !is_root(),
            "running as root, but a tmpfs could not be mounted"
        );
        eprintln!("disk_full: not root, so no tmpfs; this test needs root (CI runs as root)");
        return;
    };
    let db = TempDb::at(fs.dir.join("idem.db"));
    let fillers = fs.dir.join("fillers");
    std::fs::create_dir(&fillers).unwrap();
    let mut server = Server::start(&db, &["--workers", "2"]);
    // Some room for the schema and the first calls, then a full disk.
    let (status, _) = server.post("warm-up", &support::charge(1));
    assert_eq!(status, 202);
    let mut files = fill(&fillers);
    let (outcomes, done) = (Mutex::new(Outcomes::default()), AtomicBool::new(false));
    thread::scope(|scope| {
        scope.spawn(|| free_after_each_full(&mut files, &outcomes, &done));
        post_until_enough(&server, &outcomes);
        done.store(true, Ordering::SeqCst);
    });
    let outcomes = outcomes.into_inner().unwrap();
    let unavailable = outcomes.unavailable();
    let internal = outcomes.statuses.iter().filter(|s| **s == 500).count();
    assert!(
        unavailable > 0 && !outcomes.accepted.is_empty(),
        "the disk must fill and empty again: {} answers, {} accepted, {unavailable} 503",
        outcomes.statuses.len(),
        outcomes.accepted.len()
    );
    assert_eq!(internal, 0, "a full disk must answer 503, not 500");

    std::fs::remove_dir_all(&fillers).unwrap();
    for (key, call_id) in &outcomes.accepted {
        let (status, call) = server.get(&format!("/v1/tool-calls/{call_id}"));
        assert!(
            status == 200 || status == 202,
            "{key} was answered 202 as {call_id}, now {status} {call}"
        );
    }
    server.kill();
    let restarted = Server::start(&db, &[]);
    let conn = restarted.sql();
    support::assert_each_accepted_call_kept(&conn, &outcomes.accepted);
    eprintln!(
        "disk_full: {} answers, {} accepted and all kept, {unavailable} answered 503",
        outcomes.statuses.len(),
        outcomes.accepted.len()
    );
    drop(conn);
    drop(restarted);
    drop(db);
    drop(fs);
}
