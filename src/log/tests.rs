//! Every test reads the lines back as JSON: what a log shipper would do.

use super::*;
use serde_json::Value;
use std::thread;
use std::time::Duration;

fn lines(buffer: &Arc<Mutex<Vec<u8>>>) -> Vec<Value> {
    let bytes = buffer.lock().unwrap().clone();
    let text = String::from_utf8(bytes).expect("UTF-8");
    assert!(text.is_empty() || text.ends_with('\n'));
    text.lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

#[test]
fn an_event_is_one_json_line_with_its_fields() {
    let (logger, buffer) = Logger::buffer(Level::Info, true);
    let cause = std::io::Error::other("disk \"full\"\nreally");
    logger
        .warn("database unavailable")
        .event("write_failed")
        .call_id("c_1")
        .tool("charge")
        .attempt(2)
        .transition("running", "pending")
        .seconds("lease", Duration::from_millis(1500))
        .number("workers", 8)
        .flag("chaos", false)
        .addr("127.0.0.1:8081".parse().unwrap())
        .cause(&cause)
        .emit();
    let lines = lines(&buffer);
    assert_eq!(lines.len(), 1);
    let line = &lines[0];
    assert_eq!(line["level"], "warn");
    assert_eq!(line["msg"], "database unavailable");
    assert_eq!(line["event"], "write_failed");
    assert_eq!(line["call_id"], "c_1");
    assert_eq!(line["attempt"], 2);
    assert_eq!(
        (&line["from"], &line["to"]),
        (&"running".into(), &"pending".into())
    );
    assert_eq!(line["lease"], 1.5);
    assert_eq!(line["workers"], 8);
    assert_eq!(line["chaos"], false);
    assert_eq!(line["addr"], "127.0.0.1:8081");
    assert_eq!(line["cause"], "disk \"full\"\nreally");
    let ts = line["ts"].as_str().unwrap();
    assert_eq!(
        (ts.len(), &ts[10..11], &ts[19..20], &ts[23..]),
        (24, "T", ".", "Z")
    );
    let text = String::from_utf8(buffer.lock().unwrap().clone()).unwrap();
    assert!(text.starts_with("{\"ts\":"), "ts comes first: {text}");
}

#[test]
fn the_level_filter_drops_less_severe_events() {
    let levels = [Level::Error, Level::Warn, Level::Info, Level::Debug];
    for (i, configured) in levels.into_iter().enumerate() {
        let (logger, buffer) = Logger::buffer(configured, true);
        for level in levels {
            logger.event(level, "x").emit();
        }
        let written: Vec<Value> = lines(&buffer).iter().map(|l| l["level"].clone()).collect();
        let expected: Vec<Value> = levels[..=i].iter().map(|l| l.as_str().into()).collect();
        assert_eq!(written, expected, "{configured:?}");
    }
    assert_eq!(Level::parse("debug"), Ok(Level::Debug));
    assert!(Level::parse("verbose")
        .unwrap_err()
        .to_string()
        .contains("error, warn, info or debug"));
    assert!(Level::parse("INFO").is_err());
}

fn record<'a>(path: &'a str) -> AccessRecord<'a> {
    AccessRecord {
        request_id: "r-1",
        client: Some(std::net::IpAddr::from([192, 0, 2, 7])),
        tenant: Some("acme"),
        method: "POST",
        path,
        status: 202,
        duration: Duration::from_micros(1234),
        idem_key: Some("key \"1\""),
        call_id: None,
        replayed: false,
    }
}

#[test]
fn an_access_record_has_exactly_the_documented_fields() {
    let (logger, buffer) = Logger::buffer(Level::Error, true);
    logger.access(&record("/v1/tool-calls?wait=5&token=secret"));
    let lines = lines(&buffer);
    let line = lines[0].as_object().unwrap();
    let mut keys: Vec<&str> = line.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "call_id",
            "client",
            "duration_ms",
            "idem_key",
            "level",
            "method",
            "path",
            "replayed",
            "request_id",
            "status",
            "tenant",
            "ts"
        ]
    );
    assert_eq!(line["path"], "/v1/tool-calls", "no query");
    assert_eq!(line["duration_ms"], 1.234);
    assert_eq!(line["status"], 202);
    assert_eq!(line["idem_key"], "key \"1\"");
    assert_eq!(line["call_id"], Value::Null);
    assert_eq!(line["client"], "192.0.2.7");
    assert_eq!(line["replayed"], false);
    assert_eq!(line["level"], "info", "written even at --log-level error");
    let raw = String::from_utf8(buffer.lock().unwrap().clone()).unwrap();
    assert!(!raw.contains("secret"));
}

#[test]
fn access_log_off_writes_no_access_lines() {
    let (logger, buffer) = Logger::buffer(Level::Debug, false);
    logger.access(&record("/stats"));
    logger.info("still logged").emit();
    let lines = lines(&buffer);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["msg"], "still logged");
    assert_eq!(parse_access_log("off"), Ok(false));
    assert_eq!(parse_access_log("on"), Ok(true));
    assert!(parse_access_log("no").is_err());
}

#[test]
fn control_characters_and_unicode_survive_escaping() {
    let (logger, buffer) = Logger::buffer(Level::Info, true);
    let key = "k\u{0}\u{1f}\t\r\\ 你好 \u{7f}";
    logger.access(&AccessRecord {
        idem_key: Some(key),
        ..record("/p")
    });
    let raw = String::from_utf8(buffer.lock().unwrap().clone()).unwrap();
    assert_eq!(raw.matches('\n').count(), 1, "one line: {raw}");
    assert_eq!(lines(&buffer)[0]["idem_key"], key);
}

#[test]
fn concurrent_lines_never_interleave() {
    let (logger, buffer) = Logger::buffer(Level::Info, true);
    let long = "x".repeat(5_000);
    thread::scope(|s| {
        for t in 0..4u64 {
            let (logger, long) = (&logger, &long);
            s.spawn(move || {
                for i in 0..200 {
                    logger
                        .info("tick")
                        .number("thread", t)
                        .number("i", i)
                        .emit();
                    logger.access(&AccessRecord {
                        idem_key: Some(long),
                        ..record("/p")
                    });
                }
            });
        }
    });
    let lines = lines(&buffer);
    assert_eq!(lines.len(), 4 * 200 * 2);
}

#[test]
fn a_filtered_event_builds_nothing() {
    let (logger, buffer) = Logger::buffer(Level::Warn, true);
    let event = logger.debug("x").call_id("c");
    assert!(event.line.is_none());
    event.emit();
    assert!(buffer.lock().unwrap().is_empty());
}

#[test]
#[should_panic(expected = "field name")]
fn a_field_cannot_shadow_a_key_every_line_has() {
    let (logger, _buffer) = Logger::buffer(Level::Info, true);
    logger.info("x").number("level", 1).emit();
}

/// Inside a request's scope every event names the request, once (an explicit
/// `.request_id` does not repeat it); after the scope, none does.
#[test]
fn events_in_a_request_scope_carry_its_id() {
    let (logger, buffer) = Logger::buffer(Level::Debug, true);
    {
        let _scope = request_scope("req-7");
        logger.info("inside").emit();
        logger.warn("explicit").request_id("other").emit();
    }
    logger.info("after").emit();
    let lines = lines(&buffer);
    assert_eq!(lines[0]["request_id"], "req-7");
    assert_eq!(lines[1]["request_id"], "req-7");
    let text = String::from_utf8(buffer.lock().unwrap().clone()).unwrap();
    assert_eq!(
        text.lines().nth(1).unwrap().matches("request_id").count(),
        1
    );
    assert!(lines[2].get("request_id").is_none(), "{}", lines[2]);
}
