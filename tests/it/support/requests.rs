//! The HTTP helpers every test speaks to a service with, whether it runs as
//! the real binary (`Server`) or in this process (`in_process::Local`): one
//! request at a time with a generous deadline, failures showing what the
//! service was doing.

use super::exposition::{self, Exposition};
use super::DEADLINE;
use idempotent_tool::client::{authority, encode_path_segment, request_once, HttpResponse};
use serde_json::Value;
use std::time::Instant;

/// Requests to a running service at `base()`.
pub trait Http {
    /// `http://127.0.0.1:PORT`
    fn base(&self) -> &str;

    /// What to show when a request fails (the server's stderr).
    fn context(&self) -> String;

    fn addr(&self) -> &str {
        authority(self.base())
    }

    /// One request; returns the status and the JSON body (`Null` if not JSON).
    fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> (u16, Value) {
        let resp = request_once(
            self.base(),
            method,
            path,
            headers,
            body.map(str::as_bytes),
            Some(DEADLINE),
        )
        .unwrap_or_else(|e| panic!("{method} {path}: {e}; stderr:\n{}", self.context()));
        (resp.status, resp.json())
    }

    /// One request, the whole response (status, headers, body).
    fn call(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> HttpResponse {
        request_once(
            self.base(),
            method,
            path,
            headers,
            body.map(str::as_bytes),
            Some(DEADLINE),
        )
        .unwrap_or_else(|e| panic!("{method} {path}: {e}; stderr:\n{}", self.context()))
    }

    fn post(&self, key: &str, body: &Value) -> (u16, Value) {
        self.post_path("/v1/tool-calls", key, body)
    }

    fn post_path(&self, path: &str, key: &str, body: &Value) -> (u16, Value) {
        self.request(
            "POST",
            path,
            &[("Idempotency-Key", key)],
            Some(&body.to_string()),
        )
    }

    /// A POST whose answer may be lost because the service exits at once (a
    /// chaos crash hook: a worker may run the call before its `202` is
    /// written). `None` when the connection closed first; the call is
    /// committed either way and can be found by its key.
    fn post_maybe_lost(&self, key: &str, body: &Value) -> Option<(u16, Value)> {
        request_once(
            self.base(),
            "POST",
            "/v1/tool-calls",
            &[("Idempotency-Key", key)],
            Some(body.to_string().as_bytes()),
            Some(DEADLINE),
        )
        .ok()
        .map(|resp| (resp.status, resp.json()))
    }

    fn get(&self, path: &str) -> (u16, Value) {
        self.request("GET", path, &[], None)
    }

    fn by_key(&self, key: &str) -> (u16, Value) {
        self.get(&format!(
            "/v1/tool-calls/by-key/{}",
            encode_path_segment(key)
        ))
    }

    /// Poll the call (long-polling `?wait=1`) until it is terminal, with a deadline.
    fn wait_terminal(&self, call_id: &str) -> Value {
        let start = Instant::now();
        loop {
            let (status, call) = self.get(&format!("/v1/tool-calls/{call_id}?wait=1"));
            assert!(status == 200 || status == 202, "{status} {call}");
            if matches!(
                call["status"].as_str(),
                Some("succeeded" | "failed" | "cancelled" | "denied")
            ) {
                return call;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "call {call_id} never finished: {call}\nstderr:\n{}",
                self.context()
            );
        }
    }

    fn stats(&self) -> Value {
        let (status, stats) = self.get("/stats");
        assert_eq!(status, 200, "{stats}");
        stats
    }

    /// `GET /metrics`, parsed strictly (a malformed scrape fails the test).
    fn scrape(&self) -> Exposition {
        let response = self.call("GET", "/metrics", &[], None);
        let text = String::from_utf8(response.body).expect("a UTF-8 scrape");
        exposition::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
    }

    /// The value of an unlabelled series in `/metrics` now.
    fn counter(&self, name: &str) -> f64 {
        self.scrape()
            .value(name, &[])
            .unwrap_or_else(|| panic!("no {name} in /metrics"))
    }
}
