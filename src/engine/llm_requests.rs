//! A cell's requests on the stdin channel as the engine sees them: model requests
//! (`llm_query`, marked `llm/1`), sub-agent requests (`spawn_agent`, marked `agent/1`, served
//! by `agents::Supervisor`) and host-tool calls (`tools.<name>(...)`, marked `tool/1`, served
//! by `host_tools::HostTools`). Each is answered in a task of its own, so the cell loop keeps
//! reading output, honouring aborts and watching the kernel while a model thinks.
//!
//! Owns: starting the answer of one request (or answering at once: not pi-repl's, unreadable,
//! nobody to answer, the cell already aborting), cancelling them all when the cell is
//! interrupted or ends, and the cell's usage. The loop in `cell.rs` sends the replies.
//! The wire format and the serving itself are `llm::kernel_requests`.

use std::sync::{Arc, Mutex};

use jupyter_protocol::JupyterMessage;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::agents::Supervisor;
use crate::agents::requests::{self as agent_requests, Refusal};
use crate::host_tools::HostTools;
use crate::host_tools::requests::{self as tool_requests, Refusal as ToolRefusal};
use crate::llm::kernel_requests::{self, Answer, Answerer};
use crate::llm::ledger::Usage;
use crate::llm::{LlmError, UNAVAILABLE};

/// A reply to send on the stdin channel: the request it answers and its value.
pub type StdinReply = (JupyterMessage, String);

/// What became of a stdin request.
pub enum Started {
    /// Being answered; its reply comes through the channel.
    InFlight,
    /// Answered at once with this value.
    Answered(Box<JupyterMessage>, String),
}

/// The model requests of one cell.
pub struct LlmRequests {
    answerer: Option<Answerer>,
    agents: Option<Arc<Supervisor>>,
    host_tools: Option<Arc<HostTools>>,
    /// The cell's number (a spawned child's record names it).
    cell: u64,
    usage: Arc<Mutex<Usage>>,
    cancel: CancellationToken,
}

impl LlmRequests {
    pub fn new(
        answerer: Option<Answerer>,
        agents: Option<Arc<Supervisor>>,
        host_tools: Option<Arc<HostTools>>,
        cell: u64,
    ) -> LlmRequests {
        LlmRequests {
            answerer,
            agents,
            host_tools,
            cell,
            usage: Arc::new(Mutex::new(Usage::default())),
            cancel: CancellationToken::new(),
        }
    }

    /// Starts answering `message`; `aborting` when the cell is being interrupted.
    pub fn start(
        &self,
        message: JupyterMessage,
        aborting: bool,
        replies: &mpsc::UnboundedSender<StdinReply>,
    ) -> Started {
        if let Some(parsed) = kernel_requests::prompt_of(&message).and_then(agent_requests::parse) {
            return self.start_agent_request(message, parsed, replies);
        }
        if let Some(parsed) = kernel_requests::prompt_of(&message).and_then(tool_requests::parse) {
            return self.start_tool_request(message, parsed, aborting, replies);
        }
        let parsed = kernel_requests::prompt_of(&message).and_then(kernel_requests::parse);
        let request = match parsed {
            // Not pi-repl's: `input()` is refused in the kernel itself; nothing else asks.
            None => return Started::Answered(Box::new(message), String::new()),
            Some(Err(error)) => {
                let value = kernel_requests::reply_unreadable(&error);
                return Started::Answered(Box::new(message), value);
            }
            Some(Ok(request)) => request,
        };
        let every = |error: LlmError| {
            let answers = request
                .prompts
                .iter()
                .map(|_| Answer::from(Err(error.clone())))
                .collect();
            kernel_requests::reply(answers)
        };
        if aborting || self.cancel.is_cancelled() {
            let value = every(LlmError::Cancelled);
            return Started::Answered(Box::new(message), value);
        }
        let Some(answerer) = self.answerer.clone() else {
            let value = every(LlmError::Unavailable(UNAVAILABLE.to_string()));
            return Started::Answered(Box::new(message), value);
        };
        let usage = Arc::clone(&self.usage);
        let cancel = self.cancel.clone();
        let replies = replies.clone();
        tokio::spawn(async move {
            let answers = answerer.serve(request, usage, cancel).await;
            // The cell may have ended; then nobody needs the reply.
            let _ = replies.send((message, kernel_requests::reply(answers)));
        });
        Started::InFlight
    }

    /// A sub-agent request: served in a task (a spawn copies a snapshot and starts a process).
    fn start_agent_request(
        &self,
        message: JupyterMessage,
        parsed: Result<agent_requests::AgentRequest, String>,
        replies: &mpsc::UnboundedSender<StdinReply>,
    ) -> Started {
        let request = match parsed {
            Ok(request) => request,
            Err(error) => {
                let value = agent_requests::reply(Err(Refusal::error(error)));
                return Started::Answered(Box::new(message), value);
            }
        };
        let Some(agents) = self.agents.clone() else {
            let value = agent_requests::reply(Err(Refusal::error(
                "sub-agents are not available in this workspace (it is not run by `pi-repl mcp`, \
                 `exec` or `agent`)",
            )));
            return Started::Answered(Box::new(message), value);
        };
        let cell = self.cell;
        let replies = replies.clone();
        tokio::spawn(async move {
            let value = agent_requests::reply(agents.handle(request, cell).await);
            let _ = replies.send((message, value));
        });
        Started::InFlight
    }

    /// A host-tool call: served in a task (the client runs the tool, for as long as it takes).
    fn start_tool_request(
        &self,
        message: JupyterMessage,
        parsed: Result<tool_requests::ToolRequest, String>,
        aborting: bool,
        replies: &mpsc::UnboundedSender<StdinReply>,
    ) -> Started {
        let answered = |refusal: ToolRefusal| {
            Started::Answered(Box::new(message.clone()), tool_requests::refuse(&refusal))
        };
        let request = match parsed {
            Ok(request) => request,
            Err(error) => return answered(ToolRefusal::Failed(error)),
        };
        if aborting || self.cancel.is_cancelled() {
            return answered(ToolRefusal::Cancelled);
        }
        let Some(host_tools) = self.host_tools.clone() else {
            return answered(tool_requests::unavailable(None));
        };
        let cancel = self.cancel.clone();
        let replies = replies.clone();
        tokio::spawn(async move {
            let value = host_tools.serve(request, cancel).await;
            // The cell may have ended; then nobody needs the reply.
            let _ = replies.send((message, value));
        });
        Started::InFlight
    }

    /// Cancels every request in flight (the cell is interrupted, or over).
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// What the cell used, if it asked at all.
    pub fn usage(&self) -> Option<Usage> {
        let usage = *self
            .usage
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (usage.calls > 0).then_some(usage)
    }
}
