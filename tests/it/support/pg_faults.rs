//! What the fault tests share (`pg_frozen`, `pg_outage`, `pg_failover`,
//! `pg_partition`, and on SQLite `sqlite_frozen`): nodes of the real binary on a PostgreSQL
//! URL whose `pay` tool is an `http` tool on the reference downstream (which
//! counts the arrivals of every effect id), timed requests, a load that
//! keeps the keys it was answered `2xx` for, and the figures each fault is
//! judged by — acknowledged, lost, re-run, effects per key — read from the
//! database and the downstream.
//!
//! Nodes and the downstream are killed on drop like every `Proc`; nothing
//! here waits without a deadline.

use super::downstream::{Downstream, ToolsFile};
use super::{address_after, Proc, Server, DEADLINE, SERVER_BIN};
use idempotent_tool::client::request_once;
use idempotent_tool::temp::postgres::connect;
use idempotent_tool::temp::TempDir;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// `pay` (an `http` tool on `downstream`, one attempt per claim so a second
/// arrival at the downstream is a re-run, never a retry) and the built-in
/// `charge`.
pub fn pay_tools(downstream: &Downstream) -> ToolsFile {
    ToolsFile::write(&json!({"tools": {
        "pay": {"kind": "http", "url": downstream.url("/pay"), "max_attempts": 1,
                "timeout_ms": 30000},
        "charge": {"kind": "builtin"}
    }}))
}

pub fn pay(amount: u64) -> Value {
    json!({"tool": "pay", "args": {"amount": amount}})
}

/// A node on `url` with `tools` and extra flags; its `db` path is a
/// placeholder in `scratch` (the calls are in PostgreSQL).
pub fn start_node(
    name: &str,
    url: &str,
    tools: &ToolsFile,
    extra: &[&str],
    scratch: &TempDir,
) -> Server {
    let mut args = vec!["--port", "0", "--db", url, "--tools", tools.path_str()];
    args.extend_from_slice(extra);
    let (proc, line) = Proc::start(name, SERVER_BIN, &args, "listening on http://");
    let base = format!("http://{}", address_after(&line, "listening on http://"));
    Server {
        proc,
        base,
        db: scratch.join(&format!("{name}-not-used.db")),
    }
}

/// One answer and how long it took.
#[derive(Debug, Clone)]
pub struct Timed {
    /// `None`: no answer at all (the connection failed or timed out).
    pub status: Option<u16>,
    pub retry_after: Option<String>,
    pub body: Value,
    pub took: Duration,
}

impl Timed {
    pub fn accepted(&self) -> bool {
        matches!(self.status, Some(200..=202))
    }

    /// `503 unavailable` with `Retry-After`: the answer a fault must get.
    pub fn is_503_with_retry_after(&self) -> bool {
        self.status == Some(503)
            && self.retry_after.is_some()
            && matches!(
                self.body["error"]["code"].as_str(),
                Some("unavailable") | None
            )
    }
}

/// One request to `server`, timed, never panicking on a failed connection.
pub fn timed(
    server: &Server,
    method: &str,
    path: &str,
    key: Option<&str>,
    body: Option<&Value>,
) -> Timed {
    let headers: Vec<(&str, &str)> = key.map(|k| ("Idempotency-Key", k)).into_iter().collect();
    let body = body.map(Value::to_string);
    let started = Instant::now();
    let answer = request_once(
        &server.base,
        method,
        path,
        &headers,
        body.as_deref().map(str::as_bytes),
        Some(DEADLINE),
    );
    let took = started.elapsed();
    match answer {
        Ok(resp) => Timed {
            status: Some(resp.status),
            retry_after: resp.header("retry-after").map(str::to_string),
            body: resp.json(),
            took,
        },
        Err(_) => Timed {
            status: None,
            retry_after: None,
            body: Value::Null,
            took,
        },
    }
}

pub fn post(server: &Server, key: &str, body: &Value) -> Timed {
    timed(server, "POST", "/v1/tool-calls", Some(key), Some(body))
}

/// Every key a client was answered `2xx` for, with its call, and the keys
/// it was refused for (to retry with the same key).
#[derive(Debug, Default)]
pub struct Acks {
    pub accepted: BTreeMap<String, String>,
    pub refused: Vec<String>,
}

impl Acks {
    /// Record one POST's answer: `true` if accepted.
    pub fn record(&mut self, key: &str, answer: &Timed) -> bool {
        if answer.accepted() {
            let call_id = answer.body["call_id"].as_str().unwrap_or_default();
            self.accepted.insert(key.to_string(), call_id.to_string());
            self.refused.retain(|k| k != key);
            true
        } else {
            if !self.refused.iter().any(|k| k == key) {
                self.refused.push(key.to_string());
            }
            false
        }
    }

    /// Send every refused key again (same key) to `server` until each is
    /// accepted, within the deadline.
    pub fn retry_refused(&mut self, server: &Server, body_for: impl Fn(&str) -> Value) {
        let started = Instant::now();
        while let Some(key) = self.refused.first().cloned() {
            let answer = post(server, &key, &body_for(&key));
            if !self.record(&key, &answer) {
                assert!(
                    started.elapsed() < DEADLINE,
                    "{key} still refused: {answer:?}\n{}",
                    server.stderr()
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// Wait until every accepted call is `succeeded` or `failed` in the
/// database at `url` (read directly: no node needs to be up).
pub fn wait_all_terminal(url: &str, acks: &Acks) {
    let ids: Vec<&str> = acks.accepted.values().map(String::as_str).collect();
    let started = Instant::now();
    loop {
        let mut db = connect(url);
        let open: i64 = db
            .query_one(
                "SELECT count(*) FROM calls WHERE call_id = ANY($1)
                    AND status NOT IN ('succeeded', 'failed')",
                &[&ids],
            )
            .expect("count unfinished calls")
            .get(0);
        if open == 0 {
            return;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "{open} accepted calls never finished"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The figures a fault is judged by.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Figures {
    /// Keys answered `2xx`.
    pub acknowledged: usize,
    /// Of those, keys the database does not hold with that call.
    pub lost: usize,
    /// Of those, calls not `succeeded`.
    pub unfinished: usize,
    /// Effect ids that reached the downstream more than once (a `pay` run
    /// again), and the extra arrivals in all.
    pub rerun_calls: usize,
    pub extra_arrivals: i64,
    /// Calls whose effect the downstream applied other than exactly once,
    /// and calls with other than one `effects` row (a `charge`'s, or the
    /// `pay`'s record of the downstream's answer).
    pub effects_not_one: usize,
}

/// What the database holds for one acknowledged key.
pub struct CallRow {
    pub call_id: String,
    pub status: String,
    pub tool: String,
    pub effect_id: String,
    /// Its `effects` rows.
    pub effects: i64,
}

/// The query `row_of` runs on either backend (`$1`/`?1`: the key).
pub const CALL_ROW_SQL: &str = "SELECT c.call_id, c.status, c.tool, c.effect_id,
        (SELECT count(*) FROM effects e WHERE e.call_id = c.call_id)
   FROM calls c WHERE c.idem_key = ";

/// Count them over the accepted calls: the database at `url`, the
/// downstream's per-key counts for `pay` calls.
pub fn figures(url: &str, acks: &Acks, downstream: &Downstream) -> Figures {
    let mut db = connect(url);
    figures_from(acks, downstream, |key| {
        let row = db
            .query_opt(&format!("{CALL_ROW_SQL}$1"), &[&key])
            .expect("read a call")?;
        Some(CallRow {
            call_id: row.get(0),
            status: row.get(1),
            tool: row.get(2),
            effect_id: row.get(3),
            effects: row.get(4),
        })
    })
}

/// The figures over the accepted calls, each key's row read by `row_of`.
pub fn figures_from(
    acks: &Acks,
    downstream: &Downstream,
    mut row_of: impl FnMut(&str) -> Option<CallRow>,
) -> Figures {
    let mut found = Figures {
        acknowledged: acks.accepted.len(),
        ..Figures::default()
    };
    for (key, call_id) in &acks.accepted {
        let Some(row) = row_of(key).filter(|row| row.call_id == *call_id) else {
            found.lost += 1;
            continue;
        };
        if row.status != "succeeded" {
            found.unfinished += 1;
        }
        let mut effects_ok = row.effects == 1;
        if row.tool == "pay" {
            let seen = downstream.requests_for(&row.effect_id);
            let arrivals = seen["requests"].as_i64().unwrap_or(0);
            if arrivals > 1 {
                found.rerun_calls += 1;
                found.extra_arrivals += arrivals - 1;
            }
            effects_ok &= seen["effects"].as_i64() == Some(1);
        }
        if !effects_ok {
            found.effects_not_one += 1;
        }
    }
    found
}

/// The figures as one line for the test's output (and the report).
pub fn print_figures(fault: &str, figures: &Figures, timings: &[(&str, Duration)]) {
    let times: Vec<String> = timings
        .iter()
        .map(|(what, took)| format!("{what} {:.2} s", took.as_secs_f64()))
        .collect();
    eprintln!(
        "[{fault}] {}; acknowledged {}, lost {}, unfinished {}, re-run {} ({} extra arrivals), \
         effects other than one per key {}",
        times.join(", "),
        figures.acknowledged,
        figures.lost,
        figures.unfinished,
        figures.rerun_calls,
        figures.extra_arrivals,
        figures.effects_not_one
    );
}

pub const TCP_PROXY_BIN: &str = env!("CARGO_BIN_EXE_tcp_proxy");

/// The `tcp_proxy` binary between one node and PostgreSQL: the partition.
pub struct TcpProxy {
    pub proc: Proc,
    pub port: u16,
    /// Mode changes asked for so far (each logs one line when done).
    switches: usize,
}

impl TcpProxy {
    /// Relay a free port to PostgreSQL's `upstream_port` on 127.0.0.1.
    pub fn start(upstream_port: u16) -> TcpProxy {
        let upstream = format!("127.0.0.1:{upstream_port}");
        let args = ["--listen", "127.0.0.1:0", "--upstream", &upstream];
        let (proc, line) = Proc::start("tcp_proxy", TCP_PROXY_BIN, &args, "listening on ");
        let address = address_after(&line, "listening on ");
        let port = address.rsplit(':').next().and_then(|p| p.parse().ok());
        TcpProxy {
            proc,
            port: port.unwrap_or_else(|| panic!("no port in {line:?}")),
            switches: 0,
        }
    }

    /// Relay nothing, answer nothing (`SIGUSR1`).
    pub fn black_hole(&mut self) {
        self.switch("USR1", "black-hole");
    }

    /// RST every connection, and every new one (`SIGUSR2`).
    pub fn reset(&mut self) {
        self.switch("USR2", "reset");
    }

    /// Relay again (`SIGHUP`).
    pub fn heal(&mut self) {
        self.switch("HUP", "pass");
    }

    /// Signal, and return once the proxy logged the switch.
    fn switch(&mut self, signal: &str, mode: &str) {
        super::signal(&self.proc.child, signal);
        self.switches += 1;
        let started = Instant::now();
        while self.proc.stderr().matches("tcp_proxy: mode ").count() < self.switches {
            assert!(
                started.elapsed() < DEADLINE,
                "tcp_proxy never switched to {mode}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            self.proc
                .stderr()
                .lines()
                .filter(|l| l.starts_with("tcp_proxy: mode "))
                .nth(self.switches - 1)
                .is_some_and(|l| l.ends_with(mode)),
            "{}",
            self.proc.stderr()
        );
    }
}

/// What every fault test with `pay` calls sets up: a scratch folder, the
/// reference downstream (with `flags`: `--delay-ms` keeps calls in flight)
/// and the tools file pointing at it.
pub struct PayRig {
    pub scratch: TempDir,
    pub downstream: Downstream,
    pub tools: ToolsFile,
}

impl PayRig {
    pub fn new(name: &str, downstream_flags: &[&str]) -> PayRig {
        let downstream = Downstream::start(downstream_flags);
        let tools = pay_tools(&downstream);
        PayRig {
            scratch: TempDir::new(name).expect("a scratch folder"),
            downstream,
            tools,
        }
    }

    /// A node on `url` with the rig's tools and `flags`.
    pub fn node(&self, name: &str, url: &str, flags: &[&str]) -> Server {
        start_node(name, url, &self.tools, flags, &self.scratch)
    }

    /// Wait until every accepted call is terminal, then count and print
    /// the figures (with `timings`, and how long after `fault_began` every
    /// call had settled) and return them.
    pub fn settle(
        &self,
        fault: &str,
        url: &str,
        acks: &Acks,
        fault_began: Instant,
        timings: &[(&str, Duration)],
    ) -> Figures {
        wait_all_terminal(url, acks);
        let mut timings = timings.to_vec();
        timings.push((
            "every call settled after the fault began",
            fault_began.elapsed(),
        ));
        let found = figures(url, acks, &self.downstream);
        print_figures(fault, &found, &timings);
        found
    }
}

impl Figures {
    /// Every acknowledged key is on file with its call and succeeded, and
    /// its effect was applied exactly once.
    pub fn assert_nothing_lost(&self) {
        assert_eq!(self.lost, 0, "acknowledged calls lost: {self:?}");
        assert_eq!(self.unfinished, 0, "{self:?}");
        assert_eq!(self.effects_not_one, 0, "one effect per key: {self:?}");
    }
}
