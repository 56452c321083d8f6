//! The count tables' bookkeeping on SQLite since migration 14: every
//! statement that inserts or deletes a call, moves one to another (tenant,
//! tool, status, attempt) group, inserts an effect or detaches one from its
//! purged call notes the change here, and the writer folds a batch's notes
//! into `call_counts` and `effect_counts` (one upsert per group the batch
//! touched) just before its `COMMIT`, in the same transaction. So the counts
//! every reader sees are those of the rows it sees, as with migration 11's
//! triggers, which cost a new key about 45,000 instructions — a quarter of
//! the writer's work — where this costs a few hundred and a few upserts per
//! batch (docs/performance.md#where-a-new-keys-cpu-goes).
//!
//! On the writer's thread, during a batch (`Book::open` to `Book::fold`),
//! a note is kept in memory; a savepoint rolled back takes its operation's
//! notes with it (`mark` and `rewind`). Anywhere else — a migration, a test's
//! connection, the bench's loader — a note is applied at once, one upsert,
//! so no caller can lose one. What it cannot see is a statement that does
//! not note: a new statement that changes `calls` or `effects` must (see
//! CONTRIBUTING.md), and `store::tests::counts` compares the counts with the
//! rows after every kind of write. An edit by hand (`sqlite3`) is not counted.
//!
//! This module writes only the two count tables, and never reads `calls`.

use rusqlite::{params, Connection};
use std::cell::RefCell;
use std::collections::HashMap;

/// Where a call is counted: its tenant, tool, status and attempt.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Group {
    pub tenant: String,
    pub tool: String,
    pub status: &'static str,
    pub attempt: i64,
}

/// One change to the counts.
#[derive(Debug, Clone)]
enum Note {
    /// A call inserted into a group.
    Inserted(Group),
    /// A call moved from one group into another.
    Moved(Group, Group),
    /// A call deleted from a group.
    Deleted(Group),
    /// An effect inserted for a call of `tenant` (`None`: no such call, so
    /// it counts as detached under `''`, as `count(*) FROM effects` does).
    EffectInserted(Option<String>),
    /// An effect left without its call (the call purged): detached, for
    /// the tenant whose call it was.
    EffectDetached(String),
}

/// Deltas of one `call_counts` row: calls, inserted, entered.
type CallDelta = (i64, i64, i64);
/// Deltas of one `effect_counts` row: effects, detached.
type EffectDelta = (i64, i64);

thread_local! {
    /// The writer's notes for the batch it is running on this thread.
    static OPEN: RefCell<Option<Vec<Note>>> = const { RefCell::new(None) };
}

/// A call inserted into `group`.
pub(super) fn inserted(conn: &Connection, group: Group) -> rusqlite::Result<()> {
    note(conn, Note::Inserted(group))
}

/// A call moved from `from` into `to` (nothing when they are the same group).
pub(super) fn moved(conn: &Connection, from: Group, to: Group) -> rusqlite::Result<()> {
    if from == to {
        return Ok(());
    }
    note(conn, Note::Moved(from, to))
}

/// A call deleted from `group`.
pub(super) fn deleted(conn: &Connection, group: Group) -> rusqlite::Result<()> {
    note(conn, Note::Deleted(group))
}

/// An effect inserted for a call of `tenant` (`None`: its call is missing).
pub(super) fn effect_inserted(conn: &Connection, tenant: Option<String>) -> rusqlite::Result<()> {
    note(conn, Note::EffectInserted(tenant))
}

/// `tenant`'s call deleted while its effect stays.
pub(super) fn effect_detached(conn: &Connection, tenant: String) -> rusqlite::Result<()> {
    note(conn, Note::EffectDetached(tenant))
}

/// Keep `note` for the batch, or apply it now when no batch is open on this
/// thread.
fn note(conn: &Connection, note: Note) -> rusqlite::Result<()> {
    let kept = OPEN.with_borrow_mut(|open| match open {
        Some(notes) => {
            notes.push(note.clone());
            true
        }
        None => false,
    });
    if kept {
        return Ok(());
    }
    let (calls, effects) = sum(&[note]);
    apply(conn, &calls, &effects)
}

/// The writer's side: one batch's notes on its thread.
pub(super) struct Book;

impl Book {
    /// Keep notes in memory from now until `fold` or `discard`.
    pub(super) fn open() {
        OPEN.with_borrow_mut(|open| *open = Some(Vec::new()));
    }

    /// How many notes are kept: an operation's savepoint starts here.
    pub(super) fn mark() -> usize {
        OPEN.with_borrow(|open| open.as_ref().map_or(0, Vec::len))
    }

    /// Forget the notes since `mark`: their operation was rolled back.
    pub(super) fn rewind(mark: usize) {
        OPEN.with_borrow_mut(|open| {
            if let Some(notes) = open {
                notes.truncate(mark);
            }
        });
    }

    /// Forget every note: the batch's transaction is gone.
    pub(super) fn discard() {
        OPEN.with_borrow_mut(|open| *open = None);
    }

    /// Write the batch's notes into the count tables on `conn`, inside its
    /// transaction, and close the book. An error leaves the counts
    /// unwritten: the caller must not commit.
    pub(super) fn fold(conn: &Connection) -> rusqlite::Result<()> {
        let notes = OPEN.with_borrow_mut(Option::take).unwrap_or_default();
        let (calls, effects) = sum(&notes);
        apply(conn, &calls, &effects)
    }
}

/// Each row's total change.
fn sum(notes: &[Note]) -> (HashMap<Group, CallDelta>, HashMap<String, EffectDelta>) {
    let mut calls: HashMap<Group, CallDelta> = HashMap::new();
    let mut effects: HashMap<String, EffectDelta> = HashMap::new();
    let mut add = |group: &Group, delta: CallDelta| {
        let row = calls.entry(group.clone()).or_default();
        *row = (row.0 + delta.0, row.1 + delta.1, row.2 + delta.2);
    };
    for note in notes {
        match note {
            Note::Inserted(group) => add(group, (1, 1, 0)),
            Note::Moved(from, to) => {
                add(from, (-1, 0, 0));
                add(to, (1, 0, 1));
            }
            Note::Deleted(group) => add(group, (-1, 0, 0)),
            Note::EffectInserted(tenant) => {
                let (key, detached) = match tenant {
                    Some(tenant) => (tenant.clone(), 0),
                    None => (String::new(), 1),
                };
                let row = effects.entry(key).or_default();
                *row = (row.0 + 1, row.1 + detached);
            }
            Note::EffectDetached(tenant) => effects.entry(tenant.clone()).or_default().1 += 1,
        }
    }
    (calls, effects)
}

/// One upsert per row that changed; a row is made on its first change, as
/// the triggers made it (a group emptied keeps its row, at zero).
fn apply(
    conn: &Connection,
    calls: &HashMap<Group, CallDelta>,
    effects: &HashMap<String, EffectDelta>,
) -> rusqlite::Result<()> {
    if !calls.is_empty() {
        let mut upsert = conn.prepare_cached(
            "INSERT INTO call_counts (tenant, tool, status, attempt, calls, inserted, entered)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT (tenant, tool, status, attempt)
             DO UPDATE SET calls = calls + excluded.calls,
                           inserted = inserted + excluded.inserted,
                           entered = entered + excluded.entered",
        )?;
        for (g, (n, inserted, entered)) in calls {
            upsert.execute(params![
                g.tenant, g.tool, g.status, g.attempt, n, inserted, entered
            ])?;
        }
    }
    if !effects.is_empty() {
        let mut upsert = conn.prepare_cached(
            "INSERT INTO effect_counts (tenant, effects, detached) VALUES (?1, ?2, ?3)
             ON CONFLICT (tenant)
             DO UPDATE SET effects = effects + excluded.effects,
                           detached = detached + excluded.detached",
        )?;
        for (tenant, (n, detached)) in effects {
            upsert.execute(params![tenant, n, detached])?;
        }
    }
    Ok(())
}
