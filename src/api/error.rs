//! `ApiError`: every way a request can fail, and the one place such a
//! failure becomes a response (`into_response`).
//!
//! This file owns the mapping from the REST routes' own refusals to their
//! `ErrorCode` and message; what the call path refused (`CallError`, a store
//! failure) is mapped once in `calls::error` and only framed here, as MCP
//! frames the same refusal. It must never send an internal cause to the
//! client.

use crate::auth::{Action, AuthError, Role};
use crate::calls::{store_refusal, CallError, CallRefusal};
use crate::http::{ErrorCode, Refusal, Response};
use crate::store::StoreError;
use serde_json::Map;

/// Every way a request can fail, each with one status and one code.
#[derive(Debug)]
pub enum ApiError {
    /// No token, or a wrong one (only with `--auth-file`).
    Unauthorized(AuthError),
    /// An authenticated tenant that is not an admin, asking for what is.
    Forbidden(&'static str),
    /// A token whose role does not allow the action.
    RoleRequired {
        action: Action,
        role: Role,
    },
    MissingKey,
    BadRequest(String),
    NotFound(String),
    MethodNotAllowed(&'static str),
    /// The call path refused the request (`Calls`).
    Call(CallError),
    Store(StoreError),
    /// Without `--auth-file`, a `Host` that may be a rebound page's name.
    HostRefused(Refusal),
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        ApiError::Store(e)
    }
}

impl From<CallError> for ApiError {
    fn from(e: CallError) -> ApiError {
        ApiError::Call(e)
    }
}

impl ApiError {
    /// `Ok` when `tenant`'s role may take `action`; else `role_required`.
    pub(super) fn unless_may(tenant: &crate::auth::Tenant, action: Action) -> Result<(), ApiError> {
        match tenant.may(action) {
            true => Ok(()),
            false => Err(ApiError::RoleRequired {
                action,
                role: tenant.role,
            }),
        }
    }

    /// The one place errors become responses. Internal causes go to the log,
    /// never to the client.
    pub(super) fn into_response(self) -> Response {
        match self {
            ApiError::Unauthorized(e) => Response::from_error(ErrorCode::Unauthorized, e)
                .with_header("WWW-Authenticate", e.challenge()),
            ApiError::Forbidden(what) => Response::from_error(
                ErrorCode::Forbidden,
                format_args!("{what} needs an admin tenant"),
            ),
            ApiError::RoleRequired { action, role } => {
                let mut about = Map::new();
                about.insert("role".into(), action.role().as_str().into());
                Response::from_error_about(
                    ErrorCode::RoleRequired,
                    format_args!(
                        "{} needs the {} role (any of {}); this token's role is {role}",
                        action.describe(),
                        action.role(),
                        action.roles().join(", ")
                    ),
                    about,
                    Map::new(),
                )
            }
            ApiError::MissingKey => Response::from_error(
                ErrorCode::MissingIdempotencyKey,
                "the Idempotency-Key header is required",
            ),
            ApiError::BadRequest(message) => Response::from_error(ErrorCode::BadRequest, message),
            ApiError::NotFound(what) => {
                Response::from_error(ErrorCode::NotFound, format!("{what} not found"))
            }
            ApiError::MethodNotAllowed(allow) => Response::method_not_allowed(allow),
            ApiError::HostRefused(refusal) => Response::from(refusal),
            ApiError::Call(e) => refused(e.refusal()),
            ApiError::Store(e) => refused(store_refusal(e)),
        }
    }
}

/// A refusal of the call path, the REST way: its code's status and body,
/// naming the call it is about; a duplicate intent also points at that call
/// with `Location`.
fn refused(refusal: CallRefusal) -> Response {
    let response =
        Response::from_error_naming(refusal.code, &refusal.message, refusal.call_id.as_deref());
    match (refusal.code, &refusal.call_id) {
        (ErrorCode::DuplicateIntent, Some(call_id)) => {
            response.with_header("Location", &format!("/v1/tool-calls/{call_id}"))
        }
        _ => response,
    }
}
