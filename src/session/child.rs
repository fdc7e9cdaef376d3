//! A sub-agent's workspace as a session: a directory inside its parent's
//! (`<parent>/agents/<id>/`, see `agents::record`) rather than under `state/`, so it is never
//! pruned apart from its parent and the whole tree is one directory walk.
//!
//! Owns: seeding it with the parent's last snapshot (the fork), and opening it for the child
//! process (lock, metadata), like `open` does for a named session.

use std::path::Path;

use super::{Session, SessionMeta, copy_snapshot, create_private_dir, lock_session, write_meta};

/// Copies the parent's last committed snapshot into the child's workspace.
pub fn seed(parent_snapshot: &Path, workspace: &Path) -> anyhow::Result<()> {
    copy_snapshot(parent_snapshot, &workspace.join("snapshot"))
}

/// Opens the child's workspace `dir` as its session; `forked` when it was seeded.
pub fn open(dir: &Path, name: &str, project_dir: &Path, forked: bool) -> anyhow::Result<Session> {
    create_private_dir(dir)?;
    let lock = lock_session(dir, name)?;
    let now = chrono::Local::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let forked_from = forked.then(|| "the parent workspace".to_string());
    let meta = SessionMeta {
        name: name.to_string(),
        key: name.to_string(),
        project_dir: project_dir.to_path_buf(),
        conversation_file: None,
        created: now.clone(),
        last_used: now,
        forked_from: forked_from.clone(),
    };
    if let Err(error) = write_meta(dir, &meta) {
        tracing::warn!(error = %format!("{error:#}"), "cannot write the sub-agent's session.json");
    }
    Ok(Session {
        key: name.to_string(),
        outputs: dir.join("outputs"),
        dir: Some(dir.to_path_buf()),
        forked_from,
        notice: None,
        _lock: Some(lock),
    })
}
