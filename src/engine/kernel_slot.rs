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
//!
//! Generic over the kernel it holds (`Kernel` everywhere but in the unit tests, which put a
//! scripted stand-in in the slot and play the runner's moves on it: a death while a cell runs, a
//! death between cells, a replacement, a failed eager start, a stop while booting).

use crate::kernel::{Kernel, KernelError};

/// What the slot asks of the kernel it holds: whether its process still runs.
pub(super) trait Alive {
    fn is_alive(&self) -> bool;
}

impl Alive for Kernel {
    fn is_alive(&self) -> bool {
        Kernel::is_alive(self)
    }
}

pub(super) enum KernelSlot<K = Kernel> {
    /// The eager start has not finished (or a stop cut it short).
    Booting,
    /// A kernel the workspace was prepared in (boxed: it is large, and the other states small).
    Ready(Box<K>),
    /// The eager start failed; the first cell is told this error instead of starting again.
    Failed(KernelError),
    /// No kernel: the last one is gone; the next cell starts a new one.
    Lost,
    /// The engine stopped; no kernel starts again.
    Stopped,
}

impl<K> KernelSlot<K> {
    /// The kernel in the slot, alive or not.
    pub(super) fn kernel(&self) -> Option<&K> {
        match self {
            KernelSlot::Ready(kernel) => Some(kernel),
            _ => None,
        }
    }

    pub(super) fn kernel_mut(&mut self) -> Option<&mut K> {
        match self {
            KernelSlot::Ready(kernel) => Some(kernel),
            _ => None,
        }
    }

    /// Puts a freshly prepared kernel in the slot, unless the engine has stopped: `Stopped` is
    /// final, and a kernel that arrives after it is dropped (a `Kernel` dropped kills its
    /// process group).
    pub(super) fn ready(&mut self, kernel: K) {
        if matches!(self, KernelSlot::Stopped) {
            drop(kernel);
            return;
        }
        *self = KernelSlot::Ready(Box::new(kernel));
    }

    /// The eager start failed: the first cell reports `error`.
    pub(super) fn failed(&mut self, error: KernelError) {
        *self = KernelSlot::Failed(error);
    }

    /// The kernel is gone (or about to be stopped by the caller): takes it out, leaving `Lost`.
    pub(super) fn lose(&mut self) -> Option<K> {
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
    pub(super) fn stop(&mut self) -> Option<K> {
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

impl<K: Alive> KernelSlot<K> {
    /// The kernel in the slot if its process is still running.
    pub(super) fn live(&mut self) -> Option<&mut K> {
        self.kernel_mut().filter(|kernel| kernel.is_alive())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A kernel as the slot sees it: which start it came from, and whether its process runs.
    #[derive(Debug, PartialEq)]
    struct Scripted {
        start: u32,
        alive: bool,
    }

    impl Alive for Scripted {
        fn is_alive(&self) -> bool {
            self.alive
        }
    }

    fn started(start: u32) -> Scripted {
        Scripted { start, alive: true }
    }

    fn dead(start: u32) -> Scripted {
        Scripted {
            start,
            alive: false,
        }
    }

    fn boot_timeout() -> KernelError {
        KernelError::BootTimeout {
            after: Duration::from_secs(30),
            stderr_tail: Vec::new(),
        }
    }

    /// The runner's eager start (`Runner::run`), as it ends.
    fn booted(start: Result<Scripted, KernelError>) -> KernelSlot<Scripted> {
        let mut slot = KernelSlot::Booting;
        match start {
            Ok(kernel) => slot.ready(kernel),
            Err(error) => slot.failed(error),
        }
        slot
    }

    /// A cell's kernel dies under it: the runner still reads it (its exit, what the cell
    /// printed) until `cell::run` reports the loss; then it is taken out to be stopped, and the
    /// next cell starts a kernel of its own (`Runner::ensure_kernel`: nothing to tell but the
    /// reset, no eager-start error).
    #[test]
    fn a_death_while_a_cell_runs_hands_the_dead_kernel_back_and_the_next_cell_starts_another() {
        let mut slot = booted(Ok(started(1)));
        assert_eq!(slot.name(), "ready");
        assert!(slot.live().is_some());
        slot.kernel_mut().unwrap().alive = false;
        assert!(slot.live().is_none(), "a dead kernel is not live");
        assert_eq!(slot.kernel(), Some(&dead(1)), "but still there to read");
        assert_eq!(slot.lose(), Some(dead(1)), "handed back to be stopped");
        assert_eq!(slot.name(), "lost");
        assert!(slot.kernel().is_none());
        assert!(slot.take_failure().is_none());
        assert_eq!(slot.name(), "lost", "nothing to report: start a kernel");
        slot.ready(started(2));
        assert_eq!(slot.live(), Some(&mut started(2)));
    }

    /// Each replacement is the kernel the slot holds, and the one a later loss hands back: a
    /// kernel stopped twice, or a replacement left running, would be the bug.
    #[test]
    fn a_replaced_kernel_is_never_handed_back_again() {
        let mut slot = booted(Ok(started(1)));
        for start in 1..=3 {
            slot.kernel_mut().unwrap().alive = false;
            assert_eq!(slot.lose(), Some(dead(start)));
            assert_eq!(slot.lose(), None, "kernel {start} is handed back once");
            slot.ready(started(start + 1));
        }
        assert_eq!(slot.kernel(), Some(&started(4)));
        assert_eq!(
            slot.stop(),
            Some(started(4)),
            "the last replacement is stopped"
        );
    }

    /// A failed eager start is told to the first cell, once (`Runner::ensure_kernel`); the cell
    /// after that starts a kernel again.
    #[test]
    fn a_failed_eager_start_is_told_to_the_first_cell_once() {
        let mut slot = booted(Err(boot_timeout()));
        assert_eq!(slot.name(), "failed");
        assert!(slot.kernel().is_none());
        assert!(slot.live().is_none());
        let told = slot.take_failure().expect("the first cell is told");
        assert!(
            told.to_string()
                .contains("did not become ready within 30 s")
        );
        assert_eq!(slot.name(), "lost");
        assert!(slot.take_failure().is_none(), "told once");
        slot.ready(started(1));
        assert!(slot.live().is_some());
    }

    /// A stop during the boot (`Runner::run` drops the half-started kernel): nothing to stop,
    /// and the slot stays stopped whatever comes late: a loss, a failed start's error.
    #[test]
    fn a_stop_while_booting_hands_back_nothing_and_stays_stopped() {
        let mut slot: KernelSlot<Scripted> = KernelSlot::Booting;
        assert_eq!(slot.name(), "booting");
        assert!(slot.stop().is_none());
        assert_eq!(slot.name(), "stopped");
        assert!(slot.lose().is_none());
        assert_eq!(
            slot.name(),
            "stopped",
            "a loss after the stop starts nothing"
        );
        assert!(slot.take_failure().is_none());
        assert_eq!(slot.name(), "stopped");
        assert!(slot.stop().is_none());
    }

    /// A kernel that becomes ready after the stop (a boot the stop did not cut short) is not
    /// kept: the slot stays stopped and hands nothing to a cell.
    #[test]
    fn a_kernel_ready_after_the_stop_is_not_kept() {
        let mut slot: KernelSlot<Scripted> = KernelSlot::Booting;
        assert!(slot.stop().is_none());
        slot.ready(started(1));
        assert_eq!(slot.name(), "stopped");
        assert!(slot.kernel().is_none());
        assert!(slot.stop().is_none());
    }

    /// A stop after a failed eager start: the error is for a first cell that never comes.
    #[test]
    fn a_stop_after_a_failed_start_drops_its_error() {
        let mut slot = booted(Err(boot_timeout()));
        assert!(slot.stop().is_none());
        assert!(slot.take_failure().is_none());
        assert_eq!(slot.name(), "stopped");
    }

    /// Shutdown with a kernel that died unnoticed (`Runner::finish`): it is not live, so the
    /// runner neither waits for its save children nor flushes into it, but it is still handed
    /// back to be stopped (reaped), once.
    #[test]
    fn a_stop_hands_back_a_kernel_that_died_unnoticed_once() {
        let mut slot = booted(Ok(dead(1)));
        assert!(slot.live().is_none());
        assert_eq!(slot.stop(), Some(dead(1)));
        assert_eq!(slot.name(), "stopped");
        assert!(slot.stop().is_none());
        assert!(slot.lose().is_none());
        assert!(slot.kernel().is_none());
    }
}
