//! The MCP server: one tool, `execute`, run through the engine.
//!
//! Owns: `tools/list`, `tools/call` (argument checks, wire order, streaming progress,
//! cancellation, rendering) and the server's identity. All cell behaviour (queue, caps,
//! aborts, revive, reset notices) is the engine's; none is re-implemented here. A call that
//! becomes an MCP task, and `tasks/get`/`tasks/cancel`, are `tasks`'.
//!
//! Progress never races its result (Claude Code's SDK handles a response synchronously and a
//! progress notification a tick later, so a progress read together with its response hits an
//! "unknown token" and can drop the connection; issue 22): a call sends no progress during its
//! first [`FIRST_PROGRESS_AFTER`] (a fast cell sends none at all; what it printed is in its
//! result) and nothing once its outcome is known; each progress notification is written to the
//! frame guard's pipe before the call goes on (`Progress::send` waits for rmcp's write), so all
//! of a call's progress precedes its result; and the guard's writer holds a response that
//! follows a progress notification until the client has read what came before it (`frames`).
//!
//! Not here: what a call answers while its cell is queued or running (`pending`) and its
//! progress notifications (`progress`).
//!
//! The tasks extension is listed at `initialize` only for protocol versions that have
//! capability extensions ([`TASKS_FROM`] on); an older session neither sees it nor gets tasks.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
    GetTaskParams, GetTaskResult, Implementation, InitializeRequestParams, InitializeResult,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};

use serde_json::json;

use super::call_order::Place;
use super::cell_book::{CellBook, Ended, Final, Look};
use super::execute_args::{Request, parse_args};
use super::pending::{pending_result, prepend_text, unknown_cell_text};
use super::progress::Progress;
use super::tasks::{self, TaskBook};
use super::tool::{Manual, TOOL_NAME, listed_functions};
use crate::engine::{CellOptions, Engine};
use crate::view::ImageBudget;
use crate::view::render::{SaveTo, meta_of, render};

/// How often a silent cell sends a progress notification, so clients that reset their request
/// timer on progress keep waiting.
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(10);

/// How long `tools/list` waits for the kernel to load its helpers before listing none.
const HELPERS_WAIT: Duration = Duration::from_secs(90);

/// What the server says about itself at `initialize`.
const INSTRUCTIONS: &str = "pi-repl gives you one tool, `execute`, backed by a persistent Python \
    workspace (a real IPython kernel). Variables, functions, imports and data stay alive across \
    calls and are revived after a restart; a <repl_engine_reset> block at the top of a result \
    says when the workspace was rebuilt and what was lost.";

/// How a server presents its workspace.
pub struct ServerSettings {
    /// The manual before the helper list is known.
    pub manual: Manual,
    pub budget: ImageBudget,
    pub heartbeat: Duration,
    /// Where images, full outputs and finished cells' outcomes are saved.
    pub output_dir: Option<PathBuf>,
    /// How long a call waits for its cell by default (`None`: until it ends).
    pub wait: Option<Duration>,
    /// Where a durable session keeps the cells that outlived their calls.
    pub records: Option<super::cell_records::CellRecords>,
    /// Told of the client at `initialize` (`capabilities`): sampling for `llm_query`, host
    /// tools, pi children, agent frames.
    pub capabilities: Vec<Arc<dyn super::capabilities::ClientCapability>>,
    /// How long a result's text may be, by client (`--max-result-chars`).
    pub result_limit: super::fit::ResultLimit,
}

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
    /// The cells calls started, kept past their calls.
    pub(super) book: Arc<CellBook>,
    /// The calls answered with an MCP task handle.
    pub(super) tasks: TaskBook,
    /// How long a call waits for its cell by default (`None`: until it ends).
    wait: Option<Duration>,
    capabilities: Vec<Arc<dyn super::capabilities::ClientCapability>>,
    /// The progress token of the call that started each cell (agent frames name it).
    cell_calls: super::agent_frames::CellCalls,
    /// How long a result's text may be, by client.
    result_limit: super::fit::ResultLimit,
}

impl ReplServer {
    pub fn new(engine: Engine, settings: ServerSettings) -> Self {
        let output_prefix = format!(
            "{}-{}",
            chrono::Local::now().format("%Y%m%d-%H%M%S"),
            std::process::id()
        );
        let book = CellBook::new(
            settings.records,
            settings.output_dir.clone(),
            output_prefix.clone(),
        );
        // A new server of a durable session numbers its cells on from the last one.
        engine.continue_numbering_after(book.last_recorded_number());
        let mut manual = settings.manual;
        manual.wait = settings.wait;
        ReplServer {
            engine,
            manual,
            tool: tokio::sync::OnceCell::new(),
            budget: settings.budget,
            heartbeat: settings.heartbeat,
            output_dir: settings.output_dir,
            output_prefix,
            calls: AtomicU64::new(0),
            initialized: AtomicBool::new(false),
            book,
            tasks: TaskBook::default(),
            wait: settings.wait,
            capabilities: settings.capabilities,
            cell_calls: Default::default(),
            result_limit: settings.result_limit,
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
        place: Option<Place>,
    ) -> Result<CallToolResponse, McpError> {
        let done = || place.as_ref().map(Place::done);
        let args = parse_args(request.arguments.as_ref())
            .map_err(|message| McpError::invalid_params(message, None))?;
        let call = self.next_call_number();
        let mut wait = match args.wait_ms {
            Some(ms) => Some(Duration::from_millis(ms)),
            None => self.wait,
        };
        // A call of a client that takes MCP tasks answers with a task handle once its cell
        // outlives a short wait.
        let may_become_task = tasks::client_declared(&context)
            && matches!(args.request, Request::Run { .. })
            && wait.is_some();
        if may_become_task && args.wait_ms.is_none() {
            wait = tasks::wait_before_task(wait);
        }
        let mut said = Vec::new();
        let (cell, submitted) = match args.request {
            Request::Run { code, timeout_ms } => {
                let handle = self.engine.submit(
                    code.as_str(),
                    CellOptions {
                        timeout: timeout_ms.map(Duration::from_millis),
                    },
                );
                let cell = self.book.track(handle, &code);
                done();
                (cell, true)
            }
            Request::Rewind { to } => {
                let handle = self.engine.submit_rewind(to);
                let cell = self.book.track(handle, &format!("# rewind to cell {to}"));
                done();
                (cell, true)
            }
            Request::Look { cell, interrupt } => {
                done();
                if interrupt {
                    if self.book.interrupt(cell) {
                        said.push(format!("[interrupting cell {cell}]"));
                    } else {
                        said.push(format!(
                            "[cell {cell} is not running; nothing to interrupt]"
                        ));
                    }
                }
                (cell, false)
            }
        };
        let Some(look) = self.wait_for(cell, submitted, wait, &context).await else {
            // The client cancelled the call and reads no answer (rmcp sends none): it takes
            // nothing away, so the cell's outcome and any notices go to the next call.
            return Ok(CallToolResult::error(vec![ContentBlock::text(
                "[the client cancelled this call]",
            )])
            .into());
        };
        if let Some(task) = self.tasks.task_for(&self.book, may_become_task, &look) {
            return Ok(task);
        }
        let mut result = match look {
            Look::Ended(ended) => self.ended_result(ended, call).await,
            Look::Pending(pending) => pending_result(&pending, self.wait),
            Look::Unknown { last } => self.unknown_cell(cell, last),
        };
        // A cancelled call's result is never delivered: the notices wait for the next one.
        if !context.ct.is_cancelled() {
            said.extend(self.book.take_notices(Some(cell)));
        }
        prepend_text(&mut result, &said);
        let client = context.client_info().map(|info| info.name);
        super::fit::mark_silence(&mut result, client.as_deref());
        if let Some(max_chars) = self.result_limit.for_client(client.as_deref()) {
            let save_to = self
                .output_dir
                .as_ref()
                .map(|dir| dir.join(format!("{}-call{call}.result.txt", self.output_prefix)));
            super::fit::fit(&mut result, max_chars, save_to.as_deref());
        }
        Ok(result.into())
    }

    /// Numbers a call (names the files its result saves).
    pub(super) fn next_call_number(&self) -> u64 {
        self.calls.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Waits for cell `cell` until it ends or `wait` passes, streaming what it prints as
    /// progress. `None` when the client cancelled the call (its own timeout, or its user
    /// stopped it): the answer would never be read, so the cell is detached instead — its end
    /// is reported at the top of the next result (`<cell_finished>`), or collected with
    /// `{"cell": N}` — and the call takes nothing away.
    async fn wait_for(
        &self,
        cell: u64,
        submitted: bool,
        wait: Option<Duration>,
        context: &RequestContext<RoleServer>,
    ) -> Option<Look> {
        let (Some(mut place), Some(mut changes)) =
            (self.book.begin_wait(cell, submitted), self.book.watch(cell))
        else {
            return Some(self.book.finish_wait(cell));
        };
        let deadline = wait.map(|wait| Instant::now() + wait);
        if submitted && let Some(token) = context.meta.get_progress_token() {
            self.cell_calls
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(cell, token);
        }
        let mut progress = Progress::new(context.peer.clone(), context.meta.get_progress_token());
        let mut heartbeat =
            tokio::time::interval_at(progress.opens_at + self.heartbeat, self.heartbeat);
        loop {
            let (messages, ended) = self.book.progress_since(cell, &mut place);
            for message in messages {
                progress.message(message).await;
                heartbeat.reset();
            }
            if ended {
                break;
            }
            tokio::select! {
                biased;
                changed = changes.changed() => if changed.is_err() { break },
                _ = context.ct.cancelled() => {
                    // Cancelling the call that started a cell aborts the cell; cancelling a
                    // look only ends the look.
                    self.book.abandon_wait(cell);
                    if submitted {
                        self.book.interrupt(cell);
                    }
                    return None;
                }
                _ = sleep_until_opt(deadline), if deadline.is_some() => break,
                _ = tokio::time::sleep_until(progress.opens_at), if progress.holding() => {
                    progress.open().await;
                    heartbeat.reset();
                }
                _ = heartbeat.tick() => progress.heartbeat().await,
            }
        }
        Some(self.book.finish_wait(cell))
    }

    /// The result of a cell that has ended.
    pub(super) async fn ended_result(&self, ended: Final, call: u64) -> CallToolResult {
        let mut heading = Vec::new();
        let how = match ended.ran_for {
            Some(ran) => format!(
                "{} after {}",
                ended.ended.status(),
                super::seconds_text(ran)
            ),
            None => ended.ended.status().to_string(),
        };
        if ended.repeat {
            heading.push(format!(
                "[cell {} ended earlier ({how}) and its outcome was already returned; here it is \
                 again]",
                ended.cell,
            ));
        } else if ended.detached {
            heading.push(format!("[cell {} ended: {how}]", ended.cell));
            if let Some(file) = &ended.output_file {
                heading.push(format!("[its whole outcome is also in {}]", file.display()));
            }
            if ended.whole_again {
                heading.push(
                    "[its output went over the limit after part of it was shown: here is all \
                     of it as kept, beginning included]"
                        .to_string(),
                );
            }
        }
        let mut result = match ended.ended {
            Ended::Ran(outcome) => {
                let save_to = self.output_dir.as_ref().map(|dir| SaveTo {
                    dir: dir.clone(),
                    stem: format!("{}-call{call}-cell{}", self.output_prefix, outcome.cell),
                });
                // Decoding and resizing images and writing files can take a while: off the
                // runtime.
                let budget = self.budget;
                let rendered =
                    tokio::task::spawn_blocking(move || render(&outcome, budget, save_to.as_ref()))
                        .await;
                match rendered {
                    Ok(result) => result,
                    Err(error) => CallToolResult::error(vec![ContentBlock::text(format!(
                        "error: pi-repl could not render the result: {error}"
                    ))]),
                }
            }
            Ended::Failed { message } => CallToolResult::error(vec![ContentBlock::text(message)]),
            Ended::Recorded(record) => {
                let content = vec![ContentBlock::text(record.text.clone())];
                let mut result = if record.is_error {
                    CallToolResult::error(content)
                } else {
                    CallToolResult::success(content)
                };
                result.meta = Some(meta_of(json!({
                    "status": record.status,
                    "cell": record.cell,
                    "duration_ms": record.duration_ms,
                    "full_output": record.output_file,
                })));
                result
            }
        };
        prepend_text(&mut result, &heading);
        result
    }

    /// A look at a cell this server does not hold: what the session's records say, or an
    /// error naming the cells there are.
    fn unknown_cell(&self, cell: u64, last: u64) -> CallToolResult {
        if let Some(record) = self.book.recorded(cell) {
            let status = record.status.clone().unwrap_or_else(|| "lost".into());
            let content = vec![ContentBlock::text(format!(
                "[cell {cell} ended earlier ({status}); here is its outcome as recorded]\n{}",
                record.text
            ))];
            return if record.is_error {
                CallToolResult::error(content)
            } else {
                CallToolResult::success(content)
            };
        }
        unknown_cell_text(cell, last.max(self.engine.last_number()))
    }
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

impl ServerHandler for ReplServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        )
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
        let client = super::capabilities::Initialize {
            peer: &context.peer,
            request: &request,
            cell_calls: &self.cell_calls,
        };
        for capability in &self.capabilities {
            capability.connect(&client);
        }
        let mut result = self.negotiate_initialize(&request)?;
        if !tasks::listed_at(&result.protocol_version)
            && let Some(extensions) = result.capabilities.extensions.as_mut()
        {
            extensions.remove(rmcp::model::TASKS_EXTENSION_ID);
            if extensions.is_empty() {
                result.capabilities.extensions = None;
            }
        }
        Ok(result)
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
        mut context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        // Every call the client sent earlier reaches the engine first: the transport gave this
        // one its place in wire order as it read the frame. Taken out of the request at once,
        // so it is released however this call ends.
        let place = Place::take(&mut context.extensions);
        if let Some(place) = &place {
            tokio::select! {
                _ = place.turn() => {}
                _ = context.ct.cancelled() => {
                    return Ok(CallToolResponse::from(CallToolResult::error(vec![
                        ContentBlock::text("[cancelled before it ran]"),
                    ])));
                }
            }
        }
        if request.name != TOOL_NAME {
            return Err(McpError::invalid_params(
                format!(
                    "unknown tool `{}`: this server has one tool, `{TOOL_NAME}`",
                    request.name
                ),
                None,
            ));
        }
        self.execute(request, context, place).await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        self.tasks
            .get_state(&self.book, &request.task_id, async |ended| {
                let call = self.next_call_number();
                self.ended_result(ended, call).await
            })
            .await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.tasks.cancel_cell(&self.book, &request.task_id)
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.tasks.update_cell(&request.task_id)
    }
}
