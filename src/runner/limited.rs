//! `LimitedTools`: the tools whose limits the database holds for every
//! process (`CallStore::limits_in_database`: on PostgreSQL a
//! `max_concurrency` or a `rate`, on SQLite a `rate`), and how the runner
//! treats their calls. Such a call is never created claimed, never queued
//! for a worker's own claim: it is created `pending` and claimed only by the
//! poll, through `CallStore::claim_limited`, which counts and spends the
//! limit in the same transaction — one door, so no path can pass the limit.
//! A call waiting for a slot or a token stays `pending`, answered as such,
//! never failed.
//!
//! To keep that door from costing latency, a new limited call asks for a
//! poll at once (one ring of the doorbell however many ask before it runs),
//! a rate that held calls back schedules a poll for its next token, and
//! whatever a claim left waiting makes the next completion poll again. What
//! each claim found goes to the metrics: how long each claimed call waited,
//! and which limit held calls back.
//!
//! It decides nothing about who runs a call (the store's claim does) and
//! never touches the store itself: `Dispatch` claims, this keeps the books.

use crate::lock::lock;
use crate::metrics::{Metrics, WaitedOn};
use crate::store::{Limit, LimitedClaim, ToolLimit};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub(super) struct LimitedTools {
    tools: HashSet<String>,
    /// A poll was asked for and has not started yet: later asks need no ring.
    poll_wanted: AtomicBool,
    /// When a tool held back by its rate has a token again: poll then.
    poll_at: Mutex<Option<Instant>>,
}

/// What one poll may claim, split between the two claims it makes.
pub(super) struct Split {
    /// For `claim_due_within`: the capped tools' free slots, and every
    /// limited tool at zero, so that claim never takes one.
    pub(super) others: Vec<(String, usize)>,
    /// For `claim_limited`: each limited tool with its free slots (a capped
    /// one) or every reserved worker.
    pub(super) limited: Vec<(String, usize)>,
}

impl LimitedTools {
    /// The tools of `limits`, their metric series made at zero.
    pub(super) fn new(limits: &[ToolLimit], metrics: &Metrics) -> LimitedTools {
        for limit in limits {
            if limit.max_concurrency.is_some() {
                metrics.declare_limit(&limit.tool, WaitedOn::Concurrency);
            }
            if limit.rate.is_some() {
                metrics.declare_limit(&limit.tool, WaitedOn::Rate);
            }
        }
        LimitedTools {
            tools: limits.iter().map(|l| l.tool.clone()).collect(),
            poll_wanted: AtomicBool::new(false),
            poll_at: Mutex::new(None),
        }
    }

    /// Whether `tool`'s calls are claimed by `claim_limited` alone.
    pub(super) fn holds(&self, tool: &str) -> bool {
        self.tools.contains(tool)
    }

    /// Ask for a poll; `true` when the doorbell must ring (no poll asked
    /// for is pending).
    pub(super) fn want_poll(&self) -> bool {
        !self.tools.is_empty() && !self.poll_wanted.swap(true, Ordering::SeqCst)
    }

    /// A poll starts: it answers every ask made so far.
    pub(super) fn poll_started(&self) {
        self.poll_wanted.store(false, Ordering::SeqCst);
    }

    /// How long until a scheduled poll is due (zero: now); `None` if none is.
    pub(super) fn poll_due_in(&self) -> Option<Duration> {
        let at = (*lock(&self.poll_at))?;
        Some(at.saturating_duration_since(Instant::now()))
    }

    /// Take the scheduled poll if it is due.
    pub(super) fn take_due_poll(&self) -> bool {
        let mut at = lock(&self.poll_at);
        match *at {
            Some(when) if when <= Instant::now() => {
                *at = None;
                true
            }
            _ => false,
        }
    }

    /// Split a poll's reserved slots (`reserved`: the capped tools') and
    /// `workers` between the two claims.
    pub(super) fn split(&self, reserved: &[(String, usize)], workers: usize) -> Split {
        let mut others: Vec<(String, usize)> = reserved
            .iter()
            .map(|(tool, free)| (tool.clone(), if self.holds(tool) { 0 } else { *free }))
            .collect();
        let mut limited = Vec::new();
        for tool in &self.tools {
            match reserved.iter().find(|(t, _)| t == tool) {
                Some((_, free)) => limited.push((tool.clone(), *free)),
                None => {
                    others.push((tool.clone(), 0));
                    limited.push((tool.clone(), workers));
                }
            }
        }
        Split { others, limited }
    }

    /// Keep the books of a claim: its waits and deferrals in the metrics, a
    /// poll scheduled for the next token of a tool its rate held back.
    pub(super) fn record(&self, claim: &LimitedClaim, metrics: &Metrics) {
        for (lease, (waited, limit)) in claim.leases.iter().zip(&claim.waited) {
            metrics.observe_limit_wait(&lease.tool, waited_on(*limit), *waited);
        }
        for (tool, limit) in &claim.held_back {
            metrics.count_limit_deferral(tool, waited_on(*limit));
        }
        if let Some(next) = claim.next_token_in {
            let when = Instant::now() + next;
            let mut at = lock(&self.poll_at);
            *at = Some(at.map_or(when, |earlier| earlier.min(when)));
        }
    }
}

fn waited_on(limit: Limit) -> WaitedOn {
    match limit {
        Limit::Concurrency => WaitedOn::Concurrency,
        Limit::Rate => WaitedOn::Rate,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Rate;

    fn tools() -> LimitedTools {
        let limit = |tool: &str, cap, rate| ToolLimit {
            tool: tool.into(),
            max_concurrency: cap,
            rate,
        };
        let rate = Rate {
            per_second: 5.0,
            burst: 1,
        };
        let limits = [
            limit("capped", Some(2), None),
            limit("rated", None, Some(rate)),
        ];
        LimitedTools::new(&limits, &Metrics::new())
    }

    /// The poll's other claim never takes a limited tool; the limited claim
    /// gets a capped tool's reserved slots, an uncapped one every worker.
    #[test]
    fn a_poll_is_split_so_only_the_limited_claim_takes_limited_tools() {
        let reserved = [("capped".to_string(), 1), ("local".to_string(), 3)];
        let mut split = tools().split(&reserved, 6);
        split.others.sort();
        split.limited.sort();
        let pairs = |v: &[(&str, usize)]| -> Vec<(String, usize)> {
            v.iter().map(|(t, n)| (t.to_string(), *n)).collect()
        };
        assert_eq!(
            split.others,
            pairs(&[("capped", 0), ("local", 3), ("rated", 0)])
        );
        assert_eq!(split.limited, pairs(&[("capped", 1), ("rated", 6)]));
    }

    /// Asks before a poll starts ring once; a scheduled poll is taken once,
    /// when due.
    #[test]
    fn asks_for_a_poll_ring_once_until_it_starts() {
        let limited = tools();
        assert!(limited.want_poll());
        assert!(!limited.want_poll(), "already asked for");
        limited.poll_started();
        assert!(limited.want_poll());
        assert_eq!(limited.poll_due_in(), None);
        let claim = LimitedClaim {
            next_token_in: Some(Duration::ZERO),
            ..LimitedClaim::default()
        };
        limited.record(&claim, &Metrics::new());
        assert_eq!(limited.poll_due_in(), Some(Duration::ZERO));
        assert!(limited.take_due_poll());
        assert!(!limited.take_due_poll(), "taken once");
    }
}
