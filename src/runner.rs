//! The runner: a fixed pool of worker threads that execute calls, a
//! maintenance ticker for the periodic jobs, a completer that records what
//! the store's writer committed, and the `Notifier` that wakes requests
//! waiting (`?wait=`) for a call to finish.
//!
//! A worker runs one attempt: `claim` (the lease; the worker waits for it to
//! commit, so no tool runs without a durable lease) → run the tool outside any
//! transaction → hand `succeed`/`fail` (fenced by the lease's attempt) to the
//! store's writer without waiting, and take the next call. Behind a quick call
//! (any tool but `sleep`, no chaos hook) a worker takes a second waiting call
//! and claims both in one operation: the claim round trip is what bounds how
//! many calls eight workers finish per commit, and the second call's tool still
//! starts within moments of its lease. Due calls this process did not submit
//! (a crash's, a retry's, another node's) arrive already claimed: the poll
//! claims as many as there are free workers in one store operation and a
//! worker runs each lease as it comes, with no second claim. A new call whose
//! worker a request reserved arrives claimed too (created `running`); a quick
//! one may be reserved past the free workers while only quick work is ahead
//! of it (`Capacity`), so under load most quick calls need no claim of their
//! own.
//!
//! Where each call is in this process — queued, waiting for its tool's slot,
//! claiming, running under a lease and when that lease is next extended,
//! completing — is one entry of the task table (`tasks`), under one lock. The
//! table only stops the same call being taken on twice in this process; it is
//! an optimisation, never a guarantee — the claim's conditional `UPDATE` is
//! what keeps two executors apart, in one process or several. Each
//! transition asserts the state it leaves, in a debug build, as `Capacity`
//! asserts it never goes below zero and a lease or completion that its
//! attempt is at least 1.
//!
//! Four rules keep real tools from hurting each other or the guarantees:
//! - a retryable failure with attempts left goes back to `pending` with a
//!   not-before time (`retry_scheduled`); no worker waits for it: the
//!   maintenance ticker's poll claims it once it is due;
//! - a cancelled call's tool is halted (`cancels`: each worker's `Stop`, asked
//!   in-process at once, or by the check every heartbeat interval, or by
//!   another node's notification), and its attempt completed under the
//!   same fence as any other;
//! - a tool's `max_concurrency` is enforced before a worker is involved: calls
//!   over the cap wait in the task table, `pending`, so a slow downstream
//!   cannot take every worker; a tool whose limits the database holds for
//!   every process (its cap on PostgreSQL, its `rate` on both) is claimed by
//!   the poll alone, through the store's claim that counts them (`limited`);
//! - while a tool runs, its lease is extended every third of the lease
//!   (`maintenance`), through the same fence as a completion, and never after
//!   the tool has returned.
//!
//! Map (this file holds no type); each part holds the handles it needs, not
//! the runner:
//! - `lifecycle`: `Runner` — start, stop, and the doors the call path and
//!   start-up use (`submit`, `reserve` + `adopt`, `recover_once`, the poll);
//! - `dispatch`: `Dispatch` — the task table, the workers' queue and the
//!   capacity they share: submit, the poll, reserve + adopt, slots passed on;
//! - `capacity`: `Capacity`, how many workers are spoken for; `limited`:
//!   `LimitedTools`, the tools claimed by the poll alone and their books;
//! - `tasks`: `TaskTable`, one entry per call taken on, and the slots;
//! - `pool`: `WorkerPool`, the threads (`worker-N`); `worker`: `Worker`, what
//!   each does with an assignment (claim, run, hand the completion over);
//! - `handed`: what a worker hands the store (`Finish`, `Handed`) and where
//!   the commit's outcome comes back (`Completions`): a leaf;
//! - `completion`: the `Completer` thread (`completer`), which records each
//!   completion once its commit is known and hands a refused one again;
//! - `chore`: `Chore` and `Doorbell`, the ticker's contract with its jobs (a
//!   leaf); `maintenance`: the `Ticker` thread (`maintenance`) and its chores —
//!   lease extension, heartbeat, `recovery`, key purge (`retention`), the
//!   check for cancels of the calls running here (`cancels`), the paused
//!   tools (`paused`, keeping `paused_set`'s `PausedSet`, what this process
//!   knows of them, a leaf), the
//!   bulk jobs (`bulk`: a batch at a time, under a rate), and the end of
//!   approval requests whose time is over (`approval_expiry`);
//! - `notifier`: `Notifier`; `stored_args`: a claimed call's args re-checked.
//!
//! Threads: `worker-N`, `maintenance`, `completer`; the poll runs on
//! `maintenance`, and on a PostgreSQL node's wake-up thread. `stop` ends and
//! joins all of them, except workers still inside a tool when the grace
//! period ends.

mod approval_expiry;
mod bulk;
mod cancels;
mod capacity;
mod chore;
mod completion;
mod dispatch;
mod handed;
mod lifecycle;
mod limited;
mod maintenance;
mod notifier;
mod paused;
mod paused_set;
mod pool;
mod recovery;
mod retention;
mod stored_args;
mod tasks;
mod worker;

pub(crate) use dispatch::log_claimed;
pub use dispatch::Reservation;
pub use lifecycle::{Runner, RunnerOptions};
pub use notifier::Notifier;
pub use retention::OnPurged;
