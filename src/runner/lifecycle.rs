//! `Runner`: the runner as the rest of the service sees it — built and
//! started once (`start`: the completer, the workers, the maintenance
//! ticker), stopped once (`stop`), and in between the few doors the call
//! path and the start-up wiring use: `submit`, `reserve` + `adopt`,
//! `recover_once`, `claim_due_work`, and `cancel` + `check_cancels` (a
//! cancelled call's tool stopped). Each door hands straight to the part
//! that owns the work (`Dispatch`, `Recovery`); nothing here runs a tool or
//! records a completion.
//!
//! `stop` is the one order that loses nothing and runs nothing twice: no
//! new call is taken, the workers finish their tools for up to the grace
//! period while their leases are still extended, the tools still running
//! then are stopped and waited for, only then are the leases still held
//! given back, and only then do the ticker and the completer end.

use super::approval_expiry::ApprovalExpiry;
use super::bulk::BulkWork;
use super::cancels::CancelCheck;
use super::chore::Doorbell;
use super::completion::Completer;
use super::dispatch::{Assignment, Dispatch, Reservation};
use super::maintenance::{self, Heartbeat, LeaseExtension, Ticker};
use super::notifier::Notifier;
use super::paused::PauseRefresh;
use super::paused_set::PausedSet;
use super::pool::WorkerPool;
use super::recovery::Recovery;
use super::retention::{OnPurged, Purge};
use super::tasks::TaskTable;
use super::worker::Worker;
use crate::lock::lock;
use crate::log;
use crate::metrics::Metrics;
use crate::store::{CallStore, Lease, PausedTool, StoreError, Toggled, ToolAtRelease};
use crate::tools::ToolRegistry;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a stop waits for the tools it halted once the grace period is
/// over: a command's group has 0.5 s between SIGTERM and SIGKILL (its
/// supervisor reports within seconds more, or is killed after 5.5 s and
/// waited for 5 s); an http request or a sleep returns at once. Only a
/// process stuck in the kernel takes it all.
const HALT_WAIT: Duration = Duration::from_secs(12);

/// How the runner behaves; filled from the command line.
#[derive(Debug, Clone)]
pub struct RunnerOptions {
    pub workers: usize,
    /// How long a claim lets a worker execute before others may take over;
    /// extended every third of it while the tool runs (`maintenance`).
    pub lease: Duration,
    pub recover_interval: Duration,
    /// Honour chaos hooks stored in a call's args.
    pub chaos: bool,
}

/// The worker pool, the maintenance ticker and the completer around one store.
pub struct Runner {
    /// The task table, the workers' queue and the capacity they share.
    dispatch: Arc<Dispatch>,
    /// What `recover_once` runs (and the ticker, on its interval).
    recovery: Recovery,
    /// What `check_cancels` runs (and the ticker, every heartbeat).
    cancels: CancelCheck,
    /// Taken and dropped (joined) by `stop`, after the grace period: the
    /// heartbeats go on while running tools finish.
    ticker: Mutex<Option<Ticker>>,
    /// Joined by `stop` once every completion already handed to the store is
    /// recorded.
    completer: Mutex<Option<Completer>>,
    /// The tools paused now, as this process knows (`paused`).
    paused: Arc<PausedSet>,
    /// For a pause or a resume made here.
    store: Arc<CallStore>,
}

impl Runner {
    /// Start `options.workers` workers, the completer and the maintenance
    /// ticker.
    pub fn start(
        store: Arc<CallStore>,
        options: RunnerOptions,
        notifier: Arc<Notifier>,
        tools: Arc<ToolRegistry>,
        metrics: Arc<Metrics>,
        on_purged: OnPurged,
    ) -> std::io::Result<Arc<Runner>> {
        let (completions, handoffs) = mpsc::channel();
        let (doorbell, listener) = Doorbell::new();
        let doorbell = Arc::new(doorbell);
        let paused = Arc::new(PausedSet::default());
        let dispatch = Arc::new(Dispatch::new(
            TaskTable::new(&tools, options.lease, completions),
            options.workers,
            options.lease,
            Arc::clone(&store),
            (Arc::clone(&notifier), Arc::clone(&doorbell)),
            Arc::clone(&metrics),
            Arc::clone(&paused),
        ));
        let recovery = Recovery {
            dispatch: Arc::clone(&dispatch),
            store: Arc::clone(&store),
            metrics: Arc::clone(&metrics),
            every: options.recover_interval,
        };
        let cancels = CancelCheck {
            dispatch: Arc::clone(&dispatch),
            store: Arc::clone(&store),
        };
        let runner = Arc::new(Runner {
            dispatch,
            recovery,
            cancels,
            ticker: Mutex::new(None),
            completer: Mutex::new(None),
            paused,
            store: Arc::clone(&store),
        });
        runner.refresh_paused(&metrics);
        let completer = Completer::start(
            Arc::clone(&runner.dispatch),
            Arc::clone(&store),
            Arc::clone(&notifier),
            Arc::clone(&metrics),
            Arc::clone(&doorbell),
            handoffs,
        );
        let started = completer.and_then(|completer| {
            *lock(&runner.completer) = Some(completer);
            runner.start_workers(&options, &store, tools, &metrics)?;
            let expiry = ApprovalExpiry {
                store: Arc::clone(&store),
                notifier: Arc::clone(&notifier),
                metrics: Arc::clone(&metrics),
            };
            let ticker_parts = (on_purged, expiry, (doorbell, listener));
            runner.start_ticker(&options, store, metrics, ticker_parts)
        });
        if let Err(e) = started {
            runner.stop(Duration::ZERO);
            return Err(e);
        }
        Ok(runner)
    }

    fn start_workers(
        &self,
        options: &RunnerOptions,
        store: &Arc<CallStore>,
        tools: Arc<ToolRegistry>,
        metrics: &Arc<Metrics>,
    ) -> std::io::Result<()> {
        let worker = Worker {
            dispatch: Arc::clone(&self.dispatch),
            store: Arc::clone(store),
            tools,
            metrics: Arc::clone(metrics),
            chaos: options.chaos,
        };
        let pool = WorkerPool::start(
            options.workers,
            "worker",
            |assignment: &Assignment| assignment.task().quick,
            move |taken| worker.work(taken),
        )?;
        self.dispatch.open(pool);
        Ok(())
    }

    fn start_ticker(
        &self,
        options: &RunnerOptions,
        store: Arc<CallStore>,
        metrics: Arc<Metrics>,
        (on_purged, expiry, (doorbell, listener)): (
            OnPurged,
            ApprovalExpiry,
            (Arc<Doorbell>, mpsc::Receiver<()>),
        ),
    ) -> std::io::Result<()> {
        let dispatch = &self.dispatch;
        let extra = maintenance::Extra {
            pauses: PauseRefresh {
                paused: Arc::clone(&self.paused),
                dispatch: Arc::clone(dispatch),
                store: Arc::clone(&store),
                metrics: Arc::clone(&metrics),
            },
            bulk: BulkWork::new(
                Arc::clone(dispatch),
                Arc::clone(&store),
                Arc::clone(&metrics),
                options.lease,
            ),
            expiry,
        };
        let chores = maintenance::chores(
            LeaseExtension {
                dispatch: Arc::clone(dispatch),
                store: Arc::clone(&store),
                lease: options.lease,
            },
            Heartbeat {
                store: Arc::clone(&store),
            },
            self.recovery.clone(),
            Purge {
                dispatch: Arc::clone(dispatch),
                store,
                metrics,
                on_purged,
            },
            self.cancels.clone(),
            extra,
        );
        let ticker = Ticker::start(Arc::clone(dispatch), chores, doorbell, listener)?;
        *lock(&self.ticker) = Some(ticker);
        Ok(())
    }

    /// Stop: no new call is taken (calls waiting for a concurrency slot stay
    /// `pending`), recovery ends, and each worker finishes the tool it is
    /// running and hands its completion to the store; their leases are still
    /// extended meanwhile. Tools still running after `grace` are stopped
    /// (`halt_running`) and waited for; then their leases are released (the
    /// call goes back to `pending`, audited `released` with how its tool was
    /// stopped, for the next process to run). Returns once every completion
    /// handed to the store is recorded, with the released call ids.
    /// Idempotent.
    pub fn stop(&self, grace: Duration) -> Vec<String> {
        let deadline = Instant::now() + grace;
        let mut pool = self.dispatch.stop();
        if let Some(pool) = &mut pool {
            pool.close();
            if !pool.wait_until_idle(deadline) {
                self.halt_running(pool);
            }
        }
        let released = self.release_held(self.dispatch.tasks().close());
        self.end_threads(pool);
        released
    }

    /// The grace period is over and tools still run: stop every one of them
    /// and wait (up to `HALT_WAIT`) for their workers to come back, so that
    /// no lease is given back while its tool may still act. A tool that
    /// still exits 0 within its stop's grace has its success recorded.
    fn halt_running(&self, pool: &WorkerPool<Assignment>) {
        let halted = self.dispatch.halt_running();
        log::info(
            "grace period over; stopping the tools still running before their leases go back",
        )
        .event("tools_halted")
        .number("tools", halted as u64)
        .emit();
        pool.wait_until_idle(Instant::now() + HALT_WAIT);
    }

    /// After the grace period: the ticker ends (only now: it kept the leases
    /// of the tools that finished during the grace period alive until they
    /// did), workers still inside a tool are let go and the others joined,
    /// and the completer ends once the writer has answered every completion
    /// handed to it.
    fn end_threads(&self, pool: Option<WorkerPool<Assignment>>) {
        let ticker = lock(&self.ticker).take();
        drop(ticker); // joined outside the lock
        if let Some(mut pool) = pool {
            let busy = pool.detach_busy();
            if busy > 0 {
                log::warn("workers still running a tool are left to end with the process")
                    .event("workers_detached")
                    .number("workers", busy as u64)
                    .emit();
            }
        }
        if let Some(completer) = lock(&self.completer).take() {
            completer.join();
        }
    }

    /// Give back the leases of calls this process did not complete, so that
    /// another process may run them at once instead of waiting for the
    /// leases to expire; the audit says what was done to each tool.
    fn release_held(&self, leases: Vec<(Lease, ToolAtRelease)>) -> Vec<String> {
        leases
            .into_iter()
            .filter(|(lease, tool)| self.dispatch.release(lease, tool))
            .map(|(lease, _)| lease.call_id)
            .collect()
    }

    /// Queue a call of `tool` unless this process already has it queued,
    /// waiting for a concurrency slot, or running. `quick`: its tool is known
    /// to return at once (see `ToolSpec::is_quick`) and it carries no chaos
    /// hook; say `false` when unsure.
    pub fn submit(&self, call_id: &str, tool: &str, quick: bool) {
        self.dispatch.submit(call_id, tool, quick);
    }

    /// Hold a free worker and a slot of `tool` for a call this process is
    /// about to claim itself (e.g. create it already `running`): see
    /// `Dispatch::reserve`. `None`: claim nothing, and `submit` instead.
    pub fn reserve(&self, tool: &str, quick: bool) -> Option<Reservation<'_>> {
        self.dispatch.reserve(tool, quick)
    }

    /// Run a call this process has already claimed on the worker
    /// `reservation` holds (see `Dispatch::adopt`).
    pub fn adopt(&self, reservation: Reservation<'_>, lease: Lease) {
        self.dispatch.adopt(reservation, lease);
    }

    /// One pass of recovery (see `recovery`); also what runs at start-up.
    pub fn recover_once(&self) {
        self.recovery.run_once();
    }

    /// A call's cancel was just recorded (of `attempt`): if its tool runs in
    /// this process, it is halted now, and if it is about to start here, it
    /// never starts. `true` when a running tool was asked to stop.
    pub fn cancel(&self, call_id: &str, attempt: i64) -> bool {
        self.dispatch.stop_running(call_id, Some(attempt))
    }

    /// Ask the store which calls running here were cancelled (elsewhere),
    /// and halt their tools (see `cancels`): what a cancel wake-up from
    /// another node runs. Returns how many were asked to stop.
    pub fn check_cancels(&self) -> usize {
        self.cancels.run_once()
    }

    /// The poll: claim as many due calls as there are free workers, in one
    /// store operation, and run them (see `Dispatch::claim_due_work`).
    /// Returns how many were claimed.
    pub fn claim_due_work(&self) -> usize {
        self.dispatch.claim_due_work()
    }

    /// Calls were sent back to `pending` here (a re-run): poll for them at
    /// once rather than at the next interval.
    pub fn poll_soon(&self) {
        self.dispatch.poll_soon();
    }

    /// Every paused tool, as this process knows (`paused`).
    pub fn paused_tools(&self) -> Vec<PausedTool> {
        self.paused.all()
    }

    /// `tool`'s pause, if it is paused.
    pub fn paused(&self, tool: &str) -> Option<PausedTool> {
        self.paused.get(tool)
    }

    /// Whether this process holds `call_id` waiting for its tool's slot.
    pub fn waits_for_slot(&self, call_id: &str) -> bool {
        self.dispatch.tasks().waits_for_slot(call_id)
    }

    /// Pause `tool` for every process (`store::paused`), and know it here
    /// at once.
    pub fn pause(&self, tool: &str, by: &str, reason: Option<&str>) -> Result<Toggled, StoreError> {
        let toggled = self.store.pause_tool(tool, by, reason)?;
        if let Toggled::Now(Some(paused)) | Toggled::Already(Some(paused)) = &toggled {
            self.paused.insert(paused.clone());
        }
        Ok(toggled)
    }

    /// Resume `tool` for every process, and poll for its calls at once.
    pub fn resume(&self, tool: &str) -> Result<Toggled, StoreError> {
        let toggled = self.store.resume_tool(tool)?;
        self.paused.remove(tool);
        self.dispatch.poll_soon();
        Ok(toggled)
    }

    /// Read the paused tools now (start-up; then every interval).
    fn refresh_paused(&self, metrics: &Arc<Metrics>) {
        PauseRefresh {
            paused: Arc::clone(&self.paused),
            dispatch: Arc::clone(&self.dispatch),
            store: Arc::clone(&self.store),
            metrics: Arc::clone(metrics),
        }
        .run_once();
    }
}
