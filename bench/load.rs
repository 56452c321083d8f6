//! Load generation: client threads released together, each sending one
//! request at a time (over HTTP, or straight into a handler) and recording
//! each latency and status, until a count or a deadline.
//!
//! It owns what each mode sends and under which key; it never reads the
//! server's state and never judges the answers beyond counting them by status.

use crate::cpu::{self, CpuUse};
use crate::{Mode, Stop};
use idempotent_tool::client::HttpConnection;
use idempotent_tool::http::{Request, Version};
use idempotent_tool::server::Handler;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// Timeout for connecting and for each read and write of a request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

const CHARGE: &[u8] = br#"{"tool":"charge","args":{"amount":1}}"#;
const EMAIL: &[u8] = br#"{"tool":"send_email","args":{"to":"bench@example.com"}}"#;
const SLEEP: &[u8] = br#"{"tool":"sleep","args":{"seconds":0.01}}"#;
const FAIL_ONCE: &[u8] = br#"{"tool":"fail","args":{"retryable":true,"fail_times":1}}"#;
/// `--mode http-tool`'s call: `target::REMOTE_TOOL`, which has no arguments.
const REMOTE: &[u8] = br#"{"tool":"remote","args":{}}"#;

/// Where a load run's requests go.
#[derive(Clone, Copy)]
pub enum Via<'a> {
    /// Over TCP to this `host:port`, through the whole HTTP stack.
    Http(&'a str),
    /// Over TCP to several service nodes on one database: client thread `i`
    /// keeps to `nodes[i % n]`, so the load is spread evenly over them.
    Spread(&'a [String]),
    /// Straight into a service's request handler in this process: no sockets,
    /// no parsing, no serializing. What is left is the service's own work
    /// (fingerprint, store, runner), so this rate is the ceiling for HTTP.
    Direct(&'a Handler),
}

/// One load run's parameters.
pub struct Load<'a> {
    pub via: Via<'a>,
    pub mode: Mode,
    pub concurrency: usize,
    pub keep_alive: bool,
    pub stop: Stop,
    /// Prefix of this run's idempotency keys.
    pub prefix: String,
    /// Hand each client's open connection back in `LoadResult::open`
    /// instead of closing it: a server in its own process then keeps each
    /// connection's thread, and the switches `cpu` reads from it, until the
    /// caller has read them.
    pub hold_open: bool,
}

/// What a load run saw (or one of its client threads, before the merge).
#[derive(Default)]
pub struct LoadResult {
    pub wall: Duration,
    /// Sorted once merged.
    pub latencies_us: Vec<u32>,
    pub codes: BTreeMap<u16, u64>,
    pub status0: u64,
    /// What the client threads spent themselves (CPU and switches): an
    /// in-process server's readings are taken less this.
    pub cpu: CpuUse,
    /// With `Load::hold_open`, the connections still open.
    pub open: Vec<HttpConnection>,
}

impl LoadResult {
    pub fn requests(&self) -> u64 {
        self.latencies_us.len() as u64
    }
    pub fn rps(&self) -> f64 {
        self.requests() as f64 / self.wall.as_secs_f64().max(1e-9)
    }
    pub fn accepted(&self) -> u64 {
        self.codes.range(200..300).map(|(_, n)| n).sum()
    }
    pub fn accepted_per_s(&self) -> f64 {
        self.accepted() as f64 / self.wall.as_secs_f64().max(1e-9)
    }
    /// The responses by status code, keyed by its text (for JSON).
    pub fn codes_by_name(&self) -> BTreeMap<String, u64> {
        self.codes
            .iter()
            .map(|(c, n)| (c.to_string(), *n))
            .collect()
    }
    /// The latency at quantile `q` (0..=1), in milliseconds.
    pub fn ms(&self, q: f64) -> f64 {
        quantile_ms(&self.latencies_us, q)
    }
}

/// The `q` quantile of sorted latencies in microseconds, in milliseconds (0 if none).
pub fn quantile_ms(sorted_us: &[u32], q: f64) -> f64 {
    let n = sorted_us.len();
    if n == 0 {
        return 0.0;
    }
    let i = ((q * n as f64).ceil() as usize).clamp(1, n) - 1;
    f64::from(sorted_us[i]) / 1000.0
}

/// Run `load.concurrency` client threads, released together by a barrier.
pub fn run_load(load: &Load) -> LoadResult {
    let next = AtomicU64::new(0);
    let barrier = Barrier::new(load.concurrency + 1);
    std::thread::scope(|scope| {
        let (next, barrier) = (&next, &barrier);
        let clients: Vec<_> = (0..load.concurrency)
            .map(|i| {
                std::thread::Builder::new()
                    .name(format!("client-{i}"))
                    .spawn_scoped(scope, move || client_loop(load, i, next, barrier))
                    .expect("spawn a client thread")
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let tallies: Vec<LoadResult> = clients
            .into_iter()
            .map(|c| c.join().expect("a client thread panicked"))
            .collect();
        let mut merged = LoadResult {
            wall: start.elapsed(),
            ..LoadResult::default()
        };
        for t in tallies {
            merged.latencies_us.extend(t.latencies_us);
            for (code, n) in t.codes {
                *merged.codes.entry(code).or_default() += n;
            }
            merged.status0 += t.status0;
            merged.cpu = merged.cpu + t.cpu;
            merged.open.extend(t.open);
        }
        merged.latencies_us.sort_unstable();
        merged
    })
}

/// One client: take a ticket, send its request, record the latency; until the
/// count or the deadline is reached. Every ticket taken is sent, so the mixed
/// mode's retries always name a key that was (or is being) sent.
fn client_loop(load: &Load, index: usize, next: &AtomicU64, barrier: &Barrier) -> LoadResult {
    let mut tally = LoadResult::default();
    let mut conn = None;
    let mut key = String::with_capacity(load.prefix.len() + 24);
    barrier.wait();
    let deadline = match load.stop {
        Stop::After(d) => Some(Instant::now() + d),
        Stop::Count(_) => None,
    };
    loop {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        let ticket = next.fetch_add(1, Ordering::Relaxed);
        if matches!(load.stop, Stop::Count(n) if ticket >= n) {
            break;
        }
        let body = request_for(load.mode, ticket, &load.prefix, &mut key);
        let started = Instant::now();
        match send(&mut conn, load, index, &key, body) {
            Some(status) => *tally.codes.entry(status).or_default() += 1,
            None => tally.status0 += 1,
        }
        let micros = started.elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
        tally.latencies_us.push(micros);
    }
    tally.cpu = cpu::this_thread();
    if load.hold_open {
        tally.open.extend(conn);
    }
    tally
}

/// Write the ticket's key into `key` and return its body (`None`: `/healthz`).
fn request_for(mode: Mode, ticket: u64, prefix: &str, key: &mut String) -> Option<&'static [u8]> {
    let (key_ticket, body) = match mode {
        Mode::Healthz => return None,
        Mode::Distinct => (Some(ticket), CHARGE),
        Mode::HttpTool => (Some(ticket), REMOTE),
        Mode::SameKey => (None, CHARGE),
        Mode::Mixed => mixed_request(ticket),
    };
    key.clear();
    // Writing into a String cannot fail.
    let _ = match key_ticket {
        Some(t) => write!(key, "{prefix}-{t}"),
        None => write!(key, "{prefix}-same"),
    };
    Some(body)
}

/// The mixed mode's cycle of ten tickets: four new charges, a send_email, a
/// sleep, a fail-once, two same-key retries of this cycle's first two charges,
/// and a same-key retry of the fail-once ten cycles back (which resets it if it
/// has failed by then, so its attempt 2 succeeds: the attempt distribution shows it).
fn mixed_request(ticket: u64) -> (Option<u64>, &'static [u8]) {
    match ticket % 10 {
        0..=3 => (Some(ticket), CHARGE),
        4 => (Some(ticket), EMAIL),
        5 => (Some(ticket), SLEEP),
        6 => (Some(ticket), FAIL_ONCE),
        7 | 8 => (Some(ticket - 7), CHARGE),
        _ => (
            Some(ticket.checked_sub(103).unwrap_or(ticket - 3)),
            FAIL_ONCE,
        ),
    }
}

/// Send one request, (re)connecting when needed; client thread `index` picks
/// its node. `None` means no HTTP response.
fn send(
    conn: &mut Option<HttpConnection>,
    load: &Load,
    index: usize,
    key: &str,
    body: Option<&[u8]>,
) -> Option<u16> {
    let authority = match load.via {
        Via::Http(authority) => authority,
        Via::Spread(nodes) => nodes[index % nodes.len()].as_str(),
        Via::Direct(handler) => return Some(handler(&direct_request(key, body)).status),
    };
    if conn.is_none() {
        *conn = HttpConnection::open(authority, Some(REQUEST_TIMEOUT)).ok();
    }
    let c = conn.as_mut()?;
    let key_header = [("Idempotency-Key", key)];
    let result = match body {
        Some(body) => c.request("POST", "/v1/tool-calls", &key_header, Some(body)),
        None => c.request("GET", "/healthz", &[], None),
    };
    // An error leaves the stream in an unknown state; the server may also have closed it.
    if !load.keep_alive || result.is_err() || c.is_closed() {
        *conn = None;
    }
    result.ok().map(|r| r.status)
}

/// The request `send` would put on the wire, as the parser would hand it over.
fn direct_request(key: &str, body: Option<&[u8]>) -> Request {
    match body {
        Some(body) => {
            let mut post = parsed_request("POST", "/v1/tool-calls");
            post.headers = vec![
                ("idempotency-key".to_string(), key.to_string()),
                ("content-type".to_string(), "application/json".to_string()),
            ];
            post.body = body.to_vec();
            post
        }
        None => parsed_request("GET", "/healthz"),
    }
}

/// An HTTP/1.1 request without headers or body, as the parser would hand it over.
pub fn parsed_request(method: &str, path: &str) -> Request {
    Request {
        method: method.to_string(),
        target: path.to_string(),
        path: path.to_string(),
        query: None,
        version: Version::Http11,
        headers: Vec::new(),
        body: Vec::new(),
        client: Default::default(),
        peer: None,
    }
}
