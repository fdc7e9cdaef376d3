//! The engine's kernel slot: which kernel the next cell runs in, as one explicit state.
//!
//! ```text
//!            eager start ok                 died / wedged / replaced
//!  Booting ─────────────────▶ Ready(kernel) ─────────────────────────▶ Lost
//!     │                         ▲     │                                 │
//!     │ eager start failed      │     │ shutdown                        │ a cell needs a kernel:
//!     ▼                         │     ▼                                 │ start one
//!  Failed(error) ── told to ──▶ Lost  Stopped (final)                   │
//!                  the first cell     ▲                                 │
//!                                     └──────── shutdown ───────────────┘
//! ```
//!
//! Owns only the state and its moves; why a kernel was lost (the reset the next cell is told)
//! and what to revive belong to the runner. `Ready` holds a kernel that may have died since the
//! runner last looked (`Kernel::is_alive` says so at once; its `Exited` event follows), which is
//! why `live()` checks it.

use crate::kernel::{Kernel, KernelError};

pub(super) enum KernelSlot {
    /// The eager start has not finished (or a stop cut it short).
    Booting,
    /// A kernel the workspace was prepared in (boxed: it is large, and the other states small).
    Ready(Box<Kernel>),
    /// The eager start failed; the first cell is told this error instead of starting again.
    Failed(KernelError),
    /// No kernel: the last one is gone; the next cell starts a new one.
    Lost,
    /// The engine stopped; no kernel starts again.
    Stopped,
}

impl KernelSlot {
    /// The kernel in the slot, alive or not.
    pub(super) fn kernel(&self) -> Option<&Kernel> {
        match self {
            KernelSlot::Ready(kernel) => Some(kernel),
            _ => None,
        }
    }

    pub(super) fn kernel_mut(&mut self) -> Option<&mut Kernel> {
        match self {
            KernelSlot::Ready(kernel) => Some(kernel),
            _ => None,
        }
    }

    /// The kernel in the slot if its process is still running.
    pub(super) fn live(&mut self) -> Option<&mut Kernel> {
        self.kernel_mut().filter(|kernel| kernel.is_alive())
    }

    /// Puts a freshly prepared kernel in the slot.
    pub(super) fn ready(&mut self, kernel: Kernel) {
        *self = KernelSlot::Ready(Box::new(kernel));
    }

    /// The eager start failed: the first cell reports `error`.
    pub(super) fn failed(&mut self, error: KernelError) {
        *self = KernelSlot::Failed(error);
    }

    /// The kernel is gone (or about to be stopped by the caller): takes it out, leaving `Lost`.
    pub(super) fn lose(&mut self) -> Option<Kernel> {
        match std::mem::replace(self, KernelSlot::Lost) {
            KernelSlot::Ready(kernel) => Some(*kernel),
            KernelSlot::Stopped => {
                *self = KernelSlot::Stopped;
                None
            }
            _ => None,
        }
    }

    /// The eager start's error, once: the slot is `Lost` afterwards, so the next cell starts a
    /// kernel again.
    pub(super) fn take_failure(&mut self) -> Option<KernelError> {
        match std::mem::replace(self, KernelSlot::Lost) {
            KernelSlot::Failed(error) => Some(error),
            other => {
                *self = other;
                None
            }
        }
    }

    /// Shutdown: takes the kernel (if any) out for the caller to stop; the slot stays `Stopped`.
    pub(super) fn stop(&mut self) -> Option<Kernel> {
        match std::mem::replace(self, KernelSlot::Stopped) {
            KernelSlot::Ready(kernel) => Some(*kernel),
            _ => None,
        }
    }

    /// The state's name, for logs.
    pub(super) fn name(&self) -> &'static str {
        match self {
            KernelSlot::Booting => "booting",
            KernelSlot::Ready(_) => "ready",
            KernelSlot::Failed(_) => "failed",
            KernelSlot::Lost => "lost",
            KernelSlot::Stopped => "stopped",
        }
    }
}
