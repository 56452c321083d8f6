//! Signals to a test server's processes: freeze it (`SIGSTOP`, as a hung
//! host looks to a client) and thaw it, or kill it at once (a primary that
//! dies with its machine). PostgreSQL's children each call `setsid()`, so no
//! process group holds them: they are found by their parent's pid.
//!
//! It never signals a process that is not the test server's postmaster or
//! one of its children.

use super::{PgServer, PgServerError};
use nix::sys::signal::Signal;
use std::io;
use std::time::{Duration, Instant};

impl PgServer {
    /// The postmaster's pid, from `postmaster.pid` (`None`: not running).
    pub fn postmaster_pid(&self) -> Option<i32> {
        let file = std::fs::read_to_string(self.data().join("postmaster.pid")).ok()?;
        file.lines().next()?.trim().parse().ok()
    }

    /// Send `SIGSTOP` or `SIGCONT` to every process of the server: the
    /// postmaster and its children (each child calls `setsid()`, so no
    /// process group holds them all). A stop reaches the postmaster first,
    /// so it forks nothing more, and returns once every process is stopped;
    /// a continue reaches the children first.
    pub(super) fn signal_all(&self, signal: Signal) -> Result<(), PgServerError> {
        let postmaster = self.postmaster_pid().ok_or_else(|| PgServerError::Io {
            doing: format!("signal {signal}"),
            source: io::Error::other("the server is not running"),
        })?;
        let send = |pid: i32| nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
        let stopping = signal == Signal::SIGSTOP;
        if !stopping {
            children_of(postmaster).into_iter().for_each(|c| {
                let _ = send(c);
            });
        }
        send(postmaster).map_err(|e| PgServerError::Io {
            doing: format!("signal {signal} to the postmaster"),
            source: io::Error::from(e),
        })?;
        if !stopping {
            return Ok(());
        }
        let mut all = children_of(postmaster);
        all.iter().for_each(|c| {
            let _ = send(*c);
        });
        all.push(postmaster);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !all.iter().all(|pid| is_stopped(*pid)) {
            if Instant::now() > deadline {
                return Err(PgServerError::Io {
                    doing: "wait for the server's processes to stop".into(),
                    source: io::Error::from(io::ErrorKind::TimedOut),
                });
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        Ok(())
    }

    /// Stop every process of the server (`SIGSTOP`), as a hung host or a
    /// disk that stopped answering looks to a client: the kernel still
    /// accepts connections and acknowledges what is sent, nothing answers.
    /// The server runs again when the guard is dropped (`SIGCONT`), so a
    /// failing test never leaves it stopped; the reaper and `Drop` resume
    /// it too.
    pub fn freeze(&self) -> Result<Frozen<'_>, PgServerError> {
        self.signal_all(Signal::SIGSTOP)?;
        Ok(Frozen { server: self })
    }

    /// `kill -9` of every process of the server at once: a primary that
    /// dies with its machine. Its data stays for `Drop` to remove. Frozen
    /// first, so no child is forked, or orphaned out of sight, meanwhile.
    pub fn kill_all(&self) -> Result<(), PgServerError> {
        let postmaster = self.postmaster_pid();
        self.signal_all(Signal::SIGSTOP)?;
        if let Some(postmaster) = postmaster {
            for pid in children_of(postmaster).into_iter().chain([postmaster]) {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
            if Instant::now() > deadline {
                return Err(PgServerError::Io {
                    doing: "wait for the killed server's port to close".into(),
                    source: io::Error::from(io::ErrorKind::TimedOut),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = std::fs::remove_file(self.data().join("postmaster.pid"));
        Ok(())
    }
}

/// A server stopped by `PgServer::freeze`; dropping it (or `thaw`) lets every
/// process of the server run again.
pub struct Frozen<'a> {
    server: &'a PgServer,
}

impl Frozen<'_> {
    /// Let the server run again now.
    pub fn thaw(self) {}
}

impl Drop for Frozen<'_> {
    fn drop(&mut self) {
        let _ = self.server.signal_all(Signal::SIGCONT);
    }
}

/// The pids whose parent is `parent`, from `/proc`.
fn children_of(parent: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| stat_field(*pid, 1).and_then(|p| p.parse().ok()) == Some(parent))
        .collect()
}

/// Whether `pid` is stopped (state `T`), or gone.
/// Stopped, gone, or a zombie: a child that exited while its stopped
/// parent could not reap it (a backend whose client hung up) runs no more.
fn is_stopped(pid: i32) -> bool {
    stat_field(pid, 0).is_none_or(|state| state == "T" || state == "Z")
}

/// Field `n` after the command name in `/proc/PID/stat` (0: the state,
/// 1: the parent's pid).
fn stat_field(pid: i32, n: usize) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = stat.rsplit_once(')')?.1;
    after_name.split_whitespace().nth(n).map(str::to_string)
}
