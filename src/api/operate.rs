//! Who may operate: the one place that decides whether a request may re-run
//! calls, run a bulk job over them, or pause and resume a tool
//! (`may_operate`), and over whose calls (`operating_scope`). The role
//! decides whether at all (`Action::Operate`: an `operator` or an `admin`,
//! `auth::role`); the tenant, over whose calls: an operator acts on its own
//! tenant's calls, an admin on every tenant's. Pausing holds every tenant's
//! calls of a tool; issue 43 gives it to operators and admins alike.
//!
//! It reads only the authenticated tenant, and never the store.

use super::error::ApiError;
use crate::auth::{Action, Tenant};

/// What a request would do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Operation<'a> {
    /// Act on calls of this tenant (a re-run, a bulk job); `None`: of every
    /// tenant.
    OnCalls(Option<&'a str>),
    /// Pause or resume a tool: it holds every tenant's calls at once.
    OnTool,
}

/// Whether `tenant` may do `operation`: `403 role_required` for a role
/// that does not operate, `403 forbidden` for another tenant's calls.
pub(super) fn may_operate(tenant: &Tenant, operation: Operation<'_>) -> Result<(), ApiError> {
    ApiError::unless_may(tenant, Action::Operate)?;
    match operation {
        _ if tenant.admin => Ok(()),
        Operation::OnCalls(Some(owner)) if owner == &*tenant.name => Ok(()),
        Operation::OnCalls(_) => Err(ApiError::Forbidden("acting on another tenant's calls")),
        Operation::OnTool => Ok(()),
    }
}

/// The calls `tenant` may act on by id: every tenant's (`None`) for an
/// admin, else its own.
pub(super) fn operating_scope(tenant: &Tenant) -> Option<&str> {
    match tenant.admin {
        true => None,
        false => Some(&tenant.name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Role;
    use std::sync::Arc;

    fn tenant(name: &str, role: Role) -> Tenant {
        Tenant {
            name: Arc::from(name),
            admin: role == Role::Admin,
            role,
            principal: Arc::from(name),
            client_may_approve: false,
            notify: false,
        }
    }

    /// An operator acts on its own tenant's calls and on the tools; an
    /// admin on everyone's; no other role operates at all.
    #[test]
    fn an_operator_operates_its_own_calls_and_an_admin_everything() {
        let acme = tenant("acme", Role::Operator);
        assert!(may_operate(&acme, Operation::OnCalls(Some("acme"))).is_ok());
        assert!(may_operate(&acme, Operation::OnCalls(Some("globex"))).is_err());
        assert!(may_operate(&acme, Operation::OnCalls(None)).is_err());
        assert!(may_operate(&acme, Operation::OnTool).is_ok());
        assert_eq!(operating_scope(&acme), Some("acme"));
        for role in [Role::Viewer, Role::Caller, Role::Approver] {
            let other = tenant("acme", role);
            assert!(may_operate(&other, Operation::OnCalls(Some("acme"))).is_err());
            assert!(may_operate(&other, Operation::OnTool).is_err());
        }
        let ops = tenant("ops", Role::Admin);
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
