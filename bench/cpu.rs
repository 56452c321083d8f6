//! What the server spends: its CPU time (user + system) and its threads'
//! context switches over a stretch of a run, read before and after. On this
//! shared 2-core box the rates swing with whoever else is running; the CPU a
//! request costs the server moves far less, so it is the figure a change is
//! judged by (docs/performance.md).
//!
//! Two ways to read a server. One in this process (the bench's default):
//! `getrusage` of the whole process — which keeps the time of threads that
//! have ended, such as a closed connection's — less the bench's own threads:
//! each client thread reads its own use when it ends (`this_thread`, summed
//! into `LoadResult::cpu`), and the main thread's is read around the window.
//! A server in its own process (`--server-bin`, or `--base` with
//! `--server-pid`): `/proc/PID/stat` for the process's time (clock ticks, so
//! a run of seconds is needed) and each live thread's `status` for its
//! switches; a thread that ends takes its switches along, so the bench keeps
//! its connections open until it has read them (`Load::hold_open`).
//!
//! It only reads; it never judges a figure.

use nix::sys::resource::{getrusage, Usage, UsageWho};
use std::collections::HashMap;
use std::ops::{Add, Sub};

/// CPU time and context switches, as a running total or a difference of two.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuUse {
    /// User + system time, in microseconds.
    pub micros: u64,
    /// Switches because the thread waited (a lock, a channel, a socket, a sync).
    pub voluntary: u64,
    /// Switches because the scheduler took the CPU away.
    pub involuntary: u64,
}

impl CpuUse {
    pub fn switches(self) -> u64 {
        self.voluntary + self.involuntary
    }

    /// Microseconds per `n` of something (0 if none).
    pub fn micros_per(self, n: u64) -> f64 {
        self.micros as f64 / n.max(1) as f64
    }

    /// Context switches per `n` of something.
    pub fn switches_per(self, n: u64) -> f64 {
        self.switches() as f64 / n.max(1) as f64
    }

    fn from_usage(u: Usage) -> CpuUse {
        let micros = |t: nix::sys::time::TimeVal| {
            (t.tv_sec().max(0) as u64) * 1_000_000 + t.tv_usec().max(0) as u64
        };
        CpuUse {
            micros: micros(u.user_time()) + micros(u.system_time()),
            voluntary: u.voluntary_context_switches().max(0) as u64,
            involuntary: u.involuntary_context_switches().max(0) as u64,
        }
    }
}

impl Add for CpuUse {
    type Output = CpuUse;
    fn add(self, o: CpuUse) -> CpuUse {
        CpuUse {
            micros: self.micros + o.micros,
            voluntary: self.voluntary + o.voluntary,
            involuntary: self.involuntary + o.involuntary,
        }
    }
}

impl Sub for CpuUse {
    type Output = CpuUse;
    /// Saturating: two readings a tick apart may disagree by a tick.
    fn sub(self, o: CpuUse) -> CpuUse {
        CpuUse {
            micros: self.micros.saturating_sub(o.micros),
            voluntary: self.voluntary.saturating_sub(o.voluntary),
            involuntary: self.involuntary.saturating_sub(o.involuntary),
        }
    }
}

/// The calling thread's use since it started (zero if the kernel says nothing).
pub fn this_thread() -> CpuUse {
    getrusage(UsageWho::RUSAGE_THREAD)
        .map(CpuUse::from_usage)
        .unwrap_or_default()
}

/// This process's use, every thread together, ended ones included.
fn this_process() -> CpuUse {
    getrusage(UsageWho::RUSAGE_SELF)
        .map(CpuUse::from_usage)
        .unwrap_or_default()
}

/// Clock ticks per second in `/proc/PID/stat` (`USER_HZ`): 100 on every
/// Linux architecture this runs on.
const TICKS_PER_SECOND: u64 = 100;

/// Another process's time (`utime + stime` of `/proc/PID/stat`: every
/// thread, ended ones included) and each live thread's switches, by id.
struct ProcessReading {
    micros: u64,
    switches: HashMap<u32, (u64, u64)>,
}

impl ProcessReading {
    fn of(pid: u32) -> Option<ProcessReading> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name, in parentheses, may hold spaces: count from after it.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        // utime and stime are fields 14 and 15; field 3 (the state) is fields[0].
        let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        let mut switches = HashMap::new();
        for task in std::fs::read_dir(format!("/proc/{pid}/task"))
            .ok()?
            .flatten()
        {
            let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else {
                continue;
            };
            let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
            let field = |name: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .and_then(|rest| rest.trim().parse::<u64>().ok())
                    .unwrap_or(0)
            };
            let counts = (
                field("voluntary_ctxt_switches:"),
                field("nonvoluntary_ctxt_switches:"),
            );
            switches.insert(tid, counts);
        }
        Some(ProcessReading {
            micros: ticks * 1_000_000 / TICKS_PER_SECOND,
            switches,
        })
    }

    /// The use from `start` to this reading. A thread born since counts
    /// whole; one that ended since counts none of its switches (another
    /// process cannot read an ended thread's), which is why the bench keeps
    /// its connections open until it has read them (`Load::hold_open`).
    fn since(&self, start: &ProcessReading) -> CpuUse {
        let mut use_ = CpuUse {
            micros: self.micros.saturating_sub(start.micros),
            ..CpuUse::default()
        };
        for (tid, (voluntary, involuntary)) in &self.switches {
            let (v0, i0) = start.switches.get(tid).copied().unwrap_or((0, 0));
            use_.voluntary += voluntary.saturating_sub(v0);
            use_.involuntary += involuntary.saturating_sub(i0);
        }
        use_
    }
}

/// Where the server under load runs, for reading what it spends.
#[derive(Debug, Clone, Copy)]
pub enum Server {
    /// In this process, beside the bench's own threads.
    InProcess,
    /// In a process of its own.
    Pid(u32),
    /// A `--base` server whose pid was not given: nothing to read.
    Unknown,
}

/// The readings at the start of a window.
pub struct Window {
    server: Server,
    /// This process's use at the start (an in-process server's).
    process: CpuUse,
    /// The calling thread's use at the start.
    main: CpuUse,
    /// A server in its own process: its reading at the start.
    other: Option<ProcessReading>,
}

impl Window {
    /// Start a window on the calling thread, which must also close it.
    pub fn open(server: Server) -> Window {
        let other = match server {
            Server::Pid(pid) => ProcessReading::of(pid),
            Server::InProcess | Server::Unknown => None,
        };
        Window {
            server,
            process: this_process(),
            main: this_thread(),
            other,
        }
    }

    /// What the server spent since `open`; `bench_threads` is what the
    /// bench's client threads spent meanwhile (an in-process server's
    /// readings include them).
    pub fn close(self, bench_threads: CpuUse) -> Option<CpuUse> {
        match self.server {
            Server::InProcess => {
                let main = this_thread() - self.main;
                Some(this_process() - self.process - main - bench_threads)
            }
            Server::Pid(pid) => Some(ProcessReading::of(pid)?.since(self.other.as_ref()?)),
            Server::Unknown => None,
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    /// A thread that spins is seen spending CPU; the window over it, less
    /// that thread as the bench's own, sees almost nothing.
    #[test]
    fn a_window_less_the_bench_threads_leaves_the_rest() {
        let window = Window::open(Server::InProcess);
        // Spin until the thread itself has spent 100 ms (a busy box gives it
        // the CPU in slices), within a deadline.
        let spun = std::thread::spawn(|| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            let mut x = 0u64;
            while this_thread().micros < 100_000 && std::time::Instant::now() < deadline {
                for _ in 0..10_000 {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            }
            this_thread()
        })
        .join()
        .unwrap();
        assert!(spun.micros >= 100_000, "{spun:?}");
        let rest = window.close(spun).unwrap();
        assert!(rest.micros < 50_000, "{rest:?}");
    }
}
