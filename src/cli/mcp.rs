//! `pi-repl mcp`: serve the `execute` tool over MCP on stdio.

use super::{EngineOptions, Failure, SessionOptions};
use crate::engine::Engine;
use crate::env_vars;
use crate::home::Home;
use crate::mcp::{self, ImageBudget, Manual};

#[derive(Debug, clap::Args)]
pub struct McpArgs {
    #[command(flatten)]
    pub engine: EngineOptions,

    #[command(flatten)]
    pub session: SessionOptions,

    /// Longest side, in pixels, of an image shown to the model [default: 1568;
    /// env: PI_REPL_IMAGE_MAX_SIDE].
    #[arg(long, value_name = "PIXELS", value_parser = clap::value_parser!(u32).range(16..))]
    pub image_max_side: Option<u32>,

    /// Images shown to the model per call; more are saved and listed [default: 4;
    /// env: PI_REPL_IMAGE_MAX_COUNT].
    #[arg(long, value_name = "N")]
    pub image_max_count: Option<usize>,
}

pub async fn run(args: McpArgs) -> Result<u8, Failure> {
    let home = Home::from_env()?;
    let session = args.session.open(&home, &args.engine.working_dir()?)?;
    let output_dir = session.outputs_dir().to_path_buf();
    let config = args.engine.engine_config(&home, &session).await?;
    let budget = ImageBudget {
        max_side: match args.image_max_side {
            Some(side) => side,
            None => env_vars::count(env_vars::PI_REPL_IMAGE_MAX_SIDE)?
                .map(|n| n as u32)
                .unwrap_or(mcp::DEFAULT_MAX_SIDE),
        },
        max_count: match args.image_max_count {
            Some(count) => count,
            None => env_vars::count(env_vars::PI_REPL_IMAGE_MAX_COUNT)?
                .unwrap_or(mcp::DEFAULT_MAX_COUNT),
        },
    };
    let manual = Manual {
        functions: Vec::new(),
        max_output_chars: config.limits.max_chars,
    };
    let heartbeat = env_vars::duration_ms(env_vars::PI_REPL_HEARTBEAT_MS)?
        .filter(|d| !d.is_zero())
        .unwrap_or(mcp::DEFAULT_HEARTBEAT);
    let engine = Engine::start(config);
    mcp::serve_stdio(engine, manual, budget, heartbeat, Some(output_dir)).await?;
    drop(session);
    Ok(0)
}
