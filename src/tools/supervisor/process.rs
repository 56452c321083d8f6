//! The supervisor process: what `idempotent-tool __supervise` does for one
//! attempt of a `command` tool. In order:
//!
//! 1. it catches SIGTERM and SIGINT (a stop: the service's cancel or
//!    timeout, or its own death, below), SIGUSR1 (kill now: the tool's
//!    output ran over its cap), SIGCHLD (a child ended) and SIGHUP
//!    (ignored: a signal meant for the service's log file never ends a
//!    tool);
//! 2. it asks the kernel for SIGTERM when the thread that started it ends
//!    (`PR_SET_PDEATHSIG`; the service starts it from a worker thread,
//!    which lives as long as the attempt) and then checks that its parent
//!    is still the service that started it — if the service died before
//!    the request took hold, nothing is started;
//! 3. it becomes a child subreaper, so whatever the tool starts stays its
//!    descendant even after leaving the tool's process group;
//! 4. it starts the tool in a process group of its own, with the
//!    supervisor's stdout and stderr (the service's pipes) and its stdin
//!    fed from the socket the service writes the call's JSON to;
//! 5. it waits: when the tool exits, whatever the tool left behind is
//!    killed (`descendants`); on a stop, the tool's group gets SIGTERM,
//!    and after `TERM_GRACE` (at once on SIGUSR1) the group and every
//!    descendant get SIGKILL;
//! 6. only when no descendant is left does it write how the tool ended
//!    (`report`) and exit.
//!
//! It never writes to the tool's stdout or stderr and never ends before
//! its tool's every process has been reaped (or `descendants` gave up on
//! one stuck in the kernel).

use super::descendants::{kill_all, reap};
use super::report::Report;
use crate::tools::command_tool::TERM_GRACE;
use nix::sys::prctl;
use nix::sys::signal::{killpg, Signal};
use nix::sys::wait::WaitStatus;
use nix::unistd::Pid;
use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGTERM, SIGUSR1};
use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The exit status when the service was gone before the tool could start.
const PARENT_GONE: u8 = 3;
/// The exit status when the supervisor cannot work at all (its signals, its
/// socket): the service then sees no report and says so.
const CANNOT_SUPERVISE: u8 = 4;

/// Supervise `program` `args` for the service whose pid is `parent`.
pub(super) fn run(parent: u32, program: &OsString, args: &[OsString]) -> ExitCode {
    let Ok(signals) = Signals::catch() else {
        return ExitCode::from(CANNOT_SUPERVISE);
    };
    if prctl::set_pdeathsig(Signal::SIGTERM).is_err() {
        return ExitCode::from(CANNOT_SUPERVISE);
    }
    if std::os::unix::process::parent_id() != parent {
        return ExitCode::from(PARENT_GONE);
    }
    let Ok(mut service) = service_socket() else {
        return ExitCode::from(CANNOT_SUPERVISE);
    };
    // Without it a process that left the tool's group would escape; with
    // it, it is re-parented here. Only a kernel older than 3.4 refuses.
    let _ = prctl::set_child_subreaper(true);
    if signals.stop_asked() || signals.kill_asked() {
        // Stopped (or orphaned) before the tool started: it never starts.
        let never_ran = Report::Signalled {
            signal: SIGTERM,
            killed: false,
        };
        let _ = send(&mut service, never_ran);
        return ExitCode::SUCCESS;
    }
    let spawned = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .process_group(0)
        .spawn();
    let mut tool = match spawned {
        Ok(tool) => tool,
        Err(e) => {
            let errno = e.raw_os_error().unwrap_or(0);
            let _ = send(&mut service, Report::SpawnFailed { errno });
            return ExitCode::SUCCESS;
        }
    };
    let pid = Pid::from_raw(tool.id() as i32);
    let _ = send(&mut service, Report::Started { pid: pid.as_raw() });
    if let Some(stdin) = tool.stdin.take() {
        relay_stdin(stdin);
    }
    // Never `tool.wait()`: `reap` waits for every child, the tool among them.
    let ended = watch(pid, &signals);
    let _ = send(&mut service, ended);
    ExitCode::SUCCESS
}

/// Wait for the tool, stopping it when asked; kill what it leaves behind.
fn watch(tool: Pid, signals: &Signals) -> Report {
    let mut grace_ends: Option<Instant> = None;
    let mut killed = false;
    loop {
        if let Some(status) = reap(tool).tool {
            // Whatever it left in its group or below it goes with it.
            kill_all(tool);
            return ended(status, killed);
        }
        if grace_ends.is_none() && signals.stop_asked() {
            let _ = killpg(tool, Signal::SIGTERM);
            grace_ends = Some(Instant::now() + TERM_GRACE);
        }
        let left = grace_ends.map(|at| at.saturating_duration_since(Instant::now()));
        if !killed && (left == Some(Duration::ZERO) || signals.kill_asked()) {
            killed = true;
            if let Some(status) = kill_all(tool) {
                return ended(status, killed);
            }
            continue;
        }
        signals.wait(if killed { Some(KILLED_POLL) } else { left });
    }
}

/// After SIGKILL, how often to look again for a tool that has not been
/// reaped (stuck in the kernel): SIGCHLD also wakes the wait.
const KILLED_POLL: Duration = Duration::from_millis(100);

/// The final report for the tool's wait status.
fn ended(status: WaitStatus, killed: bool) -> Report {
    match status {
        WaitStatus::Signaled(_, signal, _) => Report::Signalled {
            signal: signal as i32,
            killed,
        },
        WaitStatus::Exited(_, code) => Report::Exited { code, killed },
        // `reap` asks for neither stops nor continues.
        _ => Report::Exited { code: -1, killed },
    }
}

/// The service's end of the report: the socket that is this process's
/// stdin, duplicated for writing.
fn service_socket() -> io::Result<UnixStream> {
    Ok(UnixStream::from(io::stdin().as_fd().try_clone_to_owned()?))
}

fn send(service: &mut UnixStream, report: Report) -> io::Result<()> {
    service.write_all(format!("{report}\n").as_bytes())
}

/// Copy the call's JSON from the service to the tool's stdin on a thread of
/// its own (a tool that never reads must not hold the supervisor), then
/// close it.
fn relay_stdin(mut stdin: std::process::ChildStdin) {
    let _ = std::thread::Builder::new()
        .name("supervisor-stdin".into())
        .spawn(move || {
            let _ = io::copy(&mut io::stdin().lock(), &mut stdin);
        });
}

/// The signals the supervisor answers, caught into flags and a self-pipe
/// that wakes `wait`.
struct Signals {
    stop: Arc<AtomicBool>,
    kill_now: Arc<AtomicBool>,
    wake: UnixStream,
}

impl Signals {
    fn catch() -> io::Result<Signals> {
        let (wake, woken) = UnixStream::pair()?;
        let stop = Arc::new(AtomicBool::new(false));
        for signal in [SIGTERM, SIGINT] {
            // The flag first, then the byte: `wait` wakes to a flag set.
            signal_hook::flag::register(signal, Arc::clone(&stop))?;
            signal_hook::low_level::pipe::register(signal, woken.try_clone()?)?;
        }
        let kill_now = Arc::new(AtomicBool::new(false));
        signal_hook::flag::register(SIGUSR1, Arc::clone(&kill_now))?;
        signal_hook::low_level::pipe::register(SIGUSR1, woken.try_clone()?)?;
        signal_hook::low_level::pipe::register(SIGCHLD, woken.try_clone()?)?;
        // Caught and dropped: SIGHUP's default would end the supervisor.
        signal_hook::flag::register(SIGHUP, Arc::new(AtomicBool::new(false)))?;
        Ok(Signals {
            stop,
            kill_now,
            wake,
        })
    }

    fn stop_asked(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    fn kill_asked(&self) -> bool {
        self.kill_now.load(Ordering::SeqCst)
    }

    /// Until a caught signal arrives, or `timeout` passes.
    fn wait(&self, timeout: Option<Duration>) {
        let timeout = timeout.map(|t| t.max(Duration::from_millis(1)));
        let _ = self.wake.set_read_timeout(timeout);
        let mut drained = [0u8; 64];
        let _ = (&self.wake).read(&mut drained);
    }
}
