//! Start-up: wires the store, the runner, the `Calls` service, the REST routes
//! with MCP mounted on them, and the HTTP server together, in the order that
//! makes a restart safe — the auth file is read before anything else, the
//! port is bound before the database is touched, and recovery runs before
//! the first request is accepted. It also wires what observes them: one
//! `Metrics` fed by the store's writer, the runner and the call path, and
//! the purge hook that makes the key cache forget purged keys.
//!
//! It also starts the `webhooks` thread when a tenant has a webhook, rung
//! by the call path when a call starts waiting for approval.
//!
//! It never sets up logging: the binary (or the bench) installs the process's
//! logger before starting a service.

use crate::api::{Api, Endpoint};
use crate::auth::{Auth, AuthFileError};
use crate::calls::{scoped_key, Bell, Calls, CallsOptions, KeyCache};
use crate::config::Config;
use crate::descriptors::{self, Budget};
use crate::lock::lock;
use crate::mcp::{Mcp, McpOptions};
use crate::metrics::rates::ReadingProbe;
use crate::metrics::{DatabaseSnapshot, Metrics, ProbeError, RateSampler};
use crate::runner::{Notifier, OnPurged, Runner};
use crate::server::{self, Handler, Observer, Server};
use crate::store::{
    now, CallStore, Database, Reading, RestoredCopy, Scope, StoreError, ToolLimit, Wake,
    WakeHandler,
};
use crate::tools::ToolRegistry;
use crate::webhook::Webhooks;
use std::fmt;
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// Why the service could not start.
#[derive(Debug)]
pub enum StartError {
    /// `--auth-file` is missing or invalid (a configuration mistake: exit 2).
    Auth(AuthFileError),
    /// The database file could not be opened, migrated or checked.
    Database {
        /// Printed masked: a PostgreSQL password never reaches the message.
        /// Boxed: a PostgreSQL target (every host's settings) is large.
        db: Box<crate::store::Database>,
        error: StoreError,
    },
    /// The database is a copy `backup` made, and `--accept-restored-copy`
    /// did not name its snapshot: nothing was written to it.
    RestoredCopy {
        db: Box<crate::store::Database>,
        copy: RestoredCopy,
    },
    /// The open-file limit leaves no room for a single connection.
    Descriptors(descriptors::TooFewDescriptors),
    Bind(std::io::Error),
    Spawn(std::io::Error),
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::Auth(e) => write!(f, "{e}"),
            StartError::Database { db, error } => {
                write!(f, "cannot open the database: {db}: {error}")
            }
            StartError::RestoredCopy { db, copy } => write!(f, "{db}: {copy}"),
            StartError::Descriptors(e) => write!(f, "{e}"),
            StartError::Bind(e) => write!(f, "cannot bind the listening socket: {e}"),
            StartError::Spawn(e) => write!(f, "cannot start a thread: {e}"),
        }
    }
}

impl std::error::Error for StartError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StartError::Auth(e) => Some(e),
            StartError::Database { error, .. } => Some(error),
            StartError::RestoredCopy { copy, .. } => Some(copy),
            StartError::Descriptors(e) => Some(e),
            StartError::Bind(e) | StartError::Spawn(e) => Some(e),
        }
    }
}

/// Why the store did not open: a restored copy not accepted (the store
/// hands the mark as its error's source), or any other database failure.
fn database_refused(db: &Database, error: StoreError) -> StartError {
    let copy = std::error::Error::source(&error).and_then(|e| e.downcast_ref::<RestoredCopy>());
    match copy {
        Some(copy) => StartError::RestoredCopy {
            db: Box::new(db.clone()),
            copy: copy.clone(),
        },
        None => StartError::Database {
            db: Box::new(db.clone()),
            error,
        },
    }
}

/// A running service: the HTTP server, the runner's threads (workers, maintenance, completer),
/// the store and its writer. Stopping it (explicitly, or by dropping it)
/// ends and joins every thread it started.
pub struct Service {
    config: Config,
    /// The open-file limit and the connection cap it allowed.
    descriptors: Budget,
    server: Server,
    handler: Handler,
    store: Arc<CallStore>,
    runner: Arc<Runner>,
    notifier: Arc<Notifier>,
    metrics: Arc<Metrics>,
    /// The `rates` thread, sampling the overview's history; stopped before
    /// the store.
    rates: Mutex<RateSampler>,
    /// The `webhooks` thread (none without a tenant's webhook); stopped
    /// before the store, its undelivered notifications left in the outbox.
    webhooks: Arc<Webhooks>,
    /// Tenants by name, for the banner (no hash ever leaves `Auth`).
    tenants: Vec<String>,
    /// What the first `stop` did; later calls return it again.
    stopped: Mutex<Option<StopReport>>,
}

/// What a stop did.
#[derive(Debug, Clone, Default)]
pub struct StopReport {
    /// Calls whose tools were still running when the grace period ended:
    /// their leases were given back, so the next process runs them at once.
    pub released: Vec<String>,
    /// Why the store could not write any more while the process ran (a
    /// failed sync of the WAL), if it could not: the process then exits 1.
    pub write_failure: Option<StoreError>,
}

impl Service {
    /// Bind the socket, then open the store, run recovery once, start the
    /// workers, and start serving. Binding first: a taken port must fail before
    /// anything touches the database (creating the file, or recovering another
    /// process's calls). Recovery runs before the first request is accepted.
    /// Before all that, the open-file limit is raised and the connection cap
    /// lowered to what it allows (see `descriptors`).
    pub fn start(mut config: Config) -> Result<Service, StartError> {
        let auth = match &config.auth_file {
            Some(path) => Auth::load(path).map_err(StartError::Auth)?,
            None => Auth::anonymous(),
        };
        let descriptors = descriptors::budget(
            descriptors::raise_open_file_limit(),
            config.limits.max_connections,
            descriptors::store_descriptors(&config.db, config.store.pool_size),
        )
        .map_err(StartError::Descriptors)?;
        config.limits.max_connections = descriptors.max_connections;
        let listener =
            TcpListener::bind((config.host.as_str(), config.port)).map_err(StartError::Bind)?;
        let mut options = config.store.clone();
        options.limits = tool_limits(&config.tools);
        let store = CallStore::open(&config.db, options)
            .map_err(|error| database_refused(&config.db, error))?;
        let metrics = Arc::new(Metrics::new());
        crate::log::global()
            .report_dropped_access_lines_to(Arc::clone(&metrics.access_log_dropped));
        // Every configured tool (the tools file's, not only the built-ins) has
        // its zero series before its first run.
        config
            .tools
            .specs()
            .for_each(|spec| metrics.declare_tool(&spec.name));
        store.report_to(Arc::clone(&metrics));
        metrics.set_database_probe(database_probe(Arc::downgrade(&store)));
        let rates = RateSampler::start(reading_probe(Arc::downgrade(&store))).map_err(|e| {
            store.stop();
            StartError::Spawn(e)
        })?;
        let notifier = Arc::new(Notifier::default());
        let keys = Arc::new(KeyCache::with_budget(config.answer_cache_bytes));
        let runner = Runner::start(
            Arc::clone(&store),
            config.runner.clone(),
            Arc::clone(&notifier),
            Arc::clone(&config.tools),
            Arc::clone(&metrics),
            forget_purged_keys(Arc::clone(&keys)),
        )
        .map_err(|e| {
            store.stop();
            StartError::Spawn(e)
        })?;
        runner.recover_once();
        store.on_wake_from_other_nodes(on_wake_from_other_nodes(
            Arc::downgrade(&runner),
            Arc::downgrade(&notifier),
        ));
        let tenants = auth.tenant_names();
        let webhooks = Webhooks::start(Arc::clone(&store), auth.webhooks(), Arc::clone(&metrics))
            .map_err(|e| {
            runner.stop(Duration::ZERO);
            store.stop();
            StartError::Spawn(e)
        })?;
        let webhooks = Arc::new(webhooks);
        let bell: Bell = {
            let webhooks = Arc::clone(&webhooks);
            Arc::new(move || webhooks.ring())
        };
        let calls = Arc::new(Calls::new(
            Arc::clone(&store),
            Arc::clone(&runner),
            Arc::clone(&notifier),
            Arc::clone(&config.tools),
            keys,
            Arc::clone(&metrics),
            CallsOptions {
                chaos: config.runner.chaos,
                max_pending: config.max_pending,
                on_approval_requested: bell,
            },
        ));
        let mcp = Arc::new(Mcp::new(
            Arc::clone(&calls),
            McpOptions {
                wait: config.mcp_wait,
                keyless: config.mcp_keyless,
                content_window: config.mcp_content_window,
                key_ttl: config.store.retention.key_ttl,
            },
            config.trusted_names.clone(),
        ));
        let mcp: Endpoint =
            Box::new(move |req, tenant, exchange| mcp.handle(req, tenant, exchange));
        let api = Arc::new(Api::new(
            calls,
            Arc::clone(&store),
            auth,
            Arc::clone(&metrics),
            mcp,
            config.trusted_proxies.clone(),
            config.trusted_names.clone(),
        ));
        let handler: Handler = {
            let api = Arc::clone(&api);
            Arc::new(move |req| api.handle(req))
        };
        let observer: Arc<dyn Observer> = api;
        let limits = config.limits.clone();
        let server = server::start_observed(listener, Arc::clone(&handler), limits, observer)
            .map_err(|e| {
                webhooks.stop();
                runner.stop(Duration::ZERO);
                store.stop();
                StartError::Spawn(e)
            })?;
        Ok(Service {
            config,
            descriptors,
            server,
            handler,
            store,
            runner,
            notifier,
            metrics,
            rates: Mutex::new(rates),
            webhooks,
            tenants,
            stopped: Mutex::new(None),
        })
    }

    /// This service's metrics (the bench reads them without HTTP).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Log the start-up as an event too, with what the banner says.
    pub fn log_start(&self) {
        crate::log::info("listening")
            .event("started")
            .addr(self.addr())
            // The URL's Display masks its password.
            .file("db", std::path::Path::new(&self.config.db.to_string()))
            .number("workers", self.config.runner.workers as u64)
            .number("tenants", self.tenants.len() as u64)
            .flag("auth", !self.tenants.is_empty())
            .seconds(
                "key_ttl",
                self.config.store.retention.key_ttl.unwrap_or_default(),
            )
            .emit();
    }

    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// The request handler itself, to call without a socket (the bench's run
    /// without HTTP).
    pub fn handler(&self) -> Handler {
        Arc::clone(&self.handler)
    }

    /// The one start-up line, with the real port, and the connection cap when
    /// the open-file limit lowered it.
    pub fn banner(&self) -> String {
        let lowered = if self.descriptors.lowered() {
            format!(
                ", max connections {} (lowered from {}: open-file limit {})",
                self.descriptors.max_connections,
                self.descriptors.asked,
                self.descriptors.open_file_limit
            )
        } else {
            String::new()
        };
        let tools = match &self.config.tools_file {
            Some(file) => format!(
                ", tools {} from {}",
                self.config.tools.specs().count(),
                file.display()
            ),
            None => String::new(),
        };
        let keyless = crate::mcp::keyless_summary(
            &self.config.tools,
            self.config.mcp_keyless,
            self.config.mcp_content_window,
        );
        format!(
            "idempotent-tool listening on http://{} (db {}, workers {}, lease {}s, {}, keys kept {}{tools}, {keyless}{lowered}{})",
            self.addr(),
            self.config.db,
            self.config.runner.workers,
            self.config.runner.lease.as_secs_f64(),
            match self.tenants.len() {
                0 => "no auth: one anonymous tenant".to_string(),
                n => format!("{n} tenant(s)"),
            },
            match self.config.store.retention.key_ttl {
                Some(ttl) => format!("{}s", ttl.as_secs_f64()),
                None => "forever".to_string(),
            },
            if self.config.runner.chaos {
                ", chaos hooks ON"
            } else {
                ""
            }
        )
    }

    /// Stop, in the order that loses nothing: no new connection; waiting
    /// requests (`?wait=`) answer with the call as it is; requests already
    /// read are answered and their connections close; workers finish the tool
    /// they are running, for up to `grace`, and the leases of tools still
    /// running then are given back; the writer commits its last batch, marks
    /// this process stopped, checkpoints the WAL, and ends. Every thread is
    /// joined except workers still inside a tool after `grace` (they end with
    /// the process). Idempotent.
    pub fn stop(&self, grace: Duration) -> StopReport {
        let mut stopped = lock(&self.stopped);
        if let Some(report) = &*stopped {
            return report.clone();
        }
        self.server.stop_accepting();
        self.notifier.stop();
        self.server.stop();
        let released = self.runner.stop(grace);
        lock(&self.rates).stop();
        self.webhooks.stop();
        self.store.stop();
        let report = StopReport {
            released,
            write_failure: self.store.write_failure(),
        };
        *stopped = Some(report.clone());
        report
    }
}

/// What `/metrics` reads from the database at each scrape. Holds the store
/// weakly: the store's writer holds the metrics, and a strong reference back
/// would keep both alive after the service is dropped.
fn database_probe(
    store: Weak<CallStore>,
) -> impl Fn() -> Result<DatabaseSnapshot, ProbeError> + Send + Sync + 'static {
    move || {
        let store = store.upgrade().ok_or("the store is gone")?;
        let backlog = store.backlog()?;
        let age = |since: f64| Duration::from_secs_f64((now() - since).max(0.0));
        Ok(DatabaseSnapshot {
            calls_by_status: backlog.calls_by_status,
            oldest_pending_age: backlog.oldest_pending_created_at.map(age),
            oldest_approval_wait: backlog.oldest_awaiting_since.map(age),
        })
    }
}

/// What the `rates` thread does every step: read each tenant's running
/// totals (the count tables) and keep them in the database as a reading at
/// `at` (`store::readings`). Holds the store weakly, as `database_probe`
/// does.
fn reading_probe(store: Weak<CallStore>) -> ReadingProbe {
    Box::new(move |at| {
        let store = store.upgrade().ok_or("the store is gone")?;
        let counts = store.counts(Scope::All)?;
        store.record_reading(&Reading::of(at, &counts))?;
        Ok(())
    })
}

/// A wake-up from another node on the same PostgreSQL database: the
/// requests waiting here re-read their calls, a cancel asked there stops
/// the tool if it runs here (`Runner::check_cancels`), and new work there is claimed
/// here at once by the runner's poll — which claims only as many calls as
/// this node has free workers (and capped tools free slots), so a busy node
/// claims nothing and the idle ones help (each node runs what it accepts).
/// Without a wake-up the same happens at the next poll. Weak references: the
/// store that holds this handler must not keep the runner alive.
fn on_wake_from_other_nodes(runner: Weak<Runner>, notifier: Weak<Notifier>) -> WakeHandler {
    Arc::new(move |wake: Wake| {
        if let (true, Some(notifier)) = (wake.done, notifier.upgrade()) {
            // A call the sender could not name is found by its waiters' own
            // re-read (`WAIT_RECHECK`, 100 ms).
            notifier.notify(wake.calls.iter().map(String::as_str));
        }
        if let (true, Some(runner)) = (wake.cancel, runner.upgrade()) {
            runner.check_cancels();
        }
        if let (true, Some(runner)) = (wake.work, runner.upgrade()) {
            runner.claim_due_work();
        }
    })
}

/// The runner's purge hook: a purged call's key is forgotten, so no cached
/// answer outlives the call.
fn forget_purged_keys(keys: Arc<KeyCache>) -> OnPurged {
    Box::new(move |purged| {
        for call in purged {
            keys.forget(&scoped_key(&call.tenant, &call.idem_key));
        }
    })
}

/// Each tool's `max_concurrency` and `rate`, as the store takes them: it
/// holds in the database those its backend shares across processes.
fn tool_limits(tools: &ToolRegistry) -> Vec<ToolLimit> {
    tools
        .specs()
        .filter(|spec| spec.max_concurrency.is_some() || spec.rate.is_some())
        .map(|spec| ToolLimit {
            tool: spec.name.clone(),
            max_concurrency: spec.max_concurrency,
            rate: spec.rate,
        })
        .collect()
}

impl Drop for Service {
    fn drop(&mut self) {
        self.stop(self.config.shutdown_grace);
    }
}
