//! How the wing's sessions are opened: the URL's hosts in turn, TLS for its
//! `sslmode`, and the client's own timeouts (`PgTimeouts`) on every
//! connection — the connect timeout per host, TCP keepalive and
//! `TCP_USER_TIMEOUT` on the socket.
//!
//! A multi-host URL (`postgres://h1:5432,h2:5433/db?target_session_attrs=
//! read-write`) is tried host by host, each within the connect timeout, so
//! a host that accepts TCP and never answers (frozen) costs that long and
//! no more; the host that answered last is tried first, so after a failover
//! new connections go straight to the new primary. `target_session_attrs`
//! is `tokio-postgres`'s to check: a host that answers read-only is passed
//! over like one that is down.
//!
//! It opens connections and nothing else: it never sets a session up (the
//! pool does) and never lends one out; `connect_once` opens one outside the
//! pool, for `verify`.

use super::super::database::PgTarget;
use super::super::error::StoreError;
use super::super::options::PgTimeouts;
use super::error::store_error;
use super::session::{self, ConnectError, Session};
use super::tls::{self, TlsSetupError};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio_postgres::config::Host;
use tokio_postgres_rustls::MakeRustlsConnect;

/// Opens sessions on the database a `PgTarget` names.
pub(super) struct Connector {
    /// One per host, in the URL's order, the timeouts applied.
    hosts: Vec<tokio_postgres::Config>,
    /// `None`: `sslmode=disable`.
    tls: Option<MakeRustlsConnect>,
    /// The host that answered last: tried first.
    preferred: AtomicUsize,
}

impl Connector {
    pub(super) fn new(
        target: &PgTarget,
        ca_file: Option<&Path>,
        timeouts: &PgTimeouts,
    ) -> Result<Connector, TlsSetupError> {
        Ok(Connector {
            hosts: target
                .hosts()
                .iter()
                .map(|host| with_timeouts(host, timeouts))
                .collect(),
            tls: tls::connector(target.ssl_mode(), ca_file)?,
            preferred: AtomicUsize::new(0),
        })
    }

    /// A new session before `deadline`: each host in turn, from the one
    /// that answered last, each given at most its connect timeout. The last
    /// host's failure when none answered (`Unavailable`: a host down,
    /// frozen, read-only, or refusing connections is a passing fault).
    pub(super) fn open(&self, deadline: Instant) -> Result<Session, StoreError> {
        let first = self.preferred.load(Ordering::Relaxed);
        let mut failure = None;
        for i in (0..self.hosts.len()).map(|k| (first + k) % self.hosts.len()) {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            let host = &self.hosts[i];
            let per_host = host.get_connect_timeout().copied().unwrap_or_default();
            match self.connect(host, deadline.min(now + per_host)) {
                Ok(Some(session)) => {
                    self.preferred.store(i, Ordering::Relaxed);
                    return Ok(session);
                }
                Ok(None) => {
                    failure = Some(StoreError::unavailable(format!(
                        "PostgreSQL at {} did not answer within {} ms (connecting)",
                        host_label(host),
                        (deadline.min(now + per_host) - now).as_millis()
                    )))
                }
                Err(e) => failure = Some(e),
            }
        }
        Err(failure.unwrap_or_else(|| {
            StoreError::unavailable("no time left to connect to PostgreSQL (--db-timeout-ms)")
        }))
    }

    fn connect(
        &self,
        host: &tokio_postgres::Config,
        deadline: Instant,
    ) -> Result<Option<Session>, StoreError> {
        let connected = match &self.tls {
            Some(tls) => session::connect(host, tls.clone(), deadline),
            None => session::connect(host, tokio_postgres::NoTls, deadline),
        };
        connected.map_err(|e| match e {
            ConnectError::Postgres(e) => store_error(e),
            ConnectError::Runtime(e) => StoreError::unavailable(format!(
                "no runtime for a PostgreSQL connection (out of descriptors?): {e}"
            )),
        })
    }
}

/// `host`'s configuration with the client's timeouts: the URL's
/// `connect_timeout` and `tcp_user_timeout` win where given; keepalive
/// probes start after half of `tcp` idle, four of them before the rest is
/// used up, so a dead peer is noticed within about `tcp` even on an idle
/// connection (the `LISTEN` session's).
fn with_timeouts(host: &tokio_postgres::Config, timeouts: &PgTimeouts) -> tokio_postgres::Config {
    let mut config = host.clone();
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(timeouts.connect);
    }
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(timeouts.tcp);
    }
    let second = Duration::from_secs(1);
    let idle = (timeouts.tcp / 2).max(second);
    config
        .keepalives(true)
        .keepalives_idle(idle)
        .keepalives_interval((timeouts.tcp.saturating_sub(idle) / 4).max(second))
        .keepalives_retries(4);
    config
}

/// `host:port` of a one-host configuration, for a message.
fn host_label(config: &tokio_postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(name)) => name.clone(),
        Some(Host::Unix(path)) => path.display().to_string(),
        None => "?".to_string(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port}")
}

/// One session outside the service's pool (`verify`, and the service's own
/// promise check, `GET /v1/verify`): the URL's hosts in turn with the default
/// timeouts, TLS for its `sslmode`, trusting `ca_file`'s roots too
/// (`--db-ca-file`). The same client stack as the pool's, so a frozen server
/// cannot hold it past a deadline either.
pub(super) fn connect_once(
    target: &PgTarget,
    ca_file: Option<&Path>,
) -> Result<Session, StoreError> {
    let timeouts = PgTimeouts::default();
    let connector = Connector::new(target, ca_file, &timeouts)?;
    let hosts = u32::try_from(connector.hosts.len()).unwrap_or(u32::MAX);
    connector.open(Instant::now() + timeouts.connect * hosts)
}
