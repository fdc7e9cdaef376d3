//! Process isolation of a local kernel, as the host sees it: whether the kernel runs in its own
//! PID namespace (so a cell sees only the kernel's processes, never the agent that started
//! pi-repl nor its environment), and how the host finds the kernel's processes from outside.
//!
//! Owns: reading the kernel-side verdict (`pi_repl_kernel.namespace` writes `isolation.json` in
//! the runtime directory before the kernel process exists), finding the kernel process below its
//! launcher, and mapping a pid the kernel reports (namespace-local) to the host's pid.
//! Does not own: making the namespaces (the kernel-side `namespace` module) or the setting
//! (`--no-process-isolation`, `PI_REPL_PROCESS_ISOLATION`).
//!
//! Layout when isolated: the host's child is a *launcher* outside the namespace (it leads the
//! process group the host signals and exits as the kernel did), its child is the namespace's
//! pid 1 (reaps orphans; its exit kills every process in the namespace), and pid 2 is the
//! kernel. The host keeps global pids: the launcher's for the group, death and OOM, the kernel's
//! for a signal to the kernel alone, a save child's for watching it.

use std::path::Path;

use super::processes::ProcessStat;

/// The file the kernel side writes in the runtime directory.
pub const STATUS_FILE: &str = "isolation.json";

/// The variable that asks the kernel side to isolate (`1`).
pub const ISOLATE_VAR: &str = "PI_REPL_ISOLATE";

/// Whether a local kernel's cells can see other processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Isolation {
    /// The kernel runs in its own PID namespace with a fresh `/proc`.
    Namespace,
    /// Isolation was asked for and could not be had: why. Cells see the user's processes.
    Unavailable(String),
    /// The user turned it off.
    Off,
}

impl Isolation {
    /// The kernel side's verdict in `runtime_dir`, for a kernel started with isolation wanted,
    /// and whether the kernel's pids are namespace-local (the launcher layout: also when the
    /// namespace was made but its `/proc` could not be mounted). No file (a kernel module that
    /// does not know the setting) reads as unavailable.
    pub fn read(runtime_dir: &Path) -> (Isolation, bool) {
        let path = runtime_dir.join(STATUS_FILE);
        let text = std::fs::read_to_string(&path).ok();
        // Read once: removed now, so a host killed later leaves only its socket files behind
        // (which the next start sweeps).
        let _ = std::fs::remove_file(&path);
        let Some(status) =
            text.and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        else {
            let why = "the kernel did not say whether it is isolated".to_string();
            return (Isolation::Unavailable(why), false);
        };
        let namespaced = status["layout"].as_str() == Some("namespace");
        if status["isolated"].as_bool() == Some(true) {
            (Isolation::Namespace, namespaced)
        } else {
            let why = status["reason"].as_str().unwrap_or("no reason given");
            (Isolation::Unavailable(why.to_string()), namespaced)
        }
    }

    /// True when the kernel's processes live in a namespace of their own (pids differ inside).
    pub fn is_namespace(&self) -> bool {
        matches!(self, Isolation::Namespace)
    }

    /// One line for `pi-repl doctor` and the notice.
    pub fn describe(&self) -> String {
        match self {
            Isolation::Namespace => "cells see only the kernel's own processes (a PID namespace \
                                     of their own)"
                .to_string(),
            Isolation::Unavailable(why) => format!(
                "cells can see every process of this user (and read their environments): the \
                 kernel could not get a PID namespace of its own: {why}"
            ),
            Isolation::Off => "cells can see every process of this user: process isolation is \
                               off (--no-process-isolation or PI_REPL_PROCESS_ISOLATION=0)"
                .to_string(),
        }
    }
}

/// The notice the first result carries when isolation was wanted and could not be had.
pub fn unavailable_notice(why: &str) -> String {
    format!(
        "this kernel is not isolated: cells can see every process of this user, including the \
         agent that started pi-repl, and read their environments (API keys). The kernel could \
         not get a PID namespace of its own: {why}. Set PI_REPL_PROCESS_ISOLATION=0 to start \
         without trying (and without this notice)."
    )
}

/// The kernel process of a namespaced launcher: the child of its only child (init) that is
/// pid 2 inside (init may have adopted orphans too).
pub fn kernel_below(
    processes: &[ProcessStat],
    launcher: i32,
    innermost: impl Fn(i32) -> Option<i32>,
) -> Option<i32> {
    let init = processes.iter().find(|p| p.ppid == launcher)?.pid;
    processes
        .iter()
        .find(|p| p.ppid == init && innermost(p.pid) == Some(2))
        .map(|p| p.pid)
}

/// The host's pid of the process that is `local` in the namespace below `launcher`: one of the
/// launcher's descendants whose innermost pid (`NSpid`, last field) is `local`. `children`
/// lists a process's children (`processes::children_of`, or a scan of every process).
pub fn host_pid(
    children: impl Fn(i32) -> Vec<i32>,
    launcher: i32,
    local: i32,
    innermost: impl Fn(i32) -> Option<i32>,
) -> Option<i32> {
    let mut frontier = vec![launcher];
    let mut seen = std::collections::HashSet::new();
    while let Some(parent) = frontier.pop() {
        for child in children(parent) {
            if !seen.insert(child) {
                continue;
            }
            if innermost(child) == Some(local) {
                return Some(child);
            }
            frontier.push(child);
        }
    }
    None
}

/// `children` for [`host_pid`] from one scan of every process.
pub fn children_in(processes: &[ProcessStat]) -> impl Fn(i32) -> Vec<i32> + '_ {
    |parent| {
        processes
            .iter()
            .filter(|p| p.ppid == parent)
            .map(|p| p.pid)
            .collect()
    }
}

/// The innermost pid of `pid` (the last field of `NSpid:` in `/proc/<pid>/status`).
pub fn innermost_pid(pid: i32) -> Option<i32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("NSpid:"))?
        .split_whitespace()
        .last()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::processes::BootTicks;

    fn stat(pid: i32, ppid: i32) -> ProcessStat {
        ProcessStat {
            pid,
            ppid,
            pgrp: 0,
            start: BootTicks(0),
        }
    }

    #[test]
    fn the_kernel_is_the_grandchild_of_its_launcher_and_local_pids_map_below_it() {
        let processes = [
            stat(1, 0),
            stat(500, 1),   // the launcher
            stat(501, 500), // init, pid 1 inside
            stat(502, 501), // the kernel, pid 2 inside
            stat(530, 502), // a save child, pid 7 inside
            stat(600, 1),   // elsewhere, also pid 7 in another namespace
            stat(499, 501), // an orphan init adopted, listed before the kernel
        ];
        let inside = |pid: i32| match pid {
            501 => Some(1),
            502 => Some(2),
            530 | 600 => Some(7),
            499 => Some(9),
            _ => None,
        };
        assert_eq!(kernel_below(&processes, 500, inside), Some(502));
        assert_eq!(host_pid(children_in(&processes), 500, 7, inside), Some(530));
        assert_eq!(host_pid(children_in(&processes), 500, 8, inside), None);
    }

    #[test]
    fn the_verdict_file_reads_as_isolated_or_why_not() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            Isolation::read(dir.path()),
            (Isolation::Unavailable(_), false)
        ));
        let write = |text: &str| std::fs::write(dir.path().join(STATUS_FILE), text).unwrap();
        write(r#"{"isolated": true, "layout": "namespace"}"#);
        assert_eq!(Isolation::read(dir.path()), (Isolation::Namespace, true));
        assert!(
            !dir.path().join(STATUS_FILE).exists(),
            "read once and removed: a killed host leaves only its sockets"
        );
        write(r#"{"isolated": false, "reason": "no userns"}"#);
        assert_eq!(
            Isolation::read(dir.path()),
            (Isolation::Unavailable("no userns".into()), false)
        );
        write(r#"{"isolated": false, "reason": "no /proc", "layout": "namespace"}"#);
        assert_eq!(
            Isolation::read(dir.path()),
            (Isolation::Unavailable("no /proc".into()), true)
        );
    }

    #[test]
    fn our_own_innermost_pid_is_our_pid_in_the_root_namespace() {
        // The tests run in the root PID namespace or in one of their own; either way /proc
        // matches the process's own view.
        assert_eq!(
            innermost_pid(std::process::id() as i32),
            Some(std::process::id() as i32)
        );
    }
}
