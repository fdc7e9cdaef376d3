//! The host's side of a workspace's children: the requests a cell makes about them (spawn,
//! cancel, list), ending them all with the session, and the state they share. Starting one is
//! `spawn`'s (admission, workspace, process); serving it until it ends is `drive`'s.
//!
//! The in-memory map holds only what a live child needs (a stop token and why it is being
//! stopped); everything else is in the record on disk (`record`), written here at admission,
//! after each step and at the end. The end is written before the process is collected (it is
//! waited for with `WNOWAIT`), so a reader never sees a `running` record of a collected child
//! and mistakes it for `lost`.
//!
//! A child is a process of this same binary (`pi-repl agent`, see `cli::agent`) in its own
//! process group, with the kernel's environment (credentials removed): aborting the cell that
//! spawned it does not touch it; `cancel` and the end of this host's session do (SIGTERM, and
//! SIGKILL after [`TERM_GRACE`]).
//!
//! Every write of a child's record by this supervisor bumps a change counter ([`Supervisor::watch`]),
//! so a front end can show the children as they go (the MCP server's agent frames, `mcp::agent_frames`)
//! without polling the directory.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use super::child_process::kill;
use super::pi_child::{self, PiChildren};
use super::record::{self, Record, Status};
use super::requests::{AgentRequest, Refusal};
use super::{Budget, Limits};
use crate::llm::kernel_requests::Answerer;

/// How to start a child process.
#[derive(Debug, Clone)]
pub struct ChildCommand {
    /// This binary.
    pub exe: PathBuf,
    /// The interpreter that runs the child's kernel (the parent's).
    pub python: PathBuf,
    /// The child's kernel's working directory (the parent's).
    pub cwd: PathBuf,
    /// The child's whole environment: the parent kernel's (credentials removed).
    pub env: Vec<(OsString, OsString)>,
}

/// Bumped after every record this supervisor writes.
pub(super) type Changes = Arc<watch::Sender<u64>>;

pub(super) fn bump(changes: &Changes) {
    changes.send_modify(|count| *count = count.wrapping_add(1));
}

/// Why a running child is being stopped.
pub(super) type Ending = Arc<Mutex<Option<(Status, String)>>>;

pub(super) struct Live {
    pub(super) stop: CancellationToken,
    pub(super) ending: Ending,
}

pub use super::child_process::TERM_GRACE;

/// One workspace's children.
pub struct Supervisor {
    /// The directory whose `agents/` holds the children (a session's, or a sub-agent's own).
    pub(super) workspace: PathBuf,
    /// This workspace's depth (the session is 0).
    pub(super) depth: u32,
    pub(super) limits: Limits,
    /// Who answers the children's model requests (this host's brokers and budgets).
    pub(super) answerer: Option<Answerer>,
    pub(super) command: ChildCommand,
    /// The snapshot a fork copies; `None` for an ephemeral workspace.
    pub(super) snapshot: Option<PathBuf>,
    /// Whether this workspace is itself a sub-agent's (then `final_answer` ends its task).
    pub(super) is_agent: bool,
    pub(super) live: Mutex<HashMap<String, Live>>,
    pub(super) settled: Notify,
    pub(super) final_answer: Mutex<Option<String>>,
    pub(super) changes: Changes,
    /// Under pi: the client that gives a `pi` command line for each child (`pi_child`).
    pub(super) pi: std::sync::OnceLock<Arc<PiChildren>>,
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor")
            .field("workspace", &self.workspace)
            .field("depth", &self.depth)
            .field("limits", &self.limits)
            .finish()
    }
}

/// What a supervisor needs.
pub struct SupervisorConfig {
    pub workspace: PathBuf,
    pub depth: u32,
    pub limits: Limits,
    pub answerer: Option<Answerer>,
    pub command: ChildCommand,
    pub snapshot: Option<PathBuf>,
    pub is_agent: bool,
}

impl Supervisor {
    pub fn new(config: SupervisorConfig) -> Arc<Supervisor> {
        Arc::new(Supervisor {
            workspace: config.workspace,
            depth: config.depth,
            limits: config.limits,
            answerer: config.answerer,
            command: config.command,
            snapshot: config.snapshot,
            is_agent: config.is_agent,
            live: Mutex::new(HashMap::new()),
            settled: Notify::new(),
            final_answer: Mutex::new(None),
            changes: Arc::new(watch::channel(0).0),
            pi: std::sync::OnceLock::new(),
        })
    }

    /// Children are started as pi processes when this client offers them (`pi_child`).
    pub fn start_children_with(&self, pi: Arc<PiChildren>) {
        // Set once, by the command that serves this workspace; a second call changes nothing.
        let _ = self.pi.set(pi);
    }

    /// Changes whenever a child's record was written (admitted, a step, its end).
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// The directory of this workspace's children's records.
    pub fn agents_dir(&self) -> PathBuf {
        record::agents_dir(&self.workspace)
    }

    /// Answers one request of cell `cell`.
    pub async fn handle(
        self: &Arc<Self>,
        request: AgentRequest,
        cell: u64,
    ) -> Result<serde_json::Value, Refusal> {
        match request {
            AgentRequest::Spawn(spawn) => {
                let pi = match self.pi.get() {
                    Some(pi) => pi.command(&spawn.task, spawn.model.as_deref()).await,
                    None => None,
                };
                let record = self.spawn(*spawn, cell, pi)?;
                Ok(serde_json::json!({ "agent": record }))
            }
            AgentRequest::Cancel { id } => self.cancel(&id, cell),
            AgentRequest::Root => Ok(serde_json::json!({
                "workspace": self.workspace,
                "agents": record::agents_dir(&self.workspace),
                "depth": self.depth,
                "max_depth": self.limits.max_depth,
                "max_running": self.limits.max_running,
            })),
            AgentRequest::Final { text } => {
                if !self.is_agent {
                    return Err(Refusal::error(
                        "final_answer(text) is how a sub-agent ends its task; this workspace \
                         is not a sub-agent's (print the answer instead)",
                    ));
                }
                // Also on disk: a pi child's parent reads it from there (`pi_child`).
                let file = self.workspace.join(pi_child::FINAL_ANSWER_FILE);
                if let Err(error) = crate::fsutil::write_atomic(&file, text.as_bytes()) {
                    tracing::warn!(%error, "cannot write the final answer beside the workspace");
                }
                *self.final_answer.lock().unwrap_or_else(|e| e.into_inner()) = Some(text);
                Ok(serde_json::json!({}))
            }
        }
    }

    /// The final answer a cell of this (sub-agent's) workspace gave, taken.
    pub fn take_final_answer(&self) -> Option<String> {
        self.final_answer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// Children running now.
    pub fn running(&self) -> usize {
        self.live.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    fn cancel(&self, id: &str, cell: u64) -> Result<serde_json::Value, Refusal> {
        let live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        match live.get(id) {
            Some(child) => {
                *child.ending.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some((Status::Cancelled, format!("cancelled by cell {cell}")));
                child.stop.cancel();
                Ok(serde_json::json!({ "cancelling": true }))
            }
            None => {
                let (path, _, _) = record::paths(&record::agents_dir(&self.workspace), id);
                match Record::read(&path) {
                    Some(record) => Ok(serde_json::json!({
                        "cancelling": false,
                        "status": record.effective_status(),
                    })),
                    None => Err(Refusal::error(format!(
                        "no sub-agent {id:?} among this workspace's children (a grandchild is \
                         cancelled by its own parent)"
                    ))),
                }
            }
        }
    }

    /// Ends every running child, saying `why` in their records; waits up to `within` for them
    /// to end, then kills the rest and writes their records itself.
    pub async fn end_all(&self, why: &str, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        let ids: Vec<String> = {
            let live = self.live.lock().unwrap_or_else(|e| e.into_inner());
            for child in live.values() {
                *child.ending.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some((Status::Cancelled, why.to_string()));
                child.stop.cancel();
            }
            live.keys().cloned().collect()
        };
        if ids.is_empty() {
            return;
        }
        loop {
            let settled = self.settled.notified();
            if self.running() == 0 {
                return;
            }
            tokio::select! {
                _ = settled => {}
                _ = tokio::time::sleep_until(deadline) => break,
            }
        }
        // Out of time: whatever is still running is killed, and its record says why.
        let agents = record::agents_dir(&self.workspace);
        let left: Vec<String> = self
            .live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        for id in left {
            let (path, _, _) = record::paths(&agents, &id);
            if let Some(mut record) = Record::read(&path) {
                if let Some(pid) = record.pid {
                    kill(pid, nix::sys::signal::Signal::SIGKILL);
                }
                record.status = Status::Cancelled;
                record.error = Some(why.to_string());
                record.ended = Some(now());
                let _ = record.write(&agents);
                bump(&self.changes);
            }
        }
    }
}

/// What a child reads at start (`<workspace>/task.json`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct TaskFile {
    pub id: String,
    pub task: String,
    #[serde(default)]
    pub model: Option<String>,
    pub budget: Budget,
    pub depth: u32,
    pub fork: bool,
    /// The live copy of the parent's kernel to adopt as the first kernel (a live fork).
    #[serde(default)]
    pub live: Option<crate::kernel::live_fork::LiveFork>,
}

pub(super) fn now() -> String {
    chrono::Local::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
