//! The engine task: takes cells off the queue one at a time and keeps a workspace for them.
//!
//! Owns: the kernel slot (its states are `kernel_slot`'s; here: start eagerly, notice death
//! while idle, rebuild lazily for the next cell, reviving the snapshot before it), the pending
//! reset notice, when background work runs (only while the queue is empty; the work itself and
//! its preemption the moment a cell arrives are `background`'s, with the save children), the
//! live notebook (`live_notebook`), and draining the kernel's events between cells.
//! Running one cell is `cell::run`; preparing a kernel is `workspace::prepare`; what to save
//! and when, what a capture or save covers, and the notices about saving are the save
//! schedule's (`save_schedule`): the runner tells it what happened (a cell answered, a child
//! started or was collected, the kernel was lost, a revive read the journal) and does the
//! async work it asks for (saves, asking the kernel about a child, a child's host pid).
//! It also keeps the engine's cell numbers and the kernel's execution count the same (`In[N]`,
//! `Cell In[N]` name the outcome's `cell`), across rebuilt kernels too, and collects what
//! earlier cells' threads print while no cell runs (`late_output`).
//!
//! Invariants:
//! - Background work never delays or runs ahead of a cell: it runs only when no request is
//!   waiting, and a request that arrives interrupts it (the kernel process alone gets SIGINT;
//!   a preempted snapshot leaves the last committed one intact and stays due). A save in a
//!   forked child (`save_child`) is not interrupted: the call returns after the fork, cells run
//!   while the child saves, and the engine collects its outcome between cells. At most one save
//!   child at a time; what changed since its fork is due for the next save.
//! - A fresh engine revives cheaply before its first cell (small values, memory-mapped
//!   arrays) and the rest in the background; a rebuild after a death revives everything before
//!   the cell that found the kernel dead.
//! - Shutdown waits for a save child (up to `FLUSH_LIMIT`) and flushes a due snapshot before
//!   stopping the kernel; an urgent shutdown (a stop signal) does not wait for a save child,
//!   gives the flush only the budget it was given, then kills the kernel (and the child with
//!   its process group: a killed child never harms the committed snapshot).
//! - In a durable session the state an answer reports is captured before the answer leaves:
//!   the cell's request carries a capture (`snapshots::capture_expression`), and the kernel
//!   forks a save child before it replies. The child outlives the kernel and the host
//!   (`snapshot.fork`), so a stop of any kind right after an answer still commits it. At most
//!   one child saves; a capture while it runs forks one that waits (kept by the schedule); a
//!   newer capture replaces that one.
//! - Every answered cell that may have changed the workspace is in the session's journal
//!   (`unsaved_log`), synced before its answer leaves; a start, and a rebuild after a death,
//!   read it against the revived snapshot's coverage and name every answered cell it lacks.

mod background;
mod live_notebook;

use background::{Background, BackgroundDone};
use live_notebook::notebook_kernel;

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::cell::{self, CellContext};
use super::host_call::HostCallError;
use super::kernel_slot::KernelSlot;
use super::late_output::LateOutputs;
use super::save_child::{self, ChildEvent};
use super::save_lock;
use super::save_schedule::{Reaped, SaveSchedule};
use super::snapshots::{self, Phase, SnapshotError};
use super::unsaved_log::{self, Coverage, UnsavedLog};
use super::visitors::Visitors;
use super::workspace::{self, Revive};
use super::{EngineConfig, EngineError, Hurry, Request};
use crate::engine::notebook::{CellOutputs, Notebook};
use crate::engine::outcome::{Lost, Outcome, Reset, Status};
use crate::engine::output::SpillTarget;
use crate::helpers::LoadRecord;
use crate::kernel::isolation::{self, Isolation};
use crate::kernel::{Kernel, KernelError, KernelEvent, KernelExit, KilledBy};

/// How long a background save call may run (it is preempted by any cell anyway, and returns
/// right after the fork when it saves in a child).
const SAVE_LIMIT: Duration = Duration::from_secs(600);

/// How long asking the kernel about a save child (and reaping it) may take.
const SAVE_STATUS_LIMIT: Duration = Duration::from_secs(30);

/// How long the save at shutdown may take before it is given up.
const FLUSH_LIMIT: Duration = Duration::from_secs(60);

/// How long background work gets to stop at a safe point (it checks the preempt file between
/// bindings) before the kernel process is interrupted instead. Signals can land in ipykernel's
/// own code and lose a reply, so the cooperative way goes first.
const PREEMPT_GRACE: Duration = Duration::from_millis(300);

/// How long a kernel gets to answer a probe after background work stopped answering.
const PROBE_LIMIT: Duration = Duration::from_secs(5);

/// How long setting the kernel's execution count may take.
const RENUMBER_LIMIT: Duration = Duration::from_secs(5);

pub(super) struct Runner {
    config: EngineConfig,
    requests: mpsc::UnboundedReceiver<Request>,
    stop: CancellationToken,
    /// Cancelled with `stop` when there is no time for a slow flush (a stop signal).
    hurry: Hurry,
    /// Booting, ready, failed, lost or stopped (`kernel_slot`).
    slot: KernelSlot,
    /// Why the last kernel is gone; told (with what was revived) to the first cell that runs in
    /// its replacement.
    pending_reset: Option<Reset>,
    cells: u64,
    /// Names this engine's spill files apart from other engines'.
    spill_prefix: String,
    /// Helpers that broke a kernel, and why: never loaded again by this engine.
    broken_helpers: HashMap<PathBuf, String>,
    /// Publishes what each kernel's helpers did.
    helpers: watch::Sender<Option<Arc<Vec<LoadRecord>>>>,
    /// Told to the next cell that runs.
    pending_notices: Vec<String>,
    /// Kernels started so far (the first one revives as a fresh engine).
    kernels_started: u64,
    /// The snapshot store is set up in the current kernel.
    snapshots_on: bool,
    /// When to save, and what each capture and save covers (`save_schedule`).
    schedule: SaveSchedule,
    /// Background work was left running in the kernel by an urgent stop.
    background_abandoned: bool,
    /// An eager revive left bindings to load in the background.
    revive_pending: bool,
    /// The names it left (a cell that mentions one waits for the rest of the revive).
    pending_names: BTreeSet<String>,
    /// When the periodic refresh is next due.
    next_refresh: Option<Instant>,
    /// The kernel's execution count may differ from the next cell's number (a rebuilt kernel
    /// starts at 1; a lost reply): set it before the next cell.
    renumber: bool,
    /// Output of earlier cells' threads, waiting for the next outcome.
    late: LateOutputs,
    /// Stdin requests that arrived between cells, to refuse.
    stdin_refusals: Vec<jupyter_protocol::JupyterMessage>,
    /// Said once: the kernel could not get a PID namespace of its own, and why.
    told_not_isolated: bool,
    /// A request background work took off the queue when it arrived; served next, before the
    /// queue. Every path that takes a request either serves it or leaves it here.
    next_request: Option<Request>,
    /// The live notebook for people, rewritten after every cell (`EngineConfig::notebook`).
    notebook: Option<Notebook>,
    /// Cells another Jupyter client ran (a person attached), told in the next result.
    visitors: Visitors,
}

impl Runner {
    pub(super) fn new(
        config: EngineConfig,
        requests: mpsc::UnboundedReceiver<Request>,
        stop: CancellationToken,
        hurry: Hurry,
        helpers: watch::Sender<Option<Arc<Vec<LoadRecord>>>>,
    ) -> Runner {
        let spill_prefix = format!(
            "{}-{}",
            chrono::Local::now().format("%Y%m%d-%H%M%S"),
            std::process::id()
        );
        let pending_notices = config.notices.clone();
        let settings = config.snapshot.as_ref();
        let schedule = SaveSchedule::new(
            settings.map(|settings| UnsavedLog::beside(&settings.dir)),
            settings.is_some_and(|settings| settings.fork),
            settings.map_or(snapshots::SAVE_CHILD_LIMIT, |settings| settings.child_limit),
        );
        let late = LateOutputs::new(
            config.limits,
            config
                .output_dir
                .clone()
                .map(|dir| (dir, spill_prefix.clone())),
        );
        let notebook = config
            .notebook
            .as_deref()
            .map(|path| Notebook::open(path, &notebook_kernel(&config)));
        Runner {
            config,
            requests,
            stop,
            hurry,
            slot: KernelSlot::Booting,
            pending_reset: None,
            cells: 0,
            spill_prefix,
            broken_helpers: HashMap::new(),
            helpers,
            pending_notices,
            kernels_started: 0,
            snapshots_on: false,
            schedule,
            background_abandoned: false,
            revive_pending: false,
            pending_names: BTreeSet::new(),
            next_refresh: None,
            renumber: false,
            late,
            stdin_refusals: Vec::new(),
            told_not_isolated: false,
            next_request: None,
            notebook,
            visitors: Visitors::default(),
        }
    }

    pub(super) async fn run(mut self) {
        // A stop during the boot does not wait for it (a kernel that never gets ready would
        // hold the process for the whole boot timeout); the half-started kernel is dropped,
        // and its lifeline ends it.
        let stop = self.stop.clone();
        let booted = tokio::select! {
            booted = self.start_kernel() => booted,
            _ = stop.cancelled() => Ok(()),
        };
        if let Err(error) = booted {
            // The first cell reports it; until then it is only a diagnostic.
            tracing::debug!(%error, "the kernel did not start");
            self.slot.failed(error);
        }
        loop {
            if self.stop.is_cancelled() {
                break;
            }
            self.refuse_stdin_requests().await;
            // A request background work took off the queue goes first (it arrived first).
            if let Some(request) = self.next_request.take() {
                self.serve(request).await;
                continue;
            }
            match self.requests.try_recv() {
                Ok(request) => {
                    self.serve(request).await;
                    continue;
                }
                Err(mpsc::error::TryRecvError::Disconnected) => break,
                Err(mpsc::error::TryRecvError::Empty) => {}
            }
            if let Some(work) = self.background_work() {
                self.run_background(work).await;
                continue;
            }
            let refresh = self.next_refresh;
            tokio::select! {
                biased;
                _ = self.stop.cancelled() => break,
                request = self.requests.recv() => match request {
                    Some(request) => self.serve(request).await,
                    None => break,
                },
                event = next_idle_event(&mut self.slot) => self.on_idle_event(event),
                event = save_child::next_event(self.schedule.watched()) => {
                    self.collect_save(event).await;
                    // The next save forks now, before a request that is already waiting: it
                    // costs that request the fork's pause (milliseconds), where serving the
                    // request first would leave its changes and every later one unsaved for
                    // a whole cell longer.
                    if let Some(work @ Background::Save { .. }) = self.background_work() {
                        self.run_background(work).await;
                    }
                }
                _ = sleep_until_opt(refresh), if refresh.is_some() => {
                    self.schedule.refresh();
                    self.schedule_refresh();
                    if self.snapshots_on {
                        self.run_background(Background::Save { full: true }).await;
                    }
                }
            }
        }
        self.finish().await;
    }

    /// Settles whatever is still queued, flushes a due snapshot and stops the kernel.
    async fn finish(&mut self) {
        if let Some(path) = &self.config.attach_file {
            super::attach_file::remove(path);
        }
        self.requests.close();
        let mut held = self.next_request.take();
        while let Some(request) = held.take().or_else(|| self.requests.try_recv().ok()) {
            if let Some(settle) = request.claim() {
                // The handle may be gone already; then nobody is waiting.
                let _ = settle.send(Err(EngineError::Stopped));
            }
        }
        let urgent = self.hurry.is_on();
        let flush_deadline = Instant::now() + FLUSH_LIMIT;
        // A graceful stop waits for the save children (the flush's time counts them; one that
        // stalls is killed and the flush below saves afresh); an urgent one leaves them running:
        // they outlive the kernel and the host, and commit on their own.
        while !urgent && self.slot.live().is_some() {
            let event = match self.schedule.watched() {
                Some(child) => tokio::time::timeout_at(flush_deadline, child.event())
                    .await
                    .unwrap_or(ChildEvent::TimeUp),
                None => break,
            };
            self.collect_save(event).await;
        }
        let Some(mut kernel) = self.slot.stop() else {
            return;
        };
        // In a hurry, a flush is tried only when the kernel is free for it: one behind background
        // work that was just abandoned would only wait out the limit.
        let flush = self.snapshots_on
            && self.schedule.flush_due(urgent)
            && kernel.is_alive()
            && !(urgent && (self.background_abandoned || self.hurry.flush_budget().is_zero()));
        if flush {
            let limit = if urgent {
                self.hurry.flush_budget()
            } else {
                flush_deadline
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_secs(1))
            };
            let cells = self.schedule.coverage();
            let hints = self.schedule.hints();
            let save = snapshots::save(&mut kernel, hints, false, false, &cells, limit, None);
            // An urgent flush that does not fit is dropped mid-call: the kernel is killed next,
            // and a kill never harms the last committed snapshot.
            match tokio::time::timeout(limit, save).await {
                Ok(Ok(report)) if report.committed => {
                    tracing::info!("flushed the last snapshot");
                    self.schedule.saved();
                }
                Ok(Ok(report)) => {
                    tracing::warn!(error = ?report.error, "the last snapshot was not saved")
                }
                Ok(Err(error)) => tracing::warn!(%error, "the last snapshot was not saved"),
                Err(_) => tracing::info!(
                    cells = self.schedule.unsaved_count(),
                    "no time to save the last changes; the next start names them"
                ),
            }
        }
        if urgent {
            // SIGKILL to the kernel's process group; it dies on its own, the host does not wait
            // for the reaping (the lifeline would end it too). Save children are not in it, and
            // the namespace's init waits for them: what they commit, the next start revives.
            kernel.kill(KilledBy::Host);
            if kernel.remote_id().is_some() {
                // No lifeline across machines: the server's answer to the shutdown is awaited.
                kernel.stop().await;
            }
            return;
        }
        kernel.stop().await;
    }

    /// Starts a kernel and prepares the workspace in it (helpers, snapshot store, revive).
    async fn start_kernel(&mut self) -> Result<(), KernelError> {
        let fresh_engine = self.kernels_started == 0;
        let phase = self.config.snapshot.as_ref().map(|_| {
            if fresh_engine {
                Phase::Eager
            } else {
                Phase::All
            }
        });
        // A save the last kernel (or run) left running commits first: the revive reads it.
        if let Some(settings) = &self.config.snapshot {
            // Every save child ends itself at its limit; a stopped one is killed at this one.
            let limit = save_lock::ADOPT_LIMIT.min(settings.child_limit + Duration::from_secs(2));
            let waited = save_lock::wait_for_saves(&settings.dir, limit).await;
            tracing::debug!(?waited, "waited for the saves left running");
            self.pending_notices.extend(waited.notice());
        }
        // A sub-agent forked live adopts its parent's copy as its first kernel, only.
        let live = self.config.live_fork.as_ref().filter(|_| fresh_engine);
        let forked_live = live.is_some();
        let prepared =
            match workspace::prepare(&self.config, &mut self.broken_helpers, phase, live).await {
                Ok(prepared) => prepared,
                Err(error) => {
                    // Nothing loaded; say so rather than keep a waiting `tools/list` hanging.
                    self.helpers.send_if_modified(|current| {
                        let unset = current.is_none();
                        if unset {
                            *current = Some(Arc::new(Vec::new()));
                        }
                        unset
                    });
                    return Err(error);
                }
            };
        self.kernels_started += 1;
        if fresh_engine {
            self.pending_notices
                .extend(prepared.helpers.iter().filter_map(LoadRecord::failure_line));
        }
        self.pending_notices.extend(prepared.notices);
        // Nobody may be listening (the CLI does not ask); that is fine.
        let _ = self.helpers.send(Some(Arc::new(prepared.helpers)));
        self.snapshots_on = prepared.snapshots_on;
        self.revive_pending = false;
        self.pending_names.clear();
        match prepared.revive {
            Some(revive) => self.absorb_revive(revive, fresh_engine),
            // Nothing revived in a durable session (its snapshots are off in this kernel): every
            // answered cell the journal holds is lost, and named.
            None if self.config.snapshot.is_some() => {
                let lost = self.schedule.uncovered(Coverage::default());
                if let Some(cells) = unsaved_log::describe(&lost) {
                    let reset = self.pending_reset.get_or_insert_with(|| {
                        Reset::because(
                            "pi-repl started a new kernel for this session, and nothing could be \
                             revived",
                        )
                    });
                    reset.unsaved_changes = Some(cells);
                }
            }
            None => {}
        }
        self.schedule_refresh();
        // A new kernel: the old one's children commit on their own (the revive waited for them).
        self.schedule.new_kernel();
        if let Some(Isolation::Unavailable(why)) = prepared.kernel.isolation()
            && !self.told_not_isolated
        {
            self.told_not_isolated = true;
            self.pending_notices
                .push(isolation::unavailable_notice(why));
        }
        self.hurry.set_kernel(prepared.kernel.kill_target());
        self.slot.ready(prepared.kernel);
        if let (Some(path), Some(kernel)) = (&self.config.attach_file, self.slot.kernel()) {
            super::attach_file::write(path, kernel);
        }
        // A fresh kernel counts from 1; this engine's numbering goes on. A live fork counts on
        // from its parent's cell: it is renumbered from this workspace's first.
        self.renumber = self.cells > 0 || forked_live;
        Ok(())
    }

    /// Folds what a revive did into the reset notice the next cell gets.
    fn absorb_revive(&mut self, revive: Revive, fresh_engine: bool) {
        let report = revive.report;
        self.revive_pending = !report.pending.is_empty();
        self.pending_names = report.pending.iter().cloned().collect();
        let mut lost: Vec<Lost> = Vec::new();
        for (name, why) in report.unsaved.iter() {
            lost.push(Lost {
                name: name.clone(),
                why: format!("could not be saved: {why}"),
            });
        }
        for (name, why) in report.failed.iter().chain(report.poisoned.iter()) {
            lost.push(Lost {
                name: name.clone(),
                why: why.clone(),
            });
        }
        for (name, why) in &revive.broke {
            if !lost.iter().any(|l| &l.name == name) {
                lost.push(Lost {
                    name: name.clone(),
                    why: why.clone(),
                });
            }
        }
        if revive.abandoned.is_some() {
            for name in &report.skipped {
                lost.push(Lost {
                    name: name.clone(),
                    why: "not revived this time (kept on disk for the next start)".into(),
                });
            }
        }
        let something = !report.revived.is_empty()
            || !report.pending.is_empty()
            || !lost.is_empty()
            || report.packages.is_some();
        let reason = match (self.pending_reset.take(), &report.status[..]) {
            (Some(reset), _) => Some(reset),
            (None, "refused") => Some(Reset::because(format!(
                "the saved workspace was not revived because it was refused: {}",
                report.reason
            ))),
            (None, "error") => Some(Reset::because(format!(
                "the saved workspace could not be revived: {}",
                report.reason
            ))),
            (None, _) if fresh_engine && something => Some(Reset::because(
                match self
                    .config
                    .snapshot
                    .as_ref()
                    .and_then(|s| s.forked_from.clone())
                {
                    Some(parent) => format!(
                        "this conversation was forked from another ({parent}), whose saved \
                         state seeds this workspace"
                    ),
                    None => "pi-repl started a new kernel for this session (the agent or pi-repl \
                             restarted) and revived the saved workspace"
                        .to_string(),
                },
            )),
            (None, _) => None,
        };
        // Answered cells whose state did not come back: the journal against what the revived
        // snapshot holds (an earlier run's, after a stop or a crash; this run's, after a death).
        let lost_cells = self
            .schedule
            .uncovered(report.cells.clone().unwrap_or_default());
        let earlier = unsaved_log::describe(&lost_cells);
        let reason = match (reason, &earlier) {
            (None, Some(_)) => Some(Reset::because(
                "pi-repl stopped before it could save the last changes, and started a new kernel \
                 for this session",
            )),
            (reason, _) => reason,
        };
        let Some(mut reset) = reason else {
            return;
        };
        if let Some(earlier) = earlier {
            reset.unsaved_changes = Some(if fresh_engine {
                format!("{earlier}, in the previous run")
            } else {
                earlier
            });
        }
        if let Some(why) = revive.abandoned {
            reset.reason = format!("{}; {why}", reset.reason);
        }
        reset.durable = true;
        reset.saved_at = report.saved_at.clone();
        reset.revived = report.revived.clone();
        reset.pending = report.pending.clone();
        reset.lost = lost;
        reset.packages = report
            .packages
            .as_ref()
            .map(|packages| Box::new(packages.for_notice()));
        self.pending_reset = Some(reset);
    }

    /// True when the kernel runs a trivial host call.
    async fn kernel_answers(&mut self) -> bool {
        let Some(kernel) = self.slot.kernel_mut() else {
            return false;
        };
        let probe = serde_json::json!([]);
        super::host_call::host_call(kernel, "helpers", "loaded", probe, PROBE_LIMIT, None)
            .await
            .is_ok()
    }

    /// Records a lost kernel: why, and the work since the last snapshot.
    fn lose_kernel(&mut self, exit: Option<KernelExit>, doing: &str) {
        let reason = match exit {
            Some(exit) => format!("the kernel died {doing}: {}", exit.describe()),
            None => format!("the kernel died {doing}"),
        };
        self.pending_reset = Some(Reset::because(reason));
        self.unsaved_to_reset();
    }

    /// Moves the list of unsaved cells into the pending reset.
    ///
    /// In a durable session the list is not read here: the save children of the lost kernel
    /// outlive it and may still commit, so the next kernel's revive (which waits for them)
    /// reads the journal against what came back (`SaveSchedule::uncovered`).
    fn unsaved_to_reset(&mut self) {
        self.hurry.set_kernel(None);
        // Its save children commit on their own, or not; the journal and the revive tell which.
        let unsaved = self.schedule.kernel_lost();
        if self.config.snapshot.is_some() {
            return;
        }
        if let Some(reset) = self.pending_reset.as_mut() {
            reset.unsaved_changes = unsaved;
        }
    }

    async fn serve(&mut self, mut request: Request) {
        let Some(settle) = request.claim() else {
            // Cancelled while queued; its handle already answered.
            self.note_never_ran(&request).await;
            return;
        };
        if request.cancel.is_cancelled() {
            self.note_never_ran(&request).await;
            let _ = settle.send(Ok(Outcome {
                cell: request.number,
                ..cell::never_ran()
            }));
            return;
        }
        let stop = self.stop.clone();
        let ready = tokio::select! {
            ready = self.ensure_kernel() => ready.map_err(EngineError::KernelStart),
            _ = stop.cancelled() => Err(EngineError::Stopped),
        };
        if let Err(error) = ready {
            self.note_not_run(&request, &error).await;
            let _ = settle.send(Err(error));
            return;
        }
        if self.needs_pending(&request.code) {
            self.revive_rest_now(&request.cancel).await;
            // The revive may have lost the kernel: the cell runs in its replacement, which
            // revives everything first.
            if let Err(error) = self.ensure_kernel().await {
                let _ = settle.send(Err(EngineError::KernelStart(error)));
                return;
            }
        }
        if let Some(target) = request.rewind {
            // Made now: the state before the rewind is saved with what the workspace holds
            // now (every cell served so far, but those a dead kernel lost).
            request.code = snapshots::rewind_code(target, &self.schedule.coverage());
        }
        let capture = self.capture_for(&request.code, request.number);
        let Some(kernel) = self.slot.kernel_mut() else {
            let _ = settle.send(Err(EngineError::Stopped));
            return;
        };
        // Numbers were given at submission: a cell cancelled in the queue left a gap, and a new
        // server of a durable session goes on from the last one; the kernel follows.
        if request.number != self.cells + 1 {
            self.renumber = true;
        }
        self.cells = request.number;
        self.schedule.serving(self.cells);
        // Only pi-repl's Python module can set the count; another language's kernel numbers
        // its cells its own way.
        if self.renumber && kernel.runs_python() {
            let next = serde_json::json!([self.cells]);
            match super::host_call::host_call(
                kernel,
                "cell_history",
                "continue_at",
                next,
                RENUMBER_LIMIT,
                None,
            )
            .await
            {
                Ok(_) => self.renumber = false,
                // The cell still runs; only its `In[N]` may differ from its number.
                Err(error) => tracing::warn!(%error, "could not set the kernel's cell number"),
            }
        }
        let reset = self.pending_reset.take();
        // The losses this result names: once it is delivered they are told, and the journal says
        // so (in the same synced write as this cell's line).
        let told_through = match &reset {
            Some(_) => self.schedule.lost_to_tell(),
            None => None,
        };
        let context = CellContext {
            number: self.cells,
            reset,
            notices: std::mem::take(&mut self.pending_notices),
            config: &self.config,
            stop: &self.stop,
            spill: self.config.output_dir.as_ref().map(|dir| SpillTarget {
                dir: dir.clone(),
                stem: format!("{}-cell{}", self.spill_prefix, self.cells),
            }),
            late: &mut self.late,
            visitors: &mut self.visitors,
            capture,
            notebook: self.notebook.as_ref().map(|_| {
                CellOutputs::new(Some(SpillTarget {
                    dir: self.config.output_dir.clone().unwrap_or_else(|| {
                        self.config
                            .notebook
                            .as_deref()
                            .and_then(std::path::Path::parent)
                            .map(std::path::Path::to_path_buf)
                            .unwrap_or_default()
                    }),
                    stem: format!("{}-cell{}-notebook", self.spill_prefix, self.cells),
                }))
            }),
        };
        let cell::Ran {
            outcome,
            lost,
            numbered_alike,
            capture,
            notebook,
        } = cell::run(kernel, &request, context).await;
        // Before the answer: once a result is back, the notebook holds its cell.
        self.note_cell(&request.code, &outcome, notebook).await;
        if !numbered_alike {
            tracing::debug!(
                cell = outcome.cell,
                "the kernel numbered the cell differently"
            );
            self.renumber = true;
        }
        let started_capture = match lost {
            Some(reason) => {
                if let Some(kernel) = self.slot.lose() {
                    kernel.stop().await;
                }
                self.pending_reset = Some(Reset::because(reason));
                self.unsaved_to_reset();
                None
            }
            None if outcome.status != Status::Died => {
                self.schedule
                    .answered(outcome.cell, &request.code, capture, told_through)
            }
            None => {
                self.schedule.answered_unjournaled(told_through);
                None
            }
        };
        self.schedule.told(told_through);
        // The caller may have stopped waiting; the outcome is simply dropped then.
        let _ = settle.send(Ok(outcome));
        // After the answer: the child is forked already; finding its host pid takes a scan.
        if let Some(report) = started_capture {
            self.captured(&report).await;
        }
    }

    /// The capture this cell's request carries: in a durable session whose local Python kernel
    /// saves in forked children, the state the cell leaves is forked before its reply.
    fn capture_for(&self, code: &str, number: u64) -> Option<(String, String)> {
        let kernel = self.slot.kernel()?;
        if !self.snapshots_on || !kernel.runs_python() || kernel.remote_id().is_some() {
            return None;
        }
        self.schedule.capture(code, number)
    }

    /// True when `code` mentions a binding the revive has not loaded yet.
    fn needs_pending(&self, code: &str) -> bool {
        self.revive_pending
            && self.slot.kernel().is_some_and(Kernel::is_alive)
            && snapshots::mentioned_names(code)
                .iter()
                .any(|name| self.pending_names.contains(name))
    }

    /// Finishes the revive in the foreground, for a cell that needs one of its bindings: the
    /// cell waits for it rather than meet a NameError. Cancelling the cell, or stopping the
    /// engine, stops the wait (what is left stays pending).
    async fn revive_rest_now(&mut self, cancel: &CancellationToken) {
        let Some(kernel) = self.slot.kernel_mut() else {
            return;
        };
        tracing::debug!("a cell needs a binding still being revived; finishing the revive first");
        let either = self.stop.child_token();
        let watcher = {
            let (either, cancel) = (either.clone(), cancel.clone());
            tokio::spawn(async move {
                cancel.cancelled().await;
                either.cancel();
            })
        };
        let limit = self.config.boot_timeout;
        let result = snapshots::restore(kernel, Phase::Rest, &[], limit, Some(&either))
            .await
            .map(BackgroundDone::Revived);
        watcher.abort();
        self.after_background(Background::ReviveRest, result).await;
    }

    /// Makes sure a live kernel is in the slot, starting one if needed.
    async fn ensure_kernel(&mut self) -> Result<(), KernelError> {
        if let Some(kernel) = self.slot.kernel_mut() {
            if kernel.is_alive() {
                return Ok(());
            }
            let mut exit = None;
            while let Some(event) = kernel.next_event().await {
                if let KernelEvent::Exited(e) = event {
                    exit = Some(e);
                    break;
                }
            }
            self.slot.lose();
            self.lose_kernel(exit, "between cells");
        }
        if let Some(error) = self.slot.take_failure() {
            return Err(error);
        }
        tracing::debug!(
            slot = self.slot.name(),
            "starting a kernel for the next cell"
        );
        self.start_kernel().await
    }

    /// Answers the stdin requests that arrived between cells: no cell runs to ask for.
    async fn refuse_stdin_requests(&mut self) {
        let waiting = std::mem::take(&mut self.stdin_refusals);
        let Some(kernel) = self.slot.kernel_mut() else {
            return;
        };
        for message in waiting {
            let refusal = crate::llm::kernel_requests::refusal(&message);
            if let Err(error) = kernel.reply_stdin(&message, refusal).await {
                tracing::debug!(%error, "could not refuse a stdin request");
            }
        }
    }

    fn on_idle_event(&mut self, event: Option<KernelEvent>) {
        match event {
            Some(KernelEvent::Exited(exit)) => {
                tracing::warn!(cause = %exit.describe(), "the kernel died between cells");
                self.slot.lose();
                self.lose_kernel(Some(exit), "between cells");
            }
            None => {
                self.slot.lose();
                self.lose_kernel(None, "between cells");
            }
            // Output an earlier cell's thread prints now waits for the next outcome.
            // So does a cell another client (a person, `pi-repl attach`) ran.
            Some(KernelEvent::IoPub(message)) => {
                if !self.visitors.take(&message) {
                    self.late.take(&message);
                }
            }
            Some(KernelEvent::ShellReply(_)) => {}
            // A thread of an earlier cell asks (llm_query): answered by the loop, refused.
            Some(KernelEvent::StdinRequest(message)) => self.stdin_refusals.push(message),
        }
    }
}

/// The next event of an idle kernel, or never when there is none.
async fn next_idle_event(slot: &mut KernelSlot) -> Option<KernelEvent> {
    match slot.kernel_mut() {
        Some(kernel) => kernel.next_event().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
