//! The supervisor: why no process a `command` tool started outlives its
//! attempt, even when the service is killed (`kill -9`, a crash).
//!
//! A process started by another dies with it only if something kills it:
//! the kernel's `PR_SET_PDEATHSIG` reaches the direct child alone, and only
//! if that child sets it between fork and exec, which std allows only
//! through an unsafe hook (this crate forbids unsafe code). So the service
//! starts each attempt
//! under a small supervisor, its own binary re-executed (`/proc/self/exe
//! __supervise PARENT PROGRAM ARGS…`): the supervisor asks for the signal
//! itself, becomes a child subreaper, starts the tool in a process group of
//! its own, and kills the group and every descendant when the tool exits,
//! when the service stops it (SIGTERM: TERM, then KILL after `TERM_GRACE`),
//! or when the service dies (the same, on the kernel's signal). It tells
//! the service how the tool started and ended on a socket (`report`).
//!
//! Map: `process` (the supervisor process: signals, the tool, the wait),
//! `descendants` (every process of the tool killed and reaped), `report`
//! (the lines it tells the service), `orphans` (a starting service waits
//! for the supervisors of a dead one). The service's side, starting a tool
//! under a supervisor, is `command_process`.
//!
//! Which program supervises is the binary's choice: `main.rs` answers
//! `__supervise` and names itself ([`supervise_commands_with`]); a process
//! that names none (a test binary, a library user) starts its tools
//! directly, in their own group, as before. It never runs a tool without a
//! parent that can stop it: a supervisor whose service is already gone
//! starts nothing.

mod descendants;
pub(crate) mod orphans;
mod process;
pub(super) mod report;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::OnceLock;

/// The hidden subcommand: `PROGRAM __supervise PARENT_PID TOOL ARGS…`.
pub const SUBCOMMAND: &str = "__supervise";

/// The program this process starts its supervisors with, once named.
static PROGRAM: OnceLock<PathBuf> = OnceLock::new();

/// From now on, every `command` tool this process runs starts under
/// `program __supervise …`: a binary whose `main` answers [`SUBCOMMAND`]
/// with [`main`]. The first call wins.
pub fn supervise_commands_with(program: impl Into<PathBuf>) {
    let _ = PROGRAM.set(program.into());
}

/// The supervisor's program, if this process named one.
pub(super) fn program() -> Option<&'static Path> {
    PROGRAM.get().map(PathBuf::as_path)
}

/// `args` after [`SUBCOMMAND`]: the service's pid, the tool's program, its
/// arguments. Exit status 2 when they are not that.
pub fn main(args: &[OsString]) -> ExitCode {
    let parent = args
        .first()
        .and_then(|pid| pid.to_str())
        .and_then(|pid| pid.parse::<u32>().ok());
    match (parent, args.get(1)) {
        (Some(parent), Some(program)) => process::run(parent, program, &args[2..]),
        _ => {
            crate::cli::console::err_line(format_args!(
                "{SUBCOMMAND} is started by the service for one command tool's attempt: \
                 {SUBCOMMAND} PARENT_PID PROGRAM [ARGS...]"
            ));
            ExitCode::from(2)
        }
    }
}
