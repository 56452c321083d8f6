//! The `idempotent-tool` binary: the service, or one of its subcommands
//! (`verify`). Everything is in the library's `cli` module, which also picks
//! the exit status. The one exception comes first: the binary is also its
//! command tools' supervisor (`tools::supervisor`), started by the service
//! as `idempotent-tool __supervise …` for each attempt.
#![forbid(unsafe_code)]

use idempotent_tool::tools::supervisor;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if args
        .first()
        .is_some_and(|first| first == supervisor::SUBCOMMAND)
    {
        return supervisor::main(&args[1..]);
    }
    // This very binary, even once a deploy has replaced the file on disk.
    supervisor::supervise_commands_with("/proc/self/exe");
    idempotent_tool::cli::main(std::env::args().skip(1).collect())
}
