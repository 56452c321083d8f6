//! What a supervisor tells the service about its attempt, one line each on
//! the socket that is its stdin: `started PID` once the tool runs,
//! `spawn-failed ERRNO` if it could not start, and as its last line how
//! the tool ended: `exited CODE KILLED` or `signalled SIGNAL KILLED`, where
//! `KILLED` (`0`/`1`) says whether a stop's grace ran out and the group
//! got SIGKILL. Both ends use this file, so the words have one spelling.
//!
//! It never carries output, argv or environment: those stay in the pipes
//! and the tool's own process.

use std::fmt;

/// One line of the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::tools) enum Report {
    /// The tool runs as `pid`, which leads its own process group.
    Started { pid: i32 },
    /// The tool could not be started: `errno` from its `execve` or `fork`.
    SpawnFailed { errno: i32 },
    /// The tool exited with `code`.
    Exited { code: i32, killed: bool },
    /// The tool was killed by `signal`.
    Signalled { signal: i32, killed: bool },
}

impl Report {
    /// Whether this is the last line a supervisor writes.
    pub(in crate::tools) fn is_final(&self) -> bool {
        !matches!(self, Report::Started { .. })
    }

    /// One line, as the supervisor writes it; `None` for anything else (a
    /// line this version does not know is not guessed at).
    pub(in crate::tools) fn parse(line: &str) -> Option<Report> {
        let mut words = line.split_ascii_whitespace();
        let (word, number) = (words.next()?, words.next()?.parse().ok()?);
        let killed = match words.next() {
            None => None,
            Some("0") => Some(false),
            Some("1") => Some(true),
            Some(_) => return None,
        };
        if words.next().is_some() {
            return None;
        }
        match (word, killed) {
            ("started", None) => Some(Report::Started { pid: number }),
            ("spawn-failed", None) => Some(Report::SpawnFailed { errno: number }),
            ("exited", Some(killed)) => Some(Report::Exited {
                code: number,
                killed,
            }),
            ("signalled", Some(killed)) => Some(Report::Signalled {
                signal: number,
                killed,
            }),
            _ => None,
        }
    }
}

/// The line, without its newline.
impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Report::Started { pid } => write!(f, "started {pid}"),
            Report::SpawnFailed { errno } => write!(f, "spawn-failed {errno}"),
            Report::Exited { code, killed } => write!(f, "exited {code} {}", u8::from(killed)),
            Report::Signalled { signal, killed } => {
                write!(f, "signalled {signal} {}", u8::from(killed))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every report reads back as itself; a line of anything else is none.
    #[test]
    fn every_report_reads_back_and_nothing_else_does() {
        let reports = [
            Report::Started { pid: 4242 },
            Report::SpawnFailed { errno: 2 },
            Report::Exited {
                code: 75,
                killed: false,
            },
            Report::Signalled {
                signal: 9,
                killed: true,
            },
        ];
        for report in reports {
            assert_eq!(Report::parse(&report.to_string()), Some(report));
        }
        for line in [
            "",
            "started",
            "started x",
            "started 1 0",
            "exited 0",
            "exited 0 2",
            "exited 0 1 more",
            "finished 0 0",
        ] {
            assert_eq!(Report::parse(line), None, "{line:?}");
        }
        assert!(!reports[0].is_final());
        assert!(reports[1..].iter().all(Report::is_final));
    }
}
