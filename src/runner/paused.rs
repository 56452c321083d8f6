//! Paused tools as this process knows them (`PausedSet`), and the chore
//! that keeps it in step with the database (`PauseRefresh`, every
//! `HEARTBEAT_EVERY`): a pause or resume made here is known here at once;
//! one made by another process or node within an interval.
//!
//! The set only spares work: the runner does not queue, reserve or poll for
//! a paused tool's calls (they wait `pending`), and the API says why such a
//! call waits. What stops a claim is the store — every claim statement
//! checks `paused_tools` itself (`store::paused`) — so a process that has
//! not yet heard of a pause still claims none of its calls. When a tool
//! leaves the set (resumed, here or elsewhere) the runner polls at once, and
//! its waiting calls are claimed oldest first.
//!
//! A lookup costs one atomic load while nothing is paused (the usual case).

use super::chore::Chore;
use super::dispatch::Dispatch;
use super::paused_set::PausedSet;
use crate::log::{self, Repeats, BACKGROUND_FAILURE_EVERY};
use crate::metrics::Metrics;
use crate::store::{CallStore, HEARTBEAT_EVERY};
use std::sync::Arc;
use std::time::Duration;

/// Fails again on every pass while the fault lasts: one line per interval.
static REFRESH_FAILED: Repeats = Repeats::every(BACKGROUND_FAILURE_EVERY);

/// The chore that reads the paused tools from the database.
pub(super) struct PauseRefresh {
    pub(super) paused: Arc<PausedSet>,
    pub(super) dispatch: Arc<Dispatch>,
    pub(super) store: Arc<CallStore>,
    pub(super) metrics: Arc<Metrics>,
}

impl PauseRefresh {
    /// Read the paused tools; poll at once if one was resumed elsewhere.
    pub(super) fn run_once(&self) {
        match self.store.paused_tools() {
            Ok(paused) => {
                let names: Vec<String> = paused.iter().map(|p| p.tool.clone()).collect();
                if self.paused.replace(paused) {
                    self.dispatch.poll_soon();
                }
                self.metrics.operator.set_paused_tools(&names);
            }
            Err(e) => log::warn("could not read the paused tools")
                .event("paused_tools_unread")
                .cause(&e)
                .emit_or_count(&REFRESH_FAILED),
        }
    }
}

impl Chore for PauseRefresh {
    fn every(&self) -> Duration {
        HEARTBEAT_EVERY
    }

    fn run(&self) {
        self.run_once();
    }
}
