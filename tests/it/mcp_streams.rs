//! MCP's event streams over the real binary, read off a raw socket as they
//! arrive: a `tools/call` with a `progressToken` sends its tool's progress
//! while the call runs (the tool waits on a file the test creates only
//! after it has read the notification), chunk by chunk, then the response
//! and the last chunk, and the connection goes on; a client that hangs up
//! ends the stream, not the call; `subscriptions/listen` follows a task
//! with `notifications/tasks` until it completes; a keyless call answered
//! by its content is in the audit; and on PostgreSQL another node's
//! `tasks/get` shows a running call's progress.

use crate::support::downstream::ToolsFile;
use crate::support::{eventually, Http, Server, TempDb};
use idempotent_tool::client::{authority, read_response};
use idempotent_tool::http::{ChunkedDecoder, ParseLimits};
use idempotent_tool::temp::TempDir;
use serde_json::{json, Value};
use std::io::{BufReader, Cursor, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

const KEY: &str = "dev.idempotent-tool/idempotency-key";
const TASKS: &str = "io.modelcontextprotocol/tasks";

/// A command tool `gated` that reports one step of progress, then waits
/// for `gate` to exist before it answers "opened".
fn gated_tools(gate: &Path) -> ToolsFile {
    let script = r#"cat > /dev/null
printf '{"progress": 1, "total": 2, "message": "halfway"}\n' >&"$PROGRESS_FD"
while [ ! -e "$GATE" ]; do sleep 0.05; done
printf '"opened"\n'"#;
    ToolsFile::write(&json!({"tools": {"gated": {
        "kind": "command", "argv": ["/bin/bash", "-c", script],
        "env": {"GATE": gate.to_str().unwrap()},
        "tasks": "optional", "mcp_result": "content", "keyless": "fresh",
        "max_attempts": 1, "timeout_ms": 60000
    }}}))
}

/// A request body of the stateless revision (tasks declared when `tasks`).
fn stateless(id: u64, method: &str, mut params: Value, tasks: bool) -> Value {
    params["_meta"]["io.modelcontextprotocol/protocolVersion"] = "2026-07-28".into();
    params["_meta"]["io.modelcontextprotocol/clientCapabilities"] = if tasks {
        json!({"extensions": {TASKS: {}}})
    } else {
        json!({})
    };
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// One `POST /mcp` on a raw socket, its answer read as it arrives.
struct EventStream {
    socket: TcpStream,
    /// Bytes read and not yet decoded.
    raw: Vec<u8>,
    decoder: ChunkedDecoder,
    /// De-chunked body not yet cut into events.
    body: Vec<u8>,
    status: u16,
    head: String,
}

impl EventStream {
    /// Send `message` (2026-07-28 headers, `Mcp-Name` when given) and read
    /// the response head.
    fn post(server: &Server, message: &Value, name: Option<&str>) -> EventStream {
        let body = message.to_string();
        let method = message["method"].as_str().unwrap();
        let mut request = format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
             Mcp-Method: {method}\r\nContent-Length: {}\r\n",
            authority(server.base()),
            body.len()
        );
        if let Some(name) = name {
            request.push_str(&format!("Mcp-Name: {name}\r\n"));
        }
        request.push_str("\r\n");
        request.push_str(&body);
        let mut socket = TcpStream::connect(authority(server.base())).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        socket.write_all(request.as_bytes()).unwrap();
        let mut stream = EventStream {
            socket,
            raw: Vec::new(),
            decoder: ChunkedDecoder::new(),
            body: Vec::new(),
            status: 0,
            head: String::new(),
        };
        stream.read_head();
        stream
    }

    fn read_more(&mut self) -> usize {
        let mut buf = [0u8; 4096];
        let n = self.socket.read(&mut buf).expect("the server answers");
        self.raw.extend_from_slice(&buf[..n]);
        n
    }

    fn read_head(&mut self) {
        loop {
            if let Some(end) = self.raw.windows(4).position(|w| w == b"\r\n\r\n") {
                self.head = String::from_utf8_lossy(&self.raw[..end]).into_owned();
                self.raw.drain(..end + 4);
                self.status = self.head[9..12].parse().unwrap();
                return;
            }
            assert!(self.read_more() > 0, "closed before the head");
        }
    }

    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }

    /// The next event's message, decoding chunks as they come; `None` once
    /// the body has ended (its last chunk read).
    fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(end) = self.body.windows(2).position(|w| w == b"\n\n") {
                let event: Vec<u8> = self.body.drain(..end + 2).collect();
                let text = String::from_utf8(event).unwrap();
                let data = text
                    .lines()
                    .find_map(|l| l.strip_prefix("data: "))
                    .unwrap_or_else(|| panic!("an event without data: {text:?}"));
                return Some(serde_json::from_str(data).unwrap());
            }
            if self.decoder.is_done() {
                assert!(self.body.is_empty(), "a partial event at the end");
                return None;
            }
            let used = self
                .decoder
                .decode(&self.raw, &mut self.body, &ParseLimits::default())
                .expect("well-formed chunks");
            self.raw.drain(..used);
            if used == 0 && !self.decoder.is_done() {
                assert!(self.read_more() > 0, "closed before the last chunk");
            }
        }
    }

    /// Messages until the response (the one with an `id`), which is last.
    fn until_response(&mut self) -> (Vec<Value>, Value) {
        let mut notes = Vec::new();
        loop {
            let message = self.next().expect("the response before the end");
            if message.get("id").is_some() {
                return (notes, message);
            }
            notes.push(message);
        }
    }

    /// One more request on the same connection, answered whole.
    fn then_ping(mut self, server: &Server) -> Value {
        let ping = json!({"jsonrpc": "2.0", "id": 99, "method": "ping", "params": {}}).to_string();
        let request = format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             MCP-Protocol-Version: 2025-11-25\r\nContent-Length: {}\r\n\r\n{ping}",
            authority(server.base()),
            ping.len()
        );
        self.socket.write_all(request.as_bytes()).unwrap();
        let mut reader = BufReader::new(Cursor::new(self.raw).chain(self.socket));
        read_response(&mut reader).expect("a second answer").json()
    }
}

/// A progress notification reaches the client while its call runs: the
/// tool cannot finish before the test, having read it, creates the gate.
/// The stream is chunked, ends with the response and the last chunk, and
/// the connection then serves another request.
#[test]
fn progress_arrives_while_the_call_runs() {
    let scratch = TempDir::new("mcp-live-progress").unwrap();
    let gate = scratch.join("open");
    let tools = gated_tools(&gate);
    let db = TempDb::new("mcp-live-progress");
    let server = Server::start(&db, &["--tools", tools.path_str()]);
    let call = json!({"name": "gated", "arguments": {},
                      "_meta": {"progressToken": "live", KEY: "live-1"}});
    let mut stream = EventStream::post(
        &server,
        &stateless(1, "tools/call", call, false),
        Some("gated"),
    );
    assert_eq!(stream.status, 200, "{}", stream.head);
    assert_eq!(
        stream.header("transfer-encoding").as_deref(),
        Some("chunked")
    );
    assert_eq!(
        stream.header("content-type").as_deref(),
        Some("text/event-stream")
    );
    assert_eq!(stream.header("content-length"), None);

    let first = stream.next().expect("a notification");
    assert_eq!(first["method"], "notifications/progress", "{first}");
    let params = &first["params"];
    assert_eq!(
        (
            &params["progressToken"],
            &params["progress"],
            &params["total"],
            &params["message"]
        ),
        (&json!("live"), &json!(1.0), &json!(2.0), &json!("halfway"))
    );
    assert!(!gate.exists());
    let (_, running) = server.by_key("live-1");
    assert_eq!(running["status"], "running", "{running}");
    assert_eq!(running["progress"]["message"], "halfway", "{running}");

    std::fs::write(&gate, b"").unwrap();
    let (_, response) = stream.until_response();
    assert_eq!(response["id"], 1);
    assert_eq!(
        response["result"]["content"][0]["text"], "opened",
        "{response}"
    );
    assert_eq!(stream.next(), None, "the response is the last event");
    let pong = stream.then_ping(&server);
    assert_eq!(pong["id"], 99, "{pong}");
}

/// A client that hangs up mid-stream ends its stream (the connection is
/// let go) but not its call, which finishes and keeps its outcome.
#[test]
fn a_client_that_hangs_up_ends_the_stream_not_the_call() {
    let scratch = TempDir::new("mcp-hang-up").unwrap();
    let gate = scratch.join("open");
    let tools = gated_tools(&gate);
    let db = TempDb::new("mcp-hang-up");
    let server = Server::start(&db, &["--tools", tools.path_str()]);
    let call = json!({"name": "gated", "arguments": {},
                      "_meta": {"progressToken": 7, KEY: "gone-1"}});
    let mut stream = EventStream::post(
        &server,
        &stateless(1, "tools/call", call, false),
        Some("gated"),
    );
    assert_eq!(
        stream.next().expect("a notification")["params"]["progressToken"],
        7
    );
    drop(stream);
    let open_connections = || {
        let metrics = server.call("GET", "/metrics", &[], None);
        String::from_utf8_lossy(&metrics.body)
            .lines()
            .find_map(|l| l.strip_prefix("idempotent_tool_open_connections "))
            .map(str::to_string)
    };
    // Only the metrics request's own connection is left open.
    eventually("the stream's connection to be let go", || {
        open_connections().as_deref() == Some("1")
    });
    let (_, still) = server.by_key("gone-1");
    assert_eq!(still["status"], "running", "{still}");
    std::fs::write(&gate, b"").unwrap();
    let done = server.wait_terminal(still["call_id"].as_str().unwrap());
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(done["result"], "opened");
}

/// `subscriptions/listen` with a task id: the acknowledgement names the
/// tenant's task (an unknown id is left out), then `notifications/tasks`
/// with its state now and when it changes, each tagged with the
/// subscription's id, the last `completed` with its result inlined; then
/// the listen result. Asking for task ids without the tasks extension is
/// `-32021`.
#[test]
fn listen_follows_a_task_until_it_completes() {
    let scratch = TempDir::new("mcp-listen").unwrap();
    let gate = scratch.join("open");
    let tools = gated_tools(&gate);
    let db = TempDb::new("mcp-listen");
    let server = Server::start(&db, &["--tools", tools.path_str()]);
    let call = json!({"name": "gated", "arguments": {}});
    let mut created = EventStream::post(
        &server,
        &stateless(1, "tools/call", call, true),
        Some("gated"),
    );
    let task = created.body_json();
    let task_id = task["result"]["taskId"]
        .as_str()
        .expect("a task")
        .to_string();

    let listen = json!({"notifications": {"taskIds": [task_id, "c_0000000000000000"]}});
    let mut stream = EventStream::post(
        &server,
        &stateless(42, "subscriptions/listen", listen.clone(), true),
        None,
    );
    assert_eq!(
        stream.header("content-type").as_deref(),
        Some("text/event-stream")
    );
    let ack = stream.next().expect("the acknowledgement");
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(
        ack["params"]["notifications"]["taskIds"],
        json!([task_id]),
        "{ack}"
    );
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        42
    );
    let first = stream.next().expect("the task now");
    assert_eq!(first["method"], "notifications/tasks", "{first}");
    assert_eq!(first["params"]["taskId"], task_id.as_str());
    assert_eq!(first["params"]["status"], "working", "{first}");
    assert_eq!(
        first["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        42
    );

    std::fs::write(&gate, b"").unwrap();
    let (notes, result) = stream.until_response();
    let last = notes.last().unwrap_or(&first);
    assert_eq!(last["params"]["status"], "completed", "{notes:?}");
    assert_eq!(
        last["params"]["result"]["content"][0]["text"], "opened",
        "{last}"
    );
    assert!(
        notes.iter().all(|n| n["method"] == "notifications/tasks"),
        "{notes:?}"
    );
    assert_eq!(result["id"], 42);
    assert_eq!(result["result"]["resultType"], "complete", "{result}");
    assert_eq!(
        result["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        42
    );
    assert_eq!(stream.next(), None);

    let mut refused = EventStream::post(
        &server,
        &stateless(43, "subscriptions/listen", listen, false),
        None,
    );
    assert_eq!(refused.status, 400, "{}", refused.head);
    assert_eq!(refused.body_json()["error"]["code"], -32021);
}

impl EventStream {
    /// A whole `application/json` answer (by `Content-Length`).
    fn body_json(&mut self) -> Value {
        let length: usize = self
            .header("content-length")
            .expect("a whole answer")
            .parse()
            .unwrap();
        while self.raw.len() < length {
            assert!(self.read_more() > 0);
        }
        serde_json::from_slice(&self.raw[..length]).unwrap()
    }
}

/// A keyless call repeated within the content window is answered with the
/// first call, and each such answer is a `replayed_by_content` row in that
/// call's audit.
#[test]
fn a_replay_by_content_is_in_the_audit() {
    let db = TempDb::new("mcp-replay-audit");
    let fixtures = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/mcp-conformance/tools.json"
    );
    let server = Server::start(&db, &["--tools", fixtures]);
    let call = || {
        let body = stateless(
            1,
            "tools/call",
            json!({"name": "greet", "arguments": {"name": "ada"}}),
            false,
        );
        let headers = [
            ("Content-Type", "application/json"),
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "greet"),
        ];
        server
            .call("POST", "/mcp", &headers, Some(&body.to_string()))
            .json()
    };
    let first = call();
    let state = &first["result"]["_meta"]["dev.idempotent-tool/call"];
    let call_id = state["call_id"].as_str().expect("the call").to_string();
    assert_eq!(state["replayed"], false, "{first}");
    for _ in 0..2 {
        let again = call();
        let state = &again["result"]["_meta"]["dev.idempotent-tool/call"];
        assert_eq!(
            (&state["call_id"], &state["replayed"]),
            (&json!(call_id), &json!(true))
        );
        assert_eq!(state["key_source"], "content", "{again}");
    }
    let (status, audit) = server.get(&format!("/v1/tool-calls/{call_id}/audit"));
    assert_eq!(status, 200);
    let events: Vec<&str> = audit["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    let replays = events
        .iter()
        .filter(|e| **e == "replayed_by_content")
        .count();
    assert_eq!(replays, 2, "{events:?}");
    assert_eq!(events[0], "created");
}

/// On PostgreSQL, a running command's progress reported on one node is
/// shown by every node's `tasks/get` (and REST read) within a lease
/// extension: it is stored with the call, not only in the running node's
/// memory.
#[test]
fn on_postgres_another_node_shows_a_running_calls_progress() {
    let pg = idempotent_tool::temp::postgres::PgServer::shared();
    let url = pg.fresh_database("mcp_progress");
    let scratch = TempDir::new("idem-mcp-progress-pg").unwrap();
    let gate = scratch.join("open");
    let tools = gated_tools(&gate);
    // A 3 s lease is extended (with the progress) every second.
    let flags = ["--tools", tools.path_str(), "--lease-secs", "3"];
    let runner = Server::start_on_postgres(&url, &flags, &scratch);
    let other = Server::start_on_postgres(&url, &flags, &scratch);
    let call = json!({"name": "gated", "arguments": {}});
    let mut created = EventStream::post(
        &runner,
        &stateless(1, "tools/call", call, true),
        Some("gated"),
    );
    let task_id = created.body_json()["result"]["taskId"]
        .as_str()
        .expect("a task")
        .to_string();
    let get = json!({"taskId": task_id});
    // One node runs the call; both must show its progress, so the one that
    // does not run it reads it from the database.
    for node in [&runner, &other] {
        eventually("each node to show the progress", || {
            let message = stateless(2, "tasks/get", get.clone(), true);
            let task = EventStream::post(node, &message, Some(&task_id)).body_json();
            task["result"]["statusMessage"] == "halfway (1 of 2)"
        });
        let (_, rest) = node.get(&format!("/v1/tool-calls/{task_id}"));
        assert_eq!(rest["progress"]["message"], "halfway", "{rest}");
    }
    std::fs::write(&gate, b"").unwrap();
    let done = other.wait_terminal(&task_id);
    assert_eq!(done["status"], "succeeded", "{done}");
    assert!(done.get("progress").is_none(), "{done}");
}
