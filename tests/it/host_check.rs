//! The DNS-rebinding guard of the REST routes and the console, against the
//! real binary: without `--auth-file`, a request whose `Host` is a DNS name
//! other than loopback or a `--public-host` name is `403 host_not_allowed`
//! and changes nothing, whatever its route; any IP address, loopback and the
//! listed names are served, and `/healthz` always is. With `--auth-file` a
//! rebound page has no token, so a valid token is served under any `Host`.

use crate::support::auth::AuthFile;
use crate::support::raw::{RawClient, ReplyText};
use crate::support::{charge, Counts, Http, Server, TempDb};
use idempotent_tool::client::HttpResponse;

/// `method path` with exactly this `Host` (a raw socket: the shared client
/// always sends its own), a JSON body for a `POST`, and `extra` headers.
fn send(server: &Server, method: &str, path: &str, host: &str, extra: &str) -> HttpResponse {
    let body = if method == "POST" {
        charge(5).to_string()
    } else {
        String::new()
    };
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nIdempotency-Key: rebound\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n{extra}Connection: close\r\n",
        body.len()
    );
    let mut client = RawClient::connect(server.addr());
    client.send(format!("{head}\r\n{body}").as_bytes());
    client.reply()
}

fn status_and_code(reply: &HttpResponse) -> (u16, String) {
    (reply.status, reply.error_code())
}

#[test]
fn without_tokens_a_foreign_name_is_refused_on_every_route_and_changes_nothing() {
    let db = TempDb::new("host-check");
    let port_of = |server: &Server| server.addr().rsplit(':').next().unwrap().to_string();
    let server = Server::start(&db, &["--public-host", "tools.example.com"]);
    let port = port_of(&server);
    let evil = format!("evil.example.com:{port}");
    for (method, path) in [
        ("POST", "/v1/tool-calls"),
        ("GET", "/v1/tool-calls"),
        ("GET", "/v1/overview"),
        ("GET", "/stats"),
        ("GET", "/ui/"),
        ("GET", "/v1/tools"),
    ] {
        let refused = send(&server, method, path, &evil, "");
        assert_eq!(
            status_and_code(&refused),
            (403, "host_not_allowed".to_string()),
            "{method} {path}: {}",
            refused.text()
        );
        assert!(
            !refused.text().contains("anonymous"),
            "no data: {}",
            refused.text()
        );
    }
    assert_eq!(db.calls(), 0, "a refused POST creates no call");
    assert_eq!(send(&server, "GET", "/healthz", &evil, "").status, 200);

    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("10.1.2.3:{port}"),
        format!("[fd00::7]:{port}"),
        format!("tools.example.com:{port}"),
    ] {
        let served = send(&server, "GET", "/v1/tool-calls", &host, "");
        assert_eq!(served.status, 200, "{host}: {}", served.text());
    }
    let created = send(
        &server,
        "POST",
        "/v1/tool-calls",
        &format!("127.0.0.1:{port}"),
        "",
    );
    assert!(matches!(created.status, 200 | 202), "{}", created.text());
    assert_eq!(db.calls(), 1);
}

#[test]
fn with_tokens_any_host_is_served_to_a_valid_token_and_none_without() {
    let auth = AuthFile::new(&[("acme", "acme-token", false)]);
    let db = TempDb::new("host-check-auth");
    let server = Server::start(&db, &["--auth-file", auth.path_str()]);
    let port = server.addr().rsplit(':').next().unwrap().to_string();
    let evil = format!("evil.example.com:{port}");
    let bearer = "Authorization: Bearer acme-token\r\n";
    let served = send(&server, "GET", "/v1/tool-calls", &evil, bearer);
    assert_eq!(served.status, 200, "{}", served.text());
    let refused = send(&server, "GET", "/v1/tool-calls", &evil, "");
    assert_eq!(status_and_code(&refused), (401, "unauthorized".to_string()));
}
