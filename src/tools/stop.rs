//! [`Stop`]: how a running attempt is told to stop (its call was
//! cancelled), and what its tool had done by then. The runner gives each
//! worker one `Stop` for its life and names every attempt it starts with a
//! run id of its own (never 0); an executor arms a [`Halt`] for the run it
//! executes (a `command` tool's: SIGTERM to its process group; an `http`
//! tool's: shut its socket down; the `sleep` built-in's: wake up) and says
//! when its tool reached the outside ([`Stop::mark_sent`]: the process
//! started, the request went out).
//!
//! A request names its run: one that arrives after the worker moved on to
//! another run touches nothing (the ids differ), so a late cancel can never
//! stop the wrong call. A stopping service whose grace period is over asks
//! the same way ([`Stop::request_for_shutdown`]), and the handle remembers
//! it, so the worker gives the lease back instead of recording a cancel. Nothing here costs a run that is never asked to stop
//! more than a few atomic stores; the lock is taken only by an executor that
//! arms a halt and by a request. It never decides whether a call is
//! cancelled: the store's fenced completion does.

use crate::lock::lock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What stops the tool of the run that armed it, from any thread, at once:
/// quick and non-blocking (a signal, a socket shutdown, an unpark).
pub type Halt = Box<dyn Fn() + Send + Sync>;

/// One worker's stop handle; clones share it.
#[derive(Clone, Default)]
pub struct Stop(Arc<Shared>);

/// The same handle (the same worker's).
impl PartialEq for Stop {
    fn eq(&self, other: &Stop) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl std::fmt::Debug for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Stop { .. }")
    }
}

#[derive(Default)]
struct Shared {
    /// The run executing now; 0 between runs.
    current: AtomicU64,
    /// The run last asked to stop.
    requested: AtomicU64,
    /// The run whose tool last reached the outside.
    sent: AtomicU64,
    /// What halts the tool, and the run that armed it.
    halt: Mutex<Option<(u64, Halt)>>,
    /// Set once a stopping service asked a run to stop; never cleared (the
    /// worker takes no run after it).
    shutdown: AtomicBool,
}

impl Stop {
    pub fn new() -> Stop {
        Stop::default()
    }

    /// Run `run` (an id never 0, never reused) from now on.
    pub fn begin(&self, run: u64) {
        debug_assert_ne!(run, 0, "run 0 means no run");
        self.0.current.store(run, Ordering::SeqCst);
    }

    /// The run is over: a request for it changes nothing any more.
    pub fn end(&self) {
        self.0.current.store(0, Ordering::SeqCst);
    }

    /// Ask `run` to stop because the service is stopping, not because its
    /// call was cancelled: the same halt, and [`Stop::is_shutdown`] from now
    /// on.
    pub fn request_for_shutdown(&self, run: u64) {
        self.0.shutdown.store(true, Ordering::SeqCst);
        self.request(run);
    }

    /// Whether a stopping service has asked this worker's run to stop.
    pub fn is_shutdown(&self) -> bool {
        self.0.shutdown.load(Ordering::SeqCst)
    }

    /// Ask `run` to stop: at once if its tool has armed a halt, else as
    /// soon as it arms one (or before its tool starts, `is_requested`).
    pub fn request(&self, run: u64) {
        self.0.requested.store(run, Ordering::SeqCst);
        if let Some((armed, halt)) = &*lock(&self.0.halt) {
            if *armed == run {
                halt();
            }
        }
    }

    /// The run executing now, told apart from every other `Stop`'s: for a
    /// halt armed once per run on something the runs share (a pooled
    /// connection).
    pub fn run_key(&self) -> (usize, u64) {
        let handle = Arc::as_ptr(&self.0) as usize;
        (handle, self.0.current.load(Ordering::SeqCst))
    }

    /// Whether the run executing now has been asked to stop.
    pub fn is_requested(&self) -> bool {
        let run = self.0.current.load(Ordering::SeqCst);
        run != 0 && self.0.requested.load(Ordering::SeqCst) == run
    }

    /// The tool of the run executing now can be stopped by `halt` until
    /// `disarm`; if that run was already asked to stop, it is halted now.
    pub fn arm(&self, halt: Halt) {
        let run = self.0.current.load(Ordering::SeqCst);
        if run == 0 {
            return;
        }
        let mut slot = lock(&self.0.halt);
        if self.0.requested.load(Ordering::SeqCst) == run {
            halt();
        }
        *slot = Some((run, halt));
    }

    /// The tool can no longer be halted (it returned).
    pub fn disarm(&self) {
        lock(&self.0.halt).take();
    }

    /// The run's tool has reached the outside: a request went out, a
    /// process started. Its effect may happen whatever comes next.
    pub fn mark_sent(&self) {
        let run = self.0.current.load(Ordering::SeqCst);
        self.0.sent.store(run, Ordering::SeqCst);
    }

    /// Whether the run executing now has reached the outside.
    pub fn sent(&self) -> bool {
        let run = self.0.current.load(Ordering::SeqCst);
        run != 0 && self.0.sent.load(Ordering::SeqCst) == run
    }

    /// Sleep for `duration`, or until this run is asked to stop; `true` if
    /// it was.
    pub fn sleep(&self, duration: Duration) -> bool {
        let deadline = Instant::now() + duration;
        let sleeper = std::thread::current();
        self.arm(Box::new(move || sleeper.unpark()));
        while !self.is_requested() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            std::thread::park_timeout(left);
        }
        self.disarm();
        self.is_requested()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn counting(halts: &Arc<AtomicUsize>) -> Halt {
        let halts = Arc::clone(halts);
        Box::new(move || {
            halts.fetch_add(1, Ordering::SeqCst);
        })
    }

    /// A request for the run executing now halts its armed tool; one for a
    /// run that is over (the worker moved on) touches nothing.
    #[test]
    fn a_request_halts_only_the_run_it_names() {
        let stop = Stop::new();
        let halts = Arc::new(AtomicUsize::new(0));
        stop.begin(7);
        stop.arm(counting(&halts));
        stop.request(6);
        assert!(!stop.is_requested());
        assert_eq!(halts.load(Ordering::SeqCst), 0);
        stop.request(7);
        assert!(stop.is_requested());
        assert_eq!(halts.load(Ordering::SeqCst), 1);
        stop.disarm();
        stop.end();
        stop.begin(8);
        assert!(!stop.is_requested(), "the next run starts clean");
        stop.request(7);
        stop.arm(counting(&halts));
        assert_eq!(halts.load(Ordering::SeqCst), 1, "a late request for run 7");
    }

    /// A request that comes before the tool arms its halt is not lost: the
    /// arming halts at once, and the worker sees it before the tool starts.
    #[test]
    fn a_request_before_the_halt_is_armed_halts_when_it_is() {
        let stop = Stop::new();
        let halts = Arc::new(AtomicUsize::new(0));
        stop.request(3);
        stop.begin(3);
        assert!(stop.is_requested());
        assert!(!stop.sent());
        stop.mark_sent();
        assert!(stop.sent());
        stop.arm(counting(&halts));
        assert_eq!(halts.load(Ordering::SeqCst), 1);
    }

    /// A sleep ends when its run is asked to stop from another thread.
    #[test]
    fn a_sleep_wakes_when_asked_to_stop() {
        let stop = Stop::new();
        stop.begin(1);
        let asker = stop.clone();
        let started = Instant::now();
        let thread = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            asker.request(1);
        });
        assert!(stop.sleep(Duration::from_secs(60)));
        assert!(started.elapsed() < Duration::from_secs(60));
        thread.join().unwrap();
        stop.end();
        stop.begin(2);
        assert!(
            !stop.sleep(Duration::from_millis(1)),
            "a sleep not asked to stop"
        );
    }
}
