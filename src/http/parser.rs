//! The request state machine the server, the chaos proxy and the fuzz target
//! all drive: head first, then the body its framing announced.
//!
//! This file owns the order of the steps and the bookkeeping of which input
//! bytes were used; it is sans-IO and must stay so (no socket, clock or thread),
//! and it must never commit memory for a body before the bytes arrive.

use super::chunked::ChunkedDecoder;
use super::head::{parse_head_resuming, Framing, HeadScan};
use super::message::Request;
use super::parse_error::ParseError;
use super::parsing::{ParseLimits, ParseStatus};

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
            ParseStatus::Complete(head) => head,
            ParseStatus::Partial => return Ok((0, Progress::NeedMore)),
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
) -> Result<ParseStatus<(Request, usize)>, ParseError> {
    let mut parser = RequestParser::new(*limits);
    let mut used = 0;
    loop {
        let (n, progress) = parser.advance(&buf[used..])?;
        used += n;
        match progress {
            Progress::NeedMore => return Ok(ParseStatus::Partial),
            Progress::HeadComplete { .. } => {}
            Progress::Done(request) => return Ok(ParseStatus::Complete((request, used))),
        }
    }
}
