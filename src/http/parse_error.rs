//! Why the parser rejected a request, and how each rejection is answered.
//!
//! This file owns the one list of parser failures and the one mapping from each
//! to its `ErrorCode` and message. It must never name a status number or a code
//! string itself: those come from the `ErrorCode` table.

use super::Response;
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
    /// The one place that says how each error is answered: (status, code, message).
    pub fn describe(self) -> (u16, &'static str, &'static str) {
        use ParseError::*;
        match self {
            MalformedRequestLine => (400, "bad_request", "malformed request line"),
            InvalidMethod => (400, "bad_request", "method is not a token"),
            InvalidTarget => (400, "bad_request", "invalid request target"),
            InvalidVersion => (400, "bad_request", "malformed HTTP version"),
            UnsupportedVersion => (
                505,
                "version_not_supported",
                "only HTTP/1.0 and HTTP/1.1 are supported",
            ),
            RequestLineTooLong => (414, "uri_too_long", "request line too long"),
            InvalidHeaderName => (400, "bad_request", "invalid header field name"),
            InvalidHeaderValue => (400, "bad_request", "invalid header field value"),
            ObsoleteLineFolding => (400, "bad_request", "obsolete line folding is not accepted"),
            HeadersTooLarge => (431, "headers_too_large", "header section too large"),
            InvalidHost => (400, "bad_request", "exactly one Host header is required"),
            ConflictingFraming => (
                400,
                "bad_request",
                "both Content-Length and Transfer-Encoding",
            ),
            InvalidContentLength => (400, "bad_request", "invalid Content-Length"),
            ConflictingContentLength => (400, "bad_request", "conflicting Content-Length values"),
            InvalidTransferEncoding => (400, "bad_request", "invalid Transfer-Encoding"),
            UnsupportedTransferEncoding => (
                501,
                "not_implemented",
                "only Transfer-Encoding: chunked is supported",
            ),
            InvalidChunkSize => (400, "bad_request", "invalid chunk size"),
            InvalidChunkExtension => (400, "bad_request", "invalid or oversized chunk extension"),
            ChunkLineTooLong => (400, "bad_request", "chunk size line too long"),
            MissingChunkTerminator => (400, "bad_request", "chunk data not followed by CRLF"),
            BareLineFeedInChunkedBody => (400, "bad_request", "bare LF in chunked body"),
            PayloadTooLarge => (413, "payload_too_large", "request body too large"),
            UnsupportedExpectation => (
                417,
                "expectation_failed",
                "only Expect: 100-continue is supported",
            ),
        }
    }

    /// The error response for this failure (the writer adds `Connection: close`).
    pub fn to_response(self) -> Response {
        let (status, code, message) = self.describe();
        Response::error(status, code, message)
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe().2)
    }
}

impl std::error::Error for ParseError {}
