//! STUB: accept loop and connection threads (being written).
use crate::http::{Request, Response};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

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
    /// A request's head (and then its body) must arrive within this.
    pub request_timeout: Duration,
    /// An idle keep-alive connection is closed after this.
    pub idle_timeout: Duration,
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_request_line: 8 * 1024,
            max_header_bytes: 16 * 1024,
            max_headers: 64,
            max_body: 1024 * 1024,
            request_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            max_connections: 1024,
        }
    }
}

/// TEMPORARY minimal server until the real one lands.
pub fn serve(listener: TcpListener, handler: Handler, _limits: Limits) {
    use std::io::{BufRead, BufReader, Read, Write};
    for stream in listener.incoming().flatten() {
        let handler = handler.clone();
        std::thread::spawn(move || {
            let _ = stream.set_nodelay(true);
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut stream = stream;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
                let parts: Vec<&str> = line.trim_end().split(' ').collect();
                if parts.len() != 3 {
                    return;
                }
                let mut headers = Vec::new();
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).unwrap_or(0) == 0 {
                        return;
                    }
                    let h = h.trim_end();
                    if h.is_empty() {
                        break;
                    }
                    if let Some((n, v)) = h.split_once(':') {
                        headers.push((n.trim().to_ascii_lowercase(), v.trim().to_string()));
                    }
                }
                let len: usize = headers
                    .iter()
                    .find(|(n, _)| n == "content-length")
                    .and_then(|(_, v)| v.parse().ok())
                    .unwrap_or(0);
                let mut body = vec![0; len];
                if reader.read_exact(&mut body).is_err() {
                    return;
                }
                let (path, query) = match parts[1].split_once('?') {
                    Some((p, q)) => (p.to_string(), Some(q.to_string())),
                    None => (parts[1].to_string(), None),
                };
                let req = Request {
                    method: parts[0].into(),
                    target: parts[1].into(),
                    path,
                    query,
                    version: crate::http::Version::Http11,
                    headers,
                    body,
                };
                let resp = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    handler(&req)
                })) {
                    Ok(r) => r,
                    Err(_) => Response::error(500, "internal_error", "panic"),
                };
                let mut out = format!(
                    "HTTP/1.1 {} X\r\nContent-Length: {}\r\n",
                    resp.status,
                    resp.body.len()
                );
                for (n, v) in &resp.headers {
                    out.push_str(&format!("{n}: {v}\r\n"));
                }
                out.push_str("\r\n");
                let mut bytes = out.into_bytes();
                bytes.extend_from_slice(&resp.body);
                if stream.write_all(&bytes).is_err() {
                    return;
                }
            }
        });
    }
}
