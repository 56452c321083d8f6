//! The `idempotent-tool` binary: parse flags, start, print one line, serve.
//! `idempotent-tool verify --db FILE` checks a database file instead.

use idempotent_tool::app::App;
use idempotent_tool::config::{Command, Config, USAGE};
use idempotent_tool::verify::verify;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

const VERIFY_USAGE: &str = "\
usage: idempotent-tool verify --db FILE

Checks every invariant on a database file, read-only (safe beside a running
server): one call per key (per tenant when tenants exist), at most one effect
per call, every effect its succeeded call's and every succeeded charge or
send_email call its effect, no running call without a lease, no unknown
status, PRAGMA integrity_check. Prints counts and one line per invariant.

Exit status: 0 every invariant holds, 1 a violation (each one named),
2 bad usage, 3 the file could not be read as a service database.
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // A subcommand, decided before the server's flags are parsed.
    if args.first().map(String::as_str) == Some("verify") {
        return run_verify(&args[1..]);
    }
    let config = match Config::parse(args) {
        Ok(Command::Run(config)) => config,
        Ok(Command::Help) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("idempotent-tool: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let app = match App::start(config) {
        Ok(app) => app,
        Err(e) => {
            eprintln!("idempotent-tool: {e}");
            return ExitCode::from(1);
        }
    };
    println!("{}", app.banner());
    // Tests and scripts read this line to learn the port; do not leave it buffered.
    let _ = std::io::stdout().flush();
    app.serve();
    ExitCode::SUCCESS
}

/// `verify --db FILE`: the report on stdout, its verdict in the exit status.
fn run_verify(args: &[String]) -> ExitCode {
    let path = match args {
        [flag] if flag == "--help" || flag == "-h" => {
            print!("{VERIFY_USAGE}");
            return ExitCode::SUCCESS;
        }
        [flag, path] if flag == "--db" => Path::new(path),
        _ => {
            eprintln!("idempotent-tool verify: expected --db FILE\n\n{VERIFY_USAGE}");
            return ExitCode::from(2);
        }
    };
    match verify(path) {
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
