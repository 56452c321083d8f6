//! The health check's read of the database file on a new connection, made
//! on a thread of its own and waited for at most the deadline.
//!
//! A fresh connection is the only one that notices the file becoming
//! unreadable (permissions changed, the file replaced), but opening one
//! touches the file system: on one that stopped answering it blocks in the
//! kernel (SQLite, run as root, `fchown`s what it opens), where nothing
//! wakes it. So `/healthz` never makes the read itself: it starts one here
//! and waits by its own clock. A read still blocked from an earlier check is
//! waited on again, never doubled, and reported with its age, so a stalled
//! file system costs at most one thread however often `/healthz` is asked.
//!
//! This module never writes, and never keeps a connection.

use super::report_reads;
use crate::lock::lock;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Fresh reads of one database file, at most one at a time.
pub(super) struct HealthProbe {
    path: PathBuf,
    in_flight: Mutex<Option<Probe>>,
}

/// A read under way: when it began, where its answer comes, its thread.
struct Probe {
    started: Instant,
    answer: mpsc::Receiver<Result<(), String>>,
    thread: JoinHandle<()>,
}

impl HealthProbe {
    pub(super) fn new(path: &Path) -> HealthProbe {
        HealthProbe {
            path: path.to_path_buf(),
            in_flight: Mutex::new(None),
        }
    }

    /// Whether a new connection reads the file within `within` of the read's
    /// start: the read already under way, or one started now.
    pub(super) fn check(&self, within: Duration) -> Result<(), String> {
        let mut in_flight = lock(&self.in_flight);
        let probe = match in_flight.take() {
            Some(probe) => probe,
            None => self.start()?,
        };
        let left = (probe.started + within).saturating_duration_since(Instant::now());
        let outcome = match probe.answer.recv_timeout(left) {
            Ok(outcome) => outcome,
            Err(RecvTimeoutError::Timeout) => {
                let waited = probe.started.elapsed().as_secs_f64();
                *in_flight = Some(probe);
                return Err(format!(
                    "a read of the file on a new connection has not returned for {waited:.1} s \
                     (--db-timeout-ms {} ms): its file system is not answering",
                    within.as_millis()
                ));
            }
            Err(RecvTimeoutError::Disconnected) => Err("the health check's read panicked".into()),
        };
        let _ = probe.thread.join();
        outcome
    }

    fn start(&self) -> Result<Probe, String> {
        let (tell, answer) = mpsc::sync_channel(1);
        let path = self.path.clone();
        let thread = std::thread::Builder::new()
            .name("store-health".into())
            .spawn(move || {
                let read = report_reads::fresh_read(&path).map_err(|e| e.to_string());
                let _ = tell.send(read);
            })
            .map_err(|e| format!("cannot start the health check's read: {e}"))?;
        Ok(Probe {
            started: Instant::now(),
            answer,
            thread,
        })
    }

    /// The store is stopping: join a read that has returned. One still
    /// blocked in the kernel is left to end when its file system answers.
    pub(super) fn close(&self) {
        if let Some(probe) = lock(&self.in_flight).take() {
            if probe.thread.is_finished() {
                let _ = probe.thread.join();
            }
        }
    }
}
