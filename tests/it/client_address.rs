//! The access log's `client`: the connection's peer; `X-Forwarded-For` only
//! when the peer is a `--trusted-proxy`, read from the right so that what a
//! client wrote into the header itself is never taken for its address. The
//! server's own answers (a request it could not read) name the peer too.

use crate::support::raw::RawClient;
use crate::support::{Server, TempDb};
use idempotent_tool::client::request_once;
use serde_json::Value;

/// The access line of `request_id` in the server's log.
fn access_line(server: &Server, request_id: &str) -> Value {
    let needle = format!("\"request_id\":\"{request_id}\"");
    let stderr = server.proc.wait_for_stderr(&needle);
    stderr
        .lines()
        .filter(|line| line.contains(&needle) && line.contains("\"method\""))
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .next()
        .expect("the access line")
}

fn get_with(server: &Server, request_id: &str, forwarded_for: Option<&str>) {
    let mut headers = vec![("X-Request-Id", request_id)];
    if let Some(value) = forwarded_for {
        headers.push(("X-Forwarded-For", value));
    }
    let answer = request_once(&server.base, "GET", "/healthz", &headers, None, None).unwrap();
    assert_eq!(answer.status, 200);
}

#[test]
fn forwarded_for_is_believed_only_from_a_trusted_proxy() {
    let db = TempDb::new("client-untrusted");
    let untrusted = Server::start(&db, &[]);
    get_with(&untrusted, "xff-ignored", Some("203.0.113.9"));
    assert_eq!(
        access_line(&untrusted, "xff-ignored")["client"],
        "127.0.0.1"
    );

    let db = TempDb::new("client-trusted");
    let trusted = Server::start(&db, &["--trusted-proxy", "127.0.0.1,10.0.0.0/8"]);
    get_with(&trusted, "xff-plain", None);
    assert_eq!(access_line(&trusted, "xff-plain")["client"], "127.0.0.1");
    // The proxy (us) appended 203.0.113.9 after a hop of its own network;
    // the client claimed 198.51.100.1, which is never reached.
    get_with(
        &trusted,
        "xff-chain",
        Some("198.51.100.1, 203.0.113.9, 10.1.2.3"),
    );
    assert_eq!(access_line(&trusted, "xff-chain")["client"], "203.0.113.9");
    get_with(&trusted, "xff-garbage", Some("not-an-address"));
    assert_eq!(access_line(&trusted, "xff-garbage")["client"], "127.0.0.1");

    // A request the server answers itself (malformed framing) names its peer.
    let mut raw = RawClient::connect(trusted.base.trim_start_matches("http://"));
    raw.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Request-Id: raw-bad\r\nContent-Length: nope\r\n\r\n");
    assert_eq!(raw.reply().status, 400);
    let stderr = trusted.proc.wait_for_stderr("\"status\":400");
    let own: Value = stderr
        .lines()
        .find(|line| line.contains("\"status\":400"))
        .map(|line| serde_json::from_str(line).unwrap())
        .unwrap();
    assert_eq!(own["client"], "127.0.0.1", "{own}");
}
