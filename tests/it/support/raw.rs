//! The one raw-socket client of the integration tests, for bytes no
//! well-behaved client would send: hostile framing, pipelined bursts, heads
//! trickled byte by byte, bodies held back for `100 Continue`. Answers are read
//! with the project's own response reader, so a test sees exactly what the
//! server put on the wire. Nothing here sleeps; reads time out only when a
//! test is already failing.

use idempotent_tool::client::{read_next_response, read_response, HttpResponse};
use serde_json::Value;
use std::io::{self, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// How long a raw socket waits for the server; only reached when something is wrong.
pub const SOCKET_PATIENCE: Duration = Duration::from_secs(15);

/// A client connection that sends hand-made bytes (hostile, pipelined,
/// trickled) and reads the answers.
pub struct RawClient {
    reader: BufReader<TcpStream>,
}

impl RawClient {
    pub fn connect(addr: impl ToSocketAddrs) -> RawClient {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_read_timeout(Some(SOCKET_PATIENCE)).unwrap();
        stream.set_write_timeout(Some(SOCKET_PATIENCE)).unwrap();
        RawClient {
            reader: BufReader::new(stream),
        }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.reader.get_mut().write_all(bytes).expect("send");
    }

    /// The next final response (an interim `100 Continue` before it is skipped).
    pub fn reply(&mut self) -> HttpResponse {
        self.try_reply().expect("a response")
    }

    pub fn try_reply(&mut self) -> io::Result<HttpResponse> {
        read_response(&mut self.reader)
    }

    /// The next response, interim ones included: for tests of `Expect: 100-continue`.
    pub fn next_response(&mut self) -> HttpResponse {
        read_next_response(&mut self.reader).expect("a response")
    }

    /// A second handle on the socket, to write from another thread.
    pub fn writer(&self) -> TcpStream {
        self.reader.get_ref().try_clone().expect("clone the socket")
    }

    /// True when the server has closed the connection (FIN or reset).
    pub fn closed_by_server(&mut self) -> bool {
        let mut byte = [0u8; 1];
        match self.reader.read(&mut byte) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => e.kind() == io::ErrorKind::ConnectionReset,
        }
    }

    /// True if the server has neither answered nor closed yet.
    pub fn still_waiting(&mut self) -> bool {
        let stream = self.reader.get_ref();
        stream.set_nonblocking(true).unwrap();
        let mut byte = [0u8; 1];
        let waiting =
            matches!(stream.peek(&mut byte), Err(e) if e.kind() == io::ErrorKind::WouldBlock);
        stream.set_nonblocking(false).unwrap();
        waiting
    }
}

/// Test views of a response's body.
pub trait ReplyText {
    fn text(&self) -> String;
    /// `error.code` of a JSON error body; panics (showing the body) if it is not JSON.
    fn error_code(&self) -> String;
}

impl ReplyText for HttpResponse {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    fn error_code(&self) -> String {
        let v: Value = serde_json::from_slice(&self.body)
            .unwrap_or_else(|_| panic!("not JSON: {}", self.text()));
        v["error"]["code"].as_str().unwrap_or_default().to_string()
    }
}
