//! Arbitrary bytes into the request parser: it must never panic, must never
//! claim more bytes than it was given, and must reach the same verdict whether
//! the bytes arrive at once or a few at a time (as they do from a socket).
//!
//! Start from the seeds, or the fuzzer spends minutes finding a request line:
//! `cargo +nightly fuzz run parse_request corpus/parse_request seeds/parse_request`
#![no_main]

use idempotent_tool::http::{parse_request, ParseLimits, Progress, RequestParser, ParseStatus};
use libfuzzer_sys::fuzz_target;

/// Small limits, so the fuzzer reaches every limit check with short inputs.
const LIMITS: ParseLimits = ParseLimits {
    max_request_line: 128,
    max_header_bytes: 512,
    max_headers: 8,
    max_body: 256,
};

fuzz_target!(|data: &[u8]| {
    let whole = parse_request(data, &LIMITS);
    if let Ok(ParseStatus::Complete((_, used))) = &whole {
        assert!(*used <= data.len());
    }
    let split = data.first().map_or(1, |&b| usize::from(b % 7) + 1);
    let pieces = fed_in_pieces(data, split);
    let whole = whole.map(|s| match s {
        ParseStatus::Complete(parsed) => Some(parsed),
        ParseStatus::Partial => None,
    });
    assert_eq!(pieces, whole);
});

/// Feeds `data` `step` bytes at a time, dropping what the parser used, the way
/// the server drives it.
fn fed_in_pieces(
    data: &[u8],
    step: usize,
) -> Result<Option<(idempotent_tool::http::Request, usize)>, idempotent_tool::http::ParseError> {
    let mut parser = RequestParser::new(LIMITS);
    let mut unread = Vec::new();
    let mut used_total = 0;
    for piece in data.chunks(step) {
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
