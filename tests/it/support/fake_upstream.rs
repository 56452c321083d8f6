//! The fake upstream: a keep-alive HTTP/1.1 server inside the test process
//! that records every request it receives and answers from a test's handler.
//! It stands behind the chaos proxy and the `http` tool, so a test can see
//! exactly what reached the downstream. It must never hide a request: every
//! one it parsed is in `seen()`, in arrival order.

use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// One request as the fake upstream received it.
#[derive(Debug, Clone)]
pub struct SeenRequest {
    pub method: String,
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Which accepted connection carried it (0, 1, ...).
    pub connection: usize,
}

impl SeenRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A reply the fake upstream sends: status, extra headers, body.
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
    /// Hold the reply this long (to make a client time out).
    pub delay: Duration,
}

impl Reply {
    pub fn json(status: u16, body: Value) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: body.to_string(),
            delay: Duration::ZERO,
        }
    }
}

type Handler = dyn Fn(&SeenRequest, usize) -> Reply + Send + Sync;

/// A keep-alive HTTP/1.1 upstream in the test process that records every
/// request and answers with `handler(request, index)`. The listener thread
/// lives until the test process ends; it holds nothing that needs cleanup.
pub struct FakeUpstream {
    pub addr: String,
    seen: Arc<Mutex<Vec<SeenRequest>>>,
}

impl FakeUpstream {
    pub fn start(handler: impl Fn(&SeenRequest, usize) -> Reply + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let handler: Arc<Handler> = Arc::new(handler);
        let shared = Arc::clone(&seen);
        thread::spawn(move || {
            for (connection, stream) in listener.incoming().enumerate() {
                let Ok(stream) = stream else { continue };
                let (seen, handler) = (Arc::clone(&shared), Arc::clone(&handler));
                thread::spawn(move || serve_fake(stream, connection, &seen, &*handler));
            }
        });
        FakeUpstream { addr, seen }
    }

    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn seen(&self) -> Vec<SeenRequest> {
        self.seen.lock().unwrap().clone()
    }
}

fn serve_fake(
    stream: TcpStream,
    connection: usize,
    seen: &Mutex<Vec<SeenRequest>>,
    handler: &Handler,
) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    while let Some(request) = read_fake_request(&mut reader, connection) {
        let index = {
            let mut seen = seen.lock().unwrap();
            seen.push(request.clone());
            seen.len() - 1
        };
        let reply = handler(&request, index);
        thread::sleep(reply.delay);
        let mut out = format!("HTTP/1.1 {} X\r\n", reply.status);
        for (name, value) in &reply.headers {
            out.push_str(&format!("{name}: {value}\r\n"));
        }
        out.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{}",
            reply.body.len(),
            reply.body
        ));
        if writer.write_all(out.as_bytes()).is_err() {
            return;
        }
    }
}

fn read_fake_request(reader: &mut impl BufRead, connection: usize) -> Option<SeenRequest> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let target = parts.next()?.to_string();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).ok()?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':')?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(SeenRequest {
        method,
        target,
        headers,
        body,
        connection,
    })
}
