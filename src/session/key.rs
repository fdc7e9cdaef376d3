//! This installation's snapshot key: the secret that signs every snapshot it writes.
//!
//! A snapshot whose manifest is not signed with this key (copied from another machine or user,
//! or tampered with) is refused before anything in it is unpickled. The key lives in
//! `PI_REPL_HOME/snapshot.key` (hex text, at least 16 bytes, 0600), created on first use.
//!
//! A key that goes missing while snapshots signed with it exist, or a key file that is empty,
//! unreadable or not hex, is never replaced by a new key: the next save would sign every
//! session's snapshot with it. Such a key is a [`KeyProblem`]: the engine says it in the first
//! result with its [`KeyProblem::hint`] and runs cells without saving or reviving anything,
//! so nothing on disk changes and the session revives by itself once the key is back
//! (issue 21). If the key is gone for good, `pi-repl sessions rekey` sets those snapshots aside
//! (kept on disk, recoverable with the old key) and mints a new key.

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::fsutil::create_private_dir;
use crate::home::Home;

/// Bytes of randomness in a new key.
const KEY_BYTES: usize = 32;

/// The fewest bytes a key may have (the kernel-side store's rule, `snapshot.store.read_key`).
const MIN_KEY_BYTES: usize = 16;

/// Why the key file cannot be used to check or sign snapshots.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyProblem {
    #[error("the snapshot key {} is missing", key.display())]
    Missing { key: PathBuf },
    #[error("the snapshot key {} cannot be read ({error})", key.display())]
    Unreadable { key: PathBuf, error: String },
    #[error("the snapshot key {} is empty", key.display())]
    Empty { key: PathBuf },
    #[error("the snapshot key {} is not a key ({why})", key.display())]
    Malformed { key: PathBuf, why: String },
}

impl KeyProblem {
    /// The fix, for a `hint:` line.
    pub fn hint(&self) -> String {
        match self {
            KeyProblem::Unreadable { key, .. } => format!(
                "make {} readable by you (mode 0600); the session revives on its next start, with \
                 nothing else to do",
                key.display()
            ),
            KeyProblem::Missing { key }
            | KeyProblem::Empty { key }
            | KeyProblem::Malformed { key, .. } => format!(
                "put the key file back at {} (from a backup); the session revives on its next \
                 start, with nothing else to do. If the key is lost for good, `pi-repl sessions \
                 rekey` sets the snapshots it signed aside and makes a new key",
                key.display()
            ),
        }
    }
}

/// The key's bytes, read as the kernel-side store reads them: hex text, surrounding whitespace
/// ignored, at least 16 bytes.
pub fn read_key(path: &Path) -> Result<Vec<u8>, KeyProblem> {
    let key = path.to_path_buf();
    let text = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Err(KeyProblem::Missing { key });
        }
        Err(error) => {
            return Err(KeyProblem::Unreadable {
                key,
                error: error.to_string(),
            });
        }
    };
    let text = text.trim_ascii();
    if text.is_empty() {
        return Err(KeyProblem::Empty { key });
    }
    let malformed = |why: &str| KeyProblem::Malformed {
        key: path.to_path_buf(),
        why: why.to_string(),
    };
    if text.len() % 2 != 0 || !text.iter().all(u8::is_ascii_hexdigit) {
        return Err(malformed("it does not hold hex text"));
    }
    let bytes: Vec<u8> = text
        .chunks(2)
        .map(|pair| (hex_value(pair[0]) << 4) | hex_value(pair[1]))
        .collect();
    if bytes.len() < MIN_KEY_BYTES {
        return Err(malformed(&format!(
            "{} bytes; a key has {MIN_KEY_BYTES} or more",
            bytes.len()
        )));
    }
    Ok(bytes)
}

fn hex_value(digit: u8) -> u8 {
    match digit {
        b'0'..=b'9' => digit - b'0',
        b'a'..=b'f' => digit - b'a' + 10,
        b'A'..=b'F' => digit - b'A' + 10,
        _ => 0,
    }
}

/// The key file's path, creating the key (0600) if there is none yet and no snapshot exists.
/// A key file that is there is returned as it is, usable or not, and a missing one is never
/// minted while snapshots exist: the engine checks it ([`read_key`]) and says what is wrong.
pub fn ensure_key(home: &Home) -> anyhow::Result<PathBuf> {
    create_private_dir(home.root())?;
    let path = key_path(home);
    if path.exists() || !signed_snapshots(home).is_empty() {
        return Ok(path);
    }
    mint(&path)
}

/// What `rekey` did.
#[derive(Debug)]
pub struct Rekeyed {
    /// The snapshots set aside (`snapshot.unreadable-<time>`).
    pub set_aside: Vec<PathBuf>,
    /// Where an unusable key file was kept (`snapshot.key.unusable-<time>`).
    pub old_key: Option<PathBuf>,
}

/// For a lost (or unusable) key: sets every snapshot aside (renamed
/// `snapshot.unreadable-<time>`, kept on disk; `pi-repl sessions recover` puts one back once
/// the key that signed it is back), keeps an unusable key file beside the new one, and mints a
/// new key. Refuses when the key is usable: its snapshots are readable.
pub fn rekey(home: &Home) -> anyhow::Result<Rekeyed> {
    let path = key_path(home);
    if read_key(&path).is_ok() {
        anyhow::bail!(
            "the snapshot key {} is present and usable, and its snapshots are readable; `rekey` \
             is for a lost or unusable key",
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
    let mut old_key = None;
    if std::fs::symlink_metadata(&path).is_ok() {
        let kept = path.with_file_name(format!("snapshot.key.unusable-{stamp}"));
        std::fs::rename(&path, &kept)
            .with_context(|| format!("cannot set {} aside", path.display()))?;
        old_key = Some(kept);
    }
    mint(&path)?;
    Ok(Rekeyed { set_aside, old_key })
}

/// Where this installation's key lives.
pub fn key_path(home: &Home) -> PathBuf {
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
    /// save replaced them. Issue 21: the lost key is told by the engine, not a stop.
    #[test]
    fn a_lost_key_with_snapshots_is_never_minted_until_rekey_sets_them_aside() {
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
        assert_eq!(ensure_key(&home).unwrap(), key);
        assert!(!key.exists(), "no key was minted");
        assert_eq!(
            read_key(&key),
            Err(KeyProblem::Missing { key: key.clone() })
        );
        assert!(
            read_key(&key)
                .unwrap_err()
                .hint()
                .contains("pi-repl sessions rekey")
        );
        assert_eq!(
            std::fs::read(snapshot.join("manifest.json")).unwrap(),
            b"{}"
        );
        let rekeyed = rekey(&home).unwrap();
        assert_eq!(rekeyed.set_aside.len(), 1);
        assert!(rekeyed.old_key.is_none());
        assert!(rekeyed.set_aside[0].join("manifest.json").exists(), "kept");
        assert!(!snapshot.exists());
        assert!(read_key(&key).is_ok());
    }

    /// Issue 21: an empty key file turned snapshots off with a line on stderr only.
    #[test]
    fn an_empty_short_or_non_hex_key_is_a_problem_named_with_its_fix() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("snapshot.key");
        for (text, expected) in [
            ("", "is empty"),
            ("  \n", "is empty"),
            ("abcd", "2 bytes; a key has 16 or more"),
            ("not hex at all!", "does not hold hex text"),
            ("abc", "does not hold hex text"),
        ] {
            std::fs::write(&path, text).unwrap();
            let problem = read_key(&path).unwrap_err();
            assert!(
                problem.to_string().contains(expected),
                "{text:?}: {problem}"
            );
            assert!(problem.hint().contains("put the key file back"));
        }
        let good = "00112233445566778899aabbccddeeff";
        std::fs::write(&path, format!("{good}\n")).unwrap();
        assert_eq!(read_key(&path).unwrap().len(), 16);
    }

    /// Issue 21: `rekey` refused an empty key file as "present".
    #[test]
    fn rekey_replaces_an_unusable_key_and_keeps_it_beside_the_new_one() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::at(tmp.path());
        let key = key_path(&home);
        std::fs::write(&key, b"").unwrap();
        assert_eq!(ensure_key(&home).unwrap(), key);
        assert_eq!(
            std::fs::read(&key).unwrap(),
            b"",
            "an empty key is not replaced"
        );
        let rekeyed = rekey(&home).unwrap();
        let old = rekeyed.old_key.expect("kept");
        assert_eq!(std::fs::read(old).unwrap(), b"");
        assert!(read_key(&key).is_ok());
    }
}
