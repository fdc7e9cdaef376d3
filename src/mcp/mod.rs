//! `pi-repl mcp`: the `execute` tool over the Model Context Protocol (stdio).
//!
//! Owns: serving the protocol (rmcp) and the server's lifecycle: the engine (and its kernel)
//! starts with the server, so the first call finds a warm kernel; closing stdin, SIGTERM or
//! SIGINT stop the engine (flushing what it must) before exit. Logs go to stderr only: stdout
//! is the protocol.

mod frames;
mod images;
mod render;
mod server;
mod tool;

use std::path::PathBuf;

use rmcp::ServiceExt;
use tokio_util::sync::CancellationToken;

pub use images::{DEFAULT_MAX_COUNT, DEFAULT_MAX_SIDE, ImageBudget};
pub use server::{DEFAULT_HEARTBEAT, ReplServer};
pub use tool::{ListedFunction, Manual, TOOL_NAME, listed_functions};

use crate::engine::Engine;

/// Serves `engine` on stdin/stdout until the client goes away or a stop signal arrives, then
/// shuts the engine down.
pub async fn serve_stdio(
    engine: Engine,
    manual: Manual,
    budget: ImageBudget,
    heartbeat: std::time::Duration,
    output_dir: Option<PathBuf>,
) -> anyhow::Result<()> {
    let stop = CancellationToken::new();
    let signals = tokio::spawn(stop_on_signal(stop.clone()));
    let server = ReplServer::new(engine.clone(), manual, budget, heartbeat, output_dir);
    let transport = frames::guard(tokio::io::stdin(), tokio::io::stdout());
    let served = server
        .serve_with_ct((transport.reader, transport.writer), stop.clone())
        .await;
    let result = match served {
        Ok(running) => match running.waiting().await {
            Ok(reason) => {
                tracing::info!(?reason, "the MCP session ended");
                Ok(())
            }
            Err(error) => Err(anyhow::anyhow!("the MCP service failed: {error}")),
        },
        Err(error) => {
            // The client went away (or never spoke MCP) before initializing.
            tracing::info!(%error, "no MCP session was established");
            Ok(())
        }
    };
    signals.abort();
    engine.shutdown().await;
    for task in transport.tasks {
        // The writer finishes once rmcp's side of the pipe is closed; the reader may still be
        // blocked on stdin, which nobody needs any more.
        task.abort();
    }
    result
}

async fn stop_on_signal(stop: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut interrupt)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::warn!("cannot listen for SIGTERM/SIGINT; stop the server by closing stdin");
        return;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: stopping"),
        _ = interrupt.recv() => tracing::info!("SIGINT: stopping"),
    }
    stop.cancel();
}
