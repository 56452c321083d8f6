//! The access-log writer: request threads append their line to a bounded
//! buffer and go on; one thread writes the buffer out.
//!
//! One access line per request, written by the request's own thread with one
//! `write(2)` under the stderr lock, cost a third of the same-key rate on two
//! cores: a system call per request, and every connection thread queued on
//! one lock while another wrote. Here a request formats its line into a
//! buffer kept per thread (no allocation once warm), copies it into the
//! shared buffer under a lock held for a `memcpy`, and wakes the writer only
//! when it sleeps. The writer lets lines gather for `GATHER`, swaps the
//! buffer for an empty one and writes everything in it with one
//! `write_all`, outside the lock: a few hundred writes and wake-ups a
//! second, whatever the request rate.
//!
//! **Never blocking a request.** The buffer has a fixed capacity; a line that
//! does not fit (the sink is slower than the requests: a stalled pipe, a full
//! disk, a terminal) is dropped and counted
//! (`idempotent_tool_access_log_dropped_lines_total`) instead of making the
//! request wait. Lines are never split: each is in the buffer whole or not at
//! all, and the buffer is written in order.
//!
//! This module writes only what it is given; it never formats a field.

use crate::lock::lock;
use crate::metrics::Counter;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Room for about 16,000 access lines: a second of the fastest rate seen
/// here, so a sink that pauses for less than that loses nothing.
pub const CAPACITY: usize = 4 << 20;

/// How long the writer lets lines gather after the first one arrives.
const GATHER: Duration = Duration::from_millis(2);

pub struct AccessWriter {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// The writer waits here for lines; `flush` waits here for the writer.
    changed: Condvar,
    capacity: usize,
    dropped: AtomicU64,
    /// Where dropped lines are also counted, once the metrics exist.
    report: OnceLock<Arc<Counter>>,
}

struct State {
    pending: Vec<u8>,
    /// The writer holds a swapped-out buffer it has not finished writing.
    writing: bool,
    /// The writer is asleep waiting for a line: the next push wakes it.
    idle: bool,
}

impl AccessWriter {
    /// Start the writer thread on `sink`, with room for `capacity` bytes of
    /// lines waiting to be written.
    pub fn start(
        mut sink: Box<dyn Write + Send>,
        capacity: usize,
    ) -> std::io::Result<AccessWriter> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                pending: Vec::with_capacity(capacity.min(64 << 10)),
                writing: false,
                idle: false,
            }),
            changed: Condvar::new(),
            capacity,
            dropped: AtomicU64::new(0),
            report: OnceLock::new(),
        });
        let thread_shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("access-log".into())
            .spawn(move || write_until_the_process_ends(&thread_shared, &mut *sink))?;
        Ok(AccessWriter { shared })
    }

    /// Queue one whole line (its newline included); dropped and counted if
    /// the buffer has no room. Never waits for the sink.
    pub fn push(&self, line: &[u8]) {
        let shared = &*self.shared;
        let mut state = lock(&shared.state);
        if state.pending.len() + line.len() > shared.capacity {
            drop(state);
            shared.dropped.fetch_add(1, Ordering::Relaxed);
            if let Some(counter) = shared.report.get() {
                counter.inc();
            }
            return;
        }
        state.pending.extend_from_slice(line);
        let wake = std::mem::take(&mut state.idle);
        drop(state);
        if wake {
            shared.changed.notify_all();
        }
    }

    /// Lines dropped so far.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Count dropped lines in `counter` too, from now on (and those dropped
    /// before). Set once.
    pub fn report_to(&self, counter: Arc<Counter>) {
        if self.shared.report.set(Arc::clone(&counter)).is_ok() {
            counter.inc_by(self.dropped());
        }
    }

    /// Wait until every line queued so far is written, for at most `within`
    /// (a stopping process's last lines).
    pub fn flush(&self, within: Duration) {
        let deadline = Instant::now() + within;
        let mut state = lock(&self.shared.state);
        while !state.pending.is_empty() || state.writing {
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            state = self
                .shared
                .changed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

/// Swap the buffer out and write it, for as long as the process runs (the
/// writer serves the process-wide logger, which is never dropped).
fn write_until_the_process_ends(shared: &Shared, sink: &mut dyn Write) {
    let mut spare = Vec::new();
    loop {
        let mut state = lock(&shared.state);
        while state.pending.is_empty() {
            state.writing = false;
            state.idle = true;
            shared.changed.notify_all();
            state = shared
                .changed
                .wait(state)
                .unwrap_or_else(|p| p.into_inner());
        }
        state.idle = false;
        if state.pending.len() < shared.capacity / 2 {
            // Let lines gather: one write (and one wake-up) per `GATHER`
            // instead of one per request.
            drop(state);
            std::thread::sleep(GATHER);
            state = lock(&shared.state);
        }
        std::mem::swap(&mut state.pending, &mut spare);
        state.writing = true;
        drop(state);
        // Nowhere to report a failed write of the log itself: the lines go.
        let _ = sink.write_all(&spare).and_then(|()| sink.flush());
        spare.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// A sink that writes nothing until the test opens it, then everything.
    struct Gate {
        open: mpsc::Receiver<()>,
        opened: bool,
        out: Arc<Mutex<Vec<u8>>>,
    }

    impl Write for Gate {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            if !self.opened {
                let _ = self.open.recv();
                self.opened = true;
            }
            lock(&self.out).extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// With the sink stalled, pushing far more lines than fit never waits:
    /// what does not fit is dropped and counted (in the metric too). Once
    /// the sink moves, every line kept comes out whole and in order.
    #[test]
    fn a_full_buffer_drops_and_counts_lines_instead_of_blocking() {
        let (open, gate) = mpsc::channel();
        let out = Arc::new(Mutex::new(Vec::new()));
        let sink = Gate {
            open: gate,
            opened: false,
            out: Arc::clone(&out),
        };
        let writer = AccessWriter::start(Box::new(sink), 1_000).unwrap();
        let counter = Arc::new(Counter::default());
        writer.report_to(Arc::clone(&counter));
        let (done, pushed) = mpsc::channel();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                for n in 0..1_000 {
                    writer.push(format!("line {n:04}\n").as_bytes());
                }
                done.send(()).unwrap();
            });
            // The stalled sink holds at most one buffer: the pushes must
            // all return while it stays stalled.
            assert!(
                pushed.recv_timeout(Duration::from_secs(30)).is_ok(),
                "a push waited for the stalled sink"
            );
        });
        let dropped = writer.dropped();
        assert!(dropped >= 800, "only {dropped} of 1000 lines dropped");
        assert_eq!(counter.get(), dropped);

        open.send(()).unwrap();
        writer.flush(Duration::from_secs(30));
        let written = String::from_utf8(lock(&out).clone()).unwrap();
        let lines: Vec<&str> = written.lines().collect();
        assert_eq!(lines.len() as u64 + dropped, 1_000);
        assert!(lines.iter().all(|l| l.len() == 9 && l.starts_with("line ")));
        assert!(lines.windows(2).all(|w| w[0] < w[1]), "out of order");
    }
}
