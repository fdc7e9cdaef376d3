//! Starting a child: admission (depth, children running at once, the parent's own budget),
//! its workspace (for a fork: the live copy of the parent's kernel handed to the child, or else
//! seeded from the parent's snapshot), its record, and its process in
//! a process group of its own (pi-repl's loop or a pi child), then a task that drives it
//! (`drive`).

use std::process::Stdio;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::record::{self, Record, Status};
use super::requests::{BudgetRequest, Refusal, SpawnRequest};
use super::supervisor::{Ending, Live, Supervisor, TaskFile, bump, now};
use super::{Budget, DEFAULT_BUDGET, pi_child};
use crate::llm::ledger::Usage;

impl Supervisor {
    /// Starts a child: `pi` is the command line of a pi child, `None` for pi-repl's own loop.
    pub(super) fn spawn(
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
        let live_fork = request
            .live
            .clone()
            .filter(|_| request.fork)
            .map(|mut live| {
                live.parent_cell = cell;
                live
            });
        if request.fork && live_fork.is_none() && self.snapshot.is_none() {
            return Err(Refusal::error(format!(
                "spawn_agent(fork=True) could not copy this workspace live ({}), and starts the \
                 child from this workspace's snapshot instead; this workspace is ephemeral \
                 (pi-repl runs without --session), so it has none: pass fork=False (the child \
                 starts empty; put what it needs in the task or a file), or run pi-repl with \
                 --session NAME",
                request
                    .fallback
                    .as_deref()
                    .unwrap_or("the kernel did not offer a live copy")
            )));
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
            && live_fork.is_none()
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
            live: live_fork.clone(),
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
            fork_kind: request.fork.then(|| {
                if live_fork.is_some() {
                    "live"
                } else {
                    "snapshot"
                }
                .to_string()
            }),
            fork_fallback: request
                .fallback
                .clone()
                .filter(|_| request.fork && live_fork.is_none()),
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
}

fn merge(request: BudgetRequest) -> Budget {
    Budget {
        seconds: request.seconds.unwrap_or(DEFAULT_BUDGET.seconds),
        tokens: request.tokens.unwrap_or(DEFAULT_BUDGET.tokens),
        steps: request.steps.unwrap_or(DEFAULT_BUDGET.steps),
    }
}
