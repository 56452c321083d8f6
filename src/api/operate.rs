//! Who may operate: the one place that decides whether a request may re-run
//! calls, run a bulk job over them, or pause and resume a tool
//! (`may_operate`), and over whose calls (`operating_scope`). Today a
//! tenant may act on its own calls, and an admin on every tenant's calls and
//! on the tools; where roles exist, an operator's will be decided here too.
//!
//! It reads only the authenticated tenant, and never the store.

use super::error::ApiError;
use crate::auth::Tenant;

/// What a request would do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Operation<'a> {
    /// Act on calls of this tenant (a re-run, a bulk job); `None`: of every
    /// tenant.
    OnCalls(Option<&'a str>),
    /// Pause or resume a tool: it holds every tenant's calls at once.
    OnTool,
}

/// Whether `tenant` may do `operation`; `403 forbidden` if not.
pub(super) fn may_operate(tenant: &Tenant, operation: Operation<'_>) -> Result<(), ApiError> {
    match operation {
        _ if tenant.admin => Ok(()),
        Operation::OnCalls(Some(owner)) if owner == &*tenant.name => Ok(()),
        Operation::OnCalls(_) => Err(ApiError::Forbidden("acting on another tenant's calls")),
        Operation::OnTool => Err(ApiError::Forbidden("pausing or resuming a tool")),
    }
}

/// The calls `tenant` may act on by id: every tenant's (`None`) when it
/// may operate on them all, else its own.
pub(super) fn operating_scope(tenant: &Tenant) -> Option<&str> {
    match may_operate(tenant, Operation::OnCalls(None)) {
        Ok(()) => None,
        Err(_) => Some(&tenant.name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn tenant(name: &str, admin: bool) -> Tenant {
        Tenant {
            name: Arc::from(name),
            admin,
        }
    }

    /// A tenant acts on its own calls only; an admin on everyone's and on
    /// the tools.
    #[test]
    fn a_tenant_operates_its_own_calls_and_an_admin_everything() {
        let acme = tenant("acme", false);
        assert!(may_operate(&acme, Operation::OnCalls(Some("acme"))).is_ok());
        assert!(may_operate(&acme, Operation::OnCalls(Some("globex"))).is_err());
        assert!(may_operate(&acme, Operation::OnCalls(None)).is_err());
        assert!(may_operate(&acme, Operation::OnTool).is_err());
        assert_eq!(operating_scope(&acme), Some("acme"));
        let ops = tenant("ops", true);
        for op in [
            Operation::OnCalls(Some("acme")),
            Operation::OnCalls(None),
            Operation::OnTool,
        ] {
            assert!(may_operate(&ops, op).is_ok(), "{op:?}");
        }
        assert_eq!(operating_scope(&ops), None);
    }
}
