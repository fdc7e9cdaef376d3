//! The engine's side of snapshots: typed calls into `pi_repl_kernel.snapshot`, and the reset
//! notice composed from what a revive did.
//!
//! Owns: configure / restore / save / save_status as host calls with their results parsed, and
//! the words of a `Reset` (why, what came back, what was lost). A background save runs in a
//! forked child of the kernel (`pi_repl_kernel.snapshot.fork`): `save` returns its pid at once,
//! `save_status` reaps it later and says what it did. Does not own: when they run (the runner
//! schedules them) or the store itself (kernel side, `docs/snapshot-format.md`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::host_call::{HostCallError, OnLimit, host_call, host_call_with};
use super::unsaved_log::Coverage;
use crate::kernel::Kernel;

/// Default per-binding cap on a binding's stored pickle stream (large buffers are stored as
/// chunks beside it, and not capped: `docs/snapshot-format.md`).
pub const DEFAULT_MAX_BINDING_BYTES: u64 = 2 << 30;

/// Default cap on a whole snapshot's stored size.
pub const DEFAULT_MAX_TOTAL_BYTES: u64 = 8 << 30;

/// Default interval of the periodic refresh that catches in-place mutation.
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(120);

/// How long a save child may run before it is killed (a lock another thread held at the fork
/// can hang it). Generous: a child pickling and writing gigabytes takes a while, and it never
/// delays a cell.
pub const SAVE_CHILD_LIMIT: Duration = Duration::from_secs(600);

/// How a durable session's snapshots are kept.
#[derive(Debug, Clone)]
pub struct SnapshotSettings {
    /// The session's snapshot directory.
    pub dir: PathBuf,
    /// This installation's key file.
    pub key_file: PathBuf,
    pub max_binding_bytes: u64,
    pub max_total_bytes: u64,
    /// Save now and then even without a cell, to catch in-place mutation; `None` disables.
    pub refresh: Option<Duration>,
    /// Set when the session was just forked from another: its key.
    pub forked_from: Option<String>,
    /// Background saves run in a forked child of the kernel (false: in-process, preempted by
    /// cells as before).
    pub fork: bool,
    /// How long a save child may run before it is killed.
    pub child_limit: Duration,
    /// A revive installs the packages the session added that the environment lacks.
    pub reinstall_packages: bool,
    /// A remote kernel keeps the snapshots on its own machine under this directory instead of
    /// at `dir` (`PI_REPL_REMOTE_SNAPSHOT_DIR`); `None`: at `dir`.
    pub remote_dir: Option<PathBuf>,
    /// Bytes the kept states of answered cells (for a rewind) may hold beyond the current
    /// snapshot's; the newest [`REWIND_STATES`] are kept at most (`docs/rewind.md`).
    pub rewind_max_bytes: u64,
}

/// How many answered cells' states are kept for a rewind at most (the newest).
pub const REWIND_STATES: u64 = 100;

/// Default of `rewind_max_bytes`: the per-snapshot cap's worth.
pub const DEFAULT_REWIND_MAX_BYTES: u64 = DEFAULT_MAX_TOTAL_BYTES;

/// Which part of a snapshot a restore loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// What is cheap: small values and memory-mapped arrays; the rest stays pending.
    Eager,
    /// What is still pending.
    Rest,
    /// Everything, now.
    All,
}

impl Phase {
    fn as_str(self) -> &'static str {
        match self {
            Phase::Eager => "eager",
            Phase::Rest => "rest",
            Phase::All => "all",
        }
    }
}

/// What a restore did (the kernel's result dict).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct RestoreReport {
    pub status: String,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub saved_at: Option<String>,
    #[serde(default)]
    pub revived: Vec<String>,
    #[serde(default)]
    pub pending: Vec<String>,
    #[serde(default)]
    pub failed: BTreeMap<String, String>,
    #[serde(default)]
    pub poisoned: BTreeMap<String, String>,
    #[serde(default)]
    pub unsaved: BTreeMap<String, String>,
    #[serde(default)]
    pub superseded: Vec<String>,
    #[serde(default)]
    pub skipped: Vec<String>,
    /// Which answered cells the revived snapshot holds (`None`: it does not say, or nothing was
    /// revived).
    #[serde(default)]
    pub cells: Option<super::unsaved_log::Coverage>,
    /// A refused snapshot left where it is (signed with another key, or by a newer pi-repl):
    /// nothing may be saved over it in this kernel.
    #[serde(default)]
    pub kept_in_place: bool,
    /// For a refused snapshot: `damaged`, `foreign` or `newer`.
    #[serde(default)]
    pub refused_kind: Option<String>,
    /// What the revive did about the packages the session added that the environment lacked
    /// (`None`: it lacked none).
    #[serde(default)]
    pub packages: Option<PackagesReport>,
}

/// The session's packages a revive found missing: reinstalled, or still missing and why.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct PackagesReport {
    /// Name → version, installed again before any binding came back.
    #[serde(default)]
    pub reinstalled: BTreeMap<String, String>,
    /// Name → what is missing and which bindings failed for want of it.
    #[serde(default)]
    pub missing: BTreeMap<String, MissingPackage>,
    /// The installer's last lines when it failed.
    #[serde(default)]
    pub error: Option<String>,
    /// Reinstalling was switched off (`PI_REPL_REINSTALL_PACKAGES=0`).
    #[serde(default)]
    pub off: bool,
}

impl PackagesReport {
    /// The reset notice's account of it.
    pub fn for_notice(&self) -> crate::engine::outcome::SessionPackages {
        let pin = |name: &str, version: &str| format!("{name}=={version}");
        crate::engine::outcome::SessionPackages {
            reinstalled: self
                .reinstalled
                .iter()
                .map(|(name, version)| pin(name, version))
                .collect(),
            missing: self
                .missing
                .iter()
                .map(|(name, missing)| crate::engine::outcome::MissingPackage {
                    pin: pin(name, &missing.version),
                    needed_by: missing.needed_by.clone(),
                })
                .collect(),
            not_installed_because: if self.off {
                Some(format!(
                    "reinstalling is switched off ({}=0)",
                    crate::env_vars::PI_REPL_REINSTALL_PACKAGES
                ))
            } else {
                self.error
                    .as_ref()
                    .map(|error| format!("installing them failed: {error}"))
            },
        }
    }
}

/// A package the session added that this environment lacks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct MissingPackage {
    pub version: String,
    /// Bindings whose revive failed for want of one of its modules.
    #[serde(default)]
    pub needed_by: Vec<String>,
}

/// What a save did (the parts the engine uses).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct SaveReport {
    #[serde(default)]
    pub committed: bool,
    /// It stopped at a safe point because the host asked (the preempt file).
    #[serde(default)]
    pub preempted: bool,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub written: Vec<String>,
    #[serde(default)]
    pub skipped: BTreeMap<String, String>,
    /// A save child was started (the save goes on in the background): its pid.
    #[serde(default)]
    pub started: bool,
    #[serde(default)]
    pub pid: Option<i32>,
    /// The save child's random token, in its report and manifest: its pid alone may repeat
    /// across kernels (each PID namespace counts from 1).
    #[serde(default)]
    pub token: Option<String>,
    /// Milliseconds the kernel was paused by `fork()`.
    #[serde(default)]
    pub fork_ms: Option<f64>,
    /// The save ran in-process because a fork was unsafe or disabled: why.
    #[serde(default)]
    pub in_process: Option<String>,
    /// The save was skipped because free memory was too low for a copy-on-write child: why.
    #[serde(default)]
    pub low_memory: Option<String>,
    /// A save child is still running (nothing new was started).
    #[serde(default)]
    pub running: bool,
    /// The save child was killed because it ran past its limit.
    #[serde(default)]
    pub killed: bool,
    /// How long the save took, in milliseconds (in a child: from its fork to its commit).
    #[serde(default)]
    pub elapsed_ms: Option<f64>,
    /// A capture: the cell changed nothing, so nothing was forked.
    #[serde(default)]
    pub nothing_changed: bool,
    /// A capture forked while a save child ran: the new child waits for it.
    #[serde(default)]
    pub waits_for: Option<i32>,
    /// A capture replaced the child that waited (killed before it wrote anything): its pid.
    #[serde(default)]
    pub replaced: Option<i32>,
}

/// What `save_status` found: a child still running, or what a finished one did.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct SaveStatus {
    #[serde(default)]
    pub running: bool,
    #[serde(default)]
    pub finished: Option<SaveReport>,
    /// The save child the kernel has next (one that waited behind the one just reaped).
    #[serde(default)]
    pub next: Option<i32>,
}

/// Why snapshot work failed.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error(transparent)]
    Call(#[from] HostCallError),
    #[error("the snapshot store answered something unexpected: {0}")]
    Shape(String),
    #[error("{0}")]
    Refused(String),
}

/// Sets up the kernel's store. `protected` are the names the tool bound (helpers).
pub async fn configure(
    kernel: &mut Kernel,
    settings: &SnapshotSettings,
    protected: &[String],
    limit: Duration,
) -> Result<(), SnapshotError> {
    let args = json!({
        "args": [settings.dir, settings.key_file],
        "kwargs": {
            "max_binding_bytes": settings.max_binding_bytes,
            "max_total_bytes": settings.max_total_bytes,
            "protected_names": protected,
            "fork": settings.fork,
            "child_limit_s": settings.child_limit.as_secs().max(1),
            "reinstall_packages": settings.reinstall_packages,
            "keep_states": REWIND_STATES,
            "keep_bytes": settings.rewind_max_bytes,
        }
    });
    let value = host_call(kernel, "snapshot", "configure", args, limit, None).await?;
    match value.get("ok").and_then(|ok| ok.as_bool()) {
        Some(true) => Ok(()),
        _ => Err(SnapshotError::Refused(
            value
                .get("error")
                .and_then(|e| e.as_str())
                .unwrap_or("the snapshot store could not be set up")
                .to_string(),
        )),
    }
}

/// Revives (part of) the snapshot. At `limit` it gives up without interrupting (the caller
/// kills the kernel, so the store's journal names the binding that hung); `interrupt`
/// preempts it (the binding being loaded stays pending).
pub async fn restore(
    kernel: &mut Kernel,
    phase: Phase,
    skip: &[String],
    limit: Duration,
    interrupt: Option<&CancellationToken>,
) -> Result<RestoreReport, SnapshotError> {
    let args = json!({"kwargs": {"phase": phase.as_str(), "skip": skip}});
    let value = host_call_with(
        kernel,
        "snapshot",
        "restore",
        args,
        limit,
        OnLimit::GiveUp,
        interrupt,
    )
    .await?;
    serde_json::from_value(value).map_err(|e| SnapshotError::Shape(e.to_string()))
}

/// Saves what changed. `hints` are names the latest cells mention; `full` re-checks everything.
/// `background` forks a save child and returns at once (`started`, `pid`) where the kernel can.
pub async fn save(
    kernel: &mut Kernel,
    hints: &BTreeSet<String>,
    full: bool,
    background: bool,
    cells: &Coverage,
    limit: Duration,
    interrupt: Option<&CancellationToken>,
) -> Result<SaveReport, SnapshotError> {
    let args = json!({"kwargs": {
        "hint_names": hints, "full": full, "background": background, "cells": cells,
    }});
    let value = host_call(kernel, "snapshot", "save", args, limit, interrupt).await?;
    serde_json::from_value(value).map_err(|e| SnapshotError::Shape(e.to_string()))
}

/// Asks whether the save child is done; a finished one is reaped and its commit adopted by the
/// kernel's store. `kill` kills one that is still running first.
pub async fn save_status(
    kernel: &mut Kernel,
    kill: bool,
    limit: Duration,
) -> Result<SaveStatus, SnapshotError> {
    let args = json!({"kwargs": {"kill": kill}});
    let value = host_call(kernel, "snapshot", "save_status", args, limit, None).await?;
    serde_json::from_value(value).map_err(|e| SnapshotError::Shape(e.to_string()))
}

/// The user expression that makes a user cell's reply carry a capture of the state it left
/// (`pi_repl_kernel.snapshot.capture`, evaluated by the kernel module before the reply is sent,
/// whatever the cell's status). Its result comes back under [`CAPTURE_KEY`] as a
/// [`SaveReport`].
pub fn capture_expression(cells: &Coverage, hints: &BTreeSet<String>) -> (String, String) {
    let arguments = json!({"cells": cells, "hints": hints}).to_string();
    // A JSON string literal is a valid Python one.
    let literal = serde_json::to_string(&arguments).unwrap_or_else(|_| "\"{}\"".into());
    (
        CAPTURE_KEY.to_string(),
        format!(
            r#"__import__("pi_repl_kernel.snapshot", fromlist=["capture"]).capture({literal})"#
        ),
    )
}

/// The code of a rewind cell (`execute {"rewind": N}`): the kernel module's `snapshot.rewind`,
/// told which answered cells the state holds now (`cells`), so the state before the rewind is
/// saved first under the right coverage (`docs/rewind.md`). Its first line, the one the
/// journal of answered cells keeps, says what the cell is.
pub fn rewind_code(target: u64, cells: &Coverage) -> String {
    let coverage = serde_json::to_string(cells).unwrap_or_else(|_| "None".into());
    // A JSON object of whole numbers and lists is a valid Python literal.
    format!(
        "# rewind the workspace to its state after cell {target}\n\
         __import__(\"pi_repl_kernel.snapshot\", fromlist=[\"rewind\"]).rewind({target}, {coverage})"
    )
}

/// The user expression's name (`launch.CAPTURE_KEY` on the kernel side).
pub const CAPTURE_KEY: &str = "pi_repl_capture";

/// Reads a capture's result from a cell's user expressions.
pub fn capture_report(
    expressions: &std::collections::HashMap<String, String>,
) -> Option<SaveReport> {
    let text = expressions.get(CAPTURE_KEY)?;
    match serde_json::from_str(text) {
        Ok(report) => Some(report),
        Err(error) => {
            tracing::warn!(%error, "the capture's result is not a save report");
            None
        }
    }
}

/// The file that asks a running save or background revive to stop at its next safe point.
pub fn preempt_file(snapshot_dir: &std::path::Path) -> PathBuf {
    snapshot_dir.join("preempt")
}

/// The names a piece of code mentions (identifiers), for `save`'s hints.
pub fn mentioned_names(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut current = String::new();
    for c in code.chars().chain(std::iter::once(' ')) {
        if c.is_alphanumeric() || c == '_' {
            current.push(c);
        } else {
            if current.chars().next().is_some_and(|f| !f.is_ascii_digit()) {
                names.insert(std::mem::take(&mut current));
            }
            current.clear();
        }
    }
    names
}

/// The binding that was being revived when a kernel stopped (the journal's last unfinished
/// `start`), if any.
pub fn reviving_when_stopped(snapshot_dir: &std::path::Path) -> Option<String> {
    let journal = std::fs::read_to_string(snapshot_dir.join("journal")).ok()?;
    let mut open: Vec<String> = Vec::new();
    for line in journal.lines() {
        if let Some(name) = line.strip_prefix("start ") {
            open.push(name.to_string());
        } else if let Some(name) = line.strip_prefix("done ") {
            open.retain(|n| n != name);
        }
    }
    open.pop()
}

/// The names a manifest holds (to skip them all when a revive must be abandoned).
pub fn manifest_names(snapshot_dir: &std::path::Path) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(snapshot_dir.join("manifest.json")) else {
        return Vec::new();
    };
    let Ok(manifest) = serde_json::from_str::<serde_json::Value>(&text) else {
        return Vec::new();
    };
    manifest
        .get("bindings")
        .and_then(|b| b.as_object())
        .map(|b| b.keys().cloned().collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mentioned_names_are_identifiers() {
        let names = mentioned_names("df['a'] = df2.x + 3\nfor i in range(10): total += i");
        let expected: BTreeSet<String> =
            ["df", "a", "df2", "x", "for", "i", "in", "range", "total"]
                .iter()
                .map(|s| s.to_string())
                .collect();
        assert_eq!(names, expected);
    }

    #[test]
    fn the_unfinished_journal_entry_names_the_culprit() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("journal"), "start a\ndone a\nstart big\n").unwrap();
        assert_eq!(reviving_when_stopped(tmp.path()), Some("big".into()));
        std::fs::write(tmp.path().join("journal"), "start a\ndone a\n").unwrap();
        assert_eq!(reviving_when_stopped(tmp.path()), None);
    }

    #[test]
    fn save_results_parse_a_started_child_and_a_finished_one() {
        let started: SaveReport = serde_json::from_value(json!({
            "committed": false, "started": true, "pid": 4242, "fork_ms": 11.6
        }))
        .unwrap();
        assert!(started.started && !started.committed);
        assert_eq!(started.pid, Some(4242));
        let status: SaveStatus = serde_json::from_value(json!({
            "running": false,
            "finished": {"committed": false, "killed": true, "error": "hung"}
        }))
        .unwrap();
        let finished = status.finished.unwrap();
        assert!(finished.killed && finished.error.as_deref() == Some("hung"));
    }

    #[test]
    fn restore_results_parse_with_missing_fields() {
        let report: RestoreReport = serde_json::from_value(json!({
            "status": "ok", "revived": ["x"], "unsaved": {"conn": "cannot pickle"}
        }))
        .unwrap();
        assert_eq!(report.revived, vec!["x"]);
        assert_eq!(report.unsaved["conn"], "cannot pickle");
        assert!(report.pending.is_empty());
    }
}
