//! `PausedSet`: the tools paused now, as this process knows them — what
//! `dispatch` checks before it queues, reserves or polls for a tool's calls,
//! and what the `paused` chore keeps in step with the database. A leaf of
//! the runner: it names neither.
//!
//! It only spares work: the store's claim statements refuse a paused tool's
//! calls themselves. A lookup costs one atomic load while nothing is paused.

use crate::lock::lock;
use crate::store::PausedTool;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

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
