//! A child's record: `<workspace>/agents/<id>.json`, the one source of truth about it.
//!
//! The host that spawned the child writes it (at admission, after each step, at the end); the
//! kernel reads it directly (`handle.status`, `.wait()`, `agents()`), and so does anything after
//! every process has exited. A record that says `running` while its process is gone (the host
//! was killed, the machine rebooted) reads as `lost`: the process is identified by its pid and
//! its start time, so a reused pid is not mistaken for it. The host writes how a child ended
//! before the child exits wherever it knows first (its final answer arrived, the host is
//! cancelling it, its time ran out), so a live host's child reads `lost` only when it vanished
//! unexpectedly.
//!
//! Layout under a workspace's directory:
//! ```text
//! agents/<id>.json    this record
//! agents/<id>.log     the child's transcript (its model's cells and their output)
//! agents/<id>/        the child's own workspace (snapshot/, outputs/, agents/ for its children)
//! ```

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::Budget;
use crate::llm::ledger::Usage;

/// Where a child is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Running,
    Completed,
    Errored,
    Cancelled,
    /// Never written: a `running` record whose process is gone reads so.
    Lost,
}

impl Status {
    pub fn is_settled(self) -> bool {
        self != Status::Running
    }
}

/// One child, as its JSON file holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    pub task: String,
    /// The cell of the parent workspace that spawned it.
    pub parent_cell: u64,
    /// 1 for a child of the session, 2 for its child, ...
    pub depth: u32,
    #[serde(default)]
    pub model: Option<String>,
    /// Whether its workspace started from the parent's: a live copy of its kernel, or else its
    /// snapshot (`fork_fallback` says why not live).
    pub fork: bool,
    /// A fork: `live` (a copy of the parent's kernel) or `snapshot` (seeded from its snapshot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork_kind: Option<String>,
    /// Why a fork was seeded from the snapshot instead of live.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork_fallback: Option<String>,
    pub budget: Budget,
    #[serde(default)]
    pub pid: Option<u32>,
    /// The process's start time in clock ticks since boot (`/proc/<pid>/stat` field 22).
    #[serde(default)]
    pub pid_start: Option<u64>,
    /// The host that started it (`processes::own_identity`). A kernel in a PID namespace of its
    /// own cannot see the child's pid; it believes a running record of its own host, which
    /// finishes the record of every child that ends while it lives.
    #[serde(default)]
    pub host: Option<String>,
    pub status: Status,
    /// RFC 3339.
    pub started: String,
    #[serde(default)]
    pub ended: Option<String>,
    #[serde(default)]
    pub elapsed_ms: Option<u64>,
    /// Cells the child ran.
    #[serde(default)]
    pub steps: u32,
    #[serde(default)]
    pub usage: Usage,
    /// The final answer (`completed`).
    #[serde(default)]
    pub result: Option<String>,
    /// Why it did not complete (`errored`, `cancelled`).
    #[serde(default)]
    pub error: Option<String>,
    /// The last line of its transcript, for a glance at a running child.
    #[serde(default)]
    pub last_line: Option<String>,
    /// The transcript (`<id>.log`).
    pub output: PathBuf,
    /// Its workspace directory (`<id>/`).
    pub workspace: PathBuf,
}

/// The directory of a workspace's children.
pub fn agents_dir(workspace: &Path) -> PathBuf {
    workspace.join("agents")
}

/// The paths of child `id` under `agents`: record, transcript, workspace.
pub fn paths(agents: &Path, id: &str) -> (PathBuf, PathBuf, PathBuf) {
    (
        agents.join(format!("{id}.json")),
        agents.join(format!("{id}.log")),
        agents.join(id),
    )
}

impl Record {
    /// Writes the record atomically (a reader never sees half of it).
    pub fn write(&self, agents: &Path) -> anyhow::Result<()> {
        let (path, _, _) = paths(agents, &self.id);
        let json = serde_json::to_vec_pretty(self)?;
        crate::fsutil::write_atomic(&path, &json)
    }

    pub fn read(path: &Path) -> Option<Record> {
        let text = std::fs::read_to_string(path).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// The status a reader should believe: `lost` for a `running` record whose process is gone.
    pub fn effective_status(&self) -> Status {
        if self.status != Status::Running {
            return self.status;
        }
        match (self.pid, self.pid_start) {
            (Some(pid), Some(start)) if process_start(pid) == Some(start) => Status::Running,
            _ => Status::Lost,
        }
    }
}

/// The start time of process `pid` in clock ticks since boot, if it runs (a zombie has ended:
/// an orphan may stay one under an ancestor that never collects it).
pub fn process_start(pid: u32) -> Option<u64> {
    if !crate::kernel::processes::is_running(pid as i32) {
        return None;
    }
    let line = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    crate::kernel::processes::parse_stat(&line).map(|stat| stat.start.0)
}

/// The next free id under `agents`: `agent-1`, `agent-2`, ... (numbers are never reused, so a
/// restarted host does not overwrite an earlier child's record).
pub fn next_id(agents: &Path) -> String {
    let highest = std::fs::read_dir(agents)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            name.strip_suffix(".json")?
                .strip_prefix("agent-")?
                .parse::<u64>()
                .ok()
        })
        .max()
        .unwrap_or(0);
    format!("agent-{}", highest + 1)
}

/// Every record under `workspace`, at every depth, parents before their children, each with
/// its status as a reader should believe it. One directory walk; needs no live process.
pub fn walk(workspace: &Path) -> Vec<Record> {
    let mut found = Vec::new();
    walk_into(&agents_dir(workspace), &mut found);
    found
}

fn walk_into(agents: &Path, found: &mut Vec<Record>) {
    let mut records: Vec<Record> = std::fs::read_dir(agents)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .filter_map(|path| Record::read(&path))
        .collect();
    records.sort_by_key(|record| id_number(&record.id));
    for mut record in records {
        record.status = record.effective_status();
        let workspace = record.workspace.clone();
        found.push(record);
        walk_into(&agents_dir(&workspace), found);
    }
}

fn id_number(id: &str) -> u64 {
    id.strip_prefix("agent-")
        .and_then(|n| n.parse().ok())
        .unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(agents: &Path, id: &str, status: Status, pid: Option<u32>) -> Record {
        let (_, output, workspace) = paths(agents, id);
        Record {
            id: id.into(),
            name: None,
            task: "t".into(),
            parent_cell: 1,
            depth: 1,
            model: None,
            fork: false,
            fork_kind: None,
            fork_fallback: None,
            budget: super::super::DEFAULT_BUDGET,
            pid,
            pid_start: pid.and_then(process_start),
            host: None,
            status,
            started: "now".into(),
            ended: None,
            elapsed_ms: None,
            steps: 0,
            usage: Usage::default(),
            result: None,
            error: None,
            last_line: None,
            output,
            workspace,
        }
    }

    #[test]
    fn a_running_record_whose_process_is_gone_reads_lost() {
        let dir = tempfile::tempdir().unwrap();
        let agents = agents_dir(dir.path());
        std::fs::create_dir_all(&agents).unwrap();
        let alive = record(
            &agents,
            "agent-1",
            Status::Running,
            Some(std::process::id()),
        );
        assert_eq!(alive.effective_status(), Status::Running);
        let mut reused = alive.clone();
        reused.pid_start = alive.pid_start.map(|s| s + 1);
        assert_eq!(reused.effective_status(), Status::Lost, "a reused pid");
        let gone = record(&agents, "agent-2", Status::Running, None);
        assert_eq!(gone.effective_status(), Status::Lost);
        let done = record(&agents, "agent-3", Status::Completed, None);
        assert_eq!(done.effective_status(), Status::Completed);
    }

    #[test]
    fn the_tree_is_one_walk_and_ids_are_never_reused() {
        let dir = tempfile::tempdir().unwrap();
        let agents = agents_dir(dir.path());
        std::fs::create_dir_all(&agents).unwrap();
        assert_eq!(next_id(&agents), "agent-1");
        let first = record(&agents, "agent-1", Status::Completed, None);
        first.write(&agents).unwrap();
        let nested = agents_dir(&first.workspace);
        std::fs::create_dir_all(&nested).unwrap();
        let mut grandchild = record(&nested, "agent-1", Status::Running, None);
        grandchild.depth = 2;
        grandchild.write(&nested).unwrap();
        record(&agents, "agent-10", Status::Errored, None)
            .write(&agents)
            .unwrap();
        assert_eq!(next_id(&agents), "agent-11");
        let tree = walk(dir.path());
        let seen: Vec<(u32, &str, Status)> = tree
            .iter()
            .map(|r| (r.depth, r.id.as_str(), r.status))
            .collect();
        assert_eq!(
            seen,
            vec![
                (1, "agent-1", Status::Completed),
                (2, "agent-1", Status::Lost),
                (1, "agent-10", Status::Errored),
            ]
        );
    }
}
