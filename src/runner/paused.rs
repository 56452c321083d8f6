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

use super::dispatch::Dispatch;
use super::maintenance::Chore;
use crate::lock::lock;
use crate::log::{self, Repeats, BACKGROUND_FAILURE_EVERY};
use crate::metrics::Metrics;
use crate::store::{CallStore, PausedTool, HEARTBEAT_EVERY};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Fails again on every pass while the fault lasts: one line per interval.
static REFRESH_FAILED: Repeats = Repeats::every(BACKGROUND_FAILURE_EVERY);

/// The tools paused now, as last read or changed here.
#[derive(Default)]
pub struct PausedSet {
    tools: Mutex<BTreeMap<String, PausedTool>>,
    /// Whether `tools` holds any: the fast path of `is_paused`.
    any: AtomicBool,
}

impl PausedSet {
    /// Whether `tool` is paused, as far as this process knows.
    pub fn is_paused(&self, tool: &str) -> bool {
        self.any.load(Ordering::Acquire) && lock(&self.tools).contains_key(tool)
    }

    /// Every paused tool, by name.
    pub fn all(&self) -> Vec<PausedTool> {
        lock(&self.tools).values().cloned().collect()
    }

    /// `tool`'s pause, if it is paused.
    pub fn get(&self, tool: &str) -> Option<PausedTool> {
        lock(&self.tools).get(tool).cloned()
    }

    /// Now exactly `paused`; returns whether a tool left the set (its
    /// calls are due again).
    pub(super) fn replace(&self, paused: Vec<PausedTool>) -> bool {
        let mut tools = lock(&self.tools);
        let resumed = tools
            .keys()
            .any(|tool| !paused.iter().any(|p| &p.tool == tool));
        *tools = paused.into_iter().map(|p| (p.tool.clone(), p)).collect();
        self.any.store(!tools.is_empty(), Ordering::Release);
        resumed
    }

    /// `tool` paused as `paused` says (a pause made here).
    pub(super) fn insert(&self, paused: PausedTool) {
        let mut tools = lock(&self.tools);
        tools.insert(paused.tool.clone(), paused);
        self.any.store(true, Ordering::Release);
    }

    /// `tool` resumed (here).
    pub(super) fn remove(&self, tool: &str) {
        let mut tools = lock(&self.tools);
        tools.remove(tool);
        self.any.store(!tools.is_empty(), Ordering::Release);
    }
}

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
