//! Roles: what a token may do within its tenant, as one table. Every role
//! reads its tenant's calls (lists, details, the audit, the console, the
//! approval queue); beyond that:
//!
//! | Role | Makes calls (REST, MCP) | Cancels | Re-runs, bulk jobs, pauses tools | Approves, denies | Every tenant |
//! |---|---|---|---|---|---|
//! | `viewer` | | | | | |
//! | `caller` (a tenant's token without a role: today's meaning) | yes | yes | | | |
//! | `operator` | | yes | yes | | |
//! | `approver` | | yes | | yes | |
//! | `admin` (`"admin": true`) | yes | yes | yes | yes | yes |
//!
//! So no role but `admin` both makes calls and decides them: a caller can
//! never approve its own call. A refusal (`role_required`) names the role
//! made for the action and lists every role that may take it. This file decides nothing about a request
//! but through `may`; it never reads a token.

use std::fmt;

/// What a token may do within its tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Reads only.
    Viewer,
    /// Makes and reads its tenant's calls, and cancels them (a tenant's
    /// token before roles existed).
    Caller,
    /// Reads, cancels, re-runs calls, runs bulk jobs, pauses tools.
    Operator,
    /// Reads, cancels, and approves or denies waiting calls.
    Approver,
    /// Everything, in every tenant.
    Admin,
}

/// An action a route or a console button takes, beyond reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Make a call (`POST /v1/tool-calls`, `POST /mcp`).
    Call,
    /// Cancel a call.
    Cancel,
    /// Approve or deny a waiting call.
    Decide,
    /// Re-run a call, run a bulk job, pause or resume a tool (over whose
    /// calls: `api::operate`).
    Operate,
}

impl Role {
    /// Every role, from the least to the most.
    pub const ALL: [Role; 5] = [
        Role::Viewer,
        Role::Caller,
        Role::Operator,
        Role::Approver,
        Role::Admin,
    ];

    /// The word the auth file and the API use.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Caller => "caller",
            Role::Operator => "operator",
            Role::Approver => "approver",
            Role::Admin => "admin",
        }
    }

    /// The role a word names.
    pub fn parse(word: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == word)
    }

    /// Whether this role may take `action`: the table above.
    pub fn may(self, action: Action) -> bool {
        match action {
            Action::Call => matches!(self, Role::Caller | Role::Admin),
            Action::Cancel => !matches!(self, Role::Viewer),
            Action::Decide => matches!(self, Role::Approver | Role::Admin),
            Action::Operate => matches!(self, Role::Operator | Role::Admin),
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Action {
    /// The role a refusal names: the one that exists for this action
    /// (`caller` makes calls, `operator` cancels and operates, `approver`
    /// decides).
    pub fn role(self) -> Role {
        match self {
            Action::Call => Role::Caller,
            Action::Cancel => Role::Operator,
            Action::Decide => Role::Approver,
            Action::Operate => Role::Operator,
        }
    }

    /// Every role that may take it, for a refusal's message.
    pub fn roles(self) -> Vec<&'static str> {
        Role::ALL
            .into_iter()
            .filter(|role| role.may(self))
            .map(Role::as_str)
            .collect()
    }

    /// What it is, for a refusal's message.
    pub fn describe(self) -> &'static str {
        match self {
            Action::Call => "making a call",
            Action::Cancel => "cancelling a call",
            Action::Decide => "approving or denying a call",
            Action::Operate => "re-running calls, a bulk action or pausing a tool",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_holds() {
        let may = |role: Role| {
            [
                Action::Call,
                Action::Cancel,
                Action::Decide,
                Action::Operate,
            ]
            .map(|a| role.may(a))
        };
        assert_eq!(may(Role::Viewer), [false, false, false, false]);
        assert_eq!(may(Role::Caller), [true, true, false, false]);
        assert_eq!(may(Role::Operator), [false, true, false, true]);
        assert_eq!(may(Role::Approver), [false, true, true, false]);
        assert_eq!(may(Role::Admin), [true, true, true, true]);
    }

    #[test]
    fn no_role_but_admin_both_calls_and_decides() {
        for role in Role::ALL {
            if role.may(Action::Call) && role.may(Action::Decide) {
                assert_eq!(role, Role::Admin);
            }
        }
    }

    #[test]
    fn a_refusal_names_a_role_that_may_and_words_parse_back() {
        for action in [
            Action::Call,
            Action::Cancel,
            Action::Decide,
            Action::Operate,
        ] {
            assert!(action.role().may(action), "{action:?}");
            assert!(action.roles().contains(&action.role().as_str()));
        }
        assert_eq!(
            Action::Cancel.roles(),
            ["caller", "operator", "approver", "admin"]
        );
        for role in Role::ALL {
            assert_eq!(Role::parse(role.as_str()), Some(role));
        }
        assert_eq!(Role::parse("root"), None);
    }
}
