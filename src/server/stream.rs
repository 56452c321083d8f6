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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::{Shutdown, TcpListener};

    /// A connected pair: the server's end and the client's.
    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        (server, client)
    }

    fn read_to_end(mut client: TcpStream) -> Vec<u8> {
        let mut got = Vec::new();
        client.read_to_end(&mut got).unwrap();
        got
    }

    fn never_gone() -> bool {
        false
    }

    /// A producer that returns with its pieces sent gets the last chunk,
    /// and the connection may go on; each piece is one chunk.
    #[test]
    fn a_whole_stream_ends_with_the_last_chunk() {
        let (server, client) = pair();
        let produce: Producer = Box::new(|sink| {
            sink.send(b"one").unwrap();
            sink.send(b"").unwrap();
            assert!(sink.is_open());
            sink.send(b"two!").unwrap();
        });
        let end = drive(
            &server,
            StreamFraming::Chunked,
            produce,
            Duration::from_secs(60),
            &never_gone,
        );
        assert_eq!(end, StreamEnd::Whole);
        server.shutdown(Shutdown::Write).unwrap();
        assert_eq!(read_to_end(client), b"3\r\none\r\n4\r\ntwo!\r\n0\r\n\r\n");
    }

    /// Past its time a stream takes nothing more, and it is cut: no last
    /// chunk, so the client cannot take it for whole.
    #[test]
    fn a_stream_past_its_time_is_cut() {
        let (server, client) = pair();
        let produce: Producer = Box::new(|sink| {
            assert!(!sink.is_open());
            assert_eq!(sink.remaining(), Duration::ZERO);
            assert_eq!(sink.send(b"late"), Err(Closed));
        });
        let end = drive(
            &server,
            StreamFraming::Chunked,
            produce,
            Duration::ZERO,
            &never_gone,
        );
        assert_eq!(end, StreamEnd::Close);
        server.shutdown(Shutdown::Write).unwrap();
        assert_eq!(read_to_end(client), b"");
    }

    /// A client that has gone closes the stream for its producer, which
    /// returns; the body is cut. A panicking producer cuts it too.
    #[test]
    fn a_gone_client_or_a_panic_cuts_the_stream() {
        let (server, client) = pair();
        drop(client);
        let gone = || true;
        let produce: Producer = Box::new(|sink| {
            assert!(!sink.is_open());
            assert_eq!(sink.send(b"x"), Err(Closed));
        });
        let end = drive(
            &server,
            StreamFraming::Chunked,
            produce,
            Duration::from_secs(60),
            &gone,
        );
        assert_eq!(end, StreamEnd::Close);

        let (server, client) = pair();
        let produce: Producer = Box::new(|sink| {
            sink.send(b"half").unwrap();
            panic!("the producer fails");
        });
        let end = drive(
            &server,
            StreamFraming::Chunked,
            produce,
            Duration::from_secs(60),
            &never_gone,
        );
        assert_eq!(end, StreamEnd::Close);
        server.shutdown(Shutdown::Write).unwrap();
        assert_eq!(read_to_end(client), b"4\r\nhalf\r\n");
    }

    /// HTTP/1.0: the pieces as they are, and the connection closes.
    #[test]
    fn an_http_1_0_stream_is_ended_by_the_close() {
        let (server, client) = pair();
        let produce: Producer = Box::new(|sink| sink.send(b"data").unwrap());
        let end = drive(
            &server,
            StreamFraming::UntilClose,
            produce,
            Duration::from_secs(60),
            &never_gone,
        );
        assert_eq!(end, StreamEnd::Close);
        server.shutdown(Shutdown::Write).unwrap();
        assert_eq!(read_to_end(client), b"data");
    }
}
