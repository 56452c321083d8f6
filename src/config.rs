//! The service's configuration: every flag, its default and its validation,
//! from the command line and from the environment (`IDEMPOTENT_TOOL_*`, a
//! flag given wins), and the secrets read from files.
//!
//! Map: this file holds `Config`, its defaults, `OPTIONS` (the options part of
//! `--help`) and the order sources are applied in; `flags` what each flag
//! sets and how it is shown back; `environment` the variables, `_FILE`
//! variables and secret files; `effective` what `--print-config` prints;
//! `error` `ConfigError`.
//!
//! `Config::parse` never exits or prints; the binary decides what a bad flag
//! costs (one line on stderr, exit 2).

mod effective;
mod environment;
mod error;
mod flags;

pub use effective::{describe, Origin, Origins};
pub use environment::{forget as forget_variables, service_variables, variable_of, PREFIX};
pub use error::ConfigError;
pub use flags::{Flag, FLAGS};

use crate::flag::{FlagError, Flags};
use crate::http::OriginPolicy;
use crate::http::TrustedProxies;
use crate::log::Level;
use crate::runner::RunnerOptions;
use crate::server::Limits;
use crate::store::{Database, DbSchema, Retention, StoreOptions};
use crate::tools::{Keyless, ToolFileError, ToolRegistry, MAX_SLEEP_SECS};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The options part of `--help`: every flag the service takes.
pub const OPTIONS: &str = "  --host HOST                 address to bind (default 127.0.0.1)
  --port PORT                 port to bind; 0 picks a free one (default 8081)
  --db PATH|URL               SQLite database file (default idem.db), or a
                              postgres://user:password@host:port/dbname URL
                              (sslmode=disable|prefer|require|verify-ca|verify-full)
  --db-schema NAME            PostgreSQL: the schema holding the service's tables
                              (default idempotent_tool); two deployments may share
                              a database under two names
  --db-password-file FILE     PostgreSQL: the password of the --db URL, read
                              from this file (a container secret); the URL
                              then gives none
  --db-pool N                 PostgreSQL: most connections this node opens (default 16)
  --db-ca-file FILE           PostgreSQL: trust these PEM roots for TLS, not the system's
  --db-timeout-ms MS          every wait on the database ends within this, or is
                              answered 503: PostgreSQL's connections and statements,
                              SQLite's writes, reads and health check (default 4000)
  --db-connect-timeout-ms MS  PostgreSQL: one attempt to connect to one host; a
                              multi-host URL then tries the next (default 2000)
  --db-tcp-timeout-ms MS      PostgreSQL: TCP_USER_TIMEOUT and keepalive: a peer that
                              stops acknowledging is dropped within this (default 10000)
  --accept-restored-copy TIME SQLite: start on a copy backup made, whose snapshot
                              was at TIME (as the refusal to start on it prints it);
                              keys accepted after TIME are not in it and would run
                              again. Recorded in the audit and the log
  --workers N                 worker threads running tools (default 8)
  --lease-secs SECS           lease per attempt, fractions allowed (default 30);
                              extended every third of it while the tool runs
  --tools FILE                the tools this server runs, from a JSON file
                              (default: the built-ins charge, send_email,
                              sleep, fail); a mistake in it exits 2
  --recover-interval-ms MS    how often recovery runs (default 200)
  --busy-timeout-ms MS        SQLite busy timeout (a lock held by another process);
                              PostgreSQL lock_timeout and wait for a pooled
                              connection (default 5000)
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
  --mcp-keyless POLICY        an MCP tools/call without an idempotency key, for
                              tools whose tools file names no \"keyless\": content
                              (the same tool and arguments within the window are
                              one call), fresh (a new call each time), reject, or
                              auto: content, fresh for a tool with a business key
                              (default auto)
  --mcp-content-window-secs SECS
                              how long keyless calls with the same tool and
                              arguments are one call (default 600)
  --public-host NAMES         names (no port, comma-separated) clients reach the
                              service by, besides loopback ones (and, with no
                              auth file, IP addresses); any other Host is
                              refused 403 (a DNS-rebinding guard)
  --allowed-origin ORIGINS    web page origins (http[s]://host[:port],
                              comma-separated) allowed to call /mcp across origins
  --key-ttl SECS              keep terminal calls this long after their last
                              update, then purge them (default 86400; fractions
                              allowed; 0 keeps them forever)
  --log-level LEVEL           error, warn, info or debug (default info)
  --access-log on|off         one JSON line per request (default on)
  --log-file PATH             append the log to this file instead of stderr;
                              SIGHUP opens it again (for logrotate)
  --trusted-proxy LIST        addresses or networks, comma-separated, whose
                              X-Forwarded-For names the client in the access
                              log (default none: the peer's address)
  --chaos                     honour chaos hooks in args (tests, fault injection)
  --print-config              print the configuration in force, secrets
                              redacted, and exit
  --version                   print the version and the schema versions it
                              writes, and exit (also -V)
  --help                      print this help (also -h)

environment:
  Every option above but the last three can also come from a variable:
  IDEMPOTENT_TOOL_ and its name in capitals, dashes as underscores
  (IDEMPOTENT_TOOL_PORT=9000; IDEMPOTENT_TOOL_CHAOS=1). A flag on the command
  line wins. IDEMPOTENT_TOOL_<NAME>_FILE=PATH reads the value from a file, as
  containers pass secrets (IDEMPOTENT_TOOL_DB_FILE=/run/secrets/db_url).
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

/// `--mcp-content-window-secs`'s default: ten minutes, as long as a client
/// plausibly re-sends a call it got no answer to (SQS FIFO's content
/// deduplication window is five).
pub const DEFAULT_MCP_CONTENT_WINDOW: Duration = Duration::from_secs(600);

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
    /// `--mcp-keyless`: what an MCP `tools/call` without a key means for a
    /// tool whose tools file says nothing (`None`: `content` without a
    /// business key, `fresh` with one).
    pub mcp_keyless: Option<Keyless>,
    /// `--mcp-content-window-secs`: how long keyless calls with the same
    /// tool and arguments are one call (`content`).
    pub mcp_content_window: Duration,
    /// The `Host` names and `Origin`s trusted beyond loopback (`--public-host`,
    /// `--allowed-origin`): `/mcp` always, the other routes without `--auth-file`.
    pub trusted_names: OriginPolicy,
    /// `--log-file`: where the log goes instead of stderr.
    pub log_file: Option<PathBuf>,
    /// Whose `X-Forwarded-For` names the client in the access log.
    pub trusted_proxies: TrustedProxies,
    /// `--db-schema`: the PostgreSQL schema of the service's tables, given to
    /// `db` once the flags are parsed.
    pub db_schema: DbSchema,
    /// `--db-password-file`: read into `db` once the flags are parsed.
    pub db_password_file: Option<PathBuf>,
    /// Where each flag given came from (for `--print-config`).
    pub origins: Origins,
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
            mcp_keyless: None,
            mcp_content_window: DEFAULT_MCP_CONTENT_WINDOW,
            trusted_names: OriginPolicy::default(),
            log_file: None,
            trusted_proxies: TrustedProxies::default(),
            db_schema: DbSchema::default(),
            db_password_file: None,
            origins: Origins::default(),
        }
    }
}

/// What the command line asked for.
#[derive(Debug)]
pub enum Command {
    Run(Box<Config>),
    /// `--print-config`: show this configuration and exit.
    PrintConfig(Box<Config>),
    Help,
    Version,
}

/// The command line read for its shape only: the configuring flags given,
/// with their values, and the action asked for.
struct CommandLine {
    given: Vec<(&'static Flag, String)>,
    print_config: bool,
}

/// `--help` or `--version`, which end the reading at once.
enum Action {
    Help,
    Version,
}

fn read_command_line<I: IntoIterator<Item = String>>(
    args: I,
) -> Result<Result<CommandLine, Action>, ConfigError> {
    let mut flags = Flags::new(args);
    let mut line = CommandLine {
        given: Vec::new(),
        print_config: false,
    };
    while let Some(written) = flags.next_flag()? {
        match written.as_str() {
            "--help" | "-h" => return Ok(Err(Action::Help)),
            "--version" | "-V" => return Ok(Err(Action::Version)),
            "--print-config" => line.print_config = true,
            _ => {
                let flag = flags::find(&written).ok_or(FlagError::Unknown(written))?;
                let value = if flag.takes_value {
                    flags.value()?
                } else {
                    String::new()
                };
                line.given.push((flag, value));
            }
        }
    }
    Ok(Ok(line))
}

impl Config {
    /// Parse the arguments after the program name, with no environment
    /// (the tests and the bench).
    pub fn parse<I: IntoIterator<Item = String>>(args: I) -> Result<Command, ConfigError> {
        Config::parse_with(args, &[])
    }

    /// Parse the arguments over the service's `variables` (`IDEMPOTENT_TOOL_*`,
    /// by name): the defaults, then the variables, then the command line, so
    /// a flag given wins; then `--db-password-file` is read.
    pub fn parse_with<I: IntoIterator<Item = String>>(
        args: I,
        variables: &[(String, String)],
    ) -> Result<Command, ConfigError> {
        let line = match read_command_line(args)? {
            Ok(line) => line,
            Err(Action::Help) => return Ok(Command::Help),
            Err(Action::Version) => return Ok(Command::Version),
        };
        let mut config = Config::default();
        environment::apply(&mut config, variables)?;
        for (flag, value) in &line.given {
            flags::set(&mut config, flag, value)?;
            config.origins.set_by_command_line(flag.name);
        }
        environment::apply_password_file(&mut config)?;
        let schema = config.db_schema.clone();
        config.db.set_schema(&schema);
        if config.auth_file.is_none() && !config.insecure_no_auth && !is_loopback(&config.host) {
            return Err(ConfigError::ExposedWithoutAuth {
                host: config.host.chars().take(64).collect(),
            });
        }
        Ok(if line.print_config {
            Command::PrintConfig(Box::new(config))
        } else {
            Command::Run(Box::new(config))
        })
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

#[cfg(test)]
mod tests;
