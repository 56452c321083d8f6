//! The pool of read connections: at most `MAX_READERS` open at once, opened
//! on demand and kept for reuse.
//!
//! It owns how many SQLite connections reads may hold, and must never open
//! more than that, however many requests read at once (900 clients long-polling
//! with `?wait=` each re-read every 100 ms): a reader waits for a connection
//! instead, for at most the busy timeout, and then the read is `Unavailable`.
//! It never writes, and never lends a connection for longer than one read,
//! and never hands a read's result back before the syncer says everything
//! that read could have seen is on disk (`gated_by`).

use super::super::error::StoreError;
use super::super::options::StoreOptions;
use super::schema;
use super::syncer::Durability;
use crate::sync::lock;
use rusqlite::Connection;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

/// The most read connections open at once. Reads are short (a row by key or
/// id, a page of pending ids) except `/stats`, which can take a third of a
/// second at a million calls; on two cores more than a few reads cannot run
/// at once anyway, so 16 lets several slow reads run without stalling the
/// quick ones, and costs at most 32 descriptors (each connection keeps the
/// database file and its WAL open; the `-shm` is shared by the process).
pub const MAX_READERS: usize = 16;

/// Read connections: idle ones, and how many exist (idle or lent).
pub(super) struct Readers {
    path: PathBuf,
    options: StoreOptions,
    state: Mutex<PoolState>,
    /// Signalled whenever a connection is given back or closed.
    returned: Condvar,
    /// The writer's commits and syncs: a read's result is held back until
    /// everything it could have seen is synced (see `syncer`).
    gate: Option<Arc<Durability>>,
}

struct PoolState {
    idle: Vec<Connection>,
    /// Idle plus lent; never above `MAX_READERS`.
    open: usize,
}

impl Readers {
    pub(super) fn new(path: &Path, options: &StoreOptions) -> Readers {
        Readers {
            path: path.to_path_buf(),
            options: options.clone(),
            state: Mutex::new(PoolState {
                idle: Vec::new(),
                open: 0,
            }),
            returned: Condvar::new(),
            gate: None,
        }
    }

    /// Hold every read's result until what it could have seen is synced.
    pub(super) fn gated_by(mut self, durability: Arc<Durability>) -> Readers {
        self.gate = Some(durability);
        self
    }

    /// Run `op` on a pooled connection, waiting for one if all are lent.
    pub(super) fn read<T>(
        &self,
        op: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        let lent = Lent {
            conn: Some(self.take()?),
            pool: self,
        };
        let value = op(lent.conn()).map_err(StoreError::from)?;
        // The connection goes back first: waiting for a sync needs none.
        drop(lent);
        if let Some(gate) = &self.gate {
            gate.wait_until_visible_is_synced(self.options.busy_timeout)?;
        }
        Ok(value)
    }

    /// Close every idle connection (the store is stopping). After a failed
    /// sync none of them may checkpoint as it closes, though one of them is
    /// likely the process's last connection to the file.
    pub(super) fn close_idle(&self) {
        let mut state = lock(&self.state);
        state.open -= state.idle.len();
        let idle = std::mem::take(&mut state.idle);
        drop(state);
        self.close(idle);
        self.returned.notify_all();
    }

    fn close(&self, connections: Vec<Connection>) {
        if self
            .gate
            .as_ref()
            .is_some_and(|gate| gate.failure().is_some())
        {
            connections.iter().for_each(schema::no_checkpoint_on_close);
        }
        drop(connections);
    }

    /// An idle connection, or a new one while fewer than `MAX_READERS`
    /// exist, or the first one given back within the busy timeout.
    fn take(&self) -> Result<Connection, StoreError> {
        let deadline = Instant::now() + self.options.busy_timeout;
        let mut state = lock(&self.state);
        loop {
            if let Some(conn) = state.idle.pop() {
                return Ok(conn);
            }
            if state.open < MAX_READERS {
                state.open += 1;
                drop(state);
                return self.open_one();
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(StoreError::unavailable(format!(
                    "all {MAX_READERS} read connections stayed busy for {:?}",
                    self.options.busy_timeout
                )));
            }
            state = self
                .returned
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Open a connection for a slot already counted in `open`; on failure the
    /// slot is given back.
    fn open_one(&self) -> Result<Connection, StoreError> {
        schema::open_connection(&self.path, &self.options).inspect_err(|_| {
            lock(&self.state).open -= 1;
            self.returned.notify_one();
        })
    }

    /// How many connections exist now, idle or lent.
    #[cfg(test)]
    pub(super) fn open(&self) -> usize {
        lock(&self.state).open
    }
}

impl Drop for Readers {
    /// Connections given back after `close_idle` close here.
    fn drop(&mut self) {
        let idle = std::mem::take(&mut lock(&self.state).idle);
        self.close(idle);
    }
}

/// A connection lent for one read; given back however the read ends (a
/// panic included, so the pool never loses a slot).
struct Lent<'a> {
    conn: Option<Connection>,
    pool: &'a Readers,
}

impl Lent<'_> {
    fn conn(&self) -> &Connection {
        self.conn.as_ref().expect("present until dropped")
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            lock(&self.pool.state).idle.push(conn);
            self.pool.returned.notify_one();
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
        let (reading, peak) = (AtomicUsize::new(0), AtomicUsize::new(0));
        thread::scope(|scope| {
            for _ in 0..4 * MAX_READERS {
                scope.spawn(|| {
                    pool.read(|conn| {
                        let now = reading.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(now, Ordering::SeqCst);
                        thread::sleep(Duration::from_millis(20));
                        reading.fetch_sub(1, Ordering::SeqCst);
                        conn.query_row("SELECT 1", [], |r| r.get::<_, i64>(0))
                    })
                    .unwrap();
                });
            }
        });
        let peak = peak.load(Ordering::SeqCst);
        assert!(peak <= MAX_READERS && peak > 1, "peak {peak}");
        assert!(pool.open() <= MAX_READERS, "{} open", pool.open());
    }

    /// With every connection lent, a reader gives up after the busy timeout
    /// with `Unavailable` (a `503`), and the pool serves again once one is
    /// given back.
    #[test]
    fn a_reader_waits_at_most_the_busy_timeout() {
        let db = TempDb::new("idem-readers-timeout");
        let options = StoreOptions {
            busy_timeout: Duration::from_millis(50),
            ..StoreOptions::default()
        };
        let pool = Readers::new(&db.path, &options);
        let (lent, release) = (AtomicUsize::new(0), Mutex::new(()));
        let held = lock(&release);
        let (done_tx, done_rx) = mpsc::channel();
        thread::scope(|scope| {
            for _ in 0..MAX_READERS {
                let (pool, lent, release, done_tx) = (&pool, &lent, &release, done_tx.clone());
                scope.spawn(move || {
                    let read = pool.read(|_| {
                        lent.fetch_add(1, Ordering::SeqCst);
                        drop(lock(release));
                        Ok(())
                    });
                    done_tx.send(read.is_ok()).unwrap();
                });
            }
            while lent.load(Ordering::SeqCst) < MAX_READERS {
                thread::yield_now();
            }
            let refused = pool.read(|_| Ok(()));
            assert!(
                matches!(refused, Err(StoreError::Unavailable(_))),
                "{refused:?}"
            );
            drop(held);
        });
        assert!(done_rx.iter().take(MAX_READERS).all(|ok| ok));
        assert!(pool.read(|_| Ok(())).is_ok());
    }
}
