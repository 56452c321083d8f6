//! The task table's part in a cancel: remembering that a call's cancel was
//! asked, finding the `Stop` of the worker running its tool (and the run
//! to ask it for: the entry's generation), asking a worker's `Stop` as it
//! attaches to an entry whose cancel came first, and naming the attempts
//! running here for the check that asks the store about cancels. Nothing
//! here asks a `Stop` under the table's lock but the attaching worker's own.

use super::{Entry, State, TaskTable};
use crate::lock::lock;
use crate::store::LeaseHeld;
use crate::tools::Stop;

impl<H: Clone> TaskTable<H> {
    /// The call's cancel was asked (of `attempt`, when the asker knows
    /// which): remember it on its entry, and if its tool runs now, the
    /// worker's `Stop` and the run to ask it for (the caller asks, outside
    /// this lock). `None` when this process does not run it now, or was
    /// told already.
    pub(in crate::runner) fn cancel(
        &self,
        call_id: &str,
        attempt: Option<i64>,
    ) -> Option<(Stop, u64)> {
        let mut table = lock(&self.table);
        let entry = table.entries.get_mut(call_id)?;
        let running = match &entry.state {
            State::Running { lease, stop, .. } if attempt.is_none_or(|a| a == lease.attempt) => {
                stop.clone()
            }
            State::Running { .. } => return None,
            _ => None,
        };
        let news = !entry.cancel_asked;
        entry.cancel_asked = true;
        running
            .filter(|_| news)
            .map(|stop| (stop, entry.generation))
    }

    /// The attempts of the tools running here now: what the check for
    /// cancels asks about (`cancels_asked`).
    pub(in crate::runner) fn running(&self) -> Vec<LeaseHeld> {
        lock(&self.table)
            .entries
            .values()
            .filter_map(|entry| match &entry.state {
                State::Running { lease, .. } => Some(LeaseHeld::from(lease)),
                _ => None,
            })
            .collect()
    }
}

impl Entry {
    /// A worker's `Stop` joins a running entry; a cancel already asked asks
    /// it now, for this entry's run.
    pub(super) fn attach(&mut self, stop: Option<&Stop>) {
        let (Some(stop), State::Running { stop: slot, .. }) = (stop, &mut self.state) else {
            return;
        };
        *slot = Some(stop.clone());
        if self.cancel_asked {
            stop.request(self.generation);
        }
    }
}
