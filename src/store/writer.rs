//! The writer: the one thread that owns the write connection, and the one
//! place where commits are grouped.
//!
//! All writes go through one writer thread that owns the only
//! write connection. It takes every operation waiting in its channel, runs them in
//! one `BEGIN IMMEDIATE` transaction — each inside its own `SAVEPOINT`, so a
//! failing operation rolls back only itself — commits once (`synchronous=FULL`:
//! the commit is on disk), and only then answers each caller. A caller therefore
//! never sees an outcome that is not durable, and a busy server pays one fsync
//! per batch instead of one per state change. Semantics are unchanged: operations
//! in a batch run one after another on one connection, so each sees the previous
//! one's writes, and several processes on one file stay correct because each
//! batch is still one SQLite write transaction.
//!
//! **What the writer does with each SQLite error.** The writer never assumes a
//! transaction is still open after an error; it asks (`is_autocommit`).
//! - `BEGIN IMMEDIATE` fails (`SQLITE_BUSY` past the busy timeout: another
//!   process holds the write lock; `SQLITE_READONLY`, `SQLITE_CANTOPEN`, I/O):
//!   nothing ran; every operation of the batch is answered with the error
//!   (`503` for these classes).
//! - An operation fails and the transaction is still open (a constraint, a
//!   statement-level `SQLITE_FULL`, a bug, a panic): its savepoint is rolled
//!   back, that caller alone gets the error, and the batch goes on.
//! - An operation fails and SQLite has rolled back the whole transaction
//!   (`SQLITE_FULL` or `SQLITE_IOERR_*` while spilling the page cache into the
//!   WAL, `SQLITE_NOMEM`, `SQLITE_BUSY` on a lock upgrade): the writes of every
//!   earlier operation of the batch are gone too, so every operation of the
//!   batch is answered `Unavailable` (`503` + `Retry-After`), and no later one
//!   runs — a `SAVEPOINT` outside a transaction would quietly open a new one
//!   and commit it on `RELEASE`.
//! - A savepoint command itself fails: treated as the case above.
//! - `COMMIT` fails (`SQLITE_FULL`, `SQLITE_IOERR_*`, a deferred constraint):
//!   the transaction is rolled back if SQLite left it open, and every
//!   operation of the batch is answered `Unavailable`. The error means "not
//!   known to be durable": a failed sync may still leave the commit in the WAL,
//!   which is why the answer is "retry with the same key", which is always safe.
//! - `SQLITE_CORRUPT`, `SQLITE_NOTADB` and other errors are `Internal` (`500`).
//!
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

use super::model::WriterStats;
use super::StoreError;
use crate::metrics::Metrics;
use rusqlite::Connection;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The most operations one commit carries; bounds how long the first waits.
const MAX_BATCH: usize = 512;

/// The writer's running totals behind `WriterStats`, what `/healthz` reads
/// to tell a stuck writer, and where each batch is reported for `/metrics`.
struct WriterCounters {
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

type Reply = Box<dyn FnOnce(Result<(), &StoreError>) + Send>;

/// What running one job left behind.
enum Step {
    /// The transaction is still open; the job's outcome waits for `COMMIT`.
    Kept(Reply),
    /// The transaction is gone (SQLite rolled it back) or its savepoint could
    /// not be managed: every job of the batch is answered with this error.
    Broken(Reply, StoreError),
}

/// What to do with a write's outcome once its commit is known. Runs on the
/// writer thread, so it must be quick.
pub type Then<T> = Box<dyn FnOnce(Result<T, StoreError>) + Send>;

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

/// What the writer's channel carries.
enum Message {
    Write(Box<dyn WriteJob>),
    /// Commit what came before, then end.
    Stop,
}

/// The handle to the writer thread: its queue, its counters, and what `stop`
/// joins.
pub(super) struct Writer {
    /// Every write goes through here. `Sender` is `Sync`: no lock per write.
    queue: mpsc::Sender<Message>,
    counters: Arc<WriterCounters>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Writer {
    /// Start the writer thread on `conn`, the only write connection.
    pub(super) fn start(conn: Connection) -> std::io::Result<Writer> {
        let (queue, messages) = mpsc::channel();
        let counters = Arc::new(WriterCounters::default());
        let thread_counters = Arc::clone(&counters);
        let thread = std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || run_writer(conn, messages, &thread_counters))?;
        Ok(Writer {
            queue,
            counters,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Queue `op` without waiting; `then` runs on the writer thread once the
    /// batch's commit is known (or with an error if it never runs).
    pub(super) fn submit<T, F>(&self, op: F, then: Then<T>)
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
        // A stopped writer refuses the message; dropping the job answers it.
        let _ = self.queue.send(Message::Write(Box::new(job)));
    }

    /// Commit everything already queued, then end the thread and join it.
    /// Idempotent.
    pub(super) fn stop(&self) {
        let _ = self.queue.send(Message::Stop);
        let thread = crate::sync::lock(&self.thread).take();
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

    /// Report every batch from now on to `metrics` (set once).
    pub(super) fn report_to(&self, metrics: Arc<Metrics>) {
        let _ = self.counters.metrics.set(metrics);
    }
}

/// The writer thread: the single place where commits are grouped.
fn run_writer(conn: Connection, messages: mpsc::Receiver<Message>, counters: &WriterCounters) {
    let mut stopping = false;
    while !stopping {
        let Ok(Message::Write(first)) = messages.recv() else {
            break;
        };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match messages.try_recv() {
                Ok(Message::Write(job)) => batch.push(job),
                Ok(Message::Stop) => {
                    stopping = true;
                    break;
                }
                Err(_) => break,
            }
        }
        counters.progressed();
        let ops = batch.len() as u64;
        commit_batch(&conn, batch, counters);
        counters.outstanding.fetch_sub(ops, Ordering::Relaxed);
        counters.progressed();
    }
    // Anything queued after the stop marker is dropped with the receiver,
    // and each dropped job answers its caller. A stopped process leaves the
    // WAL folded into the database file, so the file alone is the whole state.
    if stopping {
        if let Err(e) = conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)") {
            crate::log::warn("final checkpoint failed")
                .event("checkpoint_failed")
                .cause(&e)
                .emit();
        }
    }
}

/// One transaction for the whole batch; each job in its own savepoint. Replies go
/// out only after `COMMIT` returned, so every answer describes durable state.
/// If SQLite ends the transaction early, or `COMMIT` fails, no job of the batch
/// is told it committed, and no job after that point runs at all.
fn commit_batch(conn: &Connection, batch: Vec<Box<dyn WriteJob>>, counters: &WriterCounters) {
    let started = Instant::now();
    if let Err(e) = begin_batch(conn) {
        batch.into_iter().for_each(|job| job.abandon(&e));
        return;
    }
    let ops = batch.len();
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
    let commit = match lost {
        Some(err) => Err(err),
        None => conn
            .execute_batch("COMMIT")
            .map_err(|e| BatchLost::from(e).0),
    };
    counters.record(ops, committing - started, committing.elapsed());
    if let Err(e) = &commit {
        crate::log::error(
            "write batch not committed; every operation in it answered with an error",
        )
        .event("batch_failed")
        .number("operations", ops as u64)
        .cause(e)
        .emit();
        roll_back_if_open(conn);
        jobs.for_each(|job| job.abandon(e));
    }
    for reply in replies {
        reply(commit.as_ref().map(|_| ()));
    }
}

/// `BEGIN IMMEDIATE`, after making sure no earlier transaction lingers (a
/// `ROLLBACK` that failed would otherwise make every later batch fail to begin).
fn begin_batch(conn: &Connection) -> Result<(), StoreError> {
    roll_back_if_open(conn);
    conn.execute_batch("BEGIN IMMEDIATE")
        .map_err(StoreError::from)
}

/// Ask SQLite whether the transaction is still open rather than assume it: after
/// `SQLITE_FULL` or an I/O error it may already have rolled everything back.
fn roll_back_if_open(conn: &Connection) {
    if !conn.is_autocommit() {
        if let Err(e) = conn.execute_batch("ROLLBACK") {
            crate::log::error("ROLLBACK failed")
                .event("rollback_failed")
                .cause(&e)
                .emit();
        }
    }
}

/// The batch's transaction cannot commit: SQLite rolled it back, a savepoint
/// could not be managed, or `COMMIT` failed. Nothing of the batch is durable,
/// and the same request may succeed later, so callers see `Unavailable`.
struct BatchLost(StoreError);

impl From<rusqlite::Error> for BatchLost {
    fn from(e: rusqlite::Error) -> BatchLost {
        BatchLost(StoreError::unavailable(format!(
            "the write transaction was rolled back: {e}"
        )))
    }
}

/// Run `op` inside a savepoint: its writes stay if it succeeds, and are undone
/// alone (the rest of the batch unaffected) if it fails or panics. The outer
/// `Err` means the batch's transaction is gone: SQLite rolled it back while
/// `op` ran (`SQLITE_FULL`, an I/O error), so `ROLLBACK TO` has nothing to undo
/// and a later `SAVEPOINT` would silently open a new transaction.
fn in_savepoint<T>(
    conn: &Connection,
    op: impl FnOnce(&Connection) -> rusqlite::Result<T>,
) -> Result<Result<T, StoreError>, BatchLost> {
    if conn.is_autocommit() {
        return Err(BatchLost(StoreError::Unavailable(
            "the write transaction ended before this operation".into(),
        )));
    }
    run_cached(conn, "SAVEPOINT op")?;
    let outcome = catch_unwind(AssertUnwindSafe(|| op(conn)));
    if conn.is_autocommit() {
        return Err(match outcome {
            Ok(Err(e)) => BatchLost::from(e),
            _ => BatchLost(StoreError::Unavailable(
                "the write transaction was rolled back".into(),
            )),
        });
    }
    let outcome = match outcome {
        Ok(Ok(value)) => {
            run_cached(conn, "RELEASE op")?;
            return Ok(Ok(value));
        }
        Ok(Err(e)) => StoreError::from(e),
        Err(_) => StoreError::Internal("a store operation panicked".into()),
    };
    run_cached(conn, "ROLLBACK TO op")?;
    run_cached(conn, "RELEASE op")?;
    Ok(Err(outcome))
}

/// A statement without parameters or rows, prepared once per connection.
fn run_cached(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([])?;
    Ok(())
}
