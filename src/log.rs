//! Structured logging: one JSON object per line on stderr, or appended to
//! `--log-file` (reopened on SIGHUP, see `file`) — events (start-up, state
//! transitions, errors) filtered by `--log-level`, and one access record per
//! request unless `--access-log off`.
//!
//! Every line is built whole, then written with one `write_all` under the
//! stderr lock, so lines from concurrent threads never interleave (and a line
//! up to `PIPE_BUF` is one `write(2)`, atomic even beside other processes).
//! Access lines go through `access_writer` instead: appended whole to a
//! bounded buffer, written out by their own thread, dropped and counted
//! (never waited for) when the buffer is full.
//! `Exchange` holds what a request turned out to be (its tenant, key, call),
//! filled in by whichever route answers it (REST or MCP), for its access line.
//!
//! Map: `event` (`Event`, one line being built, field by typed field),
//! `settings` (what `--log-level` and `--access-log` accept), `file`
//! (`--log-file`, reopened on SIGHUP), `access_writer`, `exchange`
//! (`Exchange`), `repeats` (a failure that repeats said once, then counted).
//!
//! This module must make it impossible to log a secret by accident: an event
//! takes a `&'static str` message and typed fields named for what they hold
//! (a call id, a tool, an error value) — there is no free-form string field, so
//! an `Authorization` header, a configured header value or a call's args has
//! nowhere to go. The access record's fields are exactly the documented ones.

mod access_writer;
mod event;
mod exchange;
mod file;
mod repeats;
mod settings;

use crate::rfc3339::{push_rfc3339_millis, rfc3339_millis};
pub use access_writer::AccessWriter;
pub use event::Event;
pub use exchange::Exchange;
use file::{LogFile, LogFileWriter};
pub use repeats::{Repeats, BACKGROUND_FAILURE_EVERY};
pub use settings::{parse_access_log, Level, SettingError};
use std::cell::RefCell;
use std::fmt::Write as _;
use std::io::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

/// Where lines go: stderr, a file (`--log-file`, or the bench's in-process
/// server), or a buffer a test reads back.
#[derive(Clone)]
enum Sink {
    Stderr,
    File(Arc<LogFile>),
    Buffer(Arc<Mutex<Vec<u8>>>),
}

/// A level filter, an access-log switch and a sink.
#[derive(Clone)]
pub struct Logger {
    level: Level,
    access_log: bool,
    sink: Sink,
    /// Where access lines go on their way to a stderr or file sink (see
    /// `access_writer`); `None` for a buffer sink, which tests read back at
    /// once.
    access_writer: Option<Arc<AccessWriter>>,
}

impl Default for Logger {
    /// `info`, access log on, to stderr: the service's defaults.
    fn default() -> Self {
        Logger::stderr(Level::Info, true)
    }
}

impl Logger {
    pub fn stderr(level: Level, access_log: bool) -> Logger {
        Logger {
            level,
            access_log,
            sink: Sink::Stderr,
            access_writer: access_log
                .then(|| start_access_writer(Box::new(std::io::stderr())))
                .flatten(),
        }
    }

    /// A logger appending to a file already open: what stderr redirected to
    /// a file costs, without flooding a terminal (the bench's in-process
    /// server). `reopen` leaves it alone.
    pub fn file(level: Level, access_log: bool, file: std::fs::File) -> Logger {
        Logger::to_log_file(level, access_log, LogFile::from_file(file))
    }

    /// `--log-file PATH`: a logger appending to `path`, which `reopen` opens
    /// again (logrotate renames the file, then sends SIGHUP).
    pub fn file_at(
        level: Level,
        access_log: bool,
        path: &std::path::Path,
    ) -> std::io::Result<Logger> {
        LogFile::open(path).map(|file| Logger::to_log_file(level, access_log, file))
    }

    fn to_log_file(level: Level, access_log: bool, file: LogFile) -> Logger {
        let file = Arc::new(file);
        let access_writer = access_log
            .then(|| start_access_writer(Box::new(LogFileWriter(Arc::clone(&file)))))
            .flatten();
        Logger {
            level,
            access_log,
            sink: Sink::File(file),
            access_writer,
        }
    }

    /// Open the log file again by its path (SIGHUP): `None` when the log is
    /// not a file with a path (stderr), else whether that worked. Lines
    /// already queued go to whichever file is open when they are written,
    /// each to exactly one.
    pub fn reopen(&self) -> Option<std::io::Result<()>> {
        match &self.sink {
            Sink::File(file) => match file.reopen() {
                Ok(true) => Some(Ok(())),
                Ok(false) => None,
                Err(e) => Some(Err(e)),
            },
            Sink::Stderr | Sink::Buffer(_) => None,
        }
    }

    /// A logger writing into memory, and the memory (for tests).
    pub fn buffer(level: Level, access_log: bool) -> (Logger, Arc<Mutex<Vec<u8>>>) {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let sink = Sink::Buffer(buffer.clone());
        (
            Logger {
                level,
                access_log,
                sink,
                access_writer: None,
            },
            buffer,
        )
    }

    pub fn enabled(&self, level: Level) -> bool {
        level <= self.level
    }

    pub fn access_log_enabled(&self) -> bool {
        self.access_log
    }

    /// An event at `level`; add fields, then `emit()`. Costs nothing beyond
    /// the call when the level is filtered out.
    pub fn event(&self, level: Level, msg: &'static str) -> Event<'_> {
        let mut has_request_id = false;
        let line = self.enabled(level).then(|| {
            let mut line = start_line(level);
            push_str_field(&mut line, "msg", msg);
            CURRENT_REQUEST.with(|current| {
                let id = current.borrow();
                if !id.is_empty() {
                    push_str_field(&mut line, "request_id", &id);
                    has_request_id = true;
                }
            });
            line
        });
        Event {
            logger: self,
            line,
            has_request_id,
        }
    }

    pub fn error(&self, msg: &'static str) -> Event<'_> {
        self.event(Level::Error, msg)
    }

    pub fn warn(&self, msg: &'static str) -> Event<'_> {
        self.event(Level::Warn, msg)
    }

    pub fn info(&self, msg: &'static str) -> Event<'_> {
        self.event(Level::Info, msg)
    }

    pub fn debug(&self, msg: &'static str) -> Event<'_> {
        self.event(Level::Debug, msg)
    }

    /// One request's access record (at `info`, whatever `--log-level` says:
    /// only `--access-log off` silences it).
    pub fn access(&self, record: &AccessRecord) {
        if !self.access_log {
            return;
        }
        match &self.access_writer {
            // A captured line must be written by the request's own thread,
            // whose capture is its test's (the writer thread is shared).
            Some(_) if captured() && matches!(self.sink, Sink::Stderr) => {
                self.write_line(record.to_line())
            }
            Some(writer) => ACCESS_LINE.with(|line| {
                let mut line = line.borrow_mut();
                line.clear();
                record.push_line(&mut line);
                line.push_str(
                    "}
",
                );
                writer.push(line.as_bytes());
            }),
            None => self.write_line(record.to_line()),
        }
    }

    /// Count access lines dropped for want of room in `counter` too.
    pub fn report_dropped_access_lines_to(&self, counter: Arc<crate::metrics::Counter>) {
        if let Some(writer) = &self.access_writer {
            writer.report_to(counter);
        }
    }

    /// Wait (at most `within`) until every access line queued is written.
    pub fn flush(&self, within: Duration) {
        if let Some(writer) = &self.access_writer {
            writer.flush(within);
        }
    }

    /// The whole line in one `write_all` while holding the sink's lock.
    fn write_line(&self, mut line: String) {
        line.push_str("}\n");
        match &self.sink {
            // Test processes only (see `CAPTURED`): the one macro libtest captures.
            Sink::Stderr if captured() => eprint!("{line}"), // libtest capture
            Sink::Stderr => {
                // Nowhere to report a failed write to stderr: drop the line.
                let _ = std::io::stderr().lock().write_all(line.as_bytes());
            }
            Sink::File(file) => {
                let _ = file.write_all(line.as_bytes());
            }
            Sink::Buffer(buffer) => {
                let mut buffer = crate::lock::lock(buffer);
                buffer.extend_from_slice(line.as_bytes());
            }
        }
    }
}

/// What the access log says about one request: exactly these fields. No
/// header (other than the checked `X-Request-Id` and `Idempotency-Key`), no
/// query string and no body can be put in one.
#[derive(Debug, Clone)]
pub struct AccessRecord<'a> {
    pub request_id: &'a str,
    /// The client's address: the connection's peer, or the address a
    /// `--trusted-proxy` forwarded for; `None` without a socket.
    pub client: Option<IpAddr>,
    /// `None` when the request was refused before it was authenticated.
    pub tenant: Option<&'a str>,
    pub method: &'a str,
    /// Only the part before `?` is logged, even if more is given here.
    pub path: &'a str,
    pub status: u16,
    pub duration: Duration,
    pub idem_key: Option<&'a str>,
    pub call_id: Option<&'a str>,
    /// The answer was an existing call (`Idempotent-Replayed: true`).
    pub replayed: bool,
}

impl AccessRecord<'_> {
    fn to_line(&self) -> String {
        let mut line = String::with_capacity(256);
        self.push_line(&mut line);
        line
    }

    /// The line, without its closing brace and newline, appended to `line`.
    fn push_line(&self, line: &mut String) {
        push_line_start(line, Level::Info);
        push_str_field(line, "request_id", self.request_id);
        match self.client {
            // An address needs no escaping.
            Some(client) => {
                let _ = write!(line, ",\"client\":\"{client}\"");
            }
            None => line.push_str(",\"client\":null"),
        }
        push_optional_str_field(line, "tenant", self.tenant);
        push_str_field(line, "method", self.method);
        let path = self.path.split('?').next().unwrap_or_default();
        push_str_field(line, "path", path);
        let micros = self.duration.as_micros() as f64;
        let _ = write!(
            line,
            ",\"status\":{},\"duration_ms\":{}",
            self.status,
            micros / 1000.0
        );
        push_optional_str_field(line, "idem_key", self.idem_key);
        push_optional_str_field(line, "call_id", self.call_id);
        let _ = write!(line, ",\"replayed\":{}", self.replayed);
    }
}

/// A field name is written unescaped, and must not repeat a key every line has.
fn is_field_name(name: &str) -> bool {
    let simple = !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
    simple && !["ts", "level", "msg"].contains(&name)
}

fn start_line(level: Level) -> String {
    let mut line = String::with_capacity(256);
    push_line_start(&mut line, level);
    line
}

/// `{"ts":"...","level":"..."`, appended to `line` without allocating.
fn push_line_start(line: &mut String, level: Level) {
    line.push_str("{\"ts\":\"");
    push_rfc3339_millis(line, SystemTime::now());
    line.push('"');
    push_str_field(line, "level", level.as_str());
}

fn push_optional_str_field(line: &mut String, name: &str, value: Option<&str>) {
    match value {
        Some(value) => push_str_field(line, name, value),
        None => {
            let _ = write!(line, ",\"{name}\":null");
        }
    }
}

fn push_str_field(line: &mut String, name: &str, value: &str) {
    let _ = write!(line, ",\"{name}\":");
    push_json_string(line, value);
}

/// A JSON string literal (RFC 8259 section 7): quote, backslash and control
/// characters escaped, everything else as UTF-8.
fn push_json_string(out: &mut String, value: &str) {
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

thread_local! {
    /// The request this thread is serving, named in each event it emits;
    /// empty when none. One buffer per thread, reused: a request's scope
    /// costs a copy, not an allocation.
    static CURRENT_REQUEST: RefCell<String> = const { RefCell::new(String::new()) };
    /// Each thread's access line, formatted here and copied out, so a
    /// request allocates nothing for its line once the thread is warm.
    static ACCESS_LINE: RefCell<String> = const { RefCell::new(String::new()) };
}

/// While it lives, every event the current thread emits carries this request
/// id: events deep in the store or the runner, emitted on behalf of a request,
/// then name it without each call site passing it along. Scopes do not nest
/// (a thread serves one request at a time); dropping one ends it.
#[must_use = "the scope ends when the guard is dropped"]
pub struct RequestScope(());

/// Name `request_id` in this thread's events until the guard is dropped.
pub fn request_scope(request_id: &str) -> RequestScope {
    CURRENT_REQUEST.with(|c| {
        let mut current = c.borrow_mut();
        current.clear();
        current.push_str(request_id);
    });
    RequestScope(())
}

impl Drop for RequestScope {
    fn drop(&mut self) {
        CURRENT_REQUEST.with(|c| c.borrow_mut().clear());
    }
}

/// The access-log writer for a sink, or none (and lines written as before)
/// if its thread cannot start.
fn start_access_writer(sink: Box<dyn std::io::Write + Send>) -> Option<Arc<AccessWriter>> {
    AccessWriter::start(sink, access_writer::CAPACITY)
        .ok()
        .map(Arc::new)
}

static GLOBAL: OnceLock<Logger> = OnceLock::new();

/// Whether lines bound for stderr go through the test harness's output
/// capture (`eprint!`) instead of straight to the descriptor. libtest shows
/// captured output only for a test that failed, so a green `cargo test` is
/// quiet, and a red one shows what its service said. Never in the service:
/// `eprint!` panics on a stderr it cannot write, where the service must not.
static CAPTURED: AtomicBool = AtomicBool::new(cfg!(test));

/// Route this process's stderr log lines through the test harness's capture
/// (see `CAPTURED`). For test processes only: `temp` calls it when a test
/// makes a temporary folder or database.
#[cfg(any(test, feature = "testing"))]
pub fn capture_for_tests() {
    CAPTURED.store(true, Ordering::Relaxed);
}

fn captured() -> bool {
    CAPTURED.load(Ordering::Relaxed)
}

/// Set the process's logger once, from the flags, before any thread logs.
/// A second call is refused (the first logger stays) and gets its logger back.
pub fn init(logger: Logger) -> Result<(), Logger> {
    GLOBAL.set(logger)
}

/// The process's logger; the defaults if `init` was never called.
pub fn global() -> &'static Logger {
    GLOBAL.get_or_init(Logger::default)
}

pub fn error(msg: &'static str) -> Event<'static> {
    global().error(msg)
}

pub fn warn(msg: &'static str) -> Event<'static> {
    global().warn(msg)
}

pub fn info(msg: &'static str) -> Event<'static> {
    global().info(msg)
}

pub fn debug(msg: &'static str) -> Event<'static> {
    global().debug(msg)
}

pub fn access(record: &AccessRecord) {
    global().access(record)
}

#[cfg(test)]
mod tests;
