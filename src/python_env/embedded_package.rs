//! The kernel-side Python module, embedded in this binary and unpacked under `PI_REPL_HOME/lib`.
//!
//! Owns: the list of embedded files and their unpacking. Does not own: what the module does
//! (see `python/pi_repl_kernel/` and `docs/kernel-module.md`).
//!
//! Invariant: a version directory is named after a hash of its contents and only appears once
//! complete (written to a temp dir, then renamed), so a kernel never imports a half-written or
//! stale copy, and two pi-repl processes unpacking at once do not interfere.

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::fsutil::create_private_dir;
use crate::home::Home;

/// The package's files: path relative to the directory put on `sys.path`, and contents.
pub const FILES: &[(&str, &str)] = &[
    (
        "pi_repl_kernel/__init__.py",
        include_str!("../../python/pi_repl_kernel/__init__.py"),
    ),
    (
        "pi_repl_kernel/launch.py",
        include_str!("../../python/pi_repl_kernel/launch.py"),
    ),
    (
        "pi_repl_kernel/environment.py",
        include_str!("../../python/pi_repl_kernel/environment.py"),
    ),
    (
        "pi_repl_kernel/packages.py",
        include_str!("../../python/pi_repl_kernel/packages.py"),
    ),
    (
        "pi_repl_kernel/namespace.py",
        include_str!("../../python/pi_repl_kernel/namespace.py"),
    ),
    (
        "pi_repl_kernel/cell_history.py",
        include_str!("../../python/pi_repl_kernel/cell_history.py"),
    ),
    (
        "pi_repl_kernel/thread_output.py",
        include_str!("../../python/pi_repl_kernel/thread_output.py"),
    ),
    (
        "pi_repl_kernel/host.py",
        include_str!("../../python/pi_repl_kernel/host.py"),
    ),
    (
        "pi_repl_kernel/helpers.py",
        include_str!("../../python/pi_repl_kernel/helpers.py"),
    ),
    (
        "pi_repl_kernel/heap_pages.py",
        include_str!("../../python/pi_repl_kernel/heap_pages.py"),
    ),
    (
        "pi_repl_kernel/snapshot/adopting.py",
        include_str!("../../python/pi_repl_kernel/snapshot/adopting.py"),
    ),
    (
        "pi_repl_kernel/snapshot/__init__.py",
        include_str!("../../python/pi_repl_kernel/snapshot/__init__.py"),
    ),
    (
        "pi_repl_kernel/snapshot/blobs.py",
        include_str!("../../python/pi_repl_kernel/snapshot/blobs.py"),
    ),
    (
        "pi_repl_kernel/snapshot/fork.py",
        include_str!("../../python/pi_repl_kernel/snapshot/fork.py"),
    ),
    (
        "pi_repl_kernel/snapshot/items.py",
        include_str!("../../python/pi_repl_kernel/snapshot/items.py"),
    ),
    (
        "pi_repl_kernel/snapshot/journal.py",
        include_str!("../../python/pi_repl_kernel/snapshot/journal.py"),
    ),
    (
        "pi_repl_kernel/snapshot/manifest.py",
        include_str!("../../python/pi_repl_kernel/snapshot/manifest.py"),
    ),
    (
        "pi_repl_kernel/snapshot/names.py",
        include_str!("../../python/pi_repl_kernel/snapshot/names.py"),
    ),
    (
        "pi_repl_kernel/snapshot/pickling.py",
        include_str!("../../python/pi_repl_kernel/snapshot/pickling.py"),
    ),
    (
        "pi_repl_kernel/snapshot/reviving.py",
        include_str!("../../python/pi_repl_kernel/snapshot/reviving.py"),
    ),
    (
        "pi_repl_kernel/snapshot/saving.py",
        include_str!("../../python/pi_repl_kernel/snapshot/saving.py"),
    ),
    (
        "pi_repl_kernel/snapshot/kept_states.py",
        include_str!("../../python/pi_repl_kernel/snapshot/kept_states.py"),
    ),
    (
        "pi_repl_kernel/snapshot/rewinding.py",
        include_str!("../../python/pi_repl_kernel/snapshot/rewinding.py"),
    ),
    (
        "pi_repl_kernel/snapshot/store.py",
        include_str!("../../python/pi_repl_kernel/snapshot/store.py"),
    ),
    (
        "pi_repl_kernel/model_requests.py",
        include_str!("../../python/pi_repl_kernel/model_requests.py"),
    ),
    (
        "pi_repl_kernel/host_requests.py",
        include_str!("../../python/pi_repl_kernel/host_requests.py"),
    ),
    (
        "pi_repl_kernel/remote.py",
        include_str!("../../python/pi_repl_kernel/remote.py"),
    ),
    (
        "pi_repl_kernel/agents.py",
        include_str!("../../python/pi_repl_kernel/agents.py"),
    ),
    (
        "pi_repl_kernel/live_fork.py",
        include_str!("../../python/pi_repl_kernel/live_fork.py"),
    ),
    (
        "pi_repl_kernel/host_tools.py",
        include_str!("../../python/pi_repl_kernel/host_tools.py"),
    ),
    (
        "pi_repl_kernel/toolbox_support.py",
        include_str!("../../python/pi_repl_kernel/toolbox_support.py"),
    ),
    (
        "pi_repl_kernel/toolbox/read.py",
        include_str!("../../python/pi_repl_kernel/toolbox/read.py"),
    ),
    (
        "pi_repl_kernel/toolbox/write.py",
        include_str!("../../python/pi_repl_kernel/toolbox/write.py"),
    ),
    (
        "pi_repl_kernel/toolbox/edit.py",
        include_str!("../../python/pi_repl_kernel/toolbox/edit.py"),
    ),
    (
        "pi_repl_kernel/toolbox/bash.py",
        include_str!("../../python/pi_repl_kernel/toolbox/bash.py"),
    ),
    (
        "pi_repl_kernel/toolbox/llm.py",
        include_str!("../../python/pi_repl_kernel/toolbox/llm.py"),
    ),
    (
        "pi_repl_kernel/toolbox/sub_agents.py",
        include_str!("../../python/pi_repl_kernel/toolbox/sub_agents.py"),
    ),
    (
        "pi_repl_kernel/toolbox/tools.py",
        include_str!("../../python/pi_repl_kernel/toolbox/tools.py"),
    ),
];

/// Where the default toolbox's helper files are, inside an unpacked module directory.
pub fn toolbox_dir(module_dir: &Path) -> PathBuf {
    module_dir.join("pi_repl_kernel").join("toolbox")
}

/// Pinned requirements of the kernel and the module (the whole dependency closure).
pub const REQUIREMENTS_LOCK: &str = include_str!("../../python/requirements.lock");

/// Exit status of the launcher when the interpreter cannot import ipykernel.
pub const EXIT_MISSING_KERNEL: i32 = 87;

/// Exit status of the launcher when it noticed its host had gone.
pub const EXIT_HOST_GONE: i32 = 70;

/// Exit status of the kernel process when it made its user namespace and could not map the
/// user into it (`pi_repl_kernel.namespace.EXIT_CANNOT_ISOLATE`).
pub const EXIT_CANNOT_ISOLATE: i32 = 86;

/// The `-c` program that puts the unpacked module on `sys.path` and starts the kernel.
/// Its first argument is the directory holding `pi_repl_kernel/`.
pub const BOOTSTRAP: &str = "import sys; sys.path.insert(0, sys.argv.pop(1)); \
                             from pi_repl_kernel.launch import main; main()";

/// A short fingerprint of the embedded files, stable across builds and Rust releases (xxh3 of
/// each path and content, length-prefixed): the same files always unpack to the same directory.
pub fn version_hash() -> String {
    files_hash(FILES)
}

fn files_hash(files: &[(&str, &str)]) -> String {
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    for (path, contents) in files {
        for part in [path.as_bytes(), contents.as_bytes()] {
            hasher.update(&(part.len() as u64).to_le_bytes());
            hasher.update(part);
        }
    }
    format!("{:016x}", hasher.digest())
}

/// Returns the directory to put on `sys.path`, unpacking the module there first if needed.
pub fn ensure_unpacked(home: &Home) -> anyhow::Result<PathBuf> {
    let lib = home.lib();
    let target = lib.join(format!("pi_repl_kernel-{}", version_hash()));
    if target.join("pi_repl_kernel").is_dir() {
        return Ok(target);
    }
    create_private_dir(&lib)?;
    let staging = tempfile::Builder::new()
        .prefix(".unpacking-")
        .tempdir_in(&lib)
        .with_context(|| format!("cannot create a staging directory in {}", lib.display()))?;
    for (relative, contents) in FILES {
        write_file(staging.path(), relative, contents)?;
    }
    let staged = staging.keep();
    match std::fs::rename(&staged, &target) {
        Ok(()) => Ok(target),
        // Another pi-repl finished first; its copy is identical.
        Err(_) if target.join("pi_repl_kernel").is_dir() => {
            // Best effort: the staging copy is garbage either way.
            let _ = std::fs::remove_dir_all(&staged);
            Ok(target)
        }
        Err(error) => Err(error)
            .with_context(|| format!("cannot move the kernel module into {}", target.display())),
    }
}

fn write_file(root: &Path, relative: &str, contents: &str) -> anyhow::Result<()> {
    let path = root.join(relative);
    if let Some(parent) = path.parent() {
        create_private_dir(parent)?;
    }
    // The staging directory is fresh and private: every file in it is new.
    crate::fsutil::write_new(&path, contents.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_hash_is_pinned_to_the_contents() {
        // A fixed value (xxh3_64, as Python's `xxhash` computes it): the hash must not change
        // with the compiler or the build.
        assert_eq!(files_hash(&[("a/b.py", "x = 1\n")]), "bc2803aa899298b9");
        assert_ne!(
            files_hash(&[("a/b.py", "x = 1\n")]),
            files_hash(&[("a/b.p", "yx = 1\n")])
        );
    }

    #[test]
    fn unpacks_once_and_reuses_the_copy() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::at(tmp.path());
        let first = ensure_unpacked(&home).unwrap();
        let launch = first.join("pi_repl_kernel/launch.py");
        assert!(launch.is_file());
        let second = ensure_unpacked(&home).unwrap();
        assert_eq!(first, second);
        let leftovers: Vec<_> = std::fs::read_dir(home.lib())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers.len(), 1, "{leftovers:?}");
    }

    #[test]
    fn every_python_file_of_the_package_is_embedded() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("python");
        let mut on_disk = Vec::new();
        let mut pending = vec![root.join("pi_repl_kernel")];
        while let Some(dir) = pending.pop() {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    if path.file_name().unwrap() != "__pycache__" {
                        pending.push(path);
                    }
                } else if path.extension().is_some_and(|e| e == "py") {
                    on_disk.push(
                        path.strip_prefix(&root)
                            .unwrap()
                            .to_string_lossy()
                            .into_owned(),
                    );
                }
            }
        }
        on_disk.sort();
        let mut embedded: Vec<String> = FILES.iter().map(|(p, _)| p.to_string()).collect();
        embedded.sort();
        assert_eq!(on_disk, embedded, "add new kernel-side files to FILES");
    }

    #[test]
    fn requirements_pin_ipykernel_exactly() {
        assert!(
            REQUIREMENTS_LOCK
                .lines()
                .any(|line| line.starts_with("ipykernel==")),
            "the lock must pin ipykernel"
        );
        for line in REQUIREMENTS_LOCK.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            assert!(line.contains("=="), "unpinned requirement: {line}");
        }
    }
}
