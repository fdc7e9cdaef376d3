//! Sessions: where one conversation's workspace lives on disk.
//!
//! Owns: the session key `<project-slug>__<conversation>`, its directory under
//! `PI_REPL_HOME/state/` (0700), its metadata, the exclusive lock that keeps two pi-repl
//! processes off one session, forking a parent's last snapshot (or the state it kept right after
//! one of its cells, `--fork-at`) into a new session once, and pruning. Does not own: what is in a snapshot (the kernel-side store writes `snapshot/`).
//!
//! Layout of one session directory:
//! ```text
//! state/<project-slug>__<conversation>/
//!   session.json   metadata: name, project dir, conversation file, created, last used, fork
//!   lock           held (flock) by the pi-repl serving the session
//!   snapshot/      the snapshot store (manifest + blobs), written by the kernel
//!   snapshot.refused-<time>, snapshot.unreadable-<time>, snapshot.replaced-<time>
//!                  snapshots kept aside (a damaged one, `sessions rekey`, `sessions recover`):
//!                  never read by a start; `sessions recover` puts a readable one back
//!   outputs/       full output of truncated cells, images
//! ```
//!
//! No session name means an ephemeral workspace: nothing is saved, outputs go to
//! `PI_REPL_HOME/outputs/ephemeral/`.

pub mod child;
mod key;
pub mod listing;
mod prune;
pub mod recover;
pub mod snapshot_check;
pub mod states;

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

use crate::fsutil::create_private_dir;
use crate::home::Home;

pub use key::{KeyProblem, Rekeyed, ensure_key, key_path, read_key, rekey};
pub use prune::{PruneReport, prune};

/// How many session directories are kept; older ones are removed.
pub const KEEP_SESSIONS: usize = 25;

/// What the user asked for.
#[derive(Debug, Clone, Default)]
pub struct SessionRequest {
    /// The conversation's name (`--session`); `None` is an ephemeral workspace.
    pub name: Option<String>,
    /// A parent conversation whose last snapshot seeds this one once (`--fork-from`).
    pub fork_from: Option<String>,
    /// Seed from the parent's state right after its answered cell N instead of its last
    /// snapshot (`--fork-at`, e.g. pi's `/fork` to an earlier message), when that state is kept.
    pub fork_at: Option<u64>,
    /// The conversation's file; when it is deleted, its session is swept.
    pub conversation_file: Option<PathBuf>,
}

/// Metadata kept in `session.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionMeta {
    pub name: String,
    pub key: String,
    pub project_dir: PathBuf,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_file: Option<PathBuf>,
    pub created: String,
    pub last_used: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<String>,
}

/// An open session. Holds the lock until dropped.
#[derive(Debug)]
pub struct Session {
    pub key: String,
    /// `None` for an ephemeral workspace.
    pub dir: Option<PathBuf>,
    outputs: PathBuf,
    /// Set when this open copied a parent's snapshot in.
    pub forked_from: Option<String>,
    /// Something the first cell should be told about how this session started (a fork whose
    /// parent had nothing saved).
    pub notice: Option<String>,
    _lock: Option<nix::fcntl::Flock<std::fs::File>>,
}

impl Session {
    /// Where the kernel-side store keeps this session's snapshot.
    pub fn snapshot_dir(&self) -> Option<PathBuf> {
        self.dir.as_ref().map(|dir| dir.join("snapshot"))
    }

    /// Where full outputs and images of this session go.
    pub fn outputs_dir(&self) -> &Path {
        &self.outputs
    }

    pub fn is_ephemeral(&self) -> bool {
        self.dir.is_none()
    }
}

/// Opens (creating if needed) the session for `request` in the project at `project_dir`.
pub fn open(home: &Home, project_dir: &Path, request: &SessionRequest) -> anyhow::Result<Session> {
    let Some(name) = &request.name else {
        return Ok(Session {
            key: "ephemeral".into(),
            dir: None,
            outputs: home.outputs().join("ephemeral"),
            forked_from: None,
            notice: None,
            _lock: None,
        });
    };
    let key = session_key(project_dir, name)?;
    let state = home.state();
    create_private_dir(&state)?;
    let dir = state.join(&key);
    create_private_dir(&dir)?;
    let lock = lock_session(&dir, name)?;
    let now = chrono::Local::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let existing = read_meta(&dir);
    if let Some(other) = existing.as_ref().filter(|meta| &meta.name != name) {
        bail!(
            "the session name {name:?} collides with the existing session {:?}: both are stored \
             as {key}; choose a name that differs in letters or digits",
            other.name
        );
    }
    let mut meta = existing.clone().unwrap_or(SessionMeta {
        name: name.clone(),
        key: key.clone(),
        project_dir: project_dir.to_path_buf(),
        conversation_file: None,
        created: now.clone(),
        last_used: now.clone(),
        forked_from: None,
    });
    meta.last_used = now;
    if let Some(file) = &request.conversation_file {
        meta.conversation_file = Some(std::path::absolute(file).unwrap_or_else(|_| file.clone()));
    }
    let mut forked_from = None;
    let mut notice = None;
    if let Some(parent) = &request.fork_from {
        let seeded = dir.join("snapshot").join("manifest.json").exists();
        if meta.forked_from.is_none() && !seeded {
            match find_parent(&state, project_dir, parent) {
                Some(parent_dir) => {
                    let parent_snapshot = parent_dir.join("snapshot");
                    let at = request
                        .fork_at
                        .map(|cell| (cell, states::manifest_of(&parent_snapshot, cell)));
                    let key = parent_dir
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    match at {
                        Some((cell, Some(manifest))) => {
                            copy_snapshot_at(&parent_snapshot, &manifest, &dir.join("snapshot"))?;
                            meta.forked_from =
                                Some(format!("{key}, as it was right after its cell {cell}"));
                        }
                        Some((cell, None)) => {
                            copy_snapshot(&parent_snapshot, &dir.join("snapshot"))?;
                            meta.forked_from = Some(key.clone());
                            notice = Some(format!(
                                "this conversation was forked from {parent:?} at its cell {cell}, \
                                 whose state is no longer kept (`pi-repl sessions show {parent}` \
                                 lists the kept ones); the workspace starts from {parent:?}'s \
                                 last snapshot instead, which may hold names bound after that \
                                 cell"
                            ));
                        }
                        None => {
                            copy_snapshot(&parent_snapshot, &dir.join("snapshot"))?;
                            meta.forked_from = Some(key);
                        }
                    }
                    forked_from = meta.forked_from.clone();
                }
                None => {
                    // A conversation forked from one that never kept a workspace: nothing to
                    // copy, which is not an error. Recorded so it is said once.
                    meta.forked_from = Some(format!("{parent} (nothing saved)"));
                    notice = Some(format!(
                        "this conversation was forked from {parent:?}, which has no saved \
                         workspace in this project; the workspace starts empty"
                    ));
                }
            }
        }
    }
    // Bookkeeping: a session whose metadata cannot be written (a full disk) still runs cells.
    if let Err(error) = write_meta(&dir, &meta) {
        tracing::warn!(error = %format!("{error:#}"), "cannot update session.json");
        let told = format!(
            "pi-repl could not update this session's session.json ({error:#}); cells run, but \
             `pi-repl sessions` may show stale details"
        );
        notice = Some(match notice {
            Some(first) => format!("{first}; {told}"),
            None => told,
        });
    }
    Ok(Session {
        key,
        outputs: dir.join("outputs"),
        dir: Some(dir),
        forked_from,
        notice,
        _lock: Some(lock),
    })
}

/// `<project-slug>__<conversation>`: the project directory's name plus a short hash of its
/// full path (two projects called `app` stay apart), and the conversation name made safe.
pub fn session_key(project_dir: &Path, name: &str) -> anyhow::Result<String> {
    let conversation = safe_name(name);
    if conversation.is_empty() {
        bail!(
            "the session name {name:?} has no usable characters (use letters, digits, `-`, `_`, `.`)"
        );
    }
    Ok(format!("{}__{conversation}", project_slug(project_dir)))
}

/// The project part of a session key.
pub fn project_slug(project_dir: &Path) -> String {
    let base = project_dir
        .file_name()
        .map(|n| safe_name(&n.to_string_lossy()))
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "root".to_string());
    let digest = xxhash_rust::xxh3::xxh3_64(project_dir.as_os_str().as_encoded_bytes());
    format!("{base}-{:08x}", digest as u32)
}

fn safe_name(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let trimmed = cleaned.trim_matches(|c| c == '-' || c == '.').to_string();
    // Keys become directory names: keep them short and never `..`.
    trimmed
        .chars()
        .take(120)
        .collect::<String>()
        .replace("__", "_")
}

fn lock_session(dir: &Path, name: &str) -> anyhow::Result<nix::fcntl::Flock<std::fs::File>> {
    let path = dir.join("lock");
    let file = crate::fsutil::open_private(&path, crate::fsutil::Open::Lock)
        .with_context(|| format!("cannot open {}", path.display()))?;
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(lock),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => bail!(
            "session {name:?} is in use by another pi-repl; two processes cannot share one \
             workspace (its directory is {})",
            dir.display()
        ),
        Err((_, errno)) => bail!("cannot lock {}: {errno}", path.display()),
    }
}

/// Reads a session's metadata, if it has readable metadata.
pub fn read_meta(dir: &Path) -> Option<SessionMeta> {
    let text = std::fs::read_to_string(dir.join("session.json")).ok()?;
    serde_json::from_str(&text).ok()
}

fn write_meta(dir: &Path, meta: &SessionMeta) -> anyhow::Result<()> {
    let json = serde_json::to_vec_pretty(meta).context("cannot encode session metadata")?;
    crate::fsutil::write_atomic(&dir.join("session.json"), &json)
}

/// The parent's directory: a session of this project named `parent`, or a full key.
fn find_parent(state: &Path, project_dir: &Path, parent: &str) -> Option<PathBuf> {
    let candidates = [
        session_key(project_dir, parent).ok(),
        Some(safe_name(parent)),
    ];
    candidates
        .into_iter()
        .flatten()
        .map(|key| state.join(key))
        .find(|dir| dir.join("session.json").exists() || dir.join("snapshot").exists())
}

/// Copies a snapshot directory as it would be had `state` (a kept state's manifest,
/// `states/<N>.json`) been its last commit: every blob (a kept state's blobs are never
/// collected; the fork's first save sweeps the ones it does not name), with `state` as its
/// `manifest.json`.
fn copy_snapshot_at(from: &Path, state: &Path, to: &Path) -> anyhow::Result<()> {
    copy_snapshot(from, to)?;
    crate::fsutil::copy_atomic(state, &to.join("manifest.json"))
}

/// Copies a snapshot directory, hard-linking files where it can (blobs are immutable).
fn copy_snapshot(from: &Path, to: &Path) -> anyhow::Result<()> {
    if !from.exists() {
        return Ok(()); // the parent never saved anything: the fork starts empty
    }
    create_private_dir(to)?;
    for entry in walk(from)? {
        let relative = entry.strip_prefix(from).unwrap_or(&entry);
        // The kept states of the parent's answered cells are numbered by the parent's cells: a
        // fork rewinds only to its own (`docs/rewind.md`); the blobs only they named are swept
        // by the fork's first save.
        if relative.starts_with("states") {
            continue;
        }
        let target = to.join(relative);
        if entry.is_dir() {
            create_private_dir(&target)?;
            continue;
        }
        if let Some(parent) = target.parent() {
            create_private_dir(parent)?;
        }
        let is_blob = relative.starts_with("blobs");
        if !is_blob || std::fs::hard_link(&entry, &target).is_err() {
            crate::fsutil::copy_atomic(&entry, &target)?;
        }
    }
    Ok(())
}

fn walk(root: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("cannot read {}", dir.display()))?
        {
            let path = entry?.path();
            if path.is_dir() {
                pending.push(path.clone());
            }
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(name: &str) -> SessionRequest {
        SessionRequest {
            name: Some(name.into()),
            ..Default::default()
        }
    }

    #[test]
    fn keys_name_the_project_and_the_conversation_safely() {
        let key = session_key(Path::new("/home/me/my app"), "2026-11-30_abc/../x").unwrap();
        assert!(key.starts_with("my-app-"), "{key}");
        assert!(key.ends_with("__2026-11-30_abc-..-x"), "{key}");
        assert!(!key.contains('/'));
        assert_ne!(
            session_key(Path::new("/a/app"), "s").unwrap(),
            session_key(Path::new("/b/app"), "s").unwrap()
        );
        assert!(session_key(Path::new("/a"), "///").is_err());
    }

    /// Issue 11: `a/b` and `a b` were one session.
    #[test]
    fn names_that_map_to_one_key_are_refused_naming_the_other() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::at(tmp.path().join("home"));
        let project = tmp.path().join("proj");
        std::fs::create_dir_all(&project).unwrap();
        drop(open(&home, &project, &request("a/b")).unwrap());
        let error = open(&home, &project, &request("a b"))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("collides with the existing session \"a/b\""),
            "{error}"
        );
        assert!(open(&home, &project, &request("a/b")).is_ok());
    }

    #[test]
    fn an_unnamed_session_is_ephemeral_and_writes_no_state() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::at(tmp.path());
        let session = open(&home, tmp.path(), &SessionRequest::default()).unwrap();
        assert!(session.is_ephemeral());
        assert!(session.snapshot_dir().is_none());
        assert!(!home.state().exists());
    }

    #[test]
    fn a_session_is_private_records_its_metadata_and_is_exclusive() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::at(tmp.path().join("home"));
        let project = tmp.path().join("proj");
        std::fs::create_dir_all(&project).unwrap();
        let mut with_file = request("conv1");
        with_file.conversation_file = Some(project.join("conv1.jsonl"));
        let session = open(&home, &project, &with_file).unwrap();
        let dir = session.dir.clone().unwrap();
        assert_eq!(
            std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
        let meta = read_meta(&dir).unwrap();
        assert_eq!(meta.name, "conv1");
        assert_eq!(meta.conversation_file, Some(project.join("conv1.jsonl")));
        let second = open(&home, &project, &request("conv1")).unwrap_err();
        assert!(
            second.to_string().contains("in use by another pi-repl"),
            "{second}"
        );
        drop(session);
        assert!(open(&home, &project, &request("conv1")).is_ok());
    }

    #[test]
    fn a_fork_copies_the_parents_snapshot_once_and_leaves_the_parent_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::at(tmp.path().join("home"));
        let project = tmp.path().join("proj");
        std::fs::create_dir_all(&project).unwrap();
        let parent = open(&home, &project, &request("parent")).unwrap();
        let parent_snapshot = parent.snapshot_dir().unwrap();
        std::fs::create_dir_all(parent_snapshot.join("blobs/ab")).unwrap();
        std::fs::write(parent_snapshot.join("manifest.json"), "{\"v\":1}").unwrap();
        std::fs::write(parent_snapshot.join("blobs/ab/abcd"), "blob").unwrap();
        std::fs::create_dir_all(parent_snapshot.join("states")).unwrap();
        std::fs::write(parent_snapshot.join("states/3.json"), "{\"v\":1}").unwrap();
        drop(parent);

        let mut fork = request("child");
        fork.fork_from = Some("parent".into());
        let child = open(&home, &project, &fork).unwrap();
        assert!(child.forked_from.is_some());
        let child_snapshot = child.snapshot_dir().unwrap();
        assert_eq!(
            std::fs::read_to_string(child_snapshot.join("manifest.json")).unwrap(),
            "{\"v\":1}"
        );
        assert_eq!(
            std::fs::read_to_string(child_snapshot.join("blobs/ab/abcd")).unwrap(),
            "blob"
        );
        // Issue 25: the parent's kept states are numbered by its cells, not the fork's.
        assert!(!child_snapshot.join("states").exists());
        // The child moves on; a second open must not copy the parent over it.
        std::fs::write(child_snapshot.join("manifest.json"), "{\"v\":2}").unwrap();
        drop(child);
        let again = open(&home, &project, &fork).unwrap();
        assert!(again.forked_from.is_none());
        assert_eq!(
            std::fs::read_to_string(child_snapshot.join("manifest.json")).unwrap(),
            "{\"v\":2}"
        );
        assert_eq!(
            std::fs::read_to_string(parent_snapshot.join("manifest.json")).unwrap(),
            "{\"v\":1}"
        );
    }

    /// Issue 25: pi's `/fork` to an earlier message starts the new conversation from the state
    /// the parent kept right after the last cell on the forked path (`--fork-at`), following a
    /// `.same` link; a state no longer kept falls back to the last snapshot, and says so.
    #[test]
    fn a_fork_at_a_cell_starts_from_the_state_kept_after_that_cell() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::at(tmp.path().join("home"));
        let project = tmp.path().join("proj");
        std::fs::create_dir_all(&project).unwrap();
        let parent = open(&home, &project, &request("parent")).unwrap();
        let parent_snapshot = parent.snapshot_dir().unwrap();
        std::fs::create_dir_all(parent_snapshot.join("blobs/ab")).unwrap();
        std::fs::create_dir_all(parent_snapshot.join("states")).unwrap();
        std::fs::write(parent_snapshot.join("manifest.json"), "{\"after\":4}").unwrap();
        std::fs::write(parent_snapshot.join("states/2.json"), "{\"after\":2}").unwrap();
        std::fs::write(parent_snapshot.join("states/3.same"), "2").unwrap();
        std::fs::write(parent_snapshot.join("states/4.json"), "{\"after\":4}").unwrap();
        std::fs::write(parent_snapshot.join("blobs/ab/abcd"), "blob").unwrap();
        drop(parent);

        let mut fork = request("child");
        fork.fork_from = Some("parent".into());
        fork.fork_at = Some(3);
        let child = open(&home, &project, &fork).unwrap();
        let child_snapshot = child.snapshot_dir().unwrap();
        assert_eq!(
            std::fs::read_to_string(child_snapshot.join("manifest.json")).unwrap(),
            "{\"after\":2}"
        );
        assert_eq!(
            std::fs::read_to_string(child_snapshot.join("blobs/ab/abcd")).unwrap(),
            "blob"
        );
        assert!(!child_snapshot.join("states").exists());
        let from = child.forked_from.clone().unwrap();
        assert!(
            from.ends_with("__parent, as it was right after its cell 3"),
            "{from}"
        );
        assert!(child.notice.is_none());
        assert_eq!(
            std::fs::read_to_string(parent_snapshot.join("manifest.json")).unwrap(),
            "{\"after\":4}",
            "the parent is untouched"
        );
        drop(child);

        let mut gone = request("other");
        gone.fork_from = Some("parent".into());
        gone.fork_at = Some(1);
        let other = open(&home, &project, &gone).unwrap();
        assert_eq!(
            std::fs::read_to_string(other.snapshot_dir().unwrap().join("manifest.json")).unwrap(),
            "{\"after\":4}"
        );
        let notice = other.notice.clone().unwrap();
        assert!(
            notice.contains("at its cell 1, whose state is no longer kept")
                && notice.contains("last snapshot instead"),
            "{notice}"
        );
    }

    #[test]
    fn forking_from_a_session_with_nothing_saved_starts_empty_and_says_so_once() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::at(tmp.path().join("home"));
        let mut fork = request("child");
        fork.fork_from = Some("nobody".into());
        let first = open(&home, tmp.path(), &fork).unwrap();
        assert!(first.forked_from.is_none());
        let notice = first.notice.clone().unwrap();
        assert!(
            notice.contains("has no saved workspace") && notice.contains("starts empty"),
            "{notice}"
        );
        drop(first);
        assert!(open(&home, tmp.path(), &fork).unwrap().notice.is_none());
    }
}
