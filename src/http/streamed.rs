//! `Streamed`: a response body produced while it is sent — a server-sent
//! event stream whose events are written as they happen — and its framing
//! on the way out (RFC 9112 §7.1: one chunk per piece, then the last chunk).
//!
//! This file owns what a streamed body is (a producer the connection thread
//! calls once, after the head, with a `Sink` it pushes pieces through) and
//! the bytes each piece becomes (`StreamFraming`). It never touches a socket,
//! a clock or a thread: the server drives the producer and enforces the
//! bounds. A piece is never empty on the wire (an empty chunk would end the
//! body), and HTTP/1.0, which has no chunked coding, gets the pieces as they
//! are, the body then delimited by the connection's close.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where a producer pushes its pieces; the server's side of the stream.
pub trait Sink {
    /// Send `piece` now, as one unit on the wire (nothing is held back).
    /// `Err(Closed)` once the client has gone, a write failed or timed out,
    /// or the stream's time is up: the producer should return.
    fn send(&mut self, piece: &[u8]) -> Result<(), Closed>;

    /// Whether sending is still worth it: false once the client is known to
    /// have gone or the stream's time is up. Cheap; call it while waiting.
    fn is_open(&mut self) -> bool;

    /// How long the stream may still stay open; a producer that ends with a
    /// final message plans to send it before this runs out.
    fn remaining(&self) -> Duration;
}

/// The stream can take nothing more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed;

impl fmt::Display for Closed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the stream is closed")
    }
}

impl std::error::Error for Closed {}

/// What produces a streamed body: called once, on the connection's thread,
/// after the head has gone out; the body ends when it returns.
pub type Producer = Box<dyn FnOnce(&mut dyn Sink) + Send>;

/// A response body produced while it is sent. Taken once: a clone of the
/// response shares it, and only the first `take` gets the producer. Not
/// part of the message's equality, like `ClientProbe`.
#[derive(Clone)]
pub struct Streamed(Arc<Mutex<Option<Producer>>>);

impl Streamed {
    pub fn new(produce: impl FnOnce(&mut dyn Sink) + Send + 'static) -> Streamed {
        Streamed(Arc::new(Mutex::new(Some(Box::new(produce)))))
    }

    /// The producer, the first time; `None` after.
    pub fn take(&self) -> Option<Producer> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// This body with `around` run around its producer (the caller's log
    /// scope, say): `around` gets the sink and the producer to call.
    pub fn wrapped(
        self,
        around: impl FnOnce(&mut dyn Sink, Producer) + Send + 'static,
    ) -> Streamed {
        match self.take() {
            Some(produce) => Streamed::new(move |sink| around(sink, produce)),
            None => self,
        }
    }
}

impl fmt::Debug for Streamed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Streamed")
    }
}

impl PartialEq for Streamed {
    fn eq(&self, _: &Streamed) -> bool {
        true
    }
}

impl Eq for Streamed {}

/// How a streamed body is delimited on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamFraming {
    /// HTTP/1.1: `Transfer-Encoding: chunked`, a chunk per piece, and the
    /// last chunk at the end; the connection may carry another request.
    Chunked,
    /// HTTP/1.0: the pieces as they are; the body ends when the connection
    /// closes, so it always does.
    UntilClose,
}

/// The last chunk and the empty trailer section (RFC 9112 §7.1).
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

impl StreamFraming {
    /// Appends the wire form of one piece to `out`: for `Chunked`, its size
    /// in hex, CRLF, the bytes, CRLF. An empty piece writes nothing (an
    /// empty chunk is the last chunk).
    pub fn frame(self, piece: &[u8], out: &mut Vec<u8>) {
        if piece.is_empty() {
            return;
        }
        match self {
            StreamFraming::Chunked => {
                out.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
                out.extend_from_slice(piece);
                out.extend_from_slice(b"\r\n");
            }
            StreamFraming::UntilClose => out.extend_from_slice(piece),
        }
    }

    /// What ends the body: the last chunk, or nothing (the close ends it).
    pub fn end(self) -> &'static [u8] {
        match self {
            StreamFraming::Chunked => LAST_CHUNK,
            StreamFraming::UntilClose => b"",
        }
    }
}

/// One server-sent event (`text/event-stream`) carrying `data`, a single
/// line of JSON: `event: message`, the data, a blank line.
pub fn sse_event(data: &str) -> Vec<u8> {
    let mut event = Vec::with_capacity(data.len() + 24);
    event.extend_from_slice(b"event: message\ndata: ");
    event.extend_from_slice(data.as_bytes());
    event.extend_from_slice(b"\n\n");
    event
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::{ChunkedDecoder, ParseLimits};

    fn framed(framing: StreamFraming, pieces: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for piece in pieces {
            framing.frame(piece, &mut out);
        }
        out.extend_from_slice(framing.end());
        out
    }

    /// The exact bytes of each framing, and for `Chunked` the decoder reads
    /// them back to the pieces, whole or fed a byte at a time, and is done
    /// exactly at the end.
    #[test]
    fn pieces_are_framed_as_chunks_and_read_back() {
        let big = vec![b'x'; 300];
        let cases: [(&[&[u8]], &[u8]); 5] = [
            (&[], b"0\r\n\r\n"),
            (&[b"a"], b"1\r\na\r\n0\r\n\r\n"),
            (&[b"hello", b"", b"!"], b"5\r\nhello\r\n1\r\n!\r\n0\r\n\r\n"),
            (&[b"0\r\n\r\n"], b"5\r\n0\r\n\r\n\r\n0\r\n\r\n"),
            (&[&big[..]], &[]),
        ];
        for (pieces, want) in cases {
            let wire = framed(StreamFraming::Chunked, pieces);
            if !want.is_empty() {
                assert_eq!(wire, want, "{pieces:?}");
            } else {
                assert!(wire.starts_with(b"12c\r\n"), "300 bytes is 0x12c");
            }
            let whole: Vec<u8> = pieces.concat();
            let mut decoder = ChunkedDecoder::new();
            let mut body = Vec::new();
            let used = decoder
                .decode(&wire, &mut body, &ParseLimits::default())
                .unwrap();
            assert_eq!((used, decoder.is_done()), (wire.len(), true));
            assert_eq!(body, whole);
            // Every truncated prefix is incomplete, never done, never an error.
            for cut in 0..wire.len() {
                let mut decoder = ChunkedDecoder::new();
                let mut body = Vec::new();
                decoder
                    .decode(&wire[..cut], &mut body, &ParseLimits::default())
                    .unwrap();
                assert!(!decoder.is_done(), "{pieces:?} cut at {cut}");
            }
        }
    }

    #[test]
    fn until_close_writes_the_pieces_as_they_are() {
        let wire = framed(StreamFraming::UntilClose, &[b"event", b"", b"s"]);
        assert_eq!(wire, b"events");
    }

    #[test]
    fn an_event_is_one_data_line_and_a_blank_line() {
        assert_eq!(
            sse_event("{\"a\":1}"),
            b"event: message\ndata: {\"a\":1}\n\n"
        );
    }

    #[test]
    fn the_producer_is_taken_once() {
        let streamed = Streamed::new(|_| {});
        let clone = streamed.clone();
        assert!(clone.take().is_some());
        assert!(streamed.take().is_none());
    }
}
