//! `--db postgres://…`: the PostgreSQL backend beside SQLite, in one run. For
//! each mode (distinct keys, then one key) the same load runs against one
//! in-process service on a temp SQLite file, one in-process service on the
//! PostgreSQL database, and — with `--nodes N` — N in-process services on that
//! database with the client threads spread over them (thread `i` keeps to
//! node `i % N`, as behind a load balancer). With `--pgbench`, the pgbench
//! ceiling (`bench/pgbench_ceiling.sh`: the same database, call-shaped
//! transactions, no service) is measured first. One table: accepted and
//! completed calls/s, POST latency, answers other than 2xx, and each
//! PostgreSQL row's completed/s as a ratio of SQLite's, of one node's and of
//! the ceiling.
//!
//! It starts, loads and stops services, and reads them only through `/stats`;
//! it never writes the database itself (the ceiling script uses tables of its
//! own and drops them).

use crate::error::BenchError;
use crate::invariants::{check_invariants, Check};
use crate::load::{run_load, Load, LoadResult, Via};
use crate::measure::{fetch_stats, ratio, wait_for_drain};
use crate::target::{run_id, Target};
use crate::{Config, Mode, Stop};
use idempotent_tool::app::Service;
use idempotent_tool::config::Config as ServiceConfig;
use idempotent_tool::store::Database;
use idempotent_tool::temp::TempDir;
use serde_json::{json, Value};
use std::process::Command;

/// One backend and node count under one mode.
struct Row {
    mode: Mode,
    backend: &'static str,
    nodes: usize,
    load: LoadResult,
    completed_per_s: f64,
    checks: Vec<Check>,
}

impl Row {
    fn ok(&self) -> bool {
        self.checks.iter().all(|c| c.ok)
    }

    /// The figure rows are compared by: calls completed per second for new
    /// keys; for one key (one call in all) the answers per second.
    fn rate(&self) -> f64 {
        match self.mode {
            Mode::SameKey => self.load.accepted_per_s(),
            _ => self.completed_per_s,
        }
    }

    fn other_answers(&self) -> u64 {
        self.load.requests() - self.load.accepted()
    }
}

/// Run every row, print the table; `Ok(false)` when an invariant failed.
pub fn run_cluster(config: &Config, url: &str) -> Result<bool, BenchError> {
    let mut postgres = Database::parse(url).map_err(BenchError::Database)?;
    postgres.set_schema(&config.db_schema);
    let ceiling = match config.pgbench {
        true => Some(pgbench_ceiling(url, config)?),
        false => None,
    };
    let mut rows = Vec::new();
    for mode in [Mode::Distinct, Mode::SameKey] {
        let temp = TempDir::new("idem-bench-sqlite").map_err(BenchError::io("temp folder"))?;
        let sqlite = Database::Sqlite(temp.join("idem.db"));
        rows.push(measure_nodes("SQLite", sqlite, 1, mode, config)?);
        rows.push(measure_nodes(
            "PostgreSQL",
            postgres.clone(),
            1,
            mode,
            config,
        )?);
        if config.nodes > 1 {
            let row = measure_nodes("PostgreSQL", postgres.clone(), config.nodes, mode, config)?;
            rows.push(row);
        }
    }
    if config.json {
        idempotent_tool::outln!("{}", table_json(&rows, ceiling, config));
    } else {
        print_table(&rows, ceiling, config);
    }
    Ok(rows.iter().all(Row::ok))
}

/// Start `nodes` services on `db`, load them together, drain, check.
fn measure_nodes(
    backend: &'static str,
    db: Database,
    nodes: usize,
    mode: Mode,
    config: &Config,
) -> Result<Row, BenchError> {
    let services = (0..nodes)
        .map(|_| start_service(db.clone(), config))
        .collect::<Result<Vec<Service>, BenchError>>()?;
    let authorities: Vec<String> = services.iter().map(|s| s.addr().to_string()).collect();
    let stats = || fetch_stats(&authorities[0]);
    let before = stats()?;
    idempotent_tool::errln!(
        "bench: {} load on {backend}, {nodes} node(s), concurrency {}",
        mode.name(),
        config.concurrency
    );
    let load = run_load(&Load {
        via: Via::Spread(&authorities),
        mode,
        concurrency: config.concurrency,
        keep_alive: config.keep_alive,
        stop: config.stop,
        prefix: format!("bench-{}", run_id()),
        hold_open: false,
    });
    let (drain, after, drained) = wait_for_drain(stats, config.drain_timeout)?;
    // `/stats` of any node counts the whole database: the nodes share it.
    let target = Target {
        authority: authorities[0].clone(),
        db: None,
        in_process: true,
        server_pid: None,
        _service: None,
        downstream: None,
        child: None,
    };
    let checks = check_invariants(&target, mode, &load, &before, &after, drained);
    let completed = after.calls - before.calls - after.unfinished();
    let completed_per_s = completed as f64 / (load.wall + drain).as_secs_f64().max(1e-9);
    drop(services);
    Ok(Row {
        mode,
        backend,
        nodes,
        load,
        completed_per_s,
        checks,
    })
}

fn start_service(db: Database, config: &Config) -> Result<Service, BenchError> {
    let mut service = ServiceConfig {
        port: 0,
        db,
        ..ServiceConfig::default()
    };
    if let Some(workers) = config.setup.workers {
        service.runner.workers = workers;
    }
    Ok(Service::start(service)?)
}

/// `bench/pgbench_ceiling.sh --db URL`: calls/s with no service in front.
fn pgbench_ceiling(url: &str, config: &Config) -> Result<f64, BenchError> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/bench/pgbench_ceiling.sh");
    let seconds = match config.stop {
        Stop::After(d) => d.as_secs().max(5),
        Stop::Count(_) => 10,
    };
    idempotent_tool::errln!("bench: pgbench ceiling on the same database ({seconds} s)");
    let out = Command::new("bash")
        .arg(script)
        .args(["--db", url, "--seconds", &seconds.to_string()])
        .args(["--clients", &config.concurrency.to_string()])
        .output()
        .map_err(BenchError::io(format!("run {script}")))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let figure = stdout
        .lines()
        .find_map(|l| l.strip_prefix("ceiling calls_per_s="))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse::<f64>().ok());
    figure.ok_or_else(|| BenchError::NoCeiling {
        status: out.status,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// The row this one is compared with: the same mode's SQLite row, or its
/// one-node PostgreSQL row.
fn baseline<'a>(rows: &'a [Row], row: &Row, backend: &str) -> Option<&'a Row> {
    rows.iter()
        .find(|r| r.mode == row.mode && r.backend == backend && r.nodes == 1)
}

fn ratios(
    rows: &[Row],
    row: &Row,
    ceiling: Option<f64>,
) -> (Option<f64>, Option<f64>, Option<f64>) {
    let of = |base: Option<&Row>| base.map(|b| ratio(row.rate(), b.rate()));
    let is_pg = row.backend == "PostgreSQL";
    let vs_sqlite = is_pg.then(|| of(baseline(rows, row, "SQLite"))).flatten();
    let vs_one = (is_pg && row.nodes > 1)
        .then(|| of(baseline(rows, row, "PostgreSQL")))
        .flatten();
    // The ceiling is a new key per call: only the distinct rows compare.
    let vs_ceiling = (is_pg && row.mode == Mode::Distinct)
        .then_some(ceiling)
        .flatten()
        .map(|c| ratio(row.completed_per_s, c));
    (vs_sqlite, vs_one, vs_ceiling)
}

fn print_table(rows: &[Row], ceiling: Option<f64>, config: &Config) {
    let x = |r: Option<f64>| r.map_or("-".to_string(), |r| format!("{r:.2}x"));
    idempotent_tool::outln!(
        "PostgreSQL beside SQLite: concurrency {}, {}, {} cores{}",
        config.concurrency,
        match config.stop {
            Stop::After(d) => format!("{:.0} s per row", d.as_secs_f64()),
            Stop::Count(n) => format!("{n} requests per row"),
        },
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        ceiling.map_or(String::new(), |c| format!(
            ", pgbench ceiling {c:.0} calls/s"
        ))
    );
    idempotent_tool::outln!("ratios: completed/s for distinct keys, accepted/s for one key");
    idempotent_tool::outln!(
        "{:<9} {:<10} {:>5} {:>11} {:>12} {:>7} {:>7} {:>7} {:>9} {:>9} {:>10}  checks",
        "mode",
        "backend",
        "nodes",
        "accepted/s",
        "completed/s",
        "p50 ms",
        "p99 ms",
        "non-2xx",
        "vs SQLite",
        "vs 1 node",
        "vs pgbench"
    );
    for row in rows {
        let (vs_sqlite, vs_one, vs_ceiling) = ratios(rows, row, ceiling);
        idempotent_tool::outln!(
            "{:<9} {:<10} {:>5} {:>11.0} {:>12.0} {:>7.2} {:>7.2} {:>7} {:>9} {:>9} {:>10}  {}",
            row.mode.name(),
            row.backend,
            row.nodes,
            row.load.accepted_per_s(),
            row.completed_per_s,
            row.load.ms(0.5),
            row.load.ms(0.99),
            row.other_answers(),
            x(vs_sqlite),
            x(vs_one),
            x(vs_ceiling),
            if row.ok() { "ok" } else { "FAILED" }
        );
        for check in row.checks.iter().filter(|c| !c.ok) {
            idempotent_tool::outln!("    FAILED: {}", check.name);
        }
    }
}

fn table_json(rows: &[Row], ceiling: Option<f64>, config: &Config) -> Value {
    let rows: Vec<Value> = rows
        .iter()
        .map(|row| {
            let (vs_sqlite, vs_one, vs_ceiling) = ratios(rows, row, ceiling);
            json!({
                "mode": row.mode.name(),
                "backend": row.backend,
                "nodes": row.nodes,
                "accepted_per_s": row.load.accepted_per_s(),
                "completed_per_s": row.completed_per_s,
                "p50_ms": row.load.ms(0.5),
                "p99_ms": row.load.ms(0.99),
                "codes": row.load.codes_by_name(),
                "vs_sqlite": vs_sqlite,
                "vs_one_node": vs_one,
                "vs_pgbench": vs_ceiling,
                "checks": row.checks.iter().map(|c| json!({"name": c.name, "ok": c.ok})).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "concurrency": config.concurrency,
        "pgbench_calls_per_s": ceiling,
        "rows": rows,
    })
}
