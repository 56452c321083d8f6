//! The service in this process, for route-level tests that need no process
//! boundary: `app::Service::start` on port 0, configured from the same flags
//! the real binary would get, and talked to over HTTP like the real binary
//! (the `Http` helpers). It saves a process start, a pipe and a reaper per
//! test. No logger is installed (the process's logger is global and shared
//! by every test), so a test that reads the server's log — or crashes,
//! signals, starves or fills up the server — starts the real binary instead.

use super::{Http, TempDb};
use idempotent_tool::app::Service;
use idempotent_tool::config::{Command, Config};
use std::path::PathBuf;

/// A running in-process service; dropping it stops it and joins its threads.
pub struct Local {
    /// Held for its `Drop`, which stops the service and joins its threads.
    _service: Service,
    /// `http://127.0.0.1:PORT`
    pub base: String,
    pub db: PathBuf,
}

impl Local {
    /// Start on `db` with `--port 0` and extra flags, as `Server::start` would.
    pub fn start(db: &TempDb, extra: &[&str]) -> Local {
        let mut args = vec!["--port", "0", "--db", db.path_str()];
        args.extend_from_slice(extra);
        let mut config = match Config::parse(args.iter().map(|a| a.to_string())) {
            Ok(Command::Run(config)) => *config,
            other => panic!("flags {args:?}: {other:?}"),
        };
        config.load_tools().expect("the tools file loads");
        let service = Service::start(config).expect("the service starts");
        let base = format!("http://{}", service.addr());
        Local {
            _service: service,
            base,
            db: db.path.clone(),
        }
    }
}

impl Local {
    /// A direct connection to the database file, for inspection.
    pub fn sql(&self) -> rusqlite::Connection {
        super::open_db(&self.db)
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        if std::thread::panicking() {
            if let Ok(rows) = super::dump_calls(&self.db) {
                eprintln!("----- calls in {} -----\n{rows}", self.db.display());
            }
        }
    }
}

impl Http for Local {
    fn base(&self) -> &str {
        &self.base
    }

    fn context(&self) -> String {
        "(an in-process service logs nowhere)".to_string()
    }
}
