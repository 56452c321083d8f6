//! [`Limits`]: the size and time bounds every connection is held to, and the
//! subset of them the parser enforces.
//!
//! It only holds numbers; the server and the parser enforce them.

use crate::http::ParseLimits;
use std::time::Duration;

/// Size and time limits for every connection.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_request_line: usize,
    pub max_header_bytes: usize,
    pub max_headers: usize,
    pub max_body: usize,
    /// A request's head (and then its body) must arrive within this; it also
    /// bounds how long writing one response may block.
    pub request_timeout: Duration,
    /// An idle keep-alive connection is closed after this.
    pub idle_timeout: Duration,
    /// The longest a streamed body (an event stream) stays open; a stream
    /// still going then is cut and its connection closed. Its producer plans
    /// to end before (`Sink::remaining`).
    pub max_stream: Duration,
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        let parse = ParseLimits::default();
        Limits {
            max_request_line: parse.max_request_line,
            max_header_bytes: parse.max_header_bytes,
            max_headers: parse.max_headers,
            max_body: parse.max_body,
            request_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            max_stream: Duration::from_secs(15 * 60),
            max_connections: 1024,
        }
    }
}

impl Limits {
    /// The subset of the limits the parser enforces.
    pub fn parse_limits(&self) -> ParseLimits {
        ParseLimits {
            max_request_line: self.max_request_line,
            max_header_bytes: self.max_header_bytes,
            max_headers: self.max_headers,
            max_body: self.max_body,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_limits_agree_with_the_parser_defaults() {
        assert_eq!(Limits::default().parse_limits(), ParseLimits::default());
    }
}
