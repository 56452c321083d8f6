//! A streamed response on its connection: the head, then each piece its
//! producer sends written and sent at once (one chunk, one write, no delay:
//! the socket has Nagle off), then the last chunk — within bounds.
//!
//! This file owns a streamed body's time on the wire. It must never let a
//! stream outlive `Limits::max_stream`, never hold more than the piece being
//! written (a client that stops reading blocks that write for at most
//! `request_timeout`, then the stream ends), and never end a body that was
//! cut short as if it were whole: only a producer that returned with every
//! piece sent gets the last chunk, and only then may the connection carry
//! another request. A client that goes away ends the stream, never the work
//! behind it (the producer is told, and returns).

use crate::http::{Closed, Producer, Sink, StreamFraming};
use std::io::{self, Write};
use std::net::TcpStream;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

/// How a streamed body ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StreamEnd {
    /// The producer returned with every piece sent, and the end of the body
    /// went out: the connection may go on.
    Whole,
    /// Cut short (the client went, a write failed, the time ran out, the
    /// producer panicked), or delimited by the close (HTTP/1.0): the
    /// connection must close.
    Close,
}

/// The connection's side of a stream: writes each piece as one frame.
struct SocketSink<'a> {
    stream: &'a TcpStream,
    framing: StreamFraming,
    deadline: Instant,
    /// Whether the client has gone (cheap and non-blocking).
    gone: &'a dyn Fn() -> bool,
    /// A write failed or a check found the client gone: nothing more goes.
    broken: bool,
    frame: Vec<u8>,
}

impl Sink for SocketSink<'_> {
    fn send(&mut self, piece: &[u8]) -> Result<(), Closed> {
        if self.broken || Instant::now() >= self.deadline {
            return Err(Closed);
        }
        self.frame.clear();
        self.framing.frame(piece, &mut self.frame);
        match write_whole(self.stream, &self.frame) {
            Ok(()) => Ok(()),
            Err(_) => {
                self.broken = true;
                Err(Closed)
            }
        }
    }

    fn is_open(&mut self) -> bool {
        if !self.broken && (self.gone)() {
            self.broken = true;
        }
        !self.broken && Instant::now() < self.deadline
    }

    fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }
}

/// Run `produce` over the connection (whose head is already written) for at
/// most `max_stream`, then end the body if it is whole.
pub(super) fn drive(
    stream: &TcpStream,
    framing: StreamFraming,
    produce: Producer,
    max_stream: Duration,
    gone: &dyn Fn() -> bool,
) -> StreamEnd {
    let mut sink = SocketSink {
        stream,
        framing,
        deadline: Instant::now() + max_stream,
        gone,
        broken: false,
        frame: Vec::new(),
    };
    let produced = catch_unwind(AssertUnwindSafe(|| produce(&mut sink)));
    if produced.is_err() {
        crate::log::error("stream producer panicked; connection closed")
            .event("stream_panic")
            .emit();
        return StreamEnd::Close;
    }
    let whole = !sink.broken && Instant::now() < sink.deadline;
    if whole && framing == StreamFraming::Chunked && write_whole(stream, framing.end()).is_ok() {
        return StreamEnd::Whole;
    }
    StreamEnd::Close
}

/// One write of the whole frame; the socket's write timeout bounds it.
fn write_whole(mut stream: &TcpStream, bytes: &[u8]) -> io::Result<()> {
    stream.write_all(bytes)
}
