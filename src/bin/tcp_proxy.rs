//! The `tcp_proxy` binary: a byte-for-byte TCP relay between one node and
//! PostgreSQL that a test or `scripts/fault_inject.sh` cuts on demand — a
//! network partition of that node alone, while the other nodes keep the
//! database.
//!
//! Modes, switched by signals so a shell script can drive it (`kill -USR1`):
//! `pass` relays both ways (the start); `SIGUSR1` **black-holes**: nothing
//! is relayed any more either way and new connections are accepted and left
//! unanswered — as a network that drops everything looks to a client whose
//! kernel still holds the socket, and like a frozen server (only the
//! client's own deadline ends a wait); `SIGUSR2` **resets**: every
//! connection is closed with a TCP RST at once, and every new one too;
//! `SIGHUP` heals: `pass` again, the relays the black hole stopped move on,
//! and the connections it accepted without relaying are closed (their
//! clients gave up on them long ago). Each change is one line
//! on stderr (`tcp_proxy: mode black-hole`).
//!
//! Not HTTP-aware (`chaos_proxy` is): it never parses what it relays, never
//! reorders or drops bytes within a connection it relays, and relays nothing
//! while cut. It prints one start-up line on stdout with the real port.

#![forbid(unsafe_code)]

use idempotent_tool::flag::{FlagError, Flags};
use nix::sys::socket::{setsockopt, sockopt};
use signal_hook::consts::{SIGHUP, SIGUSR1, SIGUSR2};
use signal_hook::iterator::Signals;
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

const USAGE: &str = "\
usage: tcp_proxy --listen ADDR --upstream ADDR
  relays TCP byte for byte; signals switch what it does:
  SIGUSR1 black-hole (relay nothing, answer nothing)  SIGUSR2 reset (RST every
  connection, and every new one)  SIGHUP pass again";

/// How often an idle relay looks at the mode: a cut takes effect within it.
const LOOK_EVERY: Duration = Duration::from_millis(50);

/// How long connecting upstream may take before the client is closed.
const UPSTREAM_CONNECT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Pass,
    BlackHole,
    Reset,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Pass => "pass",
            Mode::BlackHole => "black-hole",
            Mode::Reset => "reset",
        }
    }
}

/// What every thread shares: the mode, and every socket open now (both
/// ends of each relayed connection, and those the black hole holds), so a
/// reset or a heal can close them.
struct Shared {
    upstream: String,
    state: Mutex<State>,
}

struct State {
    mode: Mode,
    /// Bumped by every reset: a relay of an older generation ends.
    generation: u64,
    /// Both ends of every relayed connection, by a number of its own.
    open: HashMap<u64, TcpStream>,
    next_id: u64,
    /// Connections the black hole accepted and never relayed.
    held: Vec<TcpStream>,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Switch to `mode`: a reset closes every socket with an RST and ends
    /// every relay; a heal closes the connections the black hole held (their
    /// clients gave up on them) and lets the relays move again.
    fn switch(&self, mode: Mode) {
        let mut state = self.state();
        state.mode = mode;
        if mode != Mode::BlackHole {
            state.held.drain(..).for_each(|socket| reset(&socket));
        }
        if mode == Mode::Reset {
            state.generation += 1;
            state.open.drain().for_each(|(_, socket)| reset(&socket));
        }
        idempotent_tool::errln!("tcp_proxy: mode {}", mode.name());
    }

    /// Keep `socket` to close at the next reset or heal; its number, or
    /// `None` (and the socket reset) when the mode no longer relays it.
    fn register(&self, socket: &TcpStream, generation: u64) -> Option<u64> {
        let mut state = self.state();
        if state.generation != generation {
            reset(socket);
            return None;
        }
        let clone = socket.try_clone().ok()?;
        state.next_id += 1;
        let id = state.next_id;
        state.open.insert(id, clone);
        Some(id)
    }

    /// The sockets of a connection that ended.
    fn forget(&self, ids: impl IntoIterator<Item = u64>) {
        let mut state = self.state();
        for id in ids {
            state.open.remove(&id);
        }
    }
}

/// Close with an RST (linger 0), not a FIN: the peer's next read or write
/// fails at once with "connection reset".
fn reset(socket: &TcpStream) {
    let _ = setsockopt(
        socket,
        sockopt::Linger,
        &nix::libc::linger {
            l_onoff: 1,
            l_linger: 0,
        },
    );
    let _ = socket.shutdown(Shutdown::Both);
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        idempotent_tool::outln!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let (listen, upstream) = match parse_args(&args) {
        Ok(parsed) => parsed,
        Err(error) => {
            idempotent_tool::cli::console::usage_error("tcp_proxy", &error);
            return ExitCode::from(2);
        }
    };
    let listener = match TcpListener::bind(&listen) {
        Ok(listener) => listener,
        Err(error) => {
            idempotent_tool::errln!("tcp_proxy: cannot listen on {listen}: {error}");
            return ExitCode::FAILURE;
        }
    };
    let shared = Arc::new(Shared {
        upstream,
        state: Mutex::new(State {
            mode: Mode::Pass,
            generation: 0,
            open: HashMap::new(),
            next_id: 0,
            held: Vec::new(),
        }),
    });
    if let Err(error) = switch_on_signals(Arc::clone(&shared)) {
        idempotent_tool::errln!("tcp_proxy: cannot listen for signals: {error}");
        return ExitCode::FAILURE;
    }
    let local = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or(listen);
    idempotent_tool::outln!(
        "tcp_proxy listening on {local} upstream={}",
        shared.upstream
    );
    let _ = io::stdout().flush();
    for client in listener.incoming().flatten() {
        let shared = Arc::clone(&shared);
        let _ = thread::Builder::new()
            .name("tcp-proxy".into())
            .spawn(move || take(client, shared));
    }
    ExitCode::SUCCESS
}

/// The signals thread: each signal switches the mode.
fn switch_on_signals(shared: Arc<Shared>) -> io::Result<()> {
    let mut signals = Signals::new([SIGUSR1, SIGUSR2, SIGHUP])?;
    thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                shared.switch(match signal {
                    SIGUSR1 => Mode::BlackHole,
                    SIGUSR2 => Mode::Reset,
                    _ => Mode::Pass,
                });
            }
        })?;
    Ok(())
}

/// A new client: relayed, held unanswered, or reset, as the mode says.
fn take(client: TcpStream, shared: Arc<Shared>) {
    let (mode, generation) = {
        let state = shared.state();
        (state.mode, state.generation)
    };
    match mode {
        Mode::Reset => reset(&client),
        Mode::BlackHole => shared.state().held.push(client),
        Mode::Pass => {
            if let Err(error) = relay(client, &shared, generation) {
                idempotent_tool::errln!("tcp_proxy: upstream {}: {error}", shared.upstream);
            }
        }
    }
}

/// Connect upstream and relay both ways until either side closes, or a
/// reset ends this generation.
fn relay(client: TcpStream, shared: &Arc<Shared>, generation: u64) -> io::Result<()> {
    let address = shared
        .upstream
        .parse()
        .map_err(|_| io::Error::other("--upstream is not HOST:PORT"))?;
    let upstream = TcpStream::connect_timeout(&address, UPSTREAM_CONNECT).inspect_err(|_| {
        reset(&client);
    })?;
    let registered = [
        shared.register(&client, generation),
        shared.register(&upstream, generation),
    ];
    if registered.iter().all(Option::is_some) {
        let (client_in, upstream_out) = (client.try_clone()?, upstream.try_clone()?);
        let back = {
            let shared = Arc::clone(shared);
            thread::Builder::new()
                .name("tcp-proxy-back".into())
                .spawn(move || pump(upstream, client, &shared, generation))?
        };
        pump(client_in, upstream_out, shared, generation);
        let _ = back.join();
    } else {
        reset(&client);
        reset(&upstream);
    }
    shared.forget(registered.into_iter().flatten());
    Ok(())
}

/// Copy `from` to `to` until a reset ends this generation: nothing moves while the
/// mode is black-hole (the kernel buffers what arrives, then stops taking
/// more, and nothing is answered); the end of `from` is passed on.
fn pump(mut from: TcpStream, mut to: TcpStream, shared: &Shared, generation: u64) {
    let _ = from.set_read_timeout(Some(LOOK_EVERY));
    let mut buffer = [0u8; 16 * 1024];
    loop {
        let (mode, current) = {
            let state = shared.state();
            (state.mode, state.generation)
        };
        if current != generation {
            return;
        }
        if mode == Mode::BlackHole {
            thread::sleep(LOOK_EVERY);
            continue;
        }
        match from.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&buffer[..n]).is_err() {
                    break;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

fn parse_args(args: &[String]) -> Result<(String, String), FlagError> {
    let (mut listen, mut upstream) = (None, None);
    let mut flags = Flags::new(args.iter().cloned());
    while let Some(flag) = flags.next_flag()? {
        match flag.as_str() {
            "--listen" => listen = Some(flags.value()?),
            "--upstream" => upstream = Some(flags.value()?),
            other => return Err(FlagError::Unknown(other.to_string())),
        }
    }
    Ok((
        listen.ok_or(FlagError::Missing("--listen ADDR"))?,
        upstream.ok_or(FlagError::Missing("--upstream ADDR"))?,
    ))
}
