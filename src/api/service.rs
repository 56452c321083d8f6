//! `Api`: the REST routes' state over one `Calls` service, and its
//! constructor — what every handler file (`router`, `cancel`, `approvals`,
//! `list`, `operations`, ...) holds. A leaf of `api`: the handlers add
//! their `impl Api` blocks beside their routes; this file names none of
//! them.

use super::health::HealthCache;
use super::promise_check::PromiseCheck;
use crate::auth::{Auth, Tenant};
use crate::calls::Calls;
use crate::http::{OriginPolicy, Request, Response, TrustedProxies};
use crate::log::Exchange;
use crate::metrics::Metrics;
use crate::request_id::RequestIds;
use crate::store::CallStore;
use std::sync::Arc;

/// The poll interval a `202` suggests in `Retry-After`, in whole seconds.
pub const POLL_AFTER_SECS: &str = "1";

/// An endpoint mounted on a path the router authenticates but does not
/// answer itself (`POST /mcp`): the request, its tenant, and the exchange to
/// note its key and call in. The router knows it only by this shape, so the
/// protocol behind it and the REST routes need not know each other.
pub type Endpoint = Box<dyn Fn(&Request, &Tenant, &mut Exchange) -> Response + Send + Sync>;

/// The REST routes, over one `Calls` service.
pub struct Api {
    pub(super) calls: Arc<Calls>,
    /// For the operations endpoints only (`/healthz`, `/stats`); calls are
    /// read through `calls`.
    pub(super) store: Arc<CallStore>,
    /// `POST /mcp`.
    pub(super) mcp: Endpoint,
    /// Who each request is: the tenants of `--auth-file`, or anonymous.
    pub(super) auth: Auth,
    pub(super) metrics: Arc<Metrics>,
    pub(super) request_ids: RequestIds,
    pub(super) health: HealthCache,
    /// `GET /v1/verify`: the one promise check that may run at a time.
    pub(super) promise_check: PromiseCheck,
    /// Whose `X-Forwarded-For` names the client in the access log.
    pub(super) trusted_proxies: TrustedProxies,
    /// The `Host` names answered without `--auth-file` (DNS rebinding).
    pub(super) trusted_names: OriginPolicy,
}

impl Api {
    /// The routes over `calls`, answering `POST /mcp` with `mcp`.
    pub fn new(
        calls: Arc<Calls>,
        store: Arc<CallStore>,
        auth: Auth,
        metrics: Arc<Metrics>,
        mcp: Endpoint,
        trusted_proxies: TrustedProxies,
        trusted_names: OriginPolicy,
    ) -> Api {
        let effect_tools = calls.tools().effect_tools();
        let promise_check = PromiseCheck::new(
            Arc::clone(&store),
            effect_tools.into_iter().map(String::from).collect(),
        );
        Api {
            calls,
            store,
            promise_check,
            mcp,
            auth,
            metrics,
            request_ids: RequestIds::new(),
            health: HealthCache::default(),
            trusted_proxies,
            trusted_names,
        }
    }
}
