//! Byte classes and line helpers from the RFC grammars (RFC 9110 §5.6.2,
//! RFC 5234 core rules), shared by the head parser, the chunked decoder and
//! the writer.
//!
//! This file owns only what a byte or a line *is*; it must never decide what a
//! message means (that is `head` and `chunked`), and every function here is
//! total: no input makes it panic.

use super::parse_error::ParseError;

// tchar = "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" / "-" / "." /
//         "^" / "_" / "`" / "|" / "~" / DIGIT / ALPHA
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

// token = 1*tchar
pub(super) fn is_token(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(|&b| is_tchar(b))
}

pub(super) fn token_len(s: &[u8]) -> usize {
    s.iter().take_while(|&&b| is_tchar(b)).count()
}

// OWS = *( SP / HTAB )
pub(super) fn is_ows(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

pub(super) fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = s {
        if !is_ows(*first) {
            break;
        }
        s = rest;
    }
    while let [rest @ .., last] = s {
        if !is_ows(*last) {
            break;
        }
        s = rest;
    }
    s
}

pub(super) fn skip_ows(s: &[u8]) -> &[u8] {
    &s[s.iter().take_while(|&&b| is_ows(b)).count()..]
}

// field-vchar = VCHAR / obs-text; field-content also allows SP and HTAB inside.
pub(super) fn is_field_value_byte(b: u8) -> bool {
    b == b'\t' || (b >= 0x20 && b != 0x7f)
}

pub(super) fn find_lf(s: &[u8]) -> Option<usize> {
    s.iter().position(|&b| b == b'\n')
}

/// A line's content without its terminator, accepting a bare LF (RFC 9112 §2.2
/// lets a recipient treat a lone LF as a line terminator in the head).
pub(super) fn strip_optional_cr(line: &[u8]) -> &[u8] {
    match line {
        [rest @ .., b'\r'] => rest,
        _ => line,
    }
}

/// A line's content inside a chunked body, where CRLF is required: parsers that
/// disagree about bare LF there are a known request-smuggling vector.
pub(super) fn strip_required_cr(line: &[u8]) -> Result<&[u8], ParseError> {
    match line {
        [rest @ .., b'\r'] => Ok(rest),
        _ => Err(ParseError::BareLineFeedInChunkedBody),
    }
}
