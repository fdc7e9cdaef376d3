//! The session's save lock, seen from the host: a kernel reads the committed snapshot only once
//! no save is writing one.
//!
//! Owns: waiting, before a kernel's snapshot store is set up, until no process holds
//! `<snapshot dir>/save.lock` (`flock`) or has it open. A save child has the file open from its
//! fork (before it is scheduled to take the lock: a child the machine is slow to run is still
//! seen), takes the lock before it writes anything and holds it until it exits
//! (`pi_repl_kernel.snapshot.fork`); children outlive their kernel
//! and their host, so after a stop or a death the save of the last answered cells may still be
//! running. Waiting for it means the revive reads what it commits, never a state older than an
//! answered cell; and no later save of the new kernel can interleave with it.
//!
//! The wait is bounded (`ADOPT_LIMIT`). A save still running then (stopped, hung) is killed:
//! its holders are found by their open file (`/proc/<pid>/fd`), and the notice says so. A kill
//! never harms the committed snapshot (it is only ever replaced by a rename).
//!
//! Not owned: the lock inside the kernel (the save children take it), or what is revived.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::time::Instant;

/// The lock's file name in the snapshot directory (`snapshot.fork.LOCK_NAME`).
pub const LOCK_NAME: &str = "save.lock";

/// How long a start waits for a save an earlier kernel or run left running.
pub const ADOPT_LIMIT: Duration = Duration::from_secs(30);

/// How often the lock is tried while a save holds it.
const TRY_EVERY: Duration = Duration::from_millis(20);

/// How long the lock may stay held after its holders were killed.
const AFTER_KILL: Duration = Duration::from_secs(5);

/// What the wait found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Waited {
    /// No save was running.
    Free,
    /// A save was running and finished within the limit.
    Finished(Duration),
    /// A save was still running at the limit (given) and was killed: the pids.
    Killed(Vec<i32>, Duration),
}

impl Waited {
    /// The sentence a reset notice gives, if any.
    pub fn notice(&self) -> Option<String> {
        match self {
            Waited::Killed(pids, limit) => Some(format!(
                "a save left running by the previous kernel (pid {}) was still not finished \
                 after {:.0} s and was stopped; the snapshot committed before it was revived",
                pids.iter()
                    .map(i32::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
                limit.as_secs_f64()
            )),
            _ => None,
        }
    }
}

/// Waits until no save holds the lock of `snapshot_dir`, up to `limit`; then kills what still
/// holds it.
pub async fn wait_for_saves(snapshot_dir: &Path, limit: Duration) -> Waited {
    let path = snapshot_dir.join(LOCK_NAME);
    let started = Instant::now();
    let deadline = started + limit;
    let mut waited = false;
    loop {
        if !busy(&path) {
            return if waited {
                Waited::Finished(started.elapsed())
            } else {
                Waited::Free
            };
        }
        waited = true;
        if Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(TRY_EVERY).await;
    }
    let holders = holders_of(&path);
    tracing::warn!(
        ?holders,
        "a save still holds the snapshot lock; stopping it"
    );
    for pid in &holders {
        // ESRCH: it finished meanwhile.
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let deadline = Instant::now() + AFTER_KILL;
    while busy(&path) && Instant::now() < deadline {
        tokio::time::sleep(TRY_EVERY).await;
    }
    Waited::Killed(holders, limit)
}

/// True while a save holds the lock or a save child (forked, not yet locking) has the file open.
fn busy(path: &Path) -> bool {
    match try_lock(path) {
        Some(false) => true,
        Some(true) => !holders_of(path).is_empty(),
        None => false, // no lock file: no save ever ran here
    }
}

/// `Some(true)`: free (taken and released at once); `Some(false)`: held; `None`: no lock file
/// (no save ever ran here) or it cannot be opened.
fn try_lock(path: &Path) -> Option<bool> {
    let file = crate::fsutil::open_private(path, crate::fsutil::Open::ExistingLock).ok()?;
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(_released_on_drop) => Some(true),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Some(false),
        Err((_, error)) => {
            tracing::debug!(%error, "cannot try the snapshot lock");
            None
        }
    }
}

/// The processes that have `path` open.
fn holders_of(path: &Path) -> Vec<i32> {
    let wanted: PathBuf = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        if fds
            .flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target == wanted))
        {
            found.push(pid);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn locked_by_a_child(dir: &Path, then: &str) -> std::process::Child {
        let path = dir.join(LOCK_NAME);
        std::fs::write(&path, b"").unwrap();
        // `-o`: the lock is the flock process's alone, not the command's.
        let mut child = std::process::Command::new("flock")
            .arg("-o")
            .arg(&path)
            .args(["-c", &format!("echo held; exec {then}")])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        assert_eq!(line.trim(), "held");
        child
    }

    #[tokio::test]
    async fn no_lock_file_or_a_free_lock_is_free() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            wait_for_saves(dir.path(), Duration::ZERO).await,
            Waited::Free
        );
        std::fs::write(dir.path().join(LOCK_NAME), b"").unwrap();
        assert_eq!(
            wait_for_saves(dir.path(), Duration::ZERO).await,
            Waited::Free
        );
    }

    /// Issue 21: a save still running at the limit is stopped, and the notice names it.
    #[tokio::test]
    async fn a_save_that_holds_the_lock_past_the_limit_is_killed_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let mut holder = locked_by_a_child(dir.path(), "sleep 60");
        let waited = wait_for_saves(dir.path(), Duration::from_millis(100)).await;
        let Waited::Killed(pids, _) = &waited else {
            panic!("expected a kill, got {waited:?}");
        };
        assert!(!pids.is_empty());
        assert!(waited.notice().unwrap().contains("was stopped"));
        assert_eq!(try_lock(&dir.path().join(LOCK_NAME)), Some(true));
        holder.wait().unwrap();
    }

    /// Issue 21: a save child the machine has not run yet has the file open but no lock; the
    /// start waits for it all the same.
    #[tokio::test]
    async fn a_process_with_the_file_open_but_no_lock_is_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LOCK_NAME);
        std::fs::write(&path, b"").unwrap();
        let mut opener = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "exec 3<'{}'; echo open; exec sleep 60",
                path.display()
            ))
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(opener.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        assert_eq!(line.trim(), "open");
        let waited = wait_for_saves(dir.path(), Duration::from_millis(100)).await;
        assert!(matches!(waited, Waited::Killed(..)), "{waited:?}");
        opener.wait().unwrap();
    }

    #[tokio::test]
    async fn a_save_that_finishes_is_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        // Held when the wait starts (the holder said so), and given up by the holder itself.
        let mut holder = locked_by_a_child(dir.path(), "sleep 0.3");
        assert!(matches!(
            wait_for_saves(dir.path(), Duration::from_secs(600)).await,
            Waited::Finished(_)
        ));
        holder.wait().unwrap();
    }
}
