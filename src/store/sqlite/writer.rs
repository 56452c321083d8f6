//! The writer: the one thread that owns the write connection, and the one
//! place where commits are grouped.
//!
//! All writes go through one writer thread that owns the only
//! write connection. It takes every operation waiting in its channel, runs them in
//! one `BEGIN IMMEDIATE` transaction — each inside its own `SAVEPOINT`, so a
//! failing operation rolls back only itself — and commits once.
//!
//! **Why every operation keeps its savepoint.** A savepoint undoes the
//! statements an operation already ran when a later one fails. Every operation
//! of a call's path writes two or more rows and needs it: a creation (the call
//! and its `created` audit row), a claim, even of one call (the conditional
//! `UPDATE` and its `claimed` row), a completion (the effect, the fenced update,
//! the audit row), a release, recovery, a purge. Only a heartbeat,
//! `mark_stopped` and a lease extension (one `UPDATE` per lease, harmless if
//! some apply before one fails) could skip it; they are rare, and skipping it
//! for them paid nothing measurable (docs/journal/performance.md), so one rule
//! holds for all.
//!
//! **The durability rule, with the fsync pipelined.** The commit itself does
//! not wait for the disk (`synchronous=NORMAL`, see `sync_mode` for when it
//! is `FULL`): the writer numbers the batch, commits it, hands the callers'
//! answers to the syncer, and starts the next batch. The syncer
//! `fdatasync`s the WAL and only then answers them. So: no caller is
//! answered before a sync that covers its batch has returned; no read —
//! whoever asks — returns before every batch it could have seen is synced
//! (the read gate in `reader_pool`, and `FULL` commits while another process
//! shares the file); and an error answer means "retry with the same key".
//! A busy server pays one fsync per group of batches, and the writer's next
//! batch runs while the disk flushes. Semantics are unchanged: operations
//! in a batch run one after another on one connection, so each sees the previous
//! one's writes, and several processes on one file stay correct because each
//! batch is still one SQLite write transaction.
//!
//! **What the writer does with each SQLite error**: `savepoint`'s table.
//!
//! **Stopping.** `stop` queues a stop marker behind every write already queued:
//! those are committed and answered, then the thread ends and is joined. A job
//! that is dropped without having run (queued after the stop, or refused by a
//! stopped channel) answers its caller `Unavailable` from its `Drop`, so no
//! caller ever waits for an answer that cannot come.
//!
//! This module never decides a transition: it runs the operations it is given,
//! in order, and reports what `COMMIT` said. It never holds a transaction open
//! across anything but SQL.

use super::super::error::StoreError;
use super::super::model::{Then, WriterStats};
use super::checkpointer::{self, Checkpointer, WAL_BOUND_PAGES, WAL_FILE_LIMIT_PAGES};
use super::count_book::Book;
use super::savepoint::{in_savepoint, roll_back_if_open, BatchLost};
use super::schema;
use super::sync_mode::SyncMode;
use super::syncer::{fdatasync_wal, Committed, Durability, Reply, SyncWal, Syncer};
pub(super) use super::write_queue::Lane;
use super::write_queue::WriteQueue;
use crate::metrics::Metrics;
use rusqlite::Connection;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The most operations one commit carries; bounds how long the first waits.
const MAX_BATCH: usize = 512;

/// The writer's running totals behind `WriterStats`, what `/healthz` reads
/// to tell a stuck writer, and where each batch is reported for `/metrics`.
pub(super) struct WriterCounters {
    batches: AtomicU64,
    ops: AtomicU64,
    run_us: AtomicU64,
    commit_us: AtomicU64,
    /// Operations queued and not yet through a batch (committed or not).
    outstanding: AtomicU64,
    /// Microseconds since `epoch` when the writer last started or finished a
    /// batch: with work outstanding, the time since then is how long it has
    /// been stuck.
    last_progress_us: AtomicU64,
    epoch: Instant,
    metrics: OnceLock<Arc<Metrics>>,
}

impl Default for WriterCounters {
    fn default() -> Self {
        WriterCounters {
            batches: AtomicU64::new(0),
            ops: AtomicU64::new(0),
            run_us: AtomicU64::new(0),
            commit_us: AtomicU64::new(0),
            outstanding: AtomicU64::new(0),
            last_progress_us: AtomicU64::new(0),
            epoch: Instant::now(),
            metrics: OnceLock::new(),
        }
    }
}

impl WriterCounters {
    /// `n` queued operations went through a batch, answered or abandoned.
    /// Never more than were queued: that would be a job answered twice, and
    /// the wrapped count would read as a stuck writer.
    pub(super) fn settled(&self, n: u64) {
        let before = self.outstanding.fetch_sub(n, Ordering::Relaxed);
        debug_assert!(before >= n, "writer settled {n} of {before} outstanding");
    }

    fn progressed(&self) {
        let now = self.epoch.elapsed().as_micros() as u64;
        self.last_progress_us.store(now, Ordering::Relaxed);
    }

    /// How long the writer has had work outstanding without finishing or
    /// starting a batch; `None` when it has nothing to do.
    fn stuck_for(&self) -> Option<(Duration, u64)> {
        let outstanding = self.outstanding.load(Ordering::Relaxed);
        if outstanding == 0 {
            return None;
        }
        let last = Duration::from_micros(self.last_progress_us.load(Ordering::Relaxed));
        Some((self.epoch.elapsed().saturating_sub(last), outstanding))
    }

    fn record(&self, ops: usize, run: Duration, commit: Duration) {
        if let Some(metrics) = self.metrics.get() {
            metrics.observe_writer_batch(ops, commit);
        }
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.ops.fetch_add(ops as u64, Ordering::Relaxed);
        self.run_us
            .fetch_add(run.as_micros() as u64, Ordering::Relaxed);
        self.commit_us
            .fetch_add(commit.as_micros() as u64, Ordering::Relaxed);
    }

    fn snapshot(&self) -> WriterStats {
        WriterStats {
            batches: self.batches.load(Ordering::Relaxed),
            ops: self.ops.load(Ordering::Relaxed),
            run_us: self.run_us.load(Ordering::Relaxed),
            commit_us: self.commit_us.load(Ordering::Relaxed),
        }
    }
}

/// One queued write: run it inside the batch's transaction. Dropped without
/// running (the transaction could not begin, or SQLite ended it before this
/// job's turn, or the writer stopped), it answers its caller with an error.
trait WriteJob: Send {
    /// Run in a savepoint; returns what to tell the caller once the commit's
    /// fate is known, and whether the batch's transaction survived.
    fn run(self: Box<Self>, conn: &Connection) -> Step;
    /// Answer the caller with `err` instead of running.
    fn abandon(self: Box<Self>, err: &StoreError);
}

/// What running one job left behind.
enum Step {
    /// The transaction is still open; the job's outcome waits for `COMMIT`.
    Kept(Reply),
    /// The transaction is gone (SQLite rolled it back) or its savepoint could
    /// not be managed: every job of the batch is answered with this error.
    Broken(Reply, StoreError),
}

/// A write operation and what to do with its outcome; both are taken when it
/// runs or is abandoned, and whatever is left is answered on drop.
struct Job<T, F> {
    op: Option<F>,
    then: Option<Then<T>>,
}

impl<T, F> WriteJob for Job<T, F>
where
    T: Send + 'static,
    F: FnOnce(&Connection) -> rusqlite::Result<T> + Send,
{
    fn run(mut self: Box<Self>, conn: &Connection) -> Step {
        let (Some(op), Some(then)) = (self.op.take(), self.then.take()) else {
            unreachable!("a job runs once");
        };
        let reply_with = |outcome: Result<T, StoreError>| -> Reply {
            Box::new(move |commit| {
                then(match commit {
                    Ok(()) => outcome,
                    Err(e) => Err(e.clone()),
                })
            })
        };
        match in_savepoint(conn, op) {
            Ok(outcome) => Step::Kept(reply_with(outcome)),
            Err(BatchLost(err)) => Step::Broken(reply_with(Err(err.clone())), err),
        }
    }

    fn abandon(mut self: Box<Self>, err: &StoreError) {
        if let Some(then) = self.then.take() {
            then(Err(err.clone()))
        }
    }
}

impl<T, F> Drop for Job<T, F> {
    fn drop(&mut self) {
        if let Some(then) = self.then.take() {
            then(Err(StoreError::Unavailable("the store is stopping".into())))
        }
    }
}

/// The handle to the writer thread: its queue, its counters, how far its
/// commits are synced, and what `stop` joins.
pub(super) struct Writer {
    /// Every write goes through here, in one of two lanes.
    queue: Arc<WriteQueue<Box<dyn WriteJob>>>,
    counters: Arc<WriterCounters>,
    durability: Arc<Durability>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Writer {
    /// Start the writer thread on `conn`, the only write connection, with
    /// the checkpointer and the syncer beside it: from now on the writer
    /// does not wait for `fdatasync`, and checkpoints only to finish a WAL
    /// rewind between two batches (and once when it stops).
    pub(super) fn start(conn: Connection) -> std::io::Result<Writer> {
        let path = conn.path().filter(|p| !p.is_empty()).map(PathBuf::from);
        let sync = match &path {
            Some(path) => fdatasync_wal(path),
            // In memory: nothing to sync, and no other process to see it.
            None => Box::new(|| Ok(())),
        };
        Writer::start_with(conn, sync)
    }

    /// `start`, with what makes the WAL durable given (a test's power cut).
    pub(super) fn start_with(conn: Connection, sync: SyncWal) -> std::io::Result<Writer> {
        let path = conn.path().filter(|p| !p.is_empty()).map(PathBuf::from);
        let durability = Arc::new(Durability::default());
        let checkpointer = match &path {
            Some(path) => Some(
                start_checkpointer(&conn, path, Arc::clone(&durability))
                    .map_err(std::io::Error::other)?,
            ),
            None => None,
        };
        let queue = Arc::new(WriteQueue::new());
        let messages = Arc::clone(&queue);
        let counters = Arc::new(WriterCounters::default());
        let released_counters = Arc::clone(&counters);
        let syncer = Syncer::start(
            sync,
            Arc::clone(&durability),
            Box::new(move |answered| {
                released_counters.settled(answered);
                released_counters.progressed();
            }),
        )?;
        let thread = WriterThread {
            conn,
            counters: Arc::clone(&counters),
            durability: Arc::clone(&durability),
            mode: SyncMode::new(path.is_some()),
            checkpointer,
            syncer,
        };
        let thread = std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || thread.run(messages))?;
        Ok(Writer {
            queue,
            counters,
            durability,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// How far commits are synced: what every read waits on.
    pub(super) fn durability(&self) -> Arc<Durability> {
        Arc::clone(&self.durability)
    }

    /// Queue `op` without waiting; `then` runs on the syncer's thread once
    /// the batch's commit is known and synced (or with an error if it never
    /// runs).
    pub(super) fn submit<T, F>(&self, op: F, then: Then<T>)
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        self.submit_in(Lane::First, op, then)
    }

    /// `submit` in the given lane: creations wait behind everything else.
    pub(super) fn submit_in<T, F>(&self, lane: Lane, op: F, then: Then<T>)
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let job = Job {
            op: Some(op),
            then: Some(then),
        };
        if self.counters.outstanding.fetch_add(1, Ordering::Relaxed) == 0 {
            // Idle until now: the wait for this job starts here.
            self.counters.progressed();
        }
        // A stopped writer refuses the job; dropping it answers its caller.
        let _ = self.queue.push(lane, Box::new(job));
    }

    /// Commit everything already queued, then end the thread and join it.
    /// Idempotent.
    pub(super) fn stop(&self) {
        self.queue.stop();
        let thread = crate::lock::lock(&self.thread).take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }

    pub(super) fn stats(&self) -> WriterStats {
        self.counters.snapshot()
    }

    /// How long the writer has had work queued without progress, and how
    /// many operations; `None` when idle.
    pub(super) fn stuck_for(&self) -> Option<(Duration, u64)> {
        self.counters.stuck_for()
    }

    /// Why nothing can be written until the process restarts: a sync failed.
    pub(super) fn failure(&self) -> Option<StoreError> {
        self.durability.failure()
    }

    /// Report every batch from now on to `metrics` (set once).
    pub(super) fn report_to(&self, metrics: Arc<Metrics>) {
        let _ = self.counters.metrics.set(metrics);
    }
}

impl Drop for Writer {
    /// A store dropped without `stop` still lets its thread commit what is
    /// queued and end, rather than wait for writes forever.
    fn drop(&mut self) {
        self.queue.stop();
    }
}

/// What the writer thread owns.
struct WriterThread {
    conn: Connection,
    counters: Arc<WriterCounters>,
    durability: Arc<Durability>,
    mode: SyncMode,
    checkpointer: Option<Checkpointer>,
    syncer: Syncer,
}

impl WriterThread {
    /// The single place where commits are grouped.
    fn run(mut self, queue: Arc<WriteQueue<Box<dyn WriteJob>>>) {
        while let Some(batch) = queue.take(MAX_BATCH) {
            self.counters.progressed();
            self.commit_batch(batch);
            if let Some(checkpointer) = &self.checkpointer {
                if checkpointer.rewind_due() {
                    self.finish_rewind();
                }
                checkpointer.nudge();
            }
        }
        // Every answer already handed over goes out once synced.
        self.syncer.stop();
        if let Some(checkpointer) = self.checkpointer.as_mut() {
            checkpointer.stop();
        }
        // A job offered after the stop is refused and dropped, which answers
        // its caller.
        self.final_checkpoint();
    }

    /// A stopped process leaves the WAL folded into the database file, so
    /// the file alone is the whole state — unless a sync failed: then the
    /// WAL stays as it is, for the next start's recovery to judge (see
    /// `schema::no_checkpoint_on_close`).
    fn final_checkpoint(&self) {
        if self.durability.failure().is_some() {
            schema::no_checkpoint_on_close(&self.conn);
            return crate::log::warn(
                "final checkpoint skipped: a sync of the WAL failed; the next start recovers the WAL",
            )
            .event("checkpoints_stopped")
            .emit();
        }
        if let Err(e) = self.conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)") {
            crate::log::warn("final checkpoint failed")
                .event("checkpoint_failed")
                .cause(&e)
                .emit();
        }
    }

    /// Between two batches, when the checkpointer asks: copy the frames it
    /// has not, so the next batch starts the WAL over (see `checkpointer`).
    fn finish_rewind(&self) {
        // Never after a failed sync: see `schema::no_checkpoint_on_close`.
        if self.durability.failure().is_some() {
            return;
        }
        if let Err(e) = checkpointer::finish_rewind(&self.conn) {
            checkpointer::judge_failed(&e, &self.durability);
        }
    }

    /// One transaction for the whole batch; each job in its own savepoint.
    /// Replies go to the syncer, which sends them only after a sync that
    /// covers this `COMMIT`, so every answer describes durable state. If SQLite
    /// ends the transaction early, or `COMMIT` fails, no job of the batch is
    /// told it committed, and no job after that point runs at all.
    fn commit_batch(&mut self, batch: Vec<Box<dyn WriteJob>>) {
        let started = Instant::now();
        let ops = batch.len();
        if let Err(e) = self.begin_batch() {
            batch.into_iter().for_each(|job| job.abandon(&e));
            self.counters.settled(ops as u64);
            return;
        }
        let conn = &self.conn;
        // The count tables' notes of this batch's operations, folded in just
        // before COMMIT (`count_book`).
        Book::open();
        let mut jobs = batch.into_iter();
        let mut replies: Vec<Reply> = Vec::with_capacity(ops);
        let mut lost = None;
        for job in jobs.by_ref() {
            match job.run(conn) {
                Step::Kept(reply) => replies.push(reply),
                Step::Broken(reply, err) => {
                    replies.push(reply);
                    lost = Some(err);
                    break;
                }
            }
        }
        let committing = Instant::now();
        let batch_number = self.durability.begin_commit();
        let outcome = match lost {
            Some(err) => {
                Book::discard();
                Err(err)
            }
            // No COMMIT without the batch's counts: a failed fold loses the batch.
            None => Book::fold(conn)
                .and_then(|()| conn.prepare_cached("COMMIT"))
                .and_then(|mut commit| commit.execute([]))
                .map(|_| ())
                .map_err(|e| BatchLost::from(e).0),
        };
        self.counters
            .record(ops, committing - started, committing.elapsed());
        if let Err(e) = &outcome {
            crate::log::error(
                "write batch not committed; every operation in it answered with an error",
            )
            .event("batch_failed")
            .number("operations", ops as u64)
            .cause(e)
            .emit();
            roll_back_if_open(conn);
            let skipped = jobs.len() as u64;
            jobs.for_each(|job| job.abandon(e));
            self.counters.settled(skipped);
        }
        self.syncer.hand_over(Committed {
            batch: batch_number,
            replies,
            outcome,
        });
    }

    /// `BEGIN IMMEDIATE` in the sync mode other processes allow, after making
    /// sure no earlier transaction lingers (a `ROLLBACK` that failed would
    /// otherwise make every later batch fail to begin). Refused outright once
    /// a sync has failed.
    fn begin_batch(&mut self) -> Result<(), StoreError> {
        if let Some(e) = self.durability.failure() {
            return Err(e);
        }
        roll_back_if_open(&self.conn);
        self.mode.begin(&self.conn).map_err(|e| {
            roll_back_if_open(&self.conn);
            StoreError::from(e)
        })
    }
}

/// Turn off SQLite's automatic checkpoint on the writer's connection and
/// start the thread that does it instead.
fn start_checkpointer(
    conn: &Connection,
    path: &Path,
    durability: Arc<Durability>,
) -> rusqlite::Result<Checkpointer> {
    let checkpointer = Checkpointer::start(path, WAL_BOUND_PAGES, durability)?;
    // A restarted WAL that grew far past the bound is cut back on disk.
    let page_size: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
    let limit = i64::from(WAL_FILE_LIMIT_PAGES) * page_size;
    conn.execute_batch(&format!(
        "PRAGMA wal_autocheckpoint=0; PRAGMA journal_size_limit={limit};"
    ))?;
    Ok(checkpointer)
}
