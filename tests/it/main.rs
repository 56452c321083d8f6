//! Every integration test, compiled into one binary: one module per behaviour,
//! all sharing `support` (the real binaries started on free ports with temp
//! databases, raw clients, procfs, tmpfs). One binary links once and lets one
//! `cargo test` run schedule every test against the others.
//!
//! Run one behaviour with `cargo test --test it MODULE::`, e.g.
//! `cargo test --test it crash::`.

mod support;

mod api_input;
mod bench;
mod chaos_proxy;
mod cli;
mod client;
mod command_tool;
mod crash;
mod descriptors;
mod disk_full;
mod fault_inject;
mod headers;
mod http_hostile;
mod http_tool;
mod lifecycle;
mod memory;
mod observability;
mod openapi;
mod openapi_live;
mod reclaim;
mod retention;
mod server;
mod service;
mod shutdown;
mod stop;
mod tenants;
mod tools_command;
mod tools_file;
mod tools_http;
mod tools_runner;
mod torture;
mod verify;
mod waiting;
