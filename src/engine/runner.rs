//! The engine task: takes cells off the queue one at a time and keeps a kernel for them.
//!
//! Owns: the kernel slot (start eagerly, notice death while idle, rebuild lazily for the next
//! cell), the pending reset notice, and draining the kernel's events between cells so nothing
//! piles up. Running one cell is `cell::run`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::cell::{self, CellContext};
use super::workspace;
use super::{EngineConfig, EngineError, Request};
use crate::helpers::LoadRecord;
use crate::kernel::{Kernel, KernelError, KernelEvent};
use crate::outcome::Reset;
use crate::output::SpillTarget;

pub(super) struct Runner {
    config: EngineConfig,
    requests: mpsc::UnboundedReceiver<Request>,
    stop: CancellationToken,
    kernel: Option<Kernel>,
    /// Why the last kernel is gone; told to the first cell that runs in its replacement.
    pending_reset: Option<Reset>,
    /// The eager start's failure, reported to the first cell instead of starting again.
    boot_error: Option<KernelError>,
    cells: u64,
    /// Names this engine's spill files apart from other engines'.
    spill_prefix: String,
    /// Helpers that broke a kernel, and why: never loaded again by this engine.
    broken_helpers: HashMap<PathBuf, String>,
    /// Publishes what each kernel's helpers did.
    helpers: watch::Sender<Option<Arc<Vec<LoadRecord>>>>,
    /// Told to the next cell that runs (helpers that failed at the first boot).
    pending_notices: Vec<String>,
    /// Whether a kernel has been ready before (helper failures are told once).
    booted_once: bool,
}

impl Runner {
    pub(super) fn new(
        config: EngineConfig,
        requests: mpsc::UnboundedReceiver<Request>,
        stop: CancellationToken,
        helpers: watch::Sender<Option<Arc<Vec<LoadRecord>>>>,
    ) -> Runner {
        let spill_prefix = format!(
            "{}-{}",
            chrono::Local::now().format("%Y%m%d-%H%M%S"),
            std::process::id()
        );
        Runner {
            config,
            requests,
            stop,
            kernel: None,
            pending_reset: None,
            boot_error: None,
            cells: 0,
            spill_prefix,
            broken_helpers: HashMap::new(),
            helpers,
            pending_notices: Vec::new(),
            booted_once: false,
        }
    }

    /// Starts a kernel and prepares the workspace in it.
    async fn start_kernel(&mut self) -> Result<Kernel, KernelError> {
        let prepared = match workspace::prepare(&self.config, &mut self.broken_helpers).await {
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
        if !self.booted_once {
            self.pending_notices
                .extend(prepared.helpers.iter().filter_map(LoadRecord::failure_line));
            self.booted_once = true;
        }
        // Nobody may be listening (the CLI does not ask); that is fine.
        let _ = self.helpers.send(Some(Arc::new(prepared.helpers)));
        Ok(prepared.kernel)
    }

    pub(super) async fn run(mut self) {
        match self.start_kernel().await {
            Ok(kernel) => self.kernel = Some(kernel),
            Err(error) => {
                // The first cell reports it; until then it is only a diagnostic.
                tracing::debug!(%error, "the kernel did not start");
                self.boot_error = Some(error);
            }
        }
        loop {
            tokio::select! {
                biased;
                _ = self.stop.cancelled() => break,
                request = self.requests.recv() => match request {
                    Some(request) => self.serve(request).await,
                    None => break,
                },
                event = next_idle_event(&mut self.kernel) => self.on_idle_event(event),
            }
        }
        self.requests.close();
        while let Ok(request) = self.requests.try_recv() {
            if let Some(settle) = request.claim() {
                // The handle may be gone already; then nobody is waiting.
                let _ = settle.send(Err(EngineError::Stopped));
            }
        }
        if let Some(kernel) = self.kernel.take() {
            kernel.stop().await;
        }
    }

    async fn serve(&mut self, request: Request) {
        let Some(settle) = request.claim() else {
            return; // cancelled while queued; its handle already answered
        };
        if request.cancel.is_cancelled() {
            let _ = settle.send(Ok(cell::never_ran()));
            return;
        }
        if let Err(error) = self.ensure_kernel().await {
            let _ = settle.send(Err(EngineError::KernelStart(error)));
            return;
        }
        let Some(kernel) = self.kernel.as_mut() else {
            let _ = settle.send(Err(EngineError::Stopped));
            return;
        };
        self.cells += 1;
        let context = CellContext {
            number: self.cells,
            reset: self.pending_reset.take(),
            notices: std::mem::take(&mut self.pending_notices),
            config: &self.config,
            stop: &self.stop,
            spill: self.config.output_dir.as_ref().map(|dir| SpillTarget {
                dir: dir.clone(),
                stem: format!("{}-cell{}", self.spill_prefix, self.cells),
            }),
        };
        let (outcome, lost) = cell::run(kernel, &request, context).await;
        if let Some(reason) = lost {
            if let Some(kernel) = self.kernel.take() {
                kernel.stop().await;
            }
            self.pending_reset = Some(Reset { reason });
        }
        // The caller may have stopped waiting; the outcome is simply dropped then.
        let _ = settle.send(Ok(outcome));
    }

    /// Makes sure a live kernel is in the slot, starting one if needed.
    async fn ensure_kernel(&mut self) -> Result<(), KernelError> {
        if let Some(kernel) = &mut self.kernel {
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
            self.kernel = None;
            self.pending_reset = Some(died_idle(exit));
        }
        if let Some(error) = self.boot_error.take() {
            return Err(error);
        }
        let kernel = self.start_kernel().await?;
        self.kernel = Some(kernel);
        Ok(())
    }

    fn on_idle_event(&mut self, event: Option<KernelEvent>) {
        match event {
            Some(KernelEvent::Exited(exit)) => {
                tracing::warn!(cause = %exit.describe(), "the kernel died between cells");
                self.kernel = None;
                self.pending_reset = Some(died_idle(Some(exit)));
            }
            None => {
                self.kernel = None;
                self.pending_reset = Some(died_idle(None));
            }
            // Output from background threads after their cell settled has no cell to go to.
            Some(KernelEvent::IoPub(_)) | Some(KernelEvent::ShellReply(_)) => {}
        }
    }
}

fn died_idle(exit: Option<crate::kernel::KernelExit>) -> Reset {
    Reset {
        reason: match exit {
            Some(exit) => format!("the kernel died between cells: {}", exit.describe()),
            None => "the kernel died between cells".to_string(),
        },
    }
}

/// The next event of an idle kernel, or never when there is none.
async fn next_idle_event(kernel: &mut Option<Kernel>) -> Option<KernelEvent> {
    match kernel {
        Some(kernel) => kernel.next_event().await,
        None => std::future::pending().await,
    }
}
