//! `pi-repl mcp`: the `execute` tool over the Model Context Protocol (stdio).
//!
//! Owns: serving the protocol (rmcp) and the server's lifecycle: the engine (and its kernel)
//! starts with the server, so the first call finds a warm kernel. Closing stdin stops the
//! engine gracefully (a due snapshot is flushed). SIGINT or SIGTERM stop it at once
//! (`Engine::shutdown_now`), without waiting for rmcp's own wind-down, because clients escalate
//! to SIGKILL quickly: Claude Code sends SIGINT, SIGTERM 100 ms later and SIGKILL 400 ms after
//! that, so a SIGINT leaves time for a small save ([`SIGINT_FLUSH_BUDGET`]); Codex sends
//! SIGTERM and SIGKILL 13–53 ms later, so a SIGTERM saves nothing more and only cleans up. What
//! was not saved is named by the next start. Logs go to stderr only: stdout is the protocol.

pub mod agent_frames;
mod call_order;
pub mod capabilities;
mod cell_book;
mod cell_records;
mod execute_args;
mod fit;
mod frames;
mod pending;
mod progress;
mod server;
mod tasks;
mod tool;
mod unread;

use rmcp::ServiceExt;
use tokio_util::sync::CancellationToken;

/// How long a due snapshot may still try to commit after SIGINT.
pub const SIGINT_FLUSH_BUDGET: std::time::Duration = std::time::Duration::from_millis(40);

/// How long a due snapshot may still try to commit after SIGTERM: none.
pub const SIGTERM_FLUSH_BUDGET: std::time::Duration = std::time::Duration::ZERO;

pub use cell_records::CellRecords;
pub use fit::ResultLimit;
pub use server::{DEFAULT_HEARTBEAT, ReplServer, ServerSettings};
pub use tool::{ListedFunction, Manual, TOOL_NAME, listed_functions};

use crate::engine::Engine;

/// The default wait of a call for its cell over MCP, before it answers `running`: under the
/// 60 s many MCP clients give a call.
pub const DEFAULT_WAIT: std::time::Duration = std::time::Duration::from_secs(50);

/// A duration as the model reads it: `850 ms`, `12.3 s`, `4 min 05 s`, `2 h 03 min`.
pub fn seconds_text(duration: std::time::Duration) -> String {
    let ms = duration.as_millis() as u64;
    if ms < 1_000 {
        return format!("{ms} ms");
    }
    let seconds = ms / 1_000;
    if seconds < 60 {
        let tenths = (ms % 1_000) / 100;
        return if tenths == 0 {
            format!("{seconds} s")
        } else {
            format!("{seconds}.{tenths} s")
        };
    }
    if seconds < 3_600 {
        return format!("{} min {:02} s", seconds / 60, seconds % 60);
    }
    format!("{} h {:02} min", seconds / 3_600, (seconds % 3_600) / 60)
}

/// Serves `engine` on stdin/stdout until the client goes away or a stop signal arrives, then
/// shuts the engine down.
pub async fn serve_stdio(engine: Engine, settings: ServerSettings) -> anyhow::Result<()> {
    let stop = CancellationToken::new();
    let (signalled_tx, mut signalled) = tokio::sync::watch::channel(None);
    let signals = tokio::spawn(stop_on_signal(stop.clone(), signalled_tx));
    let server = ReplServer::new(engine.clone(), settings);
    let unread: frames::Unread = Box::new(|| {
        use std::os::fd::AsFd;
        unread::unread_bytes(std::io::stdout().as_fd())
    });
    let guarded = frames::guard(tokio::io::stdin(), tokio::io::stdout(), unread);
    // rmcp gets typed messages both ways: the guard parses and writes them (once each).
    let transport = (guarded.outgoing, guarded.incoming);
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
        // A signal task that cannot listen drops its sender: then only the session ends it.
        Ok(_) = signalled.wait_for(Option::is_some) => Ok(()),
        result = session => result,
    };
    let budget = *signalled.borrow();
    match budget {
        Some(budget) => engine.shutdown_now(budget).await,
        None => engine.shutdown().await,
    }
    signals.abort();
    for task in guarded.tasks {
        // The writer finishes once rmcp's side of the pipe is closed; the reader may still be
        // blocked on stdin, which nobody needs any more.
        task.abort();
    }
    result
}

/// Waits for SIGTERM or SIGINT, then says which (as the flush budget it leaves) and stops rmcp.
async fn stop_on_signal(
    stop: CancellationToken,
    signalled: tokio::sync::watch::Sender<Option<std::time::Duration>>,
) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut interrupt)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::warn!("cannot listen for SIGTERM/SIGINT; stop the server by closing stdin");
        return;
    };
    let budget = tokio::select! {
        _ = term.recv() => {
            tracing::info!("SIGTERM: stopping");
            SIGTERM_FLUSH_BUDGET
        }
        _ = interrupt.recv() => {
            tracing::info!("SIGINT: stopping");
            SIGINT_FLUSH_BUDGET
        }
    };
    // Nobody may be listening any more (the session ended first); then nothing is waiting.
    let _ = signalled.send(Some(budget));
    stop.cancel();
}
