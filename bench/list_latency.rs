//! `--console list`: how long a page of the list takes with a million calls
//! in the database, under each filter alone (the error code included, and
//! with the filter's total), for one tenant and for every tenant, and how
//! long the overview (over 15 minutes, a day and a week, its failures
//! grouped by code) and `/stats` take — p50 and p99 over `--samples`
//! requests each, one after another on one keep-alive connection.
//!
//! The database is the bench's mixed million (`store::bulk::MixedCalls`:
//! 12 hours of calls in eight tenants, four tools, every status), loaded into a
//! temp SQLite file or, with `--db postgres://…`, into that (empty)
//! database. Each request asks for a different key, prefix, business key,
//! effect id or time window that is there, drawn from the mix's rows.
//!
//! It only reads the service over HTTP once the load is done; it never
//! writes to a database it did not create (PostgreSQL: only to the one
//! given, which must be empty).

use crate::error::BenchError;
use crate::target::start_db;
use crate::Config;
use idempotent_tool::client::{encode_path_segment, HttpConnection};
use idempotent_tool::store::bulk::{self, MixedCalls};
use idempotent_tool::store::{now, Database};
use idempotent_tool::temp::TempDir;
use serde_json::json;
use std::time::{Duration, Instant};

/// Tenants in the mix.
const TENANTS: u64 = 8;

/// The tenant a tenant-scoped query names.
const TENANT: u64 = 3;

/// One query's latencies.
struct Probe {
    name: &'static str,
    scope: &'static str,
    /// Milliseconds, sorted.
    ms: Vec<f64>,
    /// Calls per page, summed (to show what a filter found).
    calls: usize,
    /// Answers other than `200`.
    failed: usize,
}

impl Probe {
    fn quantile(&self, q: f64) -> f64 {
        let i = ((self.ms.len() as f64 * q).ceil() as usize).clamp(1, self.ms.len()) - 1;
        self.ms[i]
    }
}

/// Load the mix, then time every query; print the table.
pub fn run_list_latency(config: &Config) -> Result<bool, BenchError> {
    let (rows, samples) = (config.rows, config.samples);
    let temp = TempDir::new("idem-bench-list").map_err(BenchError::io("temp folder"))?;
    let db = match &config.postgres {
        Some(url) => Database::parse(url).map_err(BenchError::Database)?,
        None => Database::Sqlite(temp.join("idem.db")),
    };
    let mix = MixedCalls {
        count: rows,
        tenants: TENANTS,
        now: now(),
    };
    idempotent_tool::errln!("bench: loading {rows} mixed calls into {db}");
    let started = Instant::now();
    let fill = || {
        bulk::insert_mixed_calls(&db, &mix).map_err(|source| BenchError::Store {
            doing: format!("load {rows} mixed calls"),
            source,
        })
    };
    let target = start_db(db.clone(), fill)?;
    let loaded = started.elapsed();
    idempotent_tool::errln!("bench: loaded in {:.1}s", loaded.as_secs_f64());
    let mut conn = HttpConnection::open(&target.authority, Some(Duration::from_secs(30)))
        .map_err(BenchError::io("connect"))?;
    let mut probes = Vec::new();
    for (scope, tenant) in [("t3", Some(TENANT)), ("*", None)] {
        for (name, query) in queries(&mix, tenant) {
            probes.push(probe(&mut conn, (name, scope), tenant, &query, samples)?);
        }
    }
    print(&probes, &mix, &db, loaded, config.json, samples);
    Ok(probes.iter().all(|p| p.failed == 0))
}

/// What each filter asks, request `i`, in a scope (`tenant=…`): a path and
/// query, the scope not yet added.
type Query = Box<dyn Fn(&mut HttpConnection, usize, &str) -> Result<String, BenchError>>;

/// Every filter alone, plus the second page and the counts.
fn queries(mix: &MixedCalls, tenant: Option<u64>) -> Vec<(&'static str, Query)> {
    let mix = *mix;
    // Row numbers spread over the whole day, in the scope's tenant.
    let row = move |i: usize| {
        let n = (i as u64 * 7_919 * 1_009) % (mix.count / TENANTS);
        n * TENANTS + tenant.unwrap_or(i as u64 % TENANTS)
    };
    let list = |filter: &'static str| -> Query {
        Box::new(move |_, _, _| Ok(format!("/v1/tool-calls?{filter}")))
    };
    let with_row = |make: fn(&MixedCalls, u64) -> String| -> Query {
        Box::new(move |_, i, _| Ok(format!("/v1/tool-calls?{}", make(&mix, row(i)))))
    };
    vec![
        ("newest page", list("")),
        ("status=failed", list("status=failed")),
        ("status=pending (rare)", list("status=pending")),
        ("status=running (rare)", list("status=running")),
        ("tool=sleep", list("tool=sleep")),
        ("error_code", list("error_code=downstream_timeout")),
        (
            "status+error_code",
            list("status=failed&error_code=downstream_timeout"),
        ),
        (
            "error_code + total",
            list("error_code=downstream_timeout&total=true"),
        ),
        ("status + total", list("status=failed&total=true")),
        ("key", with_row(|m, n| format!("key={}", m.row(n).idem_key))),
        (
            "key_prefix (~11 keys)",
            with_row(|m, n| format!("key_prefix={}", m.row(n).idem_key)),
        ),
        ("key_prefix (every key)", list("key_prefix=order-")),
        (
            "business_key",
            with_row(|m, n| {
                // The first row from `n` on, in its tenant, that carried one.
                let carrier = (n..)
                    .step_by(TENANTS as usize)
                    .find_map(|k| m.row(k).business_key);
                format!("business_key={}", carrier.unwrap_or_default())
            }),
        ),
        (
            "effect_id",
            with_row(|m, n| format!("effect_id={}", m.row(n).effect_id)),
        ),
        (
            "created (1 h window)",
            with_row(|m, n| {
                let at = m.row(n).created_at;
                format!(
                    "created_after={}&created_before={}",
                    rfc3339(at - 1_800.0),
                    rfc3339(at + 1_800.0)
                )
            }),
        ),
        (
            "next page (cursor)",
            Box::new(move |conn, i, scoped| {
                let before = rfc3339(mix.row(row(i)).created_at);
                let first = get(
                    conn,
                    &format!("/v1/tool-calls?created_before={before}&{scoped}"),
                )?;
                // Near the oldest calls there may be no second page.
                Ok(match first["next"].as_str() {
                    Some(next) => format!(
                        "/v1/tool-calls?created_before={before}&next={}",
                        encode_path_segment(next)
                    ),
                    None => format!("/v1/tool-calls?created_before={before}"),
                })
            }),
        ),
        (
            "overview",
            Box::new(|_, _, _| Ok("/v1/overview?".to_string())),
        ),
        (
            "overview, 24 h",
            Box::new(|_, _, _| Ok("/v1/overview?range=24h".to_string())),
        ),
        (
            "overview, 7 d",
            Box::new(|_, _, _| Ok("/v1/overview?range=7d".to_string())),
        ),
        ("/stats", Box::new(|_, _, _| Ok("/stats?".to_string()))),
    ]
}

/// `samples` requests of `query` in `scope`, timed one by one.
fn probe(
    conn: &mut HttpConnection,
    (name, scope): (&'static str, &'static str),
    tenant: Option<u64>,
    query: &Query,
    samples: usize,
) -> Result<Probe, BenchError> {
    let mut p = Probe {
        name,
        scope,
        ms: Vec::with_capacity(samples),
        calls: 0,
        failed: 0,
    };
    let scoped = match (tenant, name) {
        (_, "/stats") => match tenant {
            Some(_) => String::new(), // no auth: /stats counts every call
            None => "scope=all".to_string(),
        },
        (Some(t), _) => format!("tenant=t{t}"),
        (None, _) => "tenant=*".to_string(),
    };
    for i in 0..samples {
        let path = query(conn, i, &scoped)?;
        let joiner = if path.ends_with('?') { "" } else { "&" };
        let path = format!("{path}{joiner}{scoped}");
        let started = Instant::now();
        let resp = conn
            .request("GET", &path, &[], None)
            .map_err(BenchError::io(format!("GET {path}")))?;
        p.ms.push(started.elapsed().as_secs_f64() * 1e3);
        if resp.status != 200 {
            p.failed += 1;
            continue;
        }
        p.calls += resp.json()["calls"].as_array().map_or(0, Vec::len);
    }
    p.ms.sort_by(f64::total_cmp);
    Ok(p)
}

fn get(conn: &mut HttpConnection, path: &str) -> Result<serde_json::Value, BenchError> {
    let resp = conn
        .request("GET", path, &[], None)
        .map_err(BenchError::io(format!("GET {path}")))?;
    Ok(resp.json())
}

/// Unix seconds as RFC 3339 (UTC, milliseconds), as the list takes them.
fn rfc3339(seconds: f64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64(seconds.max(0.0));
    idempotent_tool::rfc3339::rfc3339_millis(at)
}

fn print(
    probes: &[Probe],
    mix: &MixedCalls,
    db: &Database,
    loaded: Duration,
    as_json: bool,
    samples: usize,
) {
    let backend = match db {
        Database::Sqlite(_) => "sqlite",
        Database::Postgres(_) => "postgres",
    };
    if as_json {
        let rows: Vec<_> = probes
            .iter()
            .map(|p| {
                json!({"query": p.name, "scope": p.scope, "p50_ms": p.quantile(0.5),
                       "p99_ms": p.quantile(0.99), "max_ms": p.quantile(1.0),
                       "calls_per_page": p.calls as f64 / samples as f64, "failed": p.failed})
            })
            .collect();
        let out = json!({"backend": backend, "calls": mix.count, "tenants": mix.tenants,
                         "load_s": loaded.as_secs_f64(), "samples": samples, "queries": rows});
        idempotent_tool::outln!("{out}");
        return;
    }
    idempotent_tool::outln!(
        "list latency: {backend}, {} calls in {} tenants (loaded in {:.0}s), {samples} requests each, one at a time",
        mix.count,
        mix.tenants,
        loaded.as_secs_f64()
    );
    idempotent_tool::outln!(
        "{:<24} {:>5} {:>8} {:>8} {:>8} {:>10} {:>6}",
        "query",
        "scope",
        "p50 ms",
        "p99 ms",
        "max ms",
        "calls/page",
        "non200"
    );
    for p in probes {
        idempotent_tool::outln!(
            "{:<24} {:>5} {:>8.2} {:>8.2} {:>8.2} {:>10.1} {:>6}",
            p.name,
            p.scope,
            p.quantile(0.5),
            p.quantile(0.99),
            p.quantile(1.0),
            p.calls as f64 / samples as f64,
            p.failed
        );
    }
}
