//! `pi-repl agent` (hidden): a sub-agent process, started by a parent pi-repl for a cell's
//! `spawn_agent(...)`; and how every command sets up the sub-agents of its own workspace.
//!
//! The child opens its workspace (`<parent>/agents/<id>/`), takes as its kernel the live copy
//! of its parent's that the parent's kernel forked (`kernel::live_fork`), or else starts one
//! like `exec` does (reviving the parent's snapshot it was seeded with, for a fork that could
//! not be live), and runs its loop (`agent_loop`).
//! Its stdin and stdout are the line to the parent (`agents::link`): every model answer comes
//! from there, and the final answer goes there. It ends when its task ends, on SIGTERM (the
//! parent cancels it or ends), or when its stdin closes (the parent is gone); its own children
//! are ended first and their records say so.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use super::agent_loop;
use super::{EngineOptions, Exit, Failure};
use crate::agents::link::Parent;
use crate::agents::supervisor::{SupervisorConfig, TaskFile};
use crate::agents::{ChildCommand, Limits, Status, Supervisor};
use crate::engine::{Engine, EngineConfig};
use crate::home::Home;
use crate::session::Session;

#[derive(Debug, clap::Args)]
pub struct AgentArgs {
    /// The sub-agent's workspace directory, holding its `task.json`.
    #[arg(long, value_name = "DIR")]
    pub workspace: PathBuf,

    #[command(flatten)]
    pub engine: EngineOptions,
}

/// The sub-agents of a workspace run by `config`: `workspace` holds their `agents/` (an
/// ephemeral workspace gets a directory of its own under the outputs), `depth` is this
/// workspace's. Model requests of the children are answered like the cells' own.
pub fn supervisor(
    config: &EngineConfig,
    home: &Home,
    session: &Session,
    depth: u32,
    limits: Limits,
    is_agent: bool,
) -> Result<Arc<Supervisor>, Failure> {
    let workspace = match &session.dir {
        Some(dir) => dir.clone(),
        None => home
            .outputs()
            .join("ephemeral")
            .join(format!("host-{}", std::process::id())),
    };
    let (env, _) = crate::kernel::kernel_environment(
        std::env::vars_os(),
        config.kernel.pass_credentials,
        &config.kernel.pass_env,
        &config.kernel.withhold,
    );
    let command = ChildCommand {
        exe: std::env::current_exe().context("cannot find pi-repl's own executable")?,
        python: config.kernel.python.path.clone(),
        cwd: config.kernel.cwd.clone(),
        env,
    };
    Ok(Supervisor::new(SupervisorConfig {
        workspace,
        depth,
        limits,
        answerer: config.llm.clone(),
        command,
        snapshot: session.snapshot_dir(),
        is_agent,
    }))
}

/// How long a session's children get to end when the session ends, before they are killed.
pub const END_GRACE: Duration = Duration::from_secs(8);

pub async fn run(args: AgentArgs) -> Result<Exit, Failure> {
    let home = Home::from_env()?;
    let task = read_task(&args.workspace)?;
    let project_dir = args.engine.working_dir()?;
    let session = crate::session::child::open(&args.workspace, &task.id, &project_dir, task.fork)?;
    let mut config = args.engine.engine_config(&home, &session).await?;
    config.live_fork = task.live.clone();
    let parent = Parent::over_stdio();
    if let Some(llm) = &mut config.llm {
        llm.brokers = crate::llm::Brokers::new(vec![Arc::new(parent.clone())]);
    }
    let supervisor = supervisor(
        &config,
        &home,
        &session,
        task.depth,
        args.engine.agent_limits(),
        true,
    )?;
    config.agents = Some(super::stdin_services::sub_agents(Arc::clone(&supervisor)));
    let engine = Engine::start(config);
    let mut terminated = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot listen for SIGTERM")?;
    let finished = tokio::select! {
        last = agent_loop::run(&task, &engine, &parent, &supervisor) => Some(last),
        _ = parent.gone.cancelled() => None,
        _ = terminated.recv() => None,
    };
    match finished {
        Some(last) => {
            agent_loop::say(&match &last.status {
                Status::Completed => format!(
                    "final answer: {}",
                    last.result.as_deref().unwrap_or_default()
                ),
                _ => format!("ended: {}", last.error.as_deref().unwrap_or_default()),
            });
            parent.finish(last).await;
            supervisor
                .end_all("its parent sub-agent finished its task", END_GRACE)
                .await;
            engine.shutdown().await;
        }
        None => {
            agent_loop::say("stopped by its parent");
            supervisor
                .end_all("its parent sub-agent was stopped", Duration::from_secs(2))
                .await;
            engine.shutdown_now(Duration::from_millis(200)).await;
        }
    }
    drop(session);
    Ok(Exit::Success)
}

/// The task the parent wrote.
pub(super) fn read_task(workspace: &Path) -> Result<TaskFile, Failure> {
    let path = workspace.join("task.json");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let task: TaskFile = serde_json::from_str(&text)
        .with_context(|| format!("cannot read the task in {}", path.display()))?;
    Ok(task)
}
