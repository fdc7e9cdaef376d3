//! The processes a kernel leaves behind: ended when the kernel ends.
//!
//! Every kernel gets a tag in its environment (`PI_REPL_KERNEL_TAG`), which whatever it starts
//! inherits. The host is a child subreaper (`PR_SET_CHILD_SUBREAPER`): when a kernel, or a
//! process it started, dies, its orphans are re-parented to the host instead of to init, so the
//! host can reap them. When a kernel has exited, `end` kills its process group and every
//! process carrying its tag (a child in a session of its own, a `bash()` command and what that
//! started), and reaps those re-parented to the host. When the host itself is killed, the
//! kernel's lifeline does the same from inside the kernel (`pi_repl_kernel.launch`).
//!
//! What escapes: a process that left the kernel's process group (`setsid`,
//! `start_new_session=True`) *and* dropped the tag from its environment (`env -i`, an explicit
//! `env=`); and, when the host and the kernel die at the same moment (SIGKILL of both), a
//! process outside the kernel's process group. Spared on purpose: a save child and the PID
//! namespace's init waiting for it (`SPARED`, by process name), which finish saving answered
//! cells after the kernel is gone and end themselves (init after at most 10 minutes, taking
//! its whole namespace with it); a cell's process that takes one of those names outlives the
//! kernel as long. Linux only; elsewhere only the process group is ended.

use std::collections::HashSet;
use std::sync::Once;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;

use super::processes::{ProcessStat, parse_stat, spared};

/// The environment variable that marks a kernel's processes.
pub const TAG_VAR: &str = "PI_REPL_KERNEL_TAG";

/// How long `end` keeps killing and reaping (a process may be starting children as it dies).
const END_LIMIT: Duration = Duration::from_secs(2);

/// Pause between two passes of `end`.
const PASS_PAUSE: Duration = Duration::from_millis(5);

/// Extra passes `end` makes while some process shows an empty environment: one in the middle
/// of `exec` does for a moment (its new environment is not mapped yet), so its tag cannot be
/// read until the exec is done.
const UNSURE_PASSES: usize = 3;

/// A tag no other kernel (of this host or another) has.
pub fn new_tag() -> String {
    format!("{}-{}", std::process::id(), uuid::Uuid::new_v4().simple())
}

/// Makes this process a child subreaper, once: orphans of its kernels' processes come back to
/// it (to be reaped by `end`) rather than to init.
pub fn become_subreaper() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        #[cfg(target_os = "linux")]
        if let Err(error) = nix::sys::prctl::set_child_subreaper(true) {
            tracing::warn!(%error, "cannot become a child subreaper; orphans go to init");
        }
    });
}

/// One process as `end` sees it.
struct Seen {
    stat: ProcessStat,
    zombie: bool,
}

/// Kills, once, the process group `group` and every live process carrying `tag` (never this
/// process). For a kernel being killed while the host may exit right after.
pub fn kill_tagged(group: i32, tag: &str) {
    let me = std::process::id() as i32;
    // ESRCH: already gone.
    let _ = killpg(Pid::from_raw(group), Signal::SIGKILL);
    for process in scan() {
        if process.stat.pid != me
            && !process.zombie
            && has_tag(process.stat.pid, tag)
            && !spared(process.stat.pid)
        {
            let _ = kill(Pid::from_raw(process.stat.pid), Signal::SIGKILL);
        }
    }
}

/// Ends what the kernel `kernel_pid` (already exited and reaped) left: its process group and
/// every process carrying `tag` get SIGKILL, again until none is left (bounded by `END_LIMIT`),
/// and those re-parented to this process are reaped. Blocking: run it off the async runtime.
/// Returns how many processes were killed.
pub fn end(kernel_pid: i32, tag: &str) -> usize {
    let me = std::process::id() as i32;
    let deadline = Instant::now() + END_LIMIT;
    let mut killed: HashSet<i32> = HashSet::new();
    let mut unsure_passes = UNSURE_PASSES;
    loop {
        // ESRCH: the group is already empty.
        let _ = killpg(Pid::from_raw(kernel_pid), Signal::SIGKILL);
        let mut busy = false;
        let mut unsure = false;
        for process in scan() {
            let pid = process.stat.pid;
            if pid == me || pid == kernel_pid {
                continue;
            }
            let tagged = if process.zombie {
                Tagged::No
            } else {
                tagged(&process.stat, tag)
            };
            unsure |= tagged == Tagged::Unknown;
            let ours =
                process.stat.pgrp == kernel_pid || killed.contains(&pid) || tagged == Tagged::Yes;
            if !ours {
                continue;
            }
            if !process.zombie && spared(pid) {
                continue;
            }
            if process.zombie {
                if process.stat.ppid == me {
                    // Only a process this host adopted; ECHILD if someone else reaped it.
                    let _ = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG));
                    busy = true;
                }
                continue;
            }
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            killed.insert(pid);
            busy = true;
        }
        let look_again = unsure && unsure_passes > 0;
        if !(busy || look_again) {
            break;
        }
        if !busy {
            unsure_passes -= 1;
        }
        if Instant::now() >= deadline {
            tracing::warn!(
                kernel = kernel_pid,
                "processes the kernel started were still being ended after {} s",
                END_LIMIT.as_secs()
            );
            break;
        }
        std::thread::sleep(PASS_PAUSE);
    }
    if !killed.is_empty() {
        tracing::debug!(
            kernel = kernel_pid,
            count = killed.len(),
            "ended the processes the kernel left"
        );
    }
    collect_spared();
    killed.len()
}

/// Collects, each on a thread of its own, the spared processes (`SPARED`) that are this host's
/// children now (a namespace's init, or a save child, re-parented to this subreaper when their
/// parent ended): they end by themselves, and must not stay zombies until the host exits.
pub fn collect_spared() {
    static WAITING: std::sync::Mutex<Vec<i32>> = std::sync::Mutex::new(Vec::new());
    let me = std::process::id() as i32;
    for process in scan() {
        let pid = process.stat.pid;
        if process.stat.ppid != me || !spared(pid) {
            continue;
        }
        {
            let Ok(mut waiting) = WAITING.lock() else {
                return;
            };
            if waiting.contains(&pid) {
                continue;
            }
            waiting.push(pid);
        }
        let spawned = std::thread::Builder::new()
            .name("pi-repl-collect".into())
            .spawn(move || {
                // ECHILD: collected by someone else meanwhile.
                let _ = waitpid(Pid::from_raw(pid), None);
                if let Ok(mut waiting) = WAITING.lock() {
                    waiting.retain(|&p| p != pid);
                }
            });
        if let Err(error) = spawned {
            tracing::debug!(%error, pid, "cannot wait for a spared process");
        }
    }
}

/// Every process in `/proc`, with whether it is a zombie.
fn scan() -> Vec<Seen> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| {
            let pid: i32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
            let line = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let state = line
                .rfind(')')
                .and_then(|i| line[i + 1..].split_whitespace().next())?;
            Some(Seen {
                zombie: state == "Z" || state == "X",
                stat: parse_stat(&line)?,
            })
        })
        .collect()
}

/// Whether a process carries a tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tagged {
    Yes,
    No,
    /// Its environment reads empty: maybe in the middle of `exec`.
    Unknown,
}

/// Whether `process`'s environment holds `TAG_VAR=tag`. Kernel threads (children of
/// `kthreadd`, pid 2) have no environment and are never ours.
fn tagged(process: &ProcessStat, tag: &str) -> Tagged {
    if process.pid == 2 || process.ppid == 2 {
        return Tagged::No;
    }
    let Ok(environ) = std::fs::read(format!("/proc/{}/environ", process.pid)) else {
        return Tagged::No; // gone, or not ours to read
    };
    if environ.is_empty() {
        return Tagged::Unknown;
    }
    let wanted = format!("{TAG_VAR}={tag}");
    if environ
        .split(|&b| b == 0)
        .any(|entry| entry == wanted.as_bytes())
    {
        Tagged::Yes
    } else {
        Tagged::No
    }
}

/// True when process `pid`'s environment holds `TAG_VAR=tag`.
fn has_tag(pid: i32, tag: &str) -> bool {
    let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
        return false;
    };
    let wanted = format!("{TAG_VAR}={tag}");
    environ
        .split(|&b| b == 0)
        .any(|entry| entry == wanted.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tagged_process_in_a_session_of_its_own_is_ended_and_reaped() {
        become_subreaper();
        let tag = new_tag();
        // A stand-in for a kernel: a shell in its own group that starts a detached sleep (own
        // session, the tag inherited) and exits; the sleep is re-parented to this process.
        let mut shell = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg("setsid sleep 31337 > /dev/null 2>&1 & echo $!")
            .env(TAG_VAR, &tag)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut text = String::new();
        std::io::Read::read_to_string(shell.stdout.as_mut().unwrap(), &mut text).unwrap();
        let shell_pid = shell.id() as i32;
        shell.wait().unwrap();
        let sleep: i32 = text.trim().parse().unwrap();
        let alive = |pid: i32| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|stat| !stat.contains(") Z") && !stat.contains(") X"))
        };
        assert!(alive(sleep));
        assert!(end(shell_pid, &tag) >= 1);
        assert!(!alive(sleep));
        // Reaped: this process adopted it, so nothing of it is left at all.
        assert!(!std::path::Path::new(&format!("/proc/{sleep}")).exists());
    }

    #[test]
    fn an_untagged_process_is_left_alone() {
        let mut other = std::process::Command::new("sleep")
            .arg("31338")
            .spawn()
            .unwrap();
        end(999_999_999, &new_tag());
        assert!(
            other.try_wait().unwrap().is_none(),
            "not ours: still running"
        );
        other.kill().unwrap();
        other.wait().unwrap();
    }
}
