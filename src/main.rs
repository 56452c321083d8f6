//! The `idempotent-tool` binary: parse flags, install the JSON logger, start,
//! print one line, serve until SIGTERM or SIGINT, then stop gracefully (a
//! second signal exits at once). `idempotent-tool verify --db FILE` checks a
//! database file instead.
//!
//! Usage errors and a failed start are plain lines on stderr (a person reads
//! them, before any service exists); everything the running service says is a
//! JSON log event. Every way to end early is a `Failure`, and
//! `Failure::exit_status` is the one place that picks the exit status.
#![forbid(unsafe_code)]

use idempotent_tool::app::{Service, StartError, StopReport};
use idempotent_tool::config::{Command, Config, ConfigError, USAGE};
use idempotent_tool::flag::{FlagError, Flags};
use idempotent_tool::log::{self, Logger};
use idempotent_tool::store::verify::{tools_outside_database, verify_database, VerifyError};
use idempotent_tool::store::Database;
use idempotent_tool::tools::{file::effect_tools, ToolFileError, EFFECT_TOOLS, TOOL_NAMES};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::error::Error;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

const VERIFY_USAGE: &str = "\
usage: idempotent-tool verify --db FILE|URL [--tools FILE]

Checks every invariant on a database file, read-only (safe beside a running
server): one call per key (per tenant when tenants exist), at most one effect
per call, every effect its succeeded call's and every succeeded call of a tool
that writes effects its effect, no running call without a lease, no unknown
status, PRAGMA integrity_check. Prints counts and one line per invariant.

Which tools write effects: charge and send_email; with --tools, the tools
file the server ran with decides (every http and command tool, and charge and
send_email if listed). Only names and kinds are read from it: its ${NAME}
variables need not be set.

Without --tools, a database with calls of tools that are not built in is
not judged: verify names those tools and asks for --tools (exit 2).

Exit status: 0 every invariant holds, 1 a violation (each one named),
2 bad usage, a tools file it cannot read, or tools it needs --tools for,
3 the database could not be read as a service database.
";

fn main() -> ExitCode {
    match run(std::env::args().skip(1).collect()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            failure.report();
            ExitCode::from(failure.exit_status())
        }
    }
}

/// Why the binary ends with a status other than 0. `exit_status` is the one
/// place the documented statuses are decided (README: bad usage and a bad
/// tools or auth file exit 2, a failed start 1; `verify`'s are in its usage).
#[derive(Debug)]
enum Failure {
    /// Flags that do not parse; the usage follows the message.
    Usage {
        command: &'static str,
        error: Box<dyn Error>,
        usage: &'static str,
    },
    /// A `--tools` file that cannot be read or used.
    ToolsFile {
        command: &'static str,
        error: ToolFileError,
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
    /// `verify` without `--tools` on calls of tools that are not built in:
    /// which of them write effects is in the tools file.
    NeedsToolsFile(Vec<String>),
}

impl Failure {
    fn exit_status(&self) -> u8 {
        match self {
            Failure::Usage { .. } | Failure::ToolsFile { .. } | Failure::NeedsToolsFile(_) => 2,
            Failure::Start(StartError::Auth(_)) => 2,
            Failure::Signals(_)
            | Failure::Start(_)
            | Failure::WritesFailed
            | Failure::Violations => 1,
            Failure::Unverifiable(_) => 3,
        }
    }

    /// One plain line on stderr (with the usage after a usage error); nothing
    /// for violations, which the report already printed.
    fn report(&self) {
        match self {
            Failure::Usage {
                command,
                error,
                usage,
            } => eprintln!("{command}: {error}\n\n{usage}"),
            Failure::ToolsFile { command, error } => eprintln!("{command}: {error}"),
            Failure::Signals(e) => eprintln!("{SERVE}: cannot install signal handlers: {e}"),
            Failure::Start(e) => eprintln!("{SERVE}: {e}"),
            Failure::WritesFailed | Failure::Violations => {}
            Failure::Unverifiable(e) => eprintln!("{VERIFY}: {e}"),
            Failure::NeedsToolsFile(tools) => eprintln!(
                "{VERIFY}: calls name tools that are not built in ({}); which of them write \
                 effects is in the tools file the server ran with: pass it with --tools FILE",
                tools.join(", ")
            ),
        }
    }
}

/// The prefix of the server's own lines on stderr.
const SERVE: &str = "idempotent-tool";
/// The prefix of `verify`'s lines on stderr.
const VERIFY: &str = "idempotent-tool verify";

fn run(args: Vec<String>) -> Result<(), Failure> {
    // A subcommand, decided before the server's flags are parsed.
    if args.first().map(String::as_str) == Some("verify") {
        return run_verify(&args[1..]);
    }
    let usage_error = |error: ConfigError| Failure::Usage {
        command: SERVE,
        error: Box::new(error),
        usage: USAGE,
    };
    let mut config = match Config::parse(args).map_err(usage_error)? {
        Command::Run(config) => *config,
        Command::Help => {
            print!("{USAGE}");
            return Ok(());
        }
    };
    config.load_tools().map_err(|error| Failure::ToolsFile {
        command: SERVE,
        error,
    })?;
    let _ = log::init(Logger::stderr(config.log_level, config.access_log));
    if config.lease_is_short() {
        log::warn("--lease-secs does not exceed the longest tool run; a sleep may be taken over")
            .event("short_lease")
            .seconds("lease", config.runner.lease)
            .emit();
    }
    // Registered before anything starts, so a signal during start-up is not lost.
    let signals = Signals::new([SIGTERM, SIGINT]).map_err(Failure::Signals)?;
    let grace = config.shutdown_grace;
    let service = Service::start(config).map_err(Failure::Start)?;
    println!("{}", service.banner());
    // Tests and scripts read this line to learn the port; do not leave it buffered.
    let _ = std::io::stdout().flush();
    service.log_start();
    let report = serve_until_signalled(service, signals, grace);
    match report.write_failure {
        None => Ok(()),
        Some(_) => Err(Failure::WritesFailed),
    }
}

/// Block until SIGTERM or SIGINT, then stop gracefully; a second signal
/// exits at once (status 1), without waiting for the grace period.
fn serve_until_signalled(service: Service, mut signals: Signals, grace: Duration) -> StopReport {
    let first = signals.forever().next().unwrap_or(SIGTERM);
    log::info("signal received; stopping (running tools get the grace period; a second signal exits at once)")
        .event("stopping")
        .label("signal", signal_name(first))
        .seconds("grace", grace)
        .emit();
    std::thread::spawn(move || {
        if let Some(second) = signals.forever().next() {
            log::warn("signal received again; exiting now")
                .event("exiting_now")
                .label("signal", signal_name(second))
                .emit();
            std::process::exit(1);
        }
    });
    let report = service.stop(grace);
    // The access lines still buffered go out before the last line.
    log::global().flush(std::time::Duration::from_secs(1));
    match &report.write_failure {
        // A supervisor reads the exit status: this stop was not clean.
        Some(failure) => log::error(
            "stopped after a failed sync of the WAL (exit status 1); check the disk, then start \
             again: the next start recovers from what reached it",
        )
        .event("stopped_after_write_failure")
        .number("released", report.released.len() as u64)
        .cause(failure)
        .emit(),
        None => log::info("stopped cleanly; running calls released for the next process")
            .event("stopped")
            .number("released", report.released.len() as u64)
            .emit(),
    }
    report
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        SIGINT => "SIGINT",
        _ => "SIGTERM",
    }
}

/// `verify --db FILE`: the report on stdout, its verdict in the exit status.
fn run_verify(args: &[String]) -> Result<(), Failure> {
    let flags = verify_flags(args).map_err(|error| Failure::Usage {
        command: VERIFY,
        error: Box::new(error),
        usage: VERIFY_USAGE,
    })?;
    let Some((path, tools)) = flags else {
        print!("{VERIFY_USAGE}");
        return Ok(());
    };
    let effect_writers: Vec<String> = match tools {
        Some(file) => effect_tools(&file).map_err(|error| Failure::ToolsFile {
            command: VERIFY,
            error,
        })?,
        None => {
            let unknown =
                tools_outside_database(&path, &TOOL_NAMES).map_err(Failure::Unverifiable)?;
            if !unknown.is_empty() {
                return Err(Failure::NeedsToolsFile(unknown));
            }
            EFFECT_TOOLS.iter().map(|t| t.to_string()).collect()
        }
    };
    let effect_writers: Vec<&str> = effect_writers.iter().map(String::as_str).collect();
    let report = verify_database(&path, &effect_writers).map_err(Failure::Unverifiable)?;
    print!("{report}");
    if report.is_clean() {
        Ok(())
    } else {
        Err(Failure::Violations)
    }
}

/// `--db FILE`, required, and `--tools FILE`; `Ok(None)` for `--help`.
fn verify_flags(args: &[String]) -> Result<Option<(Database, Option<PathBuf>)>, FlagError> {
    let mut flags = Flags::new(args.iter().cloned());
    let (mut db, mut tools) = (None, None);
    while let Some(flag) = flags.next_flag()? {
        match flag.as_str() {
            "--help" | "-h" => return Ok(None),
            "--db" => {
                db = Some(
                    Database::parse(&flags.value()?)
                        .map_err(|e| FlagError::Other(e.to_string()))?,
                )
            }
            "--tools" => tools = Some(PathBuf::from(flags.value()?)),
            other => return Err(FlagError::Unknown(other.to_string())),
        }
    }
    let db = db.ok_or(FlagError::Missing("--db FILE|URL"))?;
    Ok(Some((db, tools)))
}
