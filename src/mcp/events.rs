//! An MCP answer as a server-sent event stream (`text/event-stream`): the
//! JSON-RPC messages a request's work produces — notifications as they
//! happen, then the response — each written and sent as one event over the
//! server's streamed body (`http::Streamed`).
//!
//! This file owns the shape of such an answer (its headers, one message per
//! event) and nothing about what the messages say. It never blocks on its
//! own: a producer that waits does so in its own loop, asking `is_open`.

use crate::http::{sse_event, Closed, Response, Sink};
use serde_json::Value;
use std::time::Duration;

/// The messages of one streamed answer, over the server's sink.
pub struct Events<'a> {
    sink: &'a mut dyn Sink,
}

impl Events<'_> {
    /// Send one JSON-RPC message as an event, now.
    pub fn send(&mut self, message: &Value) -> Result<(), Closed> {
        self.sink.send(&sse_event(&message.to_string()))
    }

    /// Whether the client is still there and the stream's time not up.
    pub fn is_open(&mut self) -> bool {
        self.sink.is_open()
    }

    /// How long the stream may still stay open.
    pub fn remaining(&self) -> Duration {
        self.sink.remaining()
    }
}

/// A `200` event stream whose messages `produce` sends.
pub fn stream(produce: impl FnOnce(&mut Events<'_>) + Send + 'static) -> Response {
    let headers = vec![
        ("Content-Type".into(), "text/event-stream".into()),
        ("Cache-Control".into(), "no-cache".into()),
    ];
    Response::streamed(200, headers, move |sink| produce(&mut Events { sink }))
}
