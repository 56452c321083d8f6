//! The `client` binary: call one tool with the seed's retry policy and print
//! the evidence, one JSON line per attempt, then the final call (section 12.11.3).
//!
//! It owns only argument parsing and printing; the retry and poll logic lives in
//! `idempotent_tool::client` so the bench and the tests run the same code.
//! Exit status: 0 only when the call ended `succeeded`, 1 for any other ending
//! (failed, still pending, rejected, retries exhausted), 2 for bad usage.
//!
//! `--get PATH` is a tiny curl substitute for scripts: one GET, body on stdout.
//! `--mcp` is an agent's MCP client: the call as `tools/call` on `/mcp`, the
//! key in `_meta`, re-sent unchanged when an answer is lost (as agent
//! frameworks retry a tool on an ambiguous error).

#![forbid(unsafe_code)]

use idempotent_tool::client::{
    bearer, call_tool_with, request_once, with_authorization, CallOptions,
};
use idempotent_tool::flag::{FlagError, Flags};
use serde_json::{json, Value};
use std::fmt;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const USAGE: &str = "\
usage: client --base URL --key K --tool T [--args JSON | --amount N]
              [--timeout SECONDS] [--retries N] [--wait SECONDS]
              [--poll] [--poll-timeout SECONDS] [--client-id ID] [--new-key-on-retry]
       client --base URL --mcp --tool T [--key K] [--args JSON | --amount N]
              [--timeout SECONDS] [--retries N] [--new-key-on-retry]
       client --base URL --get PATH [--timeout SECONDS]
  every form also takes --token TOKEN (default: $IDEMPOTENT_TOOL_TOKEN)

  --timeout SECONDS    per-request socket timeout, fractional (default 1.0)
  --retries N          attempts after the first (default 3); same key every time
  --wait SECONDS       ask the server to hold the POST until the call is terminal
  --poll               poll the call until succeeded/failed (deadline --poll-timeout, default 10)
  --new-key-on-retry   DELIBERATE MISTAKE: attempt i uses key K-i (reproduces duplicate effects)
  --mcp                send the call as an MCP tools/call to BASE/mcp (revision 2025-11-25,
                       the key in _meta), re-sent as it was when no answer came back
  --token TOKEN        send Authorization: Bearer TOKEN (a server with --auth-file needs
                       one); prefer the IDEMPOTENT_TOOL_TOKEN variable, which other
                       users cannot read in the process list
  --get PATH           print the body of one GET (e.g. /stats) and exit";

/// What the command line asked for.
enum Command {
    Call(CallOptions),
    Mcp(CallOptions),
    Get {
        base: String,
        path: String,
        timeout: Option<Duration>,
        token: Option<String>,
    },
}

/// A command line we cannot run; printed with the usage text.
#[derive(Debug)]
enum UsageError {
    /// Unknown, missing, without its value, or a value it does not take
    /// (worded as every binary words it).
    Flag(FlagError),
    /// `--args` is not JSON at all.
    ArgsNotJson(serde_json::Error),
}

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UsageError::Flag(e) => e.fmt(f),
            UsageError::ArgsNotJson(e) => write!(f, "--args is not JSON: {e}"),
        }
    }
}

impl std::error::Error for UsageError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            UsageError::Flag(e) => Some(e),
            UsageError::ArgsNotJson(e) => Some(e),
        }
    }
}

impl From<FlagError> for UsageError {
    fn from(e: FlagError) -> UsageError {
        UsageError::Flag(e)
    }
}

/// A value `flag` does not take: what it must be.
fn bad_value(flag: &str, value: &str, expected: &'static str) -> UsageError {
    UsageError::Flag(FlagError::BadValue {
        flag: flag.to_string(),
        value: value.to_string(),
        expected,
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        idempotent_tool::outln!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    match parse_args(&args) {
        Ok(Command::Call(opts)) => run_call(&opts),
        Ok(Command::Mcp(opts)) => run_mcp(&opts),
        Ok(Command::Get {
            base,
            path,
            timeout,
            token,
        }) => run_get(&base, &path, timeout, token.as_deref()),
        Err(error) => {
            idempotent_tool::cli::console::usage_error("client", &error);
            ExitCode::from(2)
        }
    }
}

/// Call the tool, printing each attempt as it happens, then the final call.
fn run_call(opts: &CallOptions) -> ExitCode {
    let outcome = call_tool_with(opts, &mut |attempt| {
        idempotent_tool::outln!("{}", attempt.to_json())
    });
    idempotent_tool::outln!("{}", outcome.final_json(opts));
    if outcome.succeeded() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The MCP `_meta` key this service reads an idempotency key from.
const MCP_META_KEY: &str = "dev.idempotent-tool/idempotency-key";

/// `tools/call` on `/mcp`, re-sent on a lost answer; one JSON line per
/// attempt, then the answer's `structuredContent` (or its error). Exit 0 only
/// when the call succeeded.
fn run_mcp(opts: &CallOptions) -> ExitCode {
    for attempt in 0..=opts.retries {
        let key = if opts.new_key_on_retry {
            format!("{}-{attempt}", opts.key)
        } else {
            opts.key.clone()
        };
        let body = json!({"jsonrpc": "2.0", "id": attempt + 1, "method": "tools/call",
            "params": {"name": opts.tool, "arguments": opts.args, "_meta": {MCP_META_KEY: key}}});
        let authorization = bearer(opts.token.as_deref());
        let headers = with_authorization(
            &[
                ("Content-Type", "application/json"),
                ("Accept", "application/json, text/event-stream"),
                ("MCP-Protocol-Version", "2025-11-25"),
            ],
            &authorization,
        );
        let sent = request_once(
            &opts.base,
            "POST",
            "/mcp",
            &headers,
            Some(body.to_string().as_bytes()),
            opts.timeout,
        );
        let answer = match sent {
            Ok(r) if r.status == 200 => serde_json::from_slice::<Value>(&r.body).ok(),
            Ok(r) => {
                idempotent_tool::outln!(
                    "{}",
                    json!({"attempt": attempt, "key": key, "http_status": r.status})
                );
                None
            }
            Err(error) => {
                idempotent_tool::outln!(
                    "{}",
                    json!({"attempt": attempt, "key": key, "error": error.to_string()})
                );
                None
            }
        };
        let Some(answer) = answer else { continue };
        idempotent_tool::outln!(
            "{}",
            json!({"attempt": attempt, "key": key, "http_status": 200})
        );
        let outcome = answer["result"]
            .get("structuredContent")
            .cloned()
            .unwrap_or_else(|| answer.get("error").cloned().unwrap_or(answer.clone()));
        idempotent_tool::outln!("{outcome}");
        return if outcome["status"] == "succeeded" {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    idempotent_tool::outln!("{}", json!({"error": {"code": "retry_exhausted"}}));
    ExitCode::FAILURE
}

/// One GET, body to stdout; exit 0 on any 2xx.
fn run_get(base: &str, path: &str, timeout: Option<Duration>, token: Option<&str>) -> ExitCode {
    let authorization = bearer(token);
    let headers = with_authorization(&[], &authorization);
    match request_once(base, "GET", path, &headers, None, timeout) {
        Ok(response) => {
            idempotent_tool::outln!("{}", String::from_utf8_lossy(&response.body).trim_end());
            if (200..300).contains(&response.status) {
                ExitCode::SUCCESS
            } else {
                idempotent_tool::errln!("client: GET {path} answered {}", response.status);
                ExitCode::FAILURE
            }
        }
        Err(error) => {
            idempotent_tool::errln!("client: GET {path} failed: {error}");
            ExitCode::FAILURE
        }
    }
}

fn parse_args(args: &[String]) -> Result<Command, UsageError> {
    let mut base = String::from("http://127.0.0.1:8081");
    let mut key = None;
    let mut tool = None;
    let mut tool_args: Option<Value> = None;
    let mut get_path = None;
    let mut mcp = false;
    let mut opts = CallOptions::new("", "", "", json!({}));
    let mut flags = Flags::new(args.iter().cloned());
    while let Some(flag) = flags.next_flag()? {
        let flag = flag.as_str();
        let mut value = || flags.value().map_err(UsageError::Flag);
        match flag {
            "--base" => base = value()?,
            "--key" => key = Some(value()?),
            "--tool" => tool = Some(value()?),
            "--args" => tool_args = Some(parse_json_object(&value()?)?),
            "--amount" => {
                let amount: i64 = parse_number(flag, &value()?)?;
                tool_args = Some(json!({ "amount": amount }));
            }
            "--timeout" => opts.timeout = Some(parse_seconds(flag, &value()?)?),
            "--retries" => opts.retries = parse_number(flag, &value()?)?,
            "--wait" => opts.wait = Some(parse_number(flag, &value()?)?),
            "--poll" => opts.poll = true,
            "--poll-timeout" => opts.poll_timeout = parse_seconds(flag, &value()?)?,
            "--client-id" => opts.client_id = Some(value()?),
            "--new-key-on-retry" => opts.new_key_on_retry = true,
            "--get" => get_path = Some(value()?),
            "--mcp" => mcp = true,
            "--token" => opts.token = Some(value()?),
            other => return Err(FlagError::Unknown(other.to_string()).into()),
        }
    }
    if opts.token.is_none() {
        opts.token = std::env::var(TOKEN_VARIABLE).ok().filter(|t| !t.is_empty());
    }
    if let Some(token) = &opts.token {
        check_token(token)?;
    }
    if let Some(path) = get_path {
        return Ok(Command::Get {
            base,
            path,
            timeout: opts.timeout,
            token: opts.token,
        });
    }
    opts.base = base;
    opts.tool = tool.ok_or(FlagError::Missing("--tool NAME"))?;
    opts.key = key.unwrap_or_else(generated_key);
    opts.args = tool_args.unwrap_or_else(|| json!({}));
    Ok(if mcp {
        Command::Mcp(opts)
    } else {
        Command::Call(opts)
    })
}

/// A key for a run without `--key`: unique per process and moment. It is made
/// once, before the first attempt, so every retry still carries it.
fn generated_key() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("cli-{}-{nanos}", std::process::id())
}

/// Where a token comes from when `--token` is not given.
const TOKEN_VARIABLE: &str = "IDEMPOTENT_TOOL_TOKEN";

/// A token goes into a header line: visible ASCII only, so that it can
/// neither break the request nor add a header. It is never echoed.
fn check_token(token: &str) -> Result<(), UsageError> {
    if token.bytes().all(|b| b.is_ascii_graphic()) {
        Ok(())
    } else {
        Err(UsageError::Flag(FlagError::BadValue {
            flag: "--token".into(),
            value: "(not shown)".into(),
            expected: "visible ASCII characters only",
        }))
    }
}

fn parse_json_object(text: &str) -> Result<Value, UsageError> {
    match serde_json::from_str::<Value>(text) {
        Ok(value @ Value::Object(_)) => Ok(value),
        Ok(_) => Err(bad_value("--args", text, "a JSON object")),
        Err(error) => Err(UsageError::ArgsNotJson(error)),
    }
}

fn parse_number<T: std::str::FromStr>(flag: &str, text: &str) -> Result<T, UsageError> {
    text.parse()
        .map_err(|_| bad_value(flag, text, "a whole number"))
}

fn parse_seconds(flag: &str, text: &str) -> Result<Duration, UsageError> {
    match text.parse::<f64>() {
        Ok(seconds) if seconds.is_finite() && seconds > 0.0 => Ok(Duration::from_secs_f64(seconds)),
        _ => Err(bad_value(flag, text, "a number of seconds above 0")),
    }
}
