//! Per-tool concurrency caps (`max_concurrency`): which queued calls may go
//! to a worker now, and which wait in memory for a slot of their tool.
//!
//! A call over its tool's cap waits here, never in a worker: it stays
//! `pending` in the database and costs a few bytes, so a slow downstream can
//! hold at most its cap of workers and the other tools keep the rest. A
//! slot is taken when a call is handed to the workers' queue and given back
//! when that call leaves the runner (claimed and completed, or not won); the
//! next waiting call of the tool then takes it, oldest first.
//!
//! It must never decide who executes a call (the store's claim does) and never
//! hold its lock while sending to the queue or touching the store: the lock
//! guards counts and waiting lists only. Caps are per process.

use crate::sync::lock;
use crate::tools::ToolRegistry;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// The slots of one capped tool.
struct Slots<T> {
    cap: usize,
    /// Calls handed to the workers and not yet finished.
    taken: usize,
    /// Calls waiting for a slot, oldest first.
    waiting: VecDeque<T>,
}

/// Slots for every tool that has a cap; tools without one pass straight on.
pub(super) struct Admission<T> {
    tools: Mutex<HashMap<String, Slots<T>>>,
}

impl<T> Admission<T> {
    pub(super) fn new(registry: &ToolRegistry) -> Admission<T> {
        let tools = registry
            .specs()
            .filter_map(|spec| {
                let cap = spec.max_concurrency?;
                let slots = Slots {
                    cap,
                    taken: 0,
                    waiting: VecDeque::new(),
                };
                Some((spec.name.clone(), slots))
            })
            .collect();
        Admission {
            tools: Mutex::new(tools),
        }
    }

    /// `Some(item)`: send it to the workers now (its slot is taken). `None`:
    /// its tool is at its cap, and the item waits here until `release`.
    pub(super) fn admit(&self, tool: &str, item: T) -> Option<T> {
        let mut tools = lock(&self.tools);
        let Some(slots) = tools.get_mut(tool) else {
            return Some(item);
        };
        if slots.taken < slots.cap {
            slots.taken += 1;
            Some(item)
        } else {
            slots.waiting.push_back(item);
            None
        }
    }

    /// A call of `tool` that was admitted has left the runner. Returns the
    /// next waiting call of that tool, which takes over the slot, if any.
    pub(super) fn release(&self, tool: &str) -> Option<T> {
        let mut tools = lock(&self.tools);
        let slots = tools.get_mut(tool)?;
        match slots.waiting.pop_front() {
            Some(next) => Some(next),
            None => {
                slots.taken = slots.taken.saturating_sub(1);
                None
            }
        }
    }

    /// Forget every waiting call (a stopping runner): they stay `pending` in
    /// the database for the next process.
    pub(super) fn drop_waiting(&self) -> usize {
        let mut tools = lock(&self.tools);
        tools
            .values_mut()
            .map(|slots| std::mem::take(&mut slots.waiting).len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn registry() -> ToolRegistry {
        let text = r#"{"tools": {
            "sleep": {"kind": "builtin", "max_concurrency": 2},
            "charge": {"kind": "builtin"}
        }}"#;
        ToolRegistry::from_json("t.json", text, Path::new("/"), &|_| None).unwrap()
    }

    /// Over the cap a call waits; each release hands the slot to the oldest
    /// waiting call, and only with nobody waiting does the count go down.
    #[test]
    fn a_capped_tool_admits_up_to_its_cap_and_hands_slots_on_in_order() {
        let admission = Admission::new(&registry());
        assert_eq!(admission.admit("sleep", 1), Some(1));
        assert_eq!(admission.admit("sleep", 2), Some(2));
        assert_eq!(admission.admit("sleep", 3), None);
        assert_eq!(admission.admit("sleep", 4), None);
        assert_eq!(admission.admit("charge", 5), Some(5), "no cap, no wait");
        assert_eq!(admission.release("sleep"), Some(3));
        assert_eq!(admission.release("sleep"), Some(4));
        assert_eq!(admission.release("sleep"), None);
        assert_eq!(admission.release("sleep"), None);
        assert_eq!(admission.admit("sleep", 6), Some(6));
        assert_eq!(admission.admit("sleep", 7), Some(7));
        assert_eq!(admission.admit("sleep", 8), None);
        assert_eq!(admission.drop_waiting(), 1);
        assert_eq!(admission.release("charge"), None);
    }
}
