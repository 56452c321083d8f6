//! The bench binary, run small: each mode reports the seed's figures with its
//! calibration and writer counters, `--base` loads a running server and checks
//! the invariants in its database file, and a broken invariant fails the run.
//! Figures are read for shape and consistency, never compared with a speed.

use crate::support::Counts;
use crate::support::{Http, Proc, Server, TempDb, DEADLINE};
use serde_json::{json, Value};

const BENCH_BIN: &str = env!("CARGO_BIN_EXE_bench");

/// A finished bench run: its exit code, its `--json` report, and the process
/// (whose stderr may still be arriving through its pipe).
struct BenchRun {
    code: Option<i32>,
    report: Value,
    proc: Proc,
}

/// Run the bench with `--json` and wait (bounded) for it to exit.
fn run_bench(args: &[&str]) -> BenchRun {
    let mut args = args.to_vec();
    args.push("--json");
    // The report is the one line on stdout, printed last.
    let (mut proc, line) = Proc::start("bench", BENCH_BIN, &args, "\"checks\"");
    assert!(
        proc.wait_exit(DEADLINE),
        "the bench did not exit after its report"
    );
    BenchRun {
        code: proc.child.try_wait().unwrap().and_then(|s| s.code()),
        report: serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON {line:?}: {e}")),
        proc,
    }
}

/// The names of the checks that held, and of those that did not.
fn checks(report: &Value) -> (Vec<String>, Vec<String>) {
    let (mut held, mut failed) = (Vec::new(), Vec::new());
    for c in report["checks"].as_array().expect("checks") {
        let name = c["name"].as_str().unwrap().to_string();
        match c["ok"].as_bool() {
            Some(true) => held.push(name),
            _ => failed.push(name),
        }
    }
    (held, failed)
}

fn number(report: &Value, field: &str) -> f64 {
    report[field]
        .as_f64()
        .unwrap_or_else(|| panic!("{field} in {report}"))
}

/// Latency figures are ordered and the calibrations ran.
fn assert_figures_are_sane(report: &Value) {
    let (p50, p95, p99, max) = (
        number(report, "p50_ms"),
        number(report, "p95_ms"),
        number(report, "p99_ms"),
        number(report, "max_ms"),
    );
    assert!(
        0.0 < p50 && p50 <= p95 && p95 <= p99 && p99 <= max,
        "{report}"
    );
    assert!(number(report, "rps") > 0.0, "{report}");
    assert!(report["healthz"]["rps"].as_f64().unwrap() > 0.0, "{report}");
    assert_eq!(report["healthz"]["status0"], 0, "{report}");
    assert!(number(report, "single_commit_per_s") > 0.0, "{report}");
    assert!(number(report, "single_commit_p99_ms") > 0.0, "{report}");
}

#[test]
fn distinct_run_reports_the_seeds_figures_and_holds_its_invariants() {
    let run = run_bench(&["--n", "60", "--concurrency", "4"]);
    let r = &run.report;
    assert_eq!(run.code, Some(0), "{r}\n{}", run.proc.stderr());
    assert_eq!(r["mode"], "distinct");
    assert_eq!(r["server"], "in-process");
    assert_eq!(r["n"], 60);
    assert_eq!(r["http"]["202"], 60, "{r}");
    assert_eq!(r["status0"], 0);
    assert_eq!(r["calls"], 60);
    assert_eq!(r["effects"], 60);
    assert_eq!(r["completed"], 60);
    assert_eq!(r["attempts"]["1"], 60, "{r}");
    assert_eq!(r["ok"], true);
    let (held, failed) = checks(r);
    assert!(failed.is_empty(), "{failed:?}");
    for name in [
        "one call per Idempotency-Key",
        "at most one effect per call",
    ] {
        assert!(
            held.iter().any(|h| h.starts_with(name)),
            "{name} not checked: {held:?}"
        );
    }
    assert_figures_are_sane(r);
    // Each call is at least a create (claimed with it while a worker is
    // free) and a succeed: two operations per call.
    let writer = &r["writer"];
    assert!(writer["ops"].as_u64().unwrap() >= 120, "{writer}");
    assert!(writer["batches"].as_u64().unwrap() >= 1, "{writer}");
    assert!(r["peak_rss_kib"].as_u64().unwrap() > 0, "{r}");
    assert_cpu_was_read(r, "new key");
    assert_no_http_run_accepted_every_call(r, 60);
}

/// The server's CPU and switches per accepted request and per `/healthz`
/// were read: every request costs the server some of both (a request is
/// read, so its thread waited for it at least once per connection).
fn assert_cpu_was_read(report: &Value, per: &str) {
    let cpu = &report["cpu"];
    assert_eq!(cpu["per"], per, "{report}");
    for field in [
        "us_per_call",
        "healthz_us",
        "switches_per_call",
        "server_cpus",
    ] {
        assert!(cpu[field].as_f64().unwrap() > 0.0, "{field}: {report}");
    }
}

/// The run without HTTP sent the same load into a service's handler, and
/// every request was accepted as a new call.
fn assert_no_http_run_accepted_every_call(report: &Value, n: u64) {
    let no_http = &report["no_http"];
    assert_eq!(no_http["n"], n, "{report}");
    assert_eq!(no_http["http"]["202"], n, "{report}");
    assert!(
        no_http["accepted_per_s"].as_f64().unwrap() > 0.0,
        "{report}"
    );
    assert!(
        no_http["accepted_x_healthz"].as_f64().unwrap() > 0.0,
        "{report}"
    );
    let (p50, p99) = (
        no_http["p50_ms"].as_f64().unwrap(),
        no_http["p99_ms"].as_f64().unwrap(),
    );
    assert!(0.0 < p50 && p50 <= p99, "{report}");
}

#[test]
fn same_key_run_makes_one_call_and_one_effect() {
    let run = run_bench(&["--mode", "same-key", "--n", "40", "--concurrency", "4"]);
    let r = &run.report;
    assert_eq!(run.code, Some(0), "{r}\n{}", run.proc.stderr());
    assert_eq!(r["calls"], 1, "{r}");
    assert_eq!(r["effects"], 1, "{r}");
    let answered: u64 = r["http"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(code, _)| *code == "200" || *code == "202")
        .map(|(_, n)| n.as_u64().unwrap())
        .sum();
    assert_eq!(answered, 40, "{r}");
    assert!(checks(r).1.is_empty(), "{r}");
    assert_cpu_was_read(r, "same-key answer");
}

#[test]
fn mixed_run_holds_its_invariants() {
    let run = run_bench(&["--mode", "mixed", "--n", "60", "--concurrency", "4"]);
    let r = &run.report;
    assert_eq!(run.code, Some(0), "{r}\n{}", run.proc.stderr());
    assert_eq!(r["mode"], "mixed");
    assert_eq!(r["status0"], 0, "{r}");
    // Three of every ten requests retry an earlier key: fewer calls than requests.
    let calls = r["calls"].as_i64().unwrap();
    assert!(0 < calls && calls < 60, "{r}");
    assert!(r["effects"].as_i64().unwrap() <= calls, "{r}");
    assert!(checks(r).1.is_empty(), "{r}");
}

/// `--mode http-tool`: every call an http tool against the in-process slow
/// downstream; one effect per call, the downstream's concurrency bounded by
/// the workers, and completed calls/s reported beside workers / latency.
#[test]
fn http_tool_run_reports_its_rate_beside_the_ideal() {
    let run = run_bench(&[
        "--mode",
        "http-tool",
        "--n",
        "40",
        "--concurrency",
        "4",
        "--workers",
        "4",
        "--downstream-latency-ms",
        "20",
    ]);
    let r = &run.report;
    assert_eq!(run.code, Some(0), "{r}\n{}", run.proc.stderr());
    assert_eq!(
        (
            r["mode"].as_str(),
            r["calls"].as_i64(),
            r["effects"].as_i64()
        ),
        (Some("http-tool"), Some(40), Some(40)),
        "{r}"
    );
    let tool = &r["http_tool"];
    assert_eq!(
        (tool["workers"].as_i64(), tool["ideal_per_s"].as_f64()),
        (Some(4), Some(200.0)),
        "{r}"
    );
    assert_eq!(tool["downstream_requests"], 40, "{r}");
    let most = tool["downstream_max_in_flight"].as_i64().unwrap();
    assert!((1..=4).contains(&most), "{r}");
    let ratio = tool["ratio_to_ideal"].as_f64().unwrap();
    assert!(ratio > 0.0 && ratio <= 1.05, "{r}");
    assert_eq!(r["no_http"], Value::Null, "{r}");
    assert!(checks(r).1.is_empty(), "{r}");
}

/// `--base` loads a server started separately, one connection per request,
/// checks the invariants in SQL on its file, and reads its peak RSS.
#[test]
fn base_mode_loads_a_running_server_and_checks_its_database() {
    let db = TempDb::new("bench-base");
    let server = Server::start(&db, &[]);
    let pid = server.proc.child.id().to_string();
    let run = run_bench(&[
        "--base",
        &server.base,
        "--db",
        db.path_str(),
        "--server-pid",
        &pid,
        "--n",
        "30",
        "--concurrency",
        "3",
        "--new-connection",
    ]);
    let r = &run.report;
    assert_eq!(run.code, Some(0), "{r}\n{}", run.proc.stderr());
    assert_eq!(r["server"], "base");
    assert_eq!(r["keep_alive"], false);
    assert_eq!(r["calls"], 30, "{r}");
    assert!(r["peak_rss_kib"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(db.calls(), 30);
    assert_eq!(db.effects(), 30);
    // The run without HTTP used a database of its own, beside the server's.
    assert_no_http_run_accepted_every_call(r, 30);
    let (held, failed) = checks(r);
    assert!(failed.is_empty(), "{failed:?}");
    assert!(
        held.iter()
            .any(|h| h.starts_with("one call per Idempotency-Key")),
        "{held:?}"
    );
}

/// A database that breaks an invariant fails the run with exit 1 and names the
/// check. (The service cannot produce such a file — its unique constraints
/// forbid it — so the test points `--db` at one a server wrote and the test
/// then forged: one call copied under its own key, without the unique index.)
#[test]
fn a_broken_invariant_fails_the_run() {
    let db = TempDb::new("bench-served");
    let server = Server::start(&db, &[]);
    let forged = TempDb::new("bench-forged");
    let mut writer = Server::start(&forged, &[]);
    let (status, call) = writer.post("twice", &json!({"tool": "sleep", "args": {"seconds": 0}}));
    assert_eq!(status, 202, "{call}");
    writer.wait_terminal(call["call_id"].as_str().unwrap());
    writer.kill();
    crate::support::open_db(&forged.path)
        .execute_batch(
            // legacy_alter_table: the count triggers on `effects` name `calls`.
            "PRAGMA legacy_alter_table=ON;
             CREATE TABLE calls_copy AS SELECT * FROM calls;
             DROP TABLE calls;
             ALTER TABLE calls_copy RENAME TO calls;
             INSERT INTO calls SELECT * FROM calls WHERE idem_key = 'twice';
             UPDATE calls SET call_id = 'c_forged', effect_id = 'eff_forged'
              WHERE rowid = (SELECT max(rowid) FROM calls);",
        )
        .unwrap();
    let run = run_bench(&[
        "--base",
        &server.base,
        "--db",
        forged.path_str(),
        "--n",
        "10",
        "--concurrency",
        "2",
    ]);
    assert_eq!(run.code, Some(1), "{}\n{}", run.report, run.proc.stderr());
    assert_eq!(run.report["ok"], false);
    let (_, failed) = checks(&run.report);
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(
        failed[0].starts_with("one call per Idempotency-Key")
            && failed[0].ends_with(": 1 × duplicate_key"),
        "{failed:?}"
    );
    run.proc.wait_for_stderr("invariant check FAILED");
}

#[test]
fn a_bad_flag_exits_2_with_one_line_pointing_to_help() {
    let out = std::process::Command::new(BENCH_BIN)
        .args(["--mode", "sideways"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr,
        "bench: unknown mode \"sideways\" (see 'bench --help')\n"
    );
}

/// A `--console` run's one JSON line (the line holding `marker`), once the
/// bench has exited 0.
fn console_report(args: &[&str], marker: &str) -> Value {
    let mut args = args.to_vec();
    args.push("--json");
    let (mut proc, line) = Proc::start("bench", BENCH_BIN, &args, marker);
    assert!(
        proc.wait_exit(DEADLINE),
        "the bench did not exit after its report"
    );
    let code = proc.child.try_wait().unwrap().and_then(|s| s.code());
    assert_eq!(code, Some(0), "stderr:\n{}", proc.stderr());
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON {line:?}: {e}"))
}

/// `--console list`, small: every query of every scope answers `200`, and
/// each filter finds what the mix holds for it (a whole page, or the one
/// call of a key or an effect id).
#[test]
fn console_list_times_every_filter_and_each_finds_its_calls() {
    let report = console_report(
        &["--console", "list", "--rows", "20000", "--samples", "3"],
        "\"queries\"",
    );
    assert_eq!(
        (report["backend"].as_str(), report["calls"].as_u64()),
        (Some("sqlite"), Some(20000))
    );
    let queries = report["queries"].as_array().unwrap();
    assert_eq!(queries.len(), 40, "20 queries in two scopes: {report}");
    for q in queries {
        assert_eq!(q["failed"], 0, "{q}");
        let (p50, p99) = (q["p50_ms"].as_f64().unwrap(), q["p99_ms"].as_f64().unwrap());
        assert!(0.0 < p50 && p50 <= p99, "{q}");
        let found = q["calls_per_page"].as_f64().unwrap();
        match q["query"].as_str().unwrap() {
            "key" | "effect_id" => assert_eq!(found, 1.0, "{q}"),
            "newest page"
            | "status=failed"
            | "key_prefix (every key)"
            | "error_code"
            | "status+error_code"
            | "error_code + total" => {
                assert_eq!(found, 50.0, "{q}")
            }
            _ => {}
        }
    }
}

/// `--console bulk`, short: the load ran beside a bulk cancel of every
/// waiting call, which finished and cancelled each of them.
#[test]
fn console_bulk_runs_the_load_beside_a_bulk_cancel() {
    let report = console_report(
        &[
            "--console",
            "bulk",
            "--rows",
            "300",
            "--rounds",
            "1",
            "--duration",
            "0.5",
            "--concurrency",
            "2",
        ],
        "\"comparison\"",
    );
    assert_eq!(report["waiting_calls"], 300, "{report}");
    for series in ["without_job_per_s", "with_job_per_s", "ratio", "job_s"] {
        let values = report[series].as_array().unwrap();
        assert_eq!(values.len(), 1, "{report}");
        assert!(values[0].as_f64().unwrap() > 0.0, "{report}");
    }
}

/// `--console poll`, short: both variants ran every round, the console
/// polled while the load ran, and the ratios are reported.
#[test]
fn console_poll_runs_the_load_with_and_without_a_console() {
    let report = console_report(
        &[
            "--console",
            "poll",
            "--duration",
            "0.3",
            "--concurrency",
            "2",
        ],
        "\"comparison\"",
    );
    let variants = report["variants"].as_array().unwrap();
    assert_eq!(variants.len(), 2, "{report}");
    for v in variants {
        assert_eq!(v["accepted_per_s"].as_array().unwrap().len(), 3, "{v}");
        assert!(v["accepted_per_s"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r.as_f64().unwrap() > 0.0));
    }
    let polls = variants[1]["polls"].as_array().unwrap();
    assert!(polls.iter().all(|p| p.as_u64().unwrap() >= 2), "{report}");
    assert_eq!(variants[0]["polls"], json!([0, 0, 0]));
}

/// `--server-bin` starts the given server binary on a database of its own
/// and loads it: every key became a call there, and the server's CPU is read
/// from its process (`/proc`), whose clock ticks a second of load moves.
#[test]
fn server_bin_loads_its_own_process_and_reads_its_cpu() {
    let run = run_bench(&[
        "--server-bin",
        crate::support::SERVER_BIN,
        "--duration",
        "1",
        "--concurrency",
        "2",
        "--access-log",
        "off",
    ]);
    let r = &run.report;
    assert_eq!(run.code, Some(0), "{r}\n{}", run.proc.stderr());
    assert_eq!(r["server"], "server-bin", "{r}");
    assert_eq!(r["calls"], r["http"]["202"], "{r}");
    assert!(checks(r).1.is_empty(), "{r}");
    assert_cpu_was_read(r, "new key");
    // Another build's server is not set beside this build's handler.
    assert_eq!(r["no_http"], Value::Null, "{r}");
}

/// Run `bench --check` small with `baseline`, returning its exit code and
/// its `check` object.
fn check_against(baseline: &std::path::Path, extra: &[&str]) -> (Option<i32>, Value, String) {
    let mut args = vec![
        "--check",
        "--baseline",
        baseline.to_str().unwrap(),
        "--duration",
        "0.3",
        "--rounds",
        "1",
        "--concurrency",
        "2",
    ];
    args.extend_from_slice(extra);
    let out = std::process::Command::new(BENCH_BIN)
        .args(&args)
        .arg("--json")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or(Value::Null);
    (out.status.code(), report, stderr)
}

/// `--write-baseline` records the three figures; `--check` then passes
/// against a baseline whose new keys cost five times as much, and fails with
/// exit 1 against one where they cost far less, naming the figure.
#[test]
fn check_compares_the_cpu_per_call_with_the_baseline_file() {
    let dir = idempotent_tool::temp::TempDir::new("bench-check").unwrap();
    let baseline = dir.join("baseline.json");
    let (code, _, stderr) = check_against(&baseline, &["--write-baseline"]);
    assert_eq!(code, Some(0), "{stderr}");
    let mut file: Value = serde_json::from_slice(&std::fs::read(&baseline).unwrap()).unwrap();
    for field in [
        "us_per_new_key",
        "us_per_same_key",
        "us_per_healthz",
        "new_key_per_healthz",
        "same_key_per_healthz",
    ] {
        assert!(file[field].as_f64().unwrap() > 0.0, "{file}");
    }
    assert_eq!(file["rounds"], 1, "{file}");
    let mut scale = |field: &str, by: f64| {
        let was = file[field].as_f64().unwrap();
        file[field] = json!(was * by);
        file.clone()
    };

    // Both calls five times as dear in the baseline, on another machine
    // (so `/healthz` itself is not compared): well inside the tolerance,
    // whatever this short run's noise (one 0.3 s round of a debug build
    // on a shared 2-core box: its ratios can move by half between runs).
    scale("new_key_per_healthz", 5.0);
    scale("same_key_per_healthz", 5.0);
    let mut file = scale("us_per_healthz", 1.0);
    file["machine"] = json!("another machine");
    std::fs::write(&baseline, file.to_string()).unwrap();
    let (code, report, stderr) = check_against(&baseline, &[]);
    let verdicts = &report["check"]["verdicts"];
    assert_eq!(code, Some(0), "{report}\n{stderr}");
    assert_eq!(verdicts[0]["what"], "new key per /healthz", "{report}");
    assert_eq!(verdicts.as_array().unwrap().len(), 2, "{report}");
    assert!(
        verdicts.as_array().unwrap().iter().all(|v| v["ok"] == true),
        "{report}"
    );

    // New keys a two-hundredth of what they were measured at: this build
    // fails, naming them.
    let was = file["new_key_per_healthz"].as_f64().unwrap();
    file["new_key_per_healthz"] = json!(was / 1000.0);
    std::fs::write(&baseline, file.to_string()).unwrap();
    let (code, report, stderr) = check_against(&baseline, &[]);
    assert_eq!(code, Some(1), "{report}\n{stderr}");
    assert_eq!(report["check"]["verdicts"][0]["ok"], false, "{report}");
    assert_eq!(report["check"]["verdicts"][1]["ok"], true, "{report}");
    assert_eq!(report["check"]["ok"], false, "{report}");
    assert!(stderr.contains("more than 10% worse"), "{stderr}");
}
