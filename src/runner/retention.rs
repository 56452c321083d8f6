//! Key retention, a job of the maintenance ticker: about once a second, purge
//! terminal calls older than `--key-ttl` in small write batches (at most
//! `PURGE_BATCH` calls each, so the writer is never held long), count them in
//! the process's purge counter, log the pass, and hand the purged keys to
//! `on_purged` so the key cache (`calls`) forgets them.
//!
//! It never chooses what to delete: the store's conditional `DELETE` does,
//! and it never deletes a `pending` or `running` call or an effect.

use super::chore::Chore;
use super::dispatch::Dispatch;
use crate::log::{self, Repeats, BACKGROUND_FAILURE_EVERY};
use crate::metrics::Metrics;
use crate::store::{CallStore, Purged};
use std::sync::Arc;
use std::time::Duration;

/// Fails again on every pass while the fault lasts: one line per interval.
static PURGE_FAILED: Repeats = Repeats::every(BACKGROUND_FAILURE_EVERY);

/// How often the maintenance ticker looks for expired keys.
const PURGE_EVERY: Duration = Duration::from_secs(1);
/// Calls purged per write batch: small, so the writer is never held long.
const PURGE_BATCH: usize = 100;
/// Batches per purge pass, so a large backlog drains over several passes
/// instead of holding the maintenance ticker.
const PURGE_BATCHES_PER_PASS: usize = 50;

/// Told which calls a purge removed (the key cache forgets their keys).
pub type OnPurged = Box<dyn Fn(&[Purged]) + Send + Sync>;

/// Key retention's pass.
pub(super) struct Purge {
    /// Only to end a pass early once a stop has begun.
    pub(super) dispatch: Arc<Dispatch>,
    pub(super) store: Arc<CallStore>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) on_purged: OnPurged,
}

impl Chore for Purge {
    fn every(&self) -> Duration {
        PURGE_EVERY
    }

    /// Purge expired terminal calls in small batches, count them, log the
    /// pass, and have their keys forgotten.
    fn run(&self) {
        let mut total = 0;
        for _ in 0..PURGE_BATCHES_PER_PASS {
            match self.store.purge_expired(PURGE_BATCH) {
                Ok(purged) if purged.is_empty() => break,
                Ok(purged) => {
                    total += purged.len();
                    self.metrics.purges.inc_by(purged.len() as u64);
                    (self.on_purged)(&purged);
                }
                Err(e) => {
                    log::error("purge failed")
                        .event("purge_failed")
                        .cause(&e)
                        .emit_or_count(&PURGE_FAILED);
                    break;
                }
            }
            if self.dispatch.is_stopping() {
                break;
            }
        }
        if total > 0 {
            log::info("expired calls purged")
                .event("purge")
                .number("calls", total as u64)
                .emit();
        }
    }
}
