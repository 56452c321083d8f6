//! How an `http` tool's request is abandoned when its call is cancelled: a
//! `ureq` connector that wraps every transport it makes (`Stoppable`) so
//! that, while a run with a [`Stop`] uses it on this thread, the run's halt
//! shuts its socket down — a blocked write or read then returns at once,
//! the worker stops waiting, and the connection is never reused (ureq drops
//! a transport that failed, and one found shut is not open). The downstream
//! sees its client close the connection; whatever it already received it
//! may still act on.
//!
//! The transport also says when the request went out: its first write
//! marks the run `sent` (a run halted before that writes nothing). Runs are
//! found through a thread-local set only while an `http` tool's attempt is
//! in `ureq` on this thread ([`Watched`]); a transport reused by a later run
//! arms that run's halt instead (runs are told apart by id). A name
//! resolution or a TCP connect in progress is not interrupted (ureq cannot);
//! the halt then takes effect at the connection's first write.

use super::stop::Stop;
use std::cell::RefCell;
use std::io;
use std::sync::{Arc, Mutex, Weak};
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, DefaultConnector, NextTimeout, ShutdownHandle, Transport,
};

thread_local! {
    /// The stop of the `http` attempt this thread is in, if any.
    static WATCHED: RefCell<Option<Stop>> = const { RefCell::new(None) };
}

/// While alive, the transports this thread uses answer to `stop`.
pub(super) struct Watched;

impl Watched {
    pub(super) fn new(stop: Option<&Stop>) -> Watched {
        WATCHED.with(|w| *w.borrow_mut() = stop.cloned());
        Watched
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        // The transport may go back to the pool: nothing halts it now.
        if let Some(stop) = WATCHED.with(|w| w.borrow_mut().take()) {
            stop.disarm();
        }
    }
}

/// ureq's own connectors (TCP, TLS), each transport wrapped in `Stoppable`.
#[derive(Debug, Default)]
pub(super) struct StoppableConnector(DefaultConnector);

impl Connector<()> for StoppableConnector {
    type Out = Stoppable;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<()>,
    ) -> Result<Option<Stoppable>, ureq::Error> {
        // The socket's shutdown handle, registered by the TCP connector; kept
        // here as well as handed on to the agent's own registry.
        let socket: Arc<Mutex<Option<Weak<dyn ShutdownHandle>>>> = Arc::default();
        let register = {
            let socket = Arc::clone(&socket);
            let agent = Arc::clone(&details.register_shutdown);
            Arc::new(move |handle: Weak<dyn ShutdownHandle>| {
                *crate::lock::lock(&socket) = Some(handle.clone());
                agent(handle)
            })
        };
        let ours = ConnectionDetails {
            uri: details.uri,
            addrs: details.addrs.clone(),
            config: details.config,
            request_level: details.request_level,
            resolver: details.resolver,
            now: details.now,
            timeout: details.timeout,
            current_time: Arc::clone(&details.current_time),
            run_connector: Arc::clone(&details.run_connector),
            register_shutdown: register,
        };
        let Some(inner) = self.0.connect(&ours, chained)? else {
            return Ok(None);
        };
        let socket = crate::lock::lock(&socket).take();
        Ok(Some(Stoppable {
            inner,
            socket,
            armed_for: None,
        }))
    }
}

/// A transport whose socket a watched run's halt shuts down.
#[derive(Debug)]
pub(super) struct Stoppable {
    inner: Box<dyn Transport>,
    socket: Option<Weak<dyn ShutdownHandle>>,
    /// The run this transport last armed a halt for (`Stop::run_key`), so
    /// a run arms it once.
    armed_for: Option<(usize, u64)>,
}

impl Stoppable {
    /// Before any I/O: a watched run's halt shuts this socket; a run asked to
    /// stop writes and waits for nothing more. `writing`: this I/O sends
    /// (the request goes out).
    fn watch(&mut self, writing: bool) -> Result<(), ureq::Error> {
        WATCHED.with(|watched| {
            let Some(stop) = &*watched.borrow() else {
                return Ok(());
            };
            if stop.is_requested() {
                return Err(stopped());
            }
            let run = stop.run_key();
            if self.armed_for != Some(run) {
                if let Some(socket) = self.socket.clone() {
                    stop.arm(Box::new(move || {
                        if let Some(socket) = socket.upgrade() {
                            socket.shutdown();
                        }
                    }));
                }
                self.armed_for = Some(run);
            }
            if writing {
                stop.mark_sent();
            }
            Ok(())
        })
    }
}

/// The error a halted run's I/O ends with.
fn stopped() -> ureq::Error {
    ureq::Error::Io(io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "the call was cancelled",
    ))
}

impl Transport for Stoppable {
    fn buffers(&mut self) -> &mut dyn Buffers {
        self.inner.buffers()
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        self.watch(true)?;
        self.inner.transmit_output(amount, timeout)
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        self.watch(false)?;
        self.inner.await_input(timeout)
    }

    fn is_open(&mut self) -> bool {
        self.inner.is_open()
    }

    fn is_tls(&self) -> bool {
        self.inner.is_tls()
    }
}
