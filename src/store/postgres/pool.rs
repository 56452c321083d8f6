//! The connection pool: at most `--db-pool` sessions to PostgreSQL, made on
//! demand (`connect`), each set up for the service (`session settings`
//! below), lent for one operation at a time — and every operation bounded
//! by `--db-timeout-ms` on this node's clock: the wait for a free session,
//! connecting, and every statement (`session`).
//!
//! Written here rather than taken from a crate (`r2d2`, `deadpool`): what it
//! must do is small — a `Mutex<Vec<Session>>`, a `Condvar`, a cap — and the
//! one rule that matters is ours to keep: a session that failed or ran past
//! its deadline is never lent again (it is dropped, its socket closed, and
//! the next borrower makes a new one), so a PostgreSQL restart, a failover
//! or a frozen server heals without restarting the node, and no pool slot
//! stays stuck on a server that stopped answering.
//!
//! It must never lend one session to two operations, never open more than
//! the cap, and never let an operation outlast its deadline (then it is
//! `Unavailable`). It also tells `Contact` whenever the server answered.

use super::super::database::PgTarget;
use super::super::error::StoreError;
use super::super::options::PgTimeouts;
use super::connect::Connector;
use super::contact::Contact;
use super::error::store_error;
use super::session::{GenericClient, Session};
use super::tls::TlsSetupError;
use crate::lock::lock;
use std::path::Path;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// Settings every session of the service gets.
///
/// - `synchronous_commit = on`: a `COMMIT` returns only when the commit is
///   durable (on the standbys too, where the cluster is configured so);
///   every answer depends on it. Said out loud in case the database or role
///   defaults to `off`.
/// - `idle_in_transaction_session_timeout`: a session of ours that somehow
///   stays in a transaction must not hold back vacuum (the queue's dead
///   tuples) or keep its row locks; no transaction of ours waits on anything
///   but SQL, so one idle in a transaction is a node paused or wedged
///   mid-way (`tests/it/pg_paused_node.rs`).
/// - `statement_timeout`: the operation's deadline, so a statement this node
///   has given up on (and whose connection it dropped) does not run on for
///   long on a live server; `lock_timeout`: a statement waiting for a row
///   lock is answered `503` after `--busy-timeout-ms`.
fn session_settings(lock_timeout: Duration, statement_timeout: Duration) -> String {
    format!(
        "SET synchronous_commit = on;
         SET idle_in_transaction_session_timeout = '10s';
         SET statement_timeout = '{}ms';
         SET lock_timeout = '{}ms';
         SET TIME ZONE 'UTC';",
        statement_timeout.as_millis().max(1),
        lock_timeout.as_millis().max(1)
    )
}

pub(super) struct Pool {
    connector: Connector,
    max: usize,
    /// How long a borrower waits for a free session; also `lock_timeout`.
    wait: Duration,
    /// Every operation's deadline, from the moment it asks for a session.
    operation: Duration,
    state: Mutex<PoolState>,
    /// Signalled whenever a session is given back or dropped.
    returned: Condvar,
    /// Told whenever the server answered.
    contact: Contact,
}

struct PoolState {
    idle: Vec<Session>,
    /// Idle plus lent plus being made; never above `max`.
    open: usize,
}

impl Pool {
    pub(super) fn new(
        target: &PgTarget,
        max: usize,
        wait: Duration,
        ca_file: Option<&Path>,
        timeouts: &PgTimeouts,
    ) -> Result<Pool, TlsSetupError> {
        Ok(Pool {
            connector: Connector::new(target, ca_file, timeouts)?,
            max: max.max(1),
            wait,
            operation: timeouts.operation,
            state: Mutex::new(PoolState {
                idle: Vec::new(),
                open: 0,
            }),
            returned: Condvar::new(),
            contact: Contact::new(),
        })
    }

    /// Run `op` on a pooled session within `--db-timeout-ms`. A session
    /// `op` left broken (the server went away, or the deadline passed) is
    /// dropped.
    pub(super) fn with<T>(
        &self,
        op: impl FnOnce(&mut Session) -> Result<T, tokio_postgres::Error>,
    ) -> Result<T, StoreError> {
        self.with_deadline(Instant::now() + self.operation, op)
    }

    /// `with`, for an operation allowed until `deadline` (a migration).
    pub(super) fn with_deadline<T>(
        &self,
        deadline: Instant,
        op: impl FnOnce(&mut Session) -> Result<T, tokio_postgres::Error>,
    ) -> Result<T, StoreError> {
        let mut session = self.take(deadline)?;
        session.set_deadline(Some(deadline));
        let outcome = op(&mut session);
        session.set_deadline(None);
        let timed_out = session.timed_out();
        if server_answered(&outcome) {
            self.contact.answered();
        }
        if session.is_broken() {
            self.forget_one();
        } else {
            self.give_back(session);
        }
        if timed_out {
            return Err(self.no_answer());
        }
        outcome.map_err(store_error)
    }

    /// Whether this node may judge others dead by their heartbeats (see
    /// `contact`).
    pub(super) fn may_judge_others(&self) -> bool {
        self.contact.may_judge_others()
    }

    /// Drop every idle session (a stopping store).
    pub(super) fn close_idle(&self) {
        let mut state = lock(&self.state);
        let n = state.idle.len();
        state.idle.clear();
        state.open -= n;
        self.returned.notify_all();
    }

    /// Sessions open now (idle or lent).
    #[cfg(test)]
    pub(super) fn open(&self) -> usize {
        lock(&self.state).open
    }

    /// An operation's deadline passed: what its caller is told.
    fn no_answer(&self) -> StoreError {
        StoreError::unavailable(format!(
            "PostgreSQL did not answer within {} ms (--db-timeout-ms); the connection was dropped",
            self.operation.as_millis()
        ))
    }

    fn take(&self, deadline: Instant) -> Result<Session, StoreError> {
        let waited_from = Instant::now();
        let wait_until = deadline.min(waited_from + self.wait);
        let mut state = lock(&self.state);
        loop {
            if let Some(session) = state.idle.pop() {
                return Ok(session);
            }
            if state.open < self.max {
                state.open += 1;
                drop(state);
                return self.connect(deadline).inspect_err(|_| self.forget_one());
            }
            let left = wait_until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(StoreError::unavailable(format!(
                    "all {} PostgreSQL connections (--db-pool) stayed busy for {} ms",
                    self.max,
                    waited_from.elapsed().as_millis()
                )));
            }
            state = self
                .returned
                .wait_timeout(state, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// A new session with the session settings applied, before `deadline`.
    fn connect(&self, deadline: Instant) -> Result<Session, StoreError> {
        let mut session = self.connector.open(deadline)?;
        self.contact.answered();
        session.set_deadline(Some(deadline));
        let settings = session.batch_execute(&session_settings(self.wait, self.operation));
        session.set_deadline(None);
        match settings {
            Ok(()) => Ok(session),
            Err(_) if session.timed_out() => Err(self.no_answer()),
            Err(e) => Err(store_error(e)),
        }
    }

    fn give_back(&self, session: Session) {
        lock(&self.state).idle.push(session);
        self.returned.notify_one();
    }

    fn forget_one(&self) {
        lock(&self.state).open -= 1;
        self.returned.notify_one();
    }
}

/// Whether an operation's outcome came from the server: a result, or an
/// error the server sent (it has a SQLSTATE). A closed connection, a
/// deadline that passed or a refused connect did not.
fn server_answered<T>(outcome: &Result<T, tokio_postgres::Error>) -> bool {
    match outcome {
        Ok(_) => true,
        Err(e) => e.code().is_some(),
    }
}
