//! `ErrorCode`: the one table of every error the service answers with — its
//! HTTP status and the stable string clients match on.
//!
//! This file owns the pairing of code, status and string, and nothing else: the
//! parser (`ParseError`), the API (`ApiError`) and the server's own answers
//! (408, 500, 503) each pick a code and a message, and `Response::from_error`
//! turns them into the one error shape. It must never change a code's string
//! or status (clients and README's "Error codes" table depend on both; a test
//! below reads that table), and never hold a message: messages belong to the
//! failure that happened.
//!
//! It lives in `http` rather than at the crate root because a code *is* an HTTP
//! answer (a status plus a JSON body), every user of it builds a `Response`, and
//! the parser, the lowest of them, is in `http`; a crate-level `error` module
//! would suggest a crate-wide error type, which this is not.

use std::fmt;

/// Declares `ErrorCode` from one list, so the variants, `ALL`, `status` and
/// `as_str` cannot disagree or miss a code.
macro_rules! error_codes {
    ($($(#[doc = $doc:literal])* $variant:ident => ($status:literal, $code:literal),)+) => {
        /// Every error code the service answers with.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $($(#[doc = $doc])* $variant,)+
        }

        impl ErrorCode {
            /// Every code, in status order.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant,)+];

            /// The HTTP status this code is always answered with.
            pub fn status(self) -> u16 {
                match self {
                    $(ErrorCode::$variant => $status,)+
                }
            }

            /// The stable string sent as `error.code`.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $code,)+
                }
            }
        }
    };
}

error_codes! {
    /// No `Idempotency-Key` header on a request that needs one.
    MissingIdempotencyKey => (400, "missing_idempotency_key"),
    /// Malformed HTTP framing, or a body, key or parameter the API rejects.
    BadRequest => (400, "bad_request"),
    /// No bearer token, or one that matches no tenant (with `--auth-file`);
    /// the answer carries `WWW-Authenticate`.
    Unauthorized => (401, "unauthorized"),
    /// An authenticated tenant asking for what only an admin may read
    /// (`/metrics`, `/stats?scope=all`). Never for another tenant's call:
    /// that is `not_found`, so existence does not leak.
    Forbidden => (403, "forbidden"),
    /// A token whose role does not allow the action: `error.role` names the
    /// role made for it (`caller` makes calls, `operator` cancels,
    /// `approver` approves and denies) and the message every role that may.
    RoleRequired => (403, "role_required"),
    /// `POST /mcp` reached by a `Host` that is neither loopback nor a
    /// `--public-host` name: a DNS-rebinding page, or a missing flag.
    HostNotAllowed => (403, "host_not_allowed"),
    /// `POST /mcp` from a web page whose `Origin` is neither the `Host`'s own
    /// nor on `--allowed-origin`'s list.
    OriginNotAllowed => (403, "origin_not_allowed"),
    /// Unknown call, key or path.
    NotFound => (404, "not_found"),
    /// A known path with the wrong method; the answer carries `Allow`.
    MethodNotAllowed => (405, "method_not_allowed"),
    /// The request's head or body did not arrive in time.
    RequestTimeout => (408, "request_timeout"),
    /// The key belongs to a call with another fingerprint.
    IdempotencyConflict => (409, "idempotency_conflict"),
    /// Another live call of the same tenant and tool has the same business
    /// key within its window (the tool's `business_key`, `on_duplicate:
    /// "reject"`); `error.call_id` and `Location` name it.
    DuplicateIntent => (409, "duplicate_intent"),
    /// A cancel of a call that had already succeeded or failed (or whose
    /// tool's answer was recorded before the stop took effect);
    /// `error.call_id` and `error.status` name it, and `call` is the call.
    CallSettled => (409, "call_settled"),
    /// An approve or deny of a call whose approval request was decided
    /// before (approved, denied, expired or cancelled): nothing changed;
    /// `error.call_id` and `error.decision` name it, and `approval` is the
    /// first decision.
    AlreadyDecided => (409, "already_decided"),
    /// An approve or deny whose `fingerprint` is not the waiting request's:
    /// what was reviewed is not what would run; nothing was decided.
    FingerprintMismatch => (409, "fingerprint_mismatch"),
    /// A re-run of a call that succeeded: its effect happened, it never
    /// runs again; `error.call_id` names it, `call` is the call.
    CallSucceeded => (409, "call_succeeded"),
    /// A re-run of a call whose approval was denied: it never runs;
    /// `error.call_id` and `error.status` name it, `call` is the call.
    CallDenied => (409, "call_denied"),
    /// A re-run of a call that is `awaiting_approval`, `pending` or
    /// `running`: it has not ended;
    /// `error.call_id` and `error.status` name it, `call` is the call.
    CallInFlight => (409, "call_in_flight"),
    /// A re-run of a call past its retention (`--key-ttl`): it may be purged
    /// at any moment and is not brought back; `error.call_id` names it.
    CallExpired => (410, "call_expired"),
    /// The body, or the canonical `args`, is over its limit.
    PayloadTooLarge => (413, "payload_too_large"),
    /// The request line is over its limit.
    UriTooLong => (414, "uri_too_long"),
    /// An `Expect` other than `100-continue`.
    ExpectationFailed => (417, "expectation_failed"),
    /// The header section is over its byte or field limit.
    HeadersTooLarge => (431, "headers_too_large"),
    /// A bug (a handler panic included); the cause is logged, never sent.
    InternalError => (500, "internal_error"),
    /// A `Transfer-Encoding` other than `chunked`.
    NotImplemented => (501, "not_implemented"),
    /// The database or the connection cap cannot take the request now. The
    /// answer carries `Retry-After`; retrying with the same key is always
    /// right (a write that timed out may still commit, and is then found).
    Unavailable => (503, "unavailable"),
    /// A new call refused: more calls wait for a worker in this process than
    /// `--max-pending` allows; nothing was changed. Carries `Retry-After`.
    Overloaded => (503, "overloaded"),
    /// An HTTP version other than 1.0 and 1.1.
    VersionNotSupported => (505, "version_not_supported"),
}

impl ErrorCode {
    /// Whether an answer with this code says "come back later": the
    /// `Retry-After` it carries (`RETRY_AFTER_SECS`), and that the same
    /// request with the same key is then right. `false`: sending the same
    /// request again gets the same answer.
    pub fn asks_to_retry_later(self) -> bool {
        matches!(self, ErrorCode::Unavailable | ErrorCode::Overloaded)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// README is part of the product: its error table is what clients code against.
    const README: &str = include_str!("../../README.md");

    /// `(status, code)` of every row of README's "Error codes" table that has a
    /// status. Rows without one (`retry_exhausted`) are printed by the client
    /// binary, not answered by the service.
    fn readme_error_table() -> Vec<(u16, String)> {
        let section = README
            .split("\n### Error codes\n")
            .nth(1)
            .expect("README has an \"Error codes\" section");
        let section = section.split("\n#").next().unwrap_or(section);
        section
            .lines()
            .filter_map(|line| {
                let mut cells = line.split('|').map(str::trim).skip(1);
                let status = cells.next()?.parse().ok()?;
                let code = cells.next()?.trim_matches('`').to_string();
                Some((status, code))
            })
            .collect()
    }

    #[test]
    fn every_code_has_a_distinct_string() {
        let strings: HashSet<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(strings.len(), ErrorCode::ALL.len());
    }

    #[test]
    fn every_code_is_an_error_status() {
        for code in ErrorCode::ALL {
            assert!((400..600).contains(&code.status()), "{code:?}");
        }
    }

    #[test]
    fn readme_error_table_lists_every_code_with_its_status() {
        let table = readme_error_table();
        for code in ErrorCode::ALL {
            let row = (code.status(), code.as_str().to_string());
            assert!(table.contains(&row), "README's error table lacks {row:?}");
        }
    }

    #[test]
    fn readme_error_table_documents_no_code_the_service_lacks() {
        let known: Vec<(u16, String)> = ErrorCode::ALL
            .iter()
            .map(|c| (c.status(), c.as_str().to_string()))
            .collect();
        let table = readme_error_table();
        assert!(!table.is_empty(), "no rows read from README's error table");
        for row in table {
            assert!(
                known.contains(&row),
                "README documents {row:?}, unknown here"
            );
        }
    }
}
