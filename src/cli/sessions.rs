//! `pi-repl sessions`: list sessions (with refused snapshots and the command that recovers
//! them), show one's bindings, remove and prune by hand, recover a kept snapshot, rekey.

use anyhow::Context;
use clap::Subcommand;

use super::{Exit, Failure};
use crate::home::Home;
use crate::session::listing::{self, SessionSummary, human_age, human_bytes};
use crate::session::snapshot_check::SnapshotState;
use crate::session::{KEEP_SESSIONS, prune};

#[derive(Debug, clap::Args)]
pub struct SessionsArgs {
    #[command(subcommand)]
    pub action: Option<Action>,

    /// Print JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum Action {
    /// List sessions: name, size, age, bindings (the default).
    List,
    /// List a session's saved bindings with their sizes.
    Show {
        /// The session's name (in this project) or its full key.
        name: String,
    },
    /// Remove a session's directory: its snapshot and outputs.
    Rm {
        /// The session's name (in this project) or its full key.
        name: String,
    },
    /// Remove sessions whose conversation is gone, keeping the newest N.
    Prune {
        #[arg(long, value_parser = super::values::whole, default_value_t = KEEP_SESSIONS as u64)]
        keep: u64,
    },
    /// Write a session's notebook (every cell, its outputs, how it ended) to FILE: also while the
    /// session is running, and for one of its sub-agents' workspaces (docs/notebook.md).
    Export {
        /// The session's name (in this project) or its full key.
        name: String,
        /// Where to write the notebook (`-`: stdout).
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: std::path::PathBuf,
        /// The sub-agent of that session (or of one of its sub-agents) whose notebook to write.
        #[arg(long, value_name = "ID")]
        agent: Option<String>,
    },
    /// After losing the snapshot key (or with an unusable one): set every snapshot aside (kept
    /// on disk, unreadable without the old key) and start with a new key.
    Rekey,
    /// Put back a session's snapshot kept aside (`snapshot.refused-…`, `snapshot.unreadable-…`):
    /// the newest one this installation's key reads. What was in place is kept aside.
    Recover {
        /// The session's name (in this project) or its full key.
        name: String,
        /// Also when the session's current snapshot is readable (it is kept as
        /// `snapshot.replaced-<time>`).
        #[arg(long)]
        replace: bool,
    },
}

pub async fn run(args: SessionsArgs) -> Result<Exit, Failure> {
    let home = Home::from_env()?;
    let here = std::env::current_dir().context("cannot read the current directory")?;
    match args.action.unwrap_or(Action::List) {
        Action::List => {
            let sessions = listing::list(&home);
            if args.json {
                super::stdout::line(format_args!(
                    "{}",
                    serde_json::to_string_pretty(&sessions).context("cannot encode")?
                ));
                return Ok(Exit::Success);
            }
            if sessions.is_empty() {
                crate::stderr_line!("no sessions under {}", home.state().display());
                return Ok(Exit::Success);
            }
            super::stdout::line(format_args!(
                "{:<48} {:>9} {:>7} {:>9}  saved at",
                "session", "size", "age", "bindings"
            ));
            for s in &sessions {
                super::stdout::line(format_args!(
                    "{:<48} {:>9} {:>7} {:>9}  {}",
                    s.key,
                    human_bytes(s.size_bytes),
                    human_age(s.age_seconds),
                    s.bindings
                        .map(|n| n.to_string())
                        .unwrap_or_else(|| "-".into()),
                    s.saved_at.clone().unwrap_or_else(|| "never".into())
                ));
            }
            print_refused(&home, &sessions);
            Ok(Exit::Success)
        }
        Action::Export {
            name,
            output,
            agent,
        } => {
            let session = listing::find(&home, &here, &name)
                .map_err(|e| Failure::usage(anyhow::anyhow!(e), None))?;
            export(&session.dir, &name, agent.as_deref(), &output)?;
            Ok(Exit::Success)
        }
        Action::Show { name } => {
            let session = listing::find(&home, &here, &name)
                .map_err(|e| Failure::usage(anyhow::anyhow!(e), None))?;
            let llm =
                crate::llm::ledger::read_usage(&session.dir.join(crate::llm::ledger::USAGE_FILE));
            let Some((bindings, unsaved)) = listing::bindings(&session.dir) else {
                let manifest = session.dir.join("snapshot").join("manifest.json");
                if manifest.exists() {
                    return Err(Failure::new(
                        anyhow::anyhow!(
                            "session {:?} has a snapshot that cannot be read: {} is not a valid \
                             manifest",
                            name,
                            manifest.display()
                        ),
                        Some(
                            "the session's next start sets it aside (kept as `snapshot.refused-…`) \
                             and starts a new snapshot; `pi-repl sessions rm NAME` removes it"
                                .into(),
                        ),
                    ));
                }
                super::stdout::line(format_args!("{}: no snapshot saved yet", session.key));
                if let Some(llm) = llm {
                    print_llm_usage(&llm);
                }
                return Ok(Exit::Success);
            };
            let packages = listing::packages(&session.dir);
            let rewind_states = crate::session::states::kept(&session.dir.join("snapshot"));
            if args.json {
                let json = serde_json::json!({
                    "session": session, "bindings": bindings, "unsaved": unsaved, "llm": llm,
                    "packages": packages, "rewind_states": rewind_states,
                });
                super::stdout::line(format_args!(
                    "{}",
                    serde_json::to_string_pretty(&json).context("cannot encode")?
                ));
                return Ok(Exit::Success);
            }
            super::stdout::line(format_args!(
                "{} (saved at {})",
                session.key,
                session.saved_at.unwrap_or_default()
            ));
            for b in bindings {
                let what = match &b.alias_of {
                    Some(target) => format!("alias of {target}"),
                    None => format!("{} {}", b.kind, b.type_name),
                };
                super::stdout::line(format_args!(
                    "  {:<32} {:>9}  {what}",
                    b.name,
                    human_bytes(b.stored_bytes)
                ));
            }
            for (name, why) in unsaved {
                super::stdout::line(format_args!("  {name:<32} {:>9}  not saved: {why}", "-"));
            }
            if !packages.is_empty() {
                super::stdout::line(format_args!(
                    "packages the session installed: {}",
                    packages.join(", ")
                ));
            }
            super::stdout::line(format_args!(
                "states a rewind can return to: {}",
                if rewind_states.is_empty() {
                    "none kept".to_string()
                } else {
                    format!(
                        "after {} {} (execute {{\"rewind\": N}}, or `pi-repl exec --session \
                         NAME --rewind N`)",
                        if rewind_states.len() == 1 {
                            "cell"
                        } else {
                            "cells"
                        },
                        crate::session::states::ranges(&rewind_states)
                    )
                }
            ));
            if let Some(llm) = llm {
                print_llm_usage(&llm);
            }
            Ok(Exit::Success)
        }
        Action::Rm { name } => {
            let session = listing::find(&home, &here, &name)
                .map_err(|e| Failure::usage(anyhow::anyhow!(e), None))?;
            let lock = crate::fsutil::open_private(
                &session.dir.join("lock"),
                crate::fsutil::Open::ExistingLock,
            );
            if let Ok(file) = lock
                && nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
                    .is_err()
            {
                return Err(Failure::new(
                    anyhow::anyhow!("session {} is in use by a running pi-repl", session.key),
                    Some("stop it first (close the agent using it)".into()),
                ));
            }
            std::fs::remove_dir_all(&session.dir)
                .with_context(|| format!("cannot remove {}", session.dir.display()))?;
            crate::stderr_line!("removed {}", session.key);
            Ok(Exit::Success)
        }
        Action::Prune { keep } => {
            let report = prune(&home, None, usize::try_from(keep).unwrap_or(usize::MAX));
            for (key, why) in &report.removed {
                super::stdout::line(format_args!("removed {key}: {why}"));
            }
            if report.removed.is_empty() {
                crate::stderr_line!("nothing to prune");
            }
            Ok(Exit::Success)
        }
        Action::Rekey => {
            let rekeyed =
                crate::session::rekey(&home).map_err(|error| Failure::new(error, None))?;
            for dir in &rekeyed.set_aside {
                super::stdout::line(format_args!("set aside {}", dir.display()));
            }
            if let Some(old) = &rekeyed.old_key {
                super::stdout::line(format_args!("kept the unusable key as {}", old.display()));
            }
            crate::stderr_line!(
                "a new snapshot key is in place; {} snapshot(s) set aside (remove them with \
                 `pi-repl sessions rm NAME`, or put the old key back and run `pi-repl sessions \
                 recover NAME`)",
                rekeyed.set_aside.len()
            );
            Ok(Exit::Success)
        }
        Action::Recover { name, replace } => {
            let session = listing::find(&home, &here, &name)
                .map_err(|e| Failure::usage(anyhow::anyhow!(e), None))?;
            let key = crate::session::read_key(&crate::session::key_path(&home));
            let recovered =
                crate::session::recover::recover(&session.dir, &session.key, key, replace)
                    .map_err(|error| {
                        let hint = error.hint();
                        Failure::new(anyhow::Error::new(error), hint)
                    })?;
            super::stdout::line(format_args!(
                "recovered {} (saved at {}) as the snapshot of {}",
                recovered.from.display(),
                recovered.saved_at.as_deref().unwrap_or("an unknown time"),
                session.key
            ));
            if let Some(aside) = &recovered.replaced {
                super::stdout::line(format_args!(
                    "kept the snapshot it replaces as {}",
                    aside.display()
                ));
            }
            crate::stderr_line!("the session revives it on its next start");
            Ok(Exit::Success)
        }
    }
}

/// Under the table: every refused snapshot (in place or kept aside) and what recovers it.
fn print_refused(home: &Home, sessions: &[SessionSummary]) {
    if let Err(problem) = crate::session::read_key(&crate::session::key_path(home))
        && sessions
            .iter()
            .any(|s| s.snapshot == SnapshotState::Unchecked)
    {
        crate::stderr_line!("pi-repl: {problem}, so no snapshot can be checked");
        crate::stderr_line!("hint: {}", problem.hint());
    }
    let refused: Vec<&SessionSummary> = sessions.iter().filter(|s| s.has_refused()).collect();
    if refused.is_empty() {
        return;
    }
    super::stdout::line(format_args!(
        "\nrefused snapshots (kept on disk as they are; no start replaces them):"
    ));
    for s in refused {
        let in_place = matches!(s.snapshot, SnapshotState::Readable { .. });
        match &s.snapshot {
            SnapshotState::OtherKey => super::stdout::line(format_args!(
                "  {}: snapshot/ {}: put back the key that signed it; the session revives on \
                 its next start",
                s.key,
                s.snapshot.describe()
            )),
            SnapshotState::Newer { .. } => super::stdout::line(format_args!(
                "  {}: snapshot/ {}: upgrade pi-repl; the session revives on its next start",
                s.key,
                s.snapshot.describe()
            )),
            SnapshotState::Damaged { .. } => super::stdout::line(format_args!(
                "  {}: snapshot/ {}: its next start sets it aside and starts a new snapshot",
                s.key,
                s.snapshot.describe()
            )),
            _ => {}
        }
        for kept in &s.kept {
            let what = match &kept.state {
                SnapshotState::Readable { .. } => format!(
                    "pi-repl sessions recover {}{}",
                    s.key,
                    if in_place { " --replace" } else { "" }
                ),
                SnapshotState::OtherKey => format!(
                    "put back the key that signed it, then: pi-repl sessions recover {}",
                    s.key
                ),
                SnapshotState::Newer { .. } => {
                    format!("upgrade pi-repl, then: pi-repl sessions recover {}", s.key)
                }
                SnapshotState::Unchecked => "fix the snapshot key first".to_string(),
                SnapshotState::Damaged { .. } | SnapshotState::NoManifest => format!(
                    "nothing recovers it; `pi-repl sessions rm {}` removes the session",
                    s.key
                ),
            };
            super::stdout::line(format_args!(
                "  {}: {} {}: {what}",
                s.key,
                kept.name(),
                kept.state.describe()
            ));
        }
    }
}

/// The session's model requests (`llm_query`), as `sessions show` prints them.
fn print_llm_usage(llm: &crate::llm::ledger::Usage) {
    let estimated = if llm.estimated > 0 {
        format!(" ({} answers' tokens estimated)", llm.estimated)
    } else {
        String::new()
    };
    super::stdout::line(format_args!(
        "llm_query: {} request(s), {} input and {} output tokens{estimated}",
        llm.calls, llm.input_tokens, llm.output_tokens
    ));
}

/// Writes the live notebook of the session in `dir` (or of its sub-agent `agent`) to `output`.
fn export(
    dir: &std::path::Path,
    name: &str,
    agent: Option<&str>,
    output: &std::path::Path,
) -> Result<(), Failure> {
    let workspace = match agent {
        Some(id) => crate::engine::notebook::export::agent_workspace(dir, id).ok_or_else(|| {
            Failure::usage(
                anyhow::anyhow!("session {name:?} has no sub-agent {id:?}"),
                Some(format!(
                    "its sub-agents are listed under {}",
                    dir.join("agents").display()
                )),
            )
        })?,
        None => dir.to_path_buf(),
    };
    let bytes = crate::engine::notebook::export::read(&workspace).map_err(|error| {
        Failure::new(
            error,
            Some(
                "a notebook is written by pi-repl 0.1 or later for every durable session; run a \
                 cell in the session to start it"
                    .into(),
            ),
        )
    })?;
    if output.as_os_str() == "-" {
        super::stdout::write(&String::from_utf8_lossy(&bytes));
        return Ok(());
    }
    crate::engine::notebook::write(output, &bytes)
        .with_context(|| format!("cannot write {}", output.display()))?;
    crate::stderr_line!("wrote {}", output.display());
    Ok(())
}
