//! The task table's part in a stop whose grace period is over: the `Stop`
//! of every tool still running (and the run to ask it for), for the runner
//! to halt them all; how each halted tool ended, kept on its entry by its
//! worker; and what `close` says was done to each tool whose lease it
//! hands back. Nothing here asks a `Stop` under the table's lock.

use super::{Entry, State, TaskTable};
use crate::lock::lock;
use crate::store::ToolAtRelease;
use crate::tools::Stop;

impl<H: Clone> TaskTable<H> {
    /// The worker `Stop` and run of every tool running now.
    pub(in crate::runner) fn running_stops(&self) -> Vec<(Stop, u64)> {
        lock(&self.table)
            .entries
            .values()
            .filter_map(|entry| match &entry.state {
                State::Running {
                    stop: Some(stop), ..
                } => Some((stop.clone(), entry.generation)),
                _ => None,
            })
            .collect()
    }

    /// The tool of `task` returned after a stopping service halted it:
    /// its lease is to be given back (by `close`), saying so. `false` when
    /// `close` has already taken the entry (it said the tool had not ended).
    pub(in crate::runner) fn halted(&self, task: &super::Task, sent: bool, how: String) -> bool {
        let mut table = lock(&self.table);
        match table.own_entry(task) {
            Some(entry) if matches!(entry.state, State::Returned { .. }) => {
                entry.halted = Some(ToolAtRelease::Stopped { sent, how });
                true
            }
            _ => false,
        }
    }
}

impl Entry {
    /// What was done to this entry's tool, as its lease is handed back.
    pub(super) fn tool_at_release(&self) -> ToolAtRelease {
        match (&self.state, &self.halted) {
            (State::Returned { .. }, Some(halted)) => halted.clone(),
            (
                State::Running {
                    stop: Some(stop), ..
                },
                _,
            ) if stop.is_shutdown() => ToolAtRelease::StillStopping { sent: stop.sent() },
            _ => ToolAtRelease::Idle,
        }
    }
}
