//! Why the parser rejected a request, and how each rejection is answered.
//!
//! This file owns the one list of parser failures and the one mapping from each
//! to its `ErrorCode` and message. It must never name a status number or a code
//! string itself: those come from the `ErrorCode` table.

use super::error_code::ErrorCode;
use super::message::Response;
use std::fmt;

/// Why a request was rejected. Every variant closes the connection: after any of
/// them we no longer know where the next request would start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// The request line is not exactly `method SP request-target SP HTTP-version`.
    MalformedRequestLine,
    /// The method is not a token.
    InvalidMethod,
    /// The request-target holds a byte that is not visible ASCII.
    InvalidTarget,
    /// The version is not of the form `HTTP/DIGIT.DIGIT`.
    InvalidVersion,
    /// A well-formed version other than HTTP/1.0 and HTTP/1.1.
    UnsupportedVersion,
    /// The request line is longer than `max_request_line`.
    RequestLineTooLong,
    /// A field line has no colon, or its name is empty or not a token.
    InvalidHeaderName,
    /// A field value holds a control byte (NUL, bare CR, DEL, ...).
    InvalidHeaderValue,
    /// A field line starts with SP or HTAB (obsolete line folding).
    ObsoleteLineFolding,
    /// The header (or trailer) section exceeds `max_header_bytes` or `max_headers`.
    HeadersTooLarge,
    /// An HTTP/1.1 request has no Host, or any request has more than one.
    InvalidHost,
    /// Both Content-Length and Transfer-Encoding are present.
    ConflictingFraming,
    /// A Content-Length value is not 1*DIGIT or does not fit in 64 bits.
    InvalidContentLength,
    /// Content-Length values (in a list or repeated fields) differ.
    ConflictingContentLength,
    /// Transfer-Encoding is empty or holds something that is not a coding.
    InvalidTransferEncoding,
    /// Transfer-Encoding is anything other than exactly `chunked`.
    UnsupportedTransferEncoding,
    /// A chunk-size is not hex, overflows 64 bits, or its line does not end in CRLF.
    InvalidChunkSize,
    /// Chunk extensions are malformed or longer than `MAX_CHUNK_EXT_BYTES`.
    InvalidChunkExtension,
    /// A chunk-size line is longer than any sane size plus extensions.
    ChunkLineTooLong,
    /// Chunk data is not followed by CRLF.
    MissingChunkTerminator,
    /// A trailer line inside the chunked body ends in a bare LF.
    BareLineFeedInChunkedBody,
    /// The body (declared or de-chunked so far) exceeds `max_body`.
    PayloadTooLarge,
    /// An Expect value other than `100-continue`.
    UnsupportedExpectation,
}

impl ParseError {
    /// The code this failure is answered with.
    pub fn code(self) -> ErrorCode {
        self.describe().0
    }

    /// What went wrong, for the client and for logs (no input is echoed).
    pub fn message(self) -> &'static str {
        self.describe().1
    }

    /// The one place that says how each failure is answered: (code, message).
    fn describe(self) -> (ErrorCode, &'static str) {
        use ErrorCode::{
            BadRequest, ExpectationFailed, HeadersTooLarge, NotImplemented, PayloadTooLarge,
            UriTooLong, VersionNotSupported,
        };
        match self {
            Self::MalformedRequestLine => (BadRequest, "malformed request line"),
            Self::InvalidMethod => (BadRequest, "method is not a token"),
            Self::InvalidTarget => (BadRequest, "invalid request target"),
            Self::InvalidVersion => (BadRequest, "malformed HTTP version"),
            Self::UnsupportedVersion => (
                VersionNotSupported,
                "only HTTP/1.0 and HTTP/1.1 are supported",
            ),
            Self::RequestLineTooLong => (UriTooLong, "request line too long"),
            Self::InvalidHeaderName => (BadRequest, "invalid header field name"),
            Self::InvalidHeaderValue => (BadRequest, "invalid header field value"),
            Self::ObsoleteLineFolding => (BadRequest, "obsolete line folding is not accepted"),
            Self::HeadersTooLarge => (HeadersTooLarge, "header section too large"),
            Self::InvalidHost => (BadRequest, "exactly one Host header is required"),
            Self::ConflictingFraming => (BadRequest, "both Content-Length and Transfer-Encoding"),
            Self::InvalidContentLength => (BadRequest, "invalid Content-Length"),
            Self::ConflictingContentLength => (BadRequest, "conflicting Content-Length values"),
            Self::InvalidTransferEncoding => (BadRequest, "invalid Transfer-Encoding"),
            Self::UnsupportedTransferEncoding => (
                NotImplemented,
                "only Transfer-Encoding: chunked is supported",
            ),
            Self::InvalidChunkSize => (BadRequest, "invalid chunk size"),
            Self::InvalidChunkExtension => (BadRequest, "invalid or oversized chunk extension"),
            Self::ChunkLineTooLong => (BadRequest, "chunk size line too long"),
            Self::MissingChunkTerminator => (BadRequest, "chunk data not followed by CRLF"),
            Self::BareLineFeedInChunkedBody => (BadRequest, "bare LF in chunked body"),
            Self::PayloadTooLarge => (PayloadTooLarge, "request body too large"),
            Self::UnsupportedExpectation => {
                (ExpectationFailed, "only Expect: 100-continue is supported")
            }
        }
    }

    /// The error response for this failure (the writer adds `Connection: close`).
    pub fn to_response(self) -> Response {
        Response::from_error(self.code(), self.message())
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for ParseError {}
