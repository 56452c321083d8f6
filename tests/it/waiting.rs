//! A request that waits (`?wait=`) for its call holds a thread and a
//! connection slot, and only while its client is there: a client that hangs
//! up mid-wait frees both within moments, instead of at the end of a wait of
//! up to 30 s. (That a wait holds no database connection meanwhile is the
//! store's `readers` tests and `descriptors.rs`.)

use crate::support;

use crate::support::procfs::{connection_threads, threads_but_the_read_pool};
use crate::support::Http;
use crate::support::{Server, TempDb};
use serde_json::json;
use std::io::Write;
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

/// How soon the server must notice a client that hung up: its wait loop
/// looks at least every 100 ms; the rest is a margin for a loaded machine.
const NOTICE_WITHIN: Duration = Duration::from_secs(2);

/// The server's thread count (its read threads aside, which start on demand
/// and are kept) once no connection thread is left.
fn idle_thread_count(server: &Server) -> usize {
    let pid = server.proc.child.id();
    support::eventually("every connection thread to end", || {
        connection_threads(pid).0 == 0
    });
    threads_but_the_read_pool(pid)
}

/// Send `request` on a fresh connection, wait until the server is holding
/// it for its call, hang up, and return how long the server then took to be
/// back to `baseline` threads.
fn hang_up_while_waiting(server: &Server, baseline: usize, request: &str) -> Duration {
    let pid = server.proc.child.id();
    let mut client = TcpStream::connect(server.addr()).unwrap();
    client.write_all(request.as_bytes()).unwrap();
    support::eventually("the request to be waiting for its call", || {
        connection_threads(pid).1 == 1
    });
    assert_eq!(threads_but_the_read_pool(pid), baseline + 1);
    drop(client);
    let hung_up = Instant::now();
    while threads_but_the_read_pool(pid) != baseline {
        assert!(
            hung_up.elapsed() < NOTICE_WITHIN,
            "{} threads {NOTICE_WITHIN:?} after the client hung up; expected {baseline}",
            threads_but_the_read_pool(pid)
        );
        thread::sleep(Duration::from_millis(10));
    }
    hung_up.elapsed()
}

/// A client that disconnects during `GET ?wait=30`, or during `POST ?wait=30`,
/// has its connection thread (and with it its slot) ended within a second or
/// two, although its call is still running.
#[test]
fn a_client_that_hangs_up_during_a_wait_frees_its_thread() {
    let db = TempDb::new("wait-hang-up");
    let server = Server::start(&db, &["--workers", "2"]);
    let slow = json!({"tool": "sleep", "args": {"seconds": 10}});
    let (status, call) = server.post("slow-1", &slow);
    assert_eq!(status, 202, "{call}");
    let call_id = call["call_id"].as_str().unwrap();
    let baseline = idle_thread_count(&server);

    let get = format!("GET /v1/tool-calls/{call_id}?wait=30 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    let took = hang_up_while_waiting(&server, baseline, &get);
    eprintln!("waiting: GET ?wait=30 ended {took:?} after its client hung up");

    let body = slow.to_string();
    let post = format!(
        "POST /v1/tool-calls?wait=30 HTTP/1.1\r\nHost: 127.0.0.1\r\nIdempotency-Key: slow-2\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let took = hang_up_while_waiting(&server, baseline, &post);
    eprintln!("waiting: POST ?wait=30 ended {took:?} after its client hung up");

    let (status, call) = server.get(&format!("/v1/tool-calls/{call_id}"));
    assert!(
        status == 202 && call["status"] == "running",
        "{status} {call}"
    );
}
