//! `Session`: one connection to PostgreSQL whose every wait ends by a
//! deadline the client keeps, and `Transaction`s on it.
//!
//! Why not the `postgres` crate's blocking `Client`: it waits on the socket
//! with no deadline of its own, and a frozen server (every process stopped,
//! a host that hangs, a disk that stopped answering under the database)
//! still has its kernel acknowledge TCP — so keepalive and
//! `TCP_USER_TIMEOUT` never fire, and the server's `statement_timeout`
//! never runs. A `Session` is `tokio-postgres`'s connection driven the way
//! `postgres` drives it, by a small current-thread runtime on the calling
//! thread (no async code leaks out, no thread of its own), except that
//! every wait is under `tokio::time::timeout_at` of the operation's
//! deadline. Past it, the connection's half is dropped — which closes the
//! socket — and the session is broken: its owner (the pool) never lends it
//! again, so nothing stays stuck on a frozen server, neither a thread nor a
//! pooled connection. What the server does with a statement it already
//! received is unknown then, exactly as when a connection dies during a
//! `COMMIT`: the caller answers `503` and a same-key retry finds the truth.
//!
//! `GenericClient` is the part of the `postgres` crate's trait of that name
//! the SQL modules use, implemented by `Session` and `Transaction`, so the
//! statements read as they did. This module never retries, never decides
//! what an error means (`error` does) and never chooses a deadline (its
//! caller sets one).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll};
use std::time::Instant;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::runtime::Runtime;
use tokio_postgres::types::ToSql;
use tokio_postgres::{AsyncMessage, Error, Notification, Row};

/// The statements the SQL modules run, on a session or in a transaction:
/// the subset of `postgres::GenericClient` they use, with the same meaning.
pub(in crate::store::postgres) trait GenericClient {
    fn execute(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64, Error>;
    fn query(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>, Error>;
    fn query_one(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Row, Error>;
    fn query_opt(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, Error>;
    /// Several statements, no parameters, as one simple query.
    fn batch_execute(&mut self, sql: &str) -> Result<(), Error>;
}

/// A connection's half: what the server sends unasked (notifications,
/// notices), and the protocol's I/O, which only moves while it is polled.
trait Messages: Send {
    fn poll_message(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<AsyncMessage, Error>>>;
}

impl<S, T> Messages for tokio_postgres::Connection<S, T>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
    T: AsyncRead + AsyncWrite + Unpin + Send,
{
    fn poll_message(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<AsyncMessage, Error>>> {
        tokio_postgres::Connection::poll_message(self, cx)
    }
}

/// One connection: the client's half sends requests, the driver moves
/// them over the socket while the calling thread waits.
pub(in crate::store::postgres) struct Session {
    client: tokio_postgres::Client,
    driver: Driver,
}

struct Driver {
    runtime: Runtime,
    /// `None` once the connection ended, failed, or was dropped past a
    /// deadline: every request then fails at once as closed.
    connection: Option<Box<dyn Messages>>,
    /// `NOTIFY`s received (a `LISTEN`ing session's), oldest first.
    notifications: VecDeque<Notification>,
    /// When the operation under way must end; `None`: no limit.
    deadline: Option<Instant>,
    /// A deadline passed and the connection was dropped.
    timed_out: bool,
}

impl Session {
    /// A session over a connection `connect` makes on `runtime` (the
    /// caller bounds the connect itself: `connect`).
    fn new<S, T>(
        runtime: Runtime,
        client: tokio_postgres::Client,
        connection: tokio_postgres::Connection<S, T>,
    ) -> Session
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        Session {
            client,
            driver: Driver {
                runtime,
                connection: Some(Box::new(connection)),
                notifications: VecDeque::new(),
                deadline: None,
                timed_out: false,
            },
        }
    }

    /// Every wait from now on ends at `deadline` (`None`: no limit), until
    /// it is set again.
    pub(in crate::store::postgres) fn set_deadline(&mut self, deadline: Option<Instant>) {
        self.driver.deadline = deadline;
    }

    /// Whether a deadline passed and the connection was dropped for it.
    pub(in crate::store::postgres) fn timed_out(&self) -> bool {
        self.driver.timed_out
    }

    /// Whether the session can never answer again: its connection ended,
    /// failed, or was dropped past a deadline.
    pub(in crate::store::postgres) fn is_broken(&self) -> bool {
        self.driver.connection.is_none() || self.client.is_closed()
    }

    /// Begin a transaction (READ COMMITTED, read-write); it rolls back when
    /// dropped uncommitted.
    pub(in crate::store::postgres) fn transaction(&mut self) -> Result<Transaction<'_>, Error> {
        Transaction::begin(self, "BEGIN")
    }

    /// Begin a read-only REPEATABLE READ transaction: several reads that
    /// describe one moment.
    pub(in crate::store::postgres) fn snapshot(&mut self) -> Result<Transaction<'_>, Error> {
        Transaction::begin(self, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    }

    /// Wait up to `tick` (or the deadline, if sooner) for notifications,
    /// then hand over every one received so far, oldest first; none when
    /// the tick passed quietly.
    pub(in crate::store::postgres) fn notifications(
        &mut self,
        tick: std::time::Duration,
    ) -> Result<Vec<Notification>, Error> {
        if self.driver.notifications.is_empty() {
            let sleep = {
                let _inside = self.driver.runtime.enter();
                tokio::time::sleep(tick)
            };
            let mut sleep = pin!(sleep);
            let waited = self.driver.drive(|cx, received| {
                if !received.is_empty() || sleep.as_mut().poll(cx).is_ready() {
                    Poll::Ready(Ok(()))
                } else {
                    Poll::Pending
                }
            });
            match waited {
                Some(outcome) => outcome?,
                None => return Err(abandon(&mut self.driver, &self.client)),
            }
        }
        Ok(self.driver.notifications.drain(..).collect())
    }
}

/// The deadline passed: drop the connection (its socket closes), and return
/// the error any request on the session now gets — the client's own
/// "connection closed", which the store maps like every dropped connection.
fn abandon(driver: &mut Driver, client: &tokio_postgres::Client) -> Error {
    driver.connection = None;
    driver.timed_out = true;
    // With the connection's half gone, the request cannot even be sent: it
    // fails at once, without waiting for anything.
    match driver.runtime.block_on(client.simple_query("")) {
        Err(closed) => closed,
        Ok(_) => unreachable!("a request was answered on a dropped connection"),
    }
}

impl Driver {
    /// Poll the connection (its I/O moves only while polled) and `step`
    /// until `step` is ready, the connection fails, or the deadline passes
    /// (`None`; the caller then abandons the connection).
    fn drive<T>(
        &mut self,
        mut step: impl FnMut(&mut Context<'_>, &VecDeque<Notification>) -> Poll<Result<T, Error>>,
    ) -> Option<Result<T, Error>> {
        let Driver {
            runtime,
            connection,
            notifications,
            deadline,
            ..
        } = self;
        let work = std::future::poll_fn(|cx| {
            if let Some(failed) = poll_connection(connection, notifications, cx) {
                return Poll::Ready(Err(failed));
            }
            step(cx, notifications)
        });
        match *deadline {
            None => Some(runtime.block_on(work)),
            Some(at) => {
                runtime.block_on(async move { tokio::time::timeout_at(at.into(), work).await.ok() })
            }
        }
    }
}

/// Move the connection's I/O along and keep what the server sent unasked;
/// the connection's error if it failed. A connection that ended or failed
/// is dropped, so every later request fails at once as closed.
fn poll_connection(
    connection: &mut Option<Box<dyn Messages>>,
    notifications: &mut VecDeque<Notification>,
    cx: &mut Context<'_>,
) -> Option<Error> {
    let live = connection.as_mut()?;
    loop {
        match live.poll_message(cx) {
            Poll::Ready(Some(Ok(AsyncMessage::Notification(n)))) => notifications.push_back(n),
            // A notice (a warning the server sends along): nothing reads them.
            Poll::Ready(Some(Ok(_))) => {}
            Poll::Ready(Some(Err(e))) => {
                *connection = None;
                return Some(e);
            }
            Poll::Ready(None) => {
                *connection = None;
                return None;
            }
            Poll::Pending => return None,
        }
    }
}

impl GenericClient for Session {
    fn execute(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64, Error> {
        let request = self.client.execute(sql, params);
        run_on(&mut self.driver, &self.client, request)
    }

    fn query(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>, Error> {
        let request = self.client.query(sql, params);
        run_on(&mut self.driver, &self.client, request)
    }

    fn query_one(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Row, Error> {
        let request = self.client.query_one(sql, params);
        run_on(&mut self.driver, &self.client, request)
    }

    fn query_opt(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, Error> {
        let request = self.client.query_opt(sql, params);
        run_on(&mut self.driver, &self.client, request)
    }

    fn batch_execute(&mut self, sql: &str) -> Result<(), Error> {
        let request = self.client.batch_execute(sql);
        run_on(&mut self.driver, &self.client, request)
    }
}

/// `Session::run` for a request that borrows the client: the driver and
/// the client are borrowed apart.
fn run_on<T>(
    driver: &mut Driver,
    client: &tokio_postgres::Client,
    request: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    let mut request = pin!(request);
    match driver.drive(|cx, _| request.as_mut().poll(cx)) {
        Some(outcome) => outcome,
        None => Err(abandon(driver, client)),
    }
}

/// A transaction, or a savepoint inside one, on a session: committed by
/// `commit`, rolled back by `rollback` or when dropped uncommitted (unless
/// the session broke meanwhile: the server then rolls it back itself).
pub(in crate::store::postgres) struct Transaction<'a> {
    session: &'a mut Session,
    /// `None` for the transaction itself; the savepoint's name inside one.
    savepoint: Option<String>,
    done: bool,
}

impl<'a> Transaction<'a> {
    fn begin(session: &'a mut Session, begin: &str) -> Result<Transaction<'a>, Error> {
        session.batch_execute(begin)?;
        Ok(Transaction {
            session,
            savepoint: None,
            done: false,
        })
    }

    /// A savepoint inside this transaction: rolled back alone.
    pub(in crate::store::postgres) fn savepoint(
        &mut self,
        name: &str,
    ) -> Result<Transaction<'_>, Error> {
        self.session.batch_execute(&format!("SAVEPOINT {name}"))?;
        Ok(Transaction {
            session: &mut *self.session,
            savepoint: Some(name.to_string()),
            done: false,
        })
    }

    pub(in crate::store::postgres) fn commit(mut self) -> Result<(), Error> {
        self.done = true;
        let end = match &self.savepoint {
            None => "COMMIT".to_string(),
            Some(name) => format!("RELEASE SAVEPOINT {name}"),
        };
        self.session.batch_execute(&end)
    }

    pub(in crate::store::postgres) fn rollback(mut self) -> Result<(), Error> {
        self.done = true;
        self.roll_back()
    }

    fn roll_back(&mut self) -> Result<(), Error> {
        let end = match &self.savepoint {
            None => "ROLLBACK".to_string(),
            Some(name) => format!("ROLLBACK TO SAVEPOINT {name}"),
        };
        self.session.batch_execute(&end)
    }
}

impl Drop for Transaction<'_> {
    fn drop(&mut self) {
        if !self.done && !self.session.is_broken() {
            let _ = self.roll_back();
        }
    }
}

impl GenericClient for Transaction<'_> {
    fn execute(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64, Error> {
        self.session.execute(sql, params)
    }

    fn query(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>, Error> {
        self.session.query(sql, params)
    }

    fn query_one(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Row, Error> {
        self.session.query_one(sql, params)
    }

    fn query_opt(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, Error> {
        self.session.query_opt(sql, params)
    }

    fn batch_execute(&mut self, sql: &str) -> Result<(), Error> {
        self.session.batch_execute(sql)
    }
}

/// Connect with `config` through `tls` on a new runtime, the whole of it —
/// TCP, TLS, start-up, authentication — before `deadline`. `None`: the
/// deadline passed (the half-made connection is dropped with its socket).
pub(in crate::store::postgres) fn connect<M>(
    config: &tokio_postgres::Config,
    tls: M,
    deadline: Instant,
) -> Result<Option<Session>, ConnectError>
where
    M: tokio_postgres::tls::MakeTlsConnect<tokio_postgres::Socket>,
    M::Stream: Send + 'static,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ConnectError::Runtime)?;
    let connected = runtime
        .block_on(async { tokio::time::timeout_at(deadline.into(), config.connect(tls)).await });
    match connected {
        Ok(Ok((client, connection))) => Ok(Some(Session::new(runtime, client, connection))),
        Ok(Err(e)) => Err(ConnectError::Postgres(e)),
        Err(_elapsed) => Ok(None),
    }
}

/// Why a connection could not be made (a deadline that passed is not an
/// error here: `connect` says `None`).
#[derive(Debug)]
pub(in crate::store::postgres) enum ConnectError {
    /// The server refused, failed or could not be reached.
    Postgres(Error),
    /// No runtime for the connection (out of file descriptors or threads).
    Runtime(std::io::Error),
}
