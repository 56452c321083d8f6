//! The worker pool: a fixed number of named threads that take items from one
//! queue and hand them to the runner's work function, the shape of the Rust
//! book's `ThreadPool`: the receiver is locked only while a worker waits for
//! its next item, and `Drop` closes the queue and joins every worker.
//!
//! A stop needs more than `Drop`: it waits for the workers for a grace period
//! only (`wait_until_idle`, on a condition variable that each worker signals as
//! it ends), and leaves a worker still inside a tool after that to end with
//! the process (`detach_busy`), so a stop never hangs on a slow tool.
//!
//! It knows nothing of calls, leases or the store: what a worker does with an
//! item is the work function's business.

use crate::lock::lock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Instant;

/// Worker threads over one queue of `T`.
pub(super) struct WorkerPool<T> {
    /// `None` once closed: workers finish what is queued, then end.
    queue: Option<mpsc::Sender<T>>,
    workers: Vec<Worker>,
    /// How many workers have not ended yet, signalled as each one ends.
    live: Arc<(Mutex<usize>, Condvar)>,
}

/// A worker's thread, and whether its work has ended: a thread counted out
/// may still be unwinding its stack for a moment, so `JoinHandle::is_finished`
/// alone would let go of a thread that is about to end anyway.
struct Worker {
    thread: JoinHandle<()>,
    counted_out: Arc<AtomicBool>,
}

/// Counts a worker out when its work ends, even by a panic.
struct CountedOut {
    live: Arc<(Mutex<usize>, Condvar)>,
    this_one: Arc<AtomicBool>,
}

impl Drop for CountedOut {
    fn drop(&mut self) {
        let (live, ended) = &*self.live;
        let mut live = lock(live);
        *live -= 1;
        self.this_one.store(true, Ordering::SeqCst);
        drop(live);
        ended.notify_all();
    }
}

impl<T: Send + 'static> WorkerPool<T> {
    /// Start `size` (at least one) workers named `{name}-{n}`. Each takes an
    /// item, and with it a second one already waiting when `takes_company`
    /// says the first is quick, and passes them to `work`.
    pub(super) fn start(
        size: usize,
        name: &str,
        takes_company: fn(&T) -> bool,
        work: impl Fn(Vec<T>) + Send + Sync + 'static,
    ) -> std::io::Result<WorkerPool<T>> {
        let (queue, items) = mpsc::channel();
        let items = Arc::new(Mutex::new(items));
        let work = Arc::new(work);
        let mut pool = WorkerPool {
            queue: Some(queue),
            workers: Vec::new(),
            live: Arc::new((Mutex::new(0), Condvar::new())),
        };
        for n in 0..size.max(1) {
            let (items, work) = (Arc::clone(&items), Arc::clone(&work));
            *lock(&pool.live.0) += 1;
            let counted_out = Arc::new(AtomicBool::new(false));
            let counted = CountedOut {
                live: Arc::clone(&pool.live),
                this_one: Arc::clone(&counted_out),
            };
            let spawned = std::thread::Builder::new()
                .name(format!("{name}-{n}"))
                .spawn(move || {
                    let _counted = counted;
                    while let Some(batch) = next_batch(&items, takes_company) {
                        work(batch);
                    }
                });
            // On failure the closure (and with it `counted`) is dropped, which
            // counts the worker out; dropping `pool` joins the others.
            pool.workers.push(Worker {
                thread: spawned?,
                counted_out,
            });
        }
        Ok(pool)
    }

    /// Queue `item` for a worker; handed back once the pool is closed.
    pub(super) fn send(&self, item: T) -> Result<(), T> {
        match &self.queue {
            Some(queue) => queue.send(item).map_err(|e| e.0),
            None => Err(item),
        }
    }

    /// Take no more items: each worker ends once the queue is empty and its
    /// current work is done.
    pub(super) fn close(&mut self) {
        self.queue = None;
    }

    /// Wait until every worker has ended or `deadline` passes; `true` if all
    /// have ended.
    pub(super) fn wait_until_idle(&self, deadline: Instant) -> bool {
        let (live, ended) = &*self.live;
        let mut live = lock(live);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if *live == 0 || left.is_zero() {
                return *live == 0;
            }
            live = ended
                .wait_timeout(live, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Let go of the workers still busy (inside a tool past a stop's grace):
    /// they end with the process instead of being joined. Those whose work has
    /// ended stay to be joined. Returns how many were let go.
    pub(super) fn detach_busy(&mut self) -> usize {
        let (ended, busy): (Vec<_>, Vec<_>) = std::mem::take(&mut self.workers)
            .into_iter()
            .partition(|worker| worker.counted_out.load(Ordering::SeqCst));
        self.workers = ended;
        busy.len()
    }
}

impl<T> Drop for WorkerPool<T> {
    fn drop(&mut self) {
        self.queue = None;
        for worker in self.workers.drain(..) {
            let _ = worker.thread.join();
        }
    }
}

/// The next item, and with it a second one when the first takes company and
/// another is already waiting. `None` once the queue is closed and empty. The
/// lock is held only while waiting for the first.
fn next_batch<T>(
    items: &Mutex<mpsc::Receiver<T>>,
    takes_company: fn(&T) -> bool,
) -> Option<Vec<T>> {
    let items = lock(items);
    let first = items.recv().ok()?;
    let second = if takes_company(&first) {
        items.try_recv().ok()
    } else {
        None
    };
    Some(std::iter::once(first).chain(second).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    /// A worker takes a second waiting item only behind one that takes
    /// company, never waits for a second, and stops when the queue is gone.
    #[test]
    fn a_second_item_rides_only_behind_a_quick_one() {
        let (tx, rx) = mpsc::channel();
        let queue = Mutex::new(rx);
        let quick = |item: &&str| item.starts_with("quick");
        for item in [
            "quick-1", "slow-2", "slow-3", "quick-4", "quick-5", "quick-6",
        ] {
            tx.send(item).unwrap();
        }
        let take = || next_batch(&queue, quick).expect("an item");
        assert_eq!(take(), ["quick-1", "slow-2"]);
        assert_eq!(take(), ["slow-3"]);
        assert_eq!(take(), ["quick-4", "quick-5"]);
        assert_eq!(take(), ["quick-6"]);
        drop(tx);
        assert!(next_batch(&queue, quick).is_none());
    }

    /// Dropping the pool joins its workers: every item queued before the drop
    /// has been worked on when the drop returns, and no worker thread is left.
    #[test]
    fn drop_joins_every_worker_after_the_queued_work() {
        let done = Arc::new(AtomicUsize::new(0));
        let alive = Arc::new(AtomicUsize::new(0));
        let pool = {
            let (done, alive) = (Arc::clone(&done), Arc::clone(&alive));
            WorkerPool::start(
                3,
                "pool-test",
                |_| false,
                move |items: Vec<u64>| {
                    alive.fetch_add(1, Ordering::SeqCst);
                    for ms in items {
                        std::thread::sleep(Duration::from_millis(ms));
                        done.fetch_add(1, Ordering::SeqCst);
                    }
                    alive.fetch_sub(1, Ordering::SeqCst);
                },
            )
            .unwrap()
        };
        for _ in 0..9 {
            pool.send(20).unwrap();
        }
        drop(pool);
        assert_eq!(done.load(Ordering::SeqCst), 9, "all queued work done");
        assert_eq!(alive.load(Ordering::SeqCst), 0, "no work still running");
        assert_eq!(
            Arc::strong_count(&done),
            1,
            "every worker's closure is gone"
        );
    }

    /// A closed pool waits for its worker until it ends, not until its
    /// deadline; a worker still busy at the deadline is reported and let go.
    #[test]
    fn a_stop_waits_for_idle_workers_and_lets_busy_ones_go() {
        let release = Arc::new((Mutex::new(false), Condvar::new()));
        let mut pool = {
            let release = Arc::clone(&release);
            WorkerPool::start(
                1,
                "pool-test",
                |_| false,
                move |items: Vec<bool>| {
                    if items[0] {
                        let (open, opened) = &*release;
                        let mut open = lock(open);
                        while !*open {
                            open = opened.wait(open).unwrap();
                        }
                    }
                },
            )
            .unwrap()
        };
        pool.send(true).unwrap(); // blocks its worker until released
        pool.close();
        assert_eq!(pool.send(false), Err(false), "closed");
        let started = Instant::now();
        assert!(!pool.wait_until_idle(Instant::now() + Duration::from_millis(50)));
        assert!(started.elapsed() >= Duration::from_millis(50));
        assert_eq!(pool.detach_busy(), 1, "one worker is still blocked");
        *lock(&release.0) = true;
        release.1.notify_all();
        let started = Instant::now();
        assert!(pool.wait_until_idle(Instant::now() + Duration::from_secs(600)));
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "woken, not timed out"
        );
        drop(pool);
    }
}
