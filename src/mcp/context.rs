//! `Mcp` and `McpOptions`: what every MCP handler holds — the `Calls`
//! service the REST routes share, the endpoint's options, the `Host` and
//! `Origin` policy. A leaf of `mcp`: the handlers (`endpoint`, `tools_call`,
//! `tasks`, `listen`, ...) use it, it uses none of them; `endpoint` answers
//! a request with it (`Mcp::handle`).

use crate::calls::Calls;
use crate::http::OriginPolicy;
use crate::tools::Keyless;
use std::sync::Arc;
use std::time::Duration;

/// How the endpoint behaves; filled from the command line.
#[derive(Debug, Clone)]
pub struct McpOptions {
    /// How long a `tools/call` waits for its call to settle
    /// (`--mcp-wait-secs`) before answering `running` with the call's id.
    pub wait: Duration,
    /// `--mcp-keyless`: a keyless call's meaning for tools whose file names none.
    pub keyless: Option<Keyless>,
    /// `--mcp-content-window-secs`: how long keyless calls with the same
    /// tool and arguments are one call.
    pub content_window: Duration,
    /// `--key-ttl`: how long a settled call, so a task, is kept (`None`:
    /// forever); a task's `ttlMs`.
    pub key_ttl: Option<Duration>,
}

/// The MCP endpoint, over the `Calls` service the REST routes share.
pub struct Mcp {
    pub(super) calls: Arc<Calls>,
    pub(super) options: McpOptions,
    /// The `Host` names and `Origin`s served (`--public-host`,
    /// `--allowed-origin`): the DNS-rebinding guard.
    pub(super) origins: OriginPolicy,
}

impl Mcp {
    pub fn new(calls: Arc<Calls>, options: McpOptions, origins: OriginPolicy) -> Mcp {
        Mcp {
            calls,
            options,
            origins,
        }
    }
}
