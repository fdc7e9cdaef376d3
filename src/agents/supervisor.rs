//! The host's side of a workspace's children: admission (limits), starting each child process,
//! serving it, ending it, and writing its record.
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
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use super::link::{self, Heard};
use super::orphans::Offspring;
use super::pi_child::{self, PiChildren};
use super::record::{self, Record, Status};
use super::requests::{AgentRequest, BudgetRequest, Refusal, SpawnRequest};
use super::{Budget, DEFAULT_BUDGET, Limits};
use crate::llm::kernel_requests::Answerer;
use crate::llm::ledger::Usage;

/// How long a child gets between SIGTERM and SIGKILL.
pub const TERM_GRACE: Duration = Duration::from_secs(5);

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
type Changes = Arc<watch::Sender<u64>>;

fn bump(changes: &Changes) {
    changes.send_modify(|count| *count = count.wrapping_add(1));
}

/// Why a running child is being stopped.
type Ending = Arc<Mutex<Option<(Status, String)>>>;

struct Live {
    stop: CancellationToken,
    ending: Ending,
}

/// One workspace's children.
pub struct Supervisor {
    /// The directory whose `agents/` holds the children (a session's, or a sub-agent's own).
    workspace: PathBuf,
    /// This workspace's depth (the session is 0).
    depth: u32,
    limits: Limits,
    /// Who answers the children's model requests (this host's brokers and budgets).
    answerer: Option<Answerer>,
    command: ChildCommand,
    /// The snapshot a fork copies; `None` for an ephemeral workspace.
    snapshot: Option<PathBuf>,
    /// Whether this workspace is itself a sub-agent's (then `final_answer` ends its task).
    is_agent: bool,
    live: Mutex<HashMap<String, Live>>,
    settled: Notify,
    final_answer: Mutex<Option<String>>,
    changes: Changes,
    /// Under pi: the client that gives a `pi` command line for each child (`pi_child`).
    pi: std::sync::OnceLock<Arc<PiChildren>>,
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
                let record = self.spawn(spawn, cell, pi)?;
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

    /// Starts a child: `pi` is the command line of a pi child, `None` for pi-repl's own loop.
    fn spawn(
        self: &Arc<Self>,
        request: SpawnRequest,
        cell: u64,
        pi: Option<Vec<String>>,
    ) -> Result<Record, Refusal> {
        let depth = self.depth + 1;
        if depth > self.limits.max_depth {
            return Err(Refusal::limit(format!(
                "spawn_agent refused: the child would be at depth {depth}, and sub-agents may \
                 nest {} deep (PI_REPL_AGENT_MAX_DEPTH); do this part in this workspace instead",
                self.limits.max_depth
            )));
        }
        if request.task.trim().is_empty() {
            return Err(Refusal::error(
                "spawn_agent needs a task: say what the child should do",
            ));
        }
        if request.fork && self.snapshot.is_none() {
            return Err(Refusal::error(
                "spawn_agent(fork=True) starts the child from this workspace's snapshot, and this \
                 workspace is ephemeral (pi-repl runs without --session), so it has none: pass \
                 fork=False (the child starts empty; put what it needs in the task or a file), \
                 or run pi-repl with --session NAME",
            ));
        }
        let budget = merge(request.budget.clone().unwrap_or_default());
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        if live.len() >= self.limits.max_running {
            return Err(Refusal::limit(format!(
                "spawn_agent refused: {} sub-agents are running here, the most at once \
                 (PI_REPL_AGENT_MAX_RUNNING); wait for one (handle.wait(), wait_all) or cancel one",
                live.len()
            )));
        }
        let agents = record::agents_dir(&self.workspace);
        let failed = |what: &str, error: &dyn std::fmt::Display| {
            Refusal::error(format!("spawn_agent failed: {what}: {error}"))
        };
        crate::fsutil::create_private_dir(&agents)
            .map_err(|e| failed("cannot create the agents directory", &e))?;
        let id = record::next_id(&agents);
        let (_, output, workspace) = record::paths(&agents, &id);
        crate::fsutil::create_private_dir(&workspace)
            .map_err(|e| failed("cannot create the child's workspace", &e))?;
        if request.fork
            && let Some(snapshot) = &self.snapshot
        {
            crate::session::child::seed(snapshot, &workspace)
                .map_err(|e| failed("cannot copy this workspace's snapshot", &e))?;
        }
        let task = TaskFile {
            id: id.clone(),
            task: request.task.clone(),
            model: request.model.clone(),
            budget,
            depth,
            fork: request.fork,
        };
        let task_path = workspace.join("task.json");
        let json = serde_json::to_vec_pretty(&task).map_err(|e| failed("task", &e))?;
        crate::fsutil::write_atomic(&task_path, &json)
            .map_err(|e| failed("cannot write the task", &e))?;
        let log = crate::fsutil::open_private(&output, crate::fsutil::Open::Append)
            .map_err(|e| failed("cannot open the transcript", &e))?;
        let is_pi = pi.is_some();
        let mut command = match &pi {
            // pi's own loop, with this host's environment (pi's: the provider's credentials)
            // and the workspace its pi-repl opens.
            Some(argv) => {
                let mut command = tokio::process::Command::new(&argv[0]);
                command
                    .args(&argv[1..])
                    .env(pi_child::WORKSPACE_VAR, &workspace)
                    .env(pi_child::PARENT_VAR, std::process::id().to_string())
                    .stdin(Stdio::null());
                command
            }
            None => {
                let mut command = tokio::process::Command::new(&self.command.exe);
                command
                    .arg("agent")
                    .arg("--workspace")
                    .arg(&workspace)
                    .arg("--python")
                    .arg(&self.command.python)
                    .arg("--cwd")
                    .arg(&self.command.cwd)
                    .env_clear()
                    .envs(self.command.env.iter().map(|(k, v)| (k, v)))
                    .stdin(Stdio::piped());
                command
            }
        };
        command
            .current_dir(&self.command.cwd)
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .process_group(0);
        let mut child = command
            .spawn()
            .map_err(|e| failed("cannot start the child process", &e))?;
        let pid = child.id();
        let record = Record {
            id: id.clone(),
            name: request.name.clone(),
            task: request.task,
            parent_cell: cell,
            depth,
            model: request.model,
            fork: request.fork,
            budget,
            pid,
            pid_start: pid.and_then(record::process_start),
            host: Some(crate::kernel::processes::own_identity()),
            status: Status::Running,
            started: now(),
            ended: None,
            elapsed_ms: None,
            steps: 0,
            usage: Usage::default(),
            result: None,
            error: None,
            last_line: None,
            output,
            workspace,
        };
        if let Err(error) = record.write(&agents) {
            let _ = child.start_kill();
            return Err(failed("cannot write the child's record", &error));
        }
        bump(&self.changes);
        let stop = CancellationToken::new();
        let ending: Ending = Arc::default();
        live.insert(
            id,
            Live {
                stop: stop.clone(),
                ending: Arc::clone(&ending),
            },
        );
        drop(live);
        let supervisor = Arc::clone(self);
        let admitted = record.clone();
        tokio::spawn(async move {
            supervisor.drive(child, admitted, stop, ending, is_pi).await;
        });
        Ok(record)
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

    /// Serves one child until it ends, then writes its record and collects the process.
    async fn drive(
        self: Arc<Self>,
        mut child: tokio::process::Child,
        mut record: Record,
        stop: CancellationToken,
        ending: Ending,
        is_pi: bool,
    ) {
        let began = Instant::now();
        let agents = record::agents_dir(&self.workspace);
        let offspring = child.id().map(|pid| Arc::new(Offspring::new(pid)));
        let usage: Arc<Mutex<Usage>> = Arc::default();
        let heard: Arc<Mutex<Heard>> = Arc::default();
        let requests = CancellationToken::new();
        let shared = Arc::new(Mutex::new(record.clone()));
        let stdout = child.stdout.take();
        let link = match (stdout, child.stdin.take()) {
            (Some(from_child), None) if is_pi => {
                let (usage, heard, shared) =
                    (Arc::clone(&usage), Arc::clone(&heard), Arc::clone(&shared));
                let agents = agents.clone();
                let changes = Arc::clone(&self.changes);
                let ending = Arc::clone(&ending);
                let stop = stop.clone();
                let offspring = offspring.clone();
                let tokens = record.budget.tokens;
                let on_news = {
                    let (usage, heard) = (Arc::clone(&usage), Arc::clone(&heard));
                    move || {
                        if let Some(offspring) = &offspring {
                            offspring.look();
                        }
                        update_record(&shared, &heard, &usage, &agents, &changes);
                    }
                };
                let over_budget = move || {
                    *ending.lock().unwrap_or_else(|e| e.into_inner()) = Some((
                        Status::Errored,
                        format!(
                            "its token budget of {tokens} ran out (spawn_agent(budget={{'tokens': N}}) sets it)"
                        ),
                    ));
                    stop.cancel();
                };
                let read = pi_child::read_events(
                    from_child,
                    pi_child::Reading {
                        heard,
                        usage,
                        max_tokens: tokens,
                        final_file: record.workspace.join(pi_child::FINAL_ANSWER_FILE),
                    },
                    on_news,
                    over_budget,
                );
                Some(tokio::spawn(read))
            }
            (Some(from_child), Some(to_child)) => {
                let (usage, heard, shared) =
                    (Arc::clone(&usage), Arc::clone(&heard), Arc::clone(&shared));
                let agents = agents.clone();
                // After each step, and at the final answer (written before the child exits).
                let on_news = {
                    let (usage, heard) = (Arc::clone(&usage), Arc::clone(&heard));
                    let changes = Arc::clone(&self.changes);
                    move || update_record(&shared, &heard, &usage, &agents, &changes)
                };
                let served = link::Served {
                    offspring: offspring.clone(),
                    answerer: self.answerer.clone(),
                    budget: record.budget,
                    usage,
                    heard,
                    cancel: requests.clone(),
                };
                let serve = link::serve_child(from_child, to_child, served, on_news);
                Some(tokio::spawn(serve))
            }
            _ => None,
        };
        let pid = child.id();
        let mut exited = Box::pin(exited(pid));
        let time_up = tokio::time::sleep(record.budget.time());
        let mut exit = Exit::Unknown;
        tokio::select! {
            ended = &mut exited => exit = ended,
            _ = stop.cancelled() => {
                let why = ending.lock().unwrap_or_else(|e| e.into_inner()).take();
                let why = why.unwrap_or((Status::Cancelled, "cancelled".into()));
                settle_first(&shared, &why, &agents, &self.changes);
                terminate(pid, &mut exited).await;
            }
            _ = time_up => {
                let why = (Status::Errored, format!(
                    "its time budget of {} s ran out (spawn_agent(budget={{'seconds': N}}) sets it)",
                    record.budget.seconds
                ));
                settle_first(&shared, &why, &agents, &self.changes);
                terminate(pid, &mut exited).await;
            }
        }
        // Its kernel, if it outlived it, is this host's now (it was killed from outside).
        if let Some(offspring) = &offspring {
            offspring.look_adopted();
        }
        // The child has exited (not yet collected): its last lines are read before the record
        // says how it ended.
        if let Some(link) = link {
            let _ = tokio::time::timeout(Duration::from_secs(2), link).await;
        }
        requests.cancel();
        let heard = std::mem::take(&mut *heard.lock().unwrap_or_else(|e| e.into_inner()));
        record = shared.lock().unwrap_or_else(|e| e.into_inner()).clone();
        record.steps = heard.steps;
        record.last_line = heard.last_line;
        record.usage = *usage.lock().unwrap_or_else(|e| e.into_inner());
        record.ended = Some(now());
        record.elapsed_ms = Some(began.elapsed().as_millis() as u64);
        // Settled already when its final answer came or the host ended it (`settle_first`);
        // otherwise it ended by itself without a word.
        if record.status == Status::Running {
            match heard.last {
                Some(last) => {
                    record.status = last.status;
                    record.result = last.result;
                    record.error = last.error;
                }
                None => {
                    // Killed by someone else (the OOM killer, a `kill -9`): gone without an
                    // end, which is what `lost` says.
                    let (status, how) = match exit {
                        Exit::Signal(signal) => (
                            Status::Lost,
                            format!("its process was killed by signal {signal} (not by pi-repl)"),
                        ),
                        Exit::Code(code) => (
                            Status::Errored,
                            format!("its process exited with code {code}"),
                        ),
                        Exit::Unknown => (Status::Errored, "its process ended".to_string()),
                    };
                    record.status = status;
                    record.error = Some(format!(
                        "{how} without a final answer; its transcript is {}",
                        record.output.display()
                    ));
                }
            }
        }
        if let Err(error) = record.write(&agents) {
            tracing::warn!(%error, id = %record.id, "cannot write a sub-agent's final record");
        }
        bump(&self.changes);
        // Collected only now that its record says how it ended.
        let _ = child.wait().await;
        if let Some(offspring) = offspring {
            // A killed child's kernel ends by its lifeline; collected here, not left a zombie.
            let reaped = tokio::task::spawn_blocking(move || offspring.reap_adopted()).await;
            if let Ok(count @ 1..) = reaped {
                tracing::debug!(id = %record.id, count, "collected what a killed sub-agent left");
            }
        }
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&record.id);
        self.settled.notify_waiters();
    }
}

/// Rewrites a running child's record after a step or at its final answer (unless the host
/// settled it already: cancelled, out of time).
fn update_record(
    shared: &Mutex<Record>,
    heard: &Mutex<Heard>,
    usage: &Mutex<Usage>,
    agents: &std::path::Path,
    changes: &Changes,
) {
    let mut record = shared.lock().unwrap_or_else(|e| e.into_inner());
    if record.status != Status::Running {
        return;
    }
    let heard = heard.lock().unwrap_or_else(|e| e.into_inner());
    record.steps = heard.steps;
    record.last_line = heard.last_line.clone();
    record.usage = *usage.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(last) = &heard.last {
        record.status = last.status;
        record.result = last.result.clone();
        record.error = last.error.clone();
        record.ended = Some(now());
    }
    if let Err(error) = record.write(agents) {
        tracing::warn!(%error, "cannot update a sub-agent's record");
    }
    bump(changes);
}

/// Writes how a child ends before it is ended, unless its final answer came first.
fn settle_first(
    shared: &Mutex<Record>,
    why: &(Status, String),
    agents: &std::path::Path,
    changes: &Changes,
) {
    let mut record = shared.lock().unwrap_or_else(|e| e.into_inner());
    if record.status != Status::Running {
        return;
    }
    record.status = why.0;
    record.error = Some(why.1.clone());
    record.ended = Some(now());
    if let Err(error) = record.write(agents) {
        tracing::warn!(%error, "cannot update a sub-agent's record");
    }
    bump(changes);
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
}

fn merge(request: BudgetRequest) -> Budget {
    Budget {
        seconds: request.seconds.unwrap_or(DEFAULT_BUDGET.seconds),
        tokens: request.tokens.unwrap_or(DEFAULT_BUDGET.tokens),
        steps: request.steps.unwrap_or(DEFAULT_BUDGET.steps),
    }
}

fn now() -> String {
    chrono::Local::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// How a child process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exit {
    Code(i32),
    Signal(i32),
    Unknown,
}

/// Resolves when process `pid` has exited, without collecting it (`WNOWAIT`).
async fn exited(pid: Option<u32>) -> Exit {
    let Some(pid) = pid else { return Exit::Unknown };
    let waited = tokio::task::spawn_blocking(move || {
        use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
        loop {
            match waitid(
                Id::Pid(nix::unistd::Pid::from_raw(pid as i32)),
                WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT,
            ) {
                Err(nix::errno::Errno::EINTR) => continue,
                Ok(WaitStatus::Exited(_, code)) => return Exit::Code(code),
                Ok(WaitStatus::Signaled(_, signal, _)) => return Exit::Signal(signal as i32),
                _ => return Exit::Unknown,
            }
        }
    });
    waited.await.unwrap_or(Exit::Unknown)
}

/// SIGTERM, then SIGKILL after [`TERM_GRACE`]; returns once the process has exited.
async fn terminate(
    pid: Option<u32>,
    exited: &mut std::pin::Pin<Box<impl std::future::Future<Output = Exit>>>,
) {
    let Some(pid) = pid else { return };
    kill(pid, nix::sys::signal::Signal::SIGTERM);
    if tokio::time::timeout(TERM_GRACE, exited.as_mut())
        .await
        .is_err()
    {
        kill(pid, nix::sys::signal::Signal::SIGKILL);
        exited.as_mut().await;
    }
}

fn kill(pid: u32, signal: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal);
}
