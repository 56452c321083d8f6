//! `ApiError`: every way a request can fail, and the one place such a
//! failure becomes a response (`into_response`).
//!
//! This file owns the mapping from a failure to its `ErrorCode` and message.
//! It must never send an internal cause to the client: a store failure is
//! logged here and answered with a fixed message.

use crate::auth::AuthError;
use crate::http::{ErrorCode, Response};
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
    /// Canonical `args` over the limit: its size and the limit, in bytes.
    ArgsTooLarge {
        size: usize,
        limit: usize,
    },
    /// The key is taken by another request: the key and its call's id.
    Conflict {
        key: String,
        call_id: String,
    },
    /// A new key for an intent a live call already has (its business key).
    DuplicateIntent {
        call_id: String,
    },
    NotFound(String),
    MethodNotAllowed(&'static str),
    /// A new call refused: this many calls wait for a worker, and the
    /// bound (`--max-pending`) allows no more.
    Overloaded {
        pending: usize,
        max: usize,
    },
    Store(StoreError),
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        ApiError::Store(e)
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
            ApiError::BadRequest(message) => Response::from_error(ErrorCode::BadRequest, message),
            ApiError::ArgsTooLarge { size, limit } => Response::from_error(
                ErrorCode::PayloadTooLarge,
                format!("args is {size} bytes; the limit is {limit}"),
            ),
            ApiError::Conflict { key, call_id } => Response::from_error_naming(
                ErrorCode::IdempotencyConflict,
                format!(
                    "same key, different fingerprint: key {:?} belongs to call {} with other tool or args",
                    key, call_id
                ),
                Some(&call_id),
            ),
            ApiError::DuplicateIntent { call_id } => Response::from_error_naming(
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
            ApiError::Overloaded { pending, max } => Response::from_error(
                ErrorCode::Overloaded,
                format_args!(
                    "{pending} calls are pending (--max-pending {max}); \
                     retry with the same key after Retry-After"
                ),
            ),
            ApiError::Store(e @ StoreError::Unavailable(_)) => {
                crate::log::warn("database unavailable; answered 503")
                    .event("unavailable")
                    .cause(&e)
                    .emit();
                Response::from_error(
                    ErrorCode::Unavailable,
                    "the database is busy or unavailable; retry with the same key",
                )
            }
            ApiError::Store(e @ StoreError::Internal(_)) => {
                crate::log::error("internal error; answered 500")
                    .event("internal_error")
                    .cause(&e)
                    .emit();
                Response::from_error(ErrorCode::InternalError, "internal error")
            }
        }
    }
}
