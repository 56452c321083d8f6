//! Limits a tool's calls share across every process on the database: what
//! they are (`ToolLimit`: a `max_concurrency` and a `rate`), which of them a
//! backend holds in the database rather than leaving to each process
//! (`ToolLimit::held_by`), and what one claim of limited tools found
//! (`LimitedClaim`). PostgreSQL holds both: a capped tool's claims lock its
//! `tool_limits` row and count its `running` calls, so no node sees another's
//! claim half done. SQLite holds the rate (a token bucket in the same table,
//! updated in the writer's transaction); its `max_concurrency` stays per
//! process (the runner's slots), as a SQLite file has one host.
//!
//! The token bucket: a tool's bucket holds up to `burst` tokens and refills
//! at `per_second`, by the database's clock; each claim of one of its calls
//! spends one. So no window of one second sees more than `burst +
//! per_second` claims of the tool, whichever processes made them.
//!
//! Plain values and arithmetic only: this file never touches the database.

use super::model::Lease;
pub use crate::rate::Rate;
use std::time::Duration;

/// A tool's limits, as its tools file gives them.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolLimit {
    pub tool: String,
    /// Most calls `running` at once (on PostgreSQL, across every node).
    pub max_concurrency: Option<usize>,
    pub rate: Option<Rate>,
}

/// Which limit held a tool's due calls back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// `max_concurrency`: as many of its calls `running` as it allows.
    Concurrency,
    /// `rate`: no token left in its bucket.
    Rate,
}

impl ToolLimit {
    /// Whether a backend that holds `concurrency` in the database (and the
    /// rate, which both do) must claim this tool's calls through
    /// `claim_limited` alone: it has a limit that backend holds.
    pub fn held_by(&self, concurrency: bool) -> bool {
        self.rate.is_some() || (concurrency && self.max_concurrency.is_some())
    }
}

/// The bucket's arithmetic: a rate adds `per_second` tokens a second, up
/// to `burst`.
impl Rate {
    /// The tokens a bucket holds `elapsed` seconds after it held `tokens`
    /// (never above the burst; a clock that stepped back adds nothing).
    pub fn refill(&self, tokens: f64, elapsed: f64) -> f64 {
        (tokens + elapsed.max(0.0) * self.per_second).min(f64::from(self.burst))
    }

    /// How long until a bucket holding `tokens` (fewer than one) has one.
    pub fn next_token_in(&self, tokens: f64) -> Duration {
        Duration::from_secs_f64(((1.0 - tokens).max(0.0) / self.per_second).min(86_400.0))
    }
}

/// What a claim of limited tools found and took.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LimitedClaim {
    pub leases: Vec<Lease>,
    /// For each lease, in order: how long its call had been due, and the
    /// tool's tighter limit at the claim.
    pub waited: Vec<(Duration, Limit)>,
    /// Tools with due calls left `pending` because a limit had no room.
    pub held_back: Vec<(String, Limit)>,
    /// Some due call of a limited tool was left for any reason (a limit,
    /// this process's slots or workers): poll again once one frees.
    pub more_due: bool,
    /// The soonest a tool held back by its rate has a token again.
    pub next_token_in: Option<Duration>,
}

/// One tool's place in a claim of limited tools: what the backend decided
/// and what it took, for the `LimitedClaim` both backends build alike.
#[derive(Debug, Clone)]
pub(super) struct ToolRoom {
    pub tool: String,
    /// Calls it could take: the least of this process's free slots (or
    /// workers), the room under `max_concurrency`, and whole tokens.
    pub allowed: usize,
    /// `max_concurrency` minus its running calls, when it has one held here.
    pub cap_room: Option<usize>,
    /// Its bucket's tokens before this claim, when it has a rate.
    pub tokens: Option<f64>,
    pub rate: Option<Rate>,
    /// Due calls of it remain after this claim.
    pub waiting: bool,
    /// Its calls claimed, with how long each had been due.
    pub claimed: Vec<(Lease, Duration)>,
}

impl ToolRoom {
    /// The limit that bounds it tighter now: concurrency when its room
    /// there is no more than its whole tokens.
    fn tighter(&self) -> Limit {
        match (self.cap_room, self.tokens) {
            (Some(room), Some(tokens)) if room as f64 > tokens.floor() => Limit::Rate,
            (Some(_), _) => Limit::Concurrency,
            _ => Limit::Rate,
        }
    }

    /// The limit that left due calls waiting, if one did: the claim took
    /// exactly that limit's room.
    fn held_back_by(&self) -> Option<Limit> {
        if !self.waiting {
            return None;
        }
        let whole_tokens = self.tokens.map(|t| t.floor().max(0.0) as usize);
        if self.cap_room == Some(self.allowed) {
            Some(Limit::Concurrency)
        } else if whole_tokens == Some(self.allowed) {
            Some(Limit::Rate)
        } else {
            None
        }
    }
}

impl LimitedClaim {
    /// What a claim that found `rooms` took, as the runner reads it.
    pub(super) fn from_rooms(rooms: Vec<ToolRoom>) -> LimitedClaim {
        let mut out = LimitedClaim::default();
        for room in rooms {
            let tighter = room.tighter();
            let held_back = room.held_back_by();
            out.more_due |= room.waiting;
            if let Some(limit) = held_back {
                out.held_back.push((room.tool.clone(), limit));
            }
            if let (Some(Limit::Rate), Some(rate), Some(tokens)) =
                (held_back, room.rate, room.tokens)
            {
                let left = tokens - room.claimed.len() as f64;
                let next = rate.next_token_in(left);
                out.next_token_in = Some(out.next_token_in.map_or(next, |n| n.min(next)));
            }
            for (lease, waited) in room.claimed {
                out.leases.push(lease);
                out.waited.push((waited, tighter));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_refills_at_its_rate_up_to_its_burst() {
        let rate = Rate {
            per_second: 20.0,
            burst: 5,
        };
        assert_eq!(rate.refill(0.0, 0.1), 2.0);
        assert_eq!(rate.refill(4.5, 1.0), 5.0, "never above the burst");
        assert_eq!(rate.refill(1.0, -3.0), 1.0, "a clock that stepped back");
        assert_eq!(rate.next_token_in(0.5), Duration::from_millis(25));
        assert_eq!(rate.next_token_in(1.5), Duration::ZERO);
    }

    fn room(cap_room: Option<usize>, tokens: Option<f64>, allowed: usize) -> ToolRoom {
        ToolRoom {
            tool: "t".into(),
            allowed,
            cap_room,
            tokens,
            rate: tokens.map(|_| Rate {
                per_second: 10.0,
                burst: 3,
            }),
            waiting: true,
            claimed: Vec::new(),
        }
    }

    /// The limit that took exactly the claim's room held the rest back; a
    /// claim bounded by this process's own slots names no shared limit, but
    /// still asks for another poll.
    #[test]
    fn the_limit_whose_room_was_taken_is_the_one_that_held_calls_back() {
        let claim = LimitedClaim::from_rooms(vec![room(Some(0), Some(2.5), 0)]);
        assert_eq!(claim.held_back, [("t".to_string(), Limit::Concurrency)]);
        let claim = LimitedClaim::from_rooms(vec![room(Some(4), Some(0.5), 0)]);
        assert_eq!(claim.held_back, [("t".to_string(), Limit::Rate)]);
        assert_eq!(claim.next_token_in, Some(Duration::from_millis(50)));
        let claim = LimitedClaim::from_rooms(vec![room(Some(4), Some(3.0), 1)]);
        assert!(claim.held_back.is_empty() && claim.more_due);
        assert_eq!(room(Some(1), Some(2.0), 1).tighter(), Limit::Concurrency);
        assert_eq!(room(Some(3), Some(2.0), 2).tighter(), Limit::Rate);
        assert_eq!(room(None, Some(2.0), 2).tighter(), Limit::Rate);
    }
}
