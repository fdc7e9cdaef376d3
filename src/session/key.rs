//! This installation's snapshot key: the secret that signs every snapshot it writes.
//!
//! A snapshot whose manifest is not signed with this key (copied from another machine or user,
//! or tampered with) is refused before anything in it is unpickled. The key lives in
//! `PI_REPL_HOME/snapshot.key` (hex text, 0600), created on first use.
//!
//! A key that goes missing while snapshots signed with it exist is an error, never a reason to
//! mint a new one: the next save would replace every session's snapshot with an empty one.
//! The user either puts the key back or runs `pi-repl sessions rekey`, which sets those
//! snapshots aside (kept on disk) and mints a new key.

use std::path::PathBuf;

use anyhow::Context;

use crate::fsutil::create_private_dir;
use crate::home::Home;

/// Bytes of randomness in a new key.
const KEY_BYTES: usize = 32;

/// Snapshots exist but the key that signed them is gone.
#[derive(Debug, thiserror::Error)]
#[error(
    "the snapshot key {} is missing, and {sessions} session(s) hold snapshots signed with it; \
     nothing was changed",
    key.display()
)]
pub struct KeyMissing {
    pub key: PathBuf,
    pub sessions: usize,
}

impl KeyMissing {
    pub fn hint(&self) -> String {
        format!(
            "put the key file back at {} (from a backup), or run `pi-repl sessions rekey` to set \
             those snapshots aside and start with a new key",
            self.key.display()
        )
    }
}

/// The key file's path, creating the key (0600) if there is none yet. Fails with [`KeyMissing`]
/// when there is no key but snapshots exist.
pub fn ensure_key(home: &Home) -> anyhow::Result<PathBuf> {
    create_private_dir(home.root())?;
    let path = key_path(home);
    if path.exists() {
        return Ok(path);
    }
    let signed = signed_snapshots(home);
    if !signed.is_empty() {
        return Err(KeyMissing {
            key: path,
            sessions: signed.len(),
        }
        .into());
    }
    mint(&path)
}

/// For a lost key: sets every snapshot aside (renamed `snapshot.unreadable-<time>`, kept on
/// disk for `pi-repl sessions rm`) and mints a new key. Returns the set-aside directories.
/// Refuses when the key exists: its snapshots are readable.
pub fn rekey(home: &Home) -> anyhow::Result<Vec<PathBuf>> {
    let path = key_path(home);
    if path.exists() {
        anyhow::bail!(
            "the snapshot key {} is present, and its snapshots are readable; `rekey` is for a \
             lost key",
            path.display()
        );
    }
    let stamp = chrono::Local::now().format("%Y%m%d-%H%M%S");
    let mut set_aside = Vec::new();
    for snapshot in signed_snapshots(home) {
        let aside = snapshot.with_file_name(format!("snapshot.unreadable-{stamp}"));
        std::fs::rename(&snapshot, &aside)
            .with_context(|| format!("cannot set {} aside", snapshot.display()))?;
        set_aside.push(aside);
    }
    create_private_dir(home.root())?;
    mint(&path)?;
    Ok(set_aside)
}

fn key_path(home: &Home) -> PathBuf {
    home.root().join("snapshot.key")
}

/// The `snapshot` directories of every session that holds a manifest.
fn signed_snapshots(home: &Home) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(home.state()) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|session| session.path().join("snapshot"))
        .filter(|snapshot| snapshot.join("manifest.json").exists())
        .collect()
}

/// Writes a new random key at `path` (0600); another pi-repl that got there first wins.
fn mint(path: &std::path::Path) -> anyhow::Result<PathBuf> {
    let path = path.to_path_buf();
    let mut key = String::with_capacity(KEY_BYTES * 2);
    while key.len() < KEY_BYTES * 2 {
        key.push_str(&uuid::Uuid::new_v4().simple().to_string());
    }
    key.truncate(KEY_BYTES * 2);
    match crate::fsutil::write_new(&path, key.as_bytes()) {
        Ok(()) => Ok(path),
        // Another pi-repl created it first; use theirs.
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Ok(path),
        Err(error) => Err(error).with_context(|| format!("cannot create {}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_created_once_private_and_random() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::at(tmp.path());
        let path = ensure_key(&home).unwrap();
        let key = std::fs::read_to_string(&path).unwrap();
        assert_eq!(key.len(), 64);
        assert!(key.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(ensure_key(&home).unwrap(), path);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            key,
            "an existing key is kept"
        );
        let other = tempfile::tempdir().unwrap();
        let other_key =
            std::fs::read_to_string(ensure_key(&Home::at(other.path())).unwrap()).unwrap();
        assert_ne!(key, other_key);
    }

    /// Issue 11: losing the key minted a new one, the old snapshots were refused, and the next
    /// save replaced them.
    #[test]
    fn a_lost_key_with_snapshots_is_an_error_until_rekey_sets_them_aside() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::at(tmp.path());
        let key = ensure_key(&home).unwrap();
        let snapshot = home.state().join("proj__conv").join("snapshot");
        std::fs::create_dir_all(&snapshot).unwrap();
        std::fs::write(snapshot.join("manifest.json"), b"{}").unwrap();
        assert!(
            rekey(&home).is_err(),
            "rekey refuses while the key is there"
        );
        std::fs::remove_file(&key).unwrap();
        let error = ensure_key(&home).unwrap_err();
        let missing = error.downcast_ref::<KeyMissing>().expect("KeyMissing");
        assert_eq!(missing.sessions, 1);
        assert!(missing.hint().contains("pi-repl sessions rekey"));
        assert!(!key.exists(), "no key was minted");
        assert_eq!(
            std::fs::read(snapshot.join("manifest.json")).unwrap(),
            b"{}"
        );
        let aside = rekey(&home).unwrap();
        assert_eq!(aside.len(), 1);
        assert!(aside[0].join("manifest.json").exists(), "kept on disk");
        assert!(!snapshot.exists());
        assert_eq!(ensure_key(&home).unwrap(), key);
    }
}
