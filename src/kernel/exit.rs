//! Why a kernel process ended, in words a person can act on.
//!
//! Owns: turning an exit status (plus what the host knows: it killed the kernel itself, the
//! out-of-memory counter of the kernel's cgroup moved) into a `KernelExit` and its description.

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;

use crate::python_env::embedded_package::{
    EXIT_CANNOT_ISOLATE, EXIT_HOST_GONE, EXIT_MISSING_KERNEL,
};

/// Who or what ended the kernel, when the host knows better than the exit status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KilledBy {
    /// The host killed the process group because an interrupted cell did not stop in time.
    AbortGrace { grace_ms: u64 },
    /// The host killed it while shutting down or replacing it.
    Host,
}

/// The end of a kernel process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelExit {
    /// Exit code, when it exited.
    pub code: Option<i32>,
    /// Signal number, when a signal ended it.
    pub signal: Option<i32>,
    /// The cgroup's out-of-memory kill counter went up while this kernel ran.
    pub oom_killed: bool,
    /// Set when the host ended the kernel on purpose.
    pub killed_by: Option<KilledBy>,
    /// A remote kernel: what the Jupyter Server (or the lost connection) said about its end;
    /// there is no exit status to read.
    pub remote: Option<String>,
}

impl KernelExit {
    pub fn from_status(status: ExitStatus) -> KernelExit {
        KernelExit {
            code: status.code(),
            signal: status.signal(),
            oom_killed: false,
            killed_by: None,
            remote: None,
        }
    }

    /// True when the launcher reported that the interpreter cannot import ipykernel.
    pub fn is_missing_kernel(&self) -> bool {
        self.code == Some(EXIT_MISSING_KERNEL)
    }

    /// One sentence: what ended the kernel.
    pub fn describe(&self) -> String {
        match (&self.killed_by, self.signal, self.code) {
            (Some(KilledBy::AbortGrace { grace_ms }), _, _) => format!(
                "pi-repl killed the kernel because the interrupted cell was still running {:.0} s later \
                 (code that ignores KeyboardInterrupt, e.g. a C extension)",
                *grace_ms as f64 / 1000.0
            ),
            (Some(KilledBy::Host), _, _) => "pi-repl stopped the kernel".to_string(),
            (None, None, None) if self.remote.is_some() => self.remote.clone().unwrap_or_default(),
            (None, Some(9), _) if self.oom_killed => {
                "the kernel was killed by the out-of-memory killer (SIGKILL): the cell used more \
                 memory than the machine allows"
                    .to_string()
            }
            (None, Some(9), _) => "the kernel was killed by SIGKILL, most likely by the \
                                    out-of-memory killer (the cell used too much memory) or by \
                                    another process"
                .to_string(),
            (None, Some(signal), _) => {
                format!(
                    "the kernel was killed by signal {signal} ({})",
                    signal_name(signal)
                )
            }
            (None, None, Some(code)) if code == EXIT_HOST_GONE => {
                "the kernel exited because it lost its link to pi-repl".to_string()
            }
            (None, None, Some(code)) if code == EXIT_MISSING_KERNEL => {
                "the interpreter cannot import ipykernel".to_string()
            }
            (None, None, Some(code)) if code == EXIT_CANNOT_ISOLATE => {
                "the kernel could not map the user into its own user namespace; start it \
                 without process isolation (PI_REPL_PROCESS_ISOLATION=0)"
                    .to_string()
            }
            (None, None, Some(code)) => format!(
                "the kernel process exited with code {code} (os._exit(), sys.exit() in a thread, \
                 or a fatal error in the interpreter)"
            ),
            (None, None, None) => "the kernel process ended".to_string(),
        }
    }
}

/// Stack frames of the kernel's own machinery, left out of a crash report.
const MACHINERY: &[&str] = &[
    "/site-packages/IPython/",
    "/site-packages/ipykernel/",
    "/site-packages/tornado/",
    "/asyncio/",
    "/threading.py",
    "pi_repl_kernel/launch.py",
    "File \"<string>\"",
];

/// The useful part of what a crashing kernel wrote to stderr: the `faulthandler` report with
/// the kernel's own frames removed, or the last lines when there is no report.
pub fn crash_report(stderr: &[String]) -> Vec<String> {
    let Some(start) = stderr
        .iter()
        .rposition(|line| line.starts_with("Fatal Python error"))
    else {
        return stderr.iter().rev().take(10).rev().cloned().collect();
    };
    stderr[start..]
        .iter()
        .filter(|line| !line.trim().is_empty())
        .filter(|line| !line.starts_with("Extension modules:"))
        .filter(|line| !MACHINERY.iter().any(|noise| line.contains(noise)))
        .cloned()
        .collect()
}

/// Name and meaning of the signals a kernel commonly dies from.
pub fn signal_name(signal: i32) -> &'static str {
    match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL: illegal instruction",
        6 => "SIGABRT: the process aborted, often a failed assertion in native code",
        7 => "SIGBUS: bus error in native code",
        8 => "SIGFPE: arithmetic error in native code",
        9 => "SIGKILL",
        11 => "SIGSEGV: segmentation fault, a crash in native code",
        13 => "SIGPIPE",
        15 => "SIGTERM: asked to terminate",
        24 => "SIGXCPU: CPU time limit exceeded",
        25 => "SIGXFSZ: file size limit exceeded",
        _ => "unknown signal",
    }
}

/// The out-of-memory kill counter of the cgroup `pid` lives in (cgroup v2 `memory.events`, or
/// v1 `memory.oom_control`), if this system exposes one.
#[derive(Debug, Clone)]
pub struct OomCounter {
    path: PathBuf,
    baseline: u64,
}

impl OomCounter {
    /// Reads the counter for `pid` now; `None` where the system does not expose it.
    pub fn for_process(pid: u32) -> Option<OomCounter> {
        let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        let mut candidates = Vec::new();
        for line in cgroups.lines() {
            let mut fields = line.splitn(3, ':');
            let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
            let relative = path.trim_start_matches('/');
            if controllers.is_empty() {
                candidates.push(
                    PathBuf::from("/sys/fs/cgroup")
                        .join(relative)
                        .join("memory.events"),
                );
            } else if controllers.split(',').any(|c| c == "memory") {
                candidates.push(
                    PathBuf::from("/sys/fs/cgroup/memory")
                        .join(relative)
                        .join("memory.oom_control"),
                );
            }
        }
        candidates.into_iter().find_map(|path| {
            let baseline = read_oom_kills(&path)?;
            Some(OomCounter { path, baseline })
        })
    }

    /// True when the counter moved since it was read.
    pub fn fired(&self) -> bool {
        read_oom_kills(&self.path).is_some_and(|now| now > self.baseline)
    }
}

fn read_oom_kills(path: &std::path::Path) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().find_map(|line| {
        let mut parts = line.split_whitespace();
        match (parts.next(), parts.next()) {
            (Some("oom_kill"), Some(n)) => n.parse().ok(),
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exit(code: Option<i32>, signal: Option<i32>) -> KernelExit {
        KernelExit {
            code,
            signal,
            oom_killed: false,
            killed_by: None,
            remote: None,
        }
    }

    #[test]
    fn segfault_is_named() {
        let text = exit(None, Some(11)).describe();
        assert!(text.contains("signal 11"), "{text}");
        assert!(text.contains("segmentation fault"), "{text}");
    }

    #[test]
    fn sigkill_points_at_memory() {
        let text = exit(None, Some(9)).describe();
        assert!(text.contains("SIGKILL"), "{text}");
        assert!(text.contains("out-of-memory"), "{text}");
        let mut confirmed = exit(None, Some(9));
        confirmed.oom_killed = true;
        assert!(
            confirmed
                .describe()
                .starts_with("the kernel was killed by the out-of-memory")
        );
    }

    #[test]
    fn a_kernel_that_cannot_map_the_user_says_how_to_start_without_isolation() {
        let text = exit(Some(EXIT_CANNOT_ISOLATE), None).describe();
        assert!(text.contains("PI_REPL_PROCESS_ISOLATION=0"), "{text}");
        // The kernel side exits with the same number.
        assert!(
            crate::python_env::embedded_package::FILES
                .iter()
                .any(|(path, text)| path.ends_with("namespace.py")
                    && text.contains(&format!("EXIT_CANNOT_ISOLATE = {EXIT_CANNOT_ISOLATE}")))
        );
    }

    #[test]
    fn exit_code_is_named() {
        let text = exit(Some(3), None).describe();
        assert!(text.contains("exited with code 3"), "{text}");
    }

    #[test]
    fn abort_grace_kill_explains_itself() {
        let mut e = exit(None, Some(9));
        e.killed_by = Some(KilledBy::AbortGrace { grace_ms: 20_000 });
        let text = e.describe();
        assert!(text.contains("still running 20 s later"), "{text}");
    }

    #[test]
    fn crash_report_keeps_the_user_frames() {
        let stderr: Vec<String> = [
            "some earlier log line",
            "Fatal Python error: Segmentation fault",
            "",
            "Current thread 0x00007f (most recent call first):",
            "  File \"/usr/lib/python3.11/ctypes/__init__.py\", line 519 in string_at",
            "  File \"/tmp/ipykernel_1/2.py\", line 1 in <module>",
            "  File \"/v/site-packages/IPython/core/interactiveshell.py\", line 3823 in run_code",
            "  File \"/usr/lib/python3.11/asyncio/events.py\", line 80 in _run",
            "  File \"<string>\", line 1 in <module>",
            "",
            "Extension modules: zmq.backend.cython._zmq (total: 1)",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            crash_report(&stderr),
            vec![
                "Fatal Python error: Segmentation fault",
                "Current thread 0x00007f (most recent call first):",
                "  File \"/usr/lib/python3.11/ctypes/__init__.py\", line 519 in string_at",
                "  File \"/tmp/ipykernel_1/2.py\", line 1 in <module>",
            ]
        );
        assert_eq!(crash_report(&["a".to_string()]), vec!["a"]);
    }

    #[test]
    fn oom_counter_parses_both_cgroup_formats() {
        let tmp = tempfile::tempdir().unwrap();
        let v2 = tmp.path().join("memory.events");
        std::fs::write(&v2, "low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n").unwrap();
        assert_eq!(read_oom_kills(&v2), Some(2));
        let v1 = tmp.path().join("memory.oom_control");
        std::fs::write(&v1, "oom_kill_disable 0\nunder_oom 0\noom_kill 5\n").unwrap();
        assert_eq!(read_oom_kills(&v1), Some(5));
    }
}
