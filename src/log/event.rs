//! `Event`: one JSON line of the log being built — each field method names
//! what its value is (a tenant, a call id, a cause, seconds), and there is
//! deliberately no method for arbitrary text — then written once by
//! `emit`. `log::error`, `warn`, `info` and `debug` start one.
//!
//! It never takes a token, a header value or a call's arguments: no field
//! method accepts one.

use super::*;

/// One event line being built. Each field method names what the value is;
/// there is deliberately no method for arbitrary text.
#[must_use = "an event is written only by emit()"]
pub struct Event<'a> {
    pub(super) logger: &'a Logger,
    /// `None` when the level is filtered out.
    pub(super) line: Option<String>,
    /// The line already names its request (from the thread's `RequestScope`).
    pub(super) has_request_id: bool,
}

impl Event<'_> {
    fn str_field(mut self, name: &'static str, value: &str) -> Self {
        debug_assert!(is_field_name(name), "field name {name:?}");
        if let Some(line) = &mut self.line {
            push_str_field(line, name, value);
        }
        self
    }

    fn raw_field(mut self, name: &'static str, value: impl std::fmt::Display) -> Self {
        debug_assert!(is_field_name(name), "field name {name:?}");
        if let Some(line) = &mut self.line {
            let _ = write!(line, ",\"{name}\":{value}");
        }
        self
    }

    /// A stable, machine-readable event name (`claimed`, `recover`, ...).
    pub fn event(self, name: &'static str) -> Self {
        self.str_field("event", name)
    }

    /// The request this event belongs to; a no-op inside a `RequestScope`,
    /// which has already named it.
    pub fn request_id(self, id: &str) -> Self {
        if self.has_request_id {
            return self;
        }
        self.str_field("request_id", id)
    }

    pub fn tenant(self, tenant: &str) -> Self {
        self.str_field("tenant", tenant)
    }

    pub fn call_id(self, call_id: &str) -> Self {
        self.str_field("call_id", call_id)
    }

    /// A bulk job, by its id (`b_` and hex the service drew).
    pub fn job_id(self, job_id: &str) -> Self {
        self.str_field("job_id", job_id)
    }

    pub fn effect_id(self, effect_id: &str) -> Self {
        self.str_field("effect_id", effect_id)
    }

    pub fn tool(self, tool: &str) -> Self {
        self.str_field("tool", tool)
    }

    /// Who decided: a token's configured name (`alice@acme`), never a
    /// token.
    pub fn principal(self, principal: &str) -> Self {
        self.str_field("principal", principal)
    }

    /// The lease owner, `pid:thread`.
    pub fn owner(self, owner: &str) -> Self {
        self.str_field("owner", owner)
    }

    /// A call's status change; statuses are the store's fixed names.
    pub fn transition(self, from: &'static str, to: &'static str) -> Self {
        self.str_field("from", from).str_field("to", to)
    }

    pub fn attempt(self, attempt: i64) -> Self {
        self.raw_field("attempt", attempt)
    }

    /// A count or size, under a fixed name (`calls`, `workers`, `port`...).
    pub fn number(self, name: &'static str, value: u64) -> Self {
        self.raw_field(name, value)
    }

    /// A duration in seconds (or a fraction), under a fixed name.
    pub fn seconds(self, name: &'static str, value: Duration) -> Self {
        self.raw_field(name, value.as_secs_f64())
    }

    /// A fixed text from the code (a migration's name, a signal's name), under
    /// a fixed name: `'static`, so it can never be request data.
    pub fn label(self, name: &'static str, value: &'static str) -> Self {
        self.str_field(name, value)
    }

    /// An idempotency key: the client's own label for its request, logged so a
    /// client can find its request (it is at most 255 visible ASCII bytes).
    pub fn idem_key(self, key: &str) -> Self {
        self.str_field("idem_key", key)
    }

    pub fn flag(self, name: &'static str, value: bool) -> Self {
        self.raw_field(name, value)
    }

    pub fn addr(self, addr: SocketAddr) -> Self {
        self.str_field("addr", &addr.to_string())
    }

    /// A moment, as RFC 3339 in UTC with milliseconds.
    pub fn time(self, name: &'static str, time: SystemTime) -> Self {
        self.str_field(name, &rfc3339_millis(time))
    }

    /// An environment variable's name, never its value.
    pub fn variable(self, name: &str) -> Self {
        self.str_field("variable", name)
    }

    /// The database or a config file, by path.
    pub fn file(self, name: &'static str, path: &std::path::Path) -> Self {
        self.str_field(name, &path.display().to_string())
    }

    /// What went wrong: an error value, never a string a caller assembled.
    pub fn cause(self, error: &dyn std::error::Error) -> Self {
        self.str_field("cause", &error.to_string())
    }

    pub fn emit(self) {
        if let Some(line) = self.line {
            self.logger.write_line(line);
        }
    }

    /// Write the line unless `repeats` wrote one less than its interval ago;
    /// a line written says how many it held back (`suppressed`).
    pub fn emit_or_count(self, repeats: &Repeats) {
        if let Some(suppressed) = repeats.admit() {
            self.number("suppressed", suppressed).emit();
        }
    }
}
