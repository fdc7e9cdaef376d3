//! `pi-repl mcp`: serve the `execute` tool over MCP on stdio.
//!
//! The server answers `initialize` at once, even on a machine where pi-repl's Python
//! environment does not exist yet: the environment is then built while the client waits for
//! `tools/list` (progress on stderr), rather than before the server speaks (clients with a
//! short connect timeout give up).

use std::sync::Arc;

use super::values::{self, Expected};
use super::{EngineOptions, Exit, Failure, LlmOptions, SessionOptions};
use crate::engine::{Engine, SetupFailure};
use crate::env_vars;
use crate::home::Home;
use crate::mcp::{self, Manual};
use crate::view::{self, ImageBudget};

#[derive(Debug, clap::Args)]
pub struct McpArgs {
    #[command(flatten)]
    pub engine: EngineOptions,

    #[command(flatten)]
    pub session: SessionOptions,

    /// Longest side, in pixels, of an image shown to the model.
    #[arg(long, value_name = "PIXELS", env = env_vars::PI_REPL_IMAGE_MAX_SIDE,
          value_parser = values::at_least(16), default_value_t = view::DEFAULT_MAX_SIDE.into())]
    pub image_max_side: u64,

    /// Images shown to the model per call; more are saved and listed.
    #[arg(long, value_name = "N", env = env_vars::PI_REPL_IMAGE_MAX_COUNT,
          value_parser = values::positive, default_value_t = view::DEFAULT_MAX_COUNT as u64)]
    pub image_max_count: u64,

    /// How long a call waits for its cell before answering `running` with the output so far
    /// (the cell goes on; a later call collects it): milliseconds, or `end` to always wait for
    /// the end.
    #[arg(long, value_name = "MS|end", env = env_vars::PI_REPL_WAIT_MS, value_parser = parse_wait,
          default_value_t = Wait::Millis(mcp::DEFAULT_WAIT.as_millis() as u64))]
    pub wait_ms: Wait,

    /// Characters of a result's text the model is sent: `auto` fits the client (Codex
    /// 10000, Claude Code 40000, others no limit), 0 is no limit. A longer text keeps its head
    /// and tail, and its first line names the file holding all of it.
    #[arg(long, value_name = "CHARS|auto", env = env_vars::PI_REPL_MAX_RESULT_CHARS,
          value_parser = parse_result_limit, default_value_t = mcp::ResultLimit::Auto)]
    pub max_result_chars: mcp::ResultLimit,

    /// How often a progress notification is sent during a silent cell; 0 is the default.
    #[arg(long, value_name = "MS", env = env_vars::PI_REPL_HEARTBEAT_MS, hide = true,
          value_parser = values::millis,
          default_value_t = mcp::DEFAULT_HEARTBEAT.as_millis() as u64)]
    pub heartbeat_ms: u64,

    #[command(flatten)]
    pub llm: LlmOptions,

    /// Serve a sub-agent's workspace (the directory holding its `task.json`) instead of a
    /// session: how a sub-agent that is a pi process gets its workspace (set by the pi extension
    /// from `PI_REPL_AGENT_WORKSPACE`; see docs/subagents.md).
    #[arg(long, value_name = "DIR", hide = true)]
    pub agent_workspace: Option<std::path::PathBuf>,
}

/// A call's default wait for its cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    Millis(u64),
    End,
}

impl std::fmt::Display for Wait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Wait::Millis(ms) => write!(f, "{ms}"),
            Wait::End => f.write_str("end"),
        }
    }
}

impl Wait {
    fn duration(self) -> Option<std::time::Duration> {
        match self {
            Wait::Millis(ms) => Some(std::time::Duration::from_millis(ms)),
            Wait::End => None,
        }
    }
}

fn parse_wait(value: &str) -> Result<Wait, Expected> {
    if value.trim().eq_ignore_ascii_case("end") {
        return Ok(Wait::End);
    }
    values::millis(value)
        .map(Wait::Millis)
        .map_err(|_| Expected {
            what: "a whole number of milliseconds, or `end`".into(),
            example: "50000".into(),
        })
}

fn parse_result_limit(value: &str) -> Result<mcp::ResultLimit, Expected> {
    let value = value.trim();
    if value.eq_ignore_ascii_case("auto") {
        return Ok(mcp::ResultLimit::Auto);
    }
    value
        .parse::<usize>()
        .map(mcp::ResultLimit::Chars)
        .map_err(|_| Expected {
            what: "a whole number of characters (0: no limit), or `auto`".into(),
            example: "10000".into(),
        })
}

pub async fn run(args: McpArgs) -> Result<Exit, Failure> {
    let home = Home::from_env()?;
    // A sub-agent run by pi serves the workspace its parent prepared, at the depth it is.
    let task = match &args.agent_workspace {
        Some(dir) => Some(super::agent::read_task(dir)?),
        None => None,
    };
    let session = match (&args.agent_workspace, &task) {
        (Some(dir), Some(task)) => {
            crate::session::child::open(dir, &task.id, &args.engine.working_dir()?, task.fork)?
        }
        _ => args.session.open(&home, &args.engine.working_dir()?)?,
    };
    let output_dir = session.outputs_dir().to_path_buf();
    // Everything but the interpreter is checked now, so a wrong flag fails before serving.
    let placeholder = super::engine_options::placeholder_interpreter(&home);
    let ready = if args.engine.runs_without_python(&home)? {
        // A kernelspec of another language: nothing to set up.
        Some(placeholder.clone())
    } else {
        args.engine.ready_interpreter(&home)?
    };
    let mut config =
        args.engine
            .engine_config_with(&home, &session, ready.clone().unwrap_or(placeholder))?;
    args.llm.apply(&mut config, session.dir.as_deref())?;
    // A client that declares `sampling` answers the cells' `llm_query` first.
    let sampling = crate::llm::sampling::SamplingBroker::new();
    if let Some(llm) = &mut config.llm {
        llm.brokers = llm.brokers.with_first(sampling.clone());
    }
    // A client that declares host tools (the pi extension) runs a cell's `tools.<name>(...)`.
    let host_tools = crate::host_tools::HostTools::new();
    config.host_tools = Some(super::stdin_services::host_tools(Arc::clone(&host_tools)));
    config.live_fork = task.as_ref().and_then(|task| task.live.clone());
    let depth = task.as_ref().map_or(0, |task| task.depth);
    let agents = super::agent::supervisor(
        &config,
        &home,
        &session,
        depth,
        args.engine.agent_limits(),
        task.is_some(),
    )?;
    // A client that declares pi children (the pi extension) gets them as `pi` processes.
    let pi_children = crate::agents::pi_child::PiChildren::new();
    agents.start_children_with(Arc::clone(&pi_children));
    config.agents = Some(super::stdin_services::sub_agents(Arc::clone(&agents)));
    let budget = ImageBudget {
        max_side: u32::try_from(args.image_max_side).unwrap_or(u32::MAX),
        max_count: usize::try_from(args.image_max_count).unwrap_or(usize::MAX),
    };
    let manual = Manual {
        functions: Vec::new(),
        max_output_chars: config.limits.max_chars,
        wait: None,
        other_kernel: match (&config.kernel.remote, &config.kernel.kernelspec) {
            (Some(server), _) => Some(server.kernel_name.clone()),
            (None, Some(kernelspec)) if !kernelspec.is_python() => Some(kernelspec.name.clone()),
            (None, _) => None,
        }
        .filter(|name| !name.starts_with("python")),
        result_limit: args.max_result_chars,
    };
    let records = session.dir.as_deref().map(mcp::CellRecords::beside);
    let heartbeat = Some(std::time::Duration::from_millis(args.heartbeat_ms))
        .filter(|d| !d.is_zero())
        .unwrap_or(mcp::DEFAULT_HEARTBEAT);
    let journal_floor = config
        .snapshot
        .as_ref()
        .map_or(0, |settings| crate::engine::journal_floor(&settings.dir));
    let engine = match ready {
        Some(_) => Engine::start(config),
        None => {
            let python = args.engine.python.clone();
            let auto_setup = args.engine.auto_setup;
            let home = home.clone();
            Engine::start_after(async move {
                let python = super::engine_options::acquire_interpreter(&python, auto_setup, &home)
                    .await
                    .map_err(|failure| SetupFailure {
                        message: format!("{:#}", failure.error),
                        hint: failure.hint,
                    })?;
                let mut config = config;
                config.kernel.python = python;
                Ok(config)
            })
        }
    };
    // A durable session numbers on past every cell its journal knows (the numbering file is
    // written without fsync; the journal is synced).
    engine.continue_numbering_after(journal_floor);
    let settings = mcp::ServerSettings {
        manual,
        budget,
        heartbeat,
        output_dir: Some(output_dir),
        wait: args.wait_ms.duration(),
        records,
        capabilities: vec![
            sampling,
            host_tools,
            pi_children,
            Arc::new(mcp::capabilities::AgentFrames(Arc::clone(&agents))),
        ],
        result_limit: args.max_result_chars,
    };
    let served = mcp::serve_stdio(engine, settings).await;
    // The session ends: so do its sub-agents, and their records say so.
    agents
        .end_all("the parent session ended", super::agent::END_GRACE)
        .await;
    served?;
    drop(session);
    Ok(Exit::Success)
}
