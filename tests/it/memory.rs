//! The memory bound: many settled calls with 60 KB args, each retried once,
//! keep the server's resident memory under a ceiling. Every retry of a settled
//! call is answered from the answer cache, which keeps rendered answers (here
//! about 61 KB each) up to `--answer-cache-mib` and evicts the oldest beyond
//! it; before it was bounded in bytes, it kept every one of them.

use crate::support::procfs::status_kib;
use crate::support::Http;
use crate::support::{Server, TempDb};
use serde_json::{json, Value};
use std::thread;

/// Calls posted, each then retried once: about 60 MB of rendered answers.
const CALLS: usize = 1000;
const CLIENTS: usize = 8;
const CACHE_MIB: u64 = 8;
/// What the server may hold besides its answer cache: its code, thread stacks
/// in use, SQLite's page caches (2 MiB per connection, a few connections busy
/// here), request and response buffers in flight, and the allocator's slack.
const ALLOWANCE_MIB: u64 = 40;

/// One body for every call (serialized once: the test's own JSON work would
/// otherwise dominate its time); only the keys differ.
fn large_call() -> String {
    let padding = "x".repeat(60 * 1024);
    json!({"tool": "send_email", "args": {"to": "a@example.com", "body": padding}}).to_string()
}

fn post(server: &Server, path: &str, key: &str, body: &str) -> (u16, Value) {
    server.request("POST", path, &[("Idempotency-Key", key)], Some(body))
}

/// Post (and settle) every client's share of the keys, then retry each once;
/// every retry must be the same settled call.
fn post_then_retry(server: &Server, client: usize, body: &str) {
    let keys: Vec<String> = (client..CALLS)
        .step_by(CLIENTS)
        .map(|n| format!("mem-{n}"))
        .collect();
    let mut ids = Vec::new();
    for key in &keys {
        let (status, call) = post(server, "/v1/tool-calls?wait=10", key, body);
        assert_eq!(status, 200, "{key}: {call}");
        ids.push(call["call_id"].as_str().unwrap().to_string());
    }
    for (key, id) in keys.iter().zip(&ids) {
        let (status, call) = post(server, "/v1/tool-calls", key, body);
        assert_eq!((status, call["call_id"].as_str()), (200, Some(id.as_str())));
    }
}

/// Many settled calls with 60 KB args, each retried once, keep the server's
/// peak resident memory under the answer cache's budget plus a fixed allowance.
#[test]
fn large_settled_answers_keep_memory_bounded() {
    let db = TempDb::new("memory");
    let cache = CACHE_MIB.to_string();
    let server = Server::start(&db, &["--answer-cache-mib", &cache, "--workers", "4"]);
    let pid = server.proc.child.id();
    let body = large_call();
    let started = std::time::Instant::now();
    thread::scope(|scope| {
        for client in 0..CLIENTS {
            let (server, body) = (&server, &body);
            scope.spawn(move || post_then_retry(server, client, body));
        }
    });
    let (rss, peak) = (status_kib(pid, "VmRSS"), status_kib(pid, "VmHWM"));
    eprintln!(
        "memory: {CALLS} calls with 60 KB args, each retried once, in {:.1?}: \
         RSS {} MiB, peak {} MiB (cache budget {CACHE_MIB} MiB)",
        started.elapsed(),
        rss / 1024,
        peak / 1024
    );
    let ceiling = (CACHE_MIB + ALLOWANCE_MIB) * 1024;
    assert!(
        peak < ceiling,
        "peak RSS {peak} KiB is over the ceiling {ceiling} KiB"
    );
}
