//! A `command` attempt's processes as the service sees them: how they are
//! started, told to stop, and waited for. Two ways, one interface
//! ([`Handle`], [`wait`]):
//!
//! - **supervised** (the service binary names a supervisor, see
//!   `supervisor`): the tool runs under `PROGRAM __supervise`, which owns
//!   its process group, escalates a stop from SIGTERM to SIGKILL itself,
//!   kills whatever the tool leaves behind, and reports on a socket (also
//!   the supervisor's stdin, where the call's JSON goes) how the tool
//!   ended; if the service dies, the supervisor stops the tool;
//! - **direct** (a process that names no supervisor: a test binary, a
//!   library user): the tool leads its own group, and the service
//!   signals the group and escalates itself. Nothing stops the tool if the
//!   service dies.
//!
//! It never waits without a bound the caller chose, and never signals a
//! group after its tool's end has been reported (its ids may be reused).

use super::command_tool::TERM_GRACE;
use super::supervisor::report::Report;
use super::supervisor::{self, SUBCOMMAND};
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::Shutdown;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::time::Duration;

/// How much longer than `TERM_GRACE` a supervisor may take to report a
/// stopped tool: its kill rounds (2 s at most) and room for a loaded host.
const SUPERVISOR_SLACK: Duration = Duration::from_secs(5);

/// The longest report a supervisor writes is a few dozen bytes.
const REPORT_CAP: u64 = 4096;

/// A started attempt: its pipes, how to signal it, and what `wait` needs.
pub(super) struct Started {
    pub(super) input: Input,
    pub(super) stdout: Option<ChildStdout>,
    pub(super) stderr: Option<ChildStderr>,
    pub(super) handle: Handle,
    pub(super) waiting: Waiting,
}

/// Where the call's JSON goes.
pub(super) enum Input {
    /// The tool's stdin, closed after the body.
    Pipe(Option<ChildStdin>),
    /// The supervisor's socket, shut for writing after the body (the
    /// supervisor relays it to the tool's stdin).
    Socket(UnixStream),
}

impl Input {
    /// Write `body` and end the input; a reader that went away is the
    /// command's business.
    pub(super) fn feed(self, body: &[u8]) {
        match self {
            Input::Pipe(Some(mut stdin)) => {
                let _ = stdin.write_all(body);
            }
            Input::Pipe(None) => {}
            Input::Socket(mut socket) => {
                let _ = socket.write_all(body);
                let _ = socket.shutdown(Shutdown::Write);
            }
        }
    }
}

/// How the attempt is signalled; cheap to copy into a halt.
#[derive(Debug, Clone, Copy)]
pub(super) enum Handle {
    /// The tool leads the group `group`.
    Direct { group: Pid },
    /// The supervisor `supervisor` owns the tool.
    Supervised { supervisor: Pid },
}

impl Handle {
    /// SIGTERM to the tool's group: at once, or through its supervisor
    /// (which sends SIGKILL after `TERM_GRACE` itself).
    pub(super) fn terminate(self) {
        let _ = match self {
            Handle::Direct { group } => killpg(group, Signal::SIGTERM),
            Handle::Supervised { supervisor } => kill(supervisor, Signal::SIGTERM),
        };
    }

    /// SIGKILL to the tool's group and whatever it left behind, now.
    pub(super) fn kill(self) {
        let _ = match self {
            Handle::Direct { group } => killpg(group, Signal::SIGKILL),
            // The supervisor's "kill now".
            Handle::Supervised { supervisor } => kill(supervisor, Signal::SIGUSR1),
        };
    }

    /// How long after `terminate` the end may take before `give_up`.
    pub(super) fn stop_takes(self) -> Duration {
        match self {
            Handle::Direct { .. } => TERM_GRACE,
            Handle::Supervised { .. } => TERM_GRACE + SUPERVISOR_SLACK,
        }
    }

    /// The end did not come: SIGKILL the group, or the supervisor that
    /// did not answer (the wait then kills the tool's group itself).
    pub(super) fn give_up(self) {
        let _ = match self {
            Handle::Direct { group } => killpg(group, Signal::SIGKILL),
            Handle::Supervised { supervisor } => kill(supervisor, Signal::SIGKILL),
        };
    }

    /// The tool has ended: kill what it left running in its group, unless a
    /// supervisor already did.
    pub(super) fn after_exit(self) {
        if let Handle::Direct { group } = self {
            let _ = killpg(group, Signal::SIGKILL);
        }
    }
}

/// How an attempt's end is learnt: the child's wait, and for a supervised
/// one its report first.
pub(super) struct Waiting {
    child: Child,
    reports: Option<UnixStream>,
}

/// How the tool ended.
pub(super) enum End {
    /// Its exit status; `killed`: a supervisor's stop ran out of grace.
    Exited { status: ExitStatus, killed: bool },
    /// It never started (the supervisor could not start it).
    NotStarted(io::Error),
    /// Its end cannot be known (should not happen).
    Lost(io::Error),
}

/// Start `program` `args` with `env`: under the supervisor this process
/// names, or directly.
pub(super) fn start<'e>(
    program: &Path,
    args: &[String],
    env: impl Iterator<Item = (&'e str, &'e str)>,
) -> io::Result<Started> {
    let supervisor = supervisor::program();
    let mut command = match supervisor {
        Some(supervisor) => {
            let mut command = Command::new(supervisor);
            command
                .arg0(crate::cli::PROGRAM)
                .arg(SUBCOMMAND)
                .arg(std::process::id().to_string())
                .arg(program);
            command
        }
        None => Command::new(program),
    };
    command
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group: no terminal's signal reaches it, and a stop
        // reaches everything the command started.
        .process_group(0);
    for (name, value) in env {
        command.env(name, value);
    }
    let reports = match supervisor {
        Some(_) => {
            let (ours, theirs) = UnixStream::pair()?;
            command.stdin(Stdio::from(OwnedFd::from(theirs)));
            Some(ours)
        }
        None => {
            command.stdin(Stdio::piped());
            None
        }
    };
    let mut child = command.spawn()?;
    let pid = Pid::from_raw(child.id() as i32);
    let (handle, input) = match &reports {
        Some(socket) => (
            Handle::Supervised { supervisor: pid },
            Input::Socket(socket.try_clone()?),
        ),
        None => (
            Handle::Direct { group: pid },
            Input::Pipe(child.stdin.take()),
        ),
    };
    Ok(Started {
        input,
        stdout: child.stdout.take(),
        stderr: child.stderr.take(),
        handle,
        waiting: Waiting { child, reports },
    })
}

/// Wait for the attempt's end: a direct child's exit, or a supervisor's
/// final report. Blocks; run it on a thread of its own.
pub(super) fn wait(waiting: Waiting) -> End {
    let Waiting { mut child, reports } = waiting;
    let Some(reports) = reports else {
        return match child.wait() {
            Ok(status) => End::Exited {
                status,
                killed: false,
            },
            Err(e) => End::Lost(e),
        };
    };
    let (tool, last) = read_reports(reports);
    let supervisor = child.wait();
    match last {
        Some(Report::Exited { code, killed }) => End::Exited {
            status: ExitStatus::from_raw((code & 0xff) << 8),
            killed,
        },
        Some(Report::Signalled { signal, killed }) => End::Exited {
            status: ExitStatus::from_raw(signal & 0x7f),
            killed,
        },
        Some(Report::SpawnFailed { errno }) => End::NotStarted(io::Error::from_raw_os_error(errno)),
        Some(Report::Started { .. }) | None => {
            // The supervisor is gone without a word: what it started
            // must not outlive it.
            if let Some(tool) = tool {
                let _ = killpg(Pid::from_raw(tool), Signal::SIGKILL);
            }
            let how = match supervisor {
                Ok(status) => status.to_string(),
                Err(e) => e.to_string(),
            };
            End::Lost(io::Error::other(format!(
                "its supervisor ended without a report ({how})"
            )))
        }
    }
}

/// Until the supervisor closes the socket: the tool's pid, if it started,
/// and the last final report.
fn read_reports(reports: UnixStream) -> (Option<i32>, Option<Report>) {
    let (mut tool, mut last) = (None, None);
    for line in BufReader::new(reports.take(REPORT_CAP)).lines() {
        let Ok(line) = line else { break };
        match Report::parse(&line) {
            Some(Report::Started { pid }) => tool = Some(pid),
            Some(report) if report.is_final() => last = Some(report),
            _ => {}
        }
    }
    (tool, last)
}
