//! `pi-repl mcp`: the `execute` tool over the Model Context Protocol (stdio).
//!
//! Owns: serving the protocol (rmcp) and the server's lifecycle: the engine (and its kernel)
//! starts with the server, so the first call finds a warm kernel. Closing stdin stops the
//! engine gracefully (a due snapshot is flushed). SIGTERM or SIGINT stop it at once
//! (`Engine::shutdown_now`): clients escalate to SIGKILL within a few hundred milliseconds
//! (Claude Code: SIGINT, SIGTERM 100 ms later, SIGKILL 400 ms after that), so the process ends
//! well inside the first 100 ms, without waiting for rmcp's own wind-down. Logs go to stderr
//! only: stdout is the protocol.

mod call_order;
mod frames;
mod images;
mod render;
mod server;
mod tool;

use std::path::PathBuf;

use rmcp::ServiceExt;
use rmcp::transport::async_rw::AsyncRwTransport;
use tokio_util::sync::CancellationToken;

use call_order::CallOrder;

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
    let signalled = CancellationToken::new();
    let signals = tokio::spawn(stop_on_signal(stop.clone(), signalled.clone()));
    let order = CallOrder::default();
    let server = ReplServer::new(
        engine.clone(),
        manual,
        budget,
        heartbeat,
        output_dir,
        order.clone(),
    );
    let guarded = frames::guard(tokio::io::stdin(), tokio::io::stdout(), order);
    // The guard enforces the one frame limit (`frames::MAX_FRAME_BYTES`); rmcp's own, smaller
    // line limit would drop accepted frames without a word.
    let transport = AsyncRwTransport::new_server(guarded.reader, guarded.writer)
        .with_max_line_length(usize::MAX);
    let session = async {
        match server.serve_with_ct(transport, stop.clone()).await {
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
        }
    };
    // rmcp winds down by waiting (up to seconds) for calls in flight; a stop signal has no time
    // for that. Killing the kernel settles those calls anyway.
    let result = tokio::select! {
        biased;
        _ = signalled.cancelled() => Ok(()),
        result = session => result,
    };
    if signalled.is_cancelled() {
        engine.shutdown_now().await;
    } else {
        engine.shutdown().await;
    }
    signals.abort();
    for task in guarded.tasks {
        // The writer finishes once rmcp's side of the pipe is closed; the reader may still be
        // blocked on stdin, which nobody needs any more.
        task.abort();
    }
    result
}

async fn stop_on_signal(stop: CancellationToken, signalled: CancellationToken) {
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
    signalled.cancel();
    stop.cancel();
}
