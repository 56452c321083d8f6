//! `idempotent-tool backup`: a consistent copy of a live SQLite database,
//! through SQLite's online backup API.
//!
//! The copy is one snapshot. The source connection opens a read transaction
//! before the first page is copied and keeps it to the last, so every step
//! reads the same commit: a commit by the running service between two steps
//! neither changes what is copied nor restarts the copy (SQLite restarts a
//! backup whose source changed under it, which under a steady load would
//! never finish). In WAL mode a reader does not stop a writer, so the service
//! goes on committing throughout; what the snapshot costs it is a WAL that
//! cannot be checkpointed past the snapshot until the copy ends. The pages go
//! over in steps of `step_pages` (with `pause` between steps, to spare the
//! disk), and each step holds SQLite's locks only for itself.
//!
//! Every call acknowledged before `began` is in the copy: an answer comes
//! only after its commit was synced, and the snapshot is taken after `began`.
//! The copy is written beside the destination as `<to>.partial`, switched to
//! a rollback journal (one self-contained file), synced, and renamed into
//! place, so a failed backup leaves nothing at `to`; it is created 0600, as
//! the database is (it holds every call's args and results). The copy is
//! marked with its snapshot (`copy_mark`), so a service started on it
//! refuses until told which snapshot it accepts. This module never writes
//! the source.

use super::ownership::foreign_reason;
use rusqlite::backup::{Backup, StepResult};
use rusqlite::{Connection, OpenFlags};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

/// How the pages go over, and what the copy may hold.
#[derive(Debug, Clone)]
pub struct BackupOptions {
    /// Pages copied per step (SQLite's `sqlite3_backup_step`).
    pub step_pages: u32,
    /// Sleep between two steps.
    pub pause: Duration,
    /// When set, a snapshot with calls of any other tool is not kept
    /// (`NeedsToolsFile`): its check would need the tools file.
    pub known_tools: Option<Vec<String>>,
}

impl Default for BackupOptions {
    fn default() -> Self {
        BackupOptions {
            step_pages: 1024,
            pause: Duration::ZERO,
            known_tools: None,
        }
    }
}

/// What a finished copy took.
#[derive(Debug, Clone)]
pub struct Copied {
    /// When the copy started: every call acknowledged before it is in it.
    pub began: SystemTime,
    pub pages: u32,
    pub page_size: u32,
    pub steps: u32,
    pub elapsed: Duration,
    /// Calls in the copy.
    pub calls: i64,
}

/// Why no copy was made. Nothing is left at the destination.
#[derive(Debug)]
pub enum BackupError {
    /// The destination exists: a backup never overwrites a file.
    DestinationExists(PathBuf),
    /// The source could not be opened or read as a database.
    Source(PathBuf, rusqlite::Error),
    /// The source is not this service's database (why, in a phrase).
    NotOurs(PathBuf, String),
    /// Writing the copy failed (a full disk, permissions, I/O).
    Copy(PathBuf, String),
    /// The snapshot holds calls of these tools, none of `known_tools`.
    NeedsToolsFile(Vec<String>),
}

impl fmt::Display for BackupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackupError::DestinationExists(to) => write!(
                f,
                "{} exists; a backup never overwrites a file: give a new path",
                to.display()
            ),
            BackupError::Source(from, e) => write!(f, "cannot read {}: {e}", from.display()),
            BackupError::NotOurs(from, why) => write!(
                f,
                "{} is not an idempotent-tool database: {why}",
                from.display()
            ),
            BackupError::Copy(to, why) => {
                write!(f, "cannot write the copy {}: {why}", to.display())
            }
            BackupError::NeedsToolsFile(tools) => write!(
                f,
                "calls name tools that are not built in ({}); which of them write effects is \
                 in the tools file the server ran with: pass it with --tools FILE (no copy was \
                 kept)",
                tools.join(", ")
            ),
        }
    }
}

impl std::error::Error for BackupError {}

/// Copy the database at `from` to `to` (a new file), one snapshot.
pub fn backup(from: &Path, to: &Path, options: BackupOptions) -> Result<Copied, BackupError> {
    if to.exists() {
        return Err(BackupError::DestinationExists(to.to_path_buf()));
    }
    let source = open_source(from)?;
    let partial = partial_path(to);
    let result = copy_snapshot(&source, from, &partial, &options).and_then(|copied| {
        publish(&partial, to)?;
        Ok(copied)
    });
    if result.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    result
}

/// The source, read-only, once it is known to be a service database.
fn open_source(from: &Path) -> Result<Connection, BackupError> {
    let read_error = |e| BackupError::Source(from.to_path_buf(), e);
    if !from.exists() {
        return Err(BackupError::NotOurs(
            from.to_path_buf(),
            "there is no such file".into(),
        ));
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(from, flags).map_err(read_error)?;
    // The service's own writes wait on a busy file no longer than this.
    conn.busy_timeout(Duration::from_secs(10))
        .map_err(read_error)?;
    let not_ours = |why: String| BackupError::NotOurs(from.to_path_buf(), why);
    match foreign_reason(&conn) {
        Ok(Some(why)) => return Err(not_ours(why)),
        Ok(None) => {}
        Err(e) => return Err(not_ours(e.to_string())),
    }
    let has_calls: bool = conn
        .query_row(
            "SELECT count(*) = 2 FROM sqlite_schema WHERE type = 'table' AND name IN ('calls', 'effects')",
            [],
            |r| r.get(0),
        )
        .map_err(read_error)?;
    if !has_calls {
        return Err(not_ours("it has no calls and effects tables".into()));
    }
    Ok(conn)
}

/// The copy, page step by page step, of one snapshot of `source`.
fn copy_snapshot(
    source: &Connection,
    from: &Path,
    partial: &Path,
    options: &BackupOptions,
) -> Result<Copied, BackupError> {
    let write_error =
        |e: &dyn fmt::Display| BackupError::Copy(partial.to_path_buf(), e.to_string());
    let began = SystemTime::now();
    let start = Instant::now();
    // The snapshot: a read transaction held across every step.
    source
        .execute_batch("BEGIN")
        .and_then(|()| source.query_row("SELECT count(*) FROM calls", [], |r| r.get::<_, i64>(0)))
        .map_err(|e| BackupError::Source(from.to_path_buf(), e))?;
    // A fresh file, 0600 like the database: a partial left by a backup that
    // died is replaced.
    let _ = std::fs::remove_file(partial);
    super::schema::create_private(partial);
    let mut copy = Connection::open(partial).map_err(|e| write_error(&e))?;
    let steps = {
        let backup = Backup::new(source, &mut copy).map_err(|e| write_error(&e))?;
        run_steps(&backup, options).map_err(|e| write_error(&e))?
    };
    // The snapshot ends; the service may checkpoint past it again.
    let _ = source.execute_batch("COMMIT");
    // One self-contained file: no -wal or -shm beside it, readable read-only.
    let mode: String = copy
        .query_row("PRAGMA journal_mode=DELETE", [], |r| r.get(0))
        .map_err(|e| write_error(&e))?;
    if !mode.eq_ignore_ascii_case("delete") {
        return Err(write_error(&format!("journal_mode stayed {mode}")));
    }
    // The mark a start-up refuses until the snapshot is named (`copy_mark`).
    super::copy_mark::mark(&copy, began, from).map_err(|e| write_error(&e))?;
    let pages: u32 = pragma(&copy, "page_count").map_err(|e| write_error(&e))?;
    let page_size: u32 = pragma(&copy, "page_size").map_err(|e| write_error(&e))?;
    let calls: i64 = copy
        .query_row("SELECT count(*) FROM calls", [], |r| r.get(0))
        .map_err(|e| write_error(&e))?;
    if let Some(known) = &options.known_tools {
        let others = tools_outside(&copy, known).map_err(|e| write_error(&e))?;
        if !others.is_empty() {
            return Err(BackupError::NeedsToolsFile(others));
        }
    }
    copy.close().map_err(|(_, e)| write_error(&e))?;
    Ok(Copied {
        began,
        pages,
        page_size,
        steps,
        elapsed: start.elapsed(),
        calls,
    })
}

/// `sqlite3_backup_step` until done; a busy destination waits a moment. The
/// number of steps taken.
fn run_steps(backup: &Backup<'_, '_>, options: &BackupOptions) -> rusqlite::Result<u32> {
    let step_pages = options.step_pages.clamp(1, i32::MAX as u32) as i32;
    let mut steps = 0;
    loop {
        steps += 1;
        match backup.step(step_pages)? {
            StepResult::Done => return Ok(steps),
            StepResult::More => std::thread::sleep(options.pause),
            // Busy, Locked (and any result a later SQLite adds): wait a moment.
            _ => std::thread::sleep(options.pause.max(Duration::from_millis(10))),
        }
    }
}

/// The tools the copy's calls name that are not in `known`.
fn tools_outside(copy: &Connection, known: &[String]) -> rusqlite::Result<Vec<String>> {
    let mut statement = copy.prepare("SELECT DISTINCT tool FROM calls ORDER BY tool")?;
    let tools = statement
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<String>>>()?;
    Ok(tools.into_iter().filter(|t| !known.contains(t)).collect())
}

fn pragma(conn: &Connection, name: &str) -> rusqlite::Result<u32> {
    conn.query_row(&format!("PRAGMA {name}"), [], |r| r.get(0))
}

/// `<to>.partial`: where the copy is written until it is whole.
fn partial_path(to: &Path) -> PathBuf {
    let mut name = to.as_os_str().to_os_string();
    name.push(".partial");
    PathBuf::from(name)
}

/// Sync the finished copy, rename it into place, and sync its folder, so the
/// name never points at half a copy, even after a crash.
fn publish(partial: &Path, to: &Path) -> Result<(), BackupError> {
    let io_error = |e: std::io::Error| BackupError::Copy(to.to_path_buf(), e.to_string());
    std::fs::File::open(partial)
        .and_then(|f| f.sync_all())
        .map_err(io_error)?;
    if to.exists() {
        return Err(BackupError::DestinationExists(to.to_path_buf()));
    }
    std::fs::rename(partial, to).map_err(io_error)?;
    let folder = match to.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    std::fs::File::open(folder)
        .and_then(|f| f.sync_all())
        .map_err(io_error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::temp::TempDir;

    /// A copy holds exactly the snapshot's rows, is one file, and a second
    /// backup to the same name is refused; another program's file is not
    /// copied.
    #[test]
    fn a_copy_is_one_snapshot_in_one_file_and_never_overwrites() {
        let dir = TempDir::new("backup-unit").unwrap();
        let from = dir.join("idem.db");
        let source = Connection::open(&from).unwrap();
        source
            .execute_batch(super::super::schema::TABLES)
            .and_then(|()| source.execute_batch("PRAGMA journal_mode=WAL"))
            .unwrap();
        let insert = "INSERT INTO calls (call_id, idem_key, fingerprint, tool, args_json, status, \
                      created_at, updated_at) VALUES (?1, ?1, 'f', 'charge', '{}', 'pending', 0, 0)";
        for i in 0..300 {
            source.execute(insert, [format!("k{i}")]).unwrap();
        }
        let to = dir.join("copy.db");
        let options = BackupOptions {
            step_pages: 2,
            pause: Duration::ZERO,
            known_tools: None,
        };
        let copied = backup(&from, &to, options.clone()).unwrap();
        assert_eq!(copied.calls, 300);
        assert!(copied.steps > 2, "{copied:?}");
        assert!(!dir.join("copy.db-wal").exists() && !partial_path(&to).exists());
        assert!(matches!(
            backup(&from, &to, options.clone()),
            Err(BackupError::DestinationExists(_))
        ));
        let other = dir.join("other.db");
        Connection::open(&other)
            .unwrap()
            .execute_batch("CREATE TABLE users (id INTEGER)")
            .unwrap();
        let refused = backup(&other, &dir.join("other-copy.db"), options.clone());
        assert!(
            matches!(refused, Err(BackupError::NotOurs(..))),
            "{refused:?}"
        );
        assert!(!dir.join("other-copy.db").exists());

        // Calls of a tool outside `known_tools`: nothing is kept.
        source
            .execute(insert.replace("'charge'", "'probe'").as_str(), ["p1"])
            .unwrap();
        let known = BackupOptions {
            known_tools: Some(vec!["charge".into()]),
            ..options
        };
        let unknown = dir.join("unknown.db");
        let refused = backup(&from, &unknown, known);
        assert!(
            matches!(&refused, Err(BackupError::NeedsToolsFile(t)) if t == &["probe"]),
            "{refused:?}"
        );
        assert!(!unknown.exists() && !partial_path(&unknown).exists());
    }
}
