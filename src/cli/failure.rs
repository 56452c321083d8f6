//! Every way the binary ends early, and `Failure::exit_status`, the one place
//! that picks the exit status (README: bad usage and a bad tools, auth or
//! secret file exit 2, a failed start 1, a restored copy not accepted 3; `verify`'s and `backup`'s are in their
//! usage: `backup`'s 2, 3 and 4 mean no copy was made, 1 and 5 a copy that is
//! kept but failed or missed its check).
//!
//! Each failure is reported as one plain line on stderr: a person reads it,
//! before any service (and any JSON log) exists.

use super::console::{err_line, usage_error};
use super::PROGRAM;
use crate::app::StartError;
use crate::store::backup::BackupError;
use crate::store::verify::VerifyError;
use crate::tools::ToolFileError;
use std::error::Error;
use std::path::PathBuf;

/// Why the binary ends with a status other than 0.
#[derive(Debug)]
pub enum Failure {
    /// A command line (or environment) that does not parse: the cause, and
    /// a pointer to the command's `--help`.
    Usage {
        command: &'static str,
        error: Box<dyn Error>,
    },
    /// A `--tools` file that cannot be read or used.
    ToolsFile {
        command: &'static str,
        error: ToolFileError,
    },
    /// `--log-file` cannot be opened for appending.
    LogFile {
        path: PathBuf,
        error: std::io::Error,
    },
    /// The signal handlers could not be installed.
    Signals(std::io::Error),
    /// The service did not start.
    Start(StartError),
    /// The service stopped after its store had failed to write (a failed
    /// sync of the WAL); its last log line says why.
    WritesFailed,
    /// `verify` found violations; its report on stdout names each.
    Violations,
    /// `verify` could not read the file as a service database.
    Unverifiable(VerifyError),
    /// `backup` made no copy.
    Backup(BackupError),
    /// `backup` made the copy, but could not read it back to check it: the
    /// copy is kept at `to`, unchecked.
    CopyUnchecked { to: PathBuf, why: String },
    /// `verify` without `--tools` on calls of tools that are not built in:
    /// which of them write effects is in the tools file.
    NeedsToolsFile(Vec<String>),
}

/// The prefix of `verify`'s lines on stderr.
pub const VERIFY: &str = "idempotent-tool verify";

/// The prefix of `backup`'s lines on stderr.
pub const BACKUP: &str = "idempotent-tool backup";

impl Failure {
    pub fn exit_status(&self) -> u8 {
        match self {
            Failure::Usage { .. } | Failure::ToolsFile { .. } | Failure::NeedsToolsFile(_) => 2,
            Failure::Start(StartError::Auth(_)) => 2,
            // Its own status, so a supervisor does not restart into it
            // (`RestartPreventExitStatus=3` in the unit).
            Failure::Start(StartError::RestoredCopy { .. }) => 3,
            Failure::LogFile { .. }
            | Failure::Signals(_)
            | Failure::Start(_)
            | Failure::WritesFailed
            | Failure::Violations => 1,
            Failure::Unverifiable(_) => 3,
            Failure::Backup(BackupError::DestinationExists(_) | BackupError::NeedsToolsFile(_)) => {
                2
            }
            Failure::Backup(BackupError::Source(..) | BackupError::NotOurs(..)) => 3,
            Failure::Backup(BackupError::Copy(..)) => 4,
            Failure::CopyUnchecked { .. } => 5,
        }
    }

    /// One plain line on stderr; nothing for violations, which the report
    /// already printed.
    pub fn report(&self) {
        match self {
            Failure::Usage { command, error } => usage_error(command, error),
            Failure::ToolsFile { command, error } => err_line(format_args!("{command}: {error}")),
            Failure::LogFile { path, error } => err_line(format_args!(
                "{PROGRAM}: cannot open the log file {}: {error}",
                path.display()
            )),
            Failure::Signals(e) => err_line(format_args!(
                "{PROGRAM}: cannot install signal handlers: {e}"
            )),
            Failure::Start(e) => err_line(format_args!("{PROGRAM}: {e}")),
            Failure::WritesFailed | Failure::Violations => {}
            Failure::Unverifiable(e) => err_line(format_args!("{VERIFY}: {e}")),
            Failure::Backup(e) => err_line(format_args!("{BACKUP}: {e}")),
            Failure::CopyUnchecked { to, why } => err_line(format_args!(
                "{BACKUP}: the copy {} is made but could not be checked, and is kept: {why}",
                to.display()
            )),
            Failure::NeedsToolsFile(tools) => err_line(format_args!(
                "{VERIFY}: calls name tools that are not built in ({}); which of them write \
                 effects is in the tools file the server ran with: pass it with --tools FILE",
                tools.join(", ")
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `backup`'s statuses split in two: 2, 3 and 4 leave nothing at `--to`,
    /// 1 and 5 a copy that is kept (a nightly job tells them apart).
    #[test]
    fn backup_statuses_tell_no_copy_from_a_copy_kept() {
        let path = PathBuf::from("x.db");
        let no_copy = [
            Failure::Backup(BackupError::DestinationExists(path.clone())),
            Failure::Backup(BackupError::NeedsToolsFile(vec!["probe".into()])),
            Failure::Backup(BackupError::NotOurs(path.clone(), "why".into())),
            Failure::Backup(BackupError::Copy(path.clone(), "full".into())),
        ];
        let statuses: Vec<u8> = no_copy.iter().map(Failure::exit_status).collect();
        assert_eq!(statuses, [2, 2, 3, 4]);
        let kept = [
            Failure::Violations,
            Failure::CopyUnchecked {
                to: path,
                why: "unreadable".into(),
            },
        ];
        let statuses: Vec<u8> = kept.iter().map(Failure::exit_status).collect();
        assert_eq!(statuses, [1, 5]);
    }
}
