//! The server module in-process: `serve` on a free port with a test handler
//! (echo, panic, huge body), driven over raw sockets. These prove what the
//! accept loop and a connection do — keep-alive, pipelining, `100 Continue`,
//! the connection cap, deadlines, panics, vanished clients — independently of
//! the API and the database, which the service tests cover with the binary.

use crate::support::raw::{RawClient, ReplyText, SOCKET_PATIENCE};
use idempotent_tool::client::HttpResponse;
use idempotent_tool::http::{Request, Response};
use idempotent_tool::server::{serve, Handler, Limits};
use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

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
                stream: None,
            };
        }
        let mut body = format!("{} {} ", request.method, request.path).into_bytes();
        body.extend_from_slice(&request.body);
        Response {
            status: 200,
            headers: vec![],
            body,
            stream: None,
        }
    })
}

fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").into_bytes()
}

/// Retries a fresh-connection GET until it is served, for conditions that
/// become true when a server thread notices something (a slot freed).
fn eventually_served(addr: SocketAddr) -> HttpResponse {
    let deadline = Instant::now() + SOCKET_PATIENCE;
    loop {
        let mut client = RawClient::connect(addr);
        client.send(&get("/probe"));
        match client.try_reply() {
            Ok(reply) if reply.status == 200 => return reply,
            _ if Instant::now() > deadline => panic!("never served again"),
            _ => thread::sleep(Duration::from_millis(20)),
        }
    }
}

#[test]
fn keep_alive_serves_several_requests_on_one_connection() {
    let addr = start(quick_limits(), echo());
    let mut client = RawClient::connect(addr);
    for i in 0..3 {
        client.send(&get(&format!("/{i}")));
        let reply = client.reply();
        assert_eq!((reply.status, reply.text()), (200, format!("GET /{i} ")));
        assert_eq!(reply.header("connection"), None);
    }
    client.send(b"GET /last HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    assert_eq!(client.reply().header("connection"), Some("close"));
    assert!(client.closed_by_server());
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let addr = start(quick_limits(), echo());
    let mut client = RawClient::connect(addr);
    let mut burst = get("/a");
    burst.extend_from_slice(b"POST /b HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 3\r\n\r\nxyz");
    burst.extend_from_slice(
        b"POST /c HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n",
    );
    burst.extend_from_slice(&get("/d"));
    client.send(&burst);
    let texts: Vec<String> = (0..4).map(|_| client.reply().text()).collect();
    assert_eq!(texts, ["GET /a ", "POST /b xyz", "POST /c hi", "GET /d "]);
}

#[test]
fn expect_100_continue_is_answered_before_the_body() {
    let addr = start(quick_limits(), echo());
    let mut client = RawClient::connect(addr);
    client.send(
        b"POST /e HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n",
    );
    assert_eq!(client.next_response().status, 100);
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
    let mut client = RawClient::connect(addr);
    client.send(
        b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 100-continue\r\nContent-Length: 11\r\n\r\n",
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
    let mut client = RawClient::connect(addr);
    client.send(b"GET /old HTTP/1.0\r\n\r\n");
    let reply = client.reply();
    assert_eq!(
        (reply.status, reply.header("connection")),
        (200, Some("close"))
    );
    assert!(client.closed_by_server());

    let mut client = RawClient::connect(addr);
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
    let mut held: Vec<RawClient> = (0..2).map(|_| RawClient::connect(addr)).collect();
    for client in &mut held {
        client.send(&get("/hold"));
        assert_eq!(client.reply().status, 200);
    }
    let mut extra = RawClient::connect(addr);
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
    let mut client = RawClient::connect(addr);
    client.send(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ");
    let stop = Arc::new(AtomicBool::new(false));
    let mut writer = client.writer();
    let trickler = {
        let stop = Arc::clone(&stop);
        // One byte every 50 ms: a per-read timeout of 300 ms would never fire.
        thread::spawn(move || {
            let end = Instant::now() + SOCKET_PATIENCE;
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
    let mut client = RawClient::connect(addr);
    client.send(&get("/once"));
    assert_eq!(client.reply().status, 200);
    assert!(client.closed_by_server(), "closed without a response");

    let mut silent = RawClient::connect(addr);
    assert!(silent.closed_by_server());
}

/// A handler that panics (`/panic` here, on purpose) is answered `500
/// internal_error` and the connection closed; other connections are still
/// served. The one error line this logs, `handler panicked; answered 500`
/// (`event: handler_panic`), is this test's: no other test makes a handler
/// panic, and outside this test that line means a bug.
#[test]
fn handler_panic_answers_500_and_others_are_still_served() {
    let addr = start(quick_limits(), echo());
    let mut client = RawClient::connect(addr);
    client.send(&get("/panic"));
    let reply = client.reply();
    assert_eq!(
        (reply.status, reply.error_code()),
        (500, "internal_error".into())
    );
    assert!(client.closed_by_server());
    let mut next = RawClient::connect(addr);
    next.send(&get("/fine"));
    assert_eq!(next.reply().text(), "GET /fine ");
}

#[test]
fn framing_error_gets_400_and_closes() {
    let addr = start(quick_limits(), echo());
    let mut client = RawClient::connect(addr);
    client.send(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
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
                stream: None,
            }
        })
    };
    let limits = Limits {
        max_connections: 1,
        ..quick_limits()
    };
    let addr = start(limits, handler);
    let mut client = RawClient::connect(addr);
    client.send(
        b"POST /partial HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n0123456789",
    );
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
    let mut stuck = RawClient::connect(addr);
    stuck.send(&get("/huge"));
    eventually_served(addr);
    drop(stuck);
}
