//! The runner's work while the queue is empty: the rest of a revive, saves (in a forked child,
//! or in the kernel where a fork is unsafe) and the periodic refresh, each preempted by any cell
//! (the preempt file first, an interrupt after [`PREEMPT_GRACE`]); and the save children a
//! capture or a save started: their host pid, and asking the kernel about one that exited,
//! stalled or ran out of time. What and when to save is the save schedule's (`save_schedule`).

use super::*;

/// Work the engine does while the queue is empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Background {
    /// Load what an eager revive left pending.
    ReviveRest,
    /// Save what changed; `full` re-checks every binding.
    Save { full: bool },
}

impl Runner {
    pub(super) fn schedule_refresh(&mut self) {
        self.next_refresh = match (&self.config.snapshot, self.snapshots_on) {
            (Some(settings), true) => settings.refresh.map(|every| Instant::now() + every),
            _ => None,
        };
    }

    /// What to do while the queue is empty, most urgent first.
    pub(super) fn background_work(&self) -> Option<Background> {
        let kernel = self.slot.kernel()?;
        if !kernel.is_alive() || !self.snapshots_on {
            return None;
        }
        if self.revive_pending {
            return Some(Background::ReviveRest);
        }
        self.schedule
            .save_due()
            .map(|full| Background::Save { full })
    }

    /// Runs background work until it ends or a request (or stop) preempts it. The request that
    /// preempted it is left in `next_request`, which the loop serves before anything else.
    pub(super) async fn run_background(&mut self, work: Background) {
        // One save child at a time; the next save picks up what changed (and is full if this
        // one was to be).
        if let Background::Save { full } = work
            && !self.schedule.begin_save(full)
        {
            return;
        }
        let fork = self
            .config
            .snapshot
            .as_ref()
            .is_some_and(|settings| settings.fork);
        // A save that forks returns right after the fork: a request arriving meanwhile only
        // creates the preempt file (honoured if the kernel saves in-process after all), never a
        // SIGINT, which could land in the fork and lose the child.
        let interruptible =
            !matches!(work, Background::Save { .. }) || !fork || self.schedule.saves_in_process();
        let cells = self.schedule.coverage();
        let Runner {
            slot,
            requests,
            stop,
            hurry,
            schedule,
            config,
            ..
        } = self;
        let hints = schedule.hints();
        let Some(kernel) = slot.kernel_mut() else {
            return;
        };
        let flag = config
            .snapshot
            .as_ref()
            .map(|s| snapshots::preempt_file(&s.dir));
        if let Some(flag) = &flag {
            remove_flag(flag);
        }
        let preempt = CancellationToken::new();
        let mut held = None;
        let mut signal_at: Option<Instant> = None;
        let mut give_up_at: Option<Instant> = None;
        let result = {
            let job = async {
                match work {
                    Background::ReviveRest => {
                        let limit = config.boot_timeout;
                        snapshots::restore(kernel, Phase::Rest, &[], limit, Some(&preempt))
                            .await
                            .map(BackgroundDone::Revived)
                    }
                    Background::Save { full } => snapshots::save(
                        kernel,
                        hints,
                        full,
                        fork,
                        &cells,
                        SAVE_LIMIT,
                        Some(&preempt),
                    )
                    .await
                    .map(BackgroundDone::Saved),
                }
            };
            tokio::pin!(job);
            loop {
                tokio::select! {
                    biased;
                    result = &mut job => break result,
                    request = requests.recv(), if held.is_none() && signal_at.is_none() => {
                        held = request;
                        signal_at = Some(ask_to_stop(flag.as_deref()));
                    }
                    // An urgent stop: a save gets what fits to commit, a revive stops now; the
                    // kernel is killed next, which never harms a committed snapshot.
                    _ = hurry.started(), if give_up_at.is_none() => match work {
                        Background::Save { .. } => {
                            give_up_at = Some(Instant::now() + hurry.flush_budget());
                        }
                        Background::ReviveRest => {
                            break Err(SnapshotError::Call(HostCallError::Interrupted));
                        }
                    },
                    _ = sleep_until_opt(give_up_at), if give_up_at.is_some() => {
                        break Err(SnapshotError::Call(HostCallError::Interrupted));
                    }
                    _ = stop.cancelled(), if signal_at.is_none() && !hurry.is_on() => {
                        signal_at = Some(ask_to_stop(flag.as_deref()));
                    }
                    _ = sleep_until_opt(signal_at), if interruptible && signal_at.is_some() && !preempt.is_cancelled() => {
                        preempt.cancel();
                    }
                }
            }
        };
        if let Some(flag) = &flag {
            remove_flag(flag);
        }
        self.background_abandoned = self.hurry.is_on()
            && matches!(result, Err(SnapshotError::Call(HostCallError::Interrupted)));
        // Before anything that could fail: the taken request must reach the loop.
        self.next_request = held;
        self.after_background(work, result).await;
    }

    pub(super) async fn after_background(
        &mut self,
        work: Background,
        result: Result<BackgroundDone, SnapshotError>,
    ) {
        match result {
            Ok(BackgroundDone::Saved(report)) if report.preempted => {
                tracing::debug!(?work, "background save stopped for a cell");
            }
            Ok(BackgroundDone::Saved(report)) if report.started || report.running => {
                self.child_started(&report).await;
            }
            Ok(BackgroundDone::Saved(report)) => {
                let notices = self.schedule.save_returned(&report);
                self.pending_notices.extend(notices);
            }
            Ok(BackgroundDone::Revived(report)) => {
                self.revive_pending = !report.pending.is_empty();
                self.pending_names = report.pending.iter().cloned().collect();
                for (name, why) in &report.failed {
                    self.pending_notices.push(format!(
                        "`{name}` could not be revived from the snapshot: {why}"
                    ));
                }
            }
            Err(SnapshotError::Call(HostCallError::Interrupted)) => {
                tracing::debug!(?work, "background work preempted by a cell");
            }
            Err(SnapshotError::Call(HostCallError::Died(exit))) => {
                tracing::warn!(cause = %exit.describe(), ?work, "the kernel died during background work");
                self.slot.lose();
                self.lose_kernel(Some(exit), background_doing(work));
            }
            Err(SnapshotError::Call(HostCallError::Wedged | HostCallError::NoResult))
                if self.kernel_answers().await =>
            {
                // The interrupt landed outside the call (in ipykernel's own code) and its reply
                // was lost, but the kernel is fine: the work simply stays due.
                tracing::debug!(?work, "background work lost its reply; the kernel answers");
            }
            Err(SnapshotError::Call(HostCallError::TimedOut | HostCallError::Wedged)) => {
                if let Some(mut kernel) = self.slot.lose() {
                    kernel.kill(KilledBy::Host);
                    kernel.stop().await;
                }
                self.pending_reset = Some(Reset::because(format!(
                    "the kernel stopped responding {}, and was replaced",
                    background_doing(work)
                )));
                self.unsaved_to_reset();
            }
            Err(error) => {
                tracing::warn!(%error, ?work, "background work failed");
                if work == (Background::ReviveRest) {
                    self.revive_pending = false;
                    self.pending_names.clear();
                } else {
                    self.schedule.save_call_failed();
                }
            }
        }
    }

    /// A save child was forked: cells run while it saves; its outcome is collected later.
    pub(super) async fn child_started(&mut self, report: &snapshots::SaveReport) {
        if self.schedule.watched().is_some() {
            return; // the kernel reported the child already known
        }
        let host_pid = self.host_pid_of(report).await;
        self.schedule.child_started(report, host_pid);
    }

    /// A capture forked a save child at the answer: the schedule watches it now, or once the
    /// one it waits for is collected.
    pub(super) async fn captured(&mut self, report: &snapshots::SaveReport) {
        let host_pid = self.host_pid_of(report).await;
        self.schedule.captured(report, host_pid);
    }

    /// The host pid of the save child a report names. The kernel names it in its own PID
    /// namespace; the host watches it by its own pid. Not found: it is gone already (the kernel
    /// reaps it only when asked), so it reads exited.
    pub(super) async fn host_pid_of(&self, report: &snapshots::SaveReport) -> Option<i32> {
        let pid = report.pid?;
        self.slot.kernel()?.host_pid_of(pid).await
    }

    /// A save child exited, ran out of time or stalled: the kernel reaps it (killing it first
    /// unless it exited) and adopts its commit; the schedule clears the cells it covered, and
    /// watches the child that waited behind it, if any.
    pub(super) async fn collect_save(&mut self, event: ChildEvent) {
        let Some(kernel) = self.slot.live() else {
            self.schedule.kernel_gone(); // it commits on its own, or not
            return;
        };
        let kill = event != ChildEvent::Exited;
        let status = snapshots::save_status(kernel, kill, SAVE_STATUS_LIMIT).await;
        if self.schedule.watched().is_none() {
            return;
        }
        let status = match status {
            Ok(status) => Some(status),
            Err(SnapshotError::Call(HostCallError::Died(exit))) => {
                self.slot.lose();
                self.lose_kernel(
                    Some(exit),
                    background_doing(Background::Save { full: false }),
                );
                return;
            }
            Err(error) => {
                tracing::warn!(%error, "could not ask about the save child");
                None
            }
        };
        let reaped = match &status {
            Some(status) if status.running => Reaped::NotYet,
            Some(status) => Reaped::Done {
                report: status.finished.as_ref(),
                next: status.next,
            },
            None => Reaped::Unknown,
        };
        let notice = self.schedule.collected(event, reaped);
        self.pending_notices.extend(notice);
    }
}

/// Creates the preempt file (the cooperative stop) and returns when to interrupt instead.
pub(super) fn ask_to_stop(flag: Option<&std::path::Path>) -> Instant {
    if let Some(flag) = flag
        && let Err(error) = crate::fsutil::open_private(flag, crate::fsutil::Open::Truncate)
    {
        tracing::debug!(%error, "cannot create the preempt file; interrupting at once");
        return Instant::now();
    }
    Instant::now() + PREEMPT_GRACE
}

pub(super) fn remove_flag(flag: &std::path::Path) {
    if let Err(error) = std::fs::remove_file(flag)
        && error.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(%error, "cannot remove the preempt file");
    }
}

/// What finished background work produced.
pub(super) enum BackgroundDone {
    Revived(snapshots::RestoreReport),
    Saved(snapshots::SaveReport),
}

/// What the engine was doing in the background, to finish "the kernel died …".
pub(super) fn background_doing(work: Background) -> &'static str {
    match work {
        Background::ReviveRest => "while reviving the rest of the workspace",
        Background::Save { .. } => "while saving the workspace",
    }
}
