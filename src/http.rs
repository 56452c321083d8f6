//! HTTP/1.1 message types, the request parser, and the response writer.
//!
//! This module owns the translation between bytes and messages (RFC 9112): it
//! decides where a request's head ends, how long its body is, and where the next
//! request on the connection starts, and it turns a `Response` into wire bytes.
//! It is pure: it never touches a socket, a clock or a thread, never panics on any
//! input, and never holds more than the `ParseLimits` allow. It must never guess
//! at framing: whenever two readings of the bytes are possible it reports an error
//! (which makes the server close the connection) instead of picking one.

use std::fmt;

/// The protocol version of a request; it decides keep-alive defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    Http10,
    Http11,
}

/// One parsed request, body already de-chunked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    /// The raw request-target, e.g. `/v1/tool-calls/by-key/a%20b?wait=1`.
    pub target: String,
    /// The target before `?`, not percent-decoded.
    pub path: String,
    /// The target after the first `?`, if any, not decoded.
    pub query: Option<String>,
    pub version: Version,
    /// Header names lower-cased, values trimmed, in arrival order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    /// The first header with this (case-insensitive) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every value of a header (names are stored lower-case), in arrival order.
    fn header_values<'a>(&'a self, lower_name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| n == lower_name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether the connection may carry another request after this one
    /// (RFC 9112 §9.3): HTTP/1.1 persists unless `Connection: close`; HTTP/1.0
    /// only with `Connection: keep-alive`, and never when it used
    /// Transfer-Encoding, which 1.0 framing cannot be trusted with (§6.1).
    pub fn keep_alive(&self) -> bool {
        let has_token = |token: &str| {
            self.header_values("connection")
                .flat_map(|v| v.split(','))
                .any(|t| t.trim().eq_ignore_ascii_case(token))
        };
        if has_token("close") {
            return false;
        }
        match self.version {
            Version::Http11 => true,
            Version::Http10 => {
                has_token("keep-alive") && self.header_values("transfer-encoding").next().is_none()
            }
        }
    }
}

/// A response; the writer adds `Content-Length`, `Date`-free framing and `Connection`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// A JSON response with `Content-Type: application/json`.
    pub fn json(status: u16, body: &serde_json::Value) -> Response {
        Response::json_bytes(status, body.to_string().into_bytes())
    }

    /// A JSON response from an already-serialized body.
    pub fn json_bytes(status: u16, body: Vec<u8>) -> Response {
        Response {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body,
        }
    }

    /// The error shape every failure uses: `{"error":{"code","message"}}`.
    pub fn error(status: u16, code: &str, message: impl fmt::Display) -> Response {
        Response::json(
            status,
            &serde_json::json!({"error": {"code": code, "message": message.to_string()}}),
        )
    }

    pub fn with_header(mut self, name: &str, value: &str) -> Response {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    /// Whether the handler asked for the connection to close after this response.
    pub fn asks_to_close(&self) -> bool {
        self.headers.iter().any(|(n, v)| {
            n.eq_ignore_ascii_case("connection")
                && v.split(',').any(|t| t.trim().eq_ignore_ascii_case("close"))
        })
    }
}

// ---------------------------------------------------------------------------
// Parser results, limits and errors
// ---------------------------------------------------------------------------

/// The outcome of parsing what has arrived so far (httparse-style): either the
/// thing is complete, or more bytes are needed. Errors are kept apart in `Err`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status<T> {
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

/// Most bytes of chunk extensions allowed on one chunk-size line; extensions are
/// meaningless to us, so a long run of them is only a way to make us buffer.
pub const MAX_CHUNK_EXT_BYTES: usize = 256;

/// Longest chunk-size line (size digits plus extensions, without CRLF).
const MAX_CHUNK_LINE: usize = MAX_CHUNK_EXT_BYTES + 32;

/// The interim response sent before reading a body the client is holding back.
pub const CONTINUE_100: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

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

// ---------------------------------------------------------------------------
// Byte classes (RFC 9110 §5.6.2, RFC 5234 core rules)
// ---------------------------------------------------------------------------

// tchar = "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" / "-" / "." /
//         "^" / "_" / "`" / "|" / "~" / DIGIT / ALPHA
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

// token = 1*tchar
fn is_token(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(|&b| is_tchar(b))
}

fn token_len(s: &[u8]) -> usize {
    s.iter().take_while(|&&b| is_tchar(b)).count()
}

// OWS = *( SP / HTAB )
fn is_ows(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

fn trim_ows(mut s: &[u8]) -> &[u8] {
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

fn skip_ows(s: &[u8]) -> &[u8] {
    &s[s.iter().take_while(|&&b| is_ows(b)).count()..]
}

// field-vchar = VCHAR / obs-text; field-content also allows SP and HTAB inside.
fn is_field_value_byte(b: u8) -> bool {
    b == b'\t' || (b >= 0x20 && b != 0x7f)
}

fn find_lf(s: &[u8]) -> Option<usize> {
    s.iter().position(|&b| b == b'\n')
}

/// A line's content without its terminator, accepting a bare LF (RFC 9112 §2.2
/// lets a recipient treat a lone LF as a line terminator in the head).
fn strip_optional_cr(line: &[u8]) -> &[u8] {
    match line {
        [rest @ .., b'\r'] => rest,
        _ => line,
    }
}

/// A line's content inside a chunked body, where CRLF is required: parsers that
/// disagree about bare LF there are a known request-smuggling vector.
fn strip_required_cr(line: &[u8]) -> Result<&[u8], ParseError> {
    match line {
        [rest @ .., b'\r'] => Ok(rest),
        _ => Err(ParseError::BareLineFeedInChunkedBody),
    }
}

// ---------------------------------------------------------------------------
// The head: request line and header section
// ---------------------------------------------------------------------------

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
pub fn parse_head(buf: &[u8], limits: &ParseLimits) -> Result<Status<Head>, ParseError> {
    parse_head_resuming(buf, limits, &mut HeadScan::default())
}

/// How far a head has been checked, so a head that arrives in many small reads
/// is scanned once in total rather than once per read (which would be quadratic
/// in the head size for a client trickling bytes). Valid only while the input
/// still starts with the bytes scanned before, which holds because the parser
/// uses no input until the head is complete.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct HeadScan {
    /// Where the field section starts, once the request line is complete and valid.
    fields_start: Option<usize>,
    /// End of the last complete, valid field line.
    validated: usize,
    /// Field lines before `validated`.
    fields: usize,
    /// No LF between the current line's start and this offset.
    searched: usize,
}

fn parse_head_resuming(
    buf: &[u8],
    limits: &ParseLimits,
    scan: &mut HeadScan,
) -> Result<Status<Head>, ParseError> {
    let fields_start = match scan.fields_start {
        Some(start) => start,
        None => match check_request_line(buf, limits, scan)? {
            Status::Complete(start) => start,
            Status::Partial => return Ok(Status::Partial),
        },
    };
    let fields_end = match scan_field_section(buf, fields_start, limits, scan)? {
        Status::Complete(end) => end,
        Status::Partial => return Ok(Status::Partial),
    };
    let line_start = leading_empty_lines(buf);
    let parts = split_request_line(strip_optional_cr(&buf[line_start..fields_start - 1]))?;
    let request = parts.into_request(collect_fields(&buf[fields_start..fields_end]));
    check_host(&request)?;
    let framing = body_framing(&request, limits)?;
    let expect_continue = expects_continue(&request, framing)?;
    Ok(Status::Complete(Head {
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
) -> Result<Status<usize>, ParseError> {
    let start = leading_empty_lines(buf);
    let from = start.max(scan.searched);
    let Some(i) = find_lf(&buf[from..]) else {
        if buf.len() > limits.max_request_line + 1 {
            return Err(ParseError::RequestLineTooLong);
        }
        scan.searched = buf.len();
        return Ok(Status::Partial);
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
    Ok(Status::Complete(lf + 1))
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
) -> Result<Status<usize>, ParseError> {
    let max_end = fields_start.saturating_add(limits.max_header_bytes);
    loop {
        let line_start = scan.validated;
        let from = line_start.max(scan.searched);
        let Some(i) = find_lf(&buf[from..]) else {
            if buf.len() > max_end {
                return Err(ParseError::HeadersTooLarge);
            }
            scan.searched = buf.len();
            return Ok(Status::Partial);
        };
        let lf = from + i;
        if lf + 1 > max_end {
            return Err(ParseError::HeadersTooLarge);
        }
        let line = strip_optional_cr(&buf[line_start..lf]);
        if line.is_empty() {
            return Ok(Status::Complete(lf + 1));
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
fn split_field_line(line: &[u8]) -> Result<(&[u8], &[u8]), ParseError> {
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

// ---------------------------------------------------------------------------
// Bodies
// ---------------------------------------------------------------------------

/// Where a chunked body decoder is in the grammar:
///
/// ```text
/// chunked-body   = *chunk last-chunk trailer-section CRLF
/// chunk          = chunk-size [ chunk-ext ] CRLF chunk-data CRLF
/// chunk-size     = 1*HEXDIG
/// last-chunk     = 1*("0") [ chunk-ext ] CRLF
/// chunk-data     = 1*OCTET ; a sequence of chunk-size octets
/// trailer-section = *( field-line CRLF )
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    /// Expecting a chunk-size line.
    Size,
    /// Inside chunk-data with this many bytes still to come.
    Data(u64),
    /// Expecting the CRLF that ends chunk-data.
    DataEnd,
    /// After the last chunk, expecting trailer lines or the final empty line.
    Trailers,
    Done,
}

/// An incremental chunked-body decoder. It consumes only whole syntactic units
/// (a full size line, a full trailer line), so it can be fed whatever has arrived
/// and be told later about the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkedDecoder {
    state: ChunkState,
    /// De-chunked bytes so far (checked against `max_body`).
    total: u64,
    trailer_bytes: usize,
    trailer_fields: usize,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl ChunkedDecoder {
    pub fn new() -> Self {
        ChunkedDecoder {
            state: ChunkState::Size,
            total: 0,
            trailer_bytes: 0,
            trailer_fields: 0,
        }
    }

    /// True once the last chunk and the trailer section have been read.
    pub fn is_done(&self) -> bool {
        self.state == ChunkState::Done
    }

    /// Decodes as much of `input` as is complete, appending chunk data to `body`,
    /// and returns how many bytes of `input` it used (the caller drops them and
    /// passes the rest again with more bytes appended).
    pub fn decode(
        &mut self,
        input: &[u8],
        body: &mut Vec<u8>,
        limits: &ParseLimits,
    ) -> Result<usize, ParseError> {
        let mut pos = 0;
        loop {
            let rest = &input[pos..];
            let used = match self.state {
                ChunkState::Done => return Ok(pos),
                ChunkState::Size => self.size_line(rest, limits)?,
                ChunkState::Data(remaining) => self.data(rest, remaining, body),
                ChunkState::DataEnd => self.data_end(rest)?,
                ChunkState::Trailers => self.trailer_line(rest, limits)?,
            };
            match used {
                Some(n) => pos += n,
                None => return Ok(pos),
            }
        }
    }

    fn size_line(
        &mut self,
        rest: &[u8],
        limits: &ParseLimits,
    ) -> Result<Option<usize>, ParseError> {
        // +1: the CR of a line of exactly MAX_CHUNK_LINE. Checked before anything
        // else so a long line fails the same way however its bytes arrive.
        let seen = find_lf(rest).unwrap_or(rest.len());
        if seen > MAX_CHUNK_LINE + 1 {
            return Err(ParseError::ChunkLineTooLong);
        }
        let Some(i) = find_lf(rest) else {
            return Ok(None);
        };
        let line = match &rest[..i] {
            [line @ .., b'\r'] => line,
            _ => return Err(ParseError::InvalidChunkSize),
        };
        let size = parse_chunk_size_line(line)?;
        self.state = if size == 0 {
            ChunkState::Trailers
        } else {
            self.total = self
                .total
                .checked_add(size)
                .filter(|&t| t <= limits.max_body as u64)
                .ok_or(ParseError::PayloadTooLarge)?;
            ChunkState::Data(size)
        };
        Ok(Some(i + 1))
    }

    fn data(&mut self, rest: &[u8], remaining: u64, body: &mut Vec<u8>) -> Option<usize> {
        if rest.is_empty() {
            return None;
        }
        let n = rest
            .len()
            .min(usize::try_from(remaining).unwrap_or(usize::MAX));
        body.extend_from_slice(&rest[..n]);
        let left = remaining - n as u64;
        self.state = if left == 0 {
            ChunkState::DataEnd
        } else {
            ChunkState::Data(left)
        };
        Some(n)
    }

    fn data_end(&mut self, rest: &[u8]) -> Result<Option<usize>, ParseError> {
        match rest {
            [] | [b'\r'] => Ok(None),
            [b'\r', b'\n', ..] => {
                self.state = ChunkState::Size;
                Ok(Some(2))
            }
            _ => Err(ParseError::MissingChunkTerminator),
        }
    }

    /// Trailers are validated like headers, counted against the header limits,
    /// and discarded: nothing we do depends on them.
    fn trailer_line(
        &mut self,
        rest: &[u8],
        limits: &ParseLimits,
    ) -> Result<Option<usize>, ParseError> {
        let Some(i) = find_lf(rest) else {
            return if self.trailer_bytes + rest.len() > limits.max_header_bytes {
                Err(ParseError::HeadersTooLarge)
            } else {
                Ok(None)
            };
        };
        self.trailer_bytes += i + 1;
        if self.trailer_bytes > limits.max_header_bytes {
            return Err(ParseError::HeadersTooLarge);
        }
        let line = strip_required_cr(&rest[..i])?;
        if line.is_empty() {
            self.state = ChunkState::Done;
            return Ok(Some(i + 1));
        }
        self.trailer_fields += 1;
        if self.trailer_fields > limits.max_headers {
            return Err(ParseError::HeadersTooLarge);
        }
        split_field_line(line)?;
        Ok(Some(i + 1))
    }
}

/// `chunk-size [ chunk-ext ]`, without the CRLF.
fn parse_chunk_size_line(line: &[u8]) -> Result<u64, ParseError> {
    if line.len() > MAX_CHUNK_LINE {
        return Err(ParseError::ChunkLineTooLong);
    }
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 {
        return Err(ParseError::InvalidChunkSize);
    }
    let size = line[..digits].iter().try_fold(0u64, |acc, &b| {
        acc.checked_mul(16)
            .and_then(|v| v.checked_add(u64::from(hex_value(b))))
            .ok_or(ParseError::InvalidChunkSize)
    })?;
    let extensions = &line[digits..];
    if extensions.len() > MAX_CHUNK_EXT_BYTES {
        return Err(ParseError::InvalidChunkExtension);
    }
    check_chunk_extensions(extensions)?;
    Ok(size)
}

fn hex_value(b: u8) -> u8 {
    match b {
        b'0'..=b'9' => b - b'0',
        b'a'..=b'f' => b - b'a' + 10,
        b'A'..=b'F' => b - b'A' + 10,
        _ => 0,
    }
}

/// ```text
/// chunk-ext      = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] )
/// chunk-ext-name = token
/// chunk-ext-val  = token / quoted-string
/// ```
/// A digit run followed by anything else (e.g. `1x`, `1 2`) fails here, which is
/// what makes the size itself strict.
fn check_chunk_extensions(mut s: &[u8]) -> Result<(), ParseError> {
    loop {
        s = skip_ows(s);
        let Some(after_semicolon) = s.strip_prefix(b";") else {
            return if s.is_empty() {
                Ok(())
            } else {
                Err(ParseError::InvalidChunkExtension)
            };
        };
        s = skip_ows(after_semicolon);
        let name_len = token_len(s);
        if name_len == 0 {
            return Err(ParseError::InvalidChunkExtension);
        }
        s = &s[name_len..];
        if let Some(after_equals) = skip_ows(s).strip_prefix(b"=") {
            s = skip_ows(after_equals);
            let value_len = if s.first() == Some(&b'"') {
                quoted_string_len(s)?
            } else {
                token_len(s)
            };
            if value_len == 0 {
                return Err(ParseError::InvalidChunkExtension);
            }
            s = &s[value_len..];
        }
    }
}

/// ```text
/// quoted-string  = DQUOTE *( qdtext / quoted-pair ) DQUOTE
/// qdtext         = HTAB / SP / %x21 / %x23-5B / %x5D-7E / obs-text
/// quoted-pair    = "\" ( HTAB / SP / VCHAR / obs-text )
/// ```
fn quoted_string_len(s: &[u8]) -> Result<usize, ParseError> {
    let mut i = 1;
    loop {
        match s.get(i) {
            Some(b'"') => return Ok(i + 1),
            Some(b'\\') => match s.get(i + 1) {
                Some(&b) if is_field_value_byte(b) => i += 2,
                _ => return Err(ParseError::InvalidChunkExtension),
            },
            Some(&b) if is_field_value_byte(b) => i += 1,
            _ => return Err(ParseError::InvalidChunkExtension),
        }
    }
}

/// How the body of the request being read is delimited, with its progress.
#[derive(Debug, Clone, PartialEq, Eq)]
enum BodyDecoder {
    Length(u64),
    Chunked(ChunkedDecoder),
}

/// What `RequestParser::advance` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Everything given so far is consistent; read more bytes.
    NeedMore,
    /// The head is valid and a body follows; if `expect_continue`, the caller
    /// should write `CONTINUE_100` before waiting for it.
    HeadComplete { expect_continue: bool },
    /// A whole request.
    Done(Request),
}

/// The sans-IO request reader the server drives: feed it the unread bytes of the
/// connection, drop the bytes it says it used, and feed it again after reading
/// more. One parser reads one request.
#[derive(Debug, Clone)]
pub struct RequestParser {
    limits: ParseLimits,
    head_scan: HeadScan,
    body: Option<(Request, BodyDecoder)>,
}

/// Initial body capacity cap: a declared length is only a promise, so memory is
/// committed as bytes actually arrive.
const MAX_BODY_PREALLOCATION: u64 = 64 * 1024;

impl RequestParser {
    pub fn new(limits: ParseLimits) -> Self {
        RequestParser {
            limits,
            head_scan: HeadScan::default(),
            body: None,
        }
    }

    /// Advances over `input` (the connection's unread bytes) and returns how many
    /// of them were used, and what happened. Bytes not used must be passed again,
    /// at the start of the next `input`.
    pub fn advance(&mut self, input: &[u8]) -> Result<(usize, Progress), ParseError> {
        match self.body.take() {
            None => self.start(input),
            Some((request, decoder)) => self.continue_body(input, request, decoder),
        }
    }

    fn start(&mut self, input: &[u8]) -> Result<(usize, Progress), ParseError> {
        let head = match parse_head_resuming(input, &self.limits, &mut self.head_scan)? {
            Status::Complete(head) => head,
            Status::Partial => return Ok((0, Progress::NeedMore)),
        };
        self.head_scan = HeadScan::default();
        let mut request = head.request;
        let decoder = match head.framing {
            Framing::None => return Ok((head.len, Progress::Done(request))),
            Framing::Length(n) => {
                request.body.reserve(n.min(MAX_BODY_PREALLOCATION) as usize);
                BodyDecoder::Length(n)
            }
            Framing::Chunked => BodyDecoder::Chunked(ChunkedDecoder::new()),
        };
        self.body = Some((request, decoder));
        let expect_continue = head.expect_continue;
        Ok((head.len, Progress::HeadComplete { expect_continue }))
    }

    fn continue_body(
        &mut self,
        input: &[u8],
        mut request: Request,
        mut decoder: BodyDecoder,
    ) -> Result<(usize, Progress), ParseError> {
        let (used, done) = match &mut decoder {
            BodyDecoder::Length(remaining) => {
                let n = input
                    .len()
                    .min(usize::try_from(*remaining).unwrap_or(usize::MAX));
                request.body.extend_from_slice(&input[..n]);
                *remaining -= n as u64;
                (n, *remaining == 0)
            }
            BodyDecoder::Chunked(chunks) => {
                let used = chunks.decode(input, &mut request.body, &self.limits)?;
                (used, chunks.is_done())
            }
        };
        if done {
            return Ok((used, Progress::Done(request)));
        }
        self.body = Some((request, decoder));
        Ok((used, Progress::NeedMore))
    }
}

/// Parses one whole request from the start of `buf`, returning it and the bytes
/// it used (the rest belongs to the next request). `Partial` if `buf` is a valid
/// prefix. The same state machine as the server's, fed everything at once.
pub fn parse_request(
    buf: &[u8],
    limits: &ParseLimits,
) -> Result<Status<(Request, usize)>, ParseError> {
    let mut parser = RequestParser::new(*limits);
    let mut used = 0;
    loop {
        let (n, progress) = parser.advance(&buf[used..])?;
        used += n;
        match progress {
            Progress::NeedMore => return Ok(Status::Partial),
            Progress::HeadComplete { .. } => {}
            Progress::Done(request) => return Ok(Status::Complete((request, used))),
        }
    }
}

// ---------------------------------------------------------------------------
// The response writer
// ---------------------------------------------------------------------------

/// What the writer must say about the connection and the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOptions {
    /// The server will read another request on this connection.
    pub keep_alive: bool,
    /// The request's version: a kept-alive 1.0 connection must say so explicitly.
    pub request_version: Version,
    /// A response to HEAD: headers (with the body's length) but no body.
    pub head_only: bool,
}

/// Appends the wire form of `response` to `out`: status line, the handler's
/// headers, `Content-Length`, `Connection`, and the body.
///
/// Framing headers from the handler are dropped (the writer alone decides them),
/// and so is any header that would break the response apart (CR/LF, bad name).
pub fn write_response(out: &mut Vec<u8>, response: &Response, options: WriteOptions) {
    out.extend_from_slice(b"HTTP/1.1 ");
    push_decimal(out, u64::from(response.status));
    out.push(b' ');
    out.extend_from_slice(reason_phrase(response.status).as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in &response.headers {
        if is_writable_header(name, value) {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
    let has_body = status_allows_body(response.status);
    if has_body {
        out.extend_from_slice(b"Content-Length: ");
        push_decimal(out, response.body.len() as u64);
        out.extend_from_slice(b"\r\n");
    }
    if !options.keep_alive {
        out.extend_from_slice(b"Connection: close\r\n");
    } else if options.request_version == Version::Http10 {
        out.extend_from_slice(b"Connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if has_body && !options.head_only {
        out.extend_from_slice(&response.body);
    }
}

/// RFC 9110 §6.4.1: 1xx, 204 and 304 responses never carry content.
fn status_allows_body(status: u16) -> bool {
    !(100..200).contains(&status) && status != 204 && status != 304
}

fn is_writable_header(name: &str, value: &str) -> bool {
    let framing = ["content-length", "transfer-encoding", "connection"];
    is_token(name.as_bytes())
        && !framing.iter().any(|f| name.eq_ignore_ascii_case(f))
        && value.bytes().all(is_field_value_byte)
}

fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// The reason phrase for a status line (informational only; clients ignore it).
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        304 => "Not Modified",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        417 => "Expectation Failed",
        422 => "Unprocessable Content",
        425 => "Too Early",
        428 => "Precondition Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use ParseError::*;

    /// Small limits so every limit case fits in a readable literal.
    const LIMITS: ParseLimits = ParseLimits {
        max_request_line: 64,
        max_header_bytes: 128,
        max_headers: 4,
        max_body: 32,
    };

    /// Requests that must parse, each whole and used up exactly.
    #[rustfmt::skip]
    const VALID: &[(&str, &[u8])] = &[
        ("minimal 1.1", b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"),
        ("bare LF line ends", b"GET / HTTP/1.1\nHost: a\n\n"),
        ("1.0 without Host", b"GET / HTTP/1.0\r\n\r\n"),
        ("leading empty line ignored", b"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n"),
        ("query and odd target bytes", b"GET /a%20b?x=1&y=?z HTTP/1.1\r\nHost: a\r\n\r\n"),
        ("asterisk form", b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n"),
        ("empty header value", b"GET / HTTP/1.1\r\nHost: a\r\nX-E:\r\n\r\n"),
        ("obs-text in value", b"GET / HTTP/1.1\r\nHost: a\r\nX: caf\xc3\xa9\r\n\r\n"),
        ("content-length body", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello"),
        ("content-length zero", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n"),
        ("content-length leading zeros", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 005\r\n\r\nhello"),
        ("identical content-length list", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\nhello"),
        ("identical content-length fields", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello"),
        ("body exactly max_body", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 32\r\n\r\n0123456789abcdef0123456789abcdef"),
        ("chunked", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"),
        ("chunked, any case", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"),
        ("chunked, empty list members", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: ,chunked,\r\n\r\n0\r\n\r\n"),
        ("chunk extensions", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5 ; a=b;c=\"d \\\" e\";f\r\nhello\r\n0;z\r\n\r\n"),
        ("chunk size upper-case hex, leading zeros", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0000A\r\n0123456789\r\n00\r\n\r\n"),
        ("trailers discarded", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\nX-T: 1\r\nY: 2\r\n\r\n"),
        ("expect 100-continue", b"POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n\r\nx"),
        ("http/1.0 keep-alive with length", b"POST / HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\nx"),
    ];

    /// Requests that must be rejected, with the error each one must get.
    #[rustfmt::skip]
    const INVALID: &[(&str, &[u8], ParseError)] = &[
        ("request line: two parts", b"GET /\r\n\r\n", MalformedRequestLine),
        ("request line: four parts", b"GET / x HTTP/1.1\r\nHost: a\r\n\r\n", MalformedRequestLine),
        ("request line: double space", b"GET  / HTTP/1.1\r\nHost: a\r\n\r\n", MalformedRequestLine),
        ("request line: trailing space", b"GET / HTTP/1.1 \r\nHost: a\r\n\r\n", MalformedRequestLine),
        ("request line: tab separator", b"GET\t/ HTTP/1.1\r\nHost: a\r\n\r\n", MalformedRequestLine),
        ("method not a token", b"G(T / HTTP/1.1\r\nHost: a\r\n\r\n", InvalidMethod),
        ("empty method", b" / HTTP/1.1\r\nHost: a\r\n\r\n", InvalidMethod),
        ("control byte in target", b"GET /\x01 HTTP/1.1\r\nHost: a\r\n\r\n", InvalidTarget),
        ("non-ascii target", b"GET /\xc3\xa9 HTTP/1.1\r\nHost: a\r\n\r\n", InvalidTarget),
        ("version 2.0", b"GET / HTTP/2.0\r\nHost: a\r\n\r\n", UnsupportedVersion),
        ("version 1.2", b"GET / HTTP/1.2\r\nHost: a\r\n\r\n", UnsupportedVersion),
        ("version 0.9", b"GET / HTTP/0.9\r\n\r\n", UnsupportedVersion),
        ("version lower-case", b"GET / http/1.1\r\nHost: a\r\n\r\n", InvalidVersion),
        ("version garbage", b"GET / FOO\r\nHost: a\r\n\r\n", InvalidVersion),
        ("version no minor", b"GET / HTTP/1\r\nHost: a\r\n\r\n", InvalidVersion),
        ("version two-digit major", b"GET / HTTP/11.1\r\nHost: a\r\n\r\n", InvalidVersion),
        ("bare CR ends request line", b"GET / HTTP/1.1\r\r\nHost: a\r\n\r\n", InvalidVersion),
        ("request line too long", b"GET /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa HTTP/1.1\r\nHost: a\r\n\r\n", RequestLineTooLong),
        ("request line too long before its end", b"GET /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", RequestLineTooLong),
        ("endless empty lines", b"\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n", RequestLineTooLong),
        ("space before colon", b"GET / HTTP/1.1\r\nHost : a\r\n\r\n", InvalidHeaderName),
        ("space inside name", b"GET / HTTP/1.1\r\nHost: a\r\nX Y: 1\r\n\r\n", InvalidHeaderName),
        ("empty name", b"GET / HTTP/1.1\r\nHost: a\r\n: 1\r\n\r\n", InvalidHeaderName),
        ("control byte in name", b"GET / HTTP/1.1\r\nHost: a\r\nX\x01: 1\r\n\r\n", InvalidHeaderName),
        ("no colon", b"GET / HTTP/1.1\r\nHost: a\r\nNoColon\r\n\r\n", InvalidHeaderName),
        ("NUL in value", b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x00b\r\n\r\n", InvalidHeaderValue),
        ("bare CR in value", b"GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n", InvalidHeaderValue),
        ("DEL in value", b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x7f\r\n\r\n", InvalidHeaderValue),
        ("obs-fold", b"GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n 2\r\n\r\n", ObsoleteLineFolding),
        ("obs-fold with tab", b"GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n\t2\r\n\r\n", ObsoleteLineFolding),
        ("whitespace before first field", b"GET / HTTP/1.1\r\n Host: a\r\n\r\n", ObsoleteLineFolding),
        ("header section too many bytes", b"GET / HTTP/1.1\r\nHost: a\r\nX: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n", HeadersTooLarge),
        ("header section too large before its end", b"GET / HTTP/1.1\r\nHost: a\r\nX: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", HeadersTooLarge),
        ("too many headers", b"GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 1\r\nC: 1\r\nD: 1\r\n\r\n", HeadersTooLarge),
        ("1.1 without Host", b"GET / HTTP/1.1\r\n\r\n", InvalidHost),
        ("two Host fields", b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", InvalidHost),
        ("1.0 with two Host fields", b"GET / HTTP/1.0\r\nHost: a\r\nHost: a\r\n\r\n", InvalidHost),
        ("content-length and transfer-encoding", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", ConflictingFraming),
        ("transfer-encoding and content-length", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", ConflictingFraming),
        ("differing content-length list", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 6\r\n\r\nhello", ConflictingContentLength),
        ("differing content-length fields", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello", ConflictingContentLength),
        ("content-length with sign", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\nhello", InvalidContentLength),
        ("negative content-length", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -5\r\n\r\n", InvalidContentLength),
        ("space inside content-length", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1 0\r\n\r\n", InvalidContentLength),
        ("hex content-length", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x5\r\n\r\n", InvalidContentLength),
        ("empty content-length", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n\r\n", InvalidContentLength),
        ("empty content-length member", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5,\r\n\r\nhello", InvalidContentLength),
        ("content-length overflow", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 18446744073709551616\r\n\r\n", InvalidContentLength),
        ("content-length over max_body", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 33\r\n\r\n", PayloadTooLarge),
        ("huge content-length", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 18446744073709551615\r\n\r\n", PayloadTooLarge),
        ("transfer-encoding gzip", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", UnsupportedTransferEncoding),
        ("transfer-encoding gzip, chunked", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", UnsupportedTransferEncoding),
        ("transfer-encoding chunked, gzip", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", UnsupportedTransferEncoding),
        ("chunked twice in two fields", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", UnsupportedTransferEncoding),
        ("transfer-encoding identity", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\n", UnsupportedTransferEncoding),
        ("chunked with a parameter", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked;q=1\r\n\r\n", UnsupportedTransferEncoding),
        ("empty transfer-encoding", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: \r\n\r\n", InvalidTransferEncoding),
        ("transfer-encoding not a token", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chun ked\r\n\r\n", InvalidTransferEncoding),
        ("chunk size not hex", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", InvalidChunkSize),
        ("chunk size negative", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n0\r\n\r\n", InvalidChunkSize),
        ("chunk size missing", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n\r\n", InvalidChunkSize),
        ("chunk size 0x prefix", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n", InvalidChunkExtension),
        ("chunk size overflow", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1ffffffffffffffff\r\n", InvalidChunkSize),
        ("chunk size line with bare LF", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n", InvalidChunkSize),
        ("space inside chunk size", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1 0\r\n", InvalidChunkExtension),
        ("chunk extension without name", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;=x\r\nhello\r\n0\r\n\r\n", InvalidChunkExtension),
        ("chunk extension unterminated quote", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;a=\"b\r\nhello\r\n0\r\n\r\n", InvalidChunkExtension),
        ("chunk extension with bare CR", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;a\rb\r\nhello\r\n0\r\n\r\n", InvalidChunkExtension),
        ("chunk extensions over 256 bytes", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\nhello\r\n0\r\n\r\n", InvalidChunkExtension),
        ("chunk data without CRLF", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloX0\r\n\r\n", MissingChunkTerminator),
        ("chunk data with bare LF", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\n0\r\n\r\n", MissingChunkTerminator),
        ("chunk longer than declared", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhello\r\n0\r\n\r\n", MissingChunkTerminator),
        ("trailer with bare LF", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: 1\n\r\n", BareLineFeedInChunkedBody),
        ("final line with bare LF", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\n", BareLineFeedInChunkedBody),
        ("invalid trailer name", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX Y: 1\r\n\r\n", InvalidHeaderName),
        ("trailers too many", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nA: 1\r\nB: 1\r\nC: 1\r\nD: 1\r\nE: 1\r\n\r\n", HeadersTooLarge),
        ("chunk over max_body before its data", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n21\r\n", PayloadTooLarge),
        ("chunks adding up over max_body", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n0123456789abcdef\r\n11\r\n", PayloadTooLarge),
        ("expect something else", b"POST / HTTP/1.1\r\nHost: a\r\nExpect: fly\r\nContent-Length: 1\r\n\r\nx", UnsupportedExpectation),
        ("expect list with something else", b"GET / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue, fly\r\n\r\n", UnsupportedExpectation),
    ];

    /// The table plus cases too long to write out.
    fn invalid_cases() -> Vec<(String, Vec<u8>, ParseError)> {
        let chunked_head = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";
        let long_size_line = [&chunked_head[..], b"5;", &[b'a'; MAX_CHUNK_LINE][..]].concat();
        let mut cases: Vec<_> = INVALID
            .iter()
            .map(|(name, bytes, error)| (name.to_string(), bytes.to_vec(), *error))
            .collect();
        cases.push((
            "chunk size line too long before its end".into(),
            long_size_line,
            ChunkLineTooLong,
        ));
        let big_trailer = [
            &chunked_head[..],
            b"0\r\nX: ",
            &[b'v'; 128][..],
            b"\r\n\r\n",
        ]
        .concat();
        cases.push((
            "trailer section over max_header_bytes".into(),
            big_trailer,
            HeadersTooLarge,
        ));
        cases
    }

    fn whole(bytes: &[u8]) -> Result<Status<(Request, usize)>, ParseError> {
        parse_request(bytes, &LIMITS)
    }

    /// Feeds `pieces` one after another the way the server does: append what
    /// arrived, advance, drop the bytes the parser used, repeat.
    fn fed_in_pieces<'a>(
        pieces: impl IntoIterator<Item = &'a [u8]>,
        limits: &ParseLimits,
    ) -> Result<Option<(Request, usize)>, ParseError> {
        let mut parser = RequestParser::new(*limits);
        let mut unread = Vec::new();
        let mut used_total = 0;
        for piece in pieces {
            unread.extend_from_slice(piece);
            loop {
                let (used, progress) = parser.advance(&unread)?;
                unread.drain(..used);
                used_total += used;
                match progress {
                    Progress::NeedMore => break,
                    Progress::HeadComplete { .. } => {}
                    Progress::Done(request) => return Ok(Some((request, used_total))),
                }
            }
        }
        Ok(None)
    }

    fn byte_at_a_time(
        bytes: &[u8],
        limits: &ParseLimits,
    ) -> Result<Option<(Request, usize)>, ParseError> {
        fed_in_pieces(bytes.chunks(1), limits)
    }

    fn as_option(status: Status<(Request, usize)>) -> Option<(Request, usize)> {
        match status {
            Status::Complete(parsed) => Some(parsed),
            Status::Partial => None,
        }
    }

    #[test]
    fn valid_requests_parse_whole_and_use_every_byte() {
        for (name, bytes) in VALID {
            match whole(bytes) {
                Ok(Status::Complete((_, used))) => assert_eq!(used, bytes.len(), "{name}"),
                other => panic!("{name}: {other:?}"),
            }
        }
    }

    #[test]
    fn every_truncated_prefix_of_a_valid_request_is_partial() {
        for (name, bytes) in VALID {
            for end in 0..bytes.len() {
                assert_eq!(
                    whole(&bytes[..end]),
                    Ok(Status::Partial),
                    "{name}, first {end} bytes"
                );
            }
        }
    }

    #[test]
    fn valid_requests_parse_the_same_byte_by_byte() {
        for (name, bytes) in VALID {
            let expected = as_option(whole(bytes).unwrap());
            assert_eq!(byte_at_a_time(bytes, &LIMITS), Ok(expected), "{name}");
        }
    }

    #[test]
    fn invalid_requests_get_their_error() {
        for (name, bytes, expected) in invalid_cases() {
            assert_eq!(whole(&bytes).map(as_option), Err(expected), "{name}");
        }
    }

    #[test]
    fn invalid_requests_get_the_same_error_byte_by_byte() {
        for (name, bytes, expected) in invalid_cases() {
            assert_eq!(byte_at_a_time(&bytes, &LIMITS), Err(expected), "{name}");
        }
    }

    #[test]
    fn every_error_maps_to_its_stable_code() {
        let expected_codes = [
            (400, "bad_request"),
            (413, "payload_too_large"),
            (414, "uri_too_long"),
            (417, "expectation_failed"),
            (431, "headers_too_large"),
            (501, "not_implemented"),
            (505, "version_not_supported"),
        ];
        for (_, _, error) in invalid_cases() {
            let (status, code, message) = error.describe();
            assert!(expected_codes.contains(&(status, code)), "{error:?}");
            assert!(!message.is_empty());
            let body: serde_json::Value =
                serde_json::from_slice(&error.to_response().body).unwrap();
            assert_eq!(body["error"]["code"], code);
        }
        assert_eq!(UnsupportedVersion.describe().0, 505);
        assert_eq!(RequestLineTooLong.describe().0, 414);
        assert_eq!(HeadersTooLarge.describe().0, 431);
        assert_eq!(PayloadTooLarge.describe().0, 413);
        assert_eq!(UnsupportedTransferEncoding.describe().0, 501);
        assert_eq!(UnsupportedExpectation.describe().0, 417);
    }

    fn parsed(bytes: &[u8]) -> Request {
        match whole(bytes) {
            Ok(Status::Complete((request, _))) => request,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn request_fields_are_split_and_normalised() {
        let r = parsed(b"GET /a%20b?x=1?y HTTP/1.1\r\nHOST: a\r\nX-Pad: \t v w \t\r\n\r\n");
        assert_eq!(r.method, "GET");
        assert_eq!(r.target, "/a%20b?x=1?y");
        assert_eq!(r.path, "/a%20b");
        assert_eq!(r.query.as_deref(), Some("x=1?y"));
        assert_eq!(r.version, Version::Http11);
        assert_eq!(
            r.headers,
            vec![("host".into(), "a".into()), ("x-pad".into(), "v w".into())]
        );
        assert_eq!(r.header("x-PAD"), Some("v w"));
        assert!(r.body.is_empty());
    }

    #[test]
    fn chunked_body_is_dechunked() {
        let r = parsed(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nT: 1\r\n\r\n");
        assert_eq!(r.body, b"hello world");
    }

    #[test]
    fn pipelined_bytes_stay_for_the_next_request() {
        let first = b"POST /1 HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc".to_vec();
        let second = b"GET /2 HTTP/1.1\r\nHost: a\r\n\r\n";
        let mut both = first.clone();
        both.extend_from_slice(second);
        let Ok(Status::Complete((r1, used))) = whole(&both) else {
            panic!()
        };
        assert_eq!(
            (r1.path.as_str(), &r1.body[..], used),
            ("/1", &b"abc"[..], first.len())
        );
        assert_eq!(parsed(&both[used..]).path, "/2");
    }

    #[test]
    fn head_reports_framing_and_expectation() {
        let head = |bytes: &[u8]| match parse_head(bytes, &LIMITS) {
            Ok(Status::Complete(head)) => head,
            other => panic!("{other:?}"),
        };
        let h = head(
            b"POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 9\r\n\r\n",
        );
        assert_eq!((h.framing, h.expect_continue), (Framing::Length(9), true));
        let h = head(b"POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 9\r\n\r\n");
        assert!(!h.expect_continue, "1.0 clients cannot take a 100");
        let h = head(b"GET / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n\r\n");
        assert!(!h.expect_continue, "nothing to continue without a body");
        let h = head(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert_eq!(h.framing, Framing::Chunked);
    }

    #[test]
    fn keep_alive_follows_version_and_connection() {
        let cases: &[(&[u8], bool)] = &[
            (b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", true),
            (b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", false),
            (b"GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, CLOSE\r\n\r\n", false),
            (b"GET / HTTP/1.0\r\n\r\n", false),
            (b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", true),
            (b"GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n", false),
            (b"POST / HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", false),
        ];
        for (bytes, keep) in cases {
            assert_eq!(
                parsed(bytes).keep_alive(),
                *keep,
                "{}",
                String::from_utf8_lossy(bytes)
            );
        }
    }

    fn written(response: &Response, keep_alive: bool, version: Version, head_only: bool) -> String {
        let mut out = Vec::new();
        let options = WriteOptions {
            keep_alive,
            request_version: version,
            head_only,
        };
        write_response(&mut out, response, options);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn writer_frames_the_response() {
        let ok = Response::json(200, &serde_json::json!({"ok": true}));
        assert_eq!(
            written(&ok, true, Version::Http11, false),
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}"
        );
        assert_eq!(
            written(&ok, false, Version::Http11, false),
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\nConnection: close\r\n\r\n{\"ok\":true}"
        );
        assert_eq!(
            written(&ok, true, Version::Http10, true),
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\nConnection: keep-alive\r\n\r\n"
        );
        let busy = Response::error(503, "unavailable", "x").with_header("Retry-After", "1");
        assert!(written(&busy, false, Version::Http11, false)
            .starts_with("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"));
    }

    #[test]
    fn writer_owns_framing_headers_and_drops_unsafe_ones() {
        let sneaky = Response {
            status: 204,
            headers: vec![
                ("Content-Length".into(), "99".into()),
                ("Transfer-Encoding".into(), "chunked".into()),
                ("X-Split".into(), "a\r\nSet-Cookie: x".into()),
                ("Bad Name".into(), "v".into()),
                ("X-Fine".into(), "v".into()),
            ],
            body: b"ignored".to_vec(),
        };
        assert_eq!(
            written(&sneaky, true, Version::Http11, false),
            "HTTP/1.1 204 No Content\r\nX-Fine: v\r\n\r\n"
        );
    }

    #[test]
    fn decimal_formatting() {
        for n in [0u64, 7, 10, 1234567890, u64::MAX] {
            let mut out = Vec::new();
            push_decimal(&mut out, n);
            assert_eq!(out, n.to_string().into_bytes());
        }
    }

    // ---- property tests -------------------------------------------------

    /// A valid request and the `Request` it must parse to.
    #[derive(Debug, Clone)]
    struct Sample {
        bytes: Vec<u8>,
        expected: Request,
    }

    fn sample() -> impl Strategy<Value = Sample> {
        let method =
            prop::sample::select(vec!["GET", "POST", "PUT", "DELETE", "PATCH", "X-CUSTOM"]);
        let path = "/[a-zA-Z0-9%._~/-]{0,24}";
        let query = prop::option::of("[a-zA-Z0-9=&%?/]{0,16}");
        let version = prop::bool::ANY;
        let headers = prop::collection::vec(
            (
                "[a-zA-Z0-9!#$%&'*+.^_`|~-]{1,10}",
                "([!-~]([ -~\u{80}-\u{ff}]{0,16}[!-~])?)?",
                "[ \t]{0,2}",
                "[ \t]{0,2}",
            ),
            0..6,
        );
        let body = prop::collection::vec(any::<u8>(), 0..48);
        let framing = 0..3u8;
        let chunk_sizes = prop::collection::vec(1..16usize, 1..8);
        let extension = prop::option::of("; ?[a-z]{1,4}(=([a-z0-9]{1,4}|\"[a-z ;=]{0,6}\"))?");
        let trailers = prop::collection::vec(("[a-zA-Z-]{1,8}", "[a-z0-9 ]{0,8}"), 0..3);
        let bare_lf = prop::bool::ANY;
        (
            (method, path, query, version, headers),
            (body, framing, chunk_sizes, extension, trailers, bare_lf),
        )
            .prop_map(
                |(
                    (method, path, query, http11, headers),
                    (body, framing, sizes, ext, trailers, bare_lf),
                )| {
                    build_sample(
                        method, path, query, http11, headers, body, framing, sizes, ext, trailers,
                        bare_lf,
                    )
                },
            )
    }

    #[allow(clippy::too_many_arguments)]
    fn build_sample(
        method: &str,
        path: String,
        query: Option<String>,
        http11: bool,
        headers: Vec<(String, String, String, String)>,
        body: Vec<u8>,
        framing: u8,
        sizes: Vec<usize>,
        extension: Option<String>,
        trailers: Vec<(String, String)>,
        bare_lf: bool,
    ) -> Sample {
        let eol: &[u8] = if bare_lf { b"\n" } else { b"\r\n" };
        let target = match &query {
            Some(q) => format!("{path}?{q}"),
            None => path.clone(),
        };
        let version = if http11 {
            Version::Http11
        } else {
            Version::Http10
        };
        let mut bytes = format!(
            "{method} {target} {}",
            if http11 { "HTTP/1.1" } else { "HTTP/1.0" }
        )
        .into_bytes();
        bytes.extend_from_slice(eol);
        let mut expected_headers = Vec::new();
        let mut field = |bytes: &mut Vec<u8>, name: &str, pre: &str, value: &str, post: &str| {
            bytes.extend_from_slice(format!("{name}:{pre}{value}{post}").as_bytes());
            bytes.extend_from_slice(eol);
            expected_headers.push((name.to_ascii_lowercase(), value.to_string()));
        };
        field(&mut bytes, "Host", " ", "example", "");
        for (name, value, pre, post) in &headers {
            // Names with meaning to the parser are covered by the tables above.
            let name = format!("X-{name}");
            field(&mut bytes, &name, pre, value, post);
        }
        let body = if framing == 0 { Vec::new() } else { body };
        match framing {
            1 => field(
                &mut bytes,
                "Content-Length",
                " ",
                &body.len().to_string(),
                "",
            ),
            2 => field(&mut bytes, "Transfer-Encoding", " ", "chunked", ""),
            _ => {}
        }
        bytes.extend_from_slice(eol);
        match framing {
            1 => bytes.extend_from_slice(&body),
            2 => bytes.extend_from_slice(&chunked(&body, &sizes, extension.as_deref(), &trailers)),
            _ => {}
        }
        let expected = Request {
            method: method.to_string(),
            target,
            path,
            query,
            version,
            headers: expected_headers,
            body,
        };
        Sample { bytes, expected }
    }

    fn chunked(
        body: &[u8],
        sizes: &[usize],
        extension: Option<&str>,
        trailers: &[(String, String)],
    ) -> Vec<u8> {
        let mut out = Vec::new();
        let mut rest = body;
        let mut sizes = sizes.iter().cycle();
        while !rest.is_empty() {
            let n = (*sizes.next().unwrap_or(&1)).min(rest.len());
            out.extend_from_slice(format!("{n:x}{}\r\n", extension.unwrap_or("")).as_bytes());
            out.extend_from_slice(&rest[..n]);
            out.extend_from_slice(b"\r\n");
            rest = &rest[n..];
        }
        out.extend_from_slice(b"0\r\n");
        for (name, value) in trailers {
            out.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        out
    }

    /// Generous limits so generated requests are valid by construction.
    const ROOMY: ParseLimits = ParseLimits {
        max_request_line: 1024,
        max_header_bytes: 4096,
        max_headers: 16,
        max_body: 4096,
    };

    #[derive(Debug, Clone)]
    enum Mutation {
        Replace(usize, u8),
        Insert(usize, u8),
        Delete(usize),
    }

    fn mutation() -> impl Strategy<Value = Mutation> {
        let interesting = prop::sample::select(vec![
            b'\r', b'\n', b' ', b'\t', b':', b';', b'0', b'f', b'"', 0u8, 0xff,
        ]);
        let byte = prop_oneof![interesting, any::<u8>()];
        prop_oneof![
            (any::<usize>(), byte.clone()).prop_map(|(i, b)| Mutation::Replace(i, b)),
            (any::<usize>(), byte).prop_map(|(i, b)| Mutation::Insert(i, b)),
            any::<usize>().prop_map(Mutation::Delete),
        ]
    }

    fn mutate(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
        for m in mutations {
            match *m {
                Mutation::Replace(i, b) if !bytes.is_empty() => {
                    let i = i % bytes.len();
                    bytes[i] = b;
                }
                Mutation::Insert(i, b) => bytes.insert(i % (bytes.len() + 1), b),
                Mutation::Delete(i) if !bytes.is_empty() => {
                    let i = i % bytes.len();
                    bytes.remove(i);
                }
                _ => {}
            }
        }
        bytes
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn generated_requests_parse_to_what_was_sent(s in sample()) {
            let parsed = parse_request(&s.bytes, &ROOMY);
            prop_assert_eq!(parsed, Ok(Status::Complete((s.expected, s.bytes.len()))));
        }

        #[test]
        fn generated_requests_parse_the_same_split_anywhere(s in sample()) {
            let expected = Ok(Some((s.expected.clone(), s.bytes.len())));
            for split in 0..=s.bytes.len() {
                let (a, b) = s.bytes.split_at(split);
                prop_assert_eq!(&fed_in_pieces([a, b], &ROOMY), &expected, "split at {}", split);
                if split < s.bytes.len() {
                    prop_assert_eq!(parse_request(a, &ROOMY), Ok(Status::Partial), "prefix {}", split);
                }
            }
            prop_assert_eq!(&byte_at_a_time(&s.bytes, &ROOMY), &expected);
        }

        #[test]
        fn pipelined_requests_separate_exactly(a in sample(), b in sample()) {
            let mut both = a.bytes.clone();
            both.extend_from_slice(&b.bytes);
            let first = parse_request(&both, &ROOMY);
            prop_assert_eq!(first, Ok(Status::Complete((a.expected, a.bytes.len()))));
            let second = parse_request(&both[a.bytes.len()..], &ROOMY);
            prop_assert_eq!(second, Ok(Status::Complete((b.expected, b.bytes.len()))));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
            let _ = parse_request(&bytes, &LIMITS);
            let _ = parse_request(&bytes, &ROOMY);
        }

        #[test]
        fn mutated_requests_never_panic_and_parse_the_same_byte_by_byte(
            s in sample(),
            mutations in prop::collection::vec(mutation(), 1..5),
        ) {
            let bytes = mutate(s.bytes, &mutations);
            let whole = parse_request(&bytes, &ROOMY).map(as_option);
            if let Ok(Some((_, used))) = &whole {
                prop_assert!(*used <= bytes.len());
            }
            prop_assert_eq!(byte_at_a_time(&bytes, &ROOMY), whole);
        }
    }
}
