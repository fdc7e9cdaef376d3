//! The MCP server: one tool, `execute`, run through the engine.
//!
//! Owns: `tools/list`, `tools/call` (argument checks, wire order, streaming progress,
//! cancellation, rendering) and the server's identity. All cell behaviour (queue, caps,
//! aborts, revive, reset notices) is the engine's; none is re-implemented here.
//!
//! Progress never races its result (Claude Code's SDK handles a response synchronously and a
//! progress notification a tick later, so a progress read together with its response hits an
//! "unknown token" and can drop the connection): a call sends no progress during its first
//! [`FIRST_PROGRESS_AFTER`] (a fast cell sends none at all; what it printed is in its result),
//! nothing once its outcome is known, and its result leaves at least [`RESULT_GAP`] after its
//! last progress.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    InitializeRequestParams, InitializeResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ProgressToken, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, Peer, RoleServer, ServerHandler};

use super::call_order::{CallOrder, Turn};
use super::images::ImageBudget;
use super::render::{SaveTo, render};
use super::tool::{Manual, TOOL_NAME, listed_functions, parse_args};
use crate::engine::{CellOptions, Engine};
use crate::outcome::CellEvent;

/// How often a silent cell sends a progress notification, so clients that reset their request
/// timer on progress keep waiting.
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(10);

/// A call streams no progress before it has run this long: a fast cell's output arrives in its
/// result alone.
pub const FIRST_PROGRESS_AFTER: Duration = Duration::from_millis(250);

/// The least time between a call's last progress notification and its result, so a client
/// reads them apart.
pub const RESULT_GAP: Duration = Duration::from_millis(50);

/// How long `tools/list` waits for the kernel to load its helpers before listing none.
const HELPERS_WAIT: Duration = Duration::from_secs(90);

/// What the server says about itself at `initialize`.
const INSTRUCTIONS: &str = "pi-repl gives you one tool, `execute`, backed by a persistent Python \
    workspace (a real IPython kernel). Variables, functions, imports and data stay alive across \
    calls and are revived after a restart; a <repl_engine_reset> block at the top of a result \
    says when the workspace was rebuilt and what was lost.";

/// The server for one workspace.
pub struct ReplServer {
    engine: Engine,
    /// The manual before the helper list is known.
    manual: Manual,
    /// The tool as first listed: built once the kernel's helpers have loaded, then fixed, so
    /// `tools/list` is stable.
    tool: tokio::sync::OnceCell<Tool>,
    budget: ImageBudget,
    heartbeat: Duration,
    /// Where images and other rich outputs of calls are saved.
    output_dir: Option<PathBuf>,
    /// Starts the names of those files: this server's start time and pid, so neither a later
    /// server of the same session nor another one running beside it overwrites them.
    output_prefix: String,
    calls: AtomicU64,
    initialized: AtomicBool,
    /// The wire order of calls, booked by the frame guard.
    order: CallOrder,
}

impl ReplServer {
    pub fn new(
        engine: Engine,
        manual: Manual,
        budget: ImageBudget,
        heartbeat: Duration,
        output_dir: Option<PathBuf>,
        order: CallOrder,
    ) -> Self {
        ReplServer {
            engine,
            manual,
            tool: tokio::sync::OnceCell::new(),
            budget,
            heartbeat,
            output_dir,
            output_prefix: format!(
                "{}-{}",
                chrono::Local::now().format("%Y%m%d-%H%M%S"),
                std::process::id()
            ),
            calls: AtomicU64::new(0),
            initialized: AtomicBool::new(false),
            order,
        }
    }

    /// The tool, listing the helpers the kernel loaded (waiting for its first boot, bounded).
    async fn tool(&self) -> &Tool {
        self.tool
            .get_or_init(|| async {
                let mut manual = self.manual.clone();
                match self.engine.helpers(HELPERS_WAIT).await {
                    Some(records) => manual.functions = listed_functions(&records),
                    None => tracing::warn!(
                        "the kernel was not ready in time; the tool description lists no helpers"
                    ),
                }
                manual.tool()
            })
            .await
    }

    async fn execute(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
        turn: Turn,
    ) -> Result<CallToolResult, McpError> {
        let args = parse_args(request.arguments.as_ref())
            .map_err(|message| McpError::invalid_params(message, None))?;
        let call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let mut handle = self.engine.submit(
            args.code,
            CellOptions {
                timeout: args.timeout_ms.map(Duration::from_millis),
            },
        );
        turn.done();
        let cancel = handle.cancel_token();
        let mut progress = Progress::new(context.peer.clone(), context.meta.get_progress_token());
        let mut events = handle.take_events();
        let outcome = handle.outcome();
        tokio::pin!(outcome);
        let mut heartbeat =
            tokio::time::interval_at(progress.opens_at + self.heartbeat, self.heartbeat);
        let settled = loop {
            tokio::select! {
                biased;
                result = &mut outcome => break result,
                Some(event) = events.recv() => {
                    progress.event(event).await;
                    heartbeat.reset();
                }
                _ = context.ct.cancelled(), if !cancel.is_cancelled() => cancel.cancel(),
                _ = tokio::time::sleep_until(progress.opens_at), if progress.holding() => {
                    progress.open().await;
                    heartbeat.reset();
                }
                _ = heartbeat.tick() => progress.heartbeat().await,
            }
        };
        progress.keep_apart_from_result().await;
        let outcome = match settled {
            Ok(outcome) => outcome,
            Err(error) => {
                let mut text = format!("error: {error}");
                if let Some(hint) = error.hint() {
                    text.push_str(&format!("\nhint: {hint}"));
                }
                return Ok(CallToolResult::error(vec![ContentBlock::text(text)]));
            }
        };
        let save_to = self.output_dir.as_ref().map(|dir| SaveTo {
            dir: dir.clone(),
            stem: format!("{}-call{call}-cell{}", self.output_prefix, outcome.cell),
        });
        // Decoding and resizing images and writing files can take a while: off the runtime.
        let budget = self.budget;
        let rendered =
            tokio::task::spawn_blocking(move || render(&outcome, budget, save_to.as_ref())).await;
        match rendered {
            Ok(result) => Ok(result),
            Err(error) => Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "error: pi-repl could not render the result: {error}"
            ))])),
        }
    }
}

impl ServerHandler for ReplServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("pi-repl", env!("CARGO_PKG_VERSION"))
                    .with_title("pi-repl: a persistent Python workspace"),
            )
            .with_instructions(INSTRUCTIONS)
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        if self.initialized.swap(true, Ordering::SeqCst) {
            return Err(McpError::invalid_request(
                "the session is already initialized; `initialize` is sent once per connection",
                None,
            ));
        }
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(vec![
            self.tool().await.clone(),
        ]))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        // Before the first `tools/list` there is nothing to validate against; arguments are
        // checked by `parse_args` either way.
        self.tool.get().filter(|_| name == TOOL_NAME).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        // Every call the client sent earlier reaches the engine first. Taken before anything
        // else, so every booked call leaves the book however it ends.
        let turn = tokio::select! {
            turn = self.order.turn(&context.id) => turn,
            _ = context.ct.cancelled() => {
                return Ok(CallToolResponse::from(CallToolResult::error(vec![
                    ContentBlock::text("[cancelled before it ran]"),
                ])));
            }
        };
        if request.name != TOOL_NAME {
            return Err(McpError::invalid_params(
                format!(
                    "unknown tool `{}`: this server has one tool, `{TOOL_NAME}`",
                    request.name
                ),
                None,
            ));
        }
        self.execute(request, context, turn)
            .await
            .map(CallToolResponse::from)
    }
}

/// Progress notifications for one call, when the client asked for them.
struct Progress {
    peer: Peer<RoleServer>,
    token: Option<ProgressToken>,
    sent: u64,
    /// Before this, output is held (and sent as one message then, if the call still runs).
    opens_at: Instant,
    held: Option<String>,
    last_sent: Option<Instant>,
}

impl Progress {
    fn new(peer: Peer<RoleServer>, token: Option<ProgressToken>) -> Progress {
        Progress {
            peer,
            token,
            sent: 0,
            opens_at: Instant::now() + FIRST_PROGRESS_AFTER,
            held: None,
            last_sent: None,
        }
    }

    /// Output is being held for the opening.
    fn holding(&self) -> bool {
        self.held.is_some()
    }

    async fn event(&mut self, event: CellEvent) {
        let message = match event {
            CellEvent::Output { text, .. } => text,
            CellEvent::Truncating { channel } => format!(
                "\n[pi-repl: {} is over its limit; the end is in the result]\n",
                channel.as_str()
            ),
            CellEvent::Display(display) => {
                let kinds: Vec<&str> = display.data.keys().map(String::as_str).collect();
                format!("[{} output]\n", kinds.join(", "))
            }
            CellEvent::Started {
                reset: Some(reset), ..
            } => format!("{}\n", reset.notice()),
            CellEvent::Started { reset: None, .. } => return,
        };
        if Instant::now() < self.opens_at {
            self.held.get_or_insert_with(String::new).push_str(&message);
            return;
        }
        self.open().await;
        self.send(Some(message)).await;
    }

    /// Sends what was held during the opening, if anything.
    async fn open(&mut self) {
        if let Some(held) = self.held.take() {
            self.send(Some(held)).await;
        }
    }

    async fn heartbeat(&mut self) {
        self.send(None).await;
    }

    /// Waits out the rest of the gap between the last progress and the result.
    async fn keep_apart_from_result(&self) {
        if let Some(last) = self.last_sent {
            tokio::time::sleep_until(last + RESULT_GAP).await;
        }
    }

    async fn send(&mut self, message: Option<String>) {
        let Some(token) = &self.token else {
            return;
        };
        self.sent += 1;
        let mut param = ProgressNotificationParam::new(token.clone(), self.sent as f64);
        if let Some(message) = message {
            param = param.with_message(message);
        }
        if let Err(error) = self.peer.notify_progress(param).await {
            tracing::debug!(%error, "a progress notification was not delivered");
        }
        self.last_sent = Some(Instant::now());
    }
}
