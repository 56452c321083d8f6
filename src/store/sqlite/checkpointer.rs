//! The checkpointer: the thread that folds the WAL back into the database
//! file, so the writer never does.
//!
//! SQLite's automatic checkpoint runs inside the `COMMIT` that crosses its
//! threshold, on the committing thread: with one writer thread, every
//! thousandth page or so a batch's answers waited for a checkpoint (about 7%
//! of the writer's time under load). The writer's connection therefore runs
//! with `wal_autocheckpoint=0`, and this thread, on its own connection, runs a
//! `PASSIVE` checkpoint after the writer says it committed (at most every
//! `PAUSE`): it copies what no reader still needs and never waits for, or
//! blocks, the writer or a reader.
//!
//! **Starting the WAL over.** SQLite rewinds the WAL only in a write
//! transaction that began when every frame was already copied, and under
//! load the writer begins its next batch right after each commit, before any
//! checkpoint can catch up. Forcing it with a `RESTART` checkpoint takes the
//! write lock until the copying and every reader of an old snapshot are done:
//! measured, that stopped the writer (its busy handler sleeping 1, 2, 5 ms
//! and more) a few times a second, and let the WAL reach 30–70 MB between
//! rewinds. So this thread never takes the write lock. Once the WAL holds
//! more than `bound` pages and a pass copied all it saw, it marks a rewind
//! due, and the writer, between two batches, runs one more `PASSIVE`
//! checkpoint itself (`finish_rewind`): it copies only the last few batches,
//! and its next batch starts the WAL from its beginning. A reader still
//! reading an old snapshot at that moment only postpones the rewind; if
//! such readers foil rewinds until the WAL is four times `bound`, this
//! thread forces one with a `RESTART`, as it once did at `bound` itself.
//! `journal_size_limit` on the writer is a few times `bound`, so a WAL that
//! rewinds near `bound` is never cut back (an `ftruncate` in the middle of a
//! `COMMIT` took 21 ms), and one that grew far past it is.
//!
//! A checkpoint syncs the WAL before it copies frames into the database file,
//! so it never makes a commit durable that was not already (see `syncer`),
//! and never loses one. After a failed sync (see `syncer`) the thread runs no
//! pass again and ends: a later sync can report success although the failed
//! write-back lost frames, and a pass would copy them into the database file.
//!
//! This module never writes a row and never answers a caller.

use super::super::error::StoreError;
use super::schema;
use super::syncer::Durability;
use crate::lock::lock;
use crate::log::{Repeats, BACKGROUND_FAILURE_EVERY};
use rusqlite::{ffi, Connection};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Fails again on every pass while the fault lasts: one line per interval.
static CHECKPOINT_FAILED: Repeats = Repeats::every(BACKGROUND_FAILURE_EVERY);

/// WAL pages past which a passive checkpoint that could not finish is
/// followed by a blocking one: 4 MiB of 1 KiB pages, about four seconds of
/// the heaviest load this service has seen.
pub(super) const WAL_BOUND_PAGES: u32 = 4096;

/// How many times the bound the WAL may grow while readers of old snapshots
/// keep foiling the writer's rewinds, before this thread forces one with a
/// `RESTART` (which stops the writer while it waits for those readers).
const STUCK_FACTOR: u32 = 4;

/// The WAL file's size, in pages, past which a rewound WAL is cut back
/// (`journal_size_limit`): where a stuck WAL is forced back, so that the
/// usual rewind, a little past the bound, never truncates the file inside a
/// `COMMIT`, and only a WAL that outgrew even that is cut.
pub(super) const WAL_FILE_LIMIT_PAGES: u32 = STUCK_FACTOR * WAL_BOUND_PAGES;

/// The least time between two checkpoints: lets a checkpoint carry many
/// batches' pages, and keeps its I/O from competing with every commit.
const PAUSE: Duration = Duration::from_millis(20);

/// How long the thread sleeps without a nudge before checking anyway (a
/// commit by another process on the same file does not nudge it).
const IDLE_CHECK: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Signal {
    /// The writer committed since the last checkpoint.
    committed: bool,
    stop: bool,
    /// Checkpoints run so far (the test waits for one).
    runs: u64,
}

/// The handle the writer keeps: `nudge` after each commit, `rewind_due`
/// between batches, `stop` once.
pub(super) struct Checkpointer {
    signal: Arc<(Mutex<Signal>, Condvar)>,
    /// Set by the thread when the writer should `finish_rewind`.
    rewind: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Open a connection of its own on `path` and start the thread, which
    /// ends for good once `durability` says a sync failed.
    pub(super) fn start(
        path: &Path,
        bound: u32,
        durability: Arc<Durability>,
    ) -> rusqlite::Result<Checkpointer> {
        let conn = Connection::open(path)?;
        // Long enough to outlast a batch; the `RESTART` of a stuck WAL waits
        // this long at most for readers before it gives up until the next nudge.
        conn.busy_timeout(Duration::from_secs(5))?;
        let signal = Arc::new((Mutex::new(Signal::default()), Condvar::new()));
        let rewind = Arc::new(AtomicBool::new(false));
        let (thread_signal, thread_rewind) = (Arc::clone(&signal), Arc::clone(&rewind));
        let thread = std::thread::Builder::new()
            .name("store-checkpointer".into())
            .spawn(move || {
                run(&conn, &thread_signal, &thread_rewind, bound, &durability);
                if durability.failure().is_some() {
                    schema::no_checkpoint_on_close(&conn);
                }
            })
            .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
        Ok(Checkpointer {
            signal,
            rewind,
            thread: Some(thread),
        })
    }

    /// Whether the writer should `finish_rewind` before its next batch
    /// (asked once: the answer is cleared).
    pub(super) fn rewind_due(&self) -> bool {
        self.rewind.swap(false, Ordering::Relaxed)
    }

    /// The writer committed: a checkpoint is due (soon, not now).
    pub(super) fn nudge(&self) {
        let (state, wake) = &*self.signal;
        let mut state = lock(state);
        if !state.committed {
            state.committed = true;
            wake.notify_one();
        }
    }

    /// Checkpoints run so far.
    #[cfg(test)]
    fn runs(&self) -> u64 {
        lock(&self.signal.0).runs
    }

    /// Whether the thread has ended by itself.
    #[cfg(test)]
    fn ended(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// End the thread and join it; the writer then runs its final checkpoint
    /// alone.
    pub(super) fn stop(&mut self) {
        let (state, wake) = &*self.signal;
        lock(state).stop = true;
        wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Checkpoint after each nudge until told to stop, or until a sync has failed.
fn run(
    conn: &Connection,
    signal: &(Mutex<Signal>, Condvar),
    rewind: &AtomicBool,
    bound: u32,
    durability: &Durability,
) {
    let (state, wake) = signal;
    loop {
        {
            let mut guard = lock(state);
            if !guard.committed && !guard.stop {
                guard = wake
                    .wait_timeout(guard, IDLE_CHECK)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            if guard.stop {
                return;
            }
            guard.committed = false;
        }
        if durability.failure().is_some() {
            return crate::log::warn("checkpoints stopped: a sync of the WAL failed")
                .event("checkpoints_stopped")
                .emit();
        }
        match checkpoint(conn, bound) {
            Ok(pass) if pass.rewind_due(bound) => rewind.store(true, Ordering::Relaxed),
            Ok(_) => {}
            Err(e) => judge_failed(&e, durability),
        }
        lock(state).runs += 1;
        std::thread::sleep(PAUSE);
    }
}

/// What one `PRAGMA wal_checkpoint` reported.
#[derive(Debug, Clone, Copy)]
pub(super) struct Checkpointed {
    /// Pages in the WAL.
    pub(super) wal_pages: i64,
    /// Of those, pages now in the database file.
    pub(super) copied: i64,
}

impl Checkpointed {
    /// The WAL is past `bound` and this pass copied every frame it saw: the
    /// writer's own pass will find only what was committed since.
    fn rewind_due(&self, bound: u32) -> bool {
        self.wal_pages > i64::from(bound) && self.copied == self.wal_pages
    }
}

/// A passive checkpoint; and, when rewinds have failed until the WAL is
/// `STUCK_FACTOR` times past `bound`, a `RESTART` that waits for the readers
/// of old snapshots (and holds the write lock meanwhile).
pub(super) fn checkpoint(conn: &Connection, bound: u32) -> rusqlite::Result<Checkpointed> {
    let pass = run_checkpoint(conn, "PASSIVE")?;
    if pass.wal_pages > i64::from(STUCK_FACTOR * bound) {
        return run_checkpoint(conn, "RESTART");
    }
    Ok(pass)
}

/// On the writer's connection, between two batches: a passive checkpoint
/// copies what the checkpointer has not yet (the last few batches), so the
/// writer's next transaction begins with every frame copied and starts the
/// WAL from its beginning. It waits for nobody: a reader still reading an
/// old snapshot at that moment only leaves the rewind to a later pass.
pub(super) fn finish_rewind(writer: &Connection) -> rusqlite::Result<Checkpointed> {
    run_checkpoint(writer, "PASSIVE")
}

/// A checkpoint that failed changed nothing, and the next commit's nudge
/// tries again — unless its sync failed. A checkpoint syncs the WAL before it
/// copies and the database file after; Linux reports a failed write-back to
/// each open descriptor once, so the syncer may never hear of this one, and
/// the next pass's sync would succeed over lost pages. So a failed sync here
/// fails the store as the syncer's would: nothing is checkpointed after it.
pub(super) fn judge_failed(e: &rusqlite::Error, durability: &Durability) {
    if !is_a_failed_sync(e) {
        return crate::log::warn("checkpoint failed; the next commit retries it")
            .event("checkpoint_failed")
            .cause(e)
            .emit_or_count(&CHECKPOINT_FAILED);
    }
    crate::log::error(
        "a checkpoint's sync failed; nothing more is written or read until the process is restarted",
    )
    .event("wal_sync_failed")
    .cause(e)
    .emit();
    durability.fail(StoreError::unavailable(format!(
        "a checkpoint's sync failed: {e}"
    )));
}

fn is_a_failed_sync(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(failure, _)
        if failure.extended_code == ffi::SQLITE_IOERR_FSYNC
            || failure.extended_code == ffi::SQLITE_IOERR_DIR_FSYNC)
}

fn run_checkpoint(conn: &Connection, mode: &str) -> rusqlite::Result<Checkpointed> {
    conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |r| {
        Ok(Checkpointed {
            wal_pages: r.get(1)?,
            copied: r.get(2)?,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::temp::TempDir;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Instant;

    const BOUND: u32 = 256;
    const PAGE: u64 = 1024;
    /// Commits between two waits for a checkpoint: about 350 WAL pages.
    const BATCHES_PER_CHECK: usize = 50;

    /// A writer connection as the store sets it up: 1 KiB pages, WAL, no
    /// automatic checkpoint, the WAL cut back to the bound when it restarts.
    fn writer(path: &Path) -> Connection {
        let conn = Connection::open(path).unwrap();
        // As the store's writer: `finish_rewind` waits this long at most.
        conn.busy_timeout(Duration::from_secs(5)).unwrap();
        conn.execute_batch(&format!(
            "PRAGMA page_size=1024; PRAGMA journal_mode=WAL; PRAGMA synchronous=OFF;
             PRAGMA wal_autocheckpoint=0; PRAGMA journal_size_limit={};
             CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, body TEXT NOT NULL);",
            u64::from(BOUND) * PAGE
        ))
        .unwrap();
        conn
    }

    /// Wait (with a deadline) until `checkpointer` has run once more.
    fn one_more_checkpoint(checkpointer: &Checkpointer) {
        let before = checkpointer.runs();
        checkpointer.nudge();
        let deadline = Instant::now() + Duration::from_secs(30);
        while checkpointer.runs() == before {
            assert!(Instant::now() < deadline, "no checkpoint within 30 s");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Write about 50 times the bound's worth of pages in small commits
    /// while a reader keeps reading; with a checkpointer, wait for one
    /// checkpoint every `BATCHES_PER_CHECK` commits, so the test does not
    /// depend on how fast this machine is. Returns the largest WAL seen.
    fn long_write_load(path: &Path, checkpointer: Option<&Checkpointer>) -> u64 {
        let conn = writer(path);
        let wal = path.with_extension("db-wal");
        let done = AtomicBool::new(false);
        let mut peak = 0;
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let reader = Connection::open(path).unwrap();
                while !done.load(Ordering::Relaxed) {
                    let _: i64 = reader
                        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
                        .unwrap();
                }
            });
            let body = "x".repeat(900);
            for batch in 1..=2_000 {
                conn.execute_batch("BEGIN IMMEDIATE").unwrap();
                for _ in 0..5 {
                    conn.execute("INSERT INTO t (body) VALUES (?1)", [&body])
                        .unwrap();
                }
                conn.execute_batch("COMMIT").unwrap();
                // What the store's writer does between two batches.
                if checkpointer.is_some_and(Checkpointer::rewind_due) {
                    finish_rewind(&conn).unwrap();
                }
                match checkpointer {
                    Some(c) if batch % BATCHES_PER_CHECK == 0 => one_more_checkpoint(c),
                    Some(c) => c.nudge(),
                    None => {}
                }
                peak = peak.max(std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0));
            }
            done.store(true, Ordering::Relaxed);
        });
        peak
    }

    /// Under a long write load with a reader always reading, the checkpointer
    /// keeps the WAL near its bound; the same load without it grows the WAL
    /// far past the bound (so the load is big enough to tell).
    #[test]
    fn the_wal_stays_bounded_under_a_long_write_load() {
        let dir = TempDir::new("idem-checkpointer").unwrap();
        let unchecked = long_write_load(&dir.join("unchecked.db"), None);
        assert!(
            unchecked > 20 * u64::from(BOUND) * PAGE,
            "without a checkpointer the WAL reached only {unchecked} bytes"
        );
        let path = dir.join("checked.db");
        drop(writer(&path));
        let mut checkpointer = Checkpointer::start(&path, BOUND, Arc::default()).unwrap();
        let peak = long_write_load(&path, Some(&checkpointer));
        checkpointer.stop();
        // The bound, plus what a few intervals between checks append: on a
        // loaded machine a rewind can lose to the always-reading reader for
        // a few checks in a row (seen at 6.2x the bound with builds running
        // beside it). Without the checkpointer the same load reaches ~60x.
        assert!(
            peak <= 12 * u64::from(BOUND) * PAGE,
            "the WAL reached {peak} bytes with the checkpointer on"
        );
    }

    /// Under load the checkpointer's pass lands while a batch is open, so
    /// the batch after it never finds every frame copied and SQLite never
    /// starts the WAL over by itself. The writer's own pass between batches
    /// (`finish_rewind`, when a pass says a rewind is due) does: the WAL
    /// starts over a little past the bound, far below the `RESTART` that a
    /// stuck WAL gets. Both connections run on this thread, in that order.
    #[test]
    fn the_writers_own_pass_starts_the_wal_over_near_the_bound() {
        let dir = TempDir::new("idem-checkpointer").unwrap();
        let path = dir.join("rewound.db");
        let conn = writer(&path);
        let other = Connection::open(&path).unwrap();
        // The batch holds the write lock on this very thread: a `RESTART`
        // must not wait for it.
        other.busy_timeout(Duration::ZERO).unwrap();
        let wal = path.with_extension("db-wal");
        let body = "x".repeat(900);
        let mut peak = 0;
        for _ in 0..400 {
            conn.execute_batch("BEGIN IMMEDIATE").unwrap();
            for _ in 0..5 {
                conn.execute("INSERT INTO t (body) VALUES (?1)", [&body])
                    .unwrap();
            }
            let pass = checkpoint(&other, BOUND).unwrap();
            conn.execute_batch("COMMIT").unwrap();
            if pass.rewind_due(BOUND) {
                finish_rewind(&conn).unwrap();
            }
            peak = peak.max(std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0));
        }
        assert!(
            peak < 2 * u64::from(BOUND) * PAGE,
            "the WAL reached {peak} bytes"
        );
    }

    /// Once a sync has failed, a nudge ends the thread without a pass: the
    /// row committed after the last good sync stays in the WAL only.
    #[test]
    fn no_pass_runs_once_a_sync_has_failed() {
        let dir = TempDir::new("idem-checkpointer").unwrap();
        let path = dir.join("failed.db");
        let conn = writer(&path);
        conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
            .unwrap();
        conn.execute("INSERT INTO t (body) VALUES ('not synced')", [])
            .unwrap();
        let durability = Arc::new(Durability::default());
        durability.fail(super::super::super::StoreError::unavailable("EIO"));
        let mut checkpointer = Checkpointer::start(&path, BOUND, durability).unwrap();
        checkpointer.nudge();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !checkpointer.ended() {
            assert!(Instant::now() < deadline, "the thread did not end");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(checkpointer.runs(), 0);
        checkpointer.stop();
        assert_eq!(
            rows_in_the_file_alone(&path),
            0,
            "a pass copied the unsynced row"
        );
    }

    /// A checkpoint whose own sync failed fails the store like the syncer's
    /// would; any other failure (a lock held elsewhere) is retried.
    #[test]
    fn a_checkpoint_whose_sync_failed_fails_the_store() {
        let failure = |code| rusqlite::Error::SqliteFailure(ffi::Error::new(code), None);
        let durability = Durability::default();
        judge_failed(&failure(ffi::SQLITE_BUSY), &durability);
        judge_failed(&failure(ffi::SQLITE_IOERR_WRITE), &durability);
        assert!(durability.failure().is_none());
        judge_failed(&failure(ffi::SQLITE_IOERR_FSYNC), &durability);
        let failed = durability.failure().map(|e| e.to_string());
        assert!(
            failed
                .as_deref()
                .is_some_and(|e| e.contains("a checkpoint's sync failed")),
            "{failed:?}"
        );
    }

    /// The rows of `t` in the database file without its WAL, read from a copy.
    /// Meaningful here because nothing holds a checkpoint back: a pass that
    /// runs copies the whole WAL (a pass held back by a reader can leave the
    /// file alone inconsistent, which is fine for SQLite while the WAL exists).
    fn rows_in_the_file_alone(path: &Path) -> i64 {
        let dir = TempDir::new("idem-file-alone").unwrap();
        let copy = dir.join("copy.db");
        std::fs::copy(path, &copy).unwrap();
        let conn = Connection::open(&copy).unwrap();
        conn.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap()
    }
}
