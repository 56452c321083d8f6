//! The `http` executor: one attempt is one `POST` to the configured URL with
//! `Idempotency-Key: <effect_id>`, and the answer is classified into an
//! [`Outcome`] — succeeded, retryable failure (with the downstream's
//! `Retry-After`), or permanent failure.
//!
//! It owns the outbound HTTP client (the `ureq` crate over rustls: certificates
//! checked against the system roots plus the tool's `ca_file`), and the rules
//! that make a run bounded: one timeout for connect, send and receive, no
//! redirects, at most 1 MiB read. It must never follow a redirect (the body
//! carries a payment's args), never wait past the timeout, never read without
//! a cap, and never put a header value or the URL into an error.

use super::error_code::ToolErrorCode;
use super::excerpt::{excerpt, MAX_OUTPUT_BYTES};
use super::http_stop::{StoppableConnector, Watched};
use super::outcome::{Effect, Outcome, ToolError};
use super::secret::{redact_all, Secret};
use super::spec::RunContext;
use serde_json::{json, Value};
use std::fmt;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};
use ureq::tls::{Certificate, PemItem, RootCerts, TlsConfig};
use ureq::unversioned::resolver::DefaultResolver;

/// Headers the executor sets itself; the tools file may not replace them.
pub const RESERVED_HEADERS: [&str; 8] = [
    "content-type",
    "content-length",
    "idempotency-key",
    "host",
    "transfer-encoding",
    "connection",
    "expect",
    "upgrade",
];

/// Whether the downstream's whole answer was read (a status, then a body
/// within the cap): a stop that comes after it changes nothing.
fn is_answer(outcome: &Outcome) -> bool {
    match outcome {
        Outcome::Succeeded { .. } => true,
        Outcome::Failed { error, .. } => error.http_status.is_some(),
        Outcome::Stopped { .. } => false,
    }
}

/// How an abandoned request was stopped, in the audit's words.
fn abandoned(sent: bool) -> String {
    if sent {
        "its request had gone out; its connection was shut down and any answer left unread".into()
    } else {
        "its request had not gone out; its connection was shut down".into()
    }
}

/// Idle connections each tool keeps for reuse (ureq's default is 3 per host).
/// Attempts run in parallel on up to `--workers` threads; with 3 kept, a burst
/// of 64 closed 61 connections per round and opened as many again (a
/// handshake each, and sockets left in TIME_WAIT by the thousand). Each idle
/// connection holds one descriptor until it is reused or 15 s pass.
const IDLE_CONNECTIONS: usize = 64;

/// One configured `http` tool.
pub struct HttpTool {
    url: String,
    headers: Vec<(String, Secret)>,
    agent: ureq::Agent,
}

impl fmt::Debug for HttpTool {
    /// No URL, no headers: this reaches logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HttpTool { .. }")
    }
}

/// Why a tool's `url` or `ca_file` cannot be used; `Display` is the phrase
/// that follows the field's name. It never repeats the URL (a token in its
/// query would otherwise reach the log).
#[derive(Debug)]
pub enum HttpSetupError {
    /// The URL is not `http://` or `https://`.
    Scheme,
    /// The URL does not parse.
    InvalidUrl,
    NoHost,
    /// `user:password@` in the URL: credentials belong in headers.
    Credentials,
    /// A `#fragment`, which is never sent and so is a mistake.
    Fragment,
    /// The CA file cannot be read.
    CaUnreadable {
        path: PathBuf,
        source: io::Error,
    },
    /// The CA file is not valid PEM.
    CaNotPem {
        path: PathBuf,
        source: ureq::Error,
    },
    /// The CA file holds no certificate.
    CaEmpty {
        path: PathBuf,
    },
}

impl fmt::Display for HttpSetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpSetupError::Scheme => f.write_str("must start with http:// or https://"),
            HttpSetupError::InvalidUrl => f.write_str("is not a valid URL"),
            HttpSetupError::NoHost => f.write_str("has no host"),
            HttpSetupError::Credentials => {
                f.write_str("must not carry credentials (user:password@); put them in headers")
            }
            HttpSetupError::Fragment => f.write_str("must not have a #fragment"),
            HttpSetupError::CaUnreadable { path, source } => {
                write!(f, "cannot read {}: {source}", path.display())
            }
            HttpSetupError::CaNotPem { path, source } => {
                write!(f, "{} is not valid PEM: {source}", path.display())
            }
            HttpSetupError::CaEmpty { path } => {
                write!(f, "{} holds no PEM certificate", path.display())
            }
        }
    }
}

impl std::error::Error for HttpSetupError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HttpSetupError::CaUnreadable { source, .. } => Some(source),
            HttpSetupError::CaNotPem { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Check that `url` is something this executor can call: `http://` or
/// `https://`, a host, no credentials, no fragment.
pub fn check_url(url: &str) -> Result<(), HttpSetupError> {
    let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    if !(lower.starts_with("http://") || lower.starts_with("https://")) {
        return Err(HttpSetupError::Scheme);
    }
    let uri: ureq::http::Uri = url.parse().map_err(|_| HttpSetupError::InvalidUrl)?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(HttpSetupError::Scheme);
    }
    let authority = uri.authority().ok_or(HttpSetupError::NoHost)?;
    if authority.as_str().contains('@') {
        return Err(HttpSetupError::Credentials);
    }
    if authority.host().is_empty() {
        return Err(HttpSetupError::NoHost);
    }
    if url.contains('#') {
        return Err(HttpSetupError::Fragment);
    }
    Ok(())
}

impl HttpTool {
    /// Build the client for one tool. `ca_file` (already resolved against the
    /// tools file's folder) is added to the system roots; the error says why
    /// it could not be used.
    pub fn new(
        url: String,
        headers: Vec<(String, Secret)>,
        ca_file: Option<&Path>,
        timeout: Duration,
    ) -> Result<HttpTool, HttpSetupError> {
        let mut roots = system_roots().clone();
        if let Some(path) = ca_file {
            roots.extend(read_ca_file(path)?);
        }
        let tls = TlsConfig::builder()
            .root_certs(RootCerts::Specific(Arc::new(roots)))
            .build();
        let config = ureq::Agent::config_builder()
            // Every status is an answer to classify here, not a client error.
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_global(Some(timeout))
            // A waiting worker holds these for the whole attempt; ureq's
            // defaults (128 KiB each) made that ~300 KiB per waiting worker.
            // A response head still gets ureq's 64 KiB limit; a request body
            // larger than the output buffer is written in several pieces.
            .input_buffer_size(64 * 1024)
            .output_buffer_size(16 * 1024)
            .max_idle_connections(IDLE_CONNECTIONS)
            .max_idle_connections_per_host(IDLE_CONNECTIONS)
            // A proxy from the environment would see the secrets in headers.
            .proxy(None)
            .user_agent("idempotent-tool")
            .tls_config(tls)
            .build();
        // ureq's own connectors, each transport stoppable by a cancel.
        let agent = ureq::Agent::with_parts(
            config,
            StoppableConnector::default(),
            DefaultResolver::default(),
        );
        Ok(HttpTool {
            url,
            headers,
            agent,
        })
    }

    /// One attempt: `POST` the call, classify the answer. Asked to stop
    /// (`ctx.stop`), the request is abandoned: its socket is shut down, and
    /// unless the whole answer was already read, the outcome is
    /// `Outcome::Stopped`, saying whether the request had gone out.
    pub fn run(&self, ctx: &RunContext) -> Outcome {
        let _watched = Watched::new(ctx.stop);
        let outcome = self.post(ctx);
        match ctx.stop {
            Some(stop) if stop.is_requested() && !is_answer(&outcome) => Outcome::Stopped {
                sent: stop.sent(),
                how: abandoned(stop.sent()),
            },
            _ => outcome,
        }
    }

    fn post(&self, ctx: &RunContext) -> Outcome {
        let body = ctx.request_body().to_string();
        let mut request = self
            .agent
            .post(&self.url)
            .header("Content-Type", "application/json")
            .header("Idempotency-Key", ctx.effect_id);
        for (name, value) in &self.headers {
            request = request.header(name.as_str(), value.expose());
        }
        let response = match request.send(body.as_bytes()) {
            Ok(response) => response,
            Err(error) => return Outcome::failed(transport_failure(error)),
        };
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        let (bytes, too_large) = match read_capped(response.into_body().into_reader()) {
            Ok(read) => read,
            Err(error) => return Outcome::failed(transport_failure(ureq::Error::from(error))),
        };
        self.classify(status, retry_after, &bytes, too_large)
    }

    /// The outcome of a response with `status` whose body (at most the cap) is
    /// `bytes`. The body's excerpt is redacted: a downstream may echo a token.
    fn classify(
        &self,
        status: u16,
        retry_after: Option<Duration>,
        bytes: &[u8],
        too_large: bool,
    ) -> Outcome {
        let body_excerpt = redact_all(&excerpt(bytes), self.headers.iter().map(|(_, v)| v));
        let mut error = match status {
            200..=299 if too_large => ToolError::new(
                ToolErrorCode::DownstreamResponseTooLarge,
                format!(
                    "the downstream answered {status} with a body over {MAX_OUTPUT_BYTES} bytes"
                ),
            ),
            200..=299 => {
                let result = serde_json::from_slice::<Value>(bytes)
                    .unwrap_or_else(|_| json!({"status": status, "body": body_excerpt}));
                let detail = json!({"status": status, "body": body_excerpt});
                return Outcome::Succeeded {
                    result,
                    effect: Some(Effect {
                        amount: None,
                        detail: Some(detail),
                    }),
                };
            }
            408 | 425 | 429 | 500..=599 => ToolError::new(
                ToolErrorCode::DownstreamUnavailable,
                format!("the downstream answered {status}; it may succeed later"),
            ),
            _ => ToolError::new(
                ToolErrorCode::DownstreamRejected,
                format!("the downstream answered {status}"),
            ),
        };
        error.http_status = Some(status);
        error.body = Some(body_excerpt);
        let retry_after = if matches!(status, 429 | 503) {
            retry_after
        } else {
            None
        };
        Outcome::Failed { error, retry_after }
    }
}

/// The system's trusted roots, read once per process (the webhook thread's
/// too). A machine without any still reaches `http://` downstreams and those whose CA is in `ca_file`.
pub(crate) fn system_roots() -> &'static Vec<Certificate<'static>> {
    static ROOTS: OnceLock<Vec<Certificate<'static>>> = OnceLock::new();
    ROOTS.get_or_init(|| {
        rustls_native_certs::load_native_certs()
            .certs
            .iter()
            .map(|der| Certificate::from_der(der.as_ref()).to_owned())
            .collect()
    })
}

/// The certificates in a PEM file; at least one.
fn read_ca_file(path: &Path) -> Result<Vec<Certificate<'static>>, HttpSetupError> {
    let pem = std::fs::read(path).map_err(|source| HttpSetupError::CaUnreadable {
        path: path.to_path_buf(),
        source,
    })?;
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(&pem) {
        match item {
            Ok(PemItem::Certificate(cert)) => certs.push(cert),
            Ok(_) => {} // a key or another section: not a root
            Err(source) => {
                return Err(HttpSetupError::CaNotPem {
                    path: path.to_path_buf(),
                    source,
                })
            }
        }
    }
    if certs.is_empty() {
        return Err(HttpSetupError::CaEmpty {
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

/// Up to `MAX_OUTPUT_BYTES` of the body, and whether there was more.
fn read_capped(reader: impl Read) -> io::Result<(Vec<u8>, bool)> {
    let mut bytes = Vec::new();
    reader
        .take(MAX_OUTPUT_BYTES as u64 + 1)
        .read_to_end(&mut bytes)?;
    let too_large = bytes.len() > MAX_OUTPUT_BYTES;
    bytes.truncate(MAX_OUTPUT_BYTES);
    Ok((bytes, too_large))
}

/// `Retry-After` as delay-seconds or an HTTP-date (RFC 9110 §10.2.3); a date in
/// the past means "now".
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        return Some(Duration::from_secs(value.parse().unwrap_or(u64::MAX)));
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(
        when.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// A request that got no complete answer. Anything that may be the network or
/// the downstream having a bad moment is retryable; a certificate that does
/// not verify, or an answer that is not HTTP, will not fix itself.
fn transport_failure(error: ureq::Error) -> ToolError {
    match error {
        ureq::Error::Timeout(_) => timed_out(),
        ureq::Error::Io(io) if io.kind() == io::ErrorKind::TimedOut => timed_out(),
        ureq::Error::Io(io) => match io.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>()) {
            Some(tls) => tls_failure(tls),
            None => unavailable(format!("the connection failed: {io}")),
        },
        ureq::Error::Rustls(tls) => tls_failure(&tls),
        ureq::Error::HostNotFound => {
            unavailable("the downstream's host name did not resolve".into())
        }
        ureq::Error::ConnectionFailed => unavailable("the connection failed".into()),
        ureq::Error::Protocol(e) => ToolError::new(
            ToolErrorCode::DownstreamProtocolError,
            format!("the downstream's answer is not valid HTTP/1.1: {e}"),
        ),
        // Its text may quote the URL.
        ureq::Error::BadUri(_) => ToolError::new(
            ToolErrorCode::DownstreamError,
            "the configured URL is not usable",
        ),
        other => ToolError::new(
            ToolErrorCode::DownstreamError,
            format!("the request failed: {other}"),
        ),
    }
}

fn timed_out() -> ToolError {
    ToolError::new(
        ToolErrorCode::DownstreamTimeout,
        "the downstream did not answer within the tool's timeout_ms",
    )
}

fn unavailable(message: String) -> ToolError {
    ToolError::new(ToolErrorCode::DownstreamUnavailable, message)
}

fn tls_failure(error: &rustls::Error) -> ToolError {
    let code = match error {
        rustls::Error::InvalidCertificate(_) => ToolErrorCode::DownstreamCertificate,
        _ => ToolErrorCode::DownstreamTls,
    };
    ToolError::new(code, format!("TLS with the downstream failed: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool() -> HttpTool {
        let secret = Secret::new("Bearer s3cr3t-token".into(), vec!["s3cr3t-token".into()]);
        HttpTool::new(
            "http://127.0.0.1:9/x".into(),
            vec![("Authorization".into(), secret)],
            None,
            Duration::from_secs(1),
        )
        .unwrap()
    }

    fn failure(outcome: Outcome) -> (ToolError, Option<Duration>) {
        match outcome {
            Outcome::Failed { error, retry_after } => (error, retry_after),
            other => panic!("expected a failure: {other:?}"),
        }
    }

    #[test]
    fn statuses_are_classified() {
        let tool = tool();
        let hint = Some(Duration::from_secs(2));
        for status in [408, 425, 429, 500, 502, 503, 504] {
            let (error, _) = failure(tool.classify(status, hint, b"busy", false));
            assert_eq!(
                (error.code, error.retryable, error.http_status),
                (ToolErrorCode::DownstreamUnavailable, true, Some(status))
            );
            assert_eq!(error.body.as_deref(), Some("busy"));
        }
        for status in [301, 302, 307, 400, 401, 404, 409, 422] {
            let (error, retry_after) = failure(tool.classify(status, hint, b"", false));
            assert_eq!(
                (error.code, error.retryable),
                (ToolErrorCode::DownstreamRejected, false),
                "{status}"
            );
            assert_eq!(retry_after, None);
        }
        assert_eq!(failure(tool.classify(429, hint, b"", false)).1, hint);
        assert_eq!(failure(tool.classify(503, hint, b"", false)).1, hint);
        assert_eq!(failure(tool.classify(500, hint, b"", false)).1, None);
        let (error, _) = failure(tool.classify(200, None, b"{}", true));
        assert_eq!(
            (error.code, error.retryable),
            (ToolErrorCode::DownstreamResponseTooLarge, false)
        );
    }

    #[test]
    fn success_returns_json_or_an_excerpt_and_records_the_status() {
        let tool = tool();
        match tool.classify(201, None, br#"{"refund":"r_1"}"#, false) {
            Outcome::Succeeded { result, effect } => {
                assert_eq!(result, json!({"refund": "r_1"}));
                assert_eq!(
                    effect.unwrap().detail.unwrap(),
                    json!({"status": 201, "body": "{\"refund\":\"r_1\"}"})
                );
            }
            other => panic!("{other:?}"),
        }
        match tool.classify(200, None, b"ok", false) {
            Outcome::Succeeded { result, .. } => {
                assert_eq!(result, json!({"status": 200, "body": "ok"}))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn excerpts_redact_configured_secrets() {
        let (error, _) = failure(tool().classify(401, None, b"bad token s3cr3t-token", false));
        assert_eq!(error.body.as_deref(), Some("bad token ***"));
        assert!(!format!("{:?}", tool()).contains("s3cr3t"));
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        assert_eq!(parse_retry_after("1"), Some(Duration::from_secs(1)));
        assert_eq!(parse_retry_after(" 120 "), Some(Duration::from_secs(120)));
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO)
        );
        let later = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(90));
        let parsed = parse_retry_after(&later).unwrap();
        assert!(
            parsed > Duration::from_secs(80) && parsed <= Duration::from_secs(90),
            "{parsed:?}"
        );
        assert_eq!(parse_retry_after("soon"), None);
        assert_eq!(parse_retry_after("-1"), None);
    }

    #[test]
    fn urls_are_checked_without_being_repeated() {
        assert!(check_url("https://payments.internal/v1/refunds").is_ok());
        assert!(check_url("http://127.0.0.1:8080/x?y=1").is_ok());
        for (url, needle) in [
            ("ftp://host/x", "http:// or https://"),
            ("payments.internal/v1", "http:// or https://"),
            ("https://user:pw@host/x", "credentials"),
            ("https://host/x#frag", "fragment"),
            ("https://ho st/x", "not a valid URL"),
        ] {
            let err = check_url(url).unwrap_err().to_string();
            assert!(err.contains(needle), "{url}: {err}");
            assert!(!err.contains(url));
        }
    }

    #[test]
    fn a_missing_or_empty_ca_file_is_named() {
        let missing = HttpTool::new(
            "https://h/".into(),
            vec![],
            Some(Path::new("/nonexistent/ca.pem")),
            Duration::from_secs(1),
        )
        .unwrap_err()
        .to_string();
        assert!(missing.contains("/nonexistent/ca.pem"), "{missing}");
        let temp = crate::temp::TempDir::new("empty-ca").unwrap();
        let empty = temp.join("ca.pem");
        std::fs::write(&empty, "not pem").unwrap();
        let err = HttpTool::new(
            "https://h/".into(),
            vec![],
            Some(&empty),
            Duration::from_secs(1),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("no PEM certificate"), "{err}");
    }
}
