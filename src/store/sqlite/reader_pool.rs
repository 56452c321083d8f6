//! The read threads: at most `MAX_READERS`, each with its own connection,
//! started on demand and kept. A read is handed to a free one and waited for
//! by the caller's own clock (`--db-timeout-ms`, see `deadline`).
//!
//! Why threads rather than connections lent to the caller: on a file system
//! that stops answering (frozen, a hung disk), a read can block in the
//! kernel — opening a connection (SQLite, run as root, `fchown`s its files),
//! or taking a read mark in the WAL index, a page of `-shm` written through
//! its mapping — and nothing wakes a thread there. Blocked on a reader
//! thread, the read costs its caller the deadline and then a `503`; blocked
//! on a request's thread, it would hold that request, and in time every
//! connection thread, until the file answered again.
//!
//! It owns how many SQLite connections reads hold, and must never open
//! more than `MAX_READERS`, however many requests read at once (900 clients
//! long-polling with `?wait=` each re-read every 100 ms): a read waits in
//! the queue instead, and past its deadline is `Unavailable` and never runs.
//! It never writes, and never hands a read's result back before the syncer
//! says everything that read could have seen is on disk (`gated_by`).

use super::super::error::StoreError;
use super::super::options::StoreOptions;
use super::deadline::Deadline;
use super::handoff::{Handoff, Waited};
use super::schema;
use super::syncer::Durability;
use crate::lock::lock;
use rusqlite::Connection;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

/// The most read connections (and threads) at once. Reads are short (a row
/// by key or id, a page of pending ids) except `/stats`, which can take a
/// third of a second at a million calls; on two cores more than a few reads
/// cannot run at once anyway, so 16 lets several slow reads run without
/// stalling the quick ones, and costs at most 32 descriptors (each
/// connection keeps the database file and its WAL open; the `-shm` is
/// shared by the process).
pub const MAX_READERS: usize = 16;

/// One read, given the thread's connection (or why it could not be opened).
type ReadJob = Box<dyn FnOnce(Result<&Connection, &StoreError>) + Send>;

/// The read threads and what they share.
pub(super) struct Readers {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// The writer's commits and syncs: a read's result is held back until
    /// everything it could have seen is synced (see `syncer`).
    gate: Option<Arc<Durability>>,
    deadline: Deadline,
}

/// What the threads read from.
struct Shared {
    path: PathBuf,
    options: StoreOptions,
    queue: Mutex<Queue>,
    /// Signalled when a read is queued or the pool closes.
    work: Condvar,
    /// Whether a sync failed, so no connection may checkpoint as it closes.
    gate: Mutex<Option<Arc<Durability>>>,
}

struct Queue {
    jobs: VecDeque<ReadJob>,
    /// Threads started; never above `MAX_READERS`.
    started: usize,
    /// Of those, threads waiting for a read.
    idle: usize,
    /// No more reads are taken; the threads end once the queue is empty.
    closing: bool,
}

impl Readers {
    pub(super) fn new(path: &Path, options: &StoreOptions) -> Readers {
        Readers {
            shared: Arc::new(Shared {
                path: path.to_path_buf(),
                options: options.clone(),
                queue: Mutex::new(Queue {
                    jobs: VecDeque::new(),
                    started: 0,
                    idle: 0,
                    closing: false,
                }),
                work: Condvar::new(),
                gate: Mutex::new(None),
            }),
            threads: Mutex::new(Vec::new()),
            gate: None,
            deadline: Deadline::new(options.db_timeout()),
        }
    }

    /// Hold every read's result until what it could have seen is synced.
    pub(super) fn gated_by(mut self, durability: Arc<Durability>) -> Readers {
        *lock(&self.shared.gate) = Some(Arc::clone(&durability));
        self.gate = Some(durability);
        self
    }

    /// Run `op` on a read thread's connection and wait for its result, then
    /// for the sync that covers it: all within the deadline.
    pub(super) fn read<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let until = self.deadline.ends_at();
        let handoff = Arc::new(Handoff::default());
        let runs = Arc::clone(&handoff);
        self.hand_over(Box::new(move |conn| {
            if runs.start() {
                let outcome = conn.map_err(Clone::clone).and_then(|conn| Ok(op(conn)?));
                // A read answered too late holds nothing: it is dropped.
                let _ = runs.answer(outcome);
            }
        }));
        let value = match handoff.wait_until(until) {
            Waited::Answer(outcome) => outcome?,
            Waited::NotStarted => return Err(self.deadline.read_not_started()),
            Waited::Unfinished => return Err(self.deadline.read_unfinished()),
        };
        if let Some(gate) = &self.gate {
            gate.wait_until_visible_is_synced(until.saturating_duration_since(Instant::now()))?;
        }
        Ok(value)
    }

    /// Queue `job` for a free thread, starting one while fewer than
    /// `MAX_READERS` exist; once closing, run it at once without a
    /// connection.
    fn hand_over(&self, job: ReadJob) {
        let mut queue = lock(&self.shared.queue);
        if queue.closing {
            drop(queue);
            return job(Err(&StoreError::unavailable("the store is stopping")));
        }
        queue.jobs.push_back(job);
        if queue.idle > 0 {
            drop(queue);
            return self.shared.work.notify_one();
        }
        if queue.started >= MAX_READERS {
            return;
        }
        queue.started += 1;
        let number = queue.started;
        // Taken before the queue is let go, so a `close` that begins now
        // waits for this thread's handle and joins it: a thread it missed
        // could keep its connection open past the process's exit (no last
        // checkpoint, the `-wal` left behind).
        let mut threads = lock(&self.threads);
        drop(queue);
        let shared = Arc::clone(&self.shared);
        let spawned = std::thread::Builder::new()
            .name(format!("store-reader-{number}"))
            .spawn(move || shared.serve());
        match spawned {
            Ok(thread) => threads.push(thread),
            // The queued read waits for another thread, or its deadline.
            Err(_) => {
                // Never the queue under the threads' lock: `hand_over` takes them the other way.
                drop(threads);
                lock(&self.shared.queue).started -= 1;
            }
        }
    }

    /// End every thread once the reads already queued have run, closing
    /// their connections (the store is stopping). A thread still blocked
    /// in the kernel holds this until the file answers, as the writer does.
    pub(super) fn close(&self) {
        lock(&self.shared.queue).closing = true;
        self.shared.work.notify_all();
        let threads = std::mem::take(&mut *lock(&self.threads));
        for thread in threads {
            let _ = thread.join();
        }
    }

    /// How many connections exist now (one per thread started).
    #[cfg(test)]
    pub(super) fn open(&self) -> usize {
        lock(&self.shared.queue).started
    }
}

impl Drop for Readers {
    /// A pool dropped without `close` closes all the same: its connections
    /// are closed (without a checkpoint after a failed sync) before it is gone.
    fn drop(&mut self) {
        self.close();
    }
}

impl Shared {
    /// One read thread: its connection, opened at its first read (and again
    /// after a failed open), and the reads it takes, until the pool closes.
    fn serve(&self) {
        let mut conn: Option<Connection> = None;
        while let Some(job) = self.next_job() {
            if conn.is_none() {
                match schema::open_connection(&self.path, &self.options) {
                    Ok(opened) => conn = Some(opened),
                    Err(e) => {
                        job(Err(&e));
                        continue;
                    }
                }
            }
            job(Ok(conn.as_ref().expect("opened above")));
        }
        if let Some(conn) = conn {
            let failed = lock(&self.gate)
                .as_ref()
                .is_some_and(|gate| gate.failure().is_some());
            if failed {
                schema::no_checkpoint_on_close(&conn);
            }
        }
    }

    /// The next queued read; `None` once closing and none is left.
    fn next_job(&self) -> Option<ReadJob> {
        let mut queue = lock(&self.queue);
        loop {
            if let Some(job) = queue.jobs.pop_front() {
                return Some(job);
            }
            if queue.closing {
                return None;
            }
            queue.idle += 1;
            queue = self.work.wait(queue).unwrap_or_else(|p| p.into_inner());
            queue.idle -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::temp::TempDb;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;
    use std::thread;
    use std::time::Duration;

    /// However many threads read at once, at most `MAX_READERS` connections
    /// are ever open; the other readers wait their turn, and every read runs.
    #[test]
    fn concurrent_reads_never_open_more_than_max_readers() {
        let db = TempDb::new("idem-readers-bound");
        let pool = Readers::new(&db.path, &StoreOptions::default());
        let reading = Arc::new((AtomicUsize::new(0), AtomicUsize::new(0)));
        thread::scope(|scope| {
            for _ in 0..4 * MAX_READERS {
                let (pool, reading) = (&pool, Arc::clone(&reading));
                scope.spawn(move || {
                    pool.read(move |conn| {
                        let (now, peak) = &*reading;
                        let at_once = now.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(at_once, Ordering::SeqCst);
                        thread::sleep(Duration::from_millis(20));
                        now.fetch_sub(1, Ordering::SeqCst);
                        conn.query_row("SELECT 1", [], |r| r.get::<_, i64>(0))
                    })
                    .unwrap();
                });
            }
        });
        let peak = reading.1.load(Ordering::SeqCst);
        assert!(peak <= MAX_READERS && peak > 1, "peak {peak}");
        assert!(pool.open() <= MAX_READERS, "{} open", pool.open());
        pool.close();
    }

    /// A read handed over while the pool closes is either refused or run on
    /// a thread `close` joins: once `close` returns, no read thread (and so
    /// no connection) is left, whatever the interleaving. A thread it
    /// missed would keep its connection past the process's exit.
    #[test]
    fn close_joins_a_thread_started_by_a_read_racing_it() {
        let db = TempDb::new("idem-readers-close-race");
        for _ in 0..1_500 {
            let pool = Arc::new(Readers::new(&db.path, &StoreOptions::default()));
            let reader = Arc::clone(&pool);
            let read = thread::spawn(move || {
                let _ = reader.read(|conn| conn.query_row("SELECT 1", [], |r| r.get::<_, i64>(0)));
            });
            thread::yield_now();
            pool.close();
            // Every read thread holds `shared`; `close` joined them all.
            let left = Arc::strong_count(&pool.shared) - 1;
            read.join().unwrap();
            assert_eq!(left, 0, "a read thread outlived close");
        }
    }

    /// A read blocked where nothing can wake it (here, on a channel; on a
    /// frozen file system, in the kernel) costs its caller the deadline and
    /// an `Unavailable`, never more; with every thread so blocked, a later
    /// read is refused at its deadline and never runs; once the threads are
    /// free again, reads run as before.
    #[test]
    fn a_read_that_does_not_return_costs_its_caller_only_the_deadline() {
        let db = TempDb::new("idem-readers-deadline");
        let within = Duration::from_millis(300);
        let pool = Readers::new(&db.path, &StoreOptions::default().with_db_timeout(within));
        let deadline = Deadline::new(within);
        let (unblock, blocked) = mpsc::channel::<()>();
        let blocked = Arc::new(Mutex::new(blocked));
        let entered = Arc::new(AtomicUsize::new(0));
        let give_up = Instant::now() + Duration::from_secs(30);
        while entered.load(Ordering::SeqCst) < MAX_READERS {
            assert!(
                Instant::now() < give_up,
                "the read threads never all blocked"
            );
            let (blocked, entered) = (Arc::clone(&blocked), Arc::clone(&entered));
            let started = Instant::now();
            let refused = pool.read(move |_| {
                entered.fetch_add(1, Ordering::SeqCst);
                let _ = lock(&blocked).recv();
                Ok(())
            });
            // Unfinished; or, on a slow machine, not started in time.
            assert!(
                refused == Err(deadline.read_unfinished())
                    || refused == Err(deadline.read_not_started()),
                "{refused:?}"
            );
            assert!(started.elapsed() < within * 10, "{:?}", started.elapsed());
        }
        let ran = Arc::new(AtomicUsize::new(0));
        let counts = Arc::clone(&ran);
        let refused = pool.read(move |_| {
            counts.fetch_add(1, Ordering::SeqCst);
            Ok(())
        });
        assert_eq!(refused, Err(deadline.read_not_started()));
        for _ in 0..MAX_READERS {
            unblock.send(()).unwrap();
        }
        let read = |conn: &Connection| conn.query_row("SELECT 2", [], |r| r.get::<_, i64>(0));
        while pool.read(read) != Ok(2) {
            assert!(Instant::now() < give_up, "reads never ran again");
        }
        assert_eq!(ran.load(Ordering::SeqCst), 0, "a refused read never runs");
        assert_eq!(pool.open(), MAX_READERS);
        pool.close();
    }
}
