//! Bringing a fresh kernel to a ready workspace: start it, load the helpers, set up the
//! snapshot store and revive the snapshot.
//!
//! Owns: the order of what happens after a kernel starts, and surviving whatever breaks it on
//! the way. A helper that raises at import fails alone (its record carries the error); one that
//! hangs is interrupted after `HELPER_LOAD_LIMIT`; one that kills the kernel is skipped from
//! then on. A binding whose revive kills the kernel is poisoned by the store's journal and
//! skipped by the next attempt; a revive that does not finish within the boot timeout has its
//! kernel killed (so the journal names the binding that hung), and the next attempt skips that
//! binding. After `MAX_WEDGES` hangs (or `MAX_CRASHES` crashes) the workspace starts without
//! the snapshot ("wedged while reviving; skipped"), its bindings held on disk for a later
//! start. A kernel that dies while the snapshot store is set up is replaced at most
//! `MAX_CONFIGURE_DEATHS` times; then the workspace starts without snapshots and says why. Each
//! attempt is bounded by the boot timeout, and the number of attempts is bounded too.
//!
//! Keys (issue 21): a snapshot key that is missing, empty, unreadable or not a key turns
//! snapshots off for the kernel before the store is set up, and a snapshot refused because
//! another key signed it (or a newer pi-repl wrote it) is kept where it is with saving off.
//! Either way the first result says so with a `hint:` naming the fix, nothing on disk changes,
//! and every kernel start checks again: once the right key is back, the next start revives.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use super::EngineConfig;
use super::host_call::{HostCallError, host_call};
use super::snapshots::{self, Phase, RestoreReport, SnapshotError, SnapshotSettings};
use crate::helpers::{LoadError, LoadRecord};
use crate::kernel::live_fork::LiveFork;
use crate::kernel::{Kernel, KernelError, KilledBy};

/// How long one helper file may take to load before it is interrupted.
pub const HELPER_LOAD_LIMIT: Duration = Duration::from_secs(30);

/// How many kernels a preparation may lose to bindings that crash their revive before giving
/// up on the snapshot. Each crash poisons one binding, so each retry makes progress.
const MAX_CRASHES: usize = 16;

/// How many revives may hang (each costs a whole boot timeout) before giving up on the
/// snapshot.
const MAX_WEDGES: usize = 1;

/// How many kernels setting up the snapshot store may end before the workspace starts without
/// snapshots (said in a notice) rather than trying again.
const MAX_CONFIGURE_DEATHS: usize = 2;

/// How long setting up the snapshot store may take.
const CONFIGURE_LIMIT: Duration = Duration::from_secs(30);

/// A ready kernel and what preparing it did.
pub(super) struct Prepared {
    pub kernel: Kernel,
    /// One record per helper file, in load order (failed ones included).
    pub helpers: Vec<LoadRecord>,
    /// Whether the snapshot store is set up in this kernel (saves can run).
    pub snapshots_on: bool,
    /// What reviving the snapshot did, when one was asked for.
    pub revive: Option<Revive>,
    /// Things to tell the next cell (the snapshot store could not be set up, ...).
    pub notices: Vec<String>,
}

/// What happened to the snapshot.
#[derive(Debug)]
pub(super) struct Revive {
    pub report: RestoreReport,
    /// Set when the revive was abandoned after a wedge or repeated crashes: why.
    pub abandoned: Option<String>,
    /// Bindings whose revive broke a kernel during this preparation, with the cause.
    pub broke: Vec<(String, String)>,
}

/// Starts a kernel and prepares the workspace in it. `broken` remembers helpers that killed a
/// kernel, with the reason, across calls: they are not loaded again. `phase`: which part of
/// the snapshot to revive (`None`: none). `live`: a live fork of the parent's kernel to adopt
/// instead of starting one (its namespace is the workspace: nothing is revived); when it
/// cannot be adopted, a kernel is started and the first result says the workspace is empty.
pub(super) async fn prepare(
    config: &EngineConfig,
    broken: &mut HashMap<PathBuf, String>,
    phase: Option<Phase>,
    live: Option<&LiveFork>,
) -> Result<Prepared, KernelError> {
    let mut fork_notice = None;
    let mut prepared = prepare_kernel(config, broken, phase, live, &mut fork_notice).await?;
    if let Some(notice) = fork_notice {
        prepared.notices.insert(0, notice);
    }
    Ok(prepared)
}

/// `prepare`, with what the first result says about a live fork left in `fork_notice`.
async fn prepare_kernel(
    config: &EngineConfig,
    broken: &mut HashMap<PathBuf, String>,
    mut phase: Option<Phase>,
    mut live: Option<&LiveFork>,
    fork_notice: &mut Option<String>,
) -> Result<Prepared, KernelError> {
    let mut broke: Vec<(String, String)> = Vec::new();
    let mut abandoned: Option<String> = None;
    let (mut crashes, mut wedges) = (0, 0);
    // Why the snapshot store is not set up any more in this preparation's kernels.
    let mut configure_deaths: Vec<String> = Vec::new();
    'attempt: loop {
        let started = Instant::now();
        let deadline = started + config.boot_timeout;
        let mut kernel = match live.take() {
            Some(fork) => {
                match Kernel::attach_live_fork(fork, &config.kernel, config.boot_timeout).await {
                    Ok(mut kernel) => {
                        tracing::debug!(
                            elapsed_ms = started.elapsed().as_millis() as u64,
                            "live fork adopted"
                        );
                        take_environment(&mut kernel, config, fork).await;
                        phase = None;
                        *fork_notice = Some(live_fork_notice(fork));
                        kernel
                    }
                    Err(error) => {
                        tracing::warn!(%error, "cannot adopt the live fork");
                        *fork_notice = Some(format!(
                            "This workspace was to start as a live copy of the parent's (its \
                             cell {}), but the copy could not be adopted ({error}): it starts \
                             empty. Ask the parent for what you need, or read it from files.",
                            fork.parent_cell
                        ));
                        Kernel::start(&config.kernel, config.boot_timeout).await?
                    }
                }
            }
            None => Kernel::start(&config.kernel, config.boot_timeout).await?,
        };
        tracing::debug!(
            elapsed_ms = started.elapsed().as_millis() as u64,
            "kernel ready"
        );
        if !kernel.runs_python() {
            let notice = format!(
                "This kernel runs {}, not Python: pi-repl's helpers, toolbox and snapshots are \
                 Python-only, so none are loaded and the workspace is not durable (it ends with \
                 the kernel).",
                kernel.language().unwrap_or("another language")
            );
            return Ok(ready(kernel, Vec::new(), false, None, vec![notice]));
        }
        let mut helpers = Vec::new();
        for path in &config.helpers {
            if let Some(reason) = broken.get(path) {
                helpers.push(failed(path, "HelperBrokeTheKernel", reason));
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                kernel.kill(KilledBy::Host);
                return Err(KernelError::BootTimeout {
                    after: config.boot_timeout,
                    stderr_tail: kernel.stderr_tail(),
                });
            }
            let limit = HELPER_LOAD_LIMIT.min(left);
            // The toolbox ships with the module; a remote kernel has its own copy, and the
            // host's other helper files are sent to it.
            let remote_copy =
                kernel.remote_id().is_some() && !path.starts_with(&config.kernel.module_dir);
            let load_path = if remote_copy {
                match send_helper(&mut kernel, path, limit).await {
                    Ok(far_path) => far_path,
                    Err(record) => {
                        helpers.push(record);
                        continue;
                    }
                }
            } else {
                kernel.module_path(&config.kernel.module_dir, path)
            };
            match host_call(
                &mut kernel,
                "helpers",
                "load",
                json!([load_path]),
                limit,
                None,
            )
            .await
            {
                Ok(value) => match serde_json::from_value::<LoadRecord>(value) {
                    Ok(mut record) => {
                        // Records name the file the user has, wherever the kernel read it.
                        record.file = path.display().to_string();
                        helpers.push(record)
                    }
                    Err(error) => helpers.push(failed(path, "BadRecord", &error.to_string())),
                },
                Err(HostCallError::Died(exit)) => {
                    let reason = format!("loading it ended the kernel: {}", exit.describe());
                    tracing::warn!(helper = %path.display(), %reason, "skipping a helper");
                    broken.insert(path.clone(), reason);
                    continue 'attempt;
                }
                Err(HostCallError::Wedged) => {
                    let reason = format!(
                        "it hung at import and did not stop when interrupted after {} s",
                        limit.as_secs()
                    );
                    tracing::warn!(helper = %path.display(), %reason, "skipping a helper");
                    broken.insert(path.clone(), reason);
                    kernel.kill(KilledBy::Host);
                    continue 'attempt;
                }
                Err(error) => helpers.push(failed(path, "LoadFailed", &error.to_string())),
            }
        }

        tracing::debug!(
            elapsed_ms = started.elapsed().as_millis() as u64,
            helpers = helpers.len(),
            "helpers loaded"
        );
        let Some(settings) = &config.snapshot else {
            return Ok(ready(kernel, helpers, false, None, Vec::new()));
        };
        if configure_deaths.len() >= MAX_CONFIGURE_DEATHS {
            let notice = format!(
                "snapshots are off for this kernel: setting up the snapshot store ended the \
                 kernel {} times ({}); nothing will be saved, and the saved workspace was not \
                 revived (it is kept on disk for the next start)",
                configure_deaths.len(),
                configure_deaths.join("; ")
            );
            return Ok(ready(kernel, helpers, false, None, vec![notice]));
        }
        if let Err(problem) = crate::session::read_key(&settings.key_file) {
            return Ok(without_key(kernel, helpers, settings, &problem));
        }
        let protected: Vec<String> = helpers
            .iter()
            .filter(|r| r.error.is_none())
            .flat_map(|r| r.functions.iter().map(|f| f.name.clone()))
            .collect();
        let placed;
        let settings = match (&settings.remote_dir, kernel.remote_id()) {
            (Some(base), Some(_)) => match place_remotely(&mut kernel, settings, base).await {
                Ok(remote) => {
                    placed = remote;
                    &placed
                }
                Err(error) => {
                    let notice = format!(
                        "snapshots are off for this kernel: {error}; nothing will be saved"
                    );
                    return Ok(ready(kernel, helpers, false, None, vec![notice]));
                }
            },
            _ => settings,
        };
        if let Err(error) =
            snapshots::configure(&mut kernel, settings, &protected, CONFIGURE_LIMIT).await
        {
            if let SnapshotError::Call(HostCallError::Died(exit)) = &error {
                tracing::warn!(cause = %exit.describe(), "the kernel died setting up snapshots");
                configure_deaths.push(exit.describe());
                continue 'attempt;
            }
            let notice =
                format!("snapshots are off for this kernel: {error}; nothing will be saved");
            return Ok(ready(kernel, helpers, false, None, vec![notice]));
        }
        tracing::debug!(
            elapsed_ms = started.elapsed().as_millis() as u64,
            "snapshot store configured"
        );
        let Some(phase) = phase else {
            return Ok(ready(kernel, helpers, true, None, Vec::new()));
        };
        let giving_up = abandoned.is_some();
        let skip = if giving_up {
            snapshots::manifest_names(&settings.dir)
        } else {
            Vec::new()
        };
        let limit = deadline.saturating_duration_since(Instant::now());
        match snapshots::restore(
            &mut kernel,
            if giving_up { Phase::All } else { phase },
            &skip,
            limit,
            None,
        )
        .await
        {
            Ok(report) => {
                tracing::debug!(elapsed_ms = started.elapsed().as_millis() as u64, "revived");
                let notices = if report.kept_in_place {
                    // `config.snapshot`: the host's key and session, wherever the store is.
                    vec![kept_in_place_notice(&report, config.snapshot.as_ref())]
                } else {
                    Vec::new()
                };
                let saving = !report.kept_in_place;
                let revive = Revive {
                    report,
                    abandoned,
                    broke,
                };
                return Ok(ready(kernel, helpers, saving, Some(revive), notices));
            }
            Err(SnapshotError::Call(HostCallError::Died(exit))) => {
                let culprit = snapshots::reviving_when_stopped(&settings.dir);
                let cause = exit.describe();
                tracing::info!(?culprit, %cause, "the kernel died while reviving");
                if giving_up {
                    return Err(KernelError::ExitedDuringBoot {
                        exit,
                        stderr_tail: Vec::new(),
                    });
                }
                crashes += 1;
                if culprit.is_none() || crashes >= MAX_CRASHES {
                    abandoned = Some("the revive kept crashing the kernel".into());
                }
                broke.push((
                    culprit.unwrap_or_else(|| "(unknown)".into()),
                    format!("reviving it ended the kernel: {cause}"),
                ));
                continue 'attempt;
            }
            Err(SnapshotError::Call(HostCallError::TimedOut | HostCallError::Wedged)) => {
                // Killing (not interrupting) leaves the journal's open entry, so the store
                // poisons the binding that hung and the next attempt skips it.
                kernel.kill(KilledBy::Host);
                if giving_up {
                    return Err(KernelError::BootTimeout {
                        after: config.boot_timeout,
                        stderr_tail: kernel.stderr_tail(),
                    });
                }
                let culprit = snapshots::reviving_when_stopped(&settings.dir);
                let seconds = config.boot_timeout.as_secs();
                tracing::info!(?culprit, "the revive did not finish within {seconds} s");
                broke.push((
                    culprit.clone().unwrap_or_else(|| "(unknown)".into()),
                    format!("reviving it hung for {seconds} s; skipped"),
                ));
                wedges += 1;
                if wedges > MAX_WEDGES {
                    abandoned = Some(format!(
                        "wedged while reviving{}; skipped",
                        culprit.map(|c| format!(" `{c}`")).unwrap_or_default()
                    ));
                }
                continue 'attempt;
            }
            Err(error) => {
                let notice = format!("the snapshot could not be revived: {error}");
                return Ok(ready(kernel, helpers, true, None, vec![notice]));
            }
        }
    }
}

/// A workspace whose key cannot check or sign snapshots: nothing is saved or revived, and the
/// saved workspace (if any) is told as refused, so the first result says what happened and
/// how to fix it.
/// Gives a live fork the variables this host would have given a kernel it launched (its host
/// id, its tag, this workspace's settings) where the parent's cells left them as the parent's
/// host set them; a variable a cell set is the workspace's and stays. Best effort: a copy that
/// cannot take them keeps its parent's, which is logged.
async fn take_environment(kernel: &mut Kernel, config: &EngineConfig, fork: &LiveFork) {
    let variables: serde_json::Map<String, serde_json::Value> =
        crate::kernel::kernel_variables(&config.kernel, &fork.tag)
            .into_iter()
            .map(|(name, value)| (name, serde_json::Value::String(value)))
            .collect();
    let taken = host_call(
        kernel,
        "live_fork",
        "take_environment",
        json!([variables]),
        CONFIGURE_LIMIT,
        None,
    )
    .await;
    if let Err(error) = taken {
        tracing::warn!(%error, "the live fork keeps its parent's environment");
    }
}

/// What the first result of a workspace forked live says.
fn live_fork_notice(fork: &LiveFork) -> String {
    let mut notice = format!(
        "This workspace is a live copy of the parent's, made when the parent's cell {} called \
         spawn_agent: every variable, import and function is as it was then (shared with the \
         parent until either changes it; changes here are this workspace's own). Files are \
         shared, not copied.",
        fork.parent_cell
    );
    if !fork.threads_left.is_empty() {
        notice.push_str(&format!(
            " Threads the parent had started do not run here: {}.",
            fork.threads_left.join(", ")
        ));
    }
    notice
}

fn without_key(
    kernel: Kernel,
    helpers: Vec<LoadRecord>,
    settings: &SnapshotSettings,
    problem: &crate::session::KeyProblem,
) -> Prepared {
    let saved = settings.dir.join("manifest.json").exists();
    let notice = format!(
        "snapshots are off for this session: {problem}, so nothing is saved{}\nhint: {}",
        if saved {
            ", and the saved workspace was not revived (it is kept unchanged on disk)"
        } else {
            ""
        },
        problem.hint()
    );
    let revive = saved.then(|| Revive {
        report: RestoreReport {
            status: "refused".into(),
            reason: format!("{problem}; the snapshot is kept unchanged on disk"),
            ..RestoreReport::default()
        },
        abandoned: None,
        broke: Vec::new(),
    });
    ready(kernel, helpers, false, revive, vec![notice])
}

/// What the first result says, after the reset, when the snapshot was refused and kept where
/// it is: saving is off, and how the session gets it back.
fn kept_in_place_notice(report: &RestoreReport, host: Option<&SnapshotSettings>) -> String {
    let key = host
        .map(|settings| settings.key_file.display().to_string())
        .unwrap_or_else(|| "PI_REPL_HOME/snapshot.key".into());
    let session = host
        .and_then(|settings| settings.dir.parent())
        .and_then(|dir| dir.file_name())
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|| "NAME".into());
    let hint = match report.refused_kind.as_deref() {
        Some("newer") => "upgrade pi-repl; the session revives on its next start, with nothing \
                          else to do"
            .to_string(),
        _ => format!(
            "put back the snapshot key that signed it at {key} and start the session again: it \
             revives with nothing else to do (`pi-repl sessions` lists refused snapshots). If \
             that key is lost for good, `pi-repl sessions rm {session}` starts this session \
             afresh"
        ),
    };
    format!(
        "snapshots are off for this session: saving would replace the refused snapshot, so \
         nothing is saved until a start can read it\nhint: {hint}"
    )
}

/// The snapshot settings with the store on a remote kernel's own machine, under `base`
/// (`pi_repl_kernel.remote.snapshot_place`, which also receives the installation's key).
async fn place_remotely(
    kernel: &mut Kernel,
    settings: &SnapshotSettings,
    base: &std::path::Path,
) -> Result<SnapshotSettings, String> {
    let session = settings
        .dir
        .parent()
        .and_then(|dir| dir.file_name())
        .map(|name| name.to_string_lossy().into_owned())
        .ok_or_else(|| "the session has no directory name".to_string())?;
    let key = std::fs::read_to_string(&settings.key_file)
        .map_err(|error| format!("cannot read {}: {error}", settings.key_file.display()))?;
    let placed = host_call(
        kernel,
        "remote",
        "snapshot_place",
        json!([base, session, key]),
        CONFIGURE_LIMIT,
        None,
    )
    .await
    .map_err(|error| {
        format!(
            "cannot prepare {} on the kernel's machine: {error}",
            base.display()
        )
    })?;
    let paths: Vec<PathBuf> = serde_json::from_value(placed)
        .map_err(|error| format!("unexpected answer preparing the snapshot directory: {error}"))?;
    let [dir, key_file] = <[PathBuf; 2]>::try_from(paths)
        .map_err(|_| "unexpected answer preparing the snapshot directory".to_string())?;
    Ok(SnapshotSettings {
        dir,
        key_file,
        ..settings.clone()
    })
}

/// Sends a helper file of the host's to a remote kernel (`pi_repl_kernel.remote.put_helper`);
/// returns the path to load it from there, or the failed record.
async fn send_helper(
    kernel: &mut Kernel,
    path: &std::path::Path,
    limit: Duration,
) -> Result<PathBuf, LoadRecord> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| failed(path, "Unreadable", &error.to_string()))?;
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let digest = format!("{:016x}", xxhash_rust::xxh3::xxh3_64(text.as_bytes()));
    let sent = host_call(
        kernel,
        "remote",
        "put_helper",
        json!([name, text, digest]),
        limit,
        None,
    )
    .await
    .map_err(|error| failed(path, "SendFailed", &error.to_string()))?;
    sent.as_str().map(PathBuf::from).ok_or_else(|| {
        failed(
            path,
            "SendFailed",
            "the kernel did not say where it wrote it",
        )
    })
}

fn ready(
    kernel: Kernel,
    helpers: Vec<LoadRecord>,
    snapshots_on: bool,
    revive: Option<Revive>,
    notices: Vec<String>,
) -> Prepared {
    Prepared {
        kernel,
        helpers,
        snapshots_on,
        revive,
        notices,
    }
}

fn failed(path: &std::path::Path, kind: &str, message: &str) -> LoadRecord {
    LoadRecord {
        file: path.display().to_string(),
        summary: None,
        functions: Vec::new(),
        error: Some(LoadError {
            kind: kind.to_string(),
            message: message.to_string(),
            line: None,
            text: String::new(),
        }),
    }
}
