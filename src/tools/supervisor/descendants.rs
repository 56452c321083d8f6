//! The supervisor's end of its tool: every process the tool started is
//! killed and reaped before the supervisor reports and exits. The tool
//! leads a process group of its own; a process that left it (`setsid`, a
//! double fork) is still a descendant, and once its parent dies it is
//! re-parented to the supervisor (a child subreaper), where the next
//! round finds it among the supervisor's children
//! (`/proc/self/task/*/children`) and kills it and its group.
//!
//! It only ever signals the tool's group and the supervisor's own
//! children, never a pid it has reaped: a pid is not reused while its
//! zombie waits to be reaped, so no other process can be hit.

use nix::errno::Errno;
use nix::sys::signal::{kill, killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::time::{Duration, Instant};

/// How long the supervisor keeps killing: a process stuck in the kernel
/// (`D` state) dies when it leaves it; past this the supervisor reports
/// without it.
const KILL_ROUNDS_FOR: Duration = Duration::from_secs(2);
/// Between rounds: time for a killed parent's children to be re-parented.
const ROUND_GAP: Duration = Duration::from_millis(5);

/// What one reaping pass found.
pub(super) struct Reaped {
    /// The tool's own status, if it ended and was reaped in this pass.
    pub(super) tool: Option<WaitStatus>,
    /// No child is left, running or not yet reaped.
    pub(super) none_left: bool,
}

/// Reap every child that has ended.
pub(super) fn reap(tool: Pid) -> Reaped {
    let mut ended = None;
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => {
                return Reaped {
                    tool: ended,
                    none_left: false,
                }
            }
            Err(Errno::EINTR) => {}
            Err(_) => {
                return Reaped {
                    tool: ended,
                    none_left: true,
                }
            }
            Ok(status) if status.pid() == Some(tool) => ended = Some(status),
            Ok(_) => {} // a re-parented descendant
        }
    }
}

/// SIGKILL the tool's group and every descendant, round after round, until
/// none is left or `KILL_ROUNDS_FOR` has passed. The tool's own status, if
/// it was reaped meanwhile.
pub(super) fn kill_all(tool: Pid) -> Option<WaitStatus> {
    let deadline = Instant::now() + KILL_ROUNDS_FOR;
    let mut ended = None;
    loop {
        let _ = killpg(tool, Signal::SIGKILL);
        let reaped = reap(tool);
        ended = reaped.tool.or(ended);
        // Most tools leave nothing: then `/proc` is never read. (Each
        // `/proc` entry the supervisor opens costs the service's reaping of
        // it more than the whole rest of the supervisor's run.)
        if reaped.none_left || Instant::now() >= deadline {
            return ended;
        }
        for child in children() {
            let _ = kill(child, Signal::SIGKILL);
            // A child that made a group of its own takes its group along.
            let _ = killpg(child, Signal::SIGKILL);
        }
        std::thread::sleep(ROUND_GAP);
    }
}

/// This process's children, from every one of its threads' lists.
fn children() -> Vec<Pid> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| {
            list.split_ascii_whitespace()
                .filter_map(|pid| pid.parse().ok())
                .map(Pid::from_raw)
                .collect::<Vec<_>>()
        })
        .collect()
}
