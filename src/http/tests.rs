//! The parser's table-driven tests: every valid request parses whole, byte by
//! byte and not before its last byte; every invalid one gets its own error, the
//! same however its bytes arrive. Property tests are in `tests/proptests.rs`.

use super::chunked::MAX_CHUNK_LINE;
use super::*;
use ParseError::*;

mod proptests;

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

fn whole(bytes: &[u8]) -> Result<ParseStatus<(Request, usize)>, ParseError> {
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

fn as_option(status: ParseStatus<(Request, usize)>) -> Option<(Request, usize)> {
    match status {
        ParseStatus::Complete(parsed) => Some(parsed),
        ParseStatus::Partial => None,
    }
}

#[test]
fn valid_requests_parse_whole_and_use_every_byte() {
    for (name, bytes) in VALID {
        match whole(bytes) {
            Ok(ParseStatus::Complete((_, used))) => assert_eq!(used, bytes.len(), "{name}"),
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
                Ok(ParseStatus::Partial),
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
        let code = error.code();
        assert!(
            expected_codes.contains(&(code.status(), code.as_str())),
            "{error:?}"
        );
        assert!(!error.message().is_empty());
        let response = error.to_response();
        let body: serde_json::Value = serde_json::from_slice(&response.body).unwrap();
        assert_eq!(response.status, code.status(), "{error:?}");
        assert_eq!(body["error"]["code"], code.as_str());
        assert_eq!(body["error"]["message"], error.message());
    }
    let status = |error: ParseError| error.code().status();
    assert_eq!(status(UnsupportedVersion), 505);
    assert_eq!(status(RequestLineTooLong), 414);
    assert_eq!(status(HeadersTooLarge), 431);
    assert_eq!(status(PayloadTooLarge), 413);
    assert_eq!(status(UnsupportedTransferEncoding), 501);
    assert_eq!(status(UnsupportedExpectation), 417);
}

/// Every code answers with its own status and the one error shape; only the
/// codes that promise a header (`Retry-After`, `Allow`) carry one.
#[test]
fn error_responses_carry_their_status_and_promised_headers() {
    for &code in ErrorCode::ALL {
        let response = Response::from_error(code, "why");
        let body: serde_json::Value = serde_json::from_slice(&response.body).unwrap();
        assert_eq!(response.status, code.status(), "{code}");
        assert_eq!(
            body,
            serde_json::json!({"error": {"code": code.as_str(), "message": "why"}})
        );
        let retry_after = response.headers.iter().any(|(n, _)| n == "Retry-After");
        let promised = matches!(code, ErrorCode::Unavailable | ErrorCode::Overloaded);
        assert_eq!(retry_after, promised, "{code}");
    }
    let wrong_method = Response::method_not_allowed("GET, HEAD");
    assert_eq!(wrong_method.status, 405);
    assert!(wrong_method
        .headers
        .contains(&("Allow".to_string(), "GET, HEAD".to_string())));
}

/// Members beside `error` (`/healthz`'s) go through the same path: same
/// status, same `Retry-After`, and they cannot replace `error` itself.
#[test]
fn error_with_members_beside_it_keeps_the_one_shape() {
    let mut beside = serde_json::Map::new();
    beside.insert("ok".into(), false.into());
    beside.insert("error".into(), "overwritten?".into());
    let response = Response::from_error_beside(ErrorCode::Unavailable, "database: gone", beside);
    let body: serde_json::Value = serde_json::from_slice(&response.body).unwrap();
    assert_eq!(response.status, 503);
    assert_eq!(
        response.header("Retry-After"),
        Some(super::RETRY_AFTER_SECS.to_string().as_str())
    );
    assert_eq!(
        body,
        serde_json::json!({"ok": false, "error": {"code": "unavailable", "message": "database: gone"}})
    );
}

fn parsed(bytes: &[u8]) -> Request {
    match whole(bytes) {
        Ok(ParseStatus::Complete((request, _))) => request,
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
    let Ok(ParseStatus::Complete((r1, used))) = whole(&both) else {
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
        Ok(ParseStatus::Complete(head)) => head,
        other => panic!("{other:?}"),
    };
    let h =
        head(b"POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 9\r\n\r\n");
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
