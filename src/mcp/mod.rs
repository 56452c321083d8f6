//! `POST /mcp`: the Model Context Protocol over Streamable HTTP, on the same
//! hand-written server, authenticated like every other route (the request
//! runs in its token's tenant). A request is answered with one
//! `application/json` body, or — a `tools/call` with a `progressToken`
//! while its call runs, and `subscriptions/listen` — with a
//! `text/event-stream` written as things happen (`events`); a notification,
//! or a response the client posts, with `202` and no body. `GET /mcp` is
//! `405`: there is no stream outside a request.
//!
//! Map (this file holds no type): `endpoint` (`Mcp`: the `Host` and `Origin` checks,
//! batches, and each message answered), `jsonrpc` (the message shape and the
//! error codes), `handshake` (revisions: `initialize`, `server/discover`,
//! `ping`, the `MCP-Protocol-Version` header and 2026-07-28's mirrored
//! headers), `param_headers` (SEP-2243's header values and a tool's
//! `Mcp-Param-*` headers), `tools_list`, `tools_call` (the exactly-once path, through
//! `Calls::submit`, the same as `POST /v1/tool-calls`), `keyless` (the key
//! of a call that sends none), `tasks` (the Tasks extension: the task is the
//! call), `approval_input` (a call awaiting approval put to the client that
//! made it as an input request, where it may decide), `listen` (`subscriptions/listen`: task status notifications),
//! `call_result` (a call as a `CallToolResult`), `progress`
//! (`notifications/progress` while a call is waited for) and `events` (an
//! answer as an event stream).
//!
//! HTTP statuses: `200` for every JSON-RPC answer of a handshake revision
//! (errors included, as JSON-RPC over HTTP is usually spoken); `400` for a
//! body that is not JSON-RPC, a batch the revision forbids, an unsupported
//! version or a header mismatch; 2026-07-28's unknown method is `404`, as
//! that revision requires. `403` (`host_not_allowed`, `origin_not_allowed`)
//! for a `Host` or `Origin` this server does not trust (`http::OriginPolicy`:
//! DNS rebinding).
//!
//! This module never runs a tool, keeps no session, and never puts a token,
//! a header value or a call's arguments in a log line.

mod approval_input;
mod call_result;
mod endpoint;
mod events;
pub mod handshake;
pub mod jsonrpc;
mod keyless;
mod listen;
mod param_headers;
mod progress;
pub mod tasks;
pub mod tools_call;
pub mod tools_list;

pub use endpoint::{Mcp, McpOptions};
pub use keyless::summary as keyless_summary;
