//! The connection pool: at most `--db-pool` connections to PostgreSQL, made
//! on demand, each set up for the service (`session settings` below), lent
//! for one operation at a time.
//!
//! Written here rather than taken from a crate (`r2d2`, `deadpool`): what it
//! must do is small — a `Mutex<Vec<Client>>`, a `Condvar`, a cap — and the one
//! rule that matters is ours to keep: a connection that failed is never lent
//! again (it is dropped, and the next borrower makes a new one), so a
//! PostgreSQL restart or failover heals without restarting the node.
//!
//! It must never lend one connection to two operations, never open more than
//! the cap, and never wait for a connection longer than the lock timeout
//! (then the operation is `Unavailable`).

use super::super::database::PgTarget;
use super::super::error::StoreError;
use super::error::store_error;
use super::tls;
use crate::sync::lock;
use ::postgres::Client;
use std::path::Path;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};
use tokio_postgres_rustls::MakeRustlsConnect;

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
/// - `statement_timeout`, `lock_timeout`: a statement that cannot finish is
///   answered `503`, not held for ever.
fn session_settings(lock_timeout: Duration) -> String {
    format!(
        "SET synchronous_commit = on;
         SET idle_in_transaction_session_timeout = '10s';
         SET statement_timeout = '30s';
         SET lock_timeout = '{}ms';
         SET TIME ZONE 'UTC';",
        lock_timeout.as_millis().max(1)
    )
}

/// One connection outside any pool (`verify`), with the URL's TLS mode and
/// the system's roots.
pub(super) fn connect_once(target: &PgTarget) -> Result<Client, StoreError> {
    let tls = tls::connector(target.ssl_mode(), None)?;
    open(target, tls)
}

fn open(target: &PgTarget, tls: Option<MakeRustlsConnect>) -> Result<Client, StoreError> {
    let config = target.config();
    match tls {
        Some(tls) => config.connect(tls),
        None => config.connect(::postgres::NoTls),
    }
    .map_err(store_error)
}

pub(super) struct Pool {
    target: PgTarget,
    tls: Option<MakeRustlsConnect>,
    max: usize,
    /// How long a borrower waits for a free connection; also `lock_timeout`.
    wait: Duration,
    state: Mutex<PoolState>,
    /// Signalled whenever a connection is given back or dropped.
    returned: Condvar,
}

struct PoolState {
    idle: Vec<Client>,
    /// Idle plus lent plus being made; never above `max`.
    open: usize,
}

impl Pool {
    pub(super) fn new(
        target: &PgTarget,
        max: usize,
        wait: Duration,
        ca_file: Option<&Path>,
    ) -> Result<Pool, StoreError> {
        let tls = tls::connector(target.ssl_mode(), ca_file)?;
        Ok(Pool {
            target: target.clone(),
            tls,
            max: max.max(1),
            wait,
            state: Mutex::new(PoolState {
                idle: Vec::new(),
                open: 0,
            }),
            returned: Condvar::new(),
        })
    }

    /// Run `op` on a pooled connection. A connection `op` left broken (the
    /// server went away, or it is still inside a transaction) is dropped.
    pub(super) fn with<T>(
        &self,
        op: impl FnOnce(&mut Client) -> Result<T, ::postgres::Error>,
    ) -> Result<T, StoreError> {
        let mut client = self.take()?;
        let outcome = op(&mut client);
        if client.is_closed() {
            self.forget_one();
        } else {
            self.give_back(client);
        }
        outcome.map_err(store_error)
    }

    /// A connection outside the pool, opened like the pool's (the same URL,
    /// TLS and CA file) without its session settings: for a long read
    /// (`verify`) that must not hold one of the connections calls need.
    pub(super) fn connect_outside(&self) -> Result<Client, StoreError> {
        open(&self.target, self.tls.clone())
    }

    /// The database this pool connects to (its password masked in `Display`).
    pub(super) fn target(&self) -> &PgTarget {
        &self.target
    }

    /// Drop every idle connection (a stopping store).
    pub(super) fn close_idle(&self) {
        let mut state = lock(&self.state);
        let n = state.idle.len();
        state.idle.clear();
        state.open -= n;
        self.returned.notify_all();
    }

    /// Connections open now (idle or lent).
    #[cfg(test)]
    pub(super) fn open(&self) -> usize {
        lock(&self.state).open
    }

    fn take(&self) -> Result<Client, StoreError> {
        let deadline = Instant::now() + self.wait;
        let mut state = lock(&self.state);
        loop {
            if let Some(client) = state.idle.pop() {
                return Ok(client);
            }
            if state.open < self.max {
                state.open += 1;
                drop(state);
                return self.connect().inspect_err(|_| self.forget_one());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(StoreError::unavailable(format!(
                    "all {} PostgreSQL connections (--db-pool) stayed busy for {} ms",
                    self.max,
                    self.wait.as_millis()
                )));
            }
            state = self
                .returned
                .wait_timeout(state, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// A new connection with the session settings applied.
    fn connect(&self) -> Result<Client, StoreError> {
        let mut client = open(&self.target, self.tls.clone())?;
        client
            .batch_execute(&session_settings(self.wait))
            .map_err(store_error)?;
        Ok(client)
    }

    fn give_back(&self, client: Client) {
        lock(&self.state).idle.push(client);
        self.returned.notify_one();
    }

    fn forget_one(&self) {
        lock(&self.state).open -= 1;
        self.returned.notify_one();
    }
}
