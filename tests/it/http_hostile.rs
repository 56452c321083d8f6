//! Hostile-client tests against the real binary over raw sockets.
//!
//! Each test starts its own server process on a free port with its own database
//! in a fresh temporary directory, speaks raw HTTP/1.1 bytes to it, and checks
//! both the answer to the hostile input and that the server still serves a
//! normal request afterwards. No test relies on timing beyond generous deadlines.

use crate::support;

use crate::support::procfs;
use crate::support::raw::{RawClient, ReplyText, SOCKET_PATIENCE};
use crate::support::Http;
use crate::support::TempDb;
use idempotent_tool::client::HttpResponse;
use std::net::SocketAddr;
use std::thread;
use std::time::{Duration, Instant};

/// The real server (from the shared support module) with raw-socket helpers.
struct Server {
    server: support::Server,
    addr: SocketAddr,
    /// Declared last so the database outlives the process using it.
    _db: TempDb,
}

impl Server {
    fn start(extra_args: &[&str]) -> Server {
        let db = TempDb::new("http-hostile");
        let server = support::Server::start(&db, extra_args);
        let addr = server
            .addr()
            .parse()
            .expect("the start-up line names an address");
        Server {
            server,
            addr,
            _db: db,
        }
    }

    fn connect(&self) -> RawClient {
        RawClient::connect(self.addr)
    }

    fn get(&self, path: &str) -> HttpResponse {
        let mut client = self.connect();
        client.send(
            format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        );
        client.reply()
    }

    fn assert_healthy(&self) {
        let reply = self.get("/healthz");
        assert_eq!(
            reply.status,
            200,
            "healthz after hostile input: {}\nstderr:\n{}",
            reply.text(),
            self.server.stderr()
        );
    }
}

fn unique_key(label: &str) -> String {
    support::unique_name(&format!("http-hostile-{label}"))
}

const CHARGE: &str = r#"{"tool":"charge","args":{"amount":1}}"#;

fn post_call(key: &str, body: &str) -> Vec<u8> {
    format!(
        "POST /v1/tool-calls HTTP/1.1\r\nHost: 127.0.0.1\r\nIdempotency-Key: {key}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Hostile requests, each with the status and error code it must get.
fn malformed_cases() -> Vec<(&'static str, Vec<u8>, u16, &'static str)> {
    let post = "POST /v1/tool-calls HTTP/1.1\r\nHost: 127.0.0.1\r\nIdempotency-Key: hostile\r\n";
    let chunked = format!("{post}Transfer-Encoding: chunked\r\n\r\n");
    let mut long_line = b"GET /".to_vec();
    long_line.extend(std::iter::repeat_n(b'a', 64 * 1024));
    long_line.extend_from_slice(b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    let mut many_headers = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n".to_vec();
    for i in 0..200 {
        many_headers.extend_from_slice(format!("X-Filler-{i}: {}\r\n", "v".repeat(200)).as_bytes());
    }
    many_headers.extend_from_slice(b"\r\n");
    vec![
        (
            "content-length and transfer-encoding",
            format!("{post}Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
                .into_bytes(),
            400,
            "bad_request",
        ),
        (
            "transfer-encoding then content-length",
            format!("{post}Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n")
                .into_bytes(),
            400,
            "bad_request",
        ),
        (
            "differing content-lengths",
            format!("{post}Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!").into_bytes(),
            400,
            "bad_request",
        ),
        (
            "content-length list that differs",
            format!("{post}Content-Length: 5, 6\r\n\r\nhello!").into_bytes(),
            400,
            "bad_request",
        ),
        (
            "signed content-length",
            format!("{post}Content-Length: +5\r\n\r\nhello").into_bytes(),
            400,
            "bad_request",
        ),
        (
            "content-length with inner space",
            format!("{post}Content-Length: 1 0\r\n\r\n").into_bytes(),
            400,
            "bad_request",
        ),
        (
            "content-length overflow",
            format!("{post}Content-Length: 99999999999999999999999\r\n\r\n").into_bytes(),
            400,
            "bad_request",
        ),
        (
            "content-length over the body limit",
            format!("{post}Content-Length: 1000000000\r\n\r\n").into_bytes(),
            413,
            "payload_too_large",
        ),
        (
            "transfer-encoding gzip",
            format!("{post}Transfer-Encoding: gzip\r\n\r\n").into_bytes(),
            501,
            "not_implemented",
        ),
        (
            "transfer-encoding gzip, chunked",
            format!("{post}Transfer-Encoding: gzip, chunked\r\n\r\n").into_bytes(),
            501,
            "not_implemented",
        ),
        (
            "chunk size not hex",
            format!("{chunked}zz\r\n").into_bytes(),
            400,
            "bad_request",
        ),
        (
            "chunk size overflow",
            format!("{chunked}1ffffffffffffffff\r\n").into_bytes(),
            400,
            "bad_request",
        ),
        (
            "chunk data without CRLF",
            format!("{chunked}5\r\nhelloX0\r\n\r\n").into_bytes(),
            400,
            "bad_request",
        ),
        (
            "chunk extension flood",
            format!("{chunked}5;{}\r\nhello\r\n0\r\n\r\n", "a".repeat(4096)).into_bytes(),
            400,
            "bad_request",
        ),
        (
            "obsolete line folding",
            b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX: 1\r\n 2\r\n\r\n".to_vec(),
            400,
            "bad_request",
        ),
        (
            "space before colon",
            b"GET /healthz HTTP/1.1\r\nHost : t\r\n\r\n".to_vec(),
            400,
            "bad_request",
        ),
        (
            "bare CR in a value",
            b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX: a\rb\r\n\r\n".to_vec(),
            400,
            "bad_request",
        ),
        (
            "no Host in 1.1",
            b"GET /healthz HTTP/1.1\r\n\r\n".to_vec(),
            400,
            "bad_request",
        ),
        (
            "garbage request line",
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n".to_vec(),
            400,
            "bad_request",
        ),
        (
            "HTTP/2.0",
            b"GET /healthz HTTP/2.0\r\nHost: 127.0.0.1\r\n\r\n".to_vec(),
            505,
            "version_not_supported",
        ),
        ("request line too long", long_line, 414, "uri_too_long"),
        (
            "header section too large",
            many_headers,
            431,
            "headers_too_large",
        ),
        (
            "unknown expectation",
            format!("{post}Expect: teapot\r\nContent-Length: 2\r\n\r\n{{}}").into_bytes(),
            417,
            "expectation_failed",
        ),
    ]
}

#[test]
fn malformed_requests_get_their_status_and_the_server_keeps_serving() {
    let server = Server::start(&[]);
    for (name, bytes, status, code) in malformed_cases() {
        let mut client = server.connect();
        client.send(&bytes);
        let reply = client
            .try_reply()
            .unwrap_or_else(|e| panic!("{name}: no response ({e})"));
        assert_eq!(
            (reply.status, reply.error_code().as_str()),
            (status, code),
            "{name}"
        );
        assert_eq!(reply.header("connection"), Some("close"), "{name}");
        assert!(client.closed_by_server(), "{name}: connection left open");
        server.assert_healthy();
    }
}

#[test]
fn slow_clients_do_not_block_a_normal_client() {
    let server = Server::start(&["--request-timeout-ms", "5000", "--max-connections", "1000"]);
    let mut slow: Vec<RawClient> = (0..200)
        .map(|_| {
            let mut client = server.connect();
            client.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ");
            client
        })
        .collect();
    let started = Instant::now();
    server.assert_healthy();
    let served_in = started.elapsed();
    assert!(
        slow.last_mut().unwrap().still_waiting(),
        "slow clients were dropped before the normal one was served (after {served_in:?})"
    );
    let reply = slow[0].reply();
    assert_eq!(
        (reply.status, reply.error_code().as_str()),
        (408, "request_timeout")
    );
    assert!(slow[0].closed_by_server());
}

#[test]
fn slow_head_is_cut_off_with_408() {
    let server = Server::start(&["--request-timeout-ms", "300"]);
    let mut client = server.connect();
    client.send(b"POST /v1/tool-calls HTTP/1.1\r\nHost: 127.0.0.1\r\n");
    let reply = client.reply();
    assert_eq!(
        (reply.status, reply.error_code().as_str()),
        (408, "request_timeout")
    );
    assert!(client.closed_by_server());
    server.assert_healthy();
}

#[test]
fn client_vanishing_mid_body_leaves_no_call_behind() {
    let server = Server::start(&[]);
    let key = unique_key("vanished");
    let mut client = server.connect();
    let mut head = format!(
        "POST /v1/tool-calls HTTP/1.1\r\nHost: 127.0.0.1\r\nIdempotency-Key: {key}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    )
    .into_bytes();
    head.extend_from_slice(&CHARGE.as_bytes()[..10]);
    client.send(&head);
    drop(client);

    // The control: the same route with a whole body does create a call.
    let control = unique_key("control");
    let mut whole = server.connect();
    whole.send(&post_call(&control, CHARGE));
    assert_eq!(whole.reply().status, 202);
    // 200 once the call has finished, 202 while it is still pending or running.
    let found = server
        .get(&format!("/v1/tool-calls/by-key/{control}"))
        .status;
    assert!(
        matches!(found, 200 | 202),
        "control call not found: {found}"
    );

    let reply = server.get(&format!("/v1/tool-calls/by-key/{key}"));
    assert_eq!(
        (reply.status, reply.error_code().as_str()),
        (404, "not_found")
    );
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let server = Server::start(&[]);
    let mut client = server.connect();
    client.send(
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n\
          GET /v1/tool-calls/by-key/no-such-key-pipelined HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n\
          GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    );
    let statuses: Vec<u16> = (0..3).map(|_| client.reply().status).collect();
    assert_eq!(statuses, [200, 404, 200]);
    assert!(client.still_waiting(), "a keep-alive connection stays open");
}

#[test]
fn connections_over_the_cap_get_503() {
    let server = Server::start(&["--max-connections", "2"]);
    let mut held: Vec<RawClient> = (0..2).map(|_| server.connect()).collect();
    for client in &mut held {
        client.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
        assert_eq!(client.reply().status, 200);
    }
    let mut extra = server.connect();
    let reply = extra.reply();
    assert_eq!(
        (reply.status, reply.error_code().as_str()),
        (503, "unavailable")
    );
    assert_eq!(reply.header("retry-after"), Some("1"));
    drop(held);
    let deadline = Instant::now() + SOCKET_PATIENCE;
    while server.get("/healthz").status != 200 {
        assert!(Instant::now() < deadline, "slots never freed");
        thread::sleep(Duration::from_millis(20));
    }
}

/// How many sockets and threads the server process holds now. Sockets, not all
/// descriptors, and threads but the store's read threads: the store keeps a
/// pool of SQLite read connections, each on a thread of its own, started when
/// reads first need them — a cache, not a leak.
fn sockets_and_threads(pid: u32) -> (usize, usize) {
    let sockets = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"))
                })
                .count()
        })
        .unwrap_or(usize::MAX);
    let threads = procfs::threads_but_the_read_pool(pid);
    (sockets, threads)
}

/// Clients that vanish mid-request or mid-response leave no thread and no
/// socket behind: once they are gone, the server is back to its baseline.
#[test]
fn abandoned_connections_leak_no_threads_or_sockets() {
    let server = Server::start(&["--request-timeout-ms", "2000"]);
    let pid = server.server.proc.child.id();
    server.assert_healthy();
    let (base_sockets, base_threads) = sockets_and_threads(pid);
    let partial_post =
        b"POST /v1/tool-calls HTTP/1.1\r\nHost: 127.0.0.1\r\nIdempotency-Key: x\r\nContent-Length: 50\r\n\r\n{\"to";
    for i in 0..60 {
        let mut client = server.connect();
        match i % 3 {
            // Mid-head, mid-body, and a full request whose response is never read.
            0 => client.send(b"GET /healthz HTTP/1.1\r\nHo"),
            1 => client.send(partial_post),
            _ => client.send(b"GET /stats HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
        }
        drop(client);
    }
    server.assert_healthy();
    let deadline = Instant::now() + SOCKET_PATIENCE;
    loop {
        let (sockets, threads) = sockets_and_threads(pid);
        if sockets <= base_sockets && threads <= base_threads {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still {sockets} sockets (baseline {base_sockets}) and {threads} threads (baseline {base_threads})"
        );
        thread::sleep(Duration::from_millis(50));
    }
    server.assert_healthy();
}
