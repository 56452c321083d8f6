//! The task table: every call this process has taken on, from the moment it
//! is submitted until its completion is answered, in one entry under one
//! lock — whether it is queued for a worker, waiting for a slot of its tool
//! (`max_concurrency`), being claimed, running under a lease (and when that
//! lease is next extended), handing its completion to the store, or holding
//! a completion the store refused until it is handed over again. The
//! per-tool slots live under the same lock, so a slot and the entry that
//! holds it never disagree.
//!
//! A call the process claimed before taking it on (the poll's, or one
//! created claimed) enters already `Running` under its lease (`adopt`), in
//! a slot reserved before the claim (`reserve_slot`, `reserve_free_slots`).
//!
//! An entry belongs to one submission, named by its generation: recovery may
//! forget a call whose lease expired while a stalled worker of this process
//! still holds it, and submit it again; the stalled worker's later steps then
//! no longer touch the new entry (and the fence discards its completion).
//!
//! It never decides who executes a call — the store's claim does — and never
//! holds its lock while sending to the workers or touching the store: the
//! runner asks it what to do, does it, and reports back. It also keeps the
//! handle completions are handed back through; `close` drops it, so once
//! every completion already handed over is answered, the completion thread
//! ends.
//!
//! Each transition asserts the state it leaves (`assert_leaves`), and a lease
//! taken on that its attempt is at least 1, in a debug build: a step out of
//! order is a bug in the runner, and the table must not smooth it over.
//!
//! A running entry also holds its worker's `Stop`, and each entry whether
//! its call's cancel was asked (`cancel`): a cancel that finds the tool
//! running asks its `Stop` (by the entry's generation, the run's id); one
//! that comes before the worker has started the tool is kept, and the
//! worker's `Stop` is asked as it attaches — so the tool never starts
//! (`tasks/cancel.rs`). A stop whose grace period is over asks every
//! running tool's `Stop` the same way, and each entry keeps how its tool
//! was stopped until `close` hands its lease back with it
//! (`tasks/shutdown.rs`).

use crate::lock::lock;
use crate::store::{Lease, LeaseHeld, ToolAtRelease};
use crate::tools::{Stop, ToolRegistry};
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One call on its way to a worker; `generation` says which submission it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Task {
    pub(super) call_id: String,
    /// Its tool, whose concurrency slot it holds once admitted.
    pub(super) tool: String,
    pub(super) generation: u64,
    /// Known to return at once: another call may be claimed along with it.
    pub(super) quick: bool,
}

/// Where a call is in this process.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum State {
    /// In the workers' queue, its tool's slot taken (if the tool is capped).
    Queued,
    /// Over its tool's cap: waits here, `pending` in the database, holding no
    /// worker.
    WaitingForSlot,
    /// A worker is claiming it; the store's conditional `UPDATE` decides.
    Claiming,
    /// Its tool runs under `lease`.
    Running {
        lease: Lease,
        /// When the lease is next extended (every third of the lease); `None`
        /// once the store reported it lost: it is never extended again.
        next_heartbeat: Option<Instant>,
        /// The worker's stop handle, once a worker has it (an adopted call
        /// waits in the queue without one).
        stop: Option<Stop>,
    },
    /// The tool returned: the lease is held but no longer extended, so a
    /// worker stalled here lets it expire and its completion is fenced off.
    Returned { lease: Lease },
    /// The fenced completion is with the store's writer. Its executor is
    /// alive and holds the outcome, so this process's recovery leaves the
    /// lease alone, lapsed or not, as it does a `Held` one: on PostgreSQL a
    /// completion waits here for as long as `--db-timeout-ms` when the
    /// database froze, and its lease lapses meanwhile.
    Completing { lease: LeaseHeld },
    /// Its completion could not be committed and the completer hands it to
    /// the store again (`completion`): the tool has returned, its executor
    /// is alive, so this process's recovery leaves the lease alone, lapsed
    /// or not, as it does a running tool's (`extended_leases`).
    Held { lease: LeaseHeld },
}

impl State {
    /// The state's name alone: an assertion's message must not print a
    /// lease (it holds the call's args).
    fn name(&self) -> &'static str {
        match self {
            State::Queued => "Queued",
            State::WaitingForSlot => "WaitingForSlot",
            State::Claiming => "Claiming",
            State::Running { .. } => "Running",
            State::Returned { .. } => "Returned",
            State::Completing { .. } => "Completing",
            State::Held { .. } => "Held",
        }
    }
}

/// In a debug build, stop at a transition out of a state it may not leave:
/// the runner's steps are out of order, which the table must not paper over.
fn assert_leaves(transition: &str, entry: &Entry, allowed: fn(&State) -> bool) {
    debug_assert!(
        allowed(&entry.state),
        "{transition} from {}",
        entry.state.name()
    );
}

/// In a debug build, stop at a lease of no attempt: every claim makes
/// attempt 1 or later, so such a lease was made by no claim.
fn assert_claimed(lease: &Lease) {
    debug_assert!(
        lease.attempt >= 1,
        "a lease of attempt {}: no claim makes one",
        lease.attempt
    );
}

struct Entry {
    generation: u64,
    state: State,
    /// Its call's cancel was asked while this process had it: the worker's
    /// `Stop` is asked as soon as the entry has one.
    cancel_asked: bool,
    /// Its tool was stopped because the process is stopping, and how: what
    /// the audit says when `close` hands the lease back.
    halted: Option<ToolAtRelease>,
}

/// The slots of one capped tool.
struct Slots {
    cap: usize,
    /// Admitted calls (queued, claiming, running or completing) not finished.
    taken: usize,
    /// Calls waiting for a slot, oldest first. An item whose entry has since
    /// gone (or belongs to a newer submission) is skipped.
    waiting: VecDeque<Task>,
}

struct Table<H> {
    entries: HashMap<String, Entry>,
    /// Only tools with a cap; the others pass straight on.
    slots: HashMap<String, Slots>,
    next_generation: u64,
    /// How completions are handed back; `None` once closed, when no call is
    /// taken on any more.
    completions: Option<H>,
}

/// The table; `H` is the handle completions are handed back through.
pub(super) struct TaskTable<H> {
    table: Mutex<Table<H>>,
    /// A third of the lease.
    heartbeat_every: Duration,
}

impl<H: Clone> TaskTable<H> {
    pub(super) fn new(tools: &ToolRegistry, lease: Duration, completions: H) -> TaskTable<H> {
        let slots = tools
            .specs()
            .filter_map(|spec| {
                let cap = spec.max_concurrency?;
                let waiting = VecDeque::new();
                Some((
                    spec.name.clone(),
                    Slots {
                        cap,
                        taken: 0,
                        waiting,
                    },
                ))
            })
            .collect();
        TaskTable {
            table: Mutex::new(Table {
                entries: HashMap::new(),
                slots,
                next_generation: 0,
                completions: Some(completions),
            }),
            heartbeat_every: lease / 3,
        }
    }

    /// Take on a call unless this process already has it or is closed.
    /// `Some(task)`: send it to the workers now (its slot is taken). `None`:
    /// nothing to send — known already, closed, or waiting for a slot.
    pub(super) fn submit(&self, call_id: &str, tool: &str, quick: bool) -> Option<Task> {
        let mut table = lock(&self.table);
        if table.completions.is_none() || table.entries.contains_key(call_id) {
            return None;
        }
        table.next_generation += 1;
        let task = Task {
            call_id: call_id.to_string(),
            tool: tool.to_string(),
            generation: table.next_generation,
            quick,
        };
        let admitted = match table.slots.get_mut(tool) {
            Some(slots) if slots.taken >= slots.cap => {
                slots.waiting.push_back(task.clone());
                false
            }
            Some(slots) => {
                slots.taken += 1;
                true
            }
            None => true,
        };
        let state = if admitted {
            State::Queued
        } else {
            State::WaitingForSlot
        };
        let generation = task.generation;
        let entry = Entry {
            generation,
            state,
            cancel_asked: false,
            halted: None,
        };
        table.entries.insert(call_id.to_string(), entry);
        admitted.then_some(task)
    }

    /// Take one of `tool`'s slots for a call this process is about to claim
    /// itself (`Runner::reserve`): `false` when the tool is at its cap or the
    /// table is closed. An uncapped tool always has room.
    pub(super) fn reserve_slot(&self, tool: &str) -> bool {
        let mut table = lock(&self.table);
        if table.completions.is_none() {
            return false;
        }
        match table.slots.get_mut(tool) {
            Some(slots) if slots.taken >= slots.cap => false,
            Some(slots) => {
                slots.taken += 1;
                true
            }
            None => true,
        }
    }

    /// For a poll that may claim up to `limit` calls: take every free slot of
    /// each capped tool (at most `limit` each) and name them — a tool at its
    /// cap with zero — so the claim takes no more calls of a capped tool than
    /// this process has slots for. Nothing when the table is closed.
    pub(super) fn reserve_free_slots(&self, limit: usize) -> Vec<(String, usize)> {
        let mut table = lock(&self.table);
        if table.completions.is_none() {
            return Vec::new();
        }
        table
            .slots
            .iter_mut()
            .map(|(tool, slots)| {
                let free = slots.cap.saturating_sub(slots.taken).min(limit);
                slots.taken += free;
                (tool.clone(), free)
            })
            .collect()
    }

    /// Give back a reserved slot no call took: it passes to the oldest call
    /// waiting for one (returned, to be sent to the workers), or is freed.
    pub(super) fn give_back_slot(&self, tool: &str) -> Option<Task> {
        lock(&self.table).pass_slot_on(tool)
    }

    /// Take on a call this process has already claimed, its tool's slot
    /// already reserved: it enters `Running` under `lease`, extended from now
    /// on like any running call's, and replaces whatever entry the call had
    /// (a queued submission's worker then finds it no longer its own, and
    /// claims nothing). `None` when the table is closed: the caller gives
    /// the lease back.
    pub(super) fn adopt(&self, lease: &Lease, quick: bool) -> Option<Task> {
        assert_claimed(lease);
        let next_heartbeat = Some(Instant::now() + self.heartbeat_every);
        let mut table = lock(&self.table);
        table.completions.as_ref()?;
        table.next_generation += 1;
        let task = Task {
            call_id: lease.call_id.clone(),
            tool: lease.tool.clone(),
            generation: table.next_generation,
            quick,
        };
        table.set_running(&task, lease, next_heartbeat, None);
        Some(task)
    }

    /// A worker took an adopted task from the queue: `true` if it is still
    /// this submission's and running, so its tool may run — under `stop`,
    /// which a cancel asked meanwhile is asked at once. `false`: a stop took
    /// its lease to give back, or recovery took the call away.
    pub(super) fn starts(&self, task: &Task, stop: Option<&Stop>) -> bool {
        let mut table = lock(&self.table);
        if table.completions.is_none() {
            return false;
        }
        match table.own_entry(task) {
            Some(
                entry @ Entry {
                    state: State::Running { .. },
                    ..
                },
            ) => {
                entry.attach(stop);
                true
            }
            _ => false,
        }
    }

    /// A worker took `task` from the queue: `true` if it is still this
    /// submission's to claim. `false`: the call was forgotten by recovery (a
    /// newer submission has it), and the worker just `finish`es it.
    pub(super) fn take(&self, task: &Task) -> bool {
        let mut table = lock(&self.table);
        match table.own_entry(task) {
            Some(entry) if entry.state == State::Queued => {
                entry.state = State::Claiming;
                true
            }
            _ => false,
        }
    }

    /// The claim won `lease`: the tool may run under `stop`, with its lease
    /// extended from now on. `false` when the table was closed meanwhile
    /// (the process is stopping): the caller gives the lease back instead of
    /// running the tool. A submission that replaced this one while it was
    /// claiming is replaced in turn: this one holds the lease.
    pub(super) fn claimed(&self, task: &Task, lease: &Lease, stop: Option<&Stop>) -> bool {
        assert_claimed(lease);
        let next_heartbeat = Some(Instant::now() + self.heartbeat_every);
        let mut table = lock(&self.table);
        if table.completions.is_none() {
            return false;
        }
        let cancel_asked = match table.own_entry(task) {
            Some(entry) => {
                assert_leaves("claimed", entry, |s| *s == State::Claiming);
                entry.cancel_asked
            }
            None => false,
        };
        let entry = table.set_running(task, lease, next_heartbeat, None);
        entry.cancel_asked = cancel_asked;
        entry.attach(stop);
        true
    }

    /// The tool returned: its lease is no longer extended.
    pub(super) fn returned(&self, task: &Task) {
        let mut table = lock(&self.table);
        if let Some(entry) = table.own_entry(task) {
            assert_leaves("returned", entry, |s| matches!(s, State::Running { .. }));
            // `Queued` only holds the place until the line below.
            let state = std::mem::replace(&mut entry.state, State::Queued);
            entry.state = match state {
                State::Running { lease, .. } => State::Returned { lease },
                other => other,
            };
        }
    }

    /// The worker is about to hand its completion to the store: the handle
    /// to send its outcome back through. `None` when a stop has closed the
    /// table (it gave the lease back, or the lease was lost and the call is
    /// the next process's): the completion would only be discarded. A call
    /// whose entry recovery took away still completes: the fence decides.
    pub(super) fn completing(&self, task: &Task) -> Option<H> {
        let mut table = lock(&self.table);
        let handle = table.completions.clone()?;
        if let Some(entry) = table.own_entry(task) {
            // Returned, or Running when its stored args failed before the tool ran.
            assert_leaves("completing", entry, |s| {
                matches!(s, State::Running { .. } | State::Returned { .. })
            });
            let lease = match &entry.state {
                State::Running { lease, .. } | State::Returned { lease } => LeaseHeld::from(lease),
                _ => return Some(handle),
            };
            entry.state = State::Completing { lease };
        }
        Some(handle)
    }

    /// The handle to send a held completion's outcome back through when it
    /// is handed to the store again (its entry stays `Held`); `None` once a
    /// stop has closed the table.
    pub(super) fn completions(&self) -> Option<H> {
        lock(&self.table).completions.clone()
    }

    /// The completion's commit failed and it will be handed to the store
    /// again: from now until it is finished, recovery here leaves its lease
    /// alone.
    pub(super) fn held(&self, task: &Task, lease: LeaseHeld) {
        let mut table = lock(&self.table);
        if let Some(entry) = table.own_entry(task) {
            assert_leaves("held", entry, |s| {
                matches!(s, State::Completing { .. } | State::Held { .. })
            });
            entry.state = State::Held { lease };
        }
    }

    /// The call has left its worker (completion answered, claim not won, or
    /// dropped unclaimed): its entry goes unless a newer submission owns it,
    /// and its tool's slot passes to the oldest call still waiting for one,
    /// which is returned to be sent to the workers.
    pub(super) fn finish(&self, task: &Task) -> Option<Task> {
        let mut table = lock(&self.table);
        if let Some(entry) = table.own_entry(task) {
            // Never sent to a worker, or its completion never handed over.
            assert_leaves("finished", entry, |s| {
                !matches!(s, State::WaitingForSlot | State::Returned { .. })
            });
            table.entries.remove(&task.call_id);
        }
        table.pass_slot_on(&task.tool)
    }

    /// Recovery took the call back (its lease expired): whoever held it in
    /// this process is stalled past its lease, so the call may be taken on
    /// again.
    pub(super) fn forget(&self, call_id: &str) {
        lock(&self.table).entries.remove(call_id);
    }

    /// The leases due for extension before `horizon`, each marked extended a
    /// third of the lease from now. With their generations, for `lost`.
    pub(super) fn leases_due(&self, horizon: Instant) -> Vec<(Lease, u64)> {
        let next = Instant::now() + self.heartbeat_every;
        let mut table = lock(&self.table);
        let mut due = Vec::new();
        for entry in table.entries.values_mut() {
            if let State::Running {
                lease,
                next_heartbeat: Some(at),
                ..
            } = &mut entry.state
            {
                if *at <= horizon {
                    *at = next;
                    due.push((lease.clone(), entry.generation));
                }
            }
        }
        due
    }

    /// The leases of tools running now that this process goes on extending,
    /// and of completions it is handing to the store (`Completing`) or
    /// handing to it again (`Held`): their
    /// executors are alive, so recovery must not take them back even when a
    /// stalled or refused write let them lapse (`CallStore::recover`).
    pub(super) fn extended_leases(&self) -> Vec<LeaseHeld> {
        lock(&self.table)
            .entries
            .values()
            .filter_map(|entry| match &entry.state {
                State::Running {
                    lease,
                    next_heartbeat: Some(_),
                    ..
                } => Some(LeaseHeld::from(lease)),
                State::Completing { lease } | State::Held { lease } => Some(lease.clone()),
                _ => None,
            })
            .collect()
    }

    /// The store reported the lease lost: never extend it again. `true` if
    /// it was still being extended (so the loss is news).
    pub(super) fn lost(&self, lease: &Lease, generation: u64) -> bool {
        let mut table = lock(&self.table);
        let Some(entry) = table.entries.get_mut(&lease.call_id) else {
            return false;
        };
        match &mut entry.state {
            State::Running {
                lease: held,
                next_heartbeat,
                ..
            } if entry.generation == generation
                && held.attempt == lease.attempt
                && next_heartbeat.is_some() =>
            {
                *next_heartbeat = None;
                true
            }
            _ => false,
        }
    }

    /// Stop taking calls on: drop the calls waiting for a slot (they stay
    /// `pending` for the next process), drop the completion handle, and take
    /// out every lease still held by a tool that runs (or has returned and
    /// not yet handed over its completion), for the caller to give back,
    /// each with what was done to its tool.
    pub(super) fn close(&self) -> Vec<(Lease, ToolAtRelease)> {
        let mut table = lock(&self.table);
        table.completions = None;
        for slots in table.slots.values_mut() {
            slots.waiting.clear();
        }
        let mut held = Vec::new();
        table.entries.retain(|_, entry| match &entry.state {
            State::WaitingForSlot => false,
            State::Running { lease, .. } | State::Returned { lease } => {
                held.push((lease.clone(), entry.tool_at_release()));
                false
            }
            _ => true,
        });
        held
    }

    /// Whether this process holds the call waiting for a slot of its tool.
    pub(super) fn waits_for_slot(&self, call_id: &str) -> bool {
        lock(&self.table)
            .entries
            .get(call_id)
            .is_some_and(|e| e.state == State::WaitingForSlot)
    }

    /// Where a call is, if this process has it.
    #[cfg(test)]
    pub(super) fn state(&self, call_id: &str) -> Option<State> {
        lock(&self.table)
            .entries
            .get(call_id)
            .map(|e| e.state.clone())
    }
}

/// Marks a task's tool as running for as long as it lives: dropped — the
/// tool returned, or panicked — its lease is no longer extended.
pub(super) struct ToolRuns<'a, H: Clone> {
    tasks: &'a TaskTable<H>,
    task: &'a Task,
}

impl<'a, H: Clone> ToolRuns<'a, H> {
    pub(super) fn new(tasks: &'a TaskTable<H>, task: &'a Task) -> Self {
        ToolRuns { tasks, task }
    }
}

impl<H: Clone> Drop for ToolRuns<'_, H> {
    fn drop(&mut self) {
        self.tasks.returned(self.task);
    }
}

impl<H> Table<H> {
    /// `task`'s entry, now running under `lease` (its own submission's).
    fn set_running(
        &mut self,
        task: &Task,
        lease: &Lease,
        next_heartbeat: Option<Instant>,
        stop: Option<Stop>,
    ) -> &mut Entry {
        let state = State::Running {
            lease: lease.clone(),
            next_heartbeat,
            stop,
        };
        let entry = Entry {
            generation: task.generation,
            state,
            cancel_asked: false,
            halted: None,
        };
        match self.entries.entry(task.call_id.clone()) {
            std::collections::hash_map::Entry::Occupied(mut held) => {
                held.insert(entry);
                held.into_mut()
            }
            std::collections::hash_map::Entry::Vacant(free) => free.insert(entry),
        }
    }

    /// The call's entry, if it still belongs to `task`'s submission.
    fn own_entry(&mut self, task: &Task) -> Option<&mut Entry> {
        self.entries
            .get_mut(&task.call_id)
            .filter(|entry| entry.generation == task.generation)
    }

    /// Hand a finished call's slot to the oldest waiting call still wanting
    /// it, or give the slot back.
    fn pass_slot_on(&mut self, tool: &str) -> Option<Task> {
        let slots = self.slots.get_mut(tool)?;
        while let Some(next) = slots.waiting.pop_front() {
            let entry = self
                .entries
                .get_mut(&next.call_id)
                .filter(|e| e.generation == next.generation && e.state == State::WaitingForSlot);
            if let Some(entry) = entry {
                entry.state = State::Queued;
                return Some(next);
            }
        }
        debug_assert!(
            slots.taken > 0,
            "{tool}: a slot given back that no call held"
        );
        slots.taken = slots.taken.saturating_sub(1);
        None
    }
}

mod cancel;
mod shutdown;
#[cfg(test)]
mod tests;
