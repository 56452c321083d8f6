//! Wake-ups between the nodes of one PostgreSQL database, over
//! `LISTEN`/`NOTIFY`: how a node learns, without waiting for its next poll,
//! that another node committed new pending work (a call created, a lease
//! released, a retry scheduled), a completion (a `?wait` here may be for it),
//! or a running call's cancel (the node that runs it stops its tool).
//!
//! Sending is throttled and kept out of every call's transaction. `announce`
//! only sets a bit; the `pg-notify` thread sends at most one `NOTIFY` per
//! `NOTIFY_EVERY`, on a connection of its own, after the commits it reports.
//! A `NOTIFY` inside each call's transaction would take PostgreSQL's
//! notification-queue lock at every commit, serialising the commits of every
//! node; one per interval per node costs nothing measurable. The announcing
//! session runs with `synchronous_commit = off`: a lost wake-up costs only
//! latency.
//!
//! Receiving: the `pg-listen` thread holds a dedicated connection that
//! `LISTEN`s, and turns each batch of notifications from other nodes into one
//! call of the handler. After losing its connection it reconnects with
//! backoff and then calls the handler with everything set, since anything may
//! have been missed meanwhile.
//!
//! Both sessions are the store's own (`session`): every statement they send
//! must be answered within `--db-timeout-ms`, so a frozen server holds
//! neither thread past it, and a stopping node never waits for the database.
//!
//! A wake-up is a hint, never a message anyone relies on: the runner's
//! recovery pass (every `--recover-interval-ms`) and every `?wait`'s re-read
//! (every 100 ms) find the same work and the same completions without it, so
//! a lost notification, or a pooler in transaction mode that cannot carry
//! `LISTEN`, costs latency and never correctness. This module never reads or
//! writes a row and never decides anything; whoever it wakes re-reads the
//! database.

use super::super::database::PgTarget;
use super::super::error::StoreError;
use super::super::options::PgTimeouts;
use super::super::wake::{Wake, WakeHandler};
use super::connect::Connector;
use super::session::{GenericClient, Session};
use super::tls::TlsSetupError;
use crate::lock::lock;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// At most one `NOTIFY` per node per this interval: well under the ~100 ms a
/// `?wait` on another node may take to learn of a completion.
pub const NOTIFY_EVERY: Duration = Duration::from_millis(20);

/// Completed calls named in one notification; beyond it the notification
/// says only "some" (a payload stays far below PostgreSQL's 8000 bytes).
pub const MAX_CALLS_NAMED: usize = 100;

/// How long the listener blocks for notifications before it checks whether
/// it should stop or its connection died.
const LISTEN_TICK: Duration = Duration::from_millis(100);

/// A connection the listener has not heard from in this long is probed with
/// an empty query: a server that vanished without closing the socket (a
/// failover, a partition) is noticed within about this time.
const PROBE_EVERY: Duration = Duration::from_secs(5);

const BACKOFF_FIRST: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(2);

impl Wake {
    /// `"{w|-}{d|-} {sender} {call,call,...}"`, and a third flag `c` when a
    /// cancel was asked (only then: a node of an earlier release, which
    /// reads two flags, still hears every other wake-up).
    fn payload(&self, sender: &str) -> String {
        let flag = |set: bool, c: char| if set { c } else { '-' };
        let cancel = if self.cancel { "c" } else { "" };
        format!(
            "{}{}{cancel} {sender} {}",
            flag(self.work, 'w'),
            flag(self.done, 'd'),
            self.calls.join(",")
        )
    }

    /// The wake-up in another node's payload; `None` for this node's own, or
    /// one it cannot read (a newer release's: it then waits for the poll).
    fn from_payload(payload: &str, me: &str) -> Option<Wake> {
        let mut parts = payload.splitn(3, ' ');
        let (flags, sender) = (parts.next()?, parts.next()?);
        let flags = flags.as_bytes();
        let known = flags.len() == 2 || (flags.len() == 3 && flags[2] == b'c');
        if sender == me || !known {
            return None;
        }
        let calls = parts.next().unwrap_or("");
        Some(Wake {
            work: flags[0] == b'w',
            done: flags[1] == b'd',
            cancel: flags.len() == 3,
            calls: calls
                .split(',')
                .filter(|c| !c.is_empty())
                .map(str::to_string)
                .collect(),
        })
    }
}

/// Opens a new session on the database (the store's URL, TLS and timeouts).
pub(super) type Connect = Arc<dyn Fn() -> Result<Session, StoreError> + Send + Sync>;

/// Sessions for the wake-ups, opened like the pool's (the same URL, TLS, CA
/// file and timeouts, each host in turn), without its transaction settings:
/// they run no transaction an answer depends on.
pub(super) fn connector(
    target: &PgTarget,
    ca_file: Option<&Path>,
    timeouts: &PgTimeouts,
) -> Result<Connect, TlsSetupError> {
    let connector = Connector::new(target, ca_file, timeouts)?;
    let within = timeouts.operation;
    Ok(Arc::new(move || connector.open(Instant::now() + within)))
}

/// The two threads, and what they share.
pub struct ClusterWake {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

struct Shared {
    connect: Connect,
    /// The channel this deployment's nodes `LISTEN` on (one per schema).
    channel: String,
    /// How long each statement of ours may take (`--db-timeout-ms`): a
    /// frozen server holds neither thread past it, so a stop never waits
    /// for the database.
    within: Duration,
    /// Tags this node's notifications, so its own listener skips them.
    sender: String,
    /// Announced and not yet sent.
    unsent: Mutex<Wake>,
    handler: Mutex<Option<WakeHandler>>,
    stopping: AtomicBool,
    /// `NOTIFY`s sent, for the test of the throttle.
    sent: AtomicU64,
}

impl ClusterWake {
    /// Start the announcer and the listener. `sender` names this node (its
    /// instance id); notifications carrying it are its own and are skipped.
    /// `channel` is the deployment's (`DbSchema::wake_channel`): nodes of
    /// another schema on the same database are not woken. Each statement
    /// they send must be answered `within`.
    pub(super) fn start(
        connect: Connect,
        channel: String,
        sender: &str,
        within: Duration,
    ) -> std::io::Result<ClusterWake> {
        let shared = Arc::new(Shared {
            connect,
            channel,
            within,
            sender: sender.replace(' ', "_"),
            unsent: Mutex::new(Wake::default()),
            handler: Mutex::new(None),
            stopping: AtomicBool::new(false),
            sent: AtomicU64::new(0),
        });
        let wake = ClusterWake {
            shared: Arc::clone(&shared),
            threads: Mutex::new(Vec::new()),
        };
        let announcer = Arc::clone(&shared);
        wake.spawn("pg-notify", move || announcer.announce_until_stopped())?;
        let listener = Arc::clone(&shared);
        wake.spawn("pg-listen", move || listener.listen_until_stopped())?;
        Ok(wake)
    }

    fn spawn(&self, name: &str, body: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
        let handle = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(body)?;
        lock(&self.threads).push(handle);
        Ok(())
    }

    /// What to do when another node wakes this one (replaces any earlier
    /// handler). Until one is set, wake-ups are dropped.
    pub fn set_handler(&self, handler: WakeHandler) {
        *lock(&self.shared.handler) = Some(handler);
    }

    /// Tell the other nodes, within `NOTIFY_EVERY`, that this node committed
    /// new pending work. Call it after the commit; it never blocks on I/O.
    pub fn announce_work(&self) {
        lock(&self.shared.unsent).work = true;
    }

    /// Tell the other nodes, within `NOTIFY_EVERY`, that a running call's
    /// cancel was asked (whichever node runs it checks its calls). Call it
    /// after the commit.
    pub fn announce_cancel(&self) {
        lock(&self.shared.unsent).cancel = true;
    }

    /// Tell the other nodes, within `NOTIFY_EVERY`, that these calls reached
    /// a terminal state. Call it after the commit.
    pub fn announce_done<'a>(&self, call_ids: impl IntoIterator<Item = &'a str>) {
        let mut unsent = lock(&self.shared.unsent);
        unsent.done = true;
        for call_id in call_ids {
            if unsent.calls.len() < MAX_CALLS_NAMED {
                unsent.calls.push(call_id.to_string());
            }
        }
    }

    /// `NOTIFY`s sent so far.
    #[cfg(test)]
    fn sent(&self) -> u64 {
        self.shared.sent.load(Ordering::Relaxed)
    }

    /// Stop both threads and wait for them (at most a tick, or one
    /// connection attempt). Idempotent.
    pub fn stop(&self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        let threads = std::mem::take(&mut *lock(&self.threads));
        for thread in threads {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

impl Drop for ClusterWake {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Shared {
    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Every `NOTIFY_EVERY`: if anything was announced, one `NOTIFY` with all
    /// of it. A failed send puts it back and reconnects with backoff.
    fn announce_until_stopped(&self) {
        let mut session: Option<Session> = None;
        let mut backoff = Backoff::default();
        while !self.stopping() {
            std::thread::park_timeout(NOTIFY_EVERY.max(backoff.current()));
            let wake = std::mem::take(&mut *lock(&self.unsent));
            if wake.is_empty() {
                continue;
            }
            match self.send(&mut session, &wake) {
                Some(()) => {
                    backoff.reset();
                    self.sent.fetch_add(1, Ordering::Relaxed);
                }
                None => {
                    session = None;
                    self.put_back(wake);
                    backoff.grow();
                }
            }
        }
        // A stopping node's last news (the leases it just released) goes out
        // on the session it has; it never waits to connect while stopping.
        let last = std::mem::take(&mut *lock(&self.unsent));
        if session.is_some() && !last.is_empty() {
            let _ = self.send(&mut session, &last);
        }
    }

    fn put_back(&self, wake: Wake) {
        let mut unsent = lock(&self.unsent);
        unsent.merge(wake);
        unsent.calls.truncate(MAX_CALLS_NAMED);
    }

    /// Send one `NOTIFY` with `wake`, connecting first if need be; `None`
    /// if it could not be sent.
    fn send(&self, session: &mut Option<Session>, wake: &Wake) -> Option<()> {
        if session.is_none() {
            let mut fresh = (self.connect)().ok()?;
            // A wake-up need not survive a crash: never wait for a WAL flush.
            self.bounded(&mut fresh, |s| {
                s.batch_execute("SET synchronous_commit = off")
            })?;
            *session = Some(fresh);
        }
        let live = session.as_mut()?;
        let payload = wake.payload(&self.sender);
        self.bounded(live, |s| {
            s.execute("SELECT pg_notify($1, $2)", &[&self.channel, &payload])
        })
        .map(|_| ())
    }

    /// Run `op` on `session` within `self.within`; `None` if it failed or
    /// the deadline passed.
    fn bounded<T>(
        &self,
        session: &mut Session,
        op: impl FnOnce(&mut Session) -> Result<T, tokio_postgres::Error>,
    ) -> Option<T> {
        session.set_deadline(Some(Instant::now() + self.within));
        let outcome = op(session);
        session.set_deadline(None);
        outcome.ok()
    }

    /// Connect, `LISTEN`, and hand each batch of notifications to the
    /// handler, until stopped; reconnect with backoff whenever the session
    /// dies, and after each reconnect wake the handler with everything.
    fn listen_until_stopped(&self) {
        let mut backoff = Backoff::default();
        let mut connected_before = false;
        while !self.stopping() {
            let Some(mut session) = self.open_listening() else {
                std::thread::park_timeout(backoff.current().max(BACKOFF_FIRST));
                backoff.grow();
                continue;
            };
            backoff.reset();
            if connected_before {
                crate::log::info("LISTEN session back; waking this node for everything")
                    .event("listen_restored")
                    .emit();
                self.handle(Wake::everything());
            }
            connected_before = true;
            self.listen_on(&mut session);
            if !self.stopping() {
                crate::log::warn("LISTEN session lost; polling alone finds work until it is back")
                    .event("listen_lost")
                    .emit();
            }
        }
    }

    fn open_listening(&self) -> Option<Session> {
        let mut session = (self.connect)().ok()?;
        self.bounded(&mut session, |s| {
            s.batch_execute(&format!("LISTEN {}", self.channel))
        })?;
        Some(session)
    }

    /// Until stopped or the session dies (or a probe goes unanswered).
    fn listen_on(&self, session: &mut Session) {
        let mut last_heard = Instant::now();
        while !self.stopping() {
            let Ok(wake) = self.next_batch(session) else {
                return;
            };
            if !wake.is_empty() {
                last_heard = Instant::now();
                self.handle(wake);
            }
            if session.is_broken() {
                return;
            }
            if last_heard.elapsed() >= PROBE_EVERY {
                if self.bounded(session, |s| s.batch_execute("")).is_none() {
                    return;
                }
                last_heard = Instant::now();
            }
        }
    }

    /// Wait up to a tick for notifications, and take every one there: one
    /// batch, one wake-up. Own notifications are skipped.
    fn next_batch(&self, session: &mut Session) -> Result<Wake, tokio_postgres::Error> {
        let mut wake = Wake::default();
        for note in session.notifications(LISTEN_TICK)? {
            if let Some(other) = Wake::from_payload(note.payload(), &self.sender) {
                wake.merge(other);
            }
        }
        Ok(wake)
    }

    fn handle(&self, wake: Wake) {
        let handler = lock(&self.handler).clone();
        if let Some(handler) = handler {
            handler(wake);
        }
    }
}

/// Doubling waits between failed attempts, from `BACKOFF_FIRST` to `BACKOFF_MAX`.
#[derive(Default)]
struct Backoff {
    failures: u32,
}

impl Backoff {
    fn current(&self) -> Duration {
        if self.failures == 0 {
            return Duration::ZERO;
        }
        let factor = 1u32 << self.failures.min(8);
        (BACKOFF_FIRST * factor / 2).min(BACKOFF_MAX)
    }

    fn grow(&mut self) {
        self.failures = self.failures.saturating_add(1);
    }

    fn reset(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::temp::postgres::{connect, PgServer};
    use std::sync::mpsc;

    fn connector(url: &str) -> Connect {
        let target = PgTarget::parse(url).expect("a test URL");
        super::connector(&target, None, &PgTimeouts::default()).expect("no TLS")
    }

    /// A node whose wake-ups arrive on a channel.
    fn node(url: &str, name: &str) -> (ClusterWake, mpsc::Receiver<Wake>) {
        let channel = crate::store::DbSchema::default().wake_channel();
        let wake = ClusterWake::start(connector(url), channel, name, Duration::from_secs(10))
            .expect("start");
        let (tx, rx) = mpsc::channel();
        let tx = Mutex::new(tx);
        wake.set_handler(Arc::new(move |w| {
            let _ = crate::lock::lock(&tx).send(w);
        }));
        (wake, rx)
    }

    fn wait_listening(url: &str, listeners: i64) {
        let mut db = connect(url);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let n: i64 = db
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity \
                      WHERE datname = current_database() AND query LIKE 'LISTEN%'",
                    &[],
                )
                .unwrap()
                .get(0);
            if n >= listeners {
                return;
            }
            assert!(Instant::now() < deadline, "listeners never connected");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A burst of announcements becomes a handful of NOTIFYs (one per
    /// interval, not one per call), and the other node is woken with what
    /// was announced, the completed calls named; the announcing node is not
    /// woken by its own.
    #[test]
    fn a_burst_of_announcements_is_one_notify_per_interval_and_wakes_the_others() {
        let url = PgServer::shared().fresh_database("listen_burst");
        let (a, from_a) = node(&url, "node-a");
        let (b, at_b) = node(&url, "node-b");
        wait_listening(&url, 2);
        let started = Instant::now();
        for i in 0..500 {
            a.announce_work();
            if i % 100 == 0 {
                a.announce_done([format!("c_{i}").as_str()]);
            }
        }
        let mut seen = Wake::default();
        while !(seen.work && seen.calls.len() == 5) {
            let got = at_b
                .recv_timeout(Duration::from_secs(30))
                .expect("node b was woken");
            seen.merge(got);
        }
        assert!(seen.done);
        assert_eq!(seen.calls, ["c_0", "c_100", "c_200", "c_300", "c_400"]);
        let intervals = started.elapsed().as_millis() / NOTIFY_EVERY.as_millis() + 2;
        assert!(
            (a.sent() as u128) <= intervals,
            "{} NOTIFYs for 505 announcements in {intervals} intervals",
            a.sent()
        );
        // b can hear the NOTIFY before a has counted it: wait for the count.
        let deadline = Instant::now() + Duration::from_secs(30);
        while a.sent() < 1 {
            assert!(Instant::now() < deadline, "a never counted its NOTIFY");
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(NOTIFY_EVERY * 10);
        assert!(from_a.try_recv().is_err(), "a node is not woken by itself");
        drop(b);
    }

    /// A payload names at most `MAX_CALLS_NAMED` calls; more completions are
    /// still announced, as "some".
    #[test]
    fn payloads_round_trip_and_name_a_bounded_number_of_calls() {
        let wake = Wake {
            work: false,
            done: true,
            calls: vec!["c_1".into(), "c_2".into()],
            cancel: false,
        };
        let payload = wake.payload("i_me");
        assert_eq!(payload, "-d i_me c_1,c_2");
        assert_eq!(Wake::from_payload(&payload, "i_other"), Some(wake));
        assert_eq!(Wake::from_payload(&payload, "i_me"), None, "our own");
        assert_eq!(Wake::from_payload("garbage", "i_other"), None);
        let cancel = Wake {
            cancel: true,
            ..Wake::default()
        };
        assert_eq!(cancel.payload("i_me"), "--c i_me ");
        assert_eq!(Wake::from_payload("--c i_me ", "x"), Some(cancel));
        assert_eq!(Wake::from_payload("--x i_me ", "x"), None, "a newer flag");
        let everything = Wake::everything().payload("i_me");
        assert_eq!(
            Wake::from_payload(&everything, "x"),
            Some(Wake::everything())
        );
        let url = PgServer::shared().fresh_database("listen_bounded");
        let (a, _) = node(&url, "node-a");
        let ids: Vec<String> = (0..MAX_CALLS_NAMED + 50)
            .map(|i| format!("c_{i}"))
            .collect();
        a.stop(); // nothing is sent: what is queued stays to be read
        a.announce_done(ids.iter().map(String::as_str));
        let unsent = lock(&a.shared.unsent).clone();
        assert!(unsent.done);
        assert_eq!(unsent.calls.len(), MAX_CALLS_NAMED);
        assert!(unsent.payload("i_me").len() < 8000);
    }

    /// The listener survives a PostgreSQL restart: it reconnects by itself,
    /// wakes its node with everything (anything may have been missed), and
    /// hears the other node's announcements again.
    #[test]
    fn the_listener_reconnects_after_a_restart_and_wakes_with_everything() {
        let server = PgServer::start().unwrap_or_else(|e| panic!("{e}"));
        let url = server.fresh_database("listen_restart");
        let (a, _) = node(&url, "node-a");
        let (_b, at_b) = node(&url, "node-b");
        wait_listening(&url, 2);
        server.restart_immediate().expect("restart");
        let after_reconnect = at_b
            .recv_timeout(Duration::from_secs(30))
            .expect("woken after the reconnect");
        assert_eq!(after_reconnect, Wake::everything());
        wait_listening(&url, 2);
        a.announce_done(["c_after"]);
        let got = at_b
            .recv_timeout(Duration::from_secs(30))
            .expect("woken by the other node after the restart");
        assert_eq!(got.calls, ["c_after"], "{got:?}");
    }

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let mut b = Backoff::default();
        assert_eq!(b.current(), Duration::ZERO);
        b.grow();
        assert_eq!(b.current(), BACKOFF_FIRST);
        b.grow();
        assert_eq!(b.current(), BACKOFF_FIRST * 2);
        (0..20).for_each(|_| b.grow());
        assert_eq!(b.current(), BACKOFF_MAX);
        b.reset();
        assert_eq!(b.current(), Duration::ZERO);
    }
}
