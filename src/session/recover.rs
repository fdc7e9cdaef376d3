//! Snapshots kept beside a session's own, and putting a readable one back
//! (`pi-repl sessions recover`).
//!
//! A session directory may hold, beside `snapshot/`, snapshots kept on disk that no start reads:
//! `snapshot.refused-<time>` (set aside by a start that refused it: damaged, or, before issue
//! 21, signed with another key), `snapshot.unreadable-<time>` (set aside by `sessions rekey`)
//! and `snapshot.replaced-<time>` (what `recover` moved out of the way). [`recover`] puts the
//! newest one this installation's key reads back in place as `snapshot/`.
//!
//! Invariants: nothing is deleted that holds a manifest or a blob (what `snapshot/` held is
//! renamed aside, an empty one is removed); a readable `snapshot/` is replaced only when asked
//! (`--replace`); the session's lock is held throughout, so no pi-repl serves it meanwhile.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::snapshot_check::{SnapshotState, check};
use super::{KeyProblem, lock_session};

/// The name prefixes of snapshots kept beside `snapshot/`.
pub const KEPT_PREFIXES: [&str; 3] = [
    "snapshot.refused-",
    "snapshot.unreadable-",
    "snapshot.replaced-",
];

/// One snapshot kept beside a session's own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeptSnapshot {
    pub dir: PathBuf,
    pub state: SnapshotState,
}

impl KeptSnapshot {
    /// Its directory's name (`snapshot.refused-…`).
    pub fn name(&self) -> String {
        self.dir
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

/// The snapshots kept beside `session_dir/snapshot`, by name, each checked against `key`.
pub fn kept_snapshots(session_dir: &Path, key: Option<&[u8]>) -> Vec<KeptSnapshot> {
    let Ok(entries) = std::fs::read_dir(session_dir) else {
        return Vec::new();
    };
    let mut kept: Vec<KeptSnapshot> = entries
        .flatten()
        .filter(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            KEPT_PREFIXES.iter().any(|prefix| name.starts_with(prefix)) && entry.path().is_dir()
        })
        .map(|entry| KeptSnapshot {
            state: check(&entry.path(), key),
            dir: entry.path(),
        })
        .collect();
    kept.sort_by_key(KeptSnapshot::name);
    kept
}

/// What `recover` did.
#[derive(Debug)]
pub struct Recovered {
    /// The kept snapshot now in place (its old path).
    pub from: PathBuf,
    pub saved_at: Option<String>,
    /// Where what `snapshot/` held was kept.
    pub replaced: Option<PathBuf>,
}

/// Why `recover` did nothing.
#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    #[error("{0}, so no snapshot can be checked")]
    Key(KeyProblem),
    #[error("session {session} has no snapshot kept aside")]
    NothingKept { session: String },
    #[error(
        "none of the snapshots kept aside for session {session} can be read with this \
         installation's key: {details}"
    )]
    NoneReadable { session: String, details: String },
    #[error(
        "session {session} already has a readable snapshot (saved at {saved_at}); recovering \
         {from} would replace it"
    )]
    CurrentReadable {
        session: String,
        saved_at: String,
        from: String,
    },
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

impl RecoverError {
    /// The fix, for a `hint:` line.
    pub fn hint(&self) -> Option<String> {
        match self {
            RecoverError::Key(problem) => Some(problem.hint()),
            RecoverError::NothingKept { .. } => {
                Some("`pi-repl sessions` lists every session's refused snapshots".into())
            }
            RecoverError::NoneReadable { session, .. } => Some(format!(
                "put back the key that signed them and run this again; `pi-repl sessions rm \
                 {session}` removes the session with everything it kept"
            )),
            RecoverError::CurrentReadable { session, .. } => Some(format!(
                "`pi-repl sessions recover {session} --replace` keeps the current snapshot as \
                 `snapshot.replaced-<time>` and puts the kept one in its place"
            )),
            RecoverError::Other(_) => None,
        }
    }
}

/// Puts the newest kept snapshot that `key` reads back as `session_dir/snapshot`. What was
/// there is renamed `snapshot.refused-<time>` (or `snapshot.replaced-<time>` when it was
/// readable, which only `replace` allows); an empty one is removed.
pub fn recover(
    session_dir: &Path,
    session: &str,
    key: Result<Vec<u8>, KeyProblem>,
    replace: bool,
) -> Result<Recovered, RecoverError> {
    let key = key.map_err(RecoverError::Key)?;
    let _lock = lock_session(session_dir, session)?;
    let kept = kept_snapshots(session_dir, Some(&key));
    if kept.is_empty() {
        return Err(RecoverError::NothingKept {
            session: session.to_string(),
        });
    }
    let newest = kept
        .iter()
        .filter_map(|snapshot| match &snapshot.state {
            SnapshotState::Readable { saved_at } => Some((saved_at.clone(), snapshot)),
            _ => None,
        })
        .max_by(|(a, one), (b, other)| a.cmp(b).then_with(|| one.name().cmp(&other.name())));
    let Some((saved_at, chosen)) = newest else {
        let details = kept
            .iter()
            .map(|snapshot| format!("{} {}", snapshot.name(), snapshot.state.describe()))
            .collect::<Vec<_>>()
            .join("; ");
        return Err(RecoverError::NoneReadable {
            session: session.to_string(),
            details,
        });
    };
    let current = session_dir.join("snapshot");
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%SZ");
    let mut replaced = None;
    if current.exists() {
        let state = check(&current, Some(&key));
        let aside_as = match &state {
            SnapshotState::Readable { saved_at: now } if !replace => {
                return Err(RecoverError::CurrentReadable {
                    session: session.to_string(),
                    saved_at: now.clone().unwrap_or_else(|| "an unknown time".into()),
                    from: chosen.name(),
                });
            }
            SnapshotState::Readable { .. } => "snapshot.replaced-",
            SnapshotState::NoManifest if holds_no_blob(&current) => "",
            _ => "snapshot.refused-",
        };
        if aside_as.is_empty() {
            std::fs::remove_dir_all(&current).map_err(|error| {
                anyhow::anyhow!("cannot remove the empty {}: {error}", current.display())
            })?;
        } else {
            let aside = session_dir.join(format!("{aside_as}{stamp}"));
            std::fs::rename(&current, &aside).map_err(|error| {
                anyhow::anyhow!("cannot set {} aside: {error}", current.display())
            })?;
            replaced = Some(aside);
        }
    }
    std::fs::rename(&chosen.dir, &current).map_err(|error| {
        anyhow::anyhow!(
            "cannot move {} to {}: {error}",
            chosen.dir.display(),
            current.display()
        )
    })?;
    Ok(Recovered {
        from: chosen.dir.clone(),
        saved_at,
        replaced,
    })
}

/// True when the snapshot directory has no blob file (a store that never committed anything).
fn holds_no_blob(snapshot: &Path) -> bool {
    let mut pending = vec![snapshot.join("blobs")];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            match entry.file_type() {
                Ok(kind) if kind.is_dir() => pending.push(entry.path()),
                _ => return false,
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: [u8; 16] = [7; 16];

    /// A manifest signed with `key` (the canonical JSON of this body is the text itself:
    /// sorted keys, no whitespace).
    fn signed(dir: &Path, key: &[u8], saved_at: &str) {
        let body = format!(
            r#"{{"bindings":{{}},"format":"pi-repl-snapshot","saved_at":"{saved_at}","unsaved":{{}},"version":1}}"#
        );
        let tag = ring::hmac::sign(
            &ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key),
            body.as_bytes(),
        );
        let hex: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        let manifest = format!("{},\"signature\":\"{hex}\"}}", &body[..body.len() - 1]);
        std::fs::create_dir_all(dir.join("blobs/ab")).unwrap();
        std::fs::write(dir.join("blobs/ab/abcd.zst"), b"blob").unwrap();
        std::fs::write(dir.join("manifest.json"), manifest).unwrap();
    }

    /// Issue 21: an older pi-repl set a snapshot signed with the right key aside and signed a
    /// new one with a wrong key; with the right key back, one command puts it back and keeps
    /// the wrong-key one.
    #[test]
    fn recover_puts_the_newest_readable_kept_snapshot_back_and_keeps_what_was_there() {
        let tmp = tempfile::tempdir().unwrap();
        let session = tmp.path();
        signed(&session.join("snapshot"), &[9; 16], "2026-01-03T00:00:00Z");
        signed(
            &session.join("snapshot.refused-20260101T000000Z"),
            &KEY,
            "2026-01-01T00:00:00Z",
        );
        signed(
            &session.join("snapshot.refused-20260102T000000Z"),
            &KEY,
            "2026-01-02T00:00:00Z",
        );
        std::fs::create_dir_all(session.join("snapshot.refused-20260104T000000Z")).unwrap();
        let kept = kept_snapshots(session, Some(&KEY));
        assert_eq!(kept.len(), 3);
        assert_eq!(kept[2].state, SnapshotState::NoManifest);

        let recovered = recover(session, "s", Ok(KEY.to_vec()), false).unwrap();
        assert!(
            recovered
                .from
                .ends_with("snapshot.refused-20260102T000000Z")
        );
        assert_eq!(recovered.saved_at.as_deref(), Some("2026-01-02T00:00:00Z"));
        assert_eq!(
            check(&session.join("snapshot"), Some(&KEY)),
            SnapshotState::Readable {
                saved_at: Some("2026-01-02T00:00:00Z".into())
            }
        );
        let replaced = recovered.replaced.expect("the wrong-key snapshot is kept");
        assert_eq!(
            check(&replaced, Some(&[9; 16])),
            SnapshotState::Readable {
                saved_at: Some("2026-01-03T00:00:00Z".into())
            },
            "kept as it was"
        );
    }

    #[test]
    fn recover_refuses_with_nothing_readable_and_never_replaces_a_readable_snapshot_unasked() {
        let tmp = tempfile::tempdir().unwrap();
        let session = tmp.path();
        let error = recover(session, "s", Ok(KEY.to_vec()), false).unwrap_err();
        assert!(matches!(error, RecoverError::NothingKept { .. }), "{error}");

        signed(
            &session.join("snapshot.refused-20260101T000000Z"),
            &[9; 16],
            "2026-01-01T00:00:00Z",
        );
        let error = recover(session, "s", Ok(KEY.to_vec()), false).unwrap_err();
        assert!(
            error.to_string().contains("is signed with another key"),
            "{error}"
        );
        assert!(error.hint().unwrap().contains("put back the key"));

        signed(
            &session.join("snapshot.unreadable-20260102-000000"),
            &KEY,
            "2026-01-02T00:00:00Z",
        );
        signed(&session.join("snapshot"), &KEY, "2026-01-05T00:00:00Z");
        let error = recover(session, "s", Ok(KEY.to_vec()), false).unwrap_err();
        assert!(matches!(error, RecoverError::CurrentReadable { .. }));
        assert!(error.hint().unwrap().contains("--replace"));
        let recovered = recover(session, "s", Ok(KEY.to_vec()), true).unwrap();
        let replaced = recovered.replaced.unwrap();
        assert!(
            replaced
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("snapshot.replaced-")
        );
        assert!(replaced.join("blobs/ab/abcd.zst").exists());
    }
}
