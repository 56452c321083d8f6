//! `BenchError`: why a bench run could not start or could not finish, one
//! variant per kind of failure, each with the step it was taking. `main`
//! prints it after `bench: ` and picks the exit code (2 for a flag's mistake,
//! with the usage; 1 for anything else).
//!
//! A failed invariant is not an error: it is a figure of the report, and the
//! run ends `Ok(false)`.

use idempotent_tool::app::StartError;
use idempotent_tool::flag::FlagError;
use idempotent_tool::log::SettingError;
use idempotent_tool::store::{DatabaseUrlError, StoreError};
use idempotent_tool::tools::ToolFileError;
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::process::ExitStatus;

#[derive(Debug)]
pub enum BenchError {
    /// A flag the bench does not know, without its value, or with a value
    /// it does not take (worded as every binary words it).
    Flag(FlagError),
    /// `--mode` names no mode.
    UnknownMode(String),
    /// Flags that cannot go together, or a bound: the sentence says which.
    Usage(&'static str),
    /// `--access-log` is neither `on` nor `off`.
    Setting(SettingError),
    /// `--db` names no usable database.
    Database(DatabaseUrlError),
    /// A file, folder, socket or process step: what it was, and why it failed.
    Io { doing: String, source: io::Error },
    /// The single-commit calibration's SQLite steps, in `doing`.
    Sqlite {
        doing: String,
        source: rusqlite::Error,
    },
    /// A store step (the pre-fill), in `doing`.
    Store { doing: String, source: StoreError },
    /// The service under test did not start.
    Start(StartError),
    /// The in-process `--mode http-tool` tools file was refused.
    Tools(ToolFileError),
    /// `/stats` answered another status than `200`.
    StatsStatus(u16),
    /// `/stats` answered a body that is not JSON.
    StatsBody(serde_json::Error),
    /// `--check`'s baseline file is not what `--write-baseline` writes.
    Baseline { path: PathBuf, why: String },
    /// `--check` found a figure more than 10% worse than this baseline's.
    Worse(PathBuf),
    /// `pgbench_ceiling.sh` printed no ceiling: how it ended and its stderr.
    NoCeiling { status: ExitStatus, stderr: String },
}

impl BenchError {
    /// An I/O failure while `doing` something.
    pub fn io(doing: impl Into<String>) -> impl FnOnce(io::Error) -> BenchError {
        let doing = doing.into();
        move |source| BenchError::Io { doing, source }
    }

    /// Whether the mistake is in the command line (exit 2, with the usage).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            BenchError::Flag(_)
                | BenchError::UnknownMode(_)
                | BenchError::Usage(_)
                | BenchError::Setting(_)
        )
    }
}

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BenchError::Flag(e) => e.fmt(f),
            BenchError::UnknownMode(mode) => write!(f, "unknown mode {mode:?}"),
            BenchError::Usage(sentence) => f.write_str(sentence),
            BenchError::Setting(e) => e.fmt(f),
            BenchError::Database(e) => e.fmt(f),
            BenchError::Io { doing, source } => write!(f, "{doing}: {source}"),
            BenchError::Sqlite { doing, source } => write!(f, "{doing}: {source}"),
            BenchError::Store { doing, source } => write!(f, "{doing}: {source}"),
            BenchError::Start(e) => e.fmt(f),
            BenchError::Tools(e) => e.fmt(f),
            BenchError::StatsStatus(status) => write!(f, "GET /stats answered {status}"),
            BenchError::StatsBody(e) => write!(f, "GET /stats: {e}"),
            BenchError::Baseline { path, why } => {
                write!(f, "baseline file {}: {why}", path.display())
            }
            BenchError::Worse(path) => write!(
                f,
                "--check: the server's CPU per call is more than 10% worse than {} says (see above)",
                path.display()
            ),
            BenchError::NoCeiling { status, stderr } => {
                write!(
                    f,
                    "pgbench_ceiling.sh printed no ceiling ({status}):\n{stderr}"
                )
            }
        }
    }
}

impl std::error::Error for BenchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BenchError::Flag(e) => Some(e),
            BenchError::Setting(e) => Some(e),
            BenchError::Database(e) => Some(e),
            BenchError::Io { source, .. } => Some(source),
            BenchError::Sqlite { source, .. } => Some(source),
            BenchError::Store { source, .. } => Some(source),
            BenchError::Start(e) => Some(e),
            BenchError::Tools(e) => Some(e),
            BenchError::StatsBody(e) => Some(e),
            _ => None,
        }
    }
}

impl From<FlagError> for BenchError {
    fn from(e: FlagError) -> BenchError {
        BenchError::Flag(e)
    }
}

impl From<StartError> for BenchError {
    fn from(e: StartError) -> BenchError {
        BenchError::Start(e)
    }
}
