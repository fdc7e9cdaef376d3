//! The processes a sub-agent leaves to this host when it is killed from outside.
//!
//! A child (`pi-repl agent`) runs its own kernel. When the child is killed (`kill -9`, the OOM
//! killer) its kernel notices through its lifeline and exits, but its parent is gone: it is
//! re-parented to the nearest child subreaper, which is this host (`kernel::leftovers`), and
//! nothing here waits for it, so it would stay a zombie until the host exits. A child that ends
//! normally stops and collects its kernel itself; this is only for one that could not.
//!
//! So while the child lives, the processes it started are remembered (pid and start time), looked
//! up whenever the child says something on its link (its kernel is up before its first model
//! request) and once more the moment it exits (before anything is collected). Once the child is
//! gone, each remembered process that is now this host's child (same pid, same start time: never
//! a stranger that reused the pid, never a process this host started itself) is killed with its
//! process group and collected.
//!
//! Linux only (it reads `/proc`); elsewhere nothing is remembered and nothing reaped.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use crate::kernel::processes::{ProcessStat, parse_stat};

/// How long collecting the remembered processes may take (they are killed first: milliseconds).
pub const REAP_LIMIT: Duration = Duration::from_secs(2);

/// A child's own children, remembered while it lives.
#[derive(Debug)]
pub struct Offspring {
    parent: i32,
    seen: Mutex<Vec<(i32, u64)>>,
}

impl Offspring {
    pub fn new(parent: u32) -> Offspring {
        Offspring {
            parent: parent as i32,
            seen: Mutex::new(Vec::new()),
        }
    }

    /// Remembers the processes whose parent is the child now.
    pub fn look(&self) {
        let found: Vec<(i32, u64)> = stats()
            .into_iter()
            .filter(|stat| stat.ppid == self.parent)
            .map(|stat| (stat.pid, stat.start.0))
            .collect();
        self.remember(found);
    }

    /// Remembers the processes of the child's kernels that this host has adopted already (the
    /// child has just died): alive, this host's children, and carrying a kernel tag the child
    /// made (`<child pid>-...`, `kernel::leftovers::new_tag`).
    pub fn look_adopted(&self) {
        let me = std::process::id() as i32;
        let prefix = format!("{}={}-", crate::kernel::leftovers::TAG_VAR, self.parent);
        let found: Vec<(i32, u64)> = stats()
            .into_iter()
            .filter(|stat| stat.ppid == me && environ_has_prefix(stat.pid, &prefix))
            .map(|stat| (stat.pid, stat.start.0))
            .collect();
        self.remember(found);
    }

    fn remember(&self, found: Vec<(i32, u64)>) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        for process in found {
            if !seen.contains(&process) {
                seen.push(process);
            }
        }
    }

    /// Kills and collects the remembered processes that came to this host when the child died.
    /// Blocking: run it off the async runtime. Returns how many were collected.
    pub fn reap_adopted(&self) -> usize {
        let me = std::process::id() as i32;
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut collected = 0;
        for (pid, start) in seen {
            let Some(stat) = stat_of(pid) else { continue };
            if stat.ppid != me || stat.start.0 != start {
                continue; // collected by the child, or not the process that was remembered
            }
            // The kernel leads its own process group; ESRCH: it is already gone.
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
            let deadline = Instant::now() + REAP_LIMIT;
            loop {
                match waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)) {
                    Ok(WaitStatus::StillAlive) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Ok(WaitStatus::StillAlive) => {
                        tracing::warn!(pid, "a killed sub-agent's kernel did not end in time");
                        break;
                    }
                    Ok(_) => {
                        collected += 1;
                        break;
                    }
                    Err(_) => break, // ECHILD: someone else collected it
                }
            }
        }
        // A namespace's init (its own process group, spared above) came to this host too: it
        // ends once its save children have, and is collected then.
        crate::kernel::leftovers::collect_spared();
        collected
    }
}

fn environ_has_prefix(pid: i32, prefix: &str) -> bool {
    let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
        return false;
    };
    environ
        .split(|&b| b == 0)
        .any(|entry| entry.starts_with(prefix.as_bytes()))
}

fn stat_of(pid: i32) -> Option<ProcessStat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

fn stats() -> Vec<ProcessStat> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| {
            let pid: i32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
            stat_of(pid)
        })
        .collect()
}
