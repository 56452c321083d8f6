//! What `verify` reports: the counts, one `Check` per invariant with its
//! violations, how a report reads on a terminal, and `VerifyError` for a
//! database that could not be read at all. It runs no query.

use super::super::error::StoreError;
use std::fmt;
use std::path::PathBuf;

/// Examples shown per violated invariant; the count is always complete.
pub(in crate::store) const MAX_EXAMPLES: usize = 5;

/// What `verify` found: counts, and one entry per invariant.
#[derive(Debug)]
pub struct Report {
    pub path: PathBuf,
    pub calls: i64,
    /// Calls by status, in status order.
    pub by_status: Vec<(String, i64)>,
    pub effects: i64,
    /// Audit rows by event (`created`, `claimed`, `recover`, ...).
    pub audit: Vec<(String, i64)>,
    /// Distinct tenants, when `calls` has a `tenant` column.
    pub tenants: Option<i64>,
    pub checks: Vec<Check>,
}

/// One invariant and what breaks it.
#[derive(Debug)]
pub struct Check {
    /// The violation's stable name (`duplicate_key`, ...).
    pub name: &'static str,
    /// The invariant, in words.
    pub invariant: String,
    /// How many rows (keys, calls, effects, problems) break it.
    pub violations: usize,
    /// The first few of them, described.
    pub examples: Vec<String>,
}

impl Report {
    /// Every invariant holds.
    pub fn is_clean(&self) -> bool {
        self.checks.iter().all(|c| c.violations == 0)
    }

    /// The checks that found a violation.
    pub fn violated(&self) -> impl Iterator<Item = &Check> {
        self.checks.iter().filter(|c| c.violations > 0)
    }

    /// Audit rows of one event, e.g. `recover`.
    pub fn audit_events(&self, event: &str) -> i64 {
        self.audit
            .iter()
            .find(|(e, _)| e == event)
            .map_or(0, |(_, n)| *n)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "database  {}", self.path.display())?;
        writeln!(
            f,
            "calls     {}{}",
            self.calls,
            parenthesized(&self.by_status)
        )?;
        writeln!(f, "effects   {}", self.effects)?;
        let audit_rows: i64 = self.audit.iter().map(|(_, n)| n).sum();
        writeln!(
            f,
            "audit     {audit_rows} rows{}",
            parenthesized(&self.audit)
        )?;
        if let Some(tenants) = self.tenants {
            writeln!(f, "tenants   {tenants}")?;
        }
        for check in &self.checks {
            if check.violations == 0 {
                writeln!(f, "ok    {}", check.invariant)?;
                continue;
            }
            writeln!(
                f,
                "FAIL  {}: {} × {}",
                check.invariant, check.violations, check.name
            )?;
            for example in &check.examples {
                writeln!(f, "        {example}")?;
            }
            if check.violations > check.examples.len() {
                writeln!(
                    f,
                    "        … and {} more",
                    check.violations - check.examples.len()
                )?;
            }
        }
        let violated: Vec<&str> = self.violated().map(|c| c.name).collect();
        if violated.is_empty() {
            writeln!(f, "violations 0: every invariant holds")
        } else {
            let total: usize = self.violated().map(|c| c.violations).sum();
            writeln!(f, "violations {total}: {}", violated.join(", "))
        }
    }
}

fn parenthesized(counts: &[(String, i64)]) -> String {
    if counts.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = counts.iter().map(|(k, n)| format!("{k} {n}")).collect();
    format!(" ({})", parts.join(", "))
}

/// Why a file could not be verified at all (as opposed to: verified, and
/// found broken).
#[derive(Debug)]
pub enum VerifyError {
    /// SQLite could not open or read the file (missing, unreadable, not a
    /// database, a header it cannot parse).
    Open(PathBuf, rusqlite::Error),
    /// A database in WAL mode whose `-wal` holds content, in a folder where
    /// its `-shm` cannot be made (a read-only mount): what the `-wal` holds
    /// cannot be read, and the file alone may lack commits.
    WalWithoutShm(PathBuf),
    /// A database, but without the service's `calls` and `effects` tables.
    NotAServiceDatabase(PathBuf),
    /// PostgreSQL could not be reached or read (the URL, masked, and why).
    Postgres(String, StoreError),
    /// The run passed its deadline (`verify_within`) and was stopped.
    TimedOut,
    /// The service could not show that what the run read is on disk (a
    /// failed sync of the WAL, or one that did not come in time).
    NotDurable(StoreError),
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VerifyError::Open(path, e) => write!(f, "cannot read {}: {e}", path.display()),
            VerifyError::WalWithoutShm(path) => write!(
                f,
                "cannot read {}: its -wal holds commits, which SQLite reads through a -shm \
                 file it cannot make there (a read-only folder or mount); verify a copy of \
                 the file and its -wal in a writable folder, or a copy made by `backup`",
                path.display()
            ),
            VerifyError::NotAServiceDatabase(path) => write!(
                f,
                "{} has no calls and effects tables: not an idempotent-tool database",
                path.display()
            ),
            VerifyError::Postgres(url, e) => write!(f, "cannot read {url}: {e}"),
            VerifyError::TimedOut => f.write_str("the check did not finish within its time"),
            VerifyError::NotDurable(e) => {
                write!(f, "what the check read is not known to be on disk: {e}")
            }
        }
    }
}

impl std::error::Error for VerifyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            VerifyError::Open(_, e) => Some(e),
            VerifyError::NotAServiceDatabase(_)
            | VerifyError::WalWithoutShm(_)
            | VerifyError::TimedOut => None,
            VerifyError::Postgres(_, e) | VerifyError::NotDurable(e) => Some(e),
        }
    }
}
