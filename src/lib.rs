//! idempotent-tool: a service that executes tool calls for clients that retry,
//! and guarantees that a retry never becomes a second side effect.
//!
//! Module map (each owns one concern):
//!
//! - [`config`]: the server's command-line flags and their defaults; [`flag`]:
//!   the flag splitting every binary shares.
//! - [`http`]: HTTP/1.1 request parsing and response writing, by hand, and
//!   `ErrorCode`, the one table of error codes and their statuses.
//! - [`server`]: the accept loop, one thread per connection, limits and timeouts.
//! - [`descriptors`]: the open-file limit, raised at start-up, and the
//!   connection cap it allows.
//! - [`api`]: routes, validation, and the mapping from its errors to codes.
//! - [`store`]: the only module that speaks SQL — the `calls` state machine,
//!   leases, fencing, unique constraints, recovery, and group commit.
//! - [`runner`]: the worker pool that claims and runs calls, and the recovery loop.
//! - [`tools`]: the four tools, their validation and their outcomes.
//! - [`fingerprint`]: canonical JSON and the request fingerprint.
//! - [`chaos`]: failure hooks for tests and fault injection (`--chaos` only).
//! - [`app`]: start-up wiring; [`client`]: the HTTP client shared by the
//!   binaries, the bench and the tests.
//!
//! Architecture invariant: only `store` writes to the database, and only its
//! writer thread holds a write transaction; tools never run inside one.
#![forbid(unsafe_code)]

pub mod api;
pub mod app;
pub mod chaos;
pub mod client;
pub mod config;
pub mod descriptors;
pub mod fingerprint;
pub mod flag;
pub mod http;
pub mod runner;
pub mod server;
pub mod store;
pub mod sync;
pub mod tools;
