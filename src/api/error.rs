//! `ApiError`: every way a request can fail, and the one place such a
//! failure becomes a response (`into_response`).
//!
//! This file owns the mapping from a failure to its `ErrorCode` and message:
//! the REST route's own refusals, and what the call path refused
//! (`CallError`), said the REST way. It must never send an internal cause to
//! the client: a store failure is logged here and answered with a fixed
//! message.

use crate::auth::AuthError;
use crate::calls::CallError;
use crate::http::{ErrorCode, Refusal, Response};
use crate::store::StoreError;

/// Every way a request can fail, each with one status and one code.
#[derive(Debug)]
pub enum ApiError {
    /// No token, or a wrong one (only with `--auth-file`).
    Unauthorized(AuthError),
    /// An authenticated tenant that is not an admin, asking for what is.
    Forbidden(&'static str),
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
            ApiError::MissingKey => Response::from_error(
                ErrorCode::MissingIdempotencyKey,
                "the Idempotency-Key header is required",
            ),
            ApiError::BadRequest(message) | ApiError::Call(CallError::Invalid(message)) => {
                Response::from_error(ErrorCode::BadRequest, message)
            }
            ApiError::Call(CallError::ArgsTooLarge { size, limit }) => Response::from_error(
                ErrorCode::PayloadTooLarge,
                format!("args is {size} bytes; the limit is {limit}"),
            ),
            ApiError::Call(CallError::Conflict { key, call_id }) => Response::from_error_naming(
                ErrorCode::IdempotencyConflict,
                format!(
                    "same key, different fingerprint: key {:?} belongs to call {} with other tool or args",
                    key, call_id
                ),
                Some(&call_id),
            ),
            ApiError::Call(CallError::DuplicateIntent { call_id }) => Response::from_error_naming(
                ErrorCode::DuplicateIntent,
                format!(
                    "call {call_id} has the same business key within its window; \
                     this request created nothing"
                ),
                Some(&call_id),
            )
            .with_header("Location", &format!("/v1/tool-calls/{call_id}")),
            ApiError::NotFound(what) => {
                Response::from_error(ErrorCode::NotFound, format!("{what} not found"))
            }
            ApiError::MethodNotAllowed(allow) => Response::method_not_allowed(allow),
            ApiError::Call(CallError::Overloaded { pending, max }) => Response::from_error(
                ErrorCode::Overloaded,
                format_args!(
                    "{pending} calls are pending (--max-pending {max}); \
                     retry with the same key after Retry-After"
                ),
            ),
            ApiError::HostRefused(refusal) => Response::from(refusal),
            ApiError::Store(e) | ApiError::Call(CallError::Store(e)) => store_failure(e),
        }
    }
}

/// A store failure: `503 unavailable` (retry with the same key: a write that
/// timed out may still commit) or `500 internal_error`, its cause logged.
fn store_failure(e: StoreError) -> Response {
    match e {
        StoreError::Unavailable(_) => {
            crate::log::warn("database unavailable; answered 503")
                .event("unavailable")
                .cause(&e)
                .emit();
            Response::from_error(
                ErrorCode::Unavailable,
                "the database is busy or unavailable; retry with the same key",
            )
        }
        StoreError::Internal(_) => {
            crate::log::error("internal error; answered 500")
                .event("internal_error")
                .cause(&e)
                .emit();
            Response::from_error(ErrorCode::InternalError, "internal error")
        }
    }
}
