//! The `idempotent-tool` command line: which command runs — the service, or
//! a subcommand such as `verify` — the help and the version, and how every
//! way of ending becomes an exit status (`Failure`). `src/main.rs` only hands
//! it the arguments.
//!
//! A subcommand is one row of [`SUBCOMMANDS`] and one file in `cli/` (see
//! `cli/verify.rs`): its name, the line `--help` shows for it, and the
//! function that runs it with the arguments after its name.
//!
//! Map: `serve` (the service's run: configuration, logger, signals), `notify`
//! (what systemd is told), `verify` and `backup` (the subcommands), `failure`
//! (`Failure`, every early ending and its exit status), [`console`].
//!
//! It never panics on a closed stdout or stderr (everything it prints goes
//! through [`console`]) and never prints a secret: usage errors and start-up
//! failures name files and flags, never a value read from a secret.

mod backup;
pub mod console;
mod failure;
mod notify;
mod serve;
mod verify;

pub use failure::Failure;

use crate::store::{PG_SCHEMA_VERSION, SCHEMA_VERSION};
use std::process::ExitCode;

/// The prefix of the binary's own lines on stderr.
pub const PROGRAM: &str = "idempotent-tool";

/// A command other than running the service: `idempotent-tool NAME ...`.
pub struct Subcommand {
    pub name: &'static str,
    /// Its line in `--help`.
    pub summary: &'static str,
    /// Runs it with the arguments after its name.
    run: fn(&[String]) -> Result<(), Failure>,
}

/// Every subcommand, in the order `--help` lists them.
pub const SUBCOMMANDS: &[Subcommand] = &[
    Subcommand {
        name: "verify",
        summary: "check a database against every invariant, read-only",
        run: verify::run,
    },
    Subcommand {
        name: "backup",
        summary: "copy a live SQLite database consistently, then check the copy",
        run: backup::run,
    },
];

/// Run the command `args` (the arguments after the program name) asks for,
/// and report how it ended.
pub fn main(args: Vec<String>) -> ExitCode {
    let subcommand = args
        .first()
        .and_then(|first| SUBCOMMANDS.iter().find(|s| s.name == first));
    let outcome = match subcommand {
        Some(subcommand) => (subcommand.run)(&args[1..]),
        None => serve::run(args),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            failure.report();
            ExitCode::from(failure.exit_status())
        }
    }
}

/// `--version`: the release, and the schema version it writes to each
/// backend (a database written by a newer schema is refused at start-up).
pub fn version() -> String {
    format!(
        "{PROGRAM} {} (writes SQLite schema {SCHEMA_VERSION}, PostgreSQL schema {PG_SCHEMA_VERSION})",
        env!("CARGO_PKG_VERSION")
    )
}

/// `--help`: how to call it, the subcommands, then every option.
pub fn help() -> String {
    let mut text = format!(
        "usage: {PROGRAM} [options]            run the service (the options below)\n       \
         {PROGRAM} COMMAND [options]    run a command ({PROGRAM} COMMAND --help)\n\ncommands:\n"
    );
    for subcommand in SUBCOMMANDS {
        text.push_str(&format!(
            "  {:<26}  {}\n",
            subcommand.name, subcommand.summary
        ));
    }
    text.push_str("\noptions:\n");
    text.push_str(crate::config::OPTIONS);
    text
}
