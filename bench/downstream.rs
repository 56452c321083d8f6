//! The downstream of `--mode http-tool`: an HTTP server in this process
//! (the service's own hand-written server) that answers every `POST` with
//! `200` after a fixed latency, and counts how many it had in flight at once.
//! It stands for a real tool's network wait, so the worker pool's rate can be
//! held against the ideal `workers / latency`.
//!
//! It deduplicates nothing (the reference downstream's SQLite file would add
//! its own disk to what is measured), and it stops with the bench's target.

use crate::error::BenchError;
use idempotent_tool::http::Response;
use idempotent_tool::server::{self, Handler, Limits, Server};
use serde_json::json;
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Requests in flight, and the most seen at once.
#[derive(Default)]
pub struct Gauge {
    now: AtomicUsize,
    max: AtomicUsize,
    requests: AtomicUsize,
}

/// A running latency downstream; stopped (every thread joined) on drop.
pub struct LatencyDownstream {
    pub url: String,
    pub gauge: Arc<Gauge>,
    _server: Server,
}

impl LatencyDownstream {
    pub fn start(latency: Duration) -> Result<LatencyDownstream, BenchError> {
        let listener = TcpListener::bind("127.0.0.1:0").map_err(BenchError::io("bind"))?;
        let gauge = Arc::new(Gauge::default());
        let counted = Arc::clone(&gauge);
        let handler: Handler = Arc::new(move |req| {
            if req.method != "POST" {
                return Response::json(404, &json!({"error": "POST only"}));
            }
            let now = counted.now.fetch_add(1, Ordering::SeqCst) + 1;
            counted.max.fetch_max(now, Ordering::SeqCst);
            counted.requests.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(latency);
            counted.now.fetch_sub(1, Ordering::SeqCst);
            Response::json(200, &json!({"ok": true}))
        });
        let server = server::start(listener, handler, Limits::default())
            .map_err(BenchError::io("start the downstream"))?;
        Ok(LatencyDownstream {
            url: format!("http://{}/effects", server.addr()),
            gauge,
            _server: server,
        })
    }
}

impl Gauge {
    pub fn max_in_flight(&self) -> usize {
        self.max.load(Ordering::SeqCst)
    }

    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::Relaxed)
    }
}
