//! What `/proc` says about a running server: its memory, its threads and its
//! open files. Linux only, like the resource bounds these readings check.

use std::path::Path;

/// A `kB` field of `/proc/PID/status` (`VmRSS`, `VmHWM`), in KiB.
pub fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// How many threads the process has now.
pub fn thread_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("read task")
        .count()
}

/// How many threads the process has now, less the store's read threads
/// (`store-reader-N`): those start when reads first need them and are kept,
/// so they are not what a test of a request's own thread counts.
pub fn threads_but_the_read_pool(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("read task")
        .flatten()
        .filter(|task| {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            !comm.starts_with("store-reader-")
        })
        .count()
}

/// How many of the process's descriptors are open on `db` or its `-wal`
/// (each SQLite connection holds both; the `-shm` is shared, so not counted).
pub fn database_descriptors(pid: u32, db: &Path) -> usize {
    let wal = format!("{}-wal", db.display());
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("read fd")
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter(|target| target == db || target.as_os_str() == wal.as_str())
        .count()
}

/// The futex syscall's number: a thread blocked in it is waiting on a lock
/// or condition variable (a `?wait` request), not reading its socket.
#[cfg(target_arch = "x86_64")]
const SYS_FUTEX: &str = "202";
#[cfg(target_arch = "aarch64")]
const SYS_FUTEX: &str = "98";

/// The server's connection threads (named `conn-N`), and how many of them
/// are blocked on a condition variable: their request has been read and is
/// waiting for its call.
pub fn connection_threads(pid: u32) -> (usize, usize) {
    let (mut all, mut waiting) = (0, 0);
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("read task");
    for task in tasks.flatten() {
        let read = |file: &str| std::fs::read_to_string(task.path().join(file)).unwrap_or_default();
        if read("comm").starts_with("conn-") {
            all += 1;
            if read("syscall").split_whitespace().next() == Some(SYS_FUTEX) {
                waiting += 1;
            }
        }
    }
    (all, waiting)
}

/// Whether every thread of `pid` is stopped: `SIGSTOP` is delivered
/// asynchronously, and a thread still running could take the lock after the
/// probe looked.
pub fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|task| {
        std::fs::read_to_string(task.path().join("stat"))
            .ok()
            .and_then(|stat| Some(stat.rsplit_once(')')?.1.trim_start().starts_with('T')))
            .unwrap_or(false)
    })
}

/// The names of the process's threads in uninterruptible sleep (`D`) now:
/// blocked in the kernel, as on a file system that stopped answering, where
/// no signal or timeout wakes them.
pub fn threads_blocked_in_the_kernel(pid: u32) -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| {
            let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
            let (name, rest) = stat.split_once(" (")?.1.rsplit_once(')')?;
            rest.trim_start().starts_with('D').then(|| name.to_string())
        })
        .collect()
}
