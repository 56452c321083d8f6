//! The request head: request line, header section, and what the headers say
//! about Host, body framing and `Expect` (RFC 9112 §2–§6, RFC 9110 §10.1.1).
//!
//! This file owns deciding where a head ends and how the body after it is
//! delimited. It never reads a body and never guesses: wherever two readings of
//! the bytes are possible it returns an error. It scans each byte of a head at
//! most once however the head arrives (see `HeadScan`).

use super::message::{Request, Version};
use super::parse_error::ParseError;
use super::parsing::{ParseLimits, ParseStatus};
use super::syntax::{find_lf, is_field_value_byte, is_ows, is_token, strip_optional_cr, trim_ows};

/// How the body of a request is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body (no Content-Length or Transfer-Encoding, or Content-Length: 0).
    None,
    /// Exactly this many bytes follow the head.
    Length(u64),
    /// A chunked body follows the head.
    Chunked,
}

/// A validated request head: the request without its body, plus how to read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// The request with an empty body.
    pub request: Request,
    pub framing: Framing,
    /// The client sent `Expect: 100-continue` on an HTTP/1.1 request with a body,
    /// and is waiting for `CONTINUE_100` before sending it.
    pub expect_continue: bool,
    /// Bytes of input the head used, empty line (and any leading empty lines) included.
    pub len: usize,
}

/// Parses a request head from the start of `buf`.
///
/// `Partial` means every byte so far is consistent with a valid head; errors are
/// reported as soon as the bytes that prove them have arrived, and size limits
/// are enforced before the offending line is complete.
///
/// ```text
/// HTTP-message   = start-line CRLF *( field-line CRLF ) CRLF [ message-body ]
/// ```
pub fn parse_head(buf: &[u8], limits: &ParseLimits) -> Result<ParseStatus<Head>, ParseError> {
    parse_head_resuming(buf, limits, &mut HeadScan::default())
}

/// How far a head has been checked, so a head that arrives in many small reads
/// is scanned once in total rather than once per read (which would be quadratic
/// in the head size for a client trickling bytes). Valid only while the input
/// still starts with the bytes scanned before, which holds because the parser
/// uses no input until the head is complete.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct HeadScan {
    /// Where the field section starts, once the request line is complete and valid.
    fields_start: Option<usize>,
    /// End of the last complete, valid field line.
    validated: usize,
    /// Field lines before `validated`.
    fields: usize,
    /// No LF between the current line's start and this offset.
    searched: usize,
}

pub(super) fn parse_head_resuming(
    buf: &[u8],
    limits: &ParseLimits,
    scan: &mut HeadScan,
) -> Result<ParseStatus<Head>, ParseError> {
    let fields_start = match scan.fields_start {
        Some(start) => start,
        None => match check_request_line(buf, limits, scan)? {
            ParseStatus::Complete(start) => start,
            ParseStatus::Partial => return Ok(ParseStatus::Partial),
        },
    };
    let fields_end = match scan_field_section(buf, fields_start, limits, scan)? {
        ParseStatus::Complete(end) => end,
        ParseStatus::Partial => return Ok(ParseStatus::Partial),
    };
    let line_start = leading_empty_lines(buf);
    let parts = split_request_line(strip_optional_cr(&buf[line_start..fields_start - 1]))?;
    let request = parts.into_request(collect_fields(&buf[fields_start..fields_end]));
    check_host(&request)?;
    let framing = body_framing(&request, limits)?;
    let expect_continue = expects_continue(&request, framing)?;
    Ok(ParseStatus::Complete(Head {
        request,
        framing,
        expect_continue,
        len: fields_end,
    }))
}

/// RFC 9112 §2.2: "a server that is expecting to receive and parse a
/// request-line SHOULD ignore at least one empty line (CRLF) received prior to
/// the request-line." Clients that add CRLF after a POST body rely on it. The
/// skipped bytes count against `max_request_line`, so they cannot run forever.
fn leading_empty_lines(buf: &[u8]) -> usize {
    let mut pos = 0;
    loop {
        match &buf[pos..] {
            [b'\r', b'\n', ..] => pos += 2,
            [b'\n', ..] => pos += 1,
            _ => return pos,
        }
    }
}

/// Finds and validates the request line, returning where the field section
/// starts; 414 as soon as the line is certain to be too long, even before its
/// end arrives.
fn check_request_line(
    buf: &[u8],
    limits: &ParseLimits,
    scan: &mut HeadScan,
) -> Result<ParseStatus<usize>, ParseError> {
    let start = leading_empty_lines(buf);
    let from = start.max(scan.searched);
    let Some(i) = find_lf(&buf[from..]) else {
        if buf.len() > limits.max_request_line + 1 {
            return Err(ParseError::RequestLineTooLong);
        }
        scan.searched = buf.len();
        return Ok(ParseStatus::Partial);
    };
    let lf = from + i;
    let line = strip_optional_cr(&buf[start..lf]);
    if start + line.len() > limits.max_request_line {
        return Err(ParseError::RequestLineTooLong);
    }
    split_request_line(line)?;
    *scan = HeadScan {
        fields_start: Some(lf + 1),
        validated: lf + 1,
        fields: 0,
        searched: lf + 1,
    };
    Ok(ParseStatus::Complete(lf + 1))
}

/// The three parts of a request line, validated but still borrowed.
struct RequestLine<'a> {
    method: &'a [u8],
    target: &'a [u8],
    version: Version,
}

impl RequestLine<'_> {
    fn into_request(self, headers: Vec<(String, String)>) -> Request {
        // Both are ASCII after validation; lossy conversion only avoids a panic path.
        let target = String::from_utf8_lossy(self.target).into_owned();
        let (path, query) = match target.split_once('?') {
            Some((p, q)) => (p.to_string(), Some(q.to_string())),
            None => (target.clone(), None),
        };
        Request {
            method: String::from_utf8_lossy(self.method).into_owned(),
            target,
            path,
            query,
            version: self.version,
            headers,
            body: Vec::new(),
            client: Default::default(),
            peer: None,
        }
    }
}

/// ```text
/// request-line   = method SP request-target SP HTTP-version
/// method         = token
/// HTTP-version   = HTTP-name "/" DIGIT "." DIGIT
/// HTTP-name      = %s"HTTP"
/// ```
/// The request-target forms (origin, absolute, authority, asterisk) are all
/// visible ASCII; telling them apart is the router's business.
fn split_request_line(line: &[u8]) -> Result<RequestLine<'_>, ParseError> {
    let mut parts = line.split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(ParseError::MalformedRequestLine);
    };
    if target.is_empty() || version.is_empty() {
        return Err(ParseError::MalformedRequestLine);
    }
    if !is_token(method) {
        return Err(ParseError::InvalidMethod);
    }
    if !target.iter().all(|b| (0x21..=0x7e).contains(b)) {
        return Err(ParseError::InvalidTarget);
    }
    Ok(RequestLine {
        method,
        target,
        version: parse_version(version)?,
    })
}

fn parse_version(v: &[u8]) -> Result<Version, ParseError> {
    match v {
        b"HTTP/1.1" => Ok(Version::Http11),
        b"HTTP/1.0" => Ok(Version::Http10),
        [b'H', b'T', b'T', b'P', b'/', major, b'.', minor]
            if major.is_ascii_digit() && minor.is_ascii_digit() =>
        {
            Err(ParseError::UnsupportedVersion)
        }
        _ => Err(ParseError::InvalidVersion),
    }
}

/// Validates the header section starting at `fields_start` and returns where it
/// ends (after the terminating empty line).
///
/// ```text
/// field-line     = field-name ":" OWS field-value OWS
/// field-name     = token
/// field-value    = *field-content
/// field-content  = field-vchar [ 1*( SP / HTAB / field-vchar ) field-vchar ]
/// field-vchar    = VCHAR / obs-text
/// obs-fold       = OWS CRLF RWS   ; rejected (RFC 9112 §5.2 allows a 400)
/// ```
fn scan_field_section(
    buf: &[u8],
    fields_start: usize,
    limits: &ParseLimits,
    scan: &mut HeadScan,
) -> Result<ParseStatus<usize>, ParseError> {
    let max_end = fields_start.saturating_add(limits.max_header_bytes);
    loop {
        let line_start = scan.validated;
        let from = line_start.max(scan.searched);
        let Some(i) = find_lf(&buf[from..]) else {
            if buf.len() > max_end {
                return Err(ParseError::HeadersTooLarge);
            }
            scan.searched = buf.len();
            return Ok(ParseStatus::Partial);
        };
        let lf = from + i;
        if lf + 1 > max_end {
            return Err(ParseError::HeadersTooLarge);
        }
        let line = strip_optional_cr(&buf[line_start..lf]);
        if line.is_empty() {
            return Ok(ParseStatus::Complete(lf + 1));
        }
        if scan.fields + 1 > limits.max_headers {
            return Err(ParseError::HeadersTooLarge);
        }
        split_field_line(line)?;
        scan.fields += 1;
        scan.validated = lf + 1;
        scan.searched = lf + 1;
    }
}

/// Splits a field line into its name and trimmed value, validating both.
pub(super) fn split_field_line(line: &[u8]) -> Result<(&[u8], &[u8]), ParseError> {
    if line.first().is_some_and(|&b| is_ows(b)) {
        return Err(ParseError::ObsoleteLineFolding);
    }
    let colon = line
        .iter()
        .position(|&b| b == b':')
        .ok_or(ParseError::InvalidHeaderName)?;
    let name = &line[..colon];
    if !is_token(name) {
        return Err(ParseError::InvalidHeaderName);
    }
    let value = trim_ows(&line[colon + 1..]);
    if !value.iter().all(|&b| is_field_value_byte(b)) {
        return Err(ParseError::InvalidHeaderValue);
    }
    Ok((name, value))
}

/// Builds the owned header list from a section `scan_field_section` accepted.
fn collect_fields(section: &[u8]) -> Vec<(String, String)> {
    section
        .split(|&b| b == b'\n')
        .map(strip_optional_cr)
        .filter(|line| !line.is_empty())
        .filter_map(|line| split_field_line(line).ok())
        .map(|(name, value)| {
            (
                String::from_utf8_lossy(name).to_ascii_lowercase(),
                String::from_utf8_lossy(value).into_owned(),
            )
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Head semantics: Host, framing, Expect
// ---------------------------------------------------------------------------

/// RFC 9112 §3.2: "A server MUST respond with a 400 (Bad Request) status code to
/// any HTTP/1.1 request message that lacks a Host header field and to any request
/// message that contains more than one Host header field line".
fn check_host(request: &Request) -> Result<(), ParseError> {
    match (request.header_values("host").count(), request.version) {
        (0, Version::Http10) | (1, _) => Ok(()),
        _ => Err(ParseError::InvalidHost),
    }
}

/// RFC 9112 §6.3 (message body length), for requests:
/// 1. Transfer-Encoding and Content-Length together may be an attempt at request
///    smuggling; we reject it (400) rather than let one of them win.
/// 2. Transfer-Encoding with chunked as the final coding is read as chunked; we
///    implement no other coding, so anything but exactly `chunked` is 501.
/// 3. Content-Length = 1*DIGIT; a list of identical values is that value,
///    differing values are an unrecoverable error (400).
/// 4. Otherwise the request has no body.
fn body_framing(request: &Request, limits: &ParseLimits) -> Result<Framing, ParseError> {
    let has_te = request.header_values("transfer-encoding").next().is_some();
    let has_cl = request.header_values("content-length").next().is_some();
    match (has_te, has_cl) {
        (true, true) => Err(ParseError::ConflictingFraming),
        (true, false) => transfer_coding(request),
        (false, true) => match content_length(request)? {
            0 => Ok(Framing::None),
            n if n > limits.max_body as u64 => Err(ParseError::PayloadTooLarge),
            n => Ok(Framing::Length(n)),
        },
        (false, false) => Ok(Framing::None),
    }
}

/// ```text
/// Transfer-Encoding = #transfer-coding
/// transfer-coding   = token *( OWS ";" OWS transfer-parameter )
/// ```
fn transfer_coding(request: &Request) -> Result<Framing, ParseError> {
    let codings: Vec<&str> = request
        .header_values("transfer-encoding")
        .flat_map(|v| v.split(','))
        .map(|c| c.trim_matches([' ', '\t']))
        .filter(|c| !c.is_empty())
        .collect();
    let names_are_tokens = codings.iter().all(|coding| {
        let name = coding.split(';').next().unwrap_or("");
        is_token(name.trim_end_matches([' ', '\t']).as_bytes())
    });
    match codings.as_slice() {
        _ if !names_are_tokens => Err(ParseError::InvalidTransferEncoding),
        [] => Err(ParseError::InvalidTransferEncoding),
        [only] if only.eq_ignore_ascii_case("chunked") => Ok(Framing::Chunked),
        _ => Err(ParseError::UnsupportedTransferEncoding),
    }
}

/// ```text
/// Content-Length = 1*DIGIT
/// ```
/// Repeated (as a list or as several fields) only if every value is the same.
fn content_length(request: &Request) -> Result<u64, ParseError> {
    let mut agreed: Option<u64> = None;
    for element in request
        .header_values("content-length")
        .flat_map(|v| v.split(','))
    {
        let value = parse_decimal(element.trim_matches([' ', '\t']).as_bytes())?;
        match agreed {
            Some(previous) if previous != value => {
                return Err(ParseError::ConflictingContentLength)
            }
            _ => agreed = Some(value),
        }
    }
    agreed.ok_or(ParseError::InvalidContentLength)
}

fn parse_decimal(digits: &[u8]) -> Result<u64, ParseError> {
    if digits.is_empty() {
        return Err(ParseError::InvalidContentLength);
    }
    digits.iter().try_fold(0u64, |acc, &b| {
        if !b.is_ascii_digit() {
            return Err(ParseError::InvalidContentLength);
        }
        acc.checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(b - b'0')))
            .ok_or(ParseError::InvalidContentLength)
    })
}

/// RFC 9110 §10.1.1: `Expect = #expectation`; the only expectation defined is
/// `100-continue`, and "a server that receives an Expect field value containing
/// a member other than 100-continue MAY respond with a 417". A 1.0 client cannot
/// understand 100 Continue, so we never send it one (§10.1.1 MUST ignore).
fn expects_continue(request: &Request, framing: Framing) -> Result<bool, ParseError> {
    let mut wants_continue = false;
    for member in request.header_values("expect").flat_map(|v| v.split(',')) {
        let member = member.trim_matches([' ', '\t']);
        if member.eq_ignore_ascii_case("100-continue") {
            wants_continue = true;
        } else if !member.is_empty() {
            return Err(ParseError::UnsupportedExpectation);
        }
    }
    Ok(wants_continue && request.version == Version::Http11 && framing != Framing::None)
}
