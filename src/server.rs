//! The accept loop and one thread per connection.
//!
//! This module owns sockets, threads, deadlines and the connection cap: it feeds
//! the bytes a client sends to the parser in `http`, calls the handler once per
//! complete request, and writes the answers back in order. It must never let a
//! panic or any input stop it from serving other clients, never let one client
//! hold a thread past its deadlines, never leak a connection slot, and never log
//! more than one short line per unusual event (stderr only).

use crate::http::{
    write_response, ParseError, ParseLimits, Progress, Request, RequestParser, Response, Version,
    WriteOptions, CONTINUE_100,
};
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// What the server calls for each request; it must not panic, but if it does the
/// connection answers `500 internal_error`.
pub type Handler = Arc<dyn Fn(&Request) -> Response + Send + Sync>;

/// Size and time limits for every connection.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_request_line: usize,
    pub max_header_bytes: usize,
    pub max_headers: usize,
    pub max_body: usize,
    /// A request's head (and then its body) must arrive within this; it also
    /// bounds how long writing one response may block.
    pub request_timeout: Duration,
    /// An idle keep-alive connection is closed after this.
    pub idle_timeout: Duration,
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        let parse = ParseLimits::default();
        Limits {
            max_request_line: parse.max_request_line,
            max_header_bytes: parse.max_header_bytes,
            max_headers: parse.max_headers,
            max_body: parse.max_body,
            request_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            max_connections: 1024,
        }
    }
}

impl Limits {
    /// The subset of the limits the parser enforces.
    pub fn parse_limits(&self) -> ParseLimits {
        ParseLimits {
            max_request_line: self.max_request_line,
            max_header_bytes: self.max_header_bytes,
            max_headers: self.max_headers,
            max_body: self.max_body,
        }
    }
}

/// Serve forever on an already-bound listener.
pub fn serve(listener: TcpListener, handler: Handler, limits: Limits) {
    let open = Arc::new(AtomicUsize::new(0));
    let limits = Arc::new(limits);
    let mut accept_errors = RateLimitedLog::default();
    let mut busy_log = RateLimitedLog::default();
    let mut next_id: u64 = 0;
    for incoming in listener.incoming() {
        let stream = match incoming {
            Ok(stream) => stream,
            Err(e) => {
                accept_errors.log(format_args!("accept failed: {e}"));
                // Out of descriptors or memory: give the system a moment instead of spinning.
                thread::sleep(Duration::from_millis(5));
                continue;
            }
        };
        // Only this thread increments `open`, so checking then claiming cannot overshoot.
        if open.load(Ordering::Acquire) >= limits.max_connections {
            busy_log.log(format_args!(
                "connection limit ({}) reached; answering 503",
                limits.max_connections
            ));
            reject_busy(stream);
            continue;
        }
        next_id += 1;
        spawn_connection(next_id, stream, Slot::claim(&open), &handler, &limits);
    }
}

fn spawn_connection(
    id: u64,
    stream: TcpStream,
    slot: Slot,
    handler: &Handler,
    limits: &Arc<Limits>,
) {
    let handler = Arc::clone(handler);
    let limits = Arc::clone(limits);
    let spawned = thread::Builder::new()
        .name(format!("conn-{id}"))
        .spawn(move || {
            let _slot = slot;
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                Connection::new(stream, &limits).run(&handler)
            }));
            if outcome.is_err() {
                eprintln!("conn-{id}: connection thread panicked; connection closed");
            }
        });
    // On failure the closure (and with it the slot and the stream) is dropped here.
    if let Err(e) = spawned {
        eprintln!("cannot spawn a connection thread: {e}");
    }
}

/// One counted open connection; dropping it (however the thread ends) frees it.
struct Slot(Arc<AtomicUsize>);

impl Slot {
    fn claim(open: &Arc<AtomicUsize>) -> Slot {
        open.fetch_add(1, Ordering::AcqRel);
        Slot(Arc::clone(open))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Logs at most one line a second, so a flood cannot flood stderr too.
#[derive(Default)]
struct RateLimitedLog {
    last: Option<Instant>,
    suppressed: u64,
}

impl RateLimitedLog {
    fn log(&mut self, message: std::fmt::Arguments<'_>) {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            self.suppressed += 1;
            return;
        }
        match self.suppressed {
            0 => eprintln!("{message}"),
            n => eprintln!("{message} ({n} similar suppressed)"),
        }
        self.last = Some(now);
        self.suppressed = 0;
    }
}

/// Over the cap: answer from the accept thread without spawning. The socket is
/// fresh, so its send buffer is empty and the write cannot block for long.
fn reject_busy(mut stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(Duration::from_millis(200)));
    let response = Response::error(503, "unavailable", "too many open connections")
        .with_header("Retry-After", "1");
    let _ = stream.write_all(&closing_response_bytes(&response));
    let _ = stream.shutdown(Shutdown::Write);
    discard_already_received(&mut stream);
}

fn closing_response_bytes(response: &Response) -> Vec<u8> {
    let mut out = Vec::with_capacity(128 + response.body.len());
    let options = WriteOptions {
        keep_alive: false,
        request_version: Version::Http11,
        head_only: false,
    };
    write_response(&mut out, response, options);
    out
}

/// Closing a socket with unread input makes the kernel send RST, which can
/// destroy the response before the client reads it; reading what is already
/// there first avoids that without waiting.
fn discard_already_received(stream: &mut TcpStream) {
    if stream.set_nonblocking(true).is_err() {
        return;
    }
    let mut scratch = [0u8; 4096];
    for _ in 0..16 {
        match stream.read(&mut scratch) {
            Ok(n) if n > 0 => continue,
            _ => return,
        }
    }
}

/// Upper bound on lingering after an error response (see `Connection::linger`).
const MAX_LINGER: Duration = Duration::from_secs(1);
const MAX_LINGER_BYTES: usize = 256 * 1024;
/// A buffer that grew past this for one big request is given back afterwards.
const RETAINED_BUFFER: usize = 64 * 1024;
const INITIAL_BUFFER: usize = 8 * 1024;
const MIN_READ_ROOM: usize = 4 * 1024;

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
struct Connection<'a> {
    stream: TcpStream,
    limits: &'a Limits,
    parse_limits: ParseLimits,
    input: InputBuffer,
    output: Vec<u8>,
    /// The read timeout currently set on the socket, to skip redundant syscalls.
    read_timeout: Option<Duration>,
}

impl<'a> Connection<'a> {
    fn new(stream: TcpStream, limits: &'a Limits) -> Self {
        Connection {
            stream,
            limits,
            parse_limits: limits.parse_limits(),
            input: InputBuffer::new(),
            output: Vec::with_capacity(1024),
            read_timeout: None,
        }
    }

    fn run(mut self, handler: &Handler) {
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
        let request = match self.read_request() {
            Ok(request) => request,
            Err(Failure::Vanished) => return Next::Close,
            Err(Failure::Respond(response)) => {
                self.answer_and_close(&response);
                return Next::Close;
            }
        };
        let (response, handler_panicked) = call_handler(handler, &request);
        let keep_alive = !handler_panicked && request.keep_alive() && !response.asks_to_close();
        let options = WriteOptions {
            keep_alive,
            request_version: request.version,
            head_only: request.method == "HEAD",
        };
        self.output.clear();
        write_response(&mut self.output, &response, options);
        if self.stream.write_all(&self.output).is_err() {
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

    /// Waits for the first byte of the next request; false means close silently
    /// (idle timeout, client closed, or socket error).
    fn wait_while_idle(&mut self) -> bool {
        self.set_read_timeout(self.limits.idle_timeout);
        loop {
            match self.input.read_from(&mut self.stream) {
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
                        self.stream
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
            match self.input.read_from(&mut self.stream) {
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
        if self
            .stream
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
            match self.input.read_from(&mut self.stream) {
                Ok(0) => return,
                Ok(n) => discarded += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return,
            }
        }
    }
}

fn request_timeout_response() -> Response {
    Response::error(408, "request_timeout", "request not received in time")
}

fn call_handler(handler: &Handler, request: &Request) -> (Response, bool) {
    match catch_unwind(AssertUnwindSafe(|| handler(request))) {
        Ok(response) => (response, false),
        Err(_) => {
            eprintln!(
                "handler panicked on {} {}; answered 500",
                request.method, request.path
            );
            let response = Response::error(500, "internal_error", "internal error");
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

/// A connection's read buffer: bytes in `data[start..end]` are received but not
/// yet used by the parser. Reused across requests so the fast path allocates
/// nothing for input.
struct InputBuffer {
    data: Vec<u8>,
    start: usize,
    end: usize,
}

impl InputBuffer {
    fn new() -> Self {
        InputBuffer {
            data: vec![0; INITIAL_BUFFER],
            start: 0,
            end: 0,
        }
    }

    fn unread(&self) -> &[u8] {
        &self.data[self.start..self.end]
    }

    fn is_empty(&self) -> bool {
        self.start == self.end
    }

    fn consume(&mut self, n: usize) {
        self.start = (self.start + n).min(self.end);
        if self.start == self.end {
            self.clear();
        }
    }

    fn clear(&mut self) {
        self.start = 0;
        self.end = 0;
    }

    /// Stray CRLFs between requests (some clients add one after a body) are not
    /// the start of a request, so they must not start the request deadline.
    fn discard_leading_newlines(&mut self) {
        let n = self
            .unread()
            .iter()
            .take_while(|&&b| b == b'\r' || b == b'\n')
            .count();
        self.consume(n);
    }

    /// One `read` into free space at the end. The parser consumes bytes as soon as
    /// they form something whole, so the unread part stays within the head and
    /// line limits and the buffer cannot grow without bound.
    fn read_from(&mut self, reader: &mut impl Read) -> io::Result<usize> {
        self.make_room();
        let n = reader.read(&mut self.data[self.end..])?;
        self.end += n;
        Ok(n)
    }

    fn make_room(&mut self) {
        if self.data.len() - self.end >= MIN_READ_ROOM {
            return;
        }
        if self.start > 0 {
            self.data.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.data.len() - self.end < MIN_READ_ROOM {
            let grown = (self.data.len() * 2).max(self.end + MIN_READ_ROOM);
            self.data.resize(grown, 0);
        }
    }

    fn shrink_if_large(&mut self) {
        let unread = self.end - self.start;
        if self.data.len() <= RETAINED_BUFFER || unread > INITIAL_BUFFER / 2 {
            return;
        }
        let mut fresh = vec![0; INITIAL_BUFFER];
        fresh[..unread].copy_from_slice(self.unread());
        self.data = fresh;
        self.start = 0;
        self.end = unread;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::net::SocketAddr;
    use std::sync::atomic::AtomicBool;
    use std::sync::Mutex;

    /// Long enough for a loaded 2-core machine; only reached when a test fails.
    const PATIENCE: Duration = Duration::from_secs(10);

    fn quick_limits() -> Limits {
        Limits {
            request_timeout: Duration::from_millis(300),
            idle_timeout: Duration::from_secs(5),
            ..Limits::default()
        }
    }

    fn start(limits: Limits, handler: Handler) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        thread::spawn(move || serve(listener, handler, limits));
        addr
    }

    /// Answers `METHOD PATH BODY`, panics on /panic, and sends a huge body on /huge.
    fn echo() -> Handler {
        Arc::new(|request: &Request| {
            if request.path == "/panic" {
                panic!("test handler asked to panic");
            }
            if request.path == "/huge" {
                return Response {
                    status: 200,
                    headers: vec![],
                    body: vec![b'x'; 32 << 20],
                };
            }
            let mut body = format!("{} {} ", request.method, request.path).into_bytes();
            body.extend_from_slice(&request.body);
            Response {
                status: 200,
                headers: vec![],
                body,
            }
        })
    }

    struct Reply {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    }

    impl Reply {
        fn header(&self, name: &str) -> Option<&str> {
            self.headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        }

        fn text(&self) -> String {
            String::from_utf8_lossy(&self.body).into_owned()
        }

        fn error_code(&self) -> String {
            let v: serde_json::Value = serde_json::from_slice(&self.body).expect("json error body");
            v["error"]["code"].as_str().unwrap_or_default().to_string()
        }
    }

    struct Client {
        reader: BufReader<TcpStream>,
    }

    impl Client {
        fn connect(addr: SocketAddr) -> Client {
            let stream = TcpStream::connect(addr).expect("connect");
            stream.set_read_timeout(Some(PATIENCE)).unwrap();
            Client {
                reader: BufReader::new(stream),
            }
        }

        fn send(&mut self, bytes: &[u8]) {
            self.reader.get_mut().write_all(bytes).expect("send");
        }

        fn reply(&mut self) -> Reply {
            self.try_reply().expect("a response")
        }

        fn try_reply(&mut self) -> io::Result<Reply> {
            let mut line = String::new();
            if self.reader.read_line(&mut line)? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            let status = line
                .split(' ')
                .nth(1)
                .and_then(|s| s.parse().ok())
                .ok_or(io::ErrorKind::InvalidData)?;
            let mut headers = Vec::new();
            loop {
                line.clear();
                self.reader.read_line(&mut line)?;
                let field = line.trim_end();
                if field.is_empty() {
                    break;
                }
                let (name, value) = field.split_once(':').ok_or(io::ErrorKind::InvalidData)?;
                headers.push((name.to_string(), value.trim().to_string()));
            }
            let mut reply = Reply {
                status,
                headers,
                body: Vec::new(),
            };
            let length: usize = reply
                .header("content-length")
                .map_or(0, |v| v.parse().unwrap());
            reply.body = vec![0; length];
            self.reader.read_exact(&mut reply.body)?;
            Ok(reply)
        }

        /// True when the server has closed the connection (FIN or reset).
        fn closed_by_server(&mut self) -> bool {
            let mut byte = [0u8; 1];
            match self.reader.read(&mut byte) {
                Ok(0) => true,
                Ok(_) => false,
                Err(e) => e.kind() == io::ErrorKind::ConnectionReset,
            }
        }
    }

    fn get(path: &str) -> Vec<u8> {
        format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").into_bytes()
    }

    /// Retries a fresh-connection GET until it is served, for conditions that
    /// become true when a server thread notices something (a slot freed).
    fn eventually_served(addr: SocketAddr) -> Reply {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let mut client = Client::connect(addr);
            client.send(&get("/probe"));
            match client.try_reply() {
                Ok(reply) if reply.status == 200 => return reply,
                _ if Instant::now() > deadline => panic!("never served again"),
                _ => thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    #[test]
    fn default_limits_agree_with_the_parser_defaults() {
        assert_eq!(Limits::default().parse_limits(), ParseLimits::default());
    }

    #[test]
    fn keep_alive_serves_several_requests_on_one_connection() {
        let addr = start(quick_limits(), echo());
        let mut client = Client::connect(addr);
        for i in 0..3 {
            client.send(&get(&format!("/{i}")));
            let reply = client.reply();
            assert_eq!((reply.status, reply.text()), (200, format!("GET /{i} ")));
            assert_eq!(reply.header("connection"), None);
        }
        client.send(b"GET /last HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        assert_eq!(client.reply().header("connection"), Some("close"));
        assert!(client.closed_by_server());
    }

    #[test]
    fn pipelined_requests_are_answered_in_order() {
        let addr = start(quick_limits(), echo());
        let mut client = Client::connect(addr);
        let mut burst = get("/a");
        burst.extend_from_slice(b"POST /b HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nxyz");
        burst.extend_from_slice(b"POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n");
        burst.extend_from_slice(&get("/d"));
        client.send(&burst);
        let texts: Vec<String> = (0..4).map(|_| client.reply().text()).collect();
        assert_eq!(texts, ["GET /a ", "POST /b xyz", "POST /c hi", "GET /d "]);
    }

    #[test]
    fn expect_100_continue_is_answered_before_the_body() {
        let addr = start(quick_limits(), echo());
        let mut client = Client::connect(addr);
        client.send(
            b"POST /e HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n",
        );
        assert_eq!(client.reply().status, 100);
        client.send(b"body");
        assert_eq!(client.reply().text(), "POST /e body");
    }

    #[test]
    fn expect_100_continue_with_oversized_body_gets_413_and_no_100() {
        let limits = Limits {
            max_body: 10,
            ..quick_limits()
        };
        let addr = start(limits, echo());
        let mut client = Client::connect(addr);
        client.send(
            b"POST / HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 11\r\n\r\n",
        );
        let reply = client.reply();
        assert_eq!(
            (reply.status, reply.error_code()),
            (413, "payload_too_large".into())
        );
        assert!(client.closed_by_server());
    }

    #[test]
    fn http10_closes_unless_asked_to_keep_alive() {
        let addr = start(quick_limits(), echo());
        let mut client = Client::connect(addr);
        client.send(b"GET /old HTTP/1.0\r\n\r\n");
        let reply = client.reply();
        assert_eq!(
            (reply.status, reply.header("connection")),
            (200, Some("close"))
        );
        assert!(client.closed_by_server());

        let mut client = Client::connect(addr);
        for _ in 0..2 {
            client.send(b"GET /old HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
            assert_eq!(client.reply().header("connection"), Some("keep-alive"));
        }
    }

    #[test]
    fn over_the_connection_cap_gets_503_until_a_slot_frees() {
        let limits = Limits {
            max_connections: 2,
            ..quick_limits()
        };
        let addr = start(limits, echo());
        let mut held: Vec<Client> = (0..2).map(|_| Client::connect(addr)).collect();
        for client in &mut held {
            client.send(&get("/hold"));
            assert_eq!(client.reply().status, 200);
        }
        let mut extra = Client::connect(addr);
        let reply = extra.reply();
        assert_eq!(
            (reply.status, reply.error_code()),
            (503, "unavailable".into())
        );
        assert_eq!(reply.header("retry-after"), Some("1"));
        assert!(extra.closed_by_server());

        held.pop();
        eventually_served(addr);
    }

    #[test]
    fn trickling_head_gets_408_at_the_deadline() {
        let addr = start(quick_limits(), echo());
        let mut client = Client::connect(addr);
        client.send(b"GET / HTTP/1.1\r\nHost: t\r\nX-Slow: ");
        let stop = Arc::new(AtomicBool::new(false));
        let mut writer = client.reader.get_ref().try_clone().unwrap();
        let trickler = {
            let stop = Arc::clone(&stop);
            // One byte every 50 ms: a per-read timeout of 300 ms would never fire.
            thread::spawn(move || {
                let end = Instant::now() + PATIENCE;
                while !stop.load(Ordering::Relaxed) && Instant::now() < end {
                    if writer.write_all(b"a").is_err() {
                        return;
                    }
                    thread::sleep(Duration::from_millis(50));
                }
            })
        };
        let reply = client.reply();
        stop.store(true, Ordering::Relaxed);
        assert_eq!(
            (reply.status, reply.error_code()),
            (408, "request_timeout".into())
        );
        assert_eq!(reply.header("connection"), Some("close"));
        trickler.join().unwrap();
    }

    #[test]
    fn idle_connection_is_closed_silently() {
        let limits = Limits {
            idle_timeout: Duration::from_millis(100),
            ..quick_limits()
        };
        let addr = start(limits, echo());
        let mut client = Client::connect(addr);
        client.send(&get("/once"));
        assert_eq!(client.reply().status, 200);
        assert!(client.closed_by_server(), "closed without a response");

        let mut silent = Client::connect(addr);
        assert!(silent.closed_by_server());
    }

    #[test]
    fn handler_panic_answers_500_and_others_are_still_served() {
        let addr = start(quick_limits(), echo());
        let mut client = Client::connect(addr);
        client.send(&get("/panic"));
        let reply = client.reply();
        assert_eq!(
            (reply.status, reply.error_code()),
            (500, "internal_error".into())
        );
        assert!(client.closed_by_server());
        let mut next = Client::connect(addr);
        next.send(&get("/fine"));
        assert_eq!(next.reply().text(), "GET /fine ");
    }

    #[test]
    fn framing_error_gets_400_and_closes() {
        let addr = start(quick_limits(), echo());
        let mut client = Client::connect(addr);
        client.send(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
        let reply = client.reply();
        assert_eq!(
            (reply.status, reply.error_code()),
            (400, "bad_request".into())
        );
        assert_eq!(reply.header("connection"), Some("close"));
        assert!(client.closed_by_server());
    }

    #[test]
    fn client_vanishing_mid_body_frees_its_slot_and_reaches_no_handler() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let handler: Handler = {
            let seen = Arc::clone(&seen);
            Arc::new(move |request: &Request| {
                seen.lock().unwrap().push(request.path.clone());
                Response {
                    status: 200,
                    headers: vec![],
                    body: vec![],
                }
            })
        };
        let limits = Limits {
            max_connections: 1,
            ..quick_limits()
        };
        let addr = start(limits, handler);
        let mut client = Client::connect(addr);
        client.send(b"POST /partial HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n0123456789");
        drop(client);
        eventually_served(addr);
        assert!(!seen.lock().unwrap().contains(&"/partial".to_string()));
    }

    #[test]
    fn client_that_never_reads_is_cut_off_at_the_write_timeout() {
        let limits = Limits {
            max_connections: 1,
            ..quick_limits()
        };
        let addr = start(limits, echo());
        let mut stuck = Client::connect(addr);
        stuck.send(&get("/huge"));
        eventually_served(addr);
        drop(stuck);
    }
}
