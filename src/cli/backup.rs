//! `idempotent-tool backup --db FILE --to FILE`: a consistent copy of a live
//! SQLite database (`store::backup`), then the copy checked as `verify`
//! checks a database (`PRAGMA integrity_check` and every invariant); what was
//! copied and the verdict on stdout, the verdict in the exit status.

use super::failure::{Failure, BACKUP};
use crate::flag::{FlagError, Flags};
use crate::store::backup::{backup, BackupOptions, Copied};
use crate::store::verify::verify_database;
use crate::store::Database;
use crate::tools::{file::effect_tools, EFFECT_TOOLS, TOOL_NAMES};
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

pub const USAGE: &str = "\
usage: idempotent-tool backup --db FILE --to FILE [--tools FILE]
                              [--step-pages N] [--pause-ms MS]

Copies a SQLite database, live or not, to a new file: one consistent
snapshot, taken with SQLite's online backup API while the service goes on
writing (a reader never stops a writer in WAL mode). Every call acknowledged
before the backup began is in the copy. The copy is one self-contained file,
written beside --to and renamed into place when whole, then checked like
`verify` checks a database (--tools as for verify).

  --step-pages N   pages copied per step (default 1024)
  --pause-ms MS    pause between two steps, to spare the disk (default 0)

The copy is marked: a service started on it refuses (exit 3) until started
once with --accept-restored-copy and the snapshot's time printed here, since
restoring a copy forgets every key accepted after it: see docs/operations.md,
\"Backup and restore\", before you restore one. For PostgreSQL use pg_dump or
point-in-time recovery (same section).

Exit status: a copy is at --to after 0, 1 and 5, none after 2, 3 and 4.
0 the copy is made and verifies clean; 1 the copy is made but a check
failed (each one named; the copy is kept); 5 the copy is made but could not
be checked (it could not be read back; the copy is kept); 2 no copy: bad usage, an
existing --to, a tools file it cannot read, or, without --tools, calls of
tools that are not built in; 3 no copy: --db is not a service database it
can read; 4 no copy: it could not be written.
";

/// What the command line asked for.
struct Request {
    db: PathBuf,
    to: PathBuf,
    tools: Option<PathBuf>,
    options: BackupOptions,
}

/// `backup`: copy, report, verify the copy.
pub fn run(args: &[String]) -> Result<(), Failure> {
    let request = backup_flags(args).map_err(|error| Failure::Usage {
        command: BACKUP,
        error: Box::new(error),
    })?;
    let Some(request) = request else {
        crate::out!("{USAGE}");
        return Ok(());
    };
    // Which tools write effects is settled before anything is published: a
    // tools file it cannot read makes no copy, and without one a snapshot
    // with calls of tools that are not built in is not kept either (a
    // nightly job's rerun must not then fail on a copy it left).
    let mut options = request.options;
    let writers = match &request.tools {
        Some(file) => effect_tools(file).map_err(|error| Failure::ToolsFile {
            command: BACKUP,
            error,
        })?,
        None => {
            options.known_tools = Some(TOOL_NAMES.iter().map(|t| t.to_string()).collect());
            EFFECT_TOOLS.iter().map(|t| t.to_string()).collect()
        }
    };
    let copied = backup(&request.db, &request.to, options).map_err(Failure::Backup)?;
    crate::outln!("{}", describe(&request.db, &request.to, &copied));
    // From here on the copy exists: a check that cannot be made says so
    // (exit 5), apart from every failure that leaves no copy.
    let copy = Database::Sqlite(request.to.clone());
    let writers: Vec<&str> = writers.iter().map(String::as_str).collect();
    let report = verify_database(&copy, &writers).map_err(|e| Failure::CopyUnchecked {
        to: request.to.clone(),
        why: e.to_string(),
    })?;
    crate::out!("{report}");
    if report.is_clean() {
        crate::outln!("backup ok: {} verifies clean", request.to.display());
        Ok(())
    } else {
        Err(Failure::Violations)
    }
}

/// The lines saying what was copied, from when, and that the copy is marked.
fn describe(from: &Path, to: &Path, copied: &Copied) -> String {
    let snapshot = crate::rfc3339::rfc3339_millis(copied.began);
    let millis = copied
        .began
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    let bytes = u64::from(copied.pages) * u64::from(copied.page_size);
    format!(
        "copied    {} -> {}: {} pages of {} bytes ({:.1} MiB) in {} {}, {} ms\n\
         snapshot  taken after {snapshot} (unix {}.{:03}): every call acknowledged before then \
         is in the copy\ncalls     {} in the copy\n\
         marked    a service started on the copy refuses until started once with \
         --accept-restored-copy {snapshot}",
        from.display(),
        to.display(),
        copied.pages,
        copied.page_size,
        bytes as f64 / (1024.0 * 1024.0),
        copied.steps,
        if copied.steps == 1 { "step" } else { "steps" },
        copied.elapsed.as_millis(),
        millis / 1000,
        millis % 1000,
        copied.calls,
    )
}

/// `--db FILE --to FILE`, both required; `Ok(None)` for `--help`.
fn backup_flags(args: &[String]) -> Result<Option<Request>, FlagError> {
    let mut flags = Flags::new(args.iter().cloned());
    let (mut db, mut to, mut tools) = (None, None, None);
    let mut options = BackupOptions::default();
    while let Some(flag) = flags.next_flag()? {
        match flag.as_str() {
            "--help" | "-h" => return Ok(None),
            "--db" => db = Some(sqlite_file(&flags.value()?)?),
            "--to" => to = Some(PathBuf::from(flags.value()?)),
            "--tools" => tools = Some(PathBuf::from(flags.value()?)),
            "--step-pages" => options.step_pages = count(&flag, &flags.value()?)?,
            "--pause-ms" => options.pause = pause(&flag, &flags.value()?)?,
            other => return Err(FlagError::Unknown(other.to_string())),
        }
    }
    Ok(Some(Request {
        db: db.ok_or(FlagError::Missing("--db FILE"))?,
        to: to.ok_or(FlagError::Missing("--to FILE"))?,
        tools,
        options,
    }))
}

/// `--db`: a SQLite file; a PostgreSQL URL is pointed at its own tools.
fn sqlite_file(value: &str) -> Result<PathBuf, FlagError> {
    match Database::parse(value).map_err(|e| FlagError::Other(e.to_string()))? {
        Database::Sqlite(path) => Ok(path),
        Database::Postgres(_) => Err(FlagError::Other(
            "backup copies a SQLite file; back PostgreSQL up with pg_dump or point-in-time \
             recovery (docs/operations.md, \"Backup and restore\")"
                .into(),
        )),
    }
}

/// `--pause-ms`: 0 (none) to a minute.
fn pause(flag: &str, value: &str) -> Result<Duration, FlagError> {
    value
        .parse::<u64>()
        .ok()
        .filter(|ms| *ms <= 60_000)
        .map(Duration::from_millis)
        .ok_or_else(|| FlagError::BadValue {
            flag: flag.to_string(),
            value: value.to_string(),
            expected: "milliseconds from 0 to 60000",
        })
}

fn count(flag: &str, value: &str) -> Result<u32, FlagError> {
    value
        .parse::<u32>()
        .ok()
        .filter(|n| (1..=1_000_000).contains(n))
        .ok_or_else(|| FlagError::BadValue {
            flag: flag.to_string(),
            value: value.to_string(),
            expected: "a whole number from 1 to 1000000",
        })
}
