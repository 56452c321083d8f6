//! idempotent-tool: a service that executes tool calls for clients that retry,
//! and guarantees that a retry never becomes a second side effect.
//!
//! Module map (each owns one concern):
//!
//! - [`config`]: the server's flags, their defaults, their environment
//!   variables and secret files; [`flag`]:
//!   the flag splitting every binary shares.
//! - [`http`]: HTTP/1.1 request parsing and response writing, by hand, and
//!   `ErrorCode`, the one table of error codes and their statuses;
//!   `Response::from_error` is the one way an error becomes an answer.
//! - `input`: client JSON parsed strictly (no repeated member names) and
//!   client input quoted in error messages (at most 100 bytes).
//! - [`server`]: the accept loop, one thread per connection, limits and timeouts.
//! - [`descriptors`]: the open-file limit, raised at start-up, and the
//!   connection cap it allows.
//! - `calls`: the `Calls` service both transports hold — submit (checks,
//!   key cache, pushback, create-or-get), get by id or key, the audit
//!   timeline, and the wait until a call settles.
//! - [`api`]: the REST routes, validation, and the mapping from its errors
//!   to codes.
//! - `mcp`: `POST /mcp`, the Model Context Protocol (JSON-RPC over
//!   Streamable HTTP) whose `tools/call` goes through the same `Calls`, so
//!   agents get the same exactly-once guarantee. `api` and `mcp` do not
//!   know each other: `app` mounts MCP on the router as an `Endpoint`.
//! - [`store`]: the only module that speaks SQL — the state machine of a call,
//!   leases, fencing, unique constraints, recovery, and group commit; and
//!   [`store::verify`], `idempotent-tool verify`, every invariant checked
//!   read-only on a database file.
//! - `runner`: the worker pool that claims and runs calls (automatic retries,
//!   per-tool concurrency caps, lease heartbeats), and the recovery loop.
//! - [`tools`]: the tool registry (built-ins, or the `--tools` file), argument
//!   schemas, the `http` and `command` executors with their outcomes, and
//!   `ToolErrorCode`, the one table of the codes a failed attempt records.
//! - [`status`]: the call statuses, declared once in one table (the enum,
//!   their words, which are terminal); every other spelling of the set is
//!   taken from it or held to it by a test. It imports nothing of the crate.
//! - [`fingerprint`]: canonical JSON and the request fingerprint.
//! - `chaos`: failure hooks for tests and fault injection (`--chaos` only).
//! - `lock`: the one lock helper (a poisoned lock is taken as it is);
//!   `temp`: temporary folders and databases for the tests and the bench,
//!   and a private PostgreSQL for the tests only (feature `testing`).
//! - `auth`: tenants, their tokens and roles, the `--auth-file` loader and
//!   bearer-token checks; `webhook`: the signed notifications of calls that
//!   wait for approval, delivered from the store's outbox by a thread of
//!   their own.
//! - [`log`]: JSON-lines events and access records on stderr; [`rfc3339`]:
//!   the times it writes, and the strict form the list reads.
//! - `metrics`: counters, gauges and histograms in atomics, rendered for
//!   Prometheus; `metrics::service` names the families this service exports.
//! - [`console`]: the web console at `/ui` (HTML, CSS and JavaScript
//!   compiled in), served with its security headers; its pages read the
//!   REST API like any client.
//! - `request_id`: the `X-Request-Id` kept or made for each request.
//! - [`app`]: start-up wiring; [`client`]: the HTTP client shared by the
//!   binaries, the bench and the tests.
//! - [`cli`]: the `idempotent-tool` command line — the service's run (flags,
//!   signals, systemd notification), its subcommands (`verify`), `--version`,
//!   exit statuses — and [`cli::console`], the printing every binary uses so
//!   that a closed stdout or stderr never panics.
//!
//! Architecture invariant: only `store` writes to the database — on SQLite
//! only through its writer thread, the one holder of a write transaction; on
//! PostgreSQL in short transactions of each operation's own — and tools never
//! run inside one.
//! `tools` and `store` do not know each other: the `runner` turns an outcome
//! into the store's records.
//!
//! The public surface is what the binaries (`src/bin/`, `bench/`), the
//! integration tests and the fuzz targets use; every other module is
//! `pub(crate)`. `temp::postgres` (a PostgreSQL installer), `store::bulk` (the
//! bench's loaders, which bypass the writer) and `store::list_sql` (the
//! list's statements, whose plans tests read) exist only with the `testing`
//! feature, which `cargo test` turns on (and the bench's loading runs need:
//! `--features testing`); a release build of the service leaves them out.
#![forbid(unsafe_code)]

pub mod api;
pub mod app;
pub(crate) mod auth;
pub(crate) mod calls;
pub(crate) mod chaos;
pub mod cli;
pub mod client;
pub mod config;
pub mod console;
pub mod descriptors;
pub mod fingerprint;
pub mod flag;
pub mod http;
pub(crate) mod input;
pub(crate) mod lock;
pub mod log;
pub(crate) mod mcp;
pub(crate) mod metrics;
pub(crate) mod request_id;
pub mod rfc3339;
pub(crate) mod runner;
pub mod server;
pub mod status;
pub mod store;
pub mod temp;
pub mod tools;
pub mod webhook;
