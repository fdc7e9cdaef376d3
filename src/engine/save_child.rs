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
//! inside; the host watches it by its host pid, and matches its report and manifest by the pid
//! inside and a random token (pids inside repeat from one kernel to the next).

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use tokio::time::Instant;

/// How often the engine looks whether a save child has exited (only between cells).
pub const CHILD_POLL: Duration = Duration::from_millis(100);

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
}

/// What happened to a save child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildEvent {
    /// It exited (or was killed); the kernel can reap it.
    Exited,
    /// It ran past its deadline.
    TimeUp,
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
        }
    }

    /// Resolves when the child exits or its time is up.
    pub async fn event(&self) -> ChildEvent {
        tokio::time::sleep_until(self.not_before).await;
        let Some(pid) = self.ids.host_pid else {
            return ChildEvent::Exited;
        };
        loop {
            if !crate::kernel::processes::is_running(pid) {
                return ChildEvent::Exited;
            }
            let now = Instant::now();
            if now >= self.deadline {
                return ChildEvent::TimeUp;
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

/// The report a save child writes beside the manifest once it is done.
pub const REPORT_NAME: &str = "save-child.json";

/// True when the save child `ids` reported a commit in `snapshot_dir` (read when its kernel
/// died before reaping it: the manifest it committed stands).
pub fn reported_commit(snapshot_dir: &Path, ids: &ChildIds) -> bool {
    let read = |name: &str| {
        std::fs::read_to_string(snapshot_dir.join(name))
            .ok()
            .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
    };
    let same_token = |found: &serde_json::Value| match &ids.token {
        Some(token) => found.as_str() == Some(token.as_str()),
        None => true,
    };
    let reported = read(REPORT_NAME).is_some_and(|report| {
        report["pid"].as_i64() == Some(i64::from(ids.pid))
            && same_token(&report["token"])
            && report["summary"]["committed"].as_bool() == Some(true)
    });
    // A child killed between its commit and its report (its kernel died) left only the
    // manifest, which names the process that committed it.
    reported
        || read("manifest.json").is_some_and(|manifest| {
            manifest["saved_by"].as_i64() == Some(i64::from(ids.pid))
                && same_token(&manifest["saved_by_token"])
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(pid: i32, token: Option<&str>) -> ChildIds {
        ChildIds {
            pid,
            host_pid: None,
            token: token.map(String::from),
        }
    }

    #[test]
    fn only_a_committed_report_of_that_child_counts() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!reported_commit(dir.path(), &ids(7, None)));
        let report = |pid: i32, committed: bool| {
            let text = serde_json::json!({"pid": pid, "summary": {"committed": committed}});
            std::fs::write(dir.path().join(REPORT_NAME), text.to_string()).unwrap();
        };
        report(7, true);
        assert!(reported_commit(dir.path(), &ids(7, None)));
        assert!(!reported_commit(dir.path(), &ids(8, None)));
        std::fs::write(
            dir.path().join("manifest.json"),
            serde_json::json!({"saved_by": 8}).to_string(),
        )
        .unwrap();
        assert!(
            reported_commit(dir.path(), &ids(8, None)),
            "a manifest committed by a child that died before its report"
        );
        report(7, false);
        assert!(!reported_commit(dir.path(), &ids(7, None)));
    }

    /// Issue 11: in a PID namespace every kernel's pids count from 1, so an earlier kernel's
    /// save child may have had the same pid; its manifest is not this child's commit.
    #[test]
    fn a_manifest_of_another_child_with_the_same_pid_is_not_this_childs_commit() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("manifest.json"),
            serde_json::json!({"saved_by": 5, "saved_by_token": "earlier"}).to_string(),
        )
        .unwrap();
        assert!(!reported_commit(dir.path(), &ids(5, Some("this"))));
        assert!(reported_commit(dir.path(), &ids(5, Some("earlier"))));
    }

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
}
