//! What every stage of the parser shares: the limits it enforces while bytes
//! arrive (`ParseLimits`), and its answer when the bytes so far are not yet a
//! whole unit (`ParseStatus::Partial`).
//!
//! This file owns those two types only; it never parses.

/// The outcome of parsing what has arrived so far (httparse-style): either the
/// thing is complete, or more bytes are needed. Errors are kept apart in `Err`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseStatus<T> {
    Complete(T),
    Partial,
}

/// The size limits the parser enforces while bytes arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseLimits {
    /// Longest request line, without its CRLF (414 past it).
    pub max_request_line: usize,
    /// Most bytes in the header section, CRLFs and the final empty line included
    /// (431 past it); the trailer section of a chunked body has the same budget.
    pub max_header_bytes: usize,
    /// Most field lines in the header section, and again in the trailer section.
    pub max_headers: usize,
    /// Largest body, declared or de-chunked (413 past it).
    pub max_body: usize,
}

impl Default for ParseLimits {
    fn default() -> Self {
        ParseLimits {
            max_request_line: 8 * 1024,
            max_header_bytes: 16 * 1024,
            max_headers: 64,
            max_body: 1024 * 1024,
        }
    }
}
