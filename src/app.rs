//! Start-up: wires the store, the runner, the API and the HTTP server together,
//! in the order that makes a restart safe — the port is bound before the
//! database is touched, and recovery runs before the first request is
//! accepted.

use crate::api::Api;
use crate::config::Config;
use crate::runner::{Notifier, Runner};
use crate::server::{self, Handler};
use crate::store::CallStore;
use std::fmt;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;

/// Why the service could not start.
#[derive(Debug)]
pub enum StartError {
    Database(String),
    Bind(std::io::Error),
    Spawn(std::io::Error),
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::Database(m) => write!(f, "cannot open the database: {m}"),
            StartError::Bind(e) => write!(f, "cannot bind the listening socket: {e}"),
            StartError::Spawn(e) => write!(f, "cannot start a thread: {e}"),
        }
    }
}

impl std::error::Error for StartError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StartError::Database(_) => None,
            StartError::Bind(e) | StartError::Spawn(e) => Some(e),
        }
    }
}

/// A service that is ready to accept connections.
pub struct App {
    pub listener: TcpListener,
    pub addr: SocketAddr,
    pub handler: Handler,
    pub config: Config,
}

impl App {
    /// Bind the socket, then open the store, run recovery once and start the
    /// workers. Binding first: a taken port must fail before anything touches
    /// the database (creating the file, or recovering another process's calls).
    pub fn start(config: Config) -> Result<App, StartError> {
        let listener =
            TcpListener::bind((config.host.as_str(), config.port)).map_err(StartError::Bind)?;
        let addr = listener.local_addr().map_err(StartError::Bind)?;
        let store = CallStore::open(&config.db, config.store.clone())
            .map_err(|e| StartError::Database(format!("{}: {e}", config.db.display())))?;
        let notifier = Arc::new(Notifier::default());
        let runner = Runner::start(
            Arc::clone(&store),
            config.runner.clone(),
            Arc::clone(&notifier),
        )
        .map_err(StartError::Spawn)?;
        runner.recover_once();
        let api = Api {
            store,
            runner,
            notifier,
            chaos: config.runner.chaos,
            keys: Default::default(),
        };
        let handler: Handler = Arc::new(move |req| api.handle(req));
        Ok(App {
            listener,
            addr,
            handler,
            config,
        })
    }

    /// The one start-up line, with the real port.
    pub fn banner(&self) -> String {
        format!(
            "idempotent-tool listening on http://{} (db {}, workers {}, lease {}s{})",
            self.addr,
            self.config.db.display(),
            self.config.runner.workers,
            self.config.runner.lease.as_secs_f64(),
            if self.config.runner.chaos {
                ", chaos hooks ON"
            } else {
                ""
            }
        )
    }

    /// Serve on this thread, forever.
    pub fn serve(self) {
        server::serve(self.listener, self.handler, self.config.limits)
    }

    /// Serve on a background thread and return the address (for the bench).
    pub fn spawn(self) -> Result<SocketAddr, StartError> {
        let addr = self.addr;
        std::thread::Builder::new()
            .name("accept".into())
            .spawn(move || self.serve())
            .map_err(StartError::Spawn)?;
        Ok(addr)
    }
}
