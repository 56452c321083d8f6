//! One client connection, served on its own thread: read a request within its
//! deadlines, call the handler, write the answer, repeat while keep-alive holds.
//!
//! This file owns a connection's reads, writes, deadlines and the decision to
//! close. It must never let one client hold its thread past `request_timeout`
//! (reading or writing), `idle_timeout` or, for a streamed body, `max_stream`, never call the handler for a request
//! that did not arrive whole, and never close with unread input still arriving
//! after an error response (see `linger`).

use super::input_buffer::{InputBuffer, RETAINED_BUFFER};
use super::limits::Limits;
use super::observer::{Handler, Observer};
use super::stream::StreamEnd;
use crate::http::{
    write_response, write_streamed_head, ClientProbe, ErrorCode, ParseError, ParseLimits, Producer,
    Progress, Request, RequestParser, Response, StreamFraming, Streamed, Version, WriteOptions,
    CONTINUE_100,
};
use std::io::{self, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Upper bound on lingering after an error response (see `ServedConnection::linger`).
const MAX_LINGER: Duration = Duration::from_secs(1);
const MAX_LINGER_BYTES: usize = 256 * 1024;

/// Why reading a request stopped without one.
enum Failure {
    /// The client closed or the socket failed: nobody to answer.
    Vanished,
    /// Answer this and close.
    Respond(Response),
}

impl From<ParseError> for Failure {
    fn from(e: ParseError) -> Self {
        Failure::Respond(e.to_response())
    }
}

/// Whether the connection loop goes on.
enum Next {
    Continue,
    Close,
}

/// One client connection, served on its own thread.
pub(super) struct ServedConnection<'a> {
    /// Shared with the `ClientProbe` of the request being handled, which
    /// peeks at it; a clone of the `Arc`, not of the descriptor.
    stream: Arc<TcpStream>,
    /// Handed to every request, built once per connection.
    probe: ClientProbe,
    limits: &'a Limits,
    /// Told about every answer given without the handler.
    observer: &'a dyn Observer,
    /// The client's address, handed to every request (the access log's `client`).
    peer: Option<SocketAddr>,
    parse_limits: ParseLimits,
    input: InputBuffer,
    output: Vec<u8>,
    /// The read timeout currently set on the socket, to skip redundant syscalls.
    read_timeout: Option<Duration>,
}

impl<'a> ServedConnection<'a> {
    pub(super) fn new(stream: TcpStream, limits: &'a Limits, observer: &'a dyn Observer) -> Self {
        let peer = stream.peer_addr().ok();
        let stream = Arc::new(stream);
        ServedConnection {
            peer,
            probe: probe(&stream),
            stream,
            limits,
            observer,
            parse_limits: limits.parse_limits(),
            input: InputBuffer::new(),
            output: Vec::with_capacity(1024),
            read_timeout: None,
        }
    }

    pub(super) fn run(mut self, handler: &Handler) {
        let _ = self.stream.set_nodelay(true);
        // Without a write timeout, a client that never reads pins this thread forever.
        let _ = self
            .stream
            .set_write_timeout(Some(at_least_1ms(self.limits.request_timeout)));
        while let Next::Continue = self.serve_one(handler) {}
    }

    fn serve_one(&mut self, handler: &Handler) -> Next {
        self.input.discard_leading_newlines();
        if self.input.is_empty() && !self.wait_while_idle() {
            return Next::Close;
        }
        let started = Instant::now();
        let mut request = match self.read_request() {
            Ok(request) => request,
            Err(Failure::Vanished) => return Next::Close,
            Err(Failure::Respond(mut response)) => {
                self.observer
                    .own_answer(None, self.peer, &mut response, started.elapsed());
                self.answer_and_close(&response);
                return Next::Close;
            }
        };
        request.client = self.probe.clone();
        request.peer = self.peer;
        let (mut response, handler_panicked) = call_handler(handler, &request);
        if handler_panicked {
            self.observer
                .own_answer(Some(&request), self.peer, &mut response, started.elapsed());
        }
        let keep_alive = !handler_panicked && request.keep_alive() && !response.asks_to_close();
        let options = WriteOptions {
            keep_alive,
            request_version: request.version,
            head_only: request.method == "HEAD",
        };
        if let Some(produce) = response.stream.as_ref().and_then(Streamed::take) {
            return self.stream_response(&response, produce, options);
        }
        self.output.clear();
        write_response(&mut self.output, &response, options);
        if (&*self.stream).write_all(&self.output).is_err() {
            return Next::Close;
        }
        if !keep_alive {
            let _ = self.stream.shutdown(Shutdown::Write);
            return Next::Close;
        }
        self.input.shrink_if_large();
        if self.output.capacity() > RETAINED_BUFFER {
            self.output = Vec::with_capacity(1024);
        }
        Next::Continue
    }

    /// A streamed body (`server::stream`): the head, then the producer's
    /// pieces as they come, within `max_stream`; the connection goes on only
    /// after a whole chunked body. A HEAD gets the head alone.
    fn stream_response(
        &mut self,
        response: &Response,
        produce: Producer,
        options: WriteOptions,
    ) -> Next {
        let framing = match options.request_version {
            Version::Http11 => StreamFraming::Chunked,
            Version::Http10 => StreamFraming::UntilClose,
        };
        self.output.clear();
        write_streamed_head(&mut self.output, response, options, framing);
        if (&*self.stream).write_all(&self.output).is_err() {
            return Next::Close;
        }
        let end = if options.head_only {
            StreamEnd::Whole
        } else {
            let stream = Arc::clone(&self.stream);
            let gone = move || client_gone(&stream);
            super::stream::drive(
                &self.stream,
                framing,
                produce,
                self.limits.max_stream,
                &gone,
            )
        };
        if end == StreamEnd::Whole && options.keep_alive && framing == StreamFraming::Chunked {
            return Next::Continue;
        }
        let _ = self.stream.shutdown(Shutdown::Write);
        Next::Close
    }

    /// Waits for the first byte of the next request; false means close silently
    /// (idle timeout, client closed, or socket error).
    fn wait_while_idle(&mut self) -> bool {
        self.set_read_timeout(self.limits.idle_timeout);
        loop {
            match self.input.read_from(&mut &*self.stream) {
                Ok(0) => return false,
                Ok(_) => return true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return false,
            }
        }
    }

    /// Reads one request. The head must be complete within `request_timeout` of
    /// its first byte, and the body within `request_timeout` of the head: the
    /// deadline is for the whole thing, so trickling bytes does not extend it.
    fn read_request(&mut self) -> Result<Request, Failure> {
        let mut parser = RequestParser::new(self.parse_limits);
        let mut deadline = Instant::now() + self.limits.request_timeout;
        loop {
            let (used, progress) = parser.advance(self.input.unread())?;
            self.input.consume(used);
            match progress {
                Progress::Done(request) => return Ok(request),
                Progress::HeadComplete { expect_continue } => {
                    if expect_continue {
                        (&*self.stream)
                            .write_all(CONTINUE_100)
                            .map_err(|_| Failure::Vanished)?;
                    }
                    deadline = Instant::now() + self.limits.request_timeout;
                }
                Progress::NeedMore => self.read_before(deadline)?,
            }
        }
    }

    fn read_before(&mut self, deadline: Instant) -> Result<(), Failure> {
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Err(Failure::Respond(request_timeout_response()));
            }
            self.set_read_timeout(deadline - now);
            match self.input.read_from(&mut &*self.stream) {
                Ok(0) => return Err(Failure::Vanished),
                Ok(_) => return Ok(()),
                Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return Err(Failure::Vanished),
            }
        }
    }

    fn set_read_timeout(&mut self, timeout: Duration) {
        let timeout = Some(at_least_1ms(timeout));
        if self.read_timeout != timeout && self.stream.set_read_timeout(timeout).is_ok() {
            self.read_timeout = timeout;
        }
    }

    fn answer_and_close(&mut self, response: &Response) {
        if (&*self.stream)
            .write_all(&closing_response_bytes(response))
            .is_ok()
        {
            self.linger();
        }
    }

    /// After an error response the client may still be sending the request we
    /// gave up on; closing with that unread makes the kernel reset the connection,
    /// which can destroy our response in flight. So: stop writing, then read and
    /// discard for a short, bounded while, until the client closes.
    fn linger(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Write);
        let deadline = Instant::now() + MAX_LINGER.min(self.limits.request_timeout);
        let mut discarded = 0;
        while discarded < MAX_LINGER_BYTES {
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            self.set_read_timeout(deadline - now);
            self.input.clear();
            match self.input.read_from(&mut &*self.stream) {
                Ok(0) => return,
                Ok(n) => discarded += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return,
            }
        }
    }
}

fn request_timeout_response() -> Response {
    Response::from_error(ErrorCode::RequestTimeout, "request not received in time")
}

fn call_handler(handler: &Handler, request: &Request) -> (Response, bool) {
    match catch_unwind(AssertUnwindSafe(|| handler(request))) {
        Ok(response) => (response, false),
        Err(_) => {
            crate::log::error("handler panicked; answered 500")
                .event("handler_panic")
                .emit();
            let response = Response::from_error(ErrorCode::InternalError, "internal error");
            (response, true)
        }
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Socket timeouts of zero mean "error" to std, not "expire now".
fn at_least_1ms(d: Duration) -> Duration {
    d.max(Duration::from_millis(1))
}

/// A probe for the handler: has the client of this connection gone?
fn probe(stream: &Arc<TcpStream>) -> ClientProbe {
    let stream = Arc::clone(stream);
    ClientProbe::new(move || client_gone(&stream))
}

/// A non-blocking peek. End of stream (the client closed) or a reset means
/// gone; nothing to read yet, or bytes waiting (a pipelined request), means
/// still there. Only the connection's own thread uses the socket meanwhile
/// (it is running the handler), so switching to non-blocking and back cannot
/// disturb a read. A client that half-closes (`shutdown(SHUT_WR)`) after
/// sending its request is taken as gone too: it cannot be told apart from
/// one that closed, and almost no HTTP client does that.
fn client_gone(stream: &TcpStream) -> bool {
    if stream.set_nonblocking(true).is_err() {
        return false;
    }
    let mut byte = [0u8; 1];
    let gone = match stream.peek(&mut byte) {
        Ok(n) => n == 0,
        Err(e) => !matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
        ),
    };
    let _ = stream.set_nonblocking(false);
    gone
}

/// A response written as the last on its connection (`Connection: close`).
pub(super) fn closing_response_bytes(response: &Response) -> Vec<u8> {
    let mut out = Vec::with_capacity(128 + response.body.len());
    let options = WriteOptions {
        keep_alive: false,
        request_version: Version::Http11,
        head_only: false,
    };
    write_response(&mut out, response, options);
    out
}
