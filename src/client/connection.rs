//! One keep-alive HTTP/1.1 connection ([`HttpConnection`]), a one-shot
//! request ([`request_once`]), and reading a response off the wire
//! ([`read_response`]): `Content-Length` framing, or the body to EOF when the
//! server closes; interim `1xx` answers skipped.
//!
//! It never retries and never decides what a status means: that is `retry`'s.

use std::io::{self, BufRead, BufReader, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// A response as the client saw it.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    pub status: u16,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON, or `Value::Null` when it is not JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// One keep-alive connection to `host:port`.
pub struct HttpConnection {
    reader: BufReader<TcpStream>,
    host: String,
    /// Set when the server said `Connection: close`; the next request must reconnect.
    closed: bool,
}

impl HttpConnection {
    /// Connect, with `timeout` applied to the connect and to every read and write.
    pub fn open(addr: &str, timeout: Option<Duration>) -> io::Result<HttpConnection> {
        let sockaddr = addr
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no address"))?;
        let stream = match timeout {
            Some(t) => TcpStream::connect_timeout(&sockaddr, t)?,
            None => TcpStream::connect(sockaddr)?,
        };
        stream.set_read_timeout(timeout)?;
        stream.set_write_timeout(timeout)?;
        stream.set_nodelay(true)?;
        Ok(HttpConnection {
            reader: BufReader::new(stream),
            host: addr.to_string(),
            closed: false,
        })
    }

    /// Whether the server announced that it will close this connection.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Send one request and read its response.
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> io::Result<HttpResponse> {
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.host);
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        if let Some(body) = body {
            head.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                body.len()
            ));
        }
        head.push_str("\r\n");
        let mut out = head.into_bytes();
        out.extend_from_slice(body.unwrap_or_default());
        self.reader.get_mut().write_all(&out)?;
        let response = read_response(&mut self.reader)?;
        if response
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"))
        {
            self.closed = true;
        }
        Ok(response)
    }
}

/// Read one final response: status line, headers, and a `Content-Length` body
/// (or to EOF). Interim responses (`100 Continue`) before it are skipped.
pub fn read_response<R: BufRead>(reader: &mut R) -> io::Result<HttpResponse> {
    loop {
        let response = read_next_response(reader)?;
        if !is_interim(response.status) {
            return Ok(response);
        }
    }
}

/// Read the next response, interim ones included, for a caller that must see
/// the `100 Continue` itself (tests of `Expect`). An interim response has no body.
pub fn read_next_response<R: BufRead>(reader: &mut R) -> io::Result<HttpResponse> {
    let status_line = read_line(reader)?;
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| bad_data(format!("bad status line {status_line:?}")))?;
    let mut headers = Vec::new();
    loop {
        let line = read_line(reader)?;
        if line.is_empty() {
            break;
        }
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| bad_data(format!("bad header line {line:?}")))?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
    let mut response = HttpResponse {
        status,
        headers,
        body: Vec::new(),
    };
    if is_interim(status) {
        return Ok(response);
    }
    match response.header("content-length") {
        Some(len) => {
            let len: usize = len
                .parse()
                .map_err(|_| bad_data(format!("bad content-length {len:?}")))?;
            response.body.resize(len, 0);
            reader.read_exact(&mut response.body)?;
        }
        None => {
            reader.read_to_end(&mut response.body)?;
        }
    }
    Ok(response)
}

/// 1xx: an interim response; the final one follows on the same connection.
fn is_interim(status: u16) -> bool {
    (100..200).contains(&status)
}

fn read_line<R: BufRead>(reader: &mut R) -> io::Result<String> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed before a response",
        ));
    }
    Ok(line.trim_end_matches(['\r', '\n']).to_string())
}

fn bad_data(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

/// Split `http://host:port` (or `host:port`) into the `host:port` part.
pub fn authority(base: &str) -> &str {
    let rest = base.strip_prefix("http://").unwrap_or(base);
    rest.split('/').next().unwrap_or(rest)
}

/// One request on a fresh connection.
pub fn request_once(
    base: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
    timeout: Option<Duration>,
) -> io::Result<HttpResponse> {
    HttpConnection::open(authority(base), timeout)?.request(method, path, headers, body)
}

/// Percent-encode a path segment (an idempotency key in `/by-key/{key}`).
pub fn encode_path_segment(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for byte in segment.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}
