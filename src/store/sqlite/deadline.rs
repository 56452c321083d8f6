//! How long a caller waits on the SQLite file (`--db-timeout-ms`, shared
//! with PostgreSQL), what it is told when the wait ends first, and the
//! leases of writes that committed after their callers gave up.
//!
//! A file system that stops answering (`fsfreeze`, a hung disk or network
//! volume) blocks the writer, the syncer and whatever else touches the file
//! in the kernel; nothing in the process can wake them. So every wait a
//! request makes on them is a `Handoff` waited by its own clock, and past
//! the deadline the answer says what is known:
//! - a write that never began will not run (its job is skipped when its
//!   turn comes): nothing was written;
//! - a write that began may still commit when the file answers again, so
//!   the answer never says it did not: it says to retry with the same key,
//!   which finds the call if it did;
//! - once the writer has finished nothing for the whole deadline, a new
//!   write is refused before it is queued, so a long stall neither piles up
//!   jobs nor costs each request the full wait.
//!
//! A write that began and then committed late may have taken leases nobody
//! holds (a call created claimed for a request that had gone, a claim whose
//! worker gave up): `LateLeases` keeps them until the next recovery pass
//! gives them back, so those calls run at once rather than after their
//! leases lapse.
//!
//! This module decides no transition and runs no SQL of its own; the writer
//! still runs every job in order, and a job that runs commits as before.

use super::super::error::StoreError;
use super::super::model::Lease;
use super::handoff::{Handoff, Waited};
use super::writer::{Lane, Writer};
use crate::lock::lock;
use rusqlite::Connection;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The longest a caller waits for the writer or a reader (`--db-timeout-ms`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Deadline(Duration);

impl Deadline {
    pub(super) fn new(within: Duration) -> Deadline {
        Deadline(within)
    }

    pub(super) fn within(self) -> Duration {
        self.0
    }

    /// The instant a wait that starts now must end.
    pub(super) fn ends_at(self) -> Instant {
        Instant::now() + self.0
    }

    fn ms(self) -> u128 {
        self.0.as_millis()
    }

    /// Refused before it was queued, or skipped when its turn came.
    fn write_not_started(self) -> StoreError {
        StoreError::unavailable(format!(
            "the writer did not take this write within {} ms (--db-timeout-ms); nothing was written",
            self.ms()
        ))
    }

    /// Begun, not known to be committed: it may still commit.
    fn write_unfinished(self) -> StoreError {
        StoreError::unavailable(format!(
            "the database file did not finish this write within {} ms (--db-timeout-ms); \
             it may still commit: retry with the same key",
            self.ms()
        ))
    }

    pub(super) fn read_not_started(self) -> StoreError {
        StoreError::unavailable(format!(
            "no read connection was free within {} ms (--db-timeout-ms)",
            self.ms()
        ))
    }

    pub(super) fn read_unfinished(self) -> StoreError {
        StoreError::unavailable(format!(
            "the database file did not answer a read within {} ms (--db-timeout-ms)",
            self.ms()
        ))
    }

    /// `Err` when the writer has had work queued and finished nothing for
    /// the whole deadline: what `/healthz` reports and new writes are
    /// refused for.
    pub(super) fn check_writer(self, writer: &Writer) -> Result<(), String> {
        match writer.stuck_for() {
            Some((stuck, queued)) if stuck >= self.0 => Err(format!(
                "no batch finished for {:.1} s with {queued} operations queued: the database \
                 file is not answering (a stalled file system, or another process holding \
                 the write lock)",
                stuck.as_secs_f64()
            )),
            _ => Ok(()),
        }
    }

    /// Queue `op` for the writer in `lane` and wait for its batch to be
    /// committed and synced, at most this long. A write that commits after
    /// its caller gave up hands what it returned to `late`.
    pub(super) fn write<T, F>(
        self,
        writer: &Writer,
        lane: Lane,
        op: F,
        late: impl FnOnce(T) + Send + 'static,
    ) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        if let Err(why) = self.check_writer(writer) {
            return Err(StoreError::unavailable(format!(
                "{why}; nothing was written"
            )));
        }
        let until = self.ends_at();
        let handoff = Arc::new(Handoff::default());
        let (runs, answers) = (Arc::clone(&handoff), Arc::clone(&handoff));
        writer.submit_in(
            lane,
            move |conn: &Connection| match runs.start() {
                true => op(conn).map(Some),
                // Its caller gave up before its turn: it writes nothing.
                false => Ok(None),
            },
            Box::new(move |outcome| {
                if let Some(Ok(Some(value))) = answers.answer(outcome) {
                    late(value);
                }
            }),
        );
        match handoff.wait_until(until) {
            Waited::Answer(Ok(Some(value))) => Ok(value),
            Waited::Answer(Ok(None)) | Waited::NotStarted => Err(self.write_not_started()),
            Waited::Answer(Err(e)) => Err(e),
            Waited::Unfinished => Err(self.write_unfinished()),
        }
    }
}

/// Leases committed for callers that had already given up, waiting to be
/// given back by the next recovery pass.
#[derive(Default)]
pub(super) struct LateLeases(Mutex<Vec<Lease>>);

impl LateLeases {
    pub(super) fn keep(&self, leases: impl IntoIterator<Item = Lease>) {
        lock(&self.0).extend(leases);
    }

    pub(super) fn take(&self) -> Vec<Lease> {
        std::mem::take(&mut *lock(&self.0))
    }
}
