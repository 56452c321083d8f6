//! Every integration test, compiled into one binary: one module per behaviour,
//! all sharing `support` (the real binaries started on free ports with temp
//! databases, raw clients, procfs, tmpfs). One binary links once, and one
//! test run schedules every test beside the others. Run one behaviour with
//! `cargo test --test it MODULE::`, e.g. `cargo test --test it crash::`.
//!
//! Names say where a test stands: `*_executor` drives a tool executor directly
//! (no server), `*_service` drives the same tool through the real service;
//! `pg_*` runs on the test process's private PostgreSQL.
//! Tests that need no process boundary run the service in this process
//! (`app::Service::start` on port 0); crash, signal, descriptor-limit, memory
//! and disk-full tests run real processes.
//!
//! Where tests live, the one rule: unit tests sit at the bottom of the file
//! they test, in `#[cfg(test)] mod tests { ... }`; when that would make the
//! file long (past ~600 lines), they move to the module's folder as
//! `foo/tests.rs` (declared `#[cfg(test)] mod tests;` in `foo.rs`), split by
//! topic into `foo/tests/<topic>.rs`. Temp databases, in both kinds of test,
//! come from `idempotent_tool::temp::TempDb`.

mod support;

mod api_input;
mod approvals;
mod backup;
mod bench;
mod business_key;
mod cancel;
mod chaos_proxy;
mod claim_batching;
mod cli;
mod client;
mod client_address;
mod client_key_vectors;
mod client_matrix;
mod closed_output;
mod configuration;
mod console;
mod console_api;
mod console_approvals;
mod console_operator;
mod console_outage;
mod crash;
mod created_claimed;
mod deploy;
mod descriptors;
mod disk_error;
mod disk_full;
mod docs;
mod docs_commands;
mod docs_samples;
mod effect_ids;
mod fault_inject;
mod file_modes;
mod headers;
mod host_check;
mod http_hostile;
mod import_cycles;
mod limits;
mod log_file;
mod mcp;
mod mcp_approvals;
mod mcp_conformance_list;
mod mcp_crash;
mod mcp_origin;
mod mcp_param_headers;
mod mcp_streams;
mod mcp_tasks;
mod memory;
mod module_maps;
mod observability;
mod openapi;
mod openapi_live;
mod operator;
mod paused_process;
mod pg_approvals;
mod pg_bench;
mod pg_claim;
mod pg_contract;
mod pg_failover;
mod pg_frozen;
mod pg_harness;
mod pg_nodes;
mod pg_outage;
mod pg_partition;
mod pg_paused_node;
mod pg_schema;
mod pg_service;
mod pg_statements;
mod promise_check;
mod pushback;
mod quiet_logs;
mod reclaim;
mod restore_recipe;
mod retention;
mod routes;
mod runner_slow_tools;
mod rust_version;
mod same_key;
mod server_connections;
mod shutdown_on_signal;
mod sqlite_file;
mod sqlite_frozen;
mod startup_refusals;
mod stats;
mod status_table;
mod stop_joins_every_thread;
mod systemd_notify;
mod tenants;
mod test_script;
mod tool_lifetime;
mod tool_metrics;
mod tools_command_executor;
mod tools_command_service;
mod tools_file_loading;
mod tools_http_executor;
mod tools_http_service;
mod torture;
mod verify;
mod waiting;
