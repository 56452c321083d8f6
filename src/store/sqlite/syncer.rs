//! The syncer: the thread that makes committed batches durable, so the
//! writer does not wait for the disk, and the one gate every answer passes.
//!
//! The writer commits with `synchronous=NORMAL`: `COMMIT` appends the
//! batch's frames to the WAL and returns without `fdatasync`, and the writer
//! starts the next batch at once. Each committed batch, with its callers'
//! answers, is handed here; this thread `fdatasync`s the WAL file (one sync
//! covers every batch committed before it began: the frames are already in
//! the file), and only then marks those batches synced and answers their
//! callers. A batch's answers therefore still wait for a sync that covers it,
//! but the writer's next batch runs while the disk flushes.
//!
//! **Reads.** A committed batch is visible to every reader at once, synced
//! or not, so a read could show another client a state that a power cut
//! would take back. `Durability` closes that gap: the writer numbers each
//! batch before its `COMMIT` starts (`begin_commit`), and a read, once it has
//! run, waits until every batch numbered by then is synced
//! (`wait_until_visible_is_synced`). Any batch the read could have seen began
//! its `COMMIT` before the read's snapshot, so it is covered. A read never
//! waits when nothing is in flight (the same-key path under a read-only
//! load), and otherwise waits at most one sync.
//!
//! **Other processes on the same file** see our unsynced frames too, and
//! their reads do not pass our gate. So the writer commits with
//! `synchronous=FULL` (SQLite syncs before the frames become visible) while
//! any other process is registered in `instances` and not stopped, checked
//! inside each batch's transaction (see `writer::SyncMode`); a process that
//! registers does so with a `FULL` commit, whose sync also covers every frame
//! written before it.
//!
//! **A failed sync** (`EIO`): Linux may already have dropped the unsynced
//! pages, so no commit since the last good sync may be called durable, and
//! later frames chain onto them. Every waiting answer becomes `Unavailable`,
//! every later write and gated read is refused, and the process must be
//! restarted (SQLite's recovery then keeps exactly the frames that reached
//! the disk whole). Nothing in the process checkpoints after that, not even
//! as its last connection closes: a checkpoint would copy frames the failed
//! write-back may have lost into the database file, beyond recovery's reach
//! (`schema::no_checkpoint_on_close`).
//!
//! This module never runs SQL; it only syncs a file and releases answers.

use super::super::error::StoreError;
use crate::lock::lock;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What makes the WAL durable: `fdatasync` on the real file, something
/// else in the tests that model a power cut.
pub(super) type SyncWal = Box<dyn FnMut() -> std::io::Result<()> + Send>;

/// One answer, told the batch's fate once its sync is known.
pub(super) type Reply = Box<dyn FnOnce(Result<(), &StoreError>) + Send>;

/// How far commits and syncs have got: shared by the writer, this thread
/// and every reader.
#[derive(Default)]
pub(super) struct Durability {
    /// Batches whose `COMMIT` has begun, numbered from 1.
    committing: AtomicU64,
    /// Every batch up to this number is synced (a copy of `state.synced`
    /// that readers check without the lock).
    synced_fast: AtomicU64,
    /// A sync has failed (`state.failed` is set), for the same readers.
    failed_fast: AtomicBool,
    state: Mutex<Synced>,
    advanced: Condvar,
}

#[derive(Default)]
struct Synced {
    synced: u64,
    /// Set once a sync failed: nothing from then on is durable.
    failed: Option<StoreError>,
}

impl Durability {
    /// Number the batch whose `COMMIT` is about to start.
    pub(super) fn begin_commit(&self) -> u64 {
        self.committing.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Why nothing may be written any more, if a sync failed.
    pub(super) fn failure(&self) -> Option<StoreError> {
        lock(&self.state).failed.clone()
    }

    /// Call after a read has run: wait until every batch whose `COMMIT` began
    /// before now is synced, so the read shows nothing a power cut could take
    /// back. `Unavailable` after `timeout`, or if a sync failed — even with
    /// every batch synced: the failed sync may be a checkpoint's, and the
    /// pages it could not write back are still what a read of the file sees.
    pub(super) fn wait_until_visible_is_synced(&self, timeout: Duration) -> Result<(), StoreError> {
        let target = self.committing.load(Ordering::SeqCst);
        if !self.failed_fast.load(Ordering::SeqCst)
            && self.synced_fast.load(Ordering::SeqCst) >= target
        {
            return Ok(());
        }
        let deadline = Instant::now() + timeout;
        let mut state = lock(&self.state);
        loop {
            if let Some(why) = &state.failed {
                return Err(why.clone());
            }
            if state.synced >= target {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(StoreError::unavailable(format!(
                    "what this read saw was not yet on disk after {timeout:?}"
                )));
            }
            state = self
                .advanced
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    fn synced_through(&self, batch: u64) {
        let mut state = lock(&self.state);
        state.synced = state.synced.max(batch);
        self.synced_fast.store(state.synced, Ordering::SeqCst);
        self.advanced.notify_all();
    }

    pub(super) fn fail(&self, why: StoreError) {
        lock(&self.state).failed.get_or_insert(why);
        self.failed_fast.store(true, Ordering::SeqCst);
        self.advanced.notify_all();
    }
}

/// A committed (or failed) batch waiting for its sync.
pub(super) struct Committed {
    /// From `Durability::begin_commit`.
    pub(super) batch: u64,
    pub(super) replies: Vec<Reply>,
    /// What `COMMIT` said; an error is answered as it is, after the sync
    /// all the same, so answers go out in commit order.
    pub(super) outcome: Result<(), StoreError>,
}

/// The handle the writer keeps.
pub(super) struct Syncer {
    queue: Option<mpsc::Sender<Committed>>,
    thread: Option<JoinHandle<()>>,
}

impl Syncer {
    /// Start the thread; `released(n)` is called after each group of `n`
    /// answers has gone out.
    pub(super) fn start(
        sync: SyncWal,
        durability: Arc<Durability>,
        released: Box<dyn Fn(u64) + Send>,
    ) -> std::io::Result<Syncer> {
        let (queue, batches) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("store-syncer".into())
            .spawn(move || run(sync, &durability, &batches, &*released))?;
        Ok(Syncer {
            queue: Some(queue),
            thread: Some(thread),
        })
    }

    /// Hand over a batch whose `COMMIT` has returned.
    pub(super) fn hand_over(&self, committed: Committed) {
        if let Some(queue) = &self.queue {
            // The thread only ends once the queue is dropped, in `stop`.
            let _ = queue.send(committed);
        }
    }

    /// Sync and answer everything handed over, then end the thread.
    pub(super) fn stop(&mut self) {
        drop(self.queue.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run(
    mut sync: SyncWal,
    durability: &Durability,
    batches: &mpsc::Receiver<Committed>,
    released: &dyn Fn(u64),
) {
    while let Ok(first) = batches.recv() {
        let mut group = vec![first];
        group.extend(batches.try_iter());
        let through = group.last().map_or(0, |c| c.batch);
        let synced = match durability.failure() {
            Some(e) => Err(e),
            None => sync().map_err(|e| sync_failed(&e)),
        };
        match &synced {
            Ok(()) => durability.synced_through(through),
            Err(e) => durability.fail(e.clone()),
        }
        let mut answered = 0;
        for committed in group {
            let outcome = synced.clone().and(committed.outcome);
            answered += committed.replies.len() as u64;
            for reply in committed.replies {
                reply(outcome.as_ref().map(|_| ()));
            }
        }
        released(answered);
    }
}

fn sync_failed(e: &std::io::Error) -> StoreError {
    crate::log::error(
        "syncing the WAL failed; nothing more is written or read until the process is restarted",
    )
    .event("wal_sync_failed")
    .cause(e)
    .emit();
    StoreError::unavailable(format!("syncing the WAL failed: {e}"))
}

/// `fdatasync` on `<database>-wal`, opened at the first sync (the WAL exists
/// from the first commit on) and kept: SQLite truncates and reuses the file,
/// never replaces it, while the writer's connection is open.
pub(super) fn fdatasync_wal(database: &Path) -> SyncWal {
    let mut wal = PathBuf::from(database).into_os_string();
    wal.push("-wal");
    let wal = PathBuf::from(wal);
    let mut file: Option<File> = None;
    Box::new(move || {
        let file = match &mut file {
            Some(file) => file,
            none => none.insert(File::open(&wal)?),
        };
        file.sync_data()
    })
}

#[cfg(test)]
mod tests {
    use super::super::reader_pool::Readers;
    use super::super::schema;
    use super::super::writer::Writer;
    use super::*;
    use crate::store::StoreOptions;
    use crate::store::Then;
    use crate::temp::TempDir;

    type Answers = mpsc::Receiver<Result<usize, StoreError>>;

    /// A store's writer on a fresh database whose WAL is made durable by
    /// `sync`, with a table `t` to write to.
    fn writer_with(path: &Path, sync: SyncWal) -> Writer {
        let conn = schema::open_writer(path, &StoreOptions::default()).unwrap();
        conn.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY)")
            .unwrap();
        Writer::start_with(conn, sync).unwrap()
    }

    fn insert_a_row(writer: &Writer) -> Answers {
        let (tx, rx) = mpsc::channel();
        let then: Then<usize> = Box::new(move |outcome| {
            let _ = tx.send(outcome);
        });
        writer.submit(
            |conn| conn.execute("INSERT INTO t DEFAULT VALUES", []),
            then,
        );
        rx
    }

    /// Readers of `path`, gated by `gate` if given. A gated read must be
    /// refused while unsynced state is in view, so it gives up after a
    /// second; an ungated one has all the time a loaded machine needs.
    fn readers(path: &Path, gate: Option<Arc<Durability>>) -> Readers {
        let within = match gate {
            Some(_) => Duration::from_secs(1),
            None => Duration::from_secs(30),
        };
        let options = StoreOptions::default().with_db_timeout(within);
        let readers = Readers::new(path, &options);
        match gate {
            Some(gate) => readers.gated_by(gate),
            None => readers,
        }
    }

    fn rows(readers: &Readers) -> Result<i64, StoreError> {
        readers.read(|conn| conn.query_row("SELECT count(*) FROM t", [], |r| r.get(0)))
    }

    /// The power cut: the syncer never gets its `fdatasync` through, so the
    /// batch is committed (an ungated connection sees its row) but nothing
    /// is durable. Then no caller may be answered, and no gated read may show
    /// the row; once the sync returns, both go through.
    #[test]
    fn nothing_unsynced_is_answered_or_read() {
        let dir = TempDir::new("idem-power-cut").unwrap();
        let path = dir.join("t.db");
        let (sync_now, syncs) = mpsc::channel::<()>();
        let writer = writer_with(
            &path,
            Box::new(move || syncs.recv().map_err(|_| std::io::Error::other("power cut"))),
        );
        let answer = insert_a_row(&writer);
        let raw = readers(&path, None);
        let deadline = Instant::now() + Duration::from_secs(30);
        while rows(&raw).unwrap() == 0 {
            assert!(Instant::now() < deadline, "the batch never committed");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            answer.recv_timeout(Duration::from_millis(300)).is_err(),
            "a caller was answered before its batch was synced"
        );
        let gated = readers(&path, Some(writer.durability()));
        let read = rows(&gated);
        assert!(
            matches!(read, Err(StoreError::Unavailable(_))),
            "a read showed unsynced state: {read:?}"
        );

        sync_now.send(()).unwrap();
        let answered = answer.recv_timeout(Duration::from_secs(30));
        assert_eq!(answered, Ok(Ok(1)));
        assert_eq!(rows(&gated), Ok(1));
        drop(sync_now);
        writer.stop();
    }

    /// A sync that fails may have lost what it was to make durable: the
    /// batch's caller is told `Unavailable`, and from then on every write and
    /// every gated read is refused instead of building on lost frames.
    /// A checkpoint's failed sync, with every batch already synced: reads
    /// are refused all the same (the fast path used to let them through).
    #[test]
    fn a_read_is_refused_after_a_failed_sync_with_nothing_in_flight() {
        let durability = Durability::default();
        let batch = durability.begin_commit();
        durability.synced_through(batch);
        assert!(durability
            .wait_until_visible_is_synced(Duration::ZERO)
            .is_ok());
        durability.fail(StoreError::unavailable("a checkpoint's sync failed"));
        assert!(matches!(
            durability.wait_until_visible_is_synced(Duration::ZERO),
            Err(StoreError::Unavailable(_))
        ));
    }

    #[test]
    fn a_failed_sync_refuses_everything_after_it() {
        let dir = TempDir::new("idem-sync-fails").unwrap();
        let path = dir.join("t.db");
        let writer = writer_with(&path, Box::new(|| Err(std::io::Error::other("EIO"))));
        assert!(writer.failure().is_none(), "nothing has failed yet");
        let first = insert_a_row(&writer).recv_timeout(Duration::from_secs(30));
        assert!(
            matches!(first, Ok(Err(StoreError::Unavailable(_)))),
            "{first:?}"
        );
        let later = insert_a_row(&writer).recv_timeout(Duration::from_secs(30));
        assert!(
            matches!(later, Ok(Err(StoreError::Unavailable(_)))),
            "{later:?}"
        );
        let gated = readers(&path, Some(writer.durability()));
        assert!(matches!(rows(&gated), Err(StoreError::Unavailable(_))));
        // What `/healthz` reports, said once: the cause is kept, not re-wrapped.
        let failure = writer.failure().map(|e| e.to_string());
        assert_eq!(
            failure.as_deref(),
            Some("database unavailable: syncing the WAL failed: EIO")
        );
        writer.stop();
    }

    /// After a failed sync nothing is copied from the WAL into the database
    /// file: not by the writer's final checkpoint, not by SQLite as the last
    /// connection closes, be it the writer's or a reader's. The failed
    /// write-back is modelled as Linux may leave it: the new bytes are gone,
    /// and reading the WAL back gives what the disk had. A checkpoint would
    /// copy that into the database file and drop the WAL; without one, the
    /// next open recovers the synced row, intact.
    #[test]
    fn nothing_is_checkpointed_after_a_failed_sync() {
        for readers_close_first in [false, true] {
            stop_after_a_failed_sync(readers_close_first);
        }
    }

    fn stop_after_a_failed_sync(readers_close_first: bool) {
        let dir = TempDir::new("idem-sync-fails-once").unwrap();
        let path = dir.join("t.db");
        let mut syncs = 0;
        let writer = writer_with(
            &path,
            Box::new(move || {
                syncs += 1;
                match syncs {
                    1 => Ok(()),
                    _ => Err(std::io::Error::other("EIO")),
                }
            }),
        );
        let synced = insert_a_row(&writer).recv_timeout(Duration::from_secs(30));
        assert_eq!(synced, Ok(Ok(1)));
        let wal = dir.join("t.db-wal");
        let on_disk = std::fs::read(&wal).unwrap();
        let failed = insert_a_row(&writer).recv_timeout(Duration::from_secs(30));
        assert!(matches!(failed, Ok(Err(StoreError::Unavailable(_)))));
        lose_the_unsynced_writes(&wal, &on_disk);
        let gated = readers(&path, Some(writer.durability()));
        assert!(rows(&gated).is_err(), "a read after the failure");
        if readers_close_first {
            gated.close();
        }
        writer.stop();
        drop(gated);

        let _ = std::fs::remove_file(dir.join("t.db-shm"));
        let conn = rusqlite::Connection::open(&path).unwrap();
        let check: String = conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(check, "ok", "a checkpoint copied lost frames");
        let rows: i64 = conn
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 1);
    }

    /// The file reads back as `on_disk`, its length kept: whatever was
    /// written since reads as what the disk had there (zeros past its end).
    fn lose_the_unsynced_writes(file: &Path, on_disk: &[u8]) {
        use std::os::unix::fs::FileExt;
        let handle = std::fs::OpenOptions::new().write(true).open(file).unwrap();
        let len = handle.metadata().unwrap().len() as usize;
        let mut bytes = on_disk.to_vec();
        bytes.resize(len.max(on_disk.len()), 0);
        handle.write_all_at(&bytes, 0).unwrap();
    }
}
