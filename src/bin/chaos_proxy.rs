//! The `chaos_proxy` binary: an HTTP/1.1 proxy that sits between the client and
//! the server and breaks the exchange on purpose (section 12.11.4).
//!
//! Modes: `pass` forwards both ways; `drop-response` lets the server finish (the
//! full response is read from upstream) and then closes the client's connection
//! without it; `delay-response` holds the server's response for `--delay-ms`;
//! `duplicate-request` sends the request to the server twice, as two physical
//! requests on two upstream connections, and answers with the first response.
//! `--times N` faults the first N requests (counted across all connections) and
//! passes the rest.
//!
//! Requests are framed with the server's own parser (`http::parse_request`) and
//! forwarded byte for byte; responses are written with the server's own writer.
//! It must never mix up responses on a keep-alive
//! connection: each client connection gets its own upstream connection and
//! carries one request at a time. It prints one start-up line on stdout and
//! logs one line per request on stderr.

#![forbid(unsafe_code)]

use idempotent_tool::client::{read_response, HttpResponse};
use idempotent_tool::flag::{FlagError, Flags};
use idempotent_tool::http::{
    self, parse_request, ParseLimits, ParseStatus, Response, Version, WriteOptions,
};
use std::fmt;
use std::io::{self, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

const USAGE: &str = "\
usage: chaos_proxy --listen ADDR --upstream ADDR --mode MODE [--times N] [--delay-ms D]
  MODE: pass | drop-response | delay-response | duplicate-request";

/// How long the proxy waits on the upstream before answering 502; long enough
/// for `?wait=30` requests.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Pass,
    DropResponse,
    DelayResponse,
    DuplicateRequest,
}

impl Mode {
    fn parse(text: &str) -> Option<Mode> {
        match text {
            "pass" => Some(Mode::Pass),
            "drop-response" => Some(Mode::DropResponse),
            "delay-response" => Some(Mode::DelayResponse),
            "duplicate-request" => Some(Mode::DuplicateRequest),
            _ => None,
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Pass => "pass",
            Mode::DropResponse => "drop-response",
            Mode::DelayResponse => "delay-response",
            Mode::DuplicateRequest => "duplicate-request",
        })
    }
}

/// The proxy's settings, shared by every connection thread.
#[derive(Debug)]
struct Config {
    listen: String,
    upstream: String,
    mode: Mode,
    /// Fault only the first N requests; `None` faults them all.
    times: Option<u64>,
    delay: Duration,
    /// Requests seen so far, across connections: numbers them in the log and
    /// decides which ones `--times` still covers.
    request_counter: AtomicU64,
}

impl Config {
    /// Take the next request number and whether the fault applies to it.
    fn next_request(&self) -> (u64, bool) {
        let number = self.request_counter.fetch_add(1, Ordering::SeqCst);
        let faulted = self.mode != Mode::Pass && self.times.is_none_or(|n| number < n);
        (number + 1, faulted)
    }
}

/// One client request, kept as raw bytes so it is forwarded unchanged.
struct RawRequest {
    /// `METHOD target`, for the log.
    summary: String,
    bytes: Vec<u8>,
    /// The client sent `Connection: close` (or spoke HTTP/1.0).
    wants_close: bool,
}

/// What the proxy does with a request once the upstream has answered.
enum Outcome {
    /// Write this response to the client and keep the connection if both sides
    /// allow; the note says what was done, for the log.
    Respond(HttpResponse, String),
    /// Close the client connection without a response.
    Drop(u16),
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        idempotent_tool::outln!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let config = match parse_args(&args) {
        Ok(config) => Arc::new(config),
        Err(message) => {
            idempotent_tool::cli::console::usage_error("chaos_proxy", &message);
            return ExitCode::from(2);
        }
    };
    let listener = match TcpListener::bind(&config.listen) {
        Ok(listener) => listener,
        Err(error) => {
            idempotent_tool::errln!("chaos_proxy: cannot listen on {}: {error}", config.listen);
            return ExitCode::FAILURE;
        }
    };
    announce(&listener, &config);
    for stream in listener.incoming() {
        match stream {
            Ok(stream) => spawn_connection(stream, Arc::clone(&config)),
            Err(error) => idempotent_tool::errln!("chaos_proxy: accept failed: {error}"),
        }
    }
    ExitCode::SUCCESS
}

/// The one stdout line scripts wait for; it carries the real port when
/// `--listen` asked for port 0.
fn announce(listener: &TcpListener, config: &Config) {
    let local = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| config.listen.clone());
    let times = config
        .times
        .map_or_else(|| "all".to_string(), |n| n.to_string());
    idempotent_tool::outln!(
        "chaos_proxy listening on http://{local} upstream={} mode={} times={times}",
        config.upstream,
        config.mode
    );
    // Scripts read this line through a pipe or file; make sure it leaves now.
    let _ = io::stdout().flush();
}

fn spawn_connection(stream: TcpStream, config: Arc<Config>) {
    let peer = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let spawned = thread::Builder::new()
        .name(format!("proxy-{peer}"))
        .spawn(move || {
            if let Err(error) = serve_connection(stream, &config) {
                idempotent_tool::errln!("chaos_proxy: connection {peer}: {error}");
            }
        });
    if let Err(error) = spawned {
        idempotent_tool::errln!("chaos_proxy: cannot spawn a connection thread: {error}");
    }
}

/// Relay requests from one client connection, one at a time, until either side closes.
fn serve_connection(client: TcpStream, config: &Config) -> io::Result<()> {
    let mut client_reader = ClientConn {
        stream: client.try_clone()?,
        buffered: Vec::new(),
    };
    let mut client_writer = client;
    let mut upstream: Option<BufReader<TcpStream>> = None;
    loop {
        let request = match read_request(&mut client_reader)? {
            Some(request) => request,
            None => return Ok(()), // the client closed between requests
        };
        let (number, faulted) = config.next_request();
        let mode = if faulted { config.mode } else { Mode::Pass };
        let outcome = match forward(&request, mode, config, &mut upstream) {
            Ok(outcome) => outcome,
            Err(error) => {
                let note = format!("upstream failed: {error}; answered 502");
                log(number, &request, mode, &note);
                write_response(&mut client_writer, &bad_gateway(&error), true)?;
                return Ok(());
            }
        };
        match outcome {
            Outcome::Drop(status) => {
                let note = format!("upstream {status}; closed client without the response");
                log(number, &request, mode, &note);
                // Both directions: the client must see EOF, not a half-open socket.
                let _ = client_writer.shutdown(Shutdown::Both);
                return Ok(());
            }
            Outcome::Respond(response, note) => {
                log(number, &request, mode, &note);
                let close = request.wants_close || says_close(&response);
                write_response(&mut client_writer, &response, close)?;
                if close {
                    let _ = client_writer.shutdown(Shutdown::Both);
                    return Ok(());
                }
            }
        }
    }
}

/// Send the request upstream according to `mode` and decide what the client gets.
fn forward(
    request: &RawRequest,
    mode: Mode,
    config: &Config,
    upstream: &mut Option<BufReader<TcpStream>>,
) -> io::Result<Outcome> {
    let response = exchange(upstream, &config.upstream, &request.bytes)?;
    let note = match mode {
        Mode::Pass => format!("forwarded, upstream {}", response.status),
        Mode::DropResponse => return Ok(Outcome::Drop(response.status)),
        Mode::DelayResponse => {
            thread::sleep(config.delay);
            format!(
                "upstream {}; held the response {} ms",
                response.status,
                config.delay.as_millis()
            )
        }
        Mode::DuplicateRequest => {
            // The copy goes on its own connection, like a second client would send it.
            let copy = exchange(&mut None, &config.upstream, &request.bytes)?;
            format!(
                "sent twice: upstream {} and {} (copy); answered with the first",
                response.status, copy.status
            )
        }
    };
    Ok(Outcome::Respond(response, note))
}

/// One request/response on the (re)used upstream connection. A connection the
/// upstream closed is not reused: the next request opens a fresh one. (A reused
/// connection could still be closed by the server's idle timeout, 30 s, between
/// two requests; the proxy then answers 502 rather than resend a request that
/// might have run. Our clients open a connection per call, so this stays theoretical.)
fn exchange(
    upstream: &mut Option<BufReader<TcpStream>>,
    addr: &str,
    bytes: &[u8],
) -> io::Result<HttpResponse> {
    if upstream.is_none() {
        *upstream = Some(connect_upstream(addr)?);
    }
    let conn = upstream.as_mut().expect("connected just above");
    let result = conn
        .get_mut()
        .write_all(bytes)
        .and_then(|()| read_response(conn));
    match &result {
        Ok(response) if !says_close(response) => {}
        // Closed by the upstream, or broken: never read a stale reply from it.
        _ => *upstream = None,
    }
    result
}

fn connect_upstream(addr: &str) -> io::Result<BufReader<TcpStream>> {
    let stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(UPSTREAM_TIMEOUT))?;
    stream.set_write_timeout(Some(UPSTREAM_TIMEOUT))?;
    stream.set_nodelay(true)?;
    Ok(BufReader::new(stream))
}

/// The client side of a connection: its socket and the bytes read but not yet
/// forwarded (the start of a pipelined next request).
struct ClientConn {
    stream: TcpStream,
    buffered: Vec<u8>,
}

/// Read one request with the server's own parser, so the proxy frames requests
/// exactly as the server will, and keep its raw bytes to forward unchanged.
/// `Ok(None)` when the client closed cleanly before a new request.
fn read_request(client: &mut ClientConn) -> io::Result<Option<RawRequest>> {
    let limits = ParseLimits::default();
    loop {
        if !client.buffered.is_empty() {
            match parse_request(&client.buffered, &limits) {
                Ok(ParseStatus::Complete((request, used))) => {
                    let bytes: Vec<u8> = client.buffered.drain(..used).collect();
                    return Ok(Some(RawRequest {
                        summary: format!("{} {}", request.method, request.target),
                        bytes,
                        wants_close: !request.keep_alive(),
                    }));
                }
                Ok(ParseStatus::Partial) => {}
                Err(error) => return Err(invalid(error.message())),
            }
        }
        let mut chunk = [0u8; 8192];
        let n = client.stream.read(&mut chunk)?;
        if n == 0 {
            return match client.buffered.is_empty() {
                true => Ok(None),
                false => Err(invalid("connection closed inside a request")),
            };
        }
        client.buffered.extend_from_slice(&chunk[..n]);
    }
}

/// Re-serialize an upstream response with the server's own writer. The body was
/// read whole, so it is framed with a fresh `Content-Length`.
fn write_response<W: Write>(
    writer: &mut W,
    response: &HttpResponse,
    close: bool,
) -> io::Result<()> {
    let response = Response {
        status: response.status,
        headers: response.headers.clone(),
        body: response.body.clone(),
        stream: None,
    };
    let options = WriteOptions {
        keep_alive: !close,
        request_version: Version::Http11,
        head_only: false,
    };
    let mut out = Vec::with_capacity(response.body.len() + 256);
    http::write_response(&mut out, &response, options);
    writer.write_all(&out)?;
    writer.flush()
}

fn says_close(response: &HttpResponse) -> bool {
    response
        .header("connection")
        .is_some_and(|v| v.eq_ignore_ascii_case("close"))
        // Without a length the body ran to EOF: the upstream connection is spent.
        || response.header("content-length").is_none()
}

fn bad_gateway(error: &io::Error) -> HttpResponse {
    let body = serde_json::json!({"error": {"code": "bad_gateway", "message": error.to_string()}});
    HttpResponse {
        status: 502,
        headers: vec![("content-type".into(), "application/json".into())],
        body: format!("{body}\n").into_bytes(),
    }
}

fn log(number: u64, request: &RawRequest, mode: Mode, note: &str) {
    idempotent_tool::errln!("chaos_proxy: #{number} {} [{mode}] {note}", request.summary);
}

fn invalid(message: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message.to_string())
}

fn parse_args(args: &[String]) -> Result<Config, FlagError> {
    let mut listen = None;
    let mut upstream = None;
    let mut mode = Mode::Pass;
    let mut times = None;
    let mut delay_ms = 1000u64;
    let mut flags = Flags::new(args.iter().cloned());
    while let Some(flag) = flags.next_flag()? {
        let mut value = || flags.value();
        let bad = |value: String, expected| FlagError::BadValue {
            flag: flag.clone(),
            value,
            expected,
        };
        match flag.as_str() {
            "--listen" => listen = Some(value()?),
            "--upstream" => upstream = Some(strip_scheme(&value()?)),
            "--mode" => {
                let value = value()?;
                mode = Mode::parse(&value).ok_or_else(|| {
                    bad(
                        value.clone(),
                        "pass, drop-response, delay-response or duplicate-request",
                    )
                })?
            }
            "--times" => {
                let value = value()?;
                times = Some(
                    value
                        .parse()
                        .map_err(|_| bad(value.clone(), "a non-negative integer"))?,
                )
            }
            "--delay-ms" => {
                let value = value()?;
                delay_ms = value
                    .parse()
                    .map_err(|_| bad(value.clone(), "a non-negative integer"))?
            }
            other => return Err(FlagError::Unknown(other.to_string())),
        }
    }
    Ok(Config {
        listen: listen.ok_or(FlagError::Missing("--listen ADDR"))?,
        upstream: upstream.ok_or(FlagError::Missing("--upstream ADDR"))?,
        mode,
        times,
        delay: Duration::from_millis(delay_ms),
        request_counter: AtomicU64::new(0),
    })
}

/// Accept `http://127.0.0.1:8081` as well as `127.0.0.1:8081`.
fn strip_scheme(addr: &str) -> String {
    idempotent_tool::client::authority(addr).to_string()
}
