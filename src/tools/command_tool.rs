//! The `command` executor: one attempt is one run of the configured `argv`
//! (directly, no shell) in a process group of its own, with the call's JSON on
//! stdin and `IDEMPOTENCY_KEY`, `CALL_ID`, `EFFECT_ID`, `ATTEMPT` in its
//! environment; its exit status is classified into an [`Outcome`].
//!
//! It owns the child's whole life: the run ends by the timeout at the latest
//! (SIGTERM to the group, SIGKILL after a short grace, so a child that ignores
//! SIGTERM and the processes it started die too), or as soon as its call is
//! cancelled or the service's stop has waited long enough (the run's `Stop`
//! sends the same SIGTERM, then SIGKILL after the same grace;
//! `Outcome::Stopped`, unless the command still exits 0 within the grace,
//! which is its answer), stdout is capped at 1 MiB, only the last 4 KiB of
//! stderr are kept, and whatever the command left running is killed when
//! it exits. How the processes are started and signalled — under the
//! supervisor, which also stops them if the service dies, or directly —
//! is `command_process`. It must never wait on a child without a deadline,
//! never read output without a cap, and never put argv or a configured
//! `env` value into an error.

use super::command_process::{self, End, Handle, Input};
use super::error_code::ToolErrorCode;
use super::excerpt::{tail_excerpt, EXCERPT_BYTES, MAX_OUTPUT_BYTES};
use super::outcome::{Effect, Outcome, ToolError};
use super::secret::{redact_all, Secret};
use super::spec::RunContext;
use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};
use nix::unistd::pipe2;
use serde_json::{json, Value};
use std::fmt;
use std::io::{self, BufRead, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;
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

/// What the waiting worker hears: the child's end, or a stop (whose halt
/// has already sent SIGTERM to the group).
enum Waited {
    Ended(End),
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
    /// The supervisor could not start the command.
    NotStarted(io::Error),
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
        let (started, progress) = match self.start(ctx) {
            Ok(started) => started,
            Err(e) => return Outcome::failed(spawn_failure(&e)),
        };
        read_progress(progress, ctx.call_id.to_string());
        let handle = started.handle;
        let waited = mpsc::channel();
        if let Some(stop) = ctx.stop {
            stop.mark_sent();
            let woken = waited.0.clone();
            stop.arm(Box::new(move || {
                handle.terminate();
                let _ = woken.send(Waited::Stop);
            }));
        }
        feed_stdin(started.input, ctx.request_body().to_string());
        let overflow = Arc::new(AtomicBool::new(false));
        let stdout = Capture::head(started.stdout, handle, Arc::clone(&overflow));
        let stderr = Capture::tail(started.stderr);
        let ended = self.wait_bounded(started.waiting, handle, waited);
        if let Some(stop) = ctx.stop {
            stop.disarm();
        }
        // The command is done; anything it left in its group goes with it, so
        // the pipes close and nothing outlives the attempt.
        handle.after_exit();
        let stdout = stdout.finish();
        let stderr = self.redact(&tail_excerpt(&stderr.finish()));
        if overflow.load(Ordering::SeqCst) {
            let mut error = ToolError::new(ToolErrorCode::CommandOutputTooLarge, format!("the command wrote more than {MAX_OUTPUT_BYTES} bytes to stdout and was stopped"));
            error.stderr = Some(stderr);
            return Outcome::failed(error);
        }
        self.classify(ended, &stdout, stderr)
    }

    /// Start the attempt (under its supervisor where there is one), with
    /// the write end of a fresh pipe as its `PROGRESS_FD`; the read end is
    /// returned.
    fn start(&self, ctx: &RunContext) -> io::Result<(command_process::Started, OwnedFd)> {
        let attempt = ctx.attempt.to_string();
        let own = self
            .env
            .iter()
            .map(|(name, value)| (name.as_str(), value.expose()));
        // The write end must reach this attempt and no other: it is made
        // inheritable only while this spawn holds the lock every command
        // spawn takes, and this process's copy is closed before the lock
        // goes (no unsafe pre-exec hook needed). A supervisor passes it on
        // to the tool as it is.
        static SPAWNING: Mutex<()> = Mutex::new(());
        let _only_this_child = SPAWNING.lock().unwrap_or_else(|p| p.into_inner());
        let (read, write) = pipe2(OFlag::O_CLOEXEC).map_err(io::Error::from)?;
        fcntl(&write, FcntlArg::F_SETFD(FdFlag::empty())).map_err(io::Error::from)?;
        let progress_fd = write.as_raw_fd().to_string();
        let reserved = [
            ("IDEMPOTENCY_KEY", ctx.effect_id),
            ("CALL_ID", ctx.call_id),
            ("EFFECT_ID", ctx.effect_id),
            ("ATTEMPT", attempt.as_str()),
            ("PROGRESS_FD", progress_fd.as_str()),
        ];
        let started = command_process::start(&self.program, &self.args, own.chain(reserved))?;
        drop(write);
        Ok((started, read))
    }

    /// Wait for the child until the timeout or a stop; past the timeout,
    /// SIGTERM the group, and SIGKILL it after `TERM_GRACE`; after a stop's
    /// SIGTERM, the same grace, then SIGKILL.
    fn wait_bounded(
        &self,
        waiting: command_process::Waiting,
        handle: Handle,
        (done, waited): (mpsc::Sender<Waited>, mpsc::Receiver<Waited>),
    ) -> Ended {
        let waiter = thread::Builder::new()
            .name("command-wait".into())
            .spawn(move || {
                let _ = done.send(Waited::Ended(command_process::wait(waiting)));
            });
        if let Err(e) = waiter {
            handle.give_up();
            return Ended::Lost(e);
        }
        match waited.recv_timeout(self.timeout) {
            Ok(Waited::Ended(end)) => match end {
                End::Exited { status, .. } => Ended::Exited(status),
                End::NotStarted(e) => Ended::NotStarted(e),
                End::Lost(e) => Ended::Lost(e),
            },
            Ok(Waited::Stop) => match end_group(handle, &waited) {
                // Within the grace it still answered: that is its outcome.
                Some((status, _)) if status.success() => Ended::Exited(status),
                Some((_, killed)) => Ended::Stopped { killed },
                None => Ended::Stopped { killed: true },
            },
            Err(_) => {
                handle.terminate();
                end_group(handle, &waited);
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
            Ended::NotStarted(e) => return Outcome::failed(spawn_failure(&e)),
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

/// After SIGTERM: the group's end within its grace (its exit status, and
/// whether a supervisor had to SIGKILL it), or SIGKILL and `None`. Another
/// stop heard meanwhile changes nothing.
fn end_group(handle: Handle, waited: &mpsc::Receiver<Waited>) -> Option<(ExitStatus, bool)> {
    let deadline = Instant::now() + handle.stop_takes();
    loop {
        match waited.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(Waited::Ended(End::Exited { status, killed })) => return Some((status, killed)),
            Ok(Waited::Ended(_)) => return None,
            Ok(Waited::Stop) => continue,
            Err(_) => break,
        }
    }
    handle.give_up();
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
    // An earlier attempt's reports are not this one's.
    super::progress::board().forget(&call_id);
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
fn feed_stdin(input: Input, body: String) {
    let _ = thread::Builder::new()
        .name("command-stdin".into())
        .spawn(move || input.feed(body.as_bytes()));
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
        handle: Handle,
        overflow: Arc<AtomicBool>,
    ) -> Capture {
        Capture::spawn(pipe, move |buffer, chunk| {
            if buffer.len() + chunk.len() > MAX_OUTPUT_BYTES {
                if !overflow.swap(true, Ordering::SeqCst) {
                    handle.kill();
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

#[cfg(test)]
mod tests {
    //! The direct way, as a process that names no supervisor runs its
    //! command tools (this test binary names none); the supervised way is
    //! `tests/it/tools_command_executor.rs`, through the real binary.
    use super::*;
    use crate::tools::DEFAULT_TIMEOUT;
    use serde_json::Map;

    fn run(script: &str, timeout: Duration) -> Outcome {
        let tool = CommandTool::new(
            PathBuf::from("/bin/sh"),
            vec!["-c".into(), script.into()],
            Vec::new(),
            timeout,
        );
        let args = Map::new();
        tool.run(&RunContext {
            call_id: "c",
            effect_id: "e",
            attempt: 1,
            tool: "t",
            args: &args,
            stop: None,
        })
    }

    fn failure(outcome: Outcome) -> ToolError {
        match outcome {
            Outcome::Failed { error, .. } => error,
            other => panic!("expected a failure, got {other:?}"),
        }
    }

    /// Exit 0 answers with stdout; 75 asks for a retry; a signal is a kill.
    #[test]
    fn a_direct_run_classifies_its_exit() {
        assert!(matches!(
            run("cat >/dev/null; echo '{\"ok\":1}'", DEFAULT_TIMEOUT),
            Outcome::Succeeded { result, .. } if result == json!({"ok": 1})
        ));
        let tempfail = failure(run("exit 75", DEFAULT_TIMEOUT));
        assert_eq!(
            (tempfail.code, tempfail.retryable),
            (ToolErrorCode::CommandTempfail, true)
        );
        let killed = failure(run("kill -9 $$", DEFAULT_TIMEOUT));
        assert_eq!(
            (killed.code, killed.signal),
            (ToolErrorCode::CommandKilled, Some(9))
        );
    }

    /// Past its timeout a group that ignores SIGTERM is killed, within the
    /// grace, and the run says it timed out.
    #[test]
    fn a_direct_run_past_its_timeout_kills_its_group() {
        let started = Instant::now();
        let error = failure(run(
            "trap '' TERM; sleep 30 & wait",
            Duration::from_millis(300),
        ));
        assert_eq!(error.code, ToolErrorCode::CommandTimeout);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
    }
}
