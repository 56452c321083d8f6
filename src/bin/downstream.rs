//! The `downstream` binary: a reference downstream for `http` tools, doing what
//! docs/tools.md ("What a downstream must do with the key") asks of a
//! downstream's owner — deduplicate on `Idempotency-Key` in its own durable
//! store, and answer a repeat with the first answer — plus knobs to misbehave
//! on purpose for tests and demos.
//!
//! `POST` (any path) with an `Idempotency-Key`: the request is counted for its
//! key; after `--delay-ms`, the first `--fail-first N` requests of each key are
//! answered `--status` (503 unless given; with `--status` alone, every request
//! is); otherwise the effect is applied once per key in one `BEGIN IMMEDIATE`
//! transaction and its answer stored, so a repeat (a retry after a timeout, or
//! after the service crashed before recording the answer) gets the same answer
//! and no second effect. The same key with other `tool`/`args` is `422`.
//! `GET /requests/{key}` and `GET /stats` report counts, the most requests
//! seen at once, and the most that arrived within one second.
//!
//! With `--webhook-secret-file`, it is also a Standard Webhooks receiver
//! (`webhook`): a POST with `webhook-id` is verified and recorded once per
//! id (`--fail-first` fails its first deliveries too), and `GET /webhooks`
//! lists them.
//!
//! It is a separate program with its own SQLite file, so its SQL lives here,
//! not in the service's store. It must never apply an effect twice for a key,
//! and never answer before the effect's row committed. It serves with the
//! service's own hand-written HTTP server, prints one start-up line with the
//! real address, and logs one line per request on stderr.

#![forbid(unsafe_code)]

#[path = "downstream/webhook.rs"]
mod webhook;

use idempotent_tool::api::percent_decode;
use idempotent_tool::flag::{FlagError, Flags};
use idempotent_tool::http::{Request, Response};
use idempotent_tool::server::{self, Handler, Limits};
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::io::Write;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const USAGE: &str = "\
usage: downstream [--host H] [--port N] [--db PATH] [--fail-first N] [--status CODE]
                  [--retry-after SECS] [--delay-ms MS] [--pad-bytes N]
  --port 0 picks a free port; the start-up line shows the real address.
  --db PATH        its own SQLite file (default downstream.db)
  --fail-first N   answer the first N requests of each key with the failure status
  --status CODE    the failure status, 400-599 (default 503); alone: fail every request
  --retry-after S  send Retry-After: S with each failure
  --delay-ms MS    wait this long before answering any POST
  --pad-bytes N    add N bytes of padding to each effect's answer (to test size caps)
  --webhook-secret-file PATH  receive Standard Webhooks signed with this whsec_ secret";

/// The settings from the command line.
#[derive(Debug, Clone)]
struct Options {
    host: String,
    port: u16,
    db: PathBuf,
    fail_first: Option<u64>,
    status: Option<u16>,
    retry_after: Option<u64>,
    delay: Duration,
    pad_bytes: usize,
    /// The key webhooks are verified with (`--webhook-secret-file`).
    webhook_key: Option<Vec<u8>>,
}

/// The downstream's state: its database and its concurrency gauge.
struct Downstream {
    db: Mutex<Connection>,
    options: Options,
    in_flight: AtomicUsize,
    /// The most POSTs this process has had in progress at once.
    max_in_flight: AtomicUsize,
    /// When each POST of the last second arrived, oldest first.
    last_second: Mutex<VecDeque<Instant>>,
    /// The most POSTs that arrived within any one second (a sliding window:
    /// the count is taken at each arrival, over the second before it).
    max_per_second: AtomicUsize,
}

/// Counts one POST in progress for as long as it lives.
struct InFlight<'a>(&'a Downstream);

impl<'a> InFlight<'a> {
    fn enter(downstream: &'a Downstream) -> InFlight<'a> {
        let now = downstream.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        downstream.max_in_flight.fetch_max(now, Ordering::SeqCst);
        InFlight(downstream)
    }
}

impl Downstream {
    /// Count one arrival in the sliding second behind it.
    fn arrived(&self) {
        let now = Instant::now();
        let mut window = self.last_second.lock().unwrap_or_else(|p| p.into_inner());
        while window
            .front()
            .is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(1))
        {
            window.pop_front();
        }
        window.push_back(now);
        self.max_per_second
            .fetch_max(window.len(), Ordering::SeqCst);
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

const SCHEMA: &str = "
    CREATE TABLE IF NOT EXISTS requests (
        idem_key TEXT PRIMARY KEY,
        count INTEGER NOT NULL
    );
    -- One row per key: the primary key is what makes the effect happen once.
    CREATE TABLE IF NOT EXISTS effects (
        idem_key TEXT PRIMARY KEY,
        fingerprint TEXT NOT NULL,
        status INTEGER NOT NULL,
        response TEXT NOT NULL,
        created_ms INTEGER NOT NULL
    );";

fn main() -> ExitCode {
    let options = match parse_args(std::env::args().skip(1).collect()) {
        Ok(Some(options)) => options,
        Ok(None) => {
            idempotent_tool::outln!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            idempotent_tool::cli::console::usage_error("downstream", &message);
            return ExitCode::from(2);
        }
    };
    let downstream = match Downstream::open(options) {
        Ok(downstream) => Arc::new(downstream),
        Err(e) => {
            idempotent_tool::errln!("downstream: cannot open the database: {e}");
            return ExitCode::FAILURE;
        }
    };
    let options = &downstream.options;
    let listener = match TcpListener::bind((options.host.as_str(), options.port)) {
        Ok(listener) => listener,
        Err(e) => {
            idempotent_tool::errln!("downstream: cannot bind: {e}");
            return ExitCode::FAILURE;
        }
    };
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    idempotent_tool::outln!(
        "downstream listening on http://{addr} (db {})",
        options.db.display()
    );
    // Tests and scripts read this line to learn the port.
    let _ = std::io::stdout().flush();
    let handler: Handler = Arc::new(move |req| downstream.handle(req));
    server::serve(listener, handler, Limits::default());
    ExitCode::SUCCESS
}

impl Downstream {
    fn open(options: Options) -> rusqlite::Result<Downstream> {
        let conn = Connection::open(&options.db)?;
        conn.busy_timeout(Duration::from_secs(5))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.execute_batch(SCHEMA)?;
        conn.execute_batch(webhook::SCHEMA)?;
        Ok(Downstream {
            db: Mutex::new(conn),
            options,
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            last_second: Mutex::new(VecDeque::new()),
            max_per_second: AtomicUsize::new(0),
        })
    }

    fn handle(&self, req: &Request) -> Response {
        let result = match (req.method.as_str(), req.path.as_str()) {
            ("GET", "/healthz") => Ok(Response::json(200, &json!({"ok": true}))),
            ("GET", "/stats") => self.stats(),
            ("GET", "/webhooks") => webhook::list(&self.lock()),
            ("POST", _) if webhook::is_webhook(req) && self.options.webhook_key.is_some() => {
                self.webhook(req)
            }
            ("GET", path) if path.starts_with("/requests/") => {
                self.requests_for(&path["/requests/".len()..])
            }
            ("POST", _) => self.post(req),
            _ => Ok(error_response(
                404,
                "not_found",
                "POST any path; GET /stats or /requests/{key}",
            )),
        };
        result.unwrap_or_else(|e| {
            idempotent_tool::errln!("downstream: database error: {e}");
            error_response(500, "internal_error", "database error")
        })
    }

    fn post(&self, req: &Request) -> rusqlite::Result<Response> {
        let Some(key) = req.header("Idempotency-Key").filter(|k| !k.is_empty()) else {
            return Ok(error_response(
                400,
                "missing_idempotency_key",
                "the Idempotency-Key header is required",
            ));
        };
        self.arrived();
        let _counted = InFlight::enter(self);
        let seen = self.count_request(key)?;
        let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        idempotent_tool::errln!(
            "downstream: POST {} key={key} request={seen} attempt={}",
            req.path,
            body["attempt"]
        );
        std::thread::sleep(self.options.delay);
        if let Some(status) = self.injected_failure(seen) {
            let mut response = error_response(
                status,
                "injected_failure",
                format!("request {seen} for this key fails on purpose"),
            );
            if let Some(secs) = self.options.retry_after {
                response = response.with_header("Retry-After", &secs.to_string());
            }
            return Ok(response);
        }
        self.apply_once(key, &body)
    }

    /// A webhook: failed on purpose like a POST (`--fail-first`, counted per
    /// `webhook-id`), else verified and recorded.
    fn webhook(&self, req: &Request) -> rusqlite::Result<Response> {
        let id = req.header("webhook-id").unwrap_or_default().to_string();
        let seen = self.count_request(&format!("webhook:{id}"))?;
        idempotent_tool::errln!("downstream: webhook {id} delivery={seen}");
        if let Some(status) = self.injected_failure(seen) {
            return Ok(error_response(
                status,
                "injected_failure",
                format!("delivery {seen} of this webhook fails on purpose"),
            ));
        }
        let key = self.options.webhook_key.as_deref().unwrap_or_default();
        Ok(webhook::receive(&self.lock(), key, req)?.0)
    }

    /// The status this request (the `seen`-th for its key) fails with, if any.
    fn injected_failure(&self, seen: u64) -> Option<u16> {
        let status = self.options.status.unwrap_or(503);
        match self.options.fail_first {
            Some(n) => (seen <= n).then_some(status),
            None => self.options.status,
        }
    }

    /// Count this request for `key`; returns how many the key has had, this one included.
    fn count_request(&self, key: &str) -> rusqlite::Result<u64> {
        self.lock().query_row(
            "INSERT INTO requests (idem_key, count) VALUES (?1, 1)
             ON CONFLICT (idem_key) DO UPDATE SET count = count + 1
             RETURNING count",
            params![key],
            |row| row.get(0),
        )
    }

    /// The effect, once per key: the first request inserts the row and its
    /// answer in one transaction; every later one reads that answer back.
    fn apply_once(&self, key: &str, body: &Value) -> rusqlite::Result<Response> {
        let fingerprint = json!({"tool": body["tool"], "args": body["args"]}).to_string();
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let first: Option<(String, u16, String)> = tx
            .query_row(
                "SELECT fingerprint, status, response FROM effects WHERE idem_key = ?1",
                params![key],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
            )
            .optional()?;
        if let Some((stored, status, response)) = first {
            if stored != fingerprint {
                return Ok(error_response(
                    422,
                    "idempotency_key_reused",
                    "this Idempotency-Key was used for another tool or other args",
                ));
            }
            return Ok(Response::json_bytes(status, response.into_bytes())
                .with_header("Idempotent-Replayed", "true"));
        }
        let number: i64 = tx.query_row("SELECT count(*) + 1 FROM effects", [], |row| row.get(0))?;
        let mut answer = json!({
            "downstream_effect": format!("d_{number}"),
            "idempotency_key": key,
            "call_id": body["call_id"],
            "attempt": body["attempt"],
        });
        if self.options.pad_bytes > 0 {
            answer["pad"] = Value::String("x".repeat(self.options.pad_bytes));
        }
        let response = answer.to_string();
        tx.execute(
            "INSERT INTO effects (idem_key, fingerprint, status, response, created_ms) VALUES (?1, ?2, 200, ?3, ?4)",
            params![key, fingerprint, response, now_ms()],
        )?;
        tx.commit()?;
        Ok(Response::json_bytes(200, response.into_bytes()))
    }

    fn requests_for(&self, encoded: &str) -> rusqlite::Result<Response> {
        let Some(key) = percent_decode(encoded) else {
            return Ok(error_response(
                400,
                "bad_request",
                "the key is not valid percent-encoded UTF-8",
            ));
        };
        let conn = self.lock();
        let requests: i64 = conn
            .query_row(
                "SELECT count FROM requests WHERE idem_key = ?1",
                params![key],
                |row| row.get(0),
            )
            .optional()?
            .unwrap_or(0);
        let effects: i64 = conn.query_row(
            "SELECT count(*) FROM effects WHERE idem_key = ?1",
            params![key],
            |row| row.get(0),
        )?;
        Ok(Response::json(
            200,
            &json!({"key": key, "requests": requests, "effects": effects}),
        ))
    }

    fn stats(&self) -> rusqlite::Result<Response> {
        let conn = self.lock();
        let (keys, requests): (i64, i64) = conn.query_row(
            "SELECT count(*), coalesce(sum(count), 0) FROM requests",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )?;
        let effects: i64 = conn.query_row("SELECT count(*) FROM effects", [], |row| row.get(0))?;
        Ok(Response::json(
            200,
            &json!({
                "keys": keys,
                "requests": requests,
                "effects": effects,
                "in_flight": self.in_flight.load(Ordering::SeqCst),
                "max_in_flight": self.max_in_flight.load(Ordering::SeqCst),
                "max_per_second": self.max_per_second.load(Ordering::SeqCst),
            }),
        ))
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        self.db.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The service's error shape, `{"error":{"code","message"}}`, with this
/// program's own codes (`injected_failure`, `idempotency_key_reused`, ...),
/// which are not the service's and so not in its `ErrorCode` table.
fn error_response(status: u16, code: &str, message: impl std::fmt::Display) -> Response {
    Response::json(
        status,
        &json!({"error": {"code": code, "message": message.to_string()}}),
    )
}

/// `Ok(None)` for `--help`.
fn parse_args(args: Vec<String>) -> Result<Option<Options>, FlagError> {
    let mut options = Options {
        host: "127.0.0.1".into(),
        port: 8081,
        db: PathBuf::from("downstream.db"),
        fail_first: None,
        status: None,
        retry_after: None,
        delay: Duration::ZERO,
        pad_bytes: 0,
        webhook_key: None,
    };
    let mut flags = Flags::new(args);
    while let Some(flag) = flags.next_flag()? {
        if flag == "--help" || flag == "-h" {
            return Ok(None);
        }
        let known = [
            "--host",
            "--port",
            "--db",
            "--fail-first",
            "--status",
            "--retry-after",
            "--delay-ms",
            "--pad-bytes",
            "--webhook-secret-file",
        ];
        if !known.contains(&flag.as_str()) {
            return Err(FlagError::Unknown(flag));
        }
        let value = flags.value()?;
        let bad = |expected| FlagError::BadValue {
            flag: flag.clone(),
            value: value.clone(),
            expected,
        };
        let number = || {
            value
                .parse::<u64>()
                .map_err(|_| bad("a non-negative integer"))
        };
        match flag.as_str() {
            "--host" => options.host = value.clone(),
            "--port" => options.port = value.parse().map_err(|_| bad("a port"))?,
            "--db" => options.db = PathBuf::from(&value),
            "--fail-first" => options.fail_first = Some(number()?),
            "--status" => match number()? {
                code @ 400..=599 => options.status = Some(code as u16),
                _ => return Err(bad("from 400 to 599")),
            },
            "--retry-after" => options.retry_after = Some(number()?),
            "--delay-ms" => options.delay = Duration::from_millis(number()?),
            "--webhook-secret-file" => {
                let key = webhook::read_key(std::path::Path::new(&value))
                    .map_err(|_| bad("a file holding whsec_ and base64"))?;
                options.webhook_key = Some(key);
            }
            _ => options.pad_bytes = number()? as usize, // --pad-bytes
        }
    }
    Ok(Some(options))
}
