//! Every file pi-repl writes goes through this module, with the guarantees its state needs.
//!
//! Owns: how files and directories are created. Every file is private to its owner (0600),
//! every directory too (0700, [`create_private_dir`]). A file that replaces another is written
//! to a temp file with a unique name in the same directory and renamed over it, so a reader or
//! a crash sees the old file or the new, never half:
//!
//! - [`write_atomic`]: state that must survive a crash (manifests, markers, records): also
//!   fsyncs the file and its directory.
//! - [`write_output`]: outputs shown to the model or the user (a cell's full output, a saved
//!   image): atomic but not synced, since losing one in a crash loses nothing.
//! - [`copy_atomic`]: a copy of another file (a forked session's snapshot), streamed, then
//!   published like [`write_atomic`].
//! - [`write_new`]: a file that must not exist yet (a key, a kernel's connection file): created
//!   exclusively, so two processes never both write it; `AlreadyExists` tells the loser.
//! - [`open_private`]: a file written as a stream ([`Open`]: a spill file, a transcript, a
//!   lock file, an empty flag file).
//!
//! Not here: what is written, or where (see `home` for the layout). Test code writes fixtures
//! with `std::fs` directly.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use anyhow::Context;

/// Mode of every file pi-repl creates.
const PRIVATE_FILE: u32 = 0o600;
/// Mode of every directory pi-repl creates.
const PRIVATE_DIR: u32 = 0o700;

/// Creates `dir` and its missing parents, each one private to its owner (0700), and restricts
/// `dir` itself to 0700 even if it existed. Existing parents keep their mode.
pub fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(PRIVATE_DIR)
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(PRIVATE_DIR))
        .with_context(|| format!("cannot restrict {} to its owner", dir.display()))?;
    Ok(())
}

/// Replaces `path` with `bytes` atomically: a temp file in the same directory (0600), fsync,
/// rename over `path`, fsync the directory. A crash leaves the old file or the new, never half.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let dir = parent_of(path)?;
    let temp = write_temp_beside(path, dir, bytes, true)?;
    temp.persist(path)
        .with_context(|| format!("cannot replace {}", path.display()))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("cannot sync {}", dir.display()))?;
    Ok(())
}

/// Copies the file `from` to `to` (0600), streamed into a temp file beside `to`, synced and
/// renamed over it: `to` is the old file or the whole copy, never part of one.
pub fn copy_atomic(from: &Path, to: &Path) -> anyhow::Result<()> {
    let dir = parent_of(to)?;
    let mut source =
        std::fs::File::open(from).with_context(|| format!("cannot read {}", from.display()))?;
    let mut temp = write_temp_beside(to, dir, b"", false)?;
    std::io::copy(&mut source, temp.as_file_mut())
        .and_then(|_| temp.as_file().sync_all())
        .with_context(|| format!("cannot copy {} to {}", from.display(), to.display()))?;
    temp.persist(to)
        .with_context(|| format!("cannot replace {}", to.display()))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("cannot sync {}", dir.display()))?;
    Ok(())
}

/// Writes `bytes` to `path` (replacing it atomically, 0600, without fsync), creating its
/// directory (0700) if missing.
pub fn write_output(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let dir = parent_of(path)?;
    if !dir.is_dir() {
        create_private_dir(dir)?;
    }
    write_temp_beside(path, dir, bytes, false)?
        .persist(path)
        .with_context(|| format!("cannot replace {}", path.display()))?;
    Ok(())
}

/// Creates `path` (0600), which must not exist yet, with `bytes`, synced. Fails with
/// `ErrorKind::AlreadyExists` when another writer created it first.
pub fn write_new(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(PRIVATE_FILE)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// How [`open_private`] opens a file that is written as a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Open {
    /// Create or truncate (a spill file whose path is handed out only once it is complete, a
    /// flag file whose existence is the message).
    Truncate,
    /// Create or append (a transcript several writers add to).
    Append,
    /// Create if missing, never truncate: a file that exists to be `flock`ed.
    Lock,
    /// An existing lock file only (`NotFound` if there is none): probing whether a directory
    /// is in use must not create anything in it.
    ExistingLock,
}

/// Opens `path` for writing as `how` says; a file it creates is 0600.
pub fn open_private(path: &Path, how: Open) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).mode(PRIVATE_FILE);
    match how {
        Open::Truncate => options.create(true).truncate(true),
        Open::Append => options.create(true).append(true),
        Open::Lock => options.create(true).truncate(false),
        Open::ExistingLock => &mut options,
    };
    options.open(path)
}

fn parent_of(path: &Path) -> anyhow::Result<&Path> {
    path.parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .with_context(|| format!("{} has no parent directory", path.display()))
}

/// A temp file with a unique name in `dir` (0600) holding `bytes`, synced if `sync`.
fn write_temp_beside(
    path: &Path,
    dir: &Path,
    bytes: &[u8],
    sync: bool,
) -> anyhow::Result<tempfile::NamedTempFile> {
    let mut temp = tempfile::Builder::new()
        .prefix(".tmp-")
        .permissions(std::fs::Permissions::from_mode(PRIVATE_FILE))
        .tempfile_in(dir)
        .with_context(|| format!("cannot create a temp file in {}", dir.display()))?;
    temp.write_all(bytes)
        .and_then(|()| {
            if sync {
                temp.as_file().sync_all()
            } else {
                Ok(())
            }
        })
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(temp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_whole_file_and_leaves_no_temp_behind() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("meta.json");
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "two");
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1);
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    #[test]
    fn outputs_are_private_and_create_their_directory() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("outputs").join("cell1.txt");
        write_output(&path, b"first").unwrap();
        write_output(&path, b"second").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "second");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        assert_eq!(
            std::fs::read_dir(path.parent().unwrap()).unwrap().count(),
            1
        );
    }

    #[test]
    fn a_copy_is_whole_private_and_replaces_the_old_file() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let from = tmp.path().join("from");
        std::fs::write(&from, vec![7u8; 300_000]).unwrap();
        std::fs::set_permissions(&from, std::fs::Permissions::from_mode(0o644)).unwrap();
        let to = tmp.path().join("to");
        std::fs::write(&to, b"old").unwrap();
        copy_atomic(&from, &to).unwrap();
        assert_eq!(std::fs::read(&to).unwrap(), vec![7u8; 300_000]);
        assert_eq!(
            std::fs::metadata(&to).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 2);
    }

    #[test]
    fn a_new_file_is_never_written_twice() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("snapshot.key");
        write_new(&path, b"mine").unwrap();
        let second = write_new(&path, b"theirs").unwrap_err();
        assert_eq!(second.kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "mine");
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    #[test]
    fn streams_append_truncate_and_lock_without_truncating() {
        use std::io::Write;
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("log");
        open_private(&path, Open::Append)
            .unwrap()
            .write_all(b"a")
            .unwrap();
        open_private(&path, Open::Append)
            .unwrap()
            .write_all(b"b")
            .unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "ab");
        open_private(&path, Open::Lock).unwrap();
        open_private(&path, Open::ExistingLock).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "ab");
        open_private(&path, Open::Truncate)
            .unwrap()
            .write_all(b"c")
            .unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "c");
        let missing = open_private(&tmp.path().join("none"), Open::ExistingLock).unwrap_err();
        assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
    }
}
