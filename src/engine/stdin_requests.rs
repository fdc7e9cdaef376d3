//! A cell's requests to the host on the stdin channel, as the engine sees them: model requests
//! (`llm_query`, marked `llm/1`), and the kinds a service registered for the engine serves:
//! sub-agent requests (`spawn_agent`, `agent/1`) and host-tool calls (`tools.<name>(...)`,
//! `tool/1`). Each is answered in a task of its own, so the cell loop keeps reading output,
//! honouring aborts and watching the kernel while a model thinks or a tool runs.
//!
//! Owns: the [`StdinService`] trait (how the engine reaches sub-agents and host tools without
//! knowing them: the front door that builds the engine wires `agents::Supervisor` and
//! `host_tools::HostTools` in, `cli/stdin_services.rs`), routing one request to the service
//! that claims it or to the model brokers, answering at once when nobody can (not pi-repl's,
//! unreadable, no broker, the cell already aborting), cancelling them all when the cell is
//! interrupted or ends, and the cell's usage. The loop in `cell.rs` sends the replies.
//! Does not own: the wire formats and the serving (`llm::kernel_requests`,
//! `agents::requests`, `host_tools::requests`).

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use jupyter_protocol::JupyterMessage;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

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

/// The request a service is asked about: which cell sent it and whether it is still wanted.
pub struct StdinCall {
    /// The cell's number (a spawned child's record names it).
    pub cell: u64,
    /// The cell is being interrupted.
    pub aborting: bool,
    /// Fires when the cell is interrupted or over; a long answer should end with it.
    pub cancel: CancellationToken,
}

/// How a service answers a request it claimed.
pub enum Served {
    /// At once, with this value (a refusal, say).
    Now(String),
    /// When this future ends, with its value (run in a task of its own).
    Later(Pin<Box<dyn Future<Output = String> + Send>>),
}

/// One kind of a cell's marked stdin requests and who serves it, as the engine reaches it:
/// through this trait, so the engine names neither the sub-agent supervisor nor the host tools.
pub trait StdinService: Send + Sync {
    /// `None` when `prompt` is not this service's request (the next service, then the model
    /// brokers, are asked); else how it is answered.
    fn take(self: Arc<Self>, prompt: &str, call: &StdinCall) -> Option<Served>;
}

/// The service that starts a cell's sub-agents: a [`StdinService`] that also says where its
/// children's records are (the session's notebook links each cell to the agents it started).
pub trait SubAgents: StdinService {
    /// The directory of this workspace's children's records.
    fn agents_dir(&self) -> PathBuf;
}

/// The answer to a marked request of a kind no service here serves (a workspace built without
/// sub-agents or host tools): a refusal the kernel side raises as that kind's error. `None`
/// for a model request or a prompt that is not pi-repl's.
fn unserved(prompt: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(prompt).ok()?;
    let marker = value.get("pi_repl")?.as_str()?;
    if marker == kernel_requests::MARKER {
        return None;
    }
    let message = format!(
        "`{marker}` requests are not available in this workspace (it is not run by \
         `pi-repl mcp`, `exec` or `agent`)"
    );
    Some(serde_json::json!({"ok": false, "error": "Unavailable", "message": message}).to_string())
}

// `EngineConfig` is `Debug`; a service shows as what it is to the engine.
impl std::fmt::Debug for dyn StdinService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StdinService")
    }
}

impl std::fmt::Debug for dyn SubAgents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SubAgents")
    }
}

/// The stdin requests of one cell.
pub struct StdinRequests {
    answerer: Option<Answerer>,
    /// Asked in order before the model brokers.
    services: Vec<Arc<dyn StdinService>>,
    /// The cell's number (a spawned child's record names it).
    cell: u64,
    usage: Arc<Mutex<Usage>>,
    cancel: CancellationToken,
}

impl StdinRequests {
    pub fn new(
        answerer: Option<Answerer>,
        agents: Option<Arc<dyn SubAgents>>,
        host_tools: Option<Arc<dyn StdinService>>,
        cell: u64,
    ) -> StdinRequests {
        let agents = agents.map(|agents| agents as Arc<dyn StdinService>);
        StdinRequests {
            answerer,
            services: agents.into_iter().chain(host_tools).collect(),
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
        if let Some(prompt) = kernel_requests::prompt_of(&message) {
            let call = StdinCall {
                cell: self.cell,
                aborting,
                cancel: self.cancel.clone(),
            };
            let served = self
                .services
                .iter()
                .find_map(|service| Arc::clone(service).take(prompt, &call));
            match served {
                Some(Served::Now(value)) => return Started::Answered(Box::new(message), value),
                Some(Served::Later(answer)) => {
                    let replies = replies.clone();
                    tokio::spawn(async move {
                        let value = answer.await;
                        // The cell may have ended; then nobody needs the reply.
                        let _ = replies.send((message, value));
                    });
                    return Started::InFlight;
                }
                None => {
                    if let Some(value) = unserved(prompt) {
                        return Started::Answered(Box::new(message), value);
                    }
                }
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use jupyter_protocol::InputRequest;

    fn request(prompt: &str) -> JupyterMessage {
        JupyterMessage::new(
            InputRequest {
                prompt: prompt.to_string(),
                password: false,
            },
            None,
        )
    }

    /// Claims `echo/1` requests: at once while the cell aborts, else later with the cell's
    /// number.
    struct Echo;

    impl StdinService for Echo {
        fn take(self: Arc<Self>, prompt: &str, call: &StdinCall) -> Option<Served> {
            if !prompt.contains("echo/1") {
                return None;
            }
            if call.aborting {
                return Some(Served::Now("aborting".into()));
            }
            let cell = call.cell;
            Some(Served::Later(Box::pin(
                async move { format!("cell {cell}") },
            )))
        }
    }

    fn answered(started: Started) -> String {
        match started {
            Started::Answered(_, value) => value,
            Started::InFlight => panic!("expected an answer at once"),
        }
    }

    #[tokio::test]
    async fn a_claimed_request_is_served_by_its_service_with_the_cells_number() {
        let requests = StdinRequests::new(None, None, Some(Arc::new(Echo)), 7);
        let (replies, mut answers) = mpsc::unbounded_channel();
        let started = requests.start(request(r#"{"pi_repl": "echo/1"}"#), false, &replies);
        assert!(matches!(started, Started::InFlight));
        let (_, value) = answers.recv().await.expect("the reply");
        assert_eq!(value, "cell 7");
        let started = requests.start(request(r#"{"pi_repl": "echo/1"}"#), true, &replies);
        assert_eq!(answered(started), "aborting");
    }

    #[test]
    fn a_marked_request_no_service_claims_is_refused_as_unavailable() {
        let requests = StdinRequests::new(None, None, Some(Arc::new(Echo)), 1);
        let (replies, _answers) = mpsc::unbounded_channel();
        let value = answered(requests.start(
            request(r#"{"pi_repl": "agent/1", "op": "root"}"#),
            false,
            &replies,
        ));
        let value: serde_json::Value = serde_json::from_str(&value).unwrap();
        assert_eq!(value["ok"], false);
        assert_eq!(value["error"], "Unavailable");
        assert!(value["message"].as_str().unwrap().contains("`agent/1`"));
    }

    #[test]
    fn a_model_request_without_brokers_and_a_foreign_prompt_are_answered_at_once() {
        let requests = StdinRequests::new(None, None, Some(Arc::new(Echo)), 1);
        let (replies, _answers) = mpsc::unbounded_channel();
        let value = answered(requests.start(
            request(r#"{"pi_repl": "llm/1", "prompts": [{"prompt": "hi"}]}"#),
            false,
            &replies,
        ));
        assert!(value.contains("LLMUnavailable"), "{value}");
        assert_eq!(
            answered(requests.start(request("name? "), false, &replies)),
            ""
        );
    }
}
