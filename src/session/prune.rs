//! Pruning session directories: sweep the ones whose conversation is gone, keep the newest.
//!
//! Invariants: the live session and a session another pi-repl holds (its lock is taken) are
//! never removed; a directory without readable metadata is judged by its modification time.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::read_meta;
use crate::home::Home;

/// What a prune removed, and why.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct PruneReport {
    /// (session key, reason)
    pub removed: Vec<(String, String)>,
}

struct Candidate {
    key: String,
    dir: PathBuf,
    last_used: SystemTime,
    conversation_gone: bool,
}

/// Removes sessions whose conversation file no longer exists, then all but the newest `keep`.
/// `live` (the session being served) is exempt.
pub fn prune(home: &Home, live: Option<&str>, keep: usize) -> PruneReport {
    let mut report = PruneReport::default();
    let Ok(entries) = std::fs::read_dir(home.state()) else {
        return report;
    };
    let mut candidates: Vec<Candidate> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .filter_map(|entry| {
            let key = entry.file_name().to_string_lossy().into_owned();
            if Some(key.as_str()) == live || key == "ephemeral" {
                return None;
            }
            let dir = entry.path();
            let meta = read_meta(&dir);
            let last_used = modified(&dir.join("session.json"))
                .or_else(|| modified(&dir))
                .unwrap_or(SystemTime::UNIX_EPOCH);
            let conversation_gone = meta
                .as_ref()
                .and_then(|m| m.conversation_file.as_ref())
                .is_some_and(|file| !file.exists());
            Some(Candidate {
                key,
                dir,
                last_used,
                conversation_gone,
            })
        })
        .collect();
    candidates.sort_by_key(|c| std::cmp::Reverse(c.last_used));
    let mut kept = usize::from(live.is_some());
    for candidate in candidates {
        let reason = if candidate.conversation_gone {
            Some("its conversation file no longer exists".to_string())
        } else if kept >= keep {
            Some(format!("only the newest {keep} sessions are kept"))
        } else {
            None
        };
        match reason {
            Some(reason) => {
                if remove_unless_in_use(&candidate.dir) {
                    report.removed.push((candidate.key, reason));
                } else {
                    kept += 1;
                }
            }
            None => kept += 1,
        }
    }
    report
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Removes `dir` unless another process holds its lock. Returns true when removed.
fn remove_unless_in_use(dir: &Path) -> bool {
    let lock_path = dir.join("lock");
    let lock = crate::fsutil::open_private(&lock_path, crate::fsutil::Open::ExistingLock)
        .ok()
        .map(|file| nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock));
    if let Some(Err(_)) = lock {
        return false; // in use
    }
    match std::fs::remove_dir_all(dir) {
        Ok(()) => true,
        Err(error) => {
            tracing::warn!(%error, dir = %dir.display(), "cannot remove an old session");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{SessionRequest, open};
    use super::*;

    fn touch_session(
        home: &Home,
        project: &Path,
        name: &str,
        conversation: Option<PathBuf>,
    ) -> String {
        let session = open(
            home,
            project,
            &SessionRequest {
                name: Some(name.into()),
                fork_from: None,
                fork_at: None,
                conversation_file: conversation,
            },
        )
        .unwrap();
        session.key.clone()
    }

    #[test]
    fn keeps_the_newest_and_sweeps_deleted_conversations() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::at(tmp.path().join("home"));
        let project = tmp.path().join("p");
        std::fs::create_dir_all(&project).unwrap();
        let conversation = project.join("c.jsonl");
        std::fs::write(&conversation, "").unwrap();
        let swept = touch_session(&home, &project, "gone", Some(conversation.clone()));
        std::fs::remove_file(&conversation).unwrap();
        let mut keys = Vec::new();
        for i in 0..5 {
            keys.push(touch_session(&home, &project, &format!("s{i}"), None));
            std::thread::sleep(std::time::Duration::from_millis(15));
        }
        let live = keys[0].clone();
        let report = prune(&home, Some(&live), 3);
        let removed: Vec<&str> = report.removed.iter().map(|(k, _)| k.as_str()).collect();
        assert!(removed.contains(&swept.as_str()), "{report:?}");
        // Live (oldest, exempt) + the two newest stay.
        assert!(home.state().join(&live).exists());
        assert!(home.state().join(&keys[4]).exists());
        assert!(home.state().join(&keys[3]).exists());
        assert!(!home.state().join(&keys[1]).exists());
        assert!(!home.state().join(&keys[2]).exists());
    }

    #[test]
    fn a_session_in_use_is_never_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::at(tmp.path().join("home"));
        let held = open(
            &home,
            tmp.path(),
            &SessionRequest {
                name: Some("busy".into()),
                ..Default::default()
            },
        )
        .unwrap();
        let report = prune(&home, None, 0);
        assert!(report.removed.is_empty(), "{report:?}");
        assert!(held.dir.as_ref().unwrap().exists());
    }
}
