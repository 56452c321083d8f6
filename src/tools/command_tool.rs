//! The `command` executor: one attempt is one run of the configured `argv`
//! (directly, no shell) in a process group of its own, with the call's JSON on
//! stdin and `IDEMPOTENCY_KEY`, `CALL_ID`, `EFFECT_ID`, `ATTEMPT` in its
//! environment; its exit status is classified into an [`Outcome`].
//!
//! It owns the child's whole life: the run ends by the timeout at the latest
//! (SIGTERM to the group, SIGKILL after a short grace, so a child that ignores
//! SIGTERM and the processes it started die too), or as soon as its call is
//! cancelled (the run's `Stop` sends the same SIGTERM, then SIGKILL after
//! the same grace; `Outcome::Stopped`, unless the command still exits 0
//! within the grace, which is its answer), stdout is capped at 1 MiB,
//! only the last 4 KiB of stderr are kept, and whatever the command left
//! running in its group is killed when it exits. It must never wait on a
//! child without a deadline, never read output without a cap, and never put
//! argv or a configured `env` value into an error.

use super::error_code::ToolErrorCode;
use super::excerpt::{tail_excerpt, EXCERPT_BYTES, MAX_OUTPUT_BYTES};
use super::outcome::{Effect, Outcome, ToolError};
use super::secret::{redact_all, Secret};
use super::spec::RunContext;
use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::pipe2;
use nix::unistd::Pid;
use serde_json::{json, Value};
use std::fmt;
use std::io::{self, BufRead, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// Variables the executor sets itself; the tools file may not set them.
pub const RESERVED_ENV: [&str; 5] = [
    "IDEMPOTENCY_KEY",
    "CALL_ID",
    "EFFECT_ID",
    "ATTEMPT",
    "PROGRESS_FD",
];
/// The exit status that asks for a retry (`EX_TEMPFAIL` in sysexits.h).
pub const EXIT_TEMPFAIL: i32 = 75;
/// How long a timed-out group has between SIGTERM and SIGKILL.
pub const TERM_GRACE: Duration = Duration::from_millis(500);
/// How long to wait for the output pipes to close once the group is gone; a
/// process that left the group (`setsid`) may hold them open forever.
const DRAIN_WAIT: Duration = Duration::from_secs(1);

/// One configured `command` tool.
pub struct CommandTool {
    /// `argv[0]`, already resolved against the tools file's folder or `PATH`.
    program: PathBuf,
    /// `argv[1..]`.
    args: Vec<String>,
    env: Vec<(String, Secret)>,
    timeout: Duration,
}

impl fmt::Debug for CommandTool {
    /// No argv, no env: this reaches logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CommandTool { .. }")
    }
}

/// What the waiting worker hears: the child's end, or a cancel's stop
/// (whose halt has already sent SIGTERM to the group).
enum Waited {
    Exited(io::Result<ExitStatus>),
    Stop,
}

/// How the child's run ended, before classification.
enum Ended {
    Exited(ExitStatus),
    TimedOut,
    /// Its call was cancelled; `killed`: it outlived SIGTERM's grace.
    Stopped {
        killed: bool,
    },
    /// The child could not be waited for (should not happen).
    Lost(io::Error),
}

impl CommandTool {
    pub fn new(
        program: PathBuf,
        args: Vec<String>,
        env: Vec<(String, Secret)>,
        timeout: Duration,
    ) -> CommandTool {
        CommandTool {
            program,
            args,
            env,
            timeout,
        }
    }

    /// One attempt: run the command to its end, its timeout or its stop,
    /// classify.
    pub fn run(&self, ctx: &RunContext) -> Outcome {
        let (mut child, progress) = match self.spawn(ctx) {
            Ok(spawned) => spawned,
            Err(e) => return Outcome::failed(spawn_failure(&e)),
        };
        read_progress(progress, ctx.call_id.to_string());
        let group = Pid::from_raw(child.id() as i32);
        let waited = mpsc::channel();
        if let Some(stop) = ctx.stop {
            stop.mark_sent();
            let woken = waited.0.clone();
            stop.arm(Box::new(move || {
                let _ = killpg(group, Signal::SIGTERM);
                let _ = woken.send(Waited::Stop);
            }));
        }
        feed_stdin(&mut child, ctx.request_body().to_string());
        let overflow = Arc::new(AtomicBool::new(false));
        let stdout = Capture::head(child.stdout.take(), group, Arc::clone(&overflow));
        let stderr = Capture::tail(child.stderr.take());
        let ended = self.wait_bounded(child, group, waited);
        if let Some(stop) = ctx.stop {
            stop.disarm();
        }
        // The command is done; anything it left in its group goes with it, so
        // the pipes close and nothing outlives the attempt.
        let _ = killpg(group, Signal::SIGKILL);
        let stdout = stdout.finish();
        let stderr = self.redact(&tail_excerpt(&stderr.finish()));
        if overflow.load(Ordering::SeqCst) {
            let mut error = ToolError::new(ToolErrorCode::CommandOutputTooLarge, format!("the command wrote more than {MAX_OUTPUT_BYTES} bytes to stdout and was stopped"));
            error.stderr = Some(stderr);
            return Outcome::failed(error);
        }
        self.classify(ended, &stdout, stderr)
    }

    /// Start the child, with the write end of a fresh pipe as its
    /// ``; the read end is returned.
    fn spawn(&self, ctx: &RunContext) -> io::Result<(Child, OwnedFd)> {
        let mut command = Command::new(&self.program);
        command
            .args(&self.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own group: the timeout can then reach everything it started.
            .process_group(0);
        for (name, value) in &self.env {
            command.env(name, value.expose());
        }
        command
            .env("IDEMPOTENCY_KEY", ctx.effect_id)
            .env("CALL_ID", ctx.call_id)
            .env("EFFECT_ID", ctx.effect_id)
            .env("ATTEMPT", ctx.attempt.to_string());
        // The write end must reach this child and no other: it is made
        // inheritable only while this spawn holds the lock every command
        // spawn takes, and this process's copy is closed before the lock
        // goes (no unsafe pre-exec hook needed).
        static SPAWNING: Mutex<()> = Mutex::new(());
        let _only_this_child = SPAWNING.lock().unwrap_or_else(|p| p.into_inner());
        let (read, write) = pipe2(OFlag::O_CLOEXEC).map_err(io::Error::from)?;
        fcntl(&write, FcntlArg::F_SETFD(FdFlag::empty())).map_err(io::Error::from)?;
        command.env("PROGRESS_FD", write.as_raw_fd().to_string());
        let child = command.spawn()?;
        drop(write);
        Ok((child, read))
    }

    /// Wait for the child until the timeout or a stop; past the timeout,
    /// SIGTERM the group, and SIGKILL it after `TERM_GRACE`; after a stop's
    /// SIGTERM, the same grace, then SIGKILL.
    fn wait_bounded(
        &self,
        mut child: Child,
        group: Pid,
        (done, waited): (mpsc::Sender<Waited>, mpsc::Receiver<Waited>),
    ) -> Ended {
        let waiter = thread::Builder::new()
            .name("command-wait".into())
            .spawn(move || {
                let _ = done.send(Waited::Exited(child.wait()));
            });
        if let Err(e) = waiter {
            let _ = killpg(group, Signal::SIGKILL);
            return Ended::Lost(e);
        }
        match waited.recv_timeout(self.timeout) {
            Ok(Waited::Exited(Ok(status))) => Ended::Exited(status),
            Ok(Waited::Exited(Err(e))) => Ended::Lost(e),
            Ok(Waited::Stop) => match end_group(group, &waited) {
                // Within the grace it still answered: that is its outcome.
                Some(status) if status.success() => Ended::Exited(status),
                Some(_) => Ended::Stopped { killed: false },
                None => Ended::Stopped { killed: true },
            },
            Err(_) => {
                let _ = killpg(group, Signal::SIGTERM);
                end_group(group, &waited);
                Ended::TimedOut
            }
        }
    }

    fn classify(&self, ended: Ended, stdout: &[u8], stderr: String) -> Outcome {
        let status = match ended {
            Ended::Exited(status) => status,
            Ended::Stopped { killed } => {
                let how = if killed {
                    format!(
                        "its process group got SIGTERM, then SIGKILL after {} ms",
                        TERM_GRACE.as_millis()
                    )
                } else {
                    "its process group got SIGTERM and ended".to_string()
                };
                return Outcome::Stopped { sent: true, how };
            }
            Ended::TimedOut => {
                let mut error = ToolError::new(
                    ToolErrorCode::CommandTimeout,
                    format!(
                        "the command ran past its timeout of {} ms; its process group was killed",
                        self.timeout.as_millis()
                    ),
                );
                error.stderr = Some(stderr);
                return Outcome::failed(error);
            }
            Ended::Lost(e) => {
                return Outcome::failed(
                    ToolError::new(
                        ToolErrorCode::CommandFailed,
                        format!("the command could not be waited for: {e}"),
                    )
                    .with_retryable(true),
                )
            }
        };
        let mut error = match (status.code(), status.signal()) {
            (Some(0), _) => {
                let result = serde_json::from_slice::<Value>(stdout)
                    .unwrap_or_else(|_| json!({"stdout": String::from_utf8_lossy(stdout)}));
                return Outcome::Succeeded {
                    result,
                    effect: Some(Effect {
                        amount: None,
                        detail: Some(json!({"exit_code": 0})),
                    }),
                };
            }
            (Some(EXIT_TEMPFAIL), _) => ToolError::new(
                ToolErrorCode::CommandTempfail,
                format!("the command exited {EXIT_TEMPFAIL} (EX_TEMPFAIL); it may succeed later"),
            ),
            (Some(code), _) => ToolError::new(
                ToolErrorCode::CommandFailed,
                format!("the command exited {code}"),
            ),
            (None, Some(signal)) => {
                let mut error = ToolError::new(
                    ToolErrorCode::CommandKilled,
                    format!("the command was killed by signal {signal}"),
                );
                error.signal = Some(signal);
                error
            }
            (None, None) => ToolError::new(
                ToolErrorCode::CommandFailed,
                "the command ended without a status",
            ),
        };
        error.exit_code = status.code();
        error.stderr = Some(stderr);
        Outcome::failed(error)
    }

    fn redact(&self, text: &str) -> String {
        redact_all(text, self.env.iter().map(|(_, value)| value))
    }
}

/// After SIGTERM: the group's end within `TERM_GRACE` (its exit status), or
/// SIGKILL and `None`. Another stop heard meanwhile changes nothing.
fn end_group(group: Pid, waited: &mpsc::Receiver<Waited>) -> Option<ExitStatus> {
    let deadline = Instant::now() + TERM_GRACE;
    loop {
        match waited.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(Waited::Exited(status)) => return status.ok(),
            Ok(Waited::Stop) => continue,
            Err(_) => break,
        }
    }
    let _ = killpg(group, Signal::SIGKILL);
    // SIGKILL cannot be ignored; the bound only guards a process stuck in
    // the kernel.
    let _ = waited.recv_timeout(Duration::from_secs(5));
    None
}

/// Most spawn failures are configuration (a missing or non-executable file);
/// a busy executable or a full process table clear up by themselves.
fn spawn_failure(error: &io::Error) -> ToolError {
    let retryable = matches!(
        error.kind(),
        io::ErrorKind::ExecutableFileBusy | io::ErrorKind::WouldBlock | io::ErrorKind::OutOfMemory
    );
    ToolError::new(
        ToolErrorCode::CommandSpawnFailed,
        format!("cannot start the command: {error}"),
    )
    .with_retryable(retryable)
}

/// Read the child's progress lines on a thread into the board; it ends when
/// every copy of the write end is closed (the group is killed at the end of
/// every run). At most `MAX_OUTPUT_BYTES` are read (the rest is drained),
/// and a line over 4 KiB is ignored.
fn read_progress(pipe: OwnedFd, call_id: String) {
    let _ = thread::Builder::new()
        .name("command-progress".into())
        .spawn(move || {
            let mut file = std::fs::File::from(pipe);
            let bounded = io::BufReader::new((&mut file).take(MAX_OUTPUT_BYTES as u64));
            for line in bounded.split(b'\n') {
                let Ok(line) = line else { break };
                if line.len() <= 4096 {
                    super::progress::board().report_line(&call_id, &line);
                }
            }
            // Past the budget, drained unread: a child must never block on it.
            let _ = io::copy(&mut file, &mut io::sink());
        });
}

/// Write the body on a thread: a command that never reads stdin must not block
/// the worker once the pipe is full. A closed pipe is the command's business.
fn feed_stdin(child: &mut Child, body: String) {
    if let Some(mut stdin) = child.stdin.take() {
        let _ = thread::Builder::new()
            .name("command-stdin".into())
            .spawn(move || {
                let _ = stdin.write_all(body.as_bytes());
            });
    }
}

/// Output read on its own thread into a shared buffer, so the run can end (and
/// take what was read) even if a straggler keeps the pipe open.
struct Capture {
    buffer: Arc<Mutex<Vec<u8>>>,
    closed: mpsc::Receiver<()>,
}

impl Capture {
    /// The first `MAX_OUTPUT_BYTES`; one byte more kills the group and sets
    /// `overflow` (the rest is drained and dropped).
    fn head(
        pipe: Option<impl Read + Send + 'static>,
        group: Pid,
        overflow: Arc<AtomicBool>,
    ) -> Capture {
        Capture::spawn(pipe, move |buffer, chunk| {
            if buffer.len() + chunk.len() > MAX_OUTPUT_BYTES {
                if !overflow.swap(true, Ordering::SeqCst) {
                    let _ = killpg(group, Signal::SIGKILL);
                }
                let room = MAX_OUTPUT_BYTES.saturating_sub(buffer.len());
                buffer.extend_from_slice(&chunk[..room.min(chunk.len())]);
            } else {
                buffer.extend_from_slice(chunk);
            }
        })
    }

    /// About the last `2 × EXCERPT_BYTES` (enough for a 4 KiB tail).
    fn tail(pipe: Option<impl Read + Send + 'static>) -> Capture {
        Capture::spawn(pipe, |buffer, chunk| {
            buffer.extend_from_slice(chunk);
            if buffer.len() > 2 * EXCERPT_BYTES {
                let cut = buffer.len() - EXCERPT_BYTES;
                buffer.drain(..cut);
            }
        })
    }

    fn spawn(
        pipe: Option<impl Read + Send + 'static>,
        mut keep: impl FnMut(&mut Vec<u8>, &[u8]) + Send + 'static,
    ) -> Capture {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let (close, closed) = mpsc::channel();
        if let Some(mut pipe) = pipe {
            let shared = Arc::clone(&buffer);
            let _ = thread::Builder::new()
                .name("command-output".into())
                .spawn(move || {
                    let mut chunk = [0u8; 8192];
                    while let Ok(n @ 1..) = pipe.read(&mut chunk) {
                        keep(
                            &mut shared.lock().unwrap_or_else(|p| p.into_inner()),
                            &chunk[..n],
                        );
                    }
                    let _ = close.send(());
                });
        }
        Capture { buffer, closed }
    }

    /// What was read, once the pipe closed or `DRAIN_WAIT` passed.
    fn finish(self) -> Vec<u8> {
        let _ = self.closed.recv_timeout(DRAIN_WAIT);
        std::mem::take(&mut *self.buffer.lock().unwrap_or_else(|p| p.into_inner()))
    }
}
