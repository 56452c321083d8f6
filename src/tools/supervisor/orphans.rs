//! Supervisors left by a service that died (`kill -9`, a crash): each is
//! stopping its tool (SIGTERM, then SIGKILL after `TERM_GRACE`) and ends
//! once every process of it is reaped. A service starting on this host
//! waits for them (`wait_for_orphans`) before it takes any call back, so
//! the attempt it runs next never runs beside a live one of the dead
//! process. Found by their command line, `… __supervise PARENT …`, whose
//! `PARENT` no longer exists.
//!
//! It never signals anything: it only reads `/proc` and waits.

use super::SUBCOMMAND;
use std::time::{Duration, Instant};

/// Longer than any supervisor takes once its service is gone: the tool's
/// grace, the kill rounds, and room for a loaded machine.
pub(crate) const ORPHANS_WAIT: Duration = Duration::from_secs(5);

/// How often to look again.
const LOOK_EVERY: Duration = Duration::from_millis(20);

/// Wait until no supervisor of a dead service is left on this host, or
/// `ORPHANS_WAIT` has passed. Returns how many there were at first, and
/// how many are left.
pub(crate) fn wait_for_orphans() -> (usize, usize) {
    let deadline = Instant::now() + ORPHANS_WAIT;
    let first = orphans();
    let mut left = first;
    while left > 0 && Instant::now() < deadline {
        std::thread::sleep(LOOK_EVERY);
        left = orphans();
    }
    (first, left)
}

/// How many supervisors whose service is gone are alive now.
fn orphans() -> usize {
    let Ok(processes) = std::fs::read_dir("/proc") else {
        return 0;
    };
    processes
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter_map(|entry| std::fs::read(entry.path().join("cmdline")).ok())
        .filter_map(|cmdline| supervised_for(&cmdline))
        .filter(|parent| !std::path::Path::new(&format!("/proc/{parent}")).exists())
        .count()
}

/// The service pid a supervisor's command line names, if it is one.
fn supervised_for(cmdline: &[u8]) -> Option<u32> {
    let mut words = cmdline.split(|b| *b == 0).skip(1);
    if words.next()? != SUBCOMMAND.as_bytes() {
        return None;
    }
    std::str::from_utf8(words.next()?).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_supervisors_command_line_names_a_service() {
        let line = |words: &[&str]| words.join("\0").into_bytes();
        assert_eq!(
            supervised_for(&line(&["x", SUBCOMMAND, "4242", "/bin/sh", ""])),
            Some(4242)
        );
        assert_eq!(supervised_for(&line(&["x", "serve", "4242"])), None);
        assert_eq!(supervised_for(&line(&["x", SUBCOMMAND, "me"])), None);
        assert_eq!(supervised_for(&line(&["x"])), None);
        assert_eq!(supervised_for(b""), None);
    }
}
