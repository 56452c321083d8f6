//! The `idempotent-tool` binary: parse flags, start, print one line, serve.

use idempotent_tool::app::App;
use idempotent_tool::config::{Command, Config, USAGE};
use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    let config = match Config::parse(std::env::args().skip(1)) {
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
