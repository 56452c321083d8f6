//! The `idempotent-tool` binary: parse flags, start, print one line, serve
//! until SIGTERM or SIGINT, then stop gracefully (a second signal exits at
//! once).
#![forbid(unsafe_code)]

use idempotent_tool::app::Service;
use idempotent_tool::config::{Command, Config, USAGE};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    let config = match Config::parse(std::env::args().skip(1)) {
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
        Err(e) => {
            eprintln!("idempotent-tool: {e}");
            return ExitCode::from(1);
        }
    };
    println!("{}", service.banner());
    // Tests and scripts read this line to learn the port; do not leave it buffered.
    let _ = std::io::stdout().flush();
    let first = signals.forever().next().unwrap_or(SIGTERM);
    eprintln!(
        "idempotent-tool: {} received; stopping (running tools get {}s; a second signal exits at once)",
        signal_name(first),
        grace.as_secs_f64()
    );
    std::thread::spawn(move || {
        if let Some(second) = signals.forever().next() {
            eprintln!(
                "idempotent-tool: {} received again; exiting now",
                signal_name(second)
            );
            std::process::exit(1);
        }
    });
    let report = service.stop(grace);
    eprintln!(
        "idempotent-tool: stopped cleanly; {} running call(s) released for the next process",
        report.released.len()
    );
    ExitCode::SUCCESS
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        SIGINT => "SIGINT",
        _ => "SIGTERM",
    }
}
