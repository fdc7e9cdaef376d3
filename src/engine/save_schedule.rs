//! The save schedule: when the workspace is saved, and what each capture and save covers.
//!
//! Owns: whether a save is due (and full), the names mentioned since the last save (hints),
//! the answered cells not yet in a committed snapshot (in memory, and in the session's journal,
//! `unsaved_log`), the answered cells a dead kernel lost that no delivered result has named yet,
//! the save children (the one saving, and a capture's child waiting behind it), failures in a
//! row, and the notices these produce (a save that failed, in-process saves, low memory), each
//! said once until it changes.
//!
//! Not owned: the kernel and everything asynchronous (host calls, a child's host pid, watching a
//! child exit: `save_child`); the runner does those, asks the schedule what to do (is a save
//! due? what does a capture or a save cover?) and tells it what happened (a cell answered, a
//! child started, was collected, the kernel was lost, a revive read the journal). Nothing here
//! reaches back into the runner; the only I/O is the journal's synced append and compaction.
//!
//! Invariants:
//! - Every answered cell that may have changed the workspace is journaled before its answer
//!   leaves (the caller sends the answer after `answered` returns), and stays in the journal and
//!   in `unsaved` until a commit covers it (`saved`, or a child's commit through its cell).
//! - At most one child saves; a capture while it runs is the waiting child, and a newer capture
//!   replaces that one (its hints carried over).
//! - A cell whose capture found nothing changed is not journaled, but leaves the workspace
//!   `unchecked`: a graceful stop flushes once more.
//! - Lost cells are in every capture's and save's coverage as `missing` until a result carrying
//!   the reset is delivered (`told`), whose journal line carries the told marker once.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::Instant;

use super::cell::quote_code;
use super::save_child::{self, ChildEvent, ChildIds, SaveChild};
use super::snapshots::{self, SaveReport};
use super::unsaved_log::{self, Coverage, UnsavedCell, UnsavedLog};

/// Save children failed in a row (killed past their limit) after which the next cell is told;
/// a save that failed with an error (a full disk, a permission) is told at once.
const SAVE_FAILURES_TOLD: u32 = 2;

/// What asking the kernel about a collected save child found.
#[derive(Debug, Clone, Copy)]
pub enum Reaped<'a> {
    /// Seen exited, but the kernel still calls it running (not reaped yet).
    NotYet,
    /// Reaped: its report (if it left one), and the child the kernel has next.
    Done {
        report: Option<&'a SaveReport>,
        next: Option<i32>,
    },
    /// The kernel could not be asked (an error other than its death).
    Unknown,
}

/// One session's save schedule (see the module docs).
#[derive(Debug)]
pub struct SaveSchedule {
    /// The journal of answered cells, for a durable session.
    journal: Option<UnsavedLog>,
    /// Saves fork a child (the session's setting).
    fork: bool,
    /// How long a save child may run.
    child_limit: Duration,
    /// The engine's last cell number.
    served: u64,
    /// A cell ran since the last committed snapshot.
    due: bool,
    /// A full save (the periodic refresh) was asked for while a save child ran: the next save
    /// is full.
    full_due: bool,
    /// A cell whose capture found nothing changed ran since the last save: a thread may still
    /// have changed a value in place, so a graceful stop saves once more (the periodic refresh
    /// catches it otherwise).
    unchecked: Option<u64>,
    /// Names the cells since the last snapshot mention.
    hints: BTreeSet<String>,
    /// Cells whose effects are not in a committed snapshot yet (also in the journal).
    unsaved: Vec<UnsavedCell>,
    /// Answered cells the last revive did not bring back, named in the pending reset: every
    /// capture says they are missing until a delivered result has named them.
    lost_untold: Vec<u64>,
    /// The background save running in a forked child of the kernel, if any.
    child: Option<SaveChild>,
    /// A capture forked while `child` ran: it waits for the save lock, and is watched once
    /// `child` is collected.
    waiting: Option<SaveChild>,
    /// Background saves that failed in a row (a notice at `SAVE_FAILURES_TOLD`).
    failures: u32,
    /// The kernel saves in-process (fork unsafe there): interrupt its saves for cells.
    in_process: bool,
    /// Said once: why saves run in-process; why a save was skipped for lack of memory.
    told_in_process: bool,
    told_low_memory: bool,
}

impl SaveSchedule {
    /// The schedule of a session with `journal` (a durable one) or without; `fork`: saves fork a
    /// child, each given `child_limit`.
    pub fn new(journal: Option<UnsavedLog>, fork: bool, child_limit: Duration) -> SaveSchedule {
        SaveSchedule {
            journal,
            fork,
            child_limit,
            served: 0,
            due: false,
            full_due: false,
            unchecked: None,
            hints: BTreeSet::new(),
            unsaved: Vec::new(),
            lost_untold: Vec::new(),
            child: None,
            waiting: None,
            failures: 0,
            in_process: false,
            told_in_process: false,
            told_low_memory: false,
        }
    }

    // Queries.

    /// A save is due and no child is saving: `Some(full)`.
    pub fn save_due(&self) -> Option<bool> {
        (self.due && self.child.is_none()).then_some(self.full_due)
    }

    /// A stop should save once more first: a save is due (or, unless `urgent`, a cell was
    /// found unchanged since the last one) and no child is saving.
    pub fn flush_due(&self, urgent: bool) -> bool {
        (self.due || (self.unchecked.is_some() && !urgent)) && self.child.is_none()
    }

    /// Which answered cells the workspace holds now: every one served, except those a dead
    /// kernel lost and no delivered result has named yet.
    pub fn coverage(&self) -> Coverage {
        Coverage {
            through: self.served,
            missing: self.lost_untold.clone(),
        }
    }

    /// The names mentioned since the last save (the next save looks at them first).
    pub fn hints(&self) -> &BTreeSet<String> {
        &self.hints
    }

    /// The capture cell `number` carries (`snapshots::capture_expression`): `None` unless the
    /// session is durable and saves fork a child. The kernel's side (a local Python kernel with
    /// snapshots on) is the caller's to check.
    pub fn capture(&self, code: &str, number: u64) -> Option<(String, String)> {
        if self.journal.is_none() || !self.fork || self.in_process {
            return None;
        }
        let mut hints = self.hints.clone();
        hints.extend(snapshots::mentioned_names(code));
        let cells = Coverage {
            through: number,
            missing: self.lost_untold.clone(),
        };
        Some(snapshots::capture_expression(&cells, &hints))
    }

    /// The last lost cell a result carrying the reset names (its journal line's told marker), if
    /// any cells are lost and untold.
    pub fn lost_to_tell(&self) -> Option<u64> {
        self.lost_untold.iter().max().copied()
    }

    /// The kernel saves in-process: its saves are interrupted for cells.
    pub fn saves_in_process(&self) -> bool {
        self.in_process
    }

    /// The save child to watch, if any.
    pub fn watched(&self) -> &Option<SaveChild> {
        &self.child
    }

    /// Answered cells not in a committed snapshot yet.
    pub fn unsaved_count(&self) -> usize {
        self.unsaved.len()
    }

    // Events.

    /// The engine gave the next cell `number`.
    pub fn serving(&mut self, number: u64) {
        self.served = number;
    }

    /// Cell `cell` ran and is about to be answered, with its capture's report (`None`: no
    /// capture). Journals it (with `told_through`, when this result names lost cells) unless
    /// its capture found nothing changed. Returns the capture's report when it forked a child:
    /// the caller finds the child's host pid after the answer and calls `captured`.
    pub fn answered(
        &mut self,
        cell: u64,
        code: &str,
        capture: Option<SaveReport>,
        told_through: Option<u64>,
    ) -> Option<SaveReport> {
        if capture
            .as_ref()
            .is_some_and(|report| report.nothing_changed)
        {
            self.unchecked = Some(cell);
            self.answered_unjournaled(told_through);
            return None;
        }
        let unsaved = UnsavedCell {
            cell,
            code: quote_code(code),
        };
        if let Some(journal) = &self.journal {
            journal.append(Some(&unsaved), told_through);
        }
        self.unsaved.push(unsaved);
        self.hints.extend(snapshots::mentioned_names(code));
        match capture {
            Some(report) if report.started => Some(report),
            // No capture (an ephemeral session, another language, fork unsafe or failed): the
            // background save between cells covers it.
            _ => {
                self.due = true;
                None
            }
        }
    }

    /// A cell was answered with nothing to journal (its kernel died in it, or its capture found
    /// nothing changed): the told marker alone, when this result names lost cells.
    pub fn answered_unjournaled(&mut self, told_through: Option<u64>) {
        if let (Some(journal), Some(_)) = (&self.journal, told_through) {
            journal.append(None, told_through);
        }
    }

    /// A result was delivered; with `told_through`, it named the lost cells.
    pub fn told(&mut self, told_through: Option<u64>) {
        if told_through.is_some() {
            self.lost_untold.clear();
        }
    }

    /// A capture forked a save child at the answer (`host_pid`: where the host watches it):
    /// watched now, or once the one it waits for is collected. One that waited and was replaced
    /// is forgotten (the kernel killed it before it wrote anything); its names go to the new one.
    pub fn captured(&mut self, report: &SaveReport, host_pid: Option<i32>) {
        let Some(mut child) = self.new_child(report, host_pid) else {
            return;
        };
        if let Some(waiting) = self.waiting.take() {
            if report.replaced != Some(waiting.ids.pid) {
                tracing::warn!(
                    pid = waiting.ids.pid,
                    "the kernel forgot a waiting save child"
                );
            }
            child.hints.extend(waiting.hints);
        }
        if report.waits_for.is_some() && self.child.is_some() {
            self.waiting = Some(child);
        } else {
            self.child = Some(child);
        }
        self.due = false;
    }

    /// A background save forked a child: cells run while it saves; it is collected later. A
    /// child already watched stays (the kernel reported it again).
    pub fn child_started(&mut self, report: &SaveReport, host_pid: Option<i32>) {
        if self.child.is_some() {
            return;
        }
        self.child = self.new_child(report, host_pid);
        self.due = false;
    }

    /// The record of a save child the kernel reported, holding the names mentioned since the
    /// last save, or `None` when the report names no pid.
    fn new_child(&mut self, report: &SaveReport, host_pid: Option<i32>) -> Option<SaveChild> {
        let pid = report.pid?;
        tracing::debug!(pid, ?host_pid, fork_ms = ?report.fork_ms, "a save child started");
        let hints = std::mem::take(&mut self.hints);
        let mut child = SaveChild::new(
            ChildIds {
                pid,
                host_pid,
                token: report.token.clone(),
            },
            self.child_limit,
            self.served,
            hints,
        );
        child.missing = self.lost_untold.clone();
        Some(child)
    }

    /// The watched child had `event` and the kernel was asked about it: the cells it committed
    /// are cleared; a failure puts its names back, counts, and may make a save due again. The
    /// child that waited behind it is watched now. Returns a notice for the next cell.
    pub fn collected(&mut self, event: ChildEvent, reaped: Reaped<'_>) -> Option<String> {
        let mut child = self.child.take()?;
        let report = match reaped {
            Reaped::NotYet => {
                // Look again a little later.
                child.not_before = Instant::now() + save_child::CHILD_POLL * 10;
                self.child = Some(child);
                return None;
            }
            Reaped::Done { report, next } => {
                if let Some(mut waiting) = self.waiting.take() {
                    if next != Some(waiting.ids.pid) {
                        tracing::warn!(
                            pid = waiting.ids.pid,
                            ?next,
                            "the kernel names another save child next"
                        );
                    }
                    waiting.restart_clock();
                    self.child = Some(waiting);
                }
                report
            }
            Reaped::Unknown => None,
        };
        if let Some(report) = report.filter(|report| report.committed) {
            tracing::debug!(
                pid = child.ids.pid,
                elapsed_ms = ?report.elapsed_ms,
                written = ?report.written,
                "a save child committed"
            );
            self.failures = 0;
            self.told_low_memory = false;
            self.saved_through(child.cells_through, &child.missing);
            return None;
        }
        let error = match event {
            ChildEvent::Stalled(why) => format!(
                "the save child (pid {}) {why}, and was killed; pi-repl saves again",
                child.ids.pid
            ),
            _ => report
                .and_then(|r| r.error.clone())
                .unwrap_or_else(|| "the save child left no report".to_string()),
        };
        tracing::warn!(pid = child.ids.pid, %error, "a background snapshot was not committed");
        self.hints.extend(child.hints);
        self.failures += 1;
        // A stall is told at once; a child past its limit after `SAVE_FAILURES_TOLD`.
        let killed = event == ChildEvent::TimeUp
            || (event == ChildEvent::Exited && report.is_some_and(|r| r.killed));
        let notice = self.failure_notice(&error, killed);
        // A killed child is retried at the next idle moment (unless a newer one waits to save
        // anyway); another failure would repeat itself, so it waits for the next cell (which
        // makes a save due).
        if report.is_some_and(|r| r.killed) && self.child.is_none() {
            self.due = true;
        }
        notice
    }

    /// A save's call returned in the foreground (neither preempted nor a child started):
    /// skipped for low memory, committed, or failed. Returns the notices for the next cell.
    pub fn save_returned(&mut self, report: &SaveReport) -> Vec<String> {
        let mut notices = Vec::new();
        if let Some(why) = &report.low_memory {
            tracing::warn!(?why, "a snapshot was skipped");
            if !self.told_low_memory {
                self.told_low_memory = true;
                notices.push(format!(
                    "the workspace was {why}; pi-repl tries again after the next cell"
                ));
            }
            self.due = false;
            return notices;
        }
        if let Some(why) = &report.in_process {
            self.in_process = true;
            if self.fork && !self.told_in_process {
                self.told_in_process = true;
                notices.push(format!(
                    "snapshots are saved in the kernel process ({why}): a save pauses the \
                     kernel, and a cell that arrives stops it"
                ));
            }
        }
        if report.committed {
            self.saved();
        } else {
            // Retrying after every cell would repeat the same failure; the next cell makes it
            // due again.
            tracing::warn!(error = ?report.error, "a snapshot was not committed");
            self.failures += 1;
            let error = report
                .error
                .clone()
                .unwrap_or_else(|| "no reason given".into());
            notices.extend(self.failure_notice(&error, false));
            self.due = false;
        }
        notices
    }

    /// A save's call failed (not the kernel's death, not a preemption): it waits for the next
    /// cell.
    pub fn save_call_failed(&mut self) {
        self.due = false;
    }

    /// The periodic refresh: a save is due.
    pub fn refresh(&mut self) {
        self.due = true;
    }

    /// A background save of `full` is about to run: false when a child is saving (one at a
    /// time; the next save picks up what changed, and is full if this one was to be).
    pub fn begin_save(&mut self, full: bool) -> bool {
        if self.child.is_some() {
            self.full_due |= full;
            return false;
        }
        self.full_due = false;
        true
    }

    /// A snapshot committed everything done so far.
    pub fn saved(&mut self) {
        self.failures = 0;
        self.due = false;
        self.unchecked = None;
        self.hints.clear();
        self.unsaved.clear();
        if let Some(journal) = &self.journal {
            journal.compact(&self.coverage());
        }
    }

    /// A save child committed the cells up to `cells_through` (but `missing`); later ones stay
    /// due.
    fn saved_through(&mut self, cells_through: u64, missing: &[u64]) {
        self.unsaved.retain(|cell| cell.cell > cells_through);
        if self.unsaved.is_empty() && !self.due {
            // A cell run after the fork that was found unchanged stays unchecked.
            let unchecked = self.unchecked.filter(|&cell| cell > cells_through);
            self.saved();
            self.unchecked = unchecked;
            return;
        }
        if let Some(journal) = &self.journal {
            journal.compact(&Coverage {
                through: cells_through,
                missing: missing.to_vec(),
            });
        }
    }

    /// The save that failed, for the next cell: at once for an error (a full disk), after
    /// `SAVE_FAILURES_TOLD` in a row for a child killed past its limit; once until a commit.
    fn failure_notice(&self, error: &str, killed: bool) -> Option<String> {
        let due = if killed { SAVE_FAILURES_TOLD } else { 1 };
        if self.failures != due {
            return None;
        }
        let unsaved = unsaved_log::describe(&self.unsaved)
            .map(|cells| format!(" Not saved yet: {cells}."))
            .unwrap_or_default();
        let repeated = if self.failures > 1 {
            format!(" ({} times in a row)", self.failures)
        } else {
            String::new()
        };
        Some(format!(
            "the workspace could not be saved{repeated}: {error}. The last committed snapshot \
             stands and cells keep running; pi-repl tries again after the next cell.{unsaved}"
        ))
    }

    /// The kernel is gone while its children were watched: they commit on their own, or not.
    pub fn kernel_gone(&mut self) {
        self.child = None;
        self.waiting = None;
    }

    /// The kernel was lost: its children commit on their own, or not, and what was due goes.
    /// Returns what the reset says was not saved: in an ephemeral session the cells in memory;
    /// in a durable one nothing (the next kernel's revive, which waits for the children, reads
    /// the journal against what came back: `uncovered`).
    pub fn kernel_lost(&mut self) -> Option<String> {
        self.kernel_gone();
        let cells = std::mem::take(&mut self.unsaved);
        self.due = false;
        self.hints.clear();
        if self.journal.is_some() {
            return None;
        }
        unsaved_log::describe(&cells)
    }

    /// A new kernel is in the slot: the old one's children commit on their own (its revive
    /// waited for them), and the new one may fork again.
    pub fn new_kernel(&mut self) {
        self.kernel_gone();
        self.in_process = false;
    }

    /// A revive brought back `coverage` (default: nothing): the journal's answered cells it
    /// lacks, oldest first. They are missing from every capture and save until a delivered
    /// result names them (`told`); nothing else is unsaved.
    pub fn uncovered(&mut self, coverage: Coverage) -> Vec<UnsavedCell> {
        let Some(journal) = &self.journal else {
            return Vec::new();
        };
        let cells = journal.uncovered(&coverage);
        self.lost_untold = cells.iter().map(|cell| cell.cell).collect();
        self.unsaved.clear();
        cells
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: Duration = Duration::from_secs(600);

    fn journal() -> (tempfile::TempDir, UnsavedLog) {
        let dir = tempfile::tempdir().unwrap();
        let snapshot = dir.path().join("snapshot");
        std::fs::create_dir(&snapshot).unwrap();
        let log = UnsavedLog::beside(&snapshot);
        (dir, log)
    }

    fn durable() -> (tempfile::TempDir, SaveSchedule, UnsavedLog) {
        let (dir, log) = journal();
        let schedule = SaveSchedule::new(Some(log.clone()), true, LIMIT);
        (dir, schedule, log)
    }

    fn forked(pid: i32) -> SaveReport {
        SaveReport {
            started: true,
            pid: Some(pid),
            ..SaveReport::default()
        }
    }

    static COMMITTED: std::sync::LazyLock<SaveReport> = std::sync::LazyLock::new(|| SaveReport {
        committed: true,
        ..SaveReport::default()
    });

    fn committed() -> Reaped<'static> {
        Reaped::Done {
            report: Some(&*COMMITTED),
            next: None,
        }
    }

    /// Runs cell `n` (`code`) whose capture forked child `pid`, and records the child.
    fn run_captured(schedule: &mut SaveSchedule, n: u64, code: &str, capture: SaveReport) {
        schedule.serving(n);
        let started = schedule.answered(n, code, Some(capture), None);
        let report = started.expect("a capture that forked is handed back");
        schedule.captured(&report, None);
    }

    fn journal_lines(dir: &tempfile::TempDir) -> Vec<String> {
        std::fs::read_to_string(dir.path().join("answered.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Issue 21: a capture while a child saves waits; when the first commits through its cell,
    /// only that cell is cleared, and the waiting child is watched next.
    #[test]
    fn two_captures_the_second_waits_and_the_first_commits() {
        let (_dir, mut schedule, log) = durable();
        run_captured(&mut schedule, 1, "a = 1", forked(10));
        assert_eq!(schedule.watched().as_ref().map(|c| c.ids.pid), Some(10));
        let second = SaveReport {
            waits_for: Some(10),
            ..forked(11)
        };
        run_captured(&mut schedule, 2, "b = 2", second);
        assert_eq!(schedule.watched().as_ref().map(|c| c.ids.pid), Some(10));
        assert_eq!(schedule.save_due(), None, "captured: nothing due");
        assert_eq!(schedule.unsaved_count(), 2);

        let notice = schedule.collected(
            ChildEvent::Exited,
            Reaped::Done {
                report: Some(&*COMMITTED),
                next: Some(11),
            },
        );
        assert_eq!(notice, None);
        assert_eq!(schedule.watched().as_ref().map(|c| c.ids.pid), Some(11));
        assert_eq!(
            schedule.unsaved_count(),
            1,
            "cell 2 waits for its own child"
        );
        assert_eq!(
            log.uncovered(&Coverage::default()).len(),
            2,
            "not compacted yet"
        );
        let second = schedule.watched().as_ref().unwrap();
        assert_eq!(second.cells_through, 2);
        assert!(second.hints.contains("b"));

        assert_eq!(schedule.collected(ChildEvent::Exited, committed()), None);
        assert_eq!(schedule.unsaved_count(), 0);
        assert!(schedule.watched().is_none());
        assert_eq!(log.uncovered(&Coverage::default()), vec![]);
        assert!(!schedule.flush_due(false));
    }

    /// A newer capture replaces the waiting child, and takes over its names.
    #[test]
    fn a_newer_capture_replaces_the_waiting_child() {
        let (_dir, mut schedule, _log) = durable();
        run_captured(&mut schedule, 1, "a = 1", forked(10));
        let waits = |pid, replaced| SaveReport {
            waits_for: Some(10),
            replaced,
            ..forked(pid)
        };
        run_captured(&mut schedule, 2, "b = 2", waits(11, None));
        run_captured(&mut schedule, 3, "c = 3", waits(12, Some(11)));
        schedule.collected(
            ChildEvent::Exited,
            Reaped::Done {
                report: Some(&*COMMITTED),
                next: Some(12),
            },
        );
        let next = schedule.watched().as_ref().unwrap();
        assert_eq!(next.ids.pid, 12);
        assert_eq!(next.cells_through, 3);
        assert!(next.hints.contains("b") && next.hints.contains("c"));
    }

    /// Issue 21: a stalled child is named at once with what is not saved, its names go back,
    /// and since it was killed a save is due again at once; the retry's commit clears
    /// everything.
    #[test]
    fn a_stalled_child_is_told_then_a_retry_commits() {
        let (_dir, mut schedule, log) = durable();
        run_captured(&mut schedule, 1, "x = 1", forked(10));
        let notice = schedule
            .collected(
                ChildEvent::Stalled("was stopped"),
                Reaped::Done {
                    report: Some(&SaveReport {
                        killed: true,
                        ..SaveReport::default()
                    }),
                    next: None,
                },
            )
            .expect("a stall is told at once");
        assert!(
            notice.contains("the save child (pid 10) was stopped"),
            "{notice}"
        );
        assert!(notice.contains("Not saved yet: the changes made by cell 1 (`x = 1`)"));
        assert!(schedule.hints().contains("x"), "its names go back");
        assert_eq!(
            schedule.save_due(),
            Some(false),
            "killed: retried when idle"
        );
        assert!(schedule.begin_save(false));
        schedule.child_started(&forked(20), Some(20));
        assert_eq!(schedule.save_due(), None);
        assert!(schedule.hints().is_empty(), "the retry took the names");
        assert_eq!(schedule.collected(ChildEvent::Exited, committed()), None);
        assert_eq!(schedule.unsaved_count(), 0);
        assert_eq!(log.uncovered(&Coverage::default()), vec![]);
    }

    /// A child killed past its limit is told only at the second in a row; a commit resets the
    /// count.
    #[test]
    fn a_child_past_its_limit_is_told_the_second_time() {
        let (_dir, mut schedule, _log) = durable();
        run_captured(&mut schedule, 1, "x = 1", forked(10));
        let time_up = || Reaped::Done {
            report: None,
            next: None,
        };
        assert_eq!(schedule.collected(ChildEvent::TimeUp, time_up()), None);
        schedule.child_started(&forked(11), None);
        let notice = schedule.collected(ChildEvent::TimeUp, time_up()).unwrap();
        assert!(notice.contains("(2 times in a row)"), "{notice}");
        schedule.child_started(&forked(12), None);
        assert_eq!(schedule.collected(ChildEvent::TimeUp, time_up()), None);
    }

    /// A save in a foreground call that failed is told at once, not again, and waits for the
    /// next cell; saving in-process is told once.
    #[test]
    fn a_failed_save_is_told_once_and_waits_for_the_next_cell() {
        let (_dir, mut schedule, _log) = durable();
        schedule.serving(1);
        assert_eq!(schedule.answered(1, "x = 1", None, None), None);
        assert_eq!(schedule.save_due(), Some(false));
        let failed = SaveReport {
            error: Some("disk full".into()),
            in_process: Some("fork unsafe".into()),
            ..SaveReport::default()
        };
        let notices = schedule.save_returned(&failed);
        assert_eq!(notices.len(), 2, "{notices:?}");
        assert!(notices[0].contains("saved in the kernel process (fork unsafe)"));
        assert!(notices[1].contains("could not be saved: disk full"));
        assert_eq!(schedule.save_due(), None);
        assert!(schedule.saves_in_process());
        assert_eq!(schedule.capture("y = 2", 2), None, "no capture in-process");
        schedule.serving(2);
        schedule.answered(2, "y = 2", None, None);
        assert!(schedule.save_returned(&failed).is_empty(), "told once");
        schedule.new_kernel();
        assert!(!schedule.saves_in_process());
    }

    /// Issue 21: a death with answered cells (one saved, one not) in a durable session: the
    /// reset names nothing from memory; the revive reads the journal against what came back and
    /// names the lost cell; every capture says it is missing until a result names it, and the
    /// told marker is written once.
    #[test]
    fn a_death_then_a_revive_with_coverage_names_the_lost_cell_once() {
        let (dir, mut schedule, log) = durable();
        run_captured(&mut schedule, 1, "a = 1", forked(10));
        schedule.collected(ChildEvent::Exited, committed());
        run_captured(&mut schedule, 2, "b = 2", forked(11));
        assert_eq!(schedule.kernel_lost(), None, "durable: the journal tells");
        assert!(schedule.watched().is_none());
        assert_eq!(schedule.unsaved_count(), 0);

        // The child of cell 2 did not commit: the revive holds cell 1 only.
        let lost = schedule.uncovered(Coverage {
            through: 1,
            missing: vec![],
        });
        assert_eq!(lost.iter().map(|c| c.cell).collect::<Vec<_>>(), vec![2]);
        assert_eq!(schedule.lost_to_tell(), Some(2));
        let (_, arguments) = schedule.capture("c = 3", 3).unwrap();
        assert!(arguments.contains(r#"missing\":[2]"#), "{arguments}");
        schedule.serving(3);
        assert_eq!(schedule.coverage().missing, vec![2]);

        // The result carrying the reset: its journal line has the told marker.
        let told = schedule.lost_to_tell();
        schedule.answered(3, "c = 3", None, told);
        schedule.told(told);
        assert_eq!(schedule.lost_to_tell(), None);
        assert_eq!(schedule.coverage().missing, Vec::<u64>::new());
        schedule.serving(4);
        schedule.answered(4, "d = 4", None, schedule.lost_to_tell());
        let lines = journal_lines(&dir);
        let markers = lines
            .iter()
            .filter(|l| l.contains(r#""told_through":2"#))
            .count();
        assert_eq!(markers, 1, "{lines:?}");
        assert_eq!(
            log.uncovered(&Coverage {
                through: 1,
                missing: vec![]
            })
            .iter()
            .map(|c| c.cell)
            .collect::<Vec<_>>(),
            vec![3, 4],
            "cell 2 is not named again"
        );
    }

    /// An ephemeral session's death names the cells from memory.
    #[test]
    fn an_ephemeral_death_names_the_unsaved_cells() {
        let mut schedule = SaveSchedule::new(None, true, LIMIT);
        schedule.serving(1);
        assert_eq!(
            schedule.capture("x = 1", 1),
            None,
            "no capture without a journal"
        );
        schedule.answered(1, "x = 1", None, None);
        schedule.serving(2);
        schedule.answered(2, "y = 2", None, None);
        assert_eq!(
            schedule.kernel_lost().unwrap(),
            "the changes made by cell 1 (`x = 1`) and the 1 cells after it"
        );
        assert_eq!(schedule.save_due(), None);
        assert!(schedule.hints().is_empty());
    }

    /// Issue 21: a cell whose capture found nothing changed is not journaled and forks nothing,
    /// but a graceful stop still flushes (an urgent one does not), and a child's commit of an
    /// earlier cell keeps it unchecked.
    #[test]
    fn a_nothing_changed_cell_still_flushes_at_a_graceful_stop() {
        let (dir, mut schedule, _log) = durable();
        run_captured(&mut schedule, 1, "x = 1", forked(10));
        schedule.serving(2);
        let unchanged = SaveReport {
            nothing_changed: true,
            ..SaveReport::default()
        };
        assert_eq!(schedule.answered(2, "x", Some(unchanged), None), None);
        assert_eq!(journal_lines(&dir).len(), 1, "only cell 1 is journaled");
        assert_eq!(schedule.save_due(), None);
        schedule.collected(ChildEvent::Exited, committed());
        assert!(schedule.flush_due(false), "cell 2 stays unchecked");
        assert!(!schedule.flush_due(true));
        schedule.saved();
        assert!(!schedule.flush_due(false));
    }

    /// A refresh while a child saves makes the next save full, once.
    #[test]
    fn a_refresh_while_a_child_saves_makes_the_next_save_full() {
        let (_dir, mut schedule, _log) = durable();
        run_captured(&mut schedule, 1, "x = 1", forked(10));
        schedule.refresh();
        assert_eq!(schedule.save_due(), None, "a child saves");
        assert!(!schedule.begin_save(true));
        schedule.collected(ChildEvent::Exited, committed());
        schedule.refresh();
        assert_eq!(schedule.save_due(), Some(true));
        assert!(schedule.begin_save(true));
        assert_eq!(
            schedule.save_due(),
            Some(false),
            "the full save is under way"
        );
    }

    /// A child seen exited but not reaped is looked at again later; a kernel gone forgets it.
    #[test]
    fn a_child_not_reaped_yet_stays_watched() {
        let (_dir, mut schedule, _log) = durable();
        run_captured(&mut schedule, 1, "x = 1", forked(10));
        let before = Instant::now();
        assert_eq!(schedule.collected(ChildEvent::Exited, Reaped::NotYet), None);
        let child = schedule.watched().as_ref().unwrap();
        assert!(child.not_before > before);
        assert_eq!(schedule.unsaved_count(), 1);
        schedule.kernel_gone();
        assert!(schedule.watched().is_none());
        assert_eq!(schedule.collected(ChildEvent::Exited, committed()), None);
        assert_eq!(schedule.unsaved_count(), 1, "nothing committed");
    }

    /// A low-memory skip is told once until a child commits, and waits for the next cell.
    #[test]
    fn low_memory_is_told_once_until_a_commit() {
        let (_dir, mut schedule, _log) = durable();
        let low = SaveReport {
            low_memory: Some("not saved: 10 MB free".into()),
            ..SaveReport::default()
        };
        schedule.refresh();
        assert_eq!(schedule.save_returned(&low).len(), 1);
        assert_eq!(schedule.save_due(), None);
        schedule.refresh();
        assert!(schedule.save_returned(&low).is_empty());
        run_captured(&mut schedule, 1, "x = 1", forked(10));
        schedule.collected(ChildEvent::Exited, committed());
        assert_eq!(schedule.save_returned(&low).len(), 1);
    }
}
