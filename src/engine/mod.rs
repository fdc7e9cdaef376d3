//! The engine: one kernel, one queue, cells run one at a time in submission order.
//!
//! Owns: the request queue, the kernel's lifecycle (eager start, rebuild after death), aborts
//! (interrupt, grace, kill), the silence watchdog, and turning a cell's ending into an
//! `Outcome`. Front doors (CLI, MCP) only `submit` and read events and outcomes.
//!
//! Its vocabulary lives here too, so one `execute` call is followed in one folder from queue
//! to outcome: `execution` (one cell as a pure state machine), `output` (caps, head and tail,
//! spill files), `outcome` (what a cell returns, the events it streams, the reset notice),
//! `live_view` (a running cell's output, published in place for readers who show it while it
//! runs), `widgets` (ipywidgets as text, for `execution`). The session's notebook for people
//! (`notebook`) is written by the runner after every cell from the same vocabulary.
//!
//! Invariants:
//! - Cells run in the order `submit` was called, one at a time.
//! - Every submitted cell settles: with an outcome, or an `EngineError` when the engine could
//!   not run it (kernel cannot start, engine stopped). By construction: a `Request` dropped
//!   unanswered settles with `EngineError::Lost` as it goes. A cancelled queued cell settles at once
//!   without running. Nothing waits forever on a dead kernel: its death ends the running cell
//!   and the next cell starts a fresh kernel.
//! - The first outcome after a kernel was lost carries a `Reset` saying why.
//! - `shutdown` flushes a due snapshot before it stops the kernel; `shutdown_now` (a stop
//!   signal) gives the flush only the budget it is passed, then kills the kernel:
//!   a committed snapshot is never harmed by a kill, and cells whose effects were not saved are
//!   named by the next start (`unsaved_log`).

mod attach_file;
mod cell;
pub mod execution;
mod host_call;
mod kernel_slot;
mod late_output;
pub mod live_view;
pub mod notebook;
pub mod outcome;
pub mod output;
mod runner;
mod save_child;
mod save_lock;
mod save_schedule;
mod snapshots;
mod stdin_requests;
mod unsaved_log;
mod visitors;
pub mod widgets;
mod workspace;

pub use snapshots::{
    DEFAULT_MAX_BINDING_BYTES, DEFAULT_MAX_TOTAL_BYTES, DEFAULT_REFRESH, DEFAULT_REWIND_MAX_BYTES,
    REWIND_STATES, SAVE_CHILD_LIMIT, SnapshotSettings,
};

pub use attach_file::ATTACH_FILE;
pub use cell::{never_ran, quote_code};
pub use stdin_requests::{Served, StdinCall, StdinService, SubAgents};

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::engine::live_view::LiveView;
use crate::engine::outcome::{CellEvent, Outcome};
use crate::engine::output::OutputLimits;
use crate::helpers::LoadRecord;
use crate::kernel::{KernelError, KernelSpec};

/// Default bound on a kernel's boot.
pub const DEFAULT_BOOT_TIMEOUT: Duration = Duration::from_secs(90);

/// Default time an interrupted cell gets before its kernel is killed.
pub const DEFAULT_ABORT_GRACE: Duration = Duration::from_secs(20);

/// An urgent stop, shared by the handle and the runner: set once, with how long a due
/// snapshot may still try to commit before the kernel is killed.
#[derive(Clone, Default)]
pub(crate) struct Hurry {
    token: CancellationToken,
    flush_budget_ms: Arc<std::sync::atomic::AtomicU64>,
    /// The current local kernel's process group and tag, set by the runner: an urgent stop that
    /// does not wait for the engine kills it with these (`Engine::shutdown_now`).
    kernel: Arc<Mutex<Option<(i32, String)>>>,
}

impl Hurry {
    fn start(&self, flush_budget: Duration) {
        self.flush_budget_ms.store(
            flush_budget.as_millis() as u64,
            std::sync::atomic::Ordering::SeqCst,
        );
        self.token.cancel();
    }

    pub(crate) fn is_on(&self) -> bool {
        self.token.is_cancelled()
    }

    pub(crate) async fn started(&self) {
        self.token.cancelled().await
    }

    /// Remembers the kernel an urgent stop kills (`None`: there is none now).
    pub(crate) fn set_kernel(&self, target: Option<(i32, String)>) {
        if let Ok(mut slot) = self.kernel.lock() {
            *slot = target;
        }
    }

    /// True when the current kernel is a local one (an urgent stop may kill it itself).
    fn has_local_kernel(&self) -> bool {
        self.kernel.lock().is_ok_and(|slot| slot.is_some())
    }

    /// Kills the current local kernel's process group and every process with its tag (save
    /// children spared): what the runner does at an urgent stop, done here when it is late.
    fn kill_kernel(&self) {
        let target = self.kernel.lock().ok().and_then(|slot| slot.clone());
        if let Some((group, tag)) = target {
            crate::kernel::leftovers::kill_tagged(group, &tag);
        }
    }

    pub(crate) fn flush_budget(&self) -> Duration {
        Duration::from_millis(
            self.flush_budget_ms
                .load(std::sync::atomic::Ordering::SeqCst),
        )
    }
}

/// How long an urgent stop waits for the engine past its flush budget (a running cell settling
/// after its kernel was killed, the kernel's exit read).
pub const URGENT_JOIN_MARGIN: Duration = Duration::from_millis(25);

/// How the engine runs.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub kernel: KernelSpec,
    pub boot_timeout: Duration,
    pub abort_grace: Duration,
    /// Interrupt a cell that prints nothing for this long.
    pub silence_timeout: Option<Duration>,
    pub limits: OutputLimits,
    /// Where the full output of truncated cells is written.
    pub output_dir: Option<PathBuf>,
    /// Helper files to load into every kernel, in load order (see `helpers::Discovery`).
    pub helpers: Vec<PathBuf>,
    /// Snapshots of a durable session; `None` for an ephemeral workspace.
    pub snapshot: Option<SnapshotSettings>,
    /// Told to the first cell (how the session started, ...).
    pub notices: Vec<String>,
    /// Who answers a cell's `llm_query`, and its budget; `None`: nobody (the cell is told
    /// what to configure).
    pub llm: Option<crate::llm::kernel_requests::Answerer>,
    /// Who starts a cell's sub-agents (`spawn_agent`; `cli/stdin_services.rs` wires the
    /// supervisor in); `None`: a cell that asks is told they are not available here.
    pub agents: Option<Arc<dyn SubAgents>>,
    /// Who runs a cell's host tools (`tools.<name>(...)`: the MCP client, in pi;
    /// `cli/stdin_services.rs` wires it in, unconnected for `exec` and `agent`, which tells a
    /// cell host tools exist only under pi); `None`: a cell that asks is told they are not
    /// available here.
    pub host_tools: Option<Arc<dyn StdinService>>,
    /// The live notebook of the session for people (`notebook`), rewritten after every cell;
    /// `None`: none is written.
    pub notebook: Option<PathBuf>,
    /// Where a durable session's live local kernel is described for another Jupyter client
    /// (`pi-repl attach`, `attach_file`); `None`: nowhere.
    pub attach_file: Option<PathBuf>,
    /// A sub-agent's workspace forked live from its parent's (`spawn_agent(fork=True)`): the
    /// first kernel is that copy, adopted instead of started (`kernel::live_fork`).
    pub live_fork: Option<crate::kernel::live_fork::LiveFork>,
}

/// Why the engine could not run a cell.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    KernelStart(#[from] KernelError),
    #[error("the engine has stopped; no more cells can run")]
    Stopped,
    /// The engine let go of the call without running or answering it (a pi-repl bug, or its
    /// task ended abnormally). The cell did not run.
    #[error("pi-repl lost this call before running it; the cell did not run")]
    Lost,
    /// The configuration could not be made (the Python environment could not be built, ...).
    #[error("{message}")]
    Setup {
        message: String,
        hint: Option<String>,
    },
}

impl EngineError {
    pub fn hint(&self) -> Option<String> {
        match self {
            EngineError::KernelStart(error) => error.hint(),
            EngineError::Stopped => None,
            EngineError::Lost => Some("run the cell again".into()),
            EngineError::Setup { hint, .. } => hint.clone(),
        }
    }
}

/// Why an engine's configuration could not be made, for `Engine::start_after`.
#[derive(Debug, Clone)]
pub struct SetupFailure {
    pub message: String,
    pub hint: Option<String>,
}

type Settle = oneshot::Sender<Result<Outcome, EngineError>>;

/// A cell waiting in the queue. Whoever takes `settle` first answers it: the engine when it
/// starts the cell, or the handle when the cell is cancelled before that.
struct Request {
    /// The cell's number, given at submission (a cell cancelled while queued leaves a gap).
    number: u64,
    code: String,
    timeout: Option<Duration>,
    /// A rewind cell (`Engine::submit_rewind`): the state after this answered cell. Its code
    /// is made when it runs, from what the workspace holds then.
    rewind: Option<u64>,
    events: mpsc::UnboundedSender<CellEvent>,
    /// The cell's output as it runs, published to its handle (`live_view`).
    live: LiveView,
    settle: Arc<Mutex<Option<Settle>>>,
    cancel: CancellationToken,
}

impl Request {
    fn claim(&self) -> Option<Settle> {
        self.settle.lock().ok().and_then(|mut slot| slot.take())
    }
}

/// A request nobody answered settles as it goes: its caller is never left waiting (the handle
/// shares `settle`, so without this a dropped request would keep its caller waiting forever).
impl Drop for Request {
    fn drop(&mut self) {
        if let Some(settle) = self.claim() {
            tracing::error!("a request was dropped without an answer");
            // The handle may be gone already; then nobody is waiting.
            let _ = settle.send(Err(EngineError::Lost));
        }
    }
}

/// Options for one cell.
#[derive(Debug, Clone, Default)]
pub struct CellOptions {
    /// Abort the cell if it runs longer than this.
    pub timeout: Option<Duration>,
}

/// A submitted cell: its number, its live events and live view, its cancel switch, and its
/// outcome.
pub struct CellHandle {
    /// The number it runs as (`Cell In[n]`, `Outcome::cell`), known from submission on.
    pub number: u64,
    /// What happens as it happens, each event once (a printer that shows and forgets it).
    pub events: mpsc::UnboundedReceiver<CellEvent>,
    /// Its output so far, read as often as a reader likes (`live_view`): what a server that
    /// shows a cell to several readers, now or later, reads instead of keeping the events.
    pub live: LiveView,
    cancel: CancellationToken,
    settle: Arc<Mutex<Option<Settle>>>,
    outcome: oneshot::Receiver<Result<Outcome, EngineError>>,
}

impl CellHandle {
    /// Aborts the cell: a running cell gets a real interrupt; a queued one never runs.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// A token that aborts this cell when cancelled.
    pub fn cancel_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// Waits for the cell to settle. A cell cancelled while still queued settles at once.
    /// Events nobody took (`take_events`) are not kept meanwhile: nothing could read them.
    pub async fn outcome(mut self) -> Result<Outcome, EngineError> {
        drop(self.take_events());
        tokio::select! {
            result = &mut self.outcome => result.unwrap_or(Err(EngineError::Stopped)),
            _ = self.cancel.cancelled() => {
                let unclaimed = self.settle.lock().ok().and_then(|mut slot| slot.take());
                match unclaimed {
                    Some(_) => Ok(Outcome {
                        cell: self.number,
                        ..cell::never_ran()
                    }),
                    None => self.outcome.await.unwrap_or(Err(EngineError::Stopped)),
                }
            }
        }
    }

    /// Takes the live events out of the handle (it keeps an empty stream), so they can be
    /// read while `outcome` is awaited.
    pub fn take_events(&mut self) -> mpsc::UnboundedReceiver<CellEvent> {
        std::mem::replace(&mut self.events, mpsc::unbounded_channel().1)
    }

    /// Waits for the outcome while handing each live event to `on_event`.
    pub async fn outcome_with_events(
        mut self,
        mut on_event: impl FnMut(CellEvent),
    ) -> Result<Outcome, EngineError> {
        let mut events = self.take_events();
        let outcome = self.outcome();
        tokio::pin!(outcome);
        loop {
            tokio::select! {
                biased;
                Some(event) = events.recv() => on_event(event),
                result = &mut outcome => {
                    while let Ok(event) = events.try_recv() {
                        on_event(event);
                    }
                    return result;
                }
            }
        }
    }
}

/// A running engine. Cheap to clone; all clones feed the same queue.
#[derive(Clone)]
pub struct Engine {
    queue: mpsc::UnboundedSender<Request>,
    stop: CancellationToken,
    /// Set with `stop` by `shutdown_now`: no time for a flush that does not fit.
    hurry: Hurry,
    task: Arc<Mutex<Option<JoinHandle<()>>>>,
    /// What the latest kernel's helpers did; `None` until a kernel is ready.
    helpers: watch::Receiver<Option<Arc<Vec<LoadRecord>>>>,
    /// The number given to the last submitted cell.
    numbered: Arc<AtomicU64>,
}

impl Engine {
    /// Starts the engine and, in the background, its kernel.
    pub fn start(config: EngineConfig) -> Engine {
        // A durable session numbers on past every cell its journal knows (`unsaved_log`).
        let floor = config
            .snapshot
            .as_ref()
            .map_or(0, |settings| journal_floor(&settings.dir));
        let engine = Engine::start_after(async move { Ok(config) });
        engine.continue_numbering_after(floor);
        engine
    }

    /// Starts the engine at once, with a configuration that is still being made (the Python
    /// environment being built on a fresh machine): cells queue meanwhile. If it cannot be
    /// made, every cell settles with `EngineError::Setup` saying why.
    pub fn start_after(
        config: impl Future<Output = Result<EngineConfig, SetupFailure>> + Send + 'static,
    ) -> Engine {
        let (queue, mut requests) = mpsc::unbounded_channel::<Request>();
        let stop = CancellationToken::new();
        let hurry = Hurry::default();
        let (helpers_tx, helpers) = watch::channel(None);
        let task = {
            let stop = stop.clone();
            let hurry = hurry.clone();
            tokio::spawn(async move {
                let config = tokio::select! {
                    config = config => config,
                    _ = stop.cancelled() => return,
                };
                match config {
                    Ok(config) => {
                        runner::Runner::new(config, requests, stop, hurry, helpers_tx)
                            .run()
                            .await
                    }
                    Err(failure) => {
                        // `tools/list` waits for helpers: there are none.
                        let _ = helpers_tx.send(Some(Arc::new(Vec::new())));
                        tracing::error!(message = %failure.message, "the engine cannot start");
                        loop {
                            let request = tokio::select! {
                                request = requests.recv() => request,
                                _ = stop.cancelled() => None,
                            };
                            let Some(request) = request else { break };
                            if let Some(settle) = request.claim() {
                                // The handle may be gone; then nobody is waiting.
                                let _ = settle.send(Err(EngineError::Setup {
                                    message: failure.message.clone(),
                                    hint: failure.hint.clone(),
                                }));
                            }
                        }
                    }
                }
            })
        };
        Engine {
            queue,
            stop,
            hurry,
            task: Arc::new(Mutex::new(Some(task))),
            helpers,
            numbered: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Numbers the next cell after `last` (when that is higher than any number given yet): a
    /// server of a durable session goes on from the one before it. Call before the first
    /// `submit`.
    pub fn continue_numbering_after(&self, last: u64) {
        self.numbered.fetch_max(last, Ordering::SeqCst);
    }

    /// The number the last submitted cell got (0 before any).
    pub fn last_number(&self) -> u64 {
        self.numbered.load(Ordering::SeqCst)
    }

    /// What loading the helpers did in the first ready kernel (waits for it, up to `limit`).
    /// `None` when no kernel became ready in time (it could not start).
    pub async fn helpers(&self, limit: Duration) -> Option<Arc<Vec<LoadRecord>>> {
        let mut helpers = self.helpers.clone();
        let ready = tokio::time::timeout(limit, helpers.wait_for(|h| h.is_some())).await;
        match ready {
            Ok(Ok(value)) => value.clone(),
            _ => None,
        }
    }

    /// Queues a rewind of a durable workspace to its state right after answered cell
    /// `target` (`docs/rewind.md`). It runs as a cell of its own, in order, numbered like any.
    pub fn submit_rewind(&self, target: u64) -> CellHandle {
        self.queue_cell(String::new(), CellOptions::default(), Some(target))
    }

    /// Queues a cell. Order of calls is order of execution.
    pub fn submit(&self, code: impl Into<String>, options: CellOptions) -> CellHandle {
        self.queue_cell(code.into(), options, None)
    }

    fn queue_cell(&self, code: String, options: CellOptions, rewind: Option<u64>) -> CellHandle {
        let (events_tx, events) = mpsc::unbounded_channel();
        let (settle_tx, outcome) = oneshot::channel();
        let settle = Arc::new(Mutex::new(Some(settle_tx)));
        let cancel = CancellationToken::new();
        let number = self.numbered.fetch_add(1, Ordering::SeqCst) + 1;
        let live = LiveView::default();
        let request = Request {
            number,
            code,
            timeout: options.timeout,
            rewind,
            events: events_tx,
            live: live.clone(),
            settle: settle.clone(),
            cancel: cancel.clone(),
        };
        if let Err(mpsc::error::SendError(request)) = self.queue.send(request)
            && let Some(settle) = request.claim()
        {
            // The receiver is this handle's own `outcome`, alive until it is dropped.
            let _ = settle.send(Err(EngineError::Stopped));
        }
        CellHandle {
            number,
            events,
            live,
            cancel,
            settle,
            outcome,
        }
    }

    /// Stops the engine: a running cell is aborted, queued cells settle with `Stopped`, a due
    /// snapshot is flushed, the kernel is stopped. Returns when all of that is done.
    pub async fn shutdown(&self) {
        self.stop.cancel();
        self.join().await;
    }

    /// Stops the engine as fast as it safely can (a stop signal): like `shutdown`, but a due
    /// snapshot (or a save under way) gets only `flush_budget` to commit, and the kernel is
    /// killed rather than asked. A kill never harms the last committed snapshot; the cells
    /// whose effects were not saved are named by the next start.
    ///
    /// It waits for the engine at most the flush budget and `URGENT_JOIN_MARGIN` (clients
    /// escalate within 100 ms): past that the kernel is killed here and the engine left to die
    /// with the process. Nothing answered depends on it: a durable session's answered cells
    /// are journaled and captured before their answers, and save children outlive the host.
    ///
    /// A remote kernel is waited for: its server's answer to the shutdown is the only way it
    /// ends (no lifeline across machines).
    pub async fn shutdown_now(&self, flush_budget: Duration) {
        self.hurry.start(flush_budget);
        self.stop.cancel();
        if !self.hurry.has_local_kernel() {
            self.join().await;
            return;
        }
        let joined = tokio::time::timeout(flush_budget + URGENT_JOIN_MARGIN, self.join()).await;
        if joined.is_err() {
            tracing::info!("the engine is still settling; killing its kernel and stopping now");
            self.hurry.kill_kernel();
        }
    }

    async fn join(&self) {
        let task = self.task.lock().ok().and_then(|mut slot| slot.take());
        if let Some(task) = task
            && let Err(error) = task.await
        {
            tracing::error!(%error, "the engine task failed");
        }
    }
}

/// The highest cell number a durable session's journal of answered cells knows (0 for none):
/// a new engine of the session numbers its cells after it, so a number never names two cells.
pub fn journal_floor(snapshot_dir: &std::path::Path) -> u64 {
    unsaved_log::UnsavedLog::beside(snapshot_dir).last_cell()
}

/// A cell's handle with no engine behind it, for unit tests of what consumes handles (the MCP
/// cell book): the test writes the cell's live view as the engine would, and settles it.
#[cfg(test)]
pub(crate) struct ScriptedCell {
    pub live: LiveView,
    settle: Settle,
}

#[cfg(test)]
impl ScriptedCell {
    /// A handle for cell `number` and the script that drives it.
    pub fn new(number: u64) -> (CellHandle, ScriptedCell) {
        let (settle, outcome) = oneshot::channel();
        let live = LiveView::default();
        let handle = CellHandle {
            number,
            events: mpsc::unbounded_channel().1,
            live: live.clone(),
            cancel: CancellationToken::new(),
            settle: Arc::new(Mutex::new(None)),
            outcome,
        };
        (handle, ScriptedCell { live, settle })
    }

    /// Ends the cell with `outcome`.
    pub fn settle(self, outcome: Outcome) {
        let _ = self.settle.send(Ok(outcome));
    }
}

/// An outcome of cell `number` that ended `ok` with `stderr` (for scripted cells in tests).
#[cfg(test)]
pub(crate) fn ok_outcome(number: u64, stderr: &str) -> Outcome {
    Outcome {
        cell: number,
        status: crate::engine::outcome::Status::Ok,
        stderr: stderr.into(),
        abort: None,
        ..cell::never_ran()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request and the handle its caller waits on, as `Engine::submit` makes them.
    fn request_and_handle() -> (Request, CellHandle) {
        let (events_tx, events) = mpsc::unbounded_channel();
        let (settle_tx, outcome) = oneshot::channel();
        let settle = Arc::new(Mutex::new(Some(settle_tx)));
        let cancel = CancellationToken::new();
        let request = Request {
            number: 1,
            code: "1 + 1".into(),
            rewind: None,
            timeout: None,
            events: events_tx,
            live: LiveView::default(),
            settle: settle.clone(),
            cancel: cancel.clone(),
        };
        let handle = CellHandle {
            number: 1,
            events,
            live: LiveView::default(),
            cancel,
            settle,
            outcome,
        };
        (request, handle)
    }

    #[tokio::test]
    async fn a_handle_awaited_for_its_outcome_alone_keeps_no_events() {
        let (request, handle) = request_and_handle();
        let waiting = tokio::spawn(handle.outcome());
        // Once the wait has begun nothing holds the events: a send fails instead of piling up
        // (a progress bar's updates through a whole cell, for `exec` without a printer).
        while request.events.send(CellEvent::Cleared).is_ok() {
            tokio::task::yield_now().await;
        }
        let settle = request.claim().expect("unclaimed");
        settle.send(Ok(ok_outcome(1, ""))).unwrap();
        assert_eq!(waiting.await.unwrap().unwrap().cell, 1);
    }

    #[tokio::test]
    async fn a_request_dropped_unanswered_settles_its_caller_with_lost() {
        let (request, handle) = request_and_handle();
        drop(request);
        let settled = tokio::time::timeout(Duration::from_secs(10), handle.outcome()).await;
        assert!(matches!(settled, Ok(Err(EngineError::Lost))), "{settled:?}");
    }

    #[tokio::test]
    async fn a_request_answered_before_it_is_dropped_keeps_its_answer() {
        let (request, handle) = request_and_handle();
        let settle = request.claim().expect("unclaimed");
        drop(request);
        let _ = settle.send(Ok(cell::never_ran()));
        let settled = tokio::time::timeout(Duration::from_secs(10), handle.outcome()).await;
        assert!(matches!(settled, Ok(Ok(_))), "{settled:?}");
    }
}
