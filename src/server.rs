//! The accept loop and one thread per connection.
//!
//! This module owns sockets, threads, deadlines and the connection cap: it feeds
//! the bytes a client sends to the parser in `http`, calls the handler once per
//! complete request, and writes the answers back in order. It must never let a
//! panic or any input stop it from serving other clients, never let one client
//! hold a thread past its deadlines, never leak a connection slot, and never log
//! more than one short line per unusual event (stderr only).
//!
//! Map: this file holds the accept loop, the connection cap and the answers
//! given without a connection thread; `observer` holds `Handler` and
//! `Observer` (what the server calls, and what the service learns about
//! connections and the server's own answers); `limits` the size and time
//! limits; `connection` serves one client (and writes a closing answer);
//! `input_buffer` is a connection's read buffer; `stream` writes a streamed
//! body (an event stream) piece by piece, within its bounds.

mod connection;
mod input_buffer;
mod limits;
mod observer;
mod stream;

pub use limits::Limits;
pub use observer::{Handler, Observer};

use crate::http::{ErrorCode, Response};
use crate::lock::lock;
use crate::log::Repeats;
use connection::{closing_response_bytes, ServedConnection};
use observer::Unobserved;
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// A running server: its accept thread and every connection thread, and what
/// stopping needs to reach them.
pub struct Server {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Mutex<Option<JoinHandle<()>>>,
}

/// What the accept thread and `stop` share.
struct Shared {
    /// Set once by `stop`; the accept loop checks it after every accept.
    stopping: AtomicBool,
    /// Every connection thread by id, with a handle on its socket so that
    /// `stop` can end a wait for the next request at once (`shutdown(Read)`).
    /// A thread drops its socket handle as it ends (so no descriptor outlives
    /// its connection); the accept loop joins the ended threads as it goes.
    connections: Mutex<HashMap<u64, OpenConnection>>,
}

struct OpenConnection {
    socket: Option<TcpStream>,
    thread: Option<JoinHandle<()>>,
}

/// Start serving on an already-bound listener, on a thread of its own.
pub fn start(listener: TcpListener, handler: Handler, limits: Limits) -> io::Result<Server> {
    start_observed(listener, handler, limits, Arc::new(Unobserved))
}

/// `start`, telling `observer` about connections and the server's own answers.
pub fn start_observed(
    listener: TcpListener,
    handler: Handler,
    limits: Limits,
    observer: Arc<dyn Observer>,
) -> io::Result<Server> {
    let addr = listener.local_addr()?;
    let shared = Arc::new(Shared {
        stopping: AtomicBool::new(false),
        connections: Mutex::new(HashMap::new()),
    });
    let accepting = Arc::clone(&shared);
    let accept = thread::Builder::new()
        .name("accept".into())
        .spawn(move || accept_until_stopped(&listener, &handler, limits, accepting, observer))?;
    Ok(Server {
        addr,
        shared,
        accept: Mutex::new(Some(accept)),
    })
}

/// Serve forever on an already-bound listener (the tools that never stop).
pub fn serve(listener: TcpListener, handler: Handler, limits: Limits) {
    if let Ok(server) = start(listener, handler, limits) {
        server.wait();
    }
}

impl Server {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Block until the accept thread ends (only `stop` ends it).
    pub fn wait(&self) {
        let accept = lock(&self.accept).take();
        if let Some(accept) = accept {
            let _ = accept.join();
        }
    }

    /// Stop accepting (a connection to ourselves wakes the blocked `accept`),
    /// then join the accept thread.
    pub fn stop_accepting(&self) {
        if !self.shared.stopping.swap(true, Ordering::SeqCst) {
            let _ = TcpStream::connect_timeout(&wake_address(self.addr), Duration::from_secs(1));
        }
        self.wait();
    }

    /// Stop: no new connection; a request already read is answered, then its
    /// connection closes; a connection waiting for its next request closes at
    /// once. Returns when every connection thread has ended. Idempotent.
    pub fn stop(&self) {
        self.stop_accepting();
        let connections = std::mem::take(&mut *lock(&self.shared.connections));
        for socket in connections.values().filter_map(|c| c.socket.as_ref()) {
            let _ = socket.shutdown(Shutdown::Read);
        }
        for thread in connections.into_values().filter_map(|c| c.thread) {
            let _ = thread.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Where to connect to wake our own `accept`: a wildcard bind is reached on
/// loopback.
fn wake_address(addr: SocketAddr) -> SocketAddr {
    let ip: IpAddr = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => Ipv4Addr::LOCALHOST.into(),
        IpAddr::V6(ip) if ip.is_unspecified() => Ipv6Addr::LOCALHOST.into(),
        ip => ip,
    };
    SocketAddr::new(ip, addr.port())
}

fn accept_until_stopped(
    listener: &TcpListener,
    handler: &Handler,
    limits: Limits,
    shared: Arc<Shared>,
    observer: Arc<dyn Observer>,
) {
    let open = Arc::new(AtomicUsize::new(0));
    let limits = Arc::new(limits);
    let accept_errors = Repeats::every(Duration::from_secs(1));
    let busy_log = Repeats::every(Duration::from_secs(1));
    let mut next_id: u64 = 0;
    for incoming in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let stream = match incoming {
            Ok(stream) => stream,
            Err(e) => {
                crate::log::error("accept failed")
                    .event("accept_failed")
                    .cause(&e)
                    .emit_or_count(&accept_errors);
                // Out of descriptors or memory: give the system a moment instead of spinning.
                thread::sleep(Duration::from_millis(5));
                continue;
            }
        };
        join_finished(&shared.connections);
        // Only this thread increments `open`, so checking then claiming cannot overshoot.
        if open.load(Ordering::Acquire) >= limits.max_connections {
            crate::log::warn("connection limit reached; answering 503")
                .event("connection_limit")
                .number("max_connections", limits.max_connections as u64)
                .emit_or_count(&busy_log);
            reject_busy(stream, &*observer);
            continue;
        }
        next_id += 1;
        let Ok(socket) = stream.try_clone() else {
            reject_busy(stream, &*observer);
            continue;
        };
        // Registered before the thread starts, so its end always finds its entry.
        let entry = OpenConnection {
            socket: Some(socket),
            thread: None,
        };
        lock(&shared.connections).insert(next_id, entry);
        let thread = spawn_connection(
            next_id,
            stream,
            Slot::claim(&open, &observer),
            handler,
            &limits,
            &shared,
        );
        let mut connections = lock(&shared.connections);
        match (thread, connections.get_mut(&next_id)) {
            (Some(thread), Some(entry)) => entry.thread = Some(thread),
            _ => drop(connections.remove(&next_id)),
        }
    }
}

/// Join the connection threads that have ended, so the registry stays as
/// long as the connections that are open.
fn join_finished(connections: &Mutex<HashMap<u64, OpenConnection>>) {
    let ended: Vec<JoinHandle<()>> = {
        let mut connections = lock(connections);
        let ids: Vec<u64> = connections
            .iter()
            .filter(|(_, c)| c.thread.as_ref().is_some_and(JoinHandle::is_finished))
            .map(|(id, _)| *id)
            .collect();
        ids.iter()
            .filter_map(|id| connections.remove(id)?.thread)
            .collect()
    };
    for thread in ended {
        let _ = thread.join();
    }
}

fn spawn_connection(
    id: u64,
    stream: TcpStream,
    slot: Slot,
    handler: &Handler,
    limits: &Arc<Limits>,
    shared: &Arc<Shared>,
) -> Option<JoinHandle<()>> {
    let handler = Arc::clone(handler);
    let limits = Arc::clone(limits);
    let shared = Arc::clone(shared);
    let spawned = thread::Builder::new()
        .name(format!("conn-{id}"))
        .spawn(move || {
            let observer = Arc::clone(&slot.observer);
            let _slot = slot;
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                ServedConnection::new(stream, &limits, &*observer).run(&handler)
            }));
            if outcome.is_err() {
                crate::log::error("connection thread panicked; connection closed")
                    .event("connection_panic")
                    .number("connection", id)
                    .emit();
            }
            // Close our end now: the registry's handle must not outlive us.
            if let Some(entry) = lock(&shared.connections).get_mut(&id) {
                entry.socket = None;
            }
        });
    // On failure the closure (and with it the slot and the stream) is dropped here.
    spawned
        .map_err(|e| {
            crate::log::error("cannot spawn a connection thread")
                .event("spawn_failed")
                .cause(&e)
                .emit()
        })
        .ok()
}

/// One counted open connection; dropping it (however the thread ends) frees
/// it, and tells the observer.
struct Slot {
    open: Arc<AtomicUsize>,
    observer: Arc<dyn Observer>,
}

impl Slot {
    fn claim(open: &Arc<AtomicUsize>, observer: &Arc<dyn Observer>) -> Slot {
        open.fetch_add(1, Ordering::AcqRel);
        observer.connection_opened();
        Slot {
            open: Arc::clone(open),
            observer: Arc::clone(observer),
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::AcqRel);
        self.observer.connection_closed();
    }
}

/// Over the cap: answer from the accept thread without spawning. The socket is
/// fresh, so its send buffer is empty and the write cannot block for long.
fn reject_busy(mut stream: TcpStream, observer: &dyn Observer) {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(Duration::from_millis(200)));
    let mut response = Response::from_error(ErrorCode::Unavailable, "too many open connections");
    observer.own_answer(None, stream.peer_addr().ok(), &mut response, Duration::ZERO);
    let _ = stream.write_all(&closing_response_bytes(&response));
    let _ = stream.shutdown(Shutdown::Write);
    discard_already_received(&mut stream);
}

/// Closing a socket with unread input makes the kernel send RST, which can
/// destroy the response before the client reads it; reading what is already
/// there first avoids that without waiting.
fn discard_already_received(stream: &mut TcpStream) {
    if stream.set_nonblocking(true).is_err() {
        return;
    }
    let mut scratch = [0u8; 4096];
    for _ in 0..16 {
        match stream.read(&mut scratch) {
            Ok(n) if n > 0 => continue,
            _ => return,
        }
    }
}
