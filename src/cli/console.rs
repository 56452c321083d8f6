//! Lines a person reads, on stdout or stderr, written so that a closed or
//! broken stream never panics. `println!` panics when its write fails: with
//! `idempotent-tool --help | true`, or a server started with its stdout
//! closed, the process ended with status 101 and a backtrace — the server
//! after it had opened the database and bound the port. Every binary of the
//! project (the server, `src/bin/`, the bench) prints through these macros
//! instead, and `tests/it/closed_output.rs` holds each to it.
//!
//! A line that cannot be written is dropped: there is nowhere left to report
//! it, and what the program does next must not depend on who reads it (the
//! exit status still says how it went). `out_line` returns the error for the
//! few callers that stop printing once nobody reads (`inspect`).

use std::fmt;
use std::io::{self, Write};

/// `println!` that never panics (see the module).
#[macro_export]
macro_rules! outln {
    () => {{
        let _ = $crate::cli::console::out_line(format_args!(""));
    }};
    ($($arg:tt)*) => {{
        let _ = $crate::cli::console::out_line(format_args!($($arg)*));
    }};
}

/// `print!` that never panics (see the module).
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {{
        let _ = $crate::cli::console::out_text(format_args!($($arg)*));
    }};
}

/// `eprintln!` that never panics (see the module).
#[macro_export]
macro_rules! errln {
    ($($arg:tt)*) => {{
        $crate::cli::console::err_line(format_args!($($arg)*));
    }};
}

/// One line on stdout, flushed: scripts and tests wait for lines such as
/// the start-up line, so none may stay in a buffer.
pub fn out_line(args: fmt::Arguments) -> io::Result<()> {
    let mut stdout = io::stdout().lock();
    stdout.write_fmt(args)?;
    stdout.write_all(b"\n")?;
    stdout.flush()
}

/// Text on stdout without a newline (a table built piece by piece).
pub fn out_text(args: fmt::Arguments) -> io::Result<()> {
    io::stdout().lock().write_fmt(args)
}

/// One line on stderr; dropped if stderr is gone.
pub fn err_line(args: fmt::Arguments) {
    let mut stderr = io::stderr().lock();
    let _ = stderr
        .write_fmt(args)
        .and_then(|()| stderr.write_all(b"\n"));
}

/// A command line that cannot run: the cause and where the usage is, on one
/// line of stderr (the usage itself, 50 lines, used to follow and scroll the
/// cause away).
pub fn usage_error(program: &str, error: &dyn fmt::Display) {
    err_line(format_args!("{program}: {error} (see '{program} --help')"));
}
