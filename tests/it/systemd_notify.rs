//! Under systemd (`Type=notify`, `deploy/idempotent-tool.service`) the
//! service says `READY=1` only once it answers — the port bound, recovery
//! run, the start-up line out — and `STOPPING=1` after SIGTERM, before it
//! exits. The test is the service manager: it binds a unix datagram socket,
//! hands its path over in `NOTIFY_SOCKET`, and reads what arrives.

use crate::support::{address_after, charge, signal, TempDb, DEADLINE, SERVER_BIN};
use idempotent_tool::client::request_once;
use idempotent_tool::temp::TempDir;
use std::io::ErrorKind;
use std::os::unix::net::UnixDatagram;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Kills the server on drop, however the test ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn receive(socket: &UnixDatagram) -> String {
    let mut buffer = [0u8; 4096];
    let n = socket.recv(&mut buffer).expect("a notification in time");
    String::from_utf8_lossy(&buffer[..n]).into_owned()
}

fn nothing_pending(socket: &UnixDatagram) -> bool {
    socket.set_nonblocking(true).unwrap();
    let pending = socket.recv(&mut [0u8; 4096]);
    socket.set_nonblocking(false).unwrap();
    matches!(pending, Err(e) if e.kind() == ErrorKind::WouldBlock)
}

#[test]
fn ready_once_it_answers_and_stopping_after_sigterm_before_the_exit() {
    let dir = TempDir::new("notify").unwrap();
    let socket_path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    socket.set_read_timeout(Some(DEADLINE)).unwrap();
    let db = TempDb::new("notify");
    // stdout to a file: what it holds when READY=1 arrives was written before.
    let stdout_path = dir.path().join("stdout");
    let stdout = std::fs::File::create(&stdout_path).unwrap();
    let mut server = Killed(
        Command::new(SERVER_BIN)
            .args(["--port", "0", "--db", db.path_str()])
            .env("NOTIFY_SOCKET", &socket_path)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );

    let ready = receive(&socket);
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready:?}");
    let banner = std::fs::read_to_string(&stdout_path).unwrap();
    assert!(
        banner.contains("listening on http://"),
        "READY=1 before the start-up line: {banner:?}"
    );
    assert!(
        ready.contains("STATUS=idempotent-tool listening on http://"),
        "{ready:?}"
    );
    let base = format!("http://{}", address_after(&banner, "listening on http://"));
    // Asked once, not polled: at READY=1 it answers.
    let health = request_once(&base, "GET", "/healthz", &[], None, Some(DEADLINE)).unwrap();
    assert_eq!(health.status, 200);
    let body = charge(1).to_string();
    let posted = request_once(
        &base,
        "POST",
        "/v1/tool-calls?wait=10",
        &[("Idempotency-Key", "notify-1")],
        Some(body.as_bytes()),
        Some(DEADLINE),
    )
    .unwrap();
    assert_eq!(posted.status, 200);
    assert!(nothing_pending(&socket), "a notification before SIGTERM");

    signal(&server.0, "TERM");
    let stopping = receive(&socket);
    assert!(stopping.lines().any(|l| l == "STOPPING=1"), "{stopping:?}");
    let deadline = Instant::now() + DEADLINE;
    let status = loop {
        if let Some(status) = server.0.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the server did not exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0));
    assert!(nothing_pending(&socket), "a notification after STOPPING=1");
}
