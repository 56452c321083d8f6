//! The console's API against the real binary: `GET /v1/tool-calls` (each
//! filter, newest first, pages through `next`, every `400`), tenant
//! isolation through filters and cursors, an admin's `tenant=` and
//! `tenant=*`, pages that stay put while calls arrive, `GET /v1/overview`
//! agreeing with `/stats`, and `GET /v1/nodes` — on SQLite, and on
//! PostgreSQL with two nodes.

use crate::support::{
    address_after, charge, eventually, AuthFile, Http, Proc, Server, TempDb, SERVER_BIN,
};
use idempotent_tool::client::encode_path_segment;
use idempotent_tool::temp::postgres::PgServer;
use idempotent_tool::temp::TempDir;
use serde_json::{json, Value};

const ACME: &str = "acme-token-41c2";
const BETA: &str = "beta-token-9d07";
const OPS: &str = "ops-token-e55a";

fn tenants() -> AuthFile {
    AuthFile::new(&[
        ("acme", ACME, false),
        ("beta", BETA, false),
        ("ops", OPS, true),
    ])
}

/// Requests as one tenant (a bearer token), or as nobody.
struct As<'a> {
    server: &'a Server,
    token: Option<&'a str>,
}

impl<'a> As<'a> {
    /// Requests to `server` with `token` (`None`: no Authorization header).
    fn new(server: &'a Server, token: Option<&'a str>) -> As<'a> {
        As { server, token }
    }

    fn get(&self, path: &str) -> (u16, Value) {
        let authorization = self.token.map(|t| format!("Bearer {t}"));
        let headers: Vec<(&str, &str)> = authorization
            .iter()
            .map(|a| ("Authorization", a.as_str()))
            .collect();
        self.server.request("GET", path, &headers, None)
    }

    /// A call, waited for until it has settled; its JSON.
    fn settled(&self, key: &str, body: &Value) -> Value {
        let authorization = format!("Bearer {}", self.token.unwrap_or_default());
        let mut headers = vec![("Idempotency-Key", key)];
        if self.token.is_some() {
            headers.push(("Authorization", &authorization));
        }
        let text = body.to_string();
        let path = "/v1/tool-calls?wait=30";
        let (status, call) = self.server.request("POST", path, &headers, Some(&text));
        assert!(status == 200 || status == 202, "{status} {call}");
        let id = call["call_id"].as_str().unwrap().to_string();
        let (status, call) = self.get(&format!("/v1/tool-calls/{id}?wait=30"));
        assert_eq!(status, 200, "{call}");
        call
    }

    /// `GET /v1/tool-calls?<query>`, which must answer 200: its calls' ids
    /// and its `next`.
    fn list(&self, query: &str) -> (Vec<String>, Option<String>) {
        let (status, page) = self.get(&format!("/v1/tool-calls?{query}"));
        assert_eq!(status, 200, "{query}: {page}");
        let ids = page["calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["call_id"].as_str().unwrap().to_string())
            .collect();
        (ids, page["next"].as_str().map(String::from))
    }

    /// Every page of `query`, `limit` at a time, following `next`.
    fn all_pages(&self, query: &str, limit: usize) -> Vec<String> {
        let mut ids = Vec::new();
        let mut next: Option<String> = None;
        loop {
            let cursor = next
                .map(|n| format!("&next={}", encode_path_segment(&n)))
                .unwrap_or_default();
            let (page, more) = self.list(&format!("{query}&limit={limit}{cursor}"));
            assert!(page.len() <= limit);
            ids.extend(page);
            match more {
                Some(n) => next = Some(n),
                None => return ids,
            }
        }
    }

    /// The `400` (or other refusal) `path` answers: its status and code.
    fn refused(&self, path: &str) -> (u16, String) {
        let (status, body) = self.get(path);
        let code = body["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        (status, code)
    }
}

fn newest_first(mut ids: Vec<String>) -> Vec<String> {
    ids.sort_unstable_by(|a, b| b.cmp(a));
    ids
}

/// Each filter finds exactly its calls, newest first, without args or
/// result; pages follow `next` to the end; a tenant sees its own calls only,
/// an admin anyone's with their tenant named.
#[test]
fn the_list_finds_exactly_what_each_filter_asks() {
    let db = TempDb::new("list-filters");
    let auth = tenants();
    let server = Server::start(&db, &["--auth-file", auth.path_str()]);
    let (acme, beta, ops) = (
        As::new(&server, Some(ACME)),
        As::new(&server, Some(BETA)),
        As::new(&server, Some(OPS)),
    );
    let mut acme_calls = Vec::new();
    for n in 0..7 {
        let body = match n % 3 {
            2 => json!({"tool": "fail", "args": {"retryable": false}}),
            _ => charge(n + 1),
        };
        acme_calls.push(acme.settled(&format!("order-{n}"), &body));
    }
    let beta_call = beta.settled("order-1", &charge(1));
    let ids_of = |calls: &[&Value]| {
        newest_first(
            calls
                .iter()
                .map(|c| c["call_id"].as_str().unwrap().to_string())
                .collect(),
        )
    };
    let all_acme: Vec<&Value> = acme_calls.iter().collect();

    let (status, page) = acme.get("/v1/tool-calls");
    assert_eq!(status, 200, "{page}");
    let first = &page["calls"][0];
    assert!(
        first.get("args").is_none() && first.get("result").is_none(),
        "{first}"
    );
    assert!(
        first.get("tenant").is_none(),
        "a tenant is not told whose: {first}"
    );
    assert_eq!(first["status"], acme_calls[6]["status"]);
    assert_eq!(acme.list("").0, ids_of(&all_acme));
    assert_eq!(acme.all_pages("", 2), ids_of(&all_acme));

    let failed: Vec<&Value> = acme_calls
        .iter()
        .filter(|c| c["status"] == "failed")
        .collect();
    assert_eq!(acme.list("status=failed").0, ids_of(&failed));
    assert_eq!(
        acme.list("status=failed&status=succeeded").0,
        ids_of(&all_acme)
    );
    assert_eq!(acme.list("tool=fail").0, ids_of(&failed));
    assert_eq!(acme.list("status=cancelled").0, Vec::<String>::new());
    assert_eq!(acme.list("key=order-4").0, ids_of(&[&acme_calls[4]]));
    assert_eq!(acme.list("key_prefix=order-").0, ids_of(&all_acme));
    assert_eq!(acme.list("key_prefix=order-5").0, ids_of(&[&acme_calls[5]]));
    let effect = acme_calls[3]["effect_id"].as_str().unwrap();
    assert_eq!(
        acme.list(&format!("effect_id={effect}")).0,
        ids_of(&[&acme_calls[3]])
    );
    // Half a millisecond before calls 2 and 4 were created: [2, 4) holds 2 and 3.
    let before = |n: usize| acme_calls[n]["created_at"].as_f64().unwrap() - 0.0005;
    let (lo, hi) = (before(2), before(4));
    let rfc3339 = |t: f64| {
        let secs = t.floor() as i64;
        let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
        let date = civil_from_days(days);
        format!(
            "{}T{:02}:{:02}:{:02}.{:06}Z",
            date,
            rem / 3600,
            rem / 60 % 60,
            rem % 60,
            ((t - t.floor()) * 1e6).floor() as i64
        )
    };
    let window = acme
        .list(&format!(
            "created_after={}&created_before={}",
            rfc3339(lo),
            rfc3339(hi)
        ))
        .0;
    assert_eq!(
        window,
        ids_of(&[&acme_calls[2], &acme_calls[3]]),
        "[{lo}, {hi})"
    );

    // beta asks for acme's key, prefix and effect: only its own, or nothing.
    assert_eq!(beta.list("").0, [beta_call["call_id"].as_str().unwrap()]);
    assert_eq!(beta.list("key=order-4").0, Vec::<String>::new());
    assert_eq!(
        beta.list("key_prefix=order").0,
        [beta_call["call_id"].as_str().unwrap()]
    );
    assert_eq!(
        beta.list(&format!("effect_id={effect}")).0,
        Vec::<String>::new()
    );

    // An admin: its own tenant by default, another by name, or everyone's.
    assert_eq!(ops.list("").0, Vec::<String>::new());
    assert_eq!(ops.list("tenant=acme").0, ids_of(&all_acme));
    let (_, everyone) = ops.get("/v1/tool-calls?tenant=*&key=order-1");
    let owners: Vec<&str> = everyone["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["tenant"].as_str().unwrap())
        .collect();
    assert_eq!(owners, ["beta", "acme"]);
    assert_eq!(
        acme.refused("/v1/tool-calls?tenant=beta"),
        (403, "forbidden".into())
    );
    assert_eq!(
        acme.refused("/v1/tool-calls?tenant=*"),
        (403, "forbidden".into())
    );
}

/// The days-since-epoch date, proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> String {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// Every malformed filter is `400 bad_request` naming it; a cursor replayed
/// with other filters or by another tenant is `400`, never a page of theirs.
#[test]
fn every_bad_filter_and_foreign_cursor_is_refused() {
    let db = TempDb::new("list-400");
    let auth = tenants();
    let server = Server::start(&db, &["--auth-file", auth.path_str()]);
    let (acme, beta) = (As::new(&server, Some(ACME)), As::new(&server, Some(BETA)));
    for n in 0..3 {
        acme.settled(&format!("k-{n}"), &charge(1));
        beta.settled(&format!("k-{n}"), &charge(1));
    }
    let (_, next) = acme.list("limit=1");
    let cursor = encode_path_segment(&next.expect("a second page"));
    for (query, names) in [
        ("wait=1", "wait"),
        ("status=done", "status"),
        ("status=", "status"),
        ("tool=a&tool=b", "tool"),
        ("limit=0", "limit"),
        ("limit=501", "limit"),
        ("limit=ten", "limit"),
        ("created_after=yesterday", "created_after"),
        ("created_before=2026-12-06", "created_before"),
        ("effect_id=eff_nope", "effect_id"),
        ("business_key=[1,", "business_key"),
        ("next=c_0000000000000001.0000000000000000", "next"),
        ("next=garbage", "next"),
        (&format!("next={cursor}&status=succeeded") as &str, "next"),
        (&format!("next={cursor}&key_prefix=k") as &str, "next"),
    ] {
        let (status, body) = acme.get(&format!("/v1/tool-calls?{query}"));
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (400, Some("bad_request")),
            "{query}: {body}"
        );
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(names), "{query}: {message}");
    }
    let (status, body) = beta.get(&format!("/v1/tool-calls?limit=1&next={cursor}"));
    assert_eq!(status, 400, "acme's cursor in beta's hands: {body}");
    let (ids, _) = acme.list(&format!("limit=1&next={cursor}"));
    assert_eq!(ids.len(), 1, "the cursor continues its own list");
    let (status, _) = server.request("GET", "/v1/tool-calls", &[], None);
    assert_eq!(status, 401);
}

/// Pages go on below their cursor while new calls arrive: the pages of the
/// calls there at the start, each once, in order, whatever is created
/// between two pages.
#[test]
fn pages_stay_put_while_calls_arrive() {
    let db = TempDb::new("list-stable");
    let server = Server::start(&db, &[]);
    let anyone = As::new(&server, None);
    let mut ids: Vec<String> = (0..9)
        .map(|n| {
            anyone.settled(&format!("before-{n}"), &charge(1))["call_id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    ids = newest_first(ids);
    let mut seen = Vec::new();
    let mut query = "limit=2".to_string();
    for n in 0.. {
        let (page, next) = anyone.list(&query);
        seen.extend(page);
        anyone.settled(&format!("during-{n}"), &charge(1));
        match next {
            Some(next) => query = format!("limit=2&next={}", encode_path_segment(&next)),
            None => break,
        }
    }
    assert_eq!(seen, ids);
    // Without an auth file the one anonymous admin sees every call.
    assert_eq!(anyone.list("limit=500&tenant=*").0.len(), 9 + 5);
}

/// The overview agrees with `/stats` for the same scope; its rates, tools,
/// backlog and retention have their shape; nodes are an admin's, and show
/// this process alive with the calls it runs.
#[test]
fn the_overview_agrees_with_stats_and_nodes_show_this_process() {
    let db = TempDb::new("overview");
    let auth = tenants();
    let server = Server::start(&db, &["--auth-file", auth.path_str(), "--key-ttl", "3600"]);
    let (acme, ops) = (As::new(&server, Some(ACME)), As::new(&server, Some(OPS)));
    acme.settled("a", &charge(1));
    acme.settled("b", &json!({"tool": "fail", "args": {"retryable": false}}));
    let (status, overview) = acme.get("/v1/overview");
    assert_eq!(status, 200, "{overview}");
    let (_, stats) = acme.get("/stats");
    assert_eq!(overview["calls"], stats["calls"]);
    assert_eq!(overview["effects"], stats["effects"]);
    for (status, n) in stats["by_status"].as_object().unwrap() {
        assert_eq!(&overview["by_status"][status], n, "{overview}");
    }
    assert_eq!(overview["by_status"]["cancelled"], 0);
    assert_eq!(overview["scope"], "acme");
    assert_eq!(
        overview["nodes"],
        json!([]),
        "a tenant is not shown the nodes"
    );
    assert_eq!(
        overview["backlog"],
        json!({"pending": 0, "oldest_pending_age_s": null})
    );
    assert_eq!(overview["retention"]["key_ttl_s"], 3600.0);
    assert_eq!(overview["backend"], "sqlite");
    assert_eq!(overview["rates"]["step_s"], 10.0);
    for series in ["created", "failed"] {
        assert_eq!(
            overview["rates"][series].as_array().unwrap().len(),
            90,
            "{overview}"
        );
    }
    let charge_tool = overview["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "charge");
    assert_eq!(
        charge_tool,
        Some(
            &json!({"name": "charge", "kind": "builtin", "running": 0, "waiting": 0,
                    "max_concurrency": null, "paused": false})
        )
    );
    let (_, everyone) = ops.get("/v1/overview?tenant=*");
    let (_, all_stats) = ops.get("/stats?scope=all");
    assert_eq!(
        (&everyone["calls"], &everyone["scope"]),
        (&all_stats["calls"], &json!("*"))
    );
    assert_eq!(
        acme.refused("/v1/overview?tenant=*"),
        (403, "forbidden".into())
    );
    assert_eq!(
        acme.refused("/v1/overview?status=x"),
        (400, "bad_request".into())
    );

    assert_eq!(acme.refused("/v1/nodes"), (403, "forbidden".into()));
    let pid = server.proc.child.id() as i64;
    let (status, nodes) = ops.get("/v1/nodes");
    assert_eq!(status, 200, "{nodes}");
    let me = nodes["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["pid"] == pid)
        .cloned();
    let me = me.unwrap_or_else(|| panic!("this process is listed: {nodes}"));
    assert_eq!(
        (&me["alive"], &me["stopped_at"], &me["running"]),
        (&json!(true), &Value::Null, &json!(0))
    );
    assert!(me["instance_id"].as_str().unwrap().starts_with("i_"));
    let instance_ids = |v: &Value| -> Vec<Value> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|n| n["instance_id"].clone())
            .collect()
    };
    assert_eq!(
        instance_ids(&everyone["nodes"]),
        instance_ids(&nodes["nodes"])
    );
}

/// The real binary on a fresh PostgreSQL database, on a free port.
fn node_on(url: &str, scratch: &TempDir) -> Server {
    let args = ["--port", "0", "--db", url];
    let (proc, line) = Proc::start("server", SERVER_BIN, &args, "listening on http://");
    let base = format!("http://{}", address_after(&line, "listening on http://"));
    Server {
        proc,
        base,
        db: scratch.join("not-used.db"),
    }
}

/// On PostgreSQL, with two nodes on one database: the list and its filters,
/// the overview equal to `/stats`, and both nodes alive, each showing the
/// call it runs.
#[test]
fn on_postgres_two_nodes_list_count_and_show_each_other() {
    let pg = PgServer::shared();
    let url = pg.fresh_database("console_api");
    let scratch = TempDir::new("idem-console-pg").unwrap();
    let (one, two) = (node_on(&url, &scratch), node_on(&url, &scratch));
    let (a, b) = (As::new(&one, None), As::new(&two, None));
    let mut ids = Vec::new();
    for n in 0..4 {
        let via = if n % 2 == 0 { &a } else { &b };
        ids.push(
            via.settled(&format!("pg-{n}"), &charge(n + 1))["call_id"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    let failed = b.settled(
        "pg-fail",
        &json!({"tool": "fail", "args": {"retryable": false}}),
    );
    ids.push(failed["call_id"].as_str().unwrap().to_string());
    assert_eq!(a.list("").0, newest_first(ids.clone()));
    assert_eq!(b.all_pages("", 2), newest_first(ids.clone()));
    assert_eq!(
        a.list("status=failed").0,
        [failed["call_id"].as_str().unwrap()]
    );
    assert_eq!(a.list("key_prefix=pg-").0.len(), 5);
    assert_eq!(a.list("key=pg-2").0, [ids[2].clone()]);
    let (_, overview) = a.get("/v1/overview");
    let stats = two.stats();
    assert_eq!(
        (&overview["calls"], &overview["effects"]),
        (&stats["calls"], &stats["effects"])
    );
    assert_eq!(overview["backend"], "postgres");

    // A slow call on each node: each node shows the one it runs.
    let sleep = json!({"tool": "sleep", "args": {"seconds": 5}});
    for (via, key) in [(&one, "slow-1"), (&two, "slow-2")] {
        let (status, body) = via.request(
            "POST",
            "/v1/tool-calls",
            &[("Idempotency-Key", key)],
            Some(&sleep.to_string()),
        );
        assert!(status == 202 || status == 200, "{body}");
    }
    let pids = [one.proc.child.id() as i64, two.proc.child.id() as i64];
    eventually("both nodes alive, each running its call", || {
        let (_, nodes) = a.get("/v1/nodes");
        pids.iter().all(|pid| {
            nodes["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n["pid"] == *pid && n["alive"] == true && n["running"] == 1)
        })
    });
}
