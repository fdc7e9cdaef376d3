//! A background save running in a forked child of the kernel, as the engine sees it.
//!
//! Owns: the child's pid, when it is due to be killed (`SnapshotSettings::child_limit`), and
//! which cells it covers: the cells run before the fork (a commit clears exactly those from the
//! unsaved list) and the names they mentioned (restored as hints if it fails; the hints of
//! cells run since the fork stay for the next save). Watching it: the child belongs to the
//! kernel, not to the host, so the host cannot wait for it; it looks at `/proc/<pid>/stat`
//! every `CHILD_POLL` while idle, and the kernel reaps it (`snapshots::save_status`).
//!
//! A kernel in a PID namespace of its own (`kernel::isolation`) names the child by its pid
//! inside; the host watches it by its host pid.
//!
//! A save that makes no progress is found in seconds, not at its limit: stopped (`SIGSTOP`,
//! a debugger) for `STOPPED_LIMIT`, or using no CPU for `IDLE_LIMIT` (a lock another thread
//! held at the fork), it reads as `Stalled`, and the engine kills it, says so in the next
//! result and saves again.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::Instant;

/// How often the engine looks whether a save child has exited (only between cells).
pub const CHILD_POLL: Duration = Duration::from_millis(100);

/// How long a save child may stay stopped (`T` in `/proc/<pid>/stat`) before it is stalled.
pub const STOPPED_LIMIT: Duration = Duration::from_secs(2);

/// How long a save child may use no CPU at all, and not wait for the disk, before it is
/// stalled: a save pickles and writes all the time, so a child that sleeps this long waits
/// for something that will not come (a lock another thread held at the fork).
pub const IDLE_LIMIT: Duration = Duration::from_secs(15);

/// Who a save child is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildIds {
    /// Its pid as the kernel knows it (inside the kernel's PID namespace, if it has one): its
    /// report and the manifest it commits carry this one.
    pub pid: i32,
    /// Its pid as the host sees it, for watching it; `None` when it could not be found (gone).
    pub host_pid: Option<i32>,
    /// Its random token, in its report and manifest (absent from an older kernel module).
    pub token: Option<String>,
}

/// A save child the kernel started.
#[derive(Debug)]
pub struct SaveChild {
    pub ids: ChildIds,
    /// When it is killed if it has not exited.
    pub deadline: Instant,
    /// The engine's last cell number when it forked: its snapshot covers cells up to this one.
    pub cells_through: u64,
    /// The hints it was given.
    pub hints: BTreeSet<String>,
    /// Not looked at before this (set when the kernel still called it running after it exited).
    pub not_before: Instant,
    /// Answered cells up to `cells_through` its image lacks (lost to a dead kernel, not yet
    /// named), as its manifest says.
    pub missing: Vec<u64>,
    limit: Duration,
    /// Since when it has made no progress, kept across the engine's looks (each look is a new
    /// `event` future: between two cells a look lasts milliseconds).
    progress: std::sync::Mutex<Progress>,
}

/// What happened to a save child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildEvent {
    /// It exited (or was killed); the kernel can reap it.
    Exited,
    /// It ran past its deadline.
    TimeUp,
    /// It makes no progress: why, as "was stopped for 2 s".
    Stalled(&'static str),
}

impl SaveChild {
    pub fn new(
        ids: ChildIds,
        limit: Duration,
        cells_through: u64,
        hints: BTreeSet<String>,
    ) -> Self {
        let now = Instant::now();
        SaveChild {
            ids,
            deadline: now + limit,
            cells_through,
            hints,
            not_before: now,
            missing: Vec::new(),
            limit,
            progress: std::sync::Mutex::new(Progress::new(now)),
        }
    }

    /// Its time starts now (a child that waited behind another starts saving now).
    pub fn restart_clock(&mut self) {
        let now = Instant::now();
        self.deadline = now + self.limit;
        self.not_before = now;
        self.progress = std::sync::Mutex::new(Progress::new(now));
    }

    /// Resolves when the child exits, its time is up, or it stalls.
    pub async fn event(&self) -> ChildEvent {
        tokio::time::sleep_until(self.not_before).await;
        let Some(pid) = self.ids.host_pid else {
            return ChildEvent::Exited;
        };
        loop {
            let Some(seen) = Seen::of(pid) else {
                return ChildEvent::Exited;
            };
            let now = Instant::now();
            if now >= self.deadline {
                return ChildEvent::TimeUp;
            }
            let stalled = match self.progress.lock() {
                Ok(mut progress) => progress.stalled(seen, now),
                Err(_) => None, // poisoned by a panic elsewhere: watch the deadline only
            };
            if let Some(why) = stalled {
                return ChildEvent::Stalled(why);
            }
            tokio::time::sleep(CHILD_POLL.min(self.deadline - now)).await;
        }
    }
}

/// The next event of the save child, or never when there is none.
pub async fn next_event(child: &Option<SaveChild>) -> ChildEvent {
    match child {
        Some(child) => child.event().await,
        None => std::future::pending().await,
    }
}

/// What `/proc/<pid>/stat` says of a live child: stopped, and its CPU time so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    stopped: bool,
    /// Waiting for the disk (`D`): a long fsync is progress, not a stall.
    writing: bool,
    cpu_ticks: u64,
}

impl Seen {
    /// `None` when the process is gone (or a zombie: it exited, the kernel has yet to reap it).
    fn of(pid: i32) -> Option<Seen> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        Seen::parse(&stat)
    }

    fn parse(stat: &str) -> Option<Seen> {
        // After the command name in parentheses: state, then 10 fields to utime and stime.
        let rest = &stat[stat.rfind(')')? + 1..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let state = *fields.first()?;
        if state == "Z" || state == "X" {
            return None;
        }
        let ticks = |at: usize| fields.get(at).and_then(|f| f.parse::<u64>().ok());
        Some(Seen {
            stopped: state == "T" || state == "t",
            writing: state == "D",
            cpu_ticks: ticks(11)? + ticks(12)?,
        })
    }
}

/// Since when a child has been stopped, or has used no CPU.
#[derive(Debug)]
struct Progress {
    stopped_since: Option<Instant>,
    ticks: Option<u64>,
    idle_since: Instant,
}

impl Progress {
    fn new(now: Instant) -> Progress {
        Progress {
            stopped_since: None,
            ticks: None,
            idle_since: now,
        }
    }

    fn stalled(&mut self, seen: Seen, now: Instant) -> Option<&'static str> {
        if seen.stopped {
            let since = *self.stopped_since.get_or_insert(now);
            if now.duration_since(since) >= STOPPED_LIMIT {
                return Some("was stopped (SIGSTOP or a debugger) and made no progress");
            }
        } else {
            self.stopped_since = None;
        }
        if self.ticks != Some(seen.cpu_ticks) || seen.writing {
            self.ticks = Some(seen.cpu_ticks);
            self.idle_since = now;
        } else if now.duration_since(self.idle_since) >= IDLE_LIMIT {
            return Some("used no CPU for 15 s (waiting for something that will not come)");
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_exited_child_is_seen_and_a_running_one_times_out() {
        let mut sleeper = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let watched = |pid: u32| ChildIds {
            pid: 3,
            host_pid: Some(pid as i32),
            token: None,
        };
        let running = SaveChild::new(
            watched(sleeper.id()),
            Duration::from_millis(50),
            1,
            BTreeSet::new(),
        );
        assert_eq!(running.event().await, ChildEvent::TimeUp);
        sleeper.kill().unwrap();
        // Killed but not reaped yet: a zombie counts as exited.
        let exited = SaveChild::new(
            watched(sleeper.id()),
            Duration::from_secs(600),
            1,
            BTreeSet::new(),
        );
        assert_eq!(exited.event().await, ChildEvent::Exited);
        sleeper.wait().unwrap();
    }

    /// Issue 21: a stopped save child is found in seconds, not at its limit of minutes.
    #[tokio::test]
    async fn a_stopped_child_stalls_and_a_busy_one_does_not() {
        let mut stopped = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let pid = stopped.id() as i32;
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGSTOP,
        )
        .unwrap();
        let child = SaveChild::new(
            ChildIds {
                pid: 3,
                host_pid: Some(pid),
                token: None,
            },
            Duration::from_secs(600),
            1,
            BTreeSet::new(),
        );
        assert!(matches!(child.event().await, ChildEvent::Stalled(_)));
        stopped.kill().unwrap();
        stopped.wait().unwrap();
    }

    #[test]
    fn progress_is_cpu_time_and_a_stop_is_a_stall_only_when_it_lasts() {
        let start = Instant::now();
        let mut progress = Progress::new(start);
        let running = |cpu_ticks| Seen {
            stopped: false,
            writing: false,
            cpu_ticks,
        };
        assert_eq!(progress.stalled(running(5), start), None);
        assert_eq!(progress.stalled(running(6), start + IDLE_LIMIT), None);
        assert!(
            progress
                .stalled(running(6), start + IDLE_LIMIT * 2 + CHILD_POLL)
                .is_some()
        );
        let mut stop = Progress::new(start);
        let stopped = Seen {
            stopped: true,
            writing: false,
            cpu_ticks: 1,
        };
        assert_eq!(stop.stalled(stopped, start), None);
        assert!(stop.stalled(stopped, start + STOPPED_LIMIT).is_some());
    }

    #[test]
    fn a_stat_line_with_spaces_in_the_name_is_read() {
        let line = "42 (pi repl) S 1 42 42 0 -1 4194560 100 0 0 0 7 3 0 0 20 0 1 0 99 0 0";
        assert_eq!(
            Seen::parse(line),
            Some(Seen {
                stopped: false,
                writing: false,
                cpu_ticks: 10
            })
        );
        assert_eq!(Seen::parse("42 (x) Z 1 42"), None);
    }
}
