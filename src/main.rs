//! The `idempotent-tool` binary: the service, or one of its subcommands
//! (`verify`). Everything is in the library's `cli` module, which also picks
//! the exit status.
#![forbid(unsafe_code)]

use std::process::ExitCode;

fn main() -> ExitCode {
    idempotent_tool::cli::main(std::env::args().skip(1).collect())
}
