//! The processes a cell started, found through `/proc`, and ending them.
//!
//! An abort interrupts the kernel's whole process group (SIGINT), which ends most children.
//! What survives (a child that ignores SIGINT, or one in a session of its own) is found here:
//! descendants of the kernel, or members of its process group, that started after the cell
//! did. They get SIGTERM, then SIGKILL after a short grace. Processes started by earlier cells
//! are left alone, and so is a save child (`spared`). Linux only; elsewhere nothing
//! is found.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// How long survivors get between SIGTERM and SIGKILL.
pub const TERM_GRACE: Duration = Duration::from_millis(500);

/// A point in time comparable with process start times: clock ticks since boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct BootTicks(pub u64);

impl BootTicks {
    /// Now, in the units `/proc/<pid>/stat` uses for a process's start time.
    pub fn now() -> BootTicks {
        let ticks_per_second = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .ok()
            .flatten()
            .unwrap_or(100) as u64;
        match nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME) {
            Ok(now) => BootTicks(
                now.tv_sec() as u64 * ticks_per_second
                    + now.tv_nsec() as u64 * ticks_per_second / 1_000_000_000,
            ),
            Err(_) => BootTicks(0),
        }
    }
}

/// The fields of `/proc/<pid>/stat` this module needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessStat {
    pub pid: i32,
    pub ppid: i32,
    pub pgrp: i32,
    pub start: BootTicks,
}

/// Parses one `/proc/<pid>/stat` line. The command name may contain spaces and parentheses, so
/// fields are counted from the last `)`.
pub fn parse_stat(line: &str) -> Option<ProcessStat> {
    let open = line.find('(')?;
    let pid = line[..open].trim().parse().ok()?;
    let close = line.rfind(')')?;
    let fields: Vec<&str> = line[close + 1..].split_whitespace().collect();
    // fields[0] is field 3 (state); ppid is field 4, pgrp 5, starttime 22.
    Some(ProcessStat {
        pid,
        ppid: fields.get(1)?.parse().ok()?,
        pgrp: fields.get(2)?.parse().ok()?,
        start: BootTicks(fields.get(19)?.parse().ok()?),
    })
}

/// This process as a kernel names its host: its pid and start time (`<pid>.<ticks>`), so a
/// reused pid is not taken for it. A kernel in a PID namespace of its own cannot see its host,
/// so the host passes this (`HOST_ID_VAR`) and writes it in its sub-agents' records.
pub fn own_identity() -> String {
    let pid = std::process::id();
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|line| parse_stat(&line))
        .map_or_else(|| pid.to_string(), |stat| format!("{pid}.{}", stat.start.0))
}

/// The variable that carries `own_identity` into the kernel.
pub const HOST_ID_VAR: &str = "PI_REPL_HOST_ID";

/// The children of `pid`, every thread's (`/proc/<pid>/task/<tid>/children`): a few reads
/// where a scan of every process reads hundreds of files. `None` when the kernel offers no such
/// file (built without it) or `pid` is gone.
pub fn children_of(pid: i32) -> Option<Vec<i32>> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut children = Vec::new();
    let mut any = false;
    for task in tasks.flatten() {
        let Ok(text) = std::fs::read_to_string(task.path().join("children")) else {
            continue;
        };
        any = true;
        children.extend(
            text.split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok()),
        );
    }
    any.then_some(children)
}

/// Every process `/proc` shows.
pub fn all_processes() -> Vec<ProcessStat> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| {
            let name = entry.ok()?.file_name();
            let pid: i32 = name.to_str()?.parse().ok()?;
            let line = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            parse_stat(&line)
        })
        .collect()
}

/// Processes the kernel (`kernel_pid`, also its process group id) started since `since`:
/// its descendants and its process group's members, never the kernel itself.
pub fn started_since(processes: &[ProcessStat], kernel_pid: i32, since: BootTicks) -> Vec<i32> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for p in processes {
        children.entry(p.ppid).or_default().push(p.pid);
    }
    let mut related: HashSet<i32> = processes
        .iter()
        .filter(|p| p.pgrp == kernel_pid)
        .map(|p| p.pid)
        .collect();
    let mut frontier: Vec<i32> = related.iter().copied().chain([kernel_pid]).collect();
    while let Some(pid) = frontier.pop() {
        for &child in children.get(&pid).into_iter().flatten() {
            if related.insert(child) {
                frontier.push(child);
            }
        }
    }
    let mut found: Vec<i32> = processes
        .iter()
        .filter(|p| p.pid != kernel_pid && related.contains(&p.pid) && p.start >= since)
        .map(|p| p.pid)
        .collect();
    found.sort_unstable();
    found
}

/// The names (`/proc/<pid>/comm`) of a kernel's processes that outlive it on purpose: a save
/// child finishing the save of answered cells, and the PID namespace's init waiting for it
/// (`snapshot.fork.CHILD_NAME`, `namespace.INIT_NAME`). Each ends itself: the child after its
/// limit, init when no save child is left.
const SPARED: [&[u8]; 2] = [b"pi-repl-save", b"pi-repl-init"];

/// True for a process the kernel's sweeps leave alone (`SPARED`): here, and in `leftovers`.
pub(crate) fn spared(pid: i32) -> bool {
    std::fs::read(format!("/proc/{pid}/comm"))
        .is_ok_and(|name| SPARED.contains(&name.trim_ascii_end()))
}

/// Ends the processes the kernel started since `since`: SIGTERM, then SIGKILL for those still
/// alive after `TERM_GRACE`. Returns how many were signalled.
pub async fn end_started_since(kernel_pid: i32, since: BootTicks) -> usize {
    // Reading all of `/proc` is blocking file I/O: off the async runtime.
    // A save child the cell's capture forked is not the cell's (it saves the state the cell
    // left, and outlives the kernel on purpose).
    let scan = tokio::task::spawn_blocking(move || {
        let mut found = started_since(&all_processes(), kernel_pid, since);
        found.retain(|&pid| !spared(pid));
        found
    });
    let targets = match scan.await {
        Ok(targets) => targets,
        Err(error) => {
            tracing::warn!(%error, "could not look for the processes the cell started");
            return 0;
        }
    };
    if targets.is_empty() {
        return 0;
    }
    for &pid in &targets {
        // The process may already be gone; that is the goal anyway.
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    }
    let deadline = tokio::time::Instant::now() + TERM_GRACE;
    loop {
        let alive: Vec<i32> = targets
            .iter()
            .copied()
            .filter(|&pid| is_running(pid))
            .collect();
        if alive.is_empty() {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            for pid in alive {
                // Same as above: a process that exited in between is fine.
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    targets.len()
}

/// True while `pid` exists and is not a zombie (an exited child waiting to be reaped).
pub fn is_running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(line) => line
            .rfind(')')
            .and_then(|close| line[close + 1..].split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_of_lists_a_child_any_thread_started_and_nothing_for_a_gone_pid() {
        // `cat` on a pipe stays until its stdin closes: alive while we look.
        let mut child = std::process::Command::new("cat")
            .stdin(std::process::Stdio::piped())
            .spawn()
            .expect("cat");
        let own = std::process::id() as i32;
        let children = children_of(own).expect("this kernel has task/*/children");
        assert!(children.contains(&(child.id() as i32)), "{children:?}");
        drop(child.stdin.take());
        child.wait().expect("wait");
        assert!(
            !children_of(own)
                .unwrap_or_default()
                .contains(&(child.id() as i32))
        );
        assert_eq!(children_of(i32::MAX), None);
    }

    fn stat(pid: i32, ppid: i32, pgrp: i32, start: u64) -> ProcessStat {
        ProcessStat {
            pid,
            ppid,
            pgrp,
            start: BootTicks(start),
        }
    }

    #[test]
    fn parses_a_command_name_with_spaces_and_parens() {
        let line = "4242 (my (odd) cmd) S 4200 4100 4100 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 98765 1000 10";
        let parsed = parse_stat(line).unwrap();
        assert_eq!(parsed, stat(4242, 4200, 4100, 98765));
    }

    #[test]
    fn finds_new_descendants_and_group_members_only() {
        let kernel = 100;
        let processes = [
            stat(1, 0, 1, 0),
            stat(kernel, 1, kernel, 10),
            stat(101, kernel, kernel, 5), // started before the cell (impossible but old)
            stat(102, kernel, kernel, 60), // a child started by the cell
            stat(103, 102, 103, 61),      // its child, in a session of its own
            stat(104, 1, kernel, 62),     // reparented, still in the group
            stat(105, 1, 105, 70),        // unrelated
            stat(106, kernel, kernel, 20), // from an earlier cell
        ];
        assert_eq!(
            started_since(&processes, kernel, BootTicks(50)),
            vec![102, 103, 104]
        );
    }

    #[test]
    fn boot_ticks_advance() {
        let a = BootTicks::now();
        std::thread::sleep(Duration::from_millis(30));
        assert!(BootTicks::now() > a);
    }
}
