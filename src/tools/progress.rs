//! Progress a running tool reports: a `command` tool writes JSON lines
//! (`{"progress": 2, "total": 5, "message": "..."}`) on the descriptor named
//! by `$PROGRESS_FD`, and this process keeps the last few reports per call on
//! one board, which MCP reads to tell the client as they come
//! (`notifications/progress`, a task's `statusMessage`).
//!
//! The board is this process's memory: it is bounded (past its size the call
//! with the oldest report goes). The runner stores each call's last report
//! with the call when it extends the lease (`CallStore::extend_reporting`),
//! so other processes see it a little later; this file writes nothing. A
//! line that is not a progress report is ignored; nothing here can fail a
//! call.

use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// The most calls whose progress is kept at once.
const MAX_CALLS: usize = 10_000;
/// The most reports kept per call (a reader that polls sees each of them).
const MAX_REPORTS: usize = 16;
/// The longest message kept, in bytes.
const MAX_MESSAGE: usize = 512;

/// One report.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    pub progress: f64,
    pub total: Option<f64>,
    pub message: Option<String>,
    /// Grows with every report in this process: a reader tells a new one.
    pub seq: u64,
    /// Wall-clock seconds when it was reported.
    pub at: f64,
}

/// The last reports of each call that reported in this process.
#[derive(Default)]
pub struct ProgressBoard {
    latest: Mutex<HashMap<String, VecDeque<Progress>>>,
    seq: AtomicU64,
}

/// The process's board.
pub fn board() -> &'static ProgressBoard {
    static BOARD: OnceLock<ProgressBoard> = OnceLock::new();
    BOARD.get_or_init(ProgressBoard::default)
}

impl ProgressBoard {
    /// Record a line a tool of `call_id` wrote, if it is a report.
    pub fn report_line(&self, call_id: &str, line: &[u8]) {
        let Some((progress, total, message)) = parse_line(line) else {
            return;
        };
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let mut latest = self.latest.lock().unwrap_or_else(|p| p.into_inner());
        if latest.len() >= MAX_CALLS && !latest.contains_key(call_id) {
            let oldest = latest
                .iter()
                .min_by_key(|(_, reports)| reports.back().map_or(0, |r| r.seq))
                .map(|(id, _)| id.clone());
            if let Some(oldest) = oldest {
                latest.remove(&oldest);
            }
        }
        let reports = latest.entry(call_id.to_string()).or_default();
        if reports.len() == MAX_REPORTS {
            reports.pop_front();
        }
        let at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        reports.push_back(Progress {
            progress,
            total,
            message,
            seq,
            at,
        });
    }

    /// Drop the reports of `call_id` (a new attempt starts afresh).
    pub fn forget(&self, call_id: &str) {
        if self.seq.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut latest = self.latest.lock().unwrap_or_else(|p| p.into_inner());
        latest.remove(call_id);
    }

    /// The last report of `call_id`. Without a lock while nothing in this
    /// process has ever reported (every call answered by a busy REST
    /// process that runs no reporting tool).
    pub fn latest(&self, call_id: &str) -> Option<Progress> {
        if self.seq.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let latest = self.latest.lock().unwrap_or_else(|p| p.into_inner());
        latest
            .get(call_id)
            .and_then(|reports| reports.back().cloned())
    }

    /// The reports of `call_id` after `seq`, oldest first.
    pub fn since(&self, call_id: &str, seq: u64) -> Vec<Progress> {
        if self.seq.load(Ordering::Relaxed) == 0 {
            return Vec::new();
        }
        let latest = self.latest.lock().unwrap_or_else(|p| p.into_inner());
        let reports = latest.get(call_id).into_iter().flatten();
        reports.filter(|r| r.seq > seq).cloned().collect()
    }
}

/// `{"progress": number, "total"?: number, "message"?: string}`.
fn parse_line(line: &[u8]) -> Option<(f64, Option<f64>, Option<String>)> {
    let value: Value = serde_json::from_slice(line).ok()?;
    let progress = value.get("progress")?.as_f64()?;
    let total = value.get("total").and_then(Value::as_f64);
    let message = value.get("message").and_then(Value::as_str).map(|m| {
        let mut end = m.len().min(MAX_MESSAGE);
        while !m.is_char_boundary(end) {
            end -= 1;
        }
        m[..end].to_string()
    });
    Some((progress, total, message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_are_kept_per_call_and_read_since_a_point() {
        let board = ProgressBoard::default();
        board.report_line("c1", br#"{"progress": 1, "total": 3, "message": "one"}"#);
        board.report_line("c1", b"not json");
        board.report_line("c1", br#"{"total": 3}"#);
        let first = board.latest("c1").unwrap();
        assert_eq!((first.progress, first.total), (1.0, Some(3.0)));
        assert_eq!(first.message.as_deref(), Some("one"));
        board.report_line("c1", br#"{"progress": 2}"#);
        let second = board.latest("c1").unwrap();
        assert!(second.seq > first.seq && second.total.is_none());
        assert_eq!(board.since("c1", first.seq), vec![second]);
        assert!(board.latest("c2").is_none());
    }
}
