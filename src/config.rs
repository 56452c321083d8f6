//! Command-line configuration: every flag, its default, and its validation.
//!
//! `Config::parse` never exits or prints; `main` decides what a bad flag costs
//! (usage on stderr, exit 2).

use crate::flag::{FlagError, Flags};
use crate::log::{Level, SettingError};
use crate::runner::RunnerOptions;
use crate::server::Limits;
use crate::store::{Database, DatabaseUrlError, Retention, StoreOptions};
use crate::tools::{ToolFileError, ToolRegistry, MAX_SLEEP_SECS};
use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub const USAGE: &str = "\
usage: idempotent-tool [options]

  --host HOST                 address to bind (default 127.0.0.1)
  --port PORT                 port to bind; 0 picks a free one (default 8081)
  --db PATH|URL               SQLite database file (default idem.db), or a
                              postgres://user:password@host:port/dbname URL
                              (sslmode=disable|prefer|require|verify-ca|verify-full)
  --db-pool N                 PostgreSQL: most connections this node opens (default 16)
  --db-ca-file FILE           PostgreSQL: trust these PEM roots for TLS, not the system's
  --workers N                 worker threads running tools (default 8)
  --lease-secs SECS           lease per attempt, fractions allowed (default 30);
                              extended every third of it while the tool runs
  --tools FILE                the tools this server runs, from a JSON file
                              (default: the built-ins charge, send_email,
                              sleep, fail); a mistake in it exits 2
  --recover-interval-ms MS    how often recovery runs (default 200)
  --busy-timeout-ms MS        SQLite busy timeout; PostgreSQL lock_timeout and
                              wait for a pooled connection (default 5000)
  --request-timeout-ms MS     a request's head, then its body, must arrive
                              within this (default 10000)
  --idle-timeout-ms MS        idle keep-alive connections close after this
                              (default 30000)
  --max-connections N         open connections; more are answered 503 (default 1024)
                              (lowered at start-up to what the open-file limit
                              allows; the start-up line says so)
  --answer-cache-mib MIB      memory for settled answers kept to answer retries
                              without a database read (default 64; 0 turns it off)
  --max-pending N             calls queued for a worker past which a new call is
                              refused 503 overloaded (default 4096)
  --shutdown-grace-secs SECS  on SIGTERM/SIGINT, how long running tools may
                              finish before their leases are given back
                              (default 10; fractions allowed)
  --auth-file FILE            tenants and the SHA-256 of their bearer tokens;
                              every request but /healthz then needs a token
  --insecure-no-auth          allow a non-loopback --host without --auth-file
  --mcp-wait-secs SECS        how long an MCP tools/call waits for its call to
                              settle before answering \"running\" with its call_id
                              (default 50, below the 60 s MCP clients time out
                              at; 0 answers at once; fractions allowed)
  --key-ttl SECS              keep terminal calls this long after their last
                              update, then purge them (default 86400; fractions
                              allowed; 0 keeps them forever)
  --log-level LEVEL           error, warn, info or debug (default info)
  --access-log on|off         one JSON line per request on stderr (default on)
  --chaos                     honour chaos hooks in args (tests, fault injection)
  --help                      print this help
";

/// `--max-pending`'s default: at the few thousand calls a second this
/// service completes on a small machine, a backlog of about a second.
pub const DEFAULT_MAX_PENDING: usize = 4096;

/// `--key-ttl`'s default: a day, as Stripe keeps its keys.
pub const DEFAULT_KEY_TTL: Duration = Duration::from_secs(86_400);

/// `--mcp-wait-secs`'s default: under the 60 s the official TypeScript MCP
/// client waits for a response, so a slow call answers `running` with its
/// handle rather than a client-side timeout with nothing.
pub const DEFAULT_MCP_WAIT: Duration = Duration::from_secs(50);

/// Everything the service needs to start.
#[derive(Debug, Clone)]
pub struct Config {
    pub host: String,
    pub port: u16,
    /// `--db`: a SQLite file or a PostgreSQL URL (printed with its password masked).
    pub db: Database,
    pub runner: RunnerOptions,
    pub store: StoreOptions,
    pub limits: Limits,
    /// How long a stop lets running tools finish before giving their leases back.
    pub shutdown_grace: Duration,
    /// Bytes of keys, fingerprints and rendered answers the API may keep
    /// (`--answer-cache-mib`).
    pub answer_cache_bytes: usize,
    /// Calls queued for a worker past which a new call is refused
    /// `503 overloaded` (`--max-pending`).
    pub max_pending: usize,
    /// Tenants and token hashes; `None`: everyone is the anonymous tenant.
    pub auth_file: Option<PathBuf>,
    /// Serve a non-loopback `host` without `auth_file` anyway.
    pub insecure_no_auth: bool,
    pub log_level: Level,
    /// One access-log line per request.
    pub access_log: bool,
    /// `--tools FILE`, read by `load_tools`.
    pub tools_file: Option<PathBuf>,
    /// The tools calls may name: the built-ins, or `tools_file` once loaded.
    pub tools: Arc<ToolRegistry>,
    /// How long an MCP `tools/call` waits for its call to settle.
    pub mcp_wait: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            host: "127.0.0.1".into(),
            port: 8081,
            db: Database::Sqlite(PathBuf::from("idem.db")),
            runner: RunnerOptions {
                workers: 8,
                lease: Duration::from_secs(30),
                recover_interval: Duration::from_millis(200),
                chaos: false,
            },
            store: StoreOptions {
                retention: Retention {
                    key_ttl: Some(DEFAULT_KEY_TTL),
                },
                ..StoreOptions::default()
            },
            limits: Limits::default(),
            shutdown_grace: Duration::from_secs(10),
            answer_cache_bytes: crate::calls::DEFAULT_ANSWER_CACHE_BYTES,
            max_pending: DEFAULT_MAX_PENDING,
            auth_file: None,
            insecure_no_auth: false,
            log_level: Level::Info,
            access_log: true,
            tools_file: None,
            tools: Arc::new(ToolRegistry::builtins()),
            mcp_wait: DEFAULT_MCP_WAIT,
        }
    }
}

/// What the command line asked for.
#[derive(Debug)]
pub enum Command {
    Run(Box<Config>),
    Help,
}

/// A flag that is unknown, lacks its value, or has a bad one; or flags that
/// together would expose the service. `main` answers each with the usage
/// and exit 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// Unknown, without its value, or a value it does not take.
    Flag(FlagError),
    /// An integer flag outside its range.
    OutOfRange {
        flag: String,
        value: String,
        min: u64,
        max: u64,
    },
    /// `--log-level` or `--access-log`.
    Setting(SettingError),
    /// `--db` names no usable database.
    Database(DatabaseUrlError),
    /// A non-loopback `--host` without `--auth-file` or `--insecure-no-auth`
    /// (the host as given, at most 64 characters).
    ExposedWithoutAuth { host: String },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Flag(e) => e.fmt(f),
            ConfigError::OutOfRange {
                flag,
                value,
                min,
                max,
            } => write!(
                f,
                "{flag} must be an integer from {min} to {max}, not {value:?}"
            ),
            ConfigError::Setting(e) => e.fmt(f),
            ConfigError::Database(e) => e.fmt(f),
            ConfigError::ExposedWithoutAuth { host } => write!(
                f,
                "--host {host:?} is not a loopback address: anyone who can reach it could read \
                 and make calls; give --auth-file, or --insecure-no-auth to serve without tokens"
            ),
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConfigError::Flag(e) => Some(e),
            ConfigError::Setting(e) => Some(e),
            ConfigError::Database(e) => Some(e),
            _ => None,
        }
    }
}

impl From<FlagError> for ConfigError {
    fn from(error: FlagError) -> ConfigError {
        ConfigError::Flag(error)
    }
}

/// A value `flag` does not take: what it must be.
fn bad_value(flag: &str, value: &str, expected: &'static str) -> ConfigError {
    ConfigError::Flag(FlagError::BadValue {
        flag: flag.to_string(),
        value: value.to_string(),
        expected,
    })
}

impl Config {
    /// Parse the arguments after the program name.
    pub fn parse<I: IntoIterator<Item = String>>(args: I) -> Result<Command, ConfigError> {
        let mut config = Config::default();
        let mut flags = Flags::new(args);
        while let Some(flag) = flags.next_flag()? {
            let mut value = || flags.value().map_err(ConfigError::from);
            match flag.as_str() {
                "--help" | "-h" => return Ok(Command::Help),
                "--chaos" => config.runner.chaos = true,
                "--insecure-no-auth" => config.insecure_no_auth = true,
                "--auth-file" => config.auth_file = Some(PathBuf::from(value()?)),
                "--key-ttl" => config.store.retention.key_ttl = key_ttl(&flag, &value()?)?,
                "--log-level" => {
                    config.log_level = Level::parse(&value()?).map_err(ConfigError::Setting)?
                }
                "--access-log" => {
                    config.access_log =
                        crate::log::parse_access_log(&value()?).map_err(ConfigError::Setting)?
                }
                "--host" => config.host = value()?,
                "--port" => config.port = number(&flag, &value()?, 0..=65535)? as u16,
                "--db" => config.db = Database::parse(&value()?).map_err(ConfigError::Database)?,
                "--db-pool" => {
                    config.store.pool_size = number(&flag, &value()?, 1..=10_000)? as usize
                }
                "--db-ca-file" => config.store.ca_file = Some(PathBuf::from(value()?)),
                "--tools" => config.tools_file = Some(PathBuf::from(value()?)),
                "--workers" => config.runner.workers = number(&flag, &value()?, 1..=1024)? as usize,
                "--lease-secs" => config.runner.lease = seconds(&flag, &value()?)?,
                "--recover-interval-ms" => {
                    config.runner.recover_interval = millis(&flag, &value()?, 1)?
                }
                "--busy-timeout-ms" => config.store.busy_timeout = millis(&flag, &value()?, 0)?,
                "--request-timeout-ms" => {
                    config.limits.request_timeout = millis(&flag, &value()?, 1)?
                }
                "--idle-timeout-ms" => config.limits.idle_timeout = millis(&flag, &value()?, 1)?,
                "--mcp-wait-secs" => config.mcp_wait = seconds_or_zero(&flag, &value()?)?,
                "--shutdown-grace-secs" => config.shutdown_grace = seconds(&flag, &value()?)?,
                "--max-connections" => {
                    config.limits.max_connections =
                        number(&flag, &value()?, 1..=1_000_000)? as usize
                }
                "--max-pending" => {
                    config.max_pending = number(&flag, &value()?, 1..=10_000_000)? as usize
                }
                "--answer-cache-mib" => {
                    config.answer_cache_bytes =
                        (number(&flag, &value()?, 0..=65_536)? as usize) << 20
                }
                other => return Err(FlagError::Unknown(other.to_string()).into()),
            }
        }
        if config.auth_file.is_none() && !config.insecure_no_auth && !is_loopback(&config.host) {
            return Err(ConfigError::ExposedWithoutAuth {
                host: config.host.chars().take(64).collect(),
            });
        }
        Ok(Command::Run(Box::new(config)))
    }

    /// A lease no longer than the longest tool run: allowed (tests use short
    /// leases), but a healthy `sleep` could then be taken over. Said at start.
    pub fn lease_is_short(&self) -> bool {
        self.runner.lease.as_secs_f64() <= MAX_SLEEP_SECS && !self.runner.chaos
    }

    /// Read `--tools FILE`, if given, into `tools`. Its own step, after the
    /// flags: a mistake in the file is one line naming the tool and the field
    /// (never a secret), not a usage error.
    pub fn load_tools(&mut self) -> Result<(), ToolFileError> {
        if let Some(path) = &self.tools_file {
            self.tools = Arc::new(ToolRegistry::load(path)?);
        }
        Ok(())
    }
}

/// Whether binding `host` keeps the service on this machine: `localhost`, or
/// an address in 127.0.0.0/8 or `::1`. Any other name counts as reachable.
pub fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// `--key-ttl`: seconds, fractions allowed; `0` keeps keys forever (`None`).
fn key_ttl(flag: &str, value: &str) -> Result<Option<Duration>, ConfigError> {
    match value.parse::<f64>() {
        Ok(0.0) => Ok(None),
        Ok(s) if s.is_finite() && s > 0.0 && s <= 100.0 * 365.0 * 86_400.0 => {
            Ok(Some(Duration::from_secs_f64(s)))
        }
        _ => Err(bad_value(
            flag,
            value,
            "a number of seconds, 0 (keep forever) or above",
        )),
    }
}

fn number(
    flag: &str,
    value: &str,
    range: std::ops::RangeInclusive<u64>,
) -> Result<u64, ConfigError> {
    value
        .parse::<u64>()
        .ok()
        .filter(|n| range.contains(n))
        .ok_or_else(|| ConfigError::OutOfRange {
            flag: flag.to_string(),
            value: value.to_string(),
            min: *range.start(),
            max: *range.end(),
        })
}

fn millis(flag: &str, value: &str, min: u64) -> Result<Duration, ConfigError> {
    number(flag, value, min..=86_400_000).map(Duration::from_millis)
}

/// Like `seconds`, but 0 is allowed (answer at once).
fn seconds_or_zero(flag: &str, value: &str) -> Result<Duration, ConfigError> {
    match value.parse::<f64>() {
        Ok(0.0) => Ok(Duration::ZERO),
        _ => seconds(flag, value),
    }
}

fn seconds(flag: &str, value: &str) -> Result<Duration, ConfigError> {
    value
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0 && *s <= 86_400.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| bad_value(flag, value, "a number of seconds above 0"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Command, ConfigError> {
        Config::parse(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn defaults_match_the_documentation() {
        let Command::Run(c) = parse(&[]).unwrap() else {
            panic!()
        };
        assert_eq!((c.host.as_str(), c.port), ("127.0.0.1", 8081));
        assert_eq!(c.db.sqlite_path(), Some(std::path::Path::new("idem.db")));
        assert_eq!(c.runner.workers, 8);
        assert_eq!(c.runner.lease, Duration::from_secs(30));
        assert_eq!(c.runner.recover_interval, Duration::from_millis(200));
        assert!(!c.runner.chaos);
        assert_eq!(c.answer_cache_bytes, 64 << 20);
        assert_eq!(c.max_pending, 4096);
        assert_eq!(c.store.retention.key_ttl, Some(DEFAULT_KEY_TTL));
        assert_eq!((c.log_level, c.access_log), (Level::Info, true));
        assert!(c.auth_file.is_none() && !c.insecure_no_auth);
    }

    #[test]
    fn key_ttl_takes_fractions_and_zero_means_forever() {
        let ttl = |v: &str| match parse(&["--key-ttl", v]) {
            Ok(Command::Run(c)) => Ok(c.store.retention.key_ttl),
            Ok(Command::Help) => panic!(),
            Err(e) => Err(e),
        };
        assert_eq!(ttl("0.5"), Ok(Some(Duration::from_millis(500))));
        assert_eq!(ttl("0"), Ok(None));
        for bad in ["-1", "nan", "inf", "x", ""] {
            assert!(ttl(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_reachable_host_needs_auth_or_an_explicit_opt_out() {
        for host in ["127.0.0.1", "127.1.2.3", "localhost", "::1", "[::1]"] {
            assert!(parse(&["--host", host]).is_ok(), "{host}");
        }
        for host in ["0.0.0.0", "10.0.0.1", "::", "example.com"] {
            let err = parse(&["--host", host]).unwrap_err().to_string();
            assert!(
                err.contains("--auth-file") && err.contains("--insecure-no-auth"),
                "{err}"
            );
            assert!(parse(&["--host", host, "--insecure-no-auth"]).is_ok());
            assert!(parse(&["--host", host, "--auth-file", "a.json"]).is_ok());
        }
    }

    #[test]
    fn flags_are_read() {
        let Command::Run(c) = parse(&[
            "--port",
            "0",
            "--db",
            "x.db",
            "--workers",
            "2",
            "--lease-secs",
            "0.5",
            "--answer-cache-mib",
            "3",
            "--max-pending",
            "7",
            "--tools",
            "t.json",
            "--chaos",
        ])
        .unwrap() else {
            panic!()
        };
        assert_eq!(c.tools_file, Some(PathBuf::from("t.json")));
        assert_eq!(c.tools.specs().count(), 4, "the built-ins until load_tools");
        assert_eq!(c.answer_cache_bytes, 3 << 20);
        assert_eq!(c.max_pending, 7);
        assert_eq!(c.port, 0);
        assert_eq!(c.db.sqlite_path(), Some(std::path::Path::new("x.db")));
        assert_eq!(c.runner.workers, 2);
        assert_eq!(c.runner.lease, Duration::from_millis(500));
        assert!(c.runner.chaos);
    }

    #[test]
    fn bad_flags_are_refused() {
        for bad in [
            &["--nope"][..],
            &["--port"],
            &["--port", "70000"],
            &["--workers", "0"],
            &["--max-pending", "0"],
            &["--lease-secs", "-1"],
            &["--lease-secs", "nan"],
            &["--log-level", "verbose"],
            &["--access-log", "maybe"],
            &["--auth-file"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        assert!(matches!(parse(&["--help"]), Ok(Command::Help)));
    }
}
