//! The `idempotent-tool` binary: parse flags, install the JSON logger, start,
//! print one line, serve until SIGTERM or SIGINT, then stop gracefully (a
//! second signal exits at once). `idempotent-tool verify --db FILE` checks a
//! database file instead.
//!
//! Usage errors and a failed start are plain lines on stderr (a person reads
//! them, before any service exists); everything the running service says is a
//! JSON log event.
#![forbid(unsafe_code)]

use idempotent_tool::app::{Service, StartError};
use idempotent_tool::config::{Command, Config, USAGE};
use idempotent_tool::flag::Flags;
use idempotent_tool::log::{self, Logger};
use idempotent_tool::store::verify::verify;
use idempotent_tool::tools::{file::effect_tools, EFFECT_TOOLS};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

const VERIFY_USAGE: &str = "\
usage: idempotent-tool verify --db FILE [--tools FILE]

Checks every invariant on a database file, read-only (safe beside a running
server): one call per key (per tenant when tenants exist), at most one effect
per call, every effect its succeeded call's and every succeeded call of a tool
that writes effects its effect, no running call without a lease, no unknown
status, PRAGMA integrity_check. Prints counts and one line per invariant.

Which tools write effects: charge and send_email; with --tools, the tools
file the server ran with decides (every http and command tool, and charge and
send_email if listed). Only names and kinds are read from it: its ${NAME}
variables need not be set.

Exit status: 0 every invariant holds, 1 a violation (each one named),
2 bad usage or a tools file it cannot read, 3 the database could not be read
as a service database.
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // A subcommand, decided before the server's flags are parsed.
    if args.first().map(String::as_str) == Some("verify") {
        return run_verify(&args[1..]);
    }
    let mut config = match Config::parse(args) {
        Ok(Command::Run(config)) => *config,
        Ok(Command::Help) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("idempotent-tool: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = config.load_tools() {
        eprintln!("idempotent-tool: {e}");
        return ExitCode::from(2);
    }
    let _ = log::init(Logger::stderr(config.log_level, config.access_log));
    if config.lease_is_short() {
        log::warn("--lease-secs does not exceed the longest tool run; a sleep may be taken over")
            .event("short_lease")
            .seconds("lease", config.runner.lease)
            .emit();
    }
    // Registered before anything starts, so a signal during start-up is not lost.
    let mut signals = match Signals::new([SIGTERM, SIGINT]) {
        Ok(signals) => signals,
        Err(e) => {
            eprintln!("idempotent-tool: cannot install signal handlers: {e}");
            return ExitCode::from(1);
        }
    };
    let grace = config.shutdown_grace;
    let service = match Service::start(config) {
        Ok(service) => service,
        Err(e @ StartError::Auth(_)) => {
            eprintln!("idempotent-tool: {e}");
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("idempotent-tool: {e}");
            return ExitCode::from(1);
        }
    };
    println!("{}", service.banner());
    // Tests and scripts read this line to learn the port; do not leave it buffered.
    let _ = std::io::stdout().flush();
    service.log_start();
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
    log::info("stopped cleanly; running calls released for the next process")
        .event("stopped")
        .number("released", report.released.len() as u64)
        .emit();
    ExitCode::SUCCESS
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        SIGINT => "SIGINT",
        _ => "SIGTERM",
    }
}

/// `verify --db FILE`: the report on stdout, its verdict in the exit status.
fn run_verify(args: &[String]) -> ExitCode {
    let (path, tools) = match verify_flags(args) {
        Ok(Some(flags)) => flags,
        Ok(None) => {
            print!("{VERIFY_USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("idempotent-tool verify: {e}\n\n{VERIFY_USAGE}");
            return ExitCode::from(2);
        }
    };
    let effect_writers: Vec<String> = match tools {
        Some(file) => match effect_tools(&file) {
            Ok(names) => names,
            Err(e) => {
                eprintln!("idempotent-tool verify: {e}");
                return ExitCode::from(2);
            }
        },
        None => EFFECT_TOOLS.iter().map(|t| t.to_string()).collect(),
    };
    let effect_writers: Vec<&str> = effect_writers.iter().map(String::as_str).collect();
    match verify(&path, &effect_writers) {
        Ok(report) => {
            print!("{report}");
            if report.is_clean() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("idempotent-tool verify: {e}");
            ExitCode::from(3)
        }
    }
}

/// `--db FILE`, required, and `--tools FILE`; `Ok(None)` for `--help`.
fn verify_flags(args: &[String]) -> Result<Option<(PathBuf, Option<PathBuf>)>, String> {
    let mut flags = Flags::new(args.iter().cloned());
    let (mut db, mut tools) = (None, None);
    while let Some(flag) = flags.next_flag()? {
        match flag.as_str() {
            "--help" | "-h" => return Ok(None),
            "--db" => db = Some(PathBuf::from(flags.value()?)),
            "--tools" => tools = Some(PathBuf::from(flags.value()?)),
            other => return Err(format!("unknown flag {other:?}")),
        }
    }
    let db = db.ok_or_else(|| "expected --db FILE".to_string())?;
    Ok(Some((db, tools)))
}
