//! This installation's snapshot key: the secret that signs every snapshot it writes.
//!
//! A snapshot whose manifest is not signed with this key (copied from another machine or user,
//! or tampered with) is refused before anything in it is unpickled. The key lives in
//! `PI_REPL_HOME/snapshot.key` (hex text, 0600), created on first use.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use anyhow::Context;

use crate::home::{Home, create_private_dir};

/// Bytes of randomness in a new key.
const KEY_BYTES: usize = 32;

/// The key file's path, creating the key (0600) if there is none yet.
pub fn ensure_key(home: &Home) -> anyhow::Result<PathBuf> {
    create_private_dir(home.root())?;
    let path = home.root().join("snapshot.key");
    if path.exists() {
        return Ok(path);
    }
    let mut key = String::with_capacity(KEY_BYTES * 2);
    while key.len() < KEY_BYTES * 2 {
        key.push_str(&uuid::Uuid::new_v4().simple().to_string());
    }
    key.truncate(KEY_BYTES * 2);
    let opened = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path);
    match opened {
        Ok(mut file) => {
            file.write_all(key.as_bytes())
                .and_then(|()| file.sync_all())
                .with_context(|| format!("cannot write {}", path.display()))?;
            Ok(path)
        }
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
}
