//! Running the service: read the configuration (flags over
//! `IDEMPOTENT_TOOL_*` variables, each flag over a set variable warned of),
//! install the JSON logger (stderr or `--log-file`), start, print one line,
//! tell systemd it is ready, serve until SIGTERM or SIGINT, then stop
//! gracefully (a second signal exits at once).
//! SIGHUP never stops it: it reopens `--log-file` (logrotate's signal).
//!
//! Usage errors and a failed start are plain lines on stderr (a person reads
//! them, before any service exists); everything the running service says is
//! a JSON log event.

use super::failure::Failure;
use super::{help, notify, version, PROGRAM};
use crate::app::{Service, StopReport};
use crate::config::{self, Command, Config, ConfigError};
use crate::log::{self, Logger};
use crate::{out, outln};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::time::Duration;

pub fn run(args: Vec<String>) -> Result<(), Failure> {
    let usage = |error: ConfigError| Failure::Usage {
        command: PROGRAM,
        error: Box::new(error),
    };
    let variables = config::service_variables().map_err(usage)?;
    // Before any thread exists; no command tool may inherit them.
    config::forget_variables(&variables);
    let mut config = match Config::parse_with(args, &variables).map_err(usage)? {
        Command::Run(config) => *config,
        Command::PrintConfig(config) => {
            outln!(
                "# {}: the configuration in force; secrets redacted",
                version()
            );
            out!("{}", config::describe(&config));
            return Ok(());
        }
        Command::Help => {
            out!("{}", help());
            return Ok(());
        }
        Command::Version => {
            outln!("{}", version());
            return Ok(());
        }
    };
    config.load_tools().map_err(|error| Failure::ToolsFile {
        command: PROGRAM,
        error,
    })?;
    let _ = log::init(logger(&config)?);
    if config.lease_is_short() {
        log::warn("--lease-secs does not exceed the longest tool run; a sleep may be taken over")
            .event("short_lease")
            .seconds("lease", config.runner.lease)
            .emit();
    }
    warn_of_overridden_variables(&config);
    // Registered before anything starts, so a signal during start-up is not lost.
    let signals = Signals::new([SIGTERM, SIGINT, SIGHUP]).map_err(Failure::Signals)?;
    wait_for_orphaned_tools();
    let grace = config.shutdown_grace;
    let service = Service::start(config).map_err(Failure::Start)?;
    // Tests and scripts read this line to learn the port; it is flushed, and
    // a closed stdout drops it without stopping the service.
    let banner = service.banner();
    outln!("{banner}");
    service.log_start();
    notify::ready(&banner);
    let report = serve_until_signalled(service, signals, grace);
    match report.write_failure {
        None => Ok(()),
        Some(_) => Err(Failure::WritesFailed),
    }
}

/// A service killed on this host (`kill -9`, a crash) leaves its command
/// tools' supervisors stopping them for a moment: wait for them (a few
/// seconds at most) before recovery takes its calls back, so that no
/// attempt started here runs beside one of the dead process's.
fn wait_for_orphaned_tools() {
    let (found, left) = crate::tools::supervisor::orphans::wait_for_orphans();
    if found > 0 {
        log::warn("waited for the command tools of a process that died to be stopped")
            .event("orphaned_tools")
            .number("supervisors", found as u64)
            .number("still_running", left as u64)
            .emit();
    }
}

/// stderr, or `--log-file` opened for appending.
fn logger(config: &Config) -> Result<Logger, Failure> {
    match &config.log_file {
        None => Ok(Logger::stderr(config.log_level, config.access_log)),
        Some(path) => Logger::file_at(config.log_level, config.access_log, path).map_err(|error| {
            Failure::LogFile {
                path: path.clone(),
                error,
            }
        }),
    }
}

/// Block until SIGTERM or SIGINT, then stop gracefully; a second signal
/// exits at once (status 1), without waiting for the grace period.
fn serve_until_signalled(service: Service, mut signals: Signals, grace: Duration) -> StopReport {
    let first = next_stop_signal(&mut signals);
    log::info("signal received; stopping (running tools get the grace period; a second signal exits at once)")
        .event("stopping")
        .label("signal", signal_name(first))
        .seconds("grace", grace)
        .emit();
    notify::stopping();
    std::thread::spawn(move || {
        let second = next_stop_signal(&mut signals);
        log::warn("signal received again; exiting now")
            .event("exiting_now")
            .label("signal", signal_name(second))
            .emit();
        std::process::exit(1);
    });
    let report = service.stop(grace);
    // The access lines still buffered go out before the last line.
    log::global().flush(Duration::from_secs(1));
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

/// The next SIGTERM or SIGINT. A SIGHUP on the way reopens the log file and
/// is otherwise ignored: it never stops the service.
fn next_stop_signal(signals: &mut Signals) -> i32 {
    for signal in signals.forever() {
        if signal != SIGHUP {
            return signal;
        }
        reopen_log();
    }
    SIGTERM
}

/// SIGHUP: open `--log-file` again by its path (logrotate has moved it).
fn reopen_log() {
    match log::global().reopen() {
        None => log::info("SIGHUP received; the log goes to stderr, nothing to reopen")
            .event("sighup")
            .emit(),
        Some(Ok(())) => log::info("log file reopened (SIGHUP)")
            .event("log_reopened")
            .emit(),
        Some(Err(e)) => {
            log::error("cannot reopen the log file; still writing to the one open before")
                .event("log_reopen_failed")
                .cause(&e)
                .emit()
        }
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        SIGINT => "SIGINT",
        _ => "SIGTERM",
    }
}

/// One warning for each flag given on the command line over its variable,
/// which was set too: the variable is ignored (a unit's `ExecStart` flag
/// would otherwise shadow its environment file without a word). Names only,
/// never a value: the variable may hold a secret.
fn warn_of_overridden_variables(config: &Config) {
    for (flag, variable) in config.origins.overridden() {
        log::warn("a flag on the command line overrides its variable, which is set too; the variable is ignored")
            .event("variable_overridden")
            .label("flag", flag)
            .variable(variable)
            .emit();
    }
}
