//! In pi, a sub-agent is `pi --mode json --repl` with the parent's model: pi's own agent loop,
//! with its own pi-repl workspace (the child's `agents/<id>/` directory) behind its `execute`.
//!
//! How it is started: at each spawn the host asks its MCP client (the pi extension, which
//! declared the experimental capability [`CAPABILITY`]) for the command, with the custom request
//! [`COMMAND_METHOD`] (`{task, model}` → `{argv}`); the extension answers with its own pi (the
//! same Node and CLI, the same `-e` extensions) and its current model. The host runs it with
//! its own environment (pi's: the child calls the provider with pi's credentials) plus
//! `PI_REPL_AGENT_WORKSPACE`, which makes the child's extension start `pi-repl mcp
//! --agent-workspace <dir>` on that workspace (seeded with the parent's snapshot when forked),
//! and `PI_REPL_AGENT_PARENT_PID`: the child's extension ends the child once its parent is no
//! longer this host (it died), checking once a second.
//! Without such a client the child is pi-repl's own loop (`pi-repl agent`).
//!
//! How it is read: its stdout is pi's JSON event stream. Each `tool_execution_end` is a step
//! (its result's last line is the record's `last_line`); each assistant `message_end` adds its
//! usage to the child's tokens (over the token budget, the child is ended `errored`); the last
//! assistant text when `agent_end` arrives is the final answer.
//!
//! Owns: asking for the command, reading the events. Does not own: the record, limits and
//! endings (`supervisor`).

use std::sync::{Arc, Mutex, OnceLock};

use rmcp::model::{ClientResult, CustomRequest, ServerRequest};
use rmcp::service::PeerRequestOptions;
use rmcp::{Peer, RoleServer};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

use super::Status;
use super::link::{Final, Heard, last_line};
use crate::llm::ledger::Usage;

/// The experimental capability of a client that starts sub-agents as pi processes.
pub const CAPABILITY: &str = "pi-repl/pi-agents";

/// The request for a child's command line: `{task, model}` → `{argv: [...]}`.
pub const COMMAND_METHOD: &str = "pi-repl/agents/command";

/// How long the client may take to give a command line before the child is pi-repl's own loop.
pub const COMMAND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The environment variable naming the child's workspace for its pi extension.
pub const WORKSPACE_VAR: &str = "PI_REPL_AGENT_WORKSPACE";

/// The environment variable naming this host's pid: the child's extension ends the child when
/// its parent is no longer this process (the host died), as a kernel's lifeline does.
pub const PARENT_VAR: &str = "PI_REPL_AGENT_PARENT_PID";

/// The MCP client as the source of pi children's command lines.
#[derive(Default)]
pub struct PiChildren {
    client: OnceLock<(Peer<RoleServer>, bool)>,
}

impl std::fmt::Debug for PiChildren {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let offers = self.client.get().is_some_and(|(_, offers)| *offers);
        f.debug_struct("PiChildren")
            .field("offers", &offers)
            .finish()
    }
}

impl PiChildren {
    pub fn new() -> Arc<PiChildren> {
        Arc::new(PiChildren::default())
    }

    /// The client initialized: `offers` when it declared [`CAPABILITY`].
    pub fn connect(&self, peer: Peer<RoleServer>, offers: bool) {
        // A second `initialize` is refused by the server before it gets here.
        let _ = self.client.set((peer, offers));
    }

    /// The command line of a pi child for `task`, or `None` (no such client, or it failed or
    /// took longer than [`COMMAND_TIMEOUT`]: the child is then pi-repl's own loop).
    pub async fn command(&self, task: &str, model: Option<&str>) -> Option<Vec<String>> {
        let (peer, true) = self.client.get()? else {
            return None;
        };
        let params = json!({"task": task, "model": model});
        let request =
            ServerRequest::CustomRequest(CustomRequest::new(COMMAND_METHOD, Some(params)));
        let handle = peer
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await
            .ok()?;
        let answer = match tokio::time::timeout(COMMAND_TIMEOUT, handle.await_response()).await {
            Ok(Ok(ClientResult::CustomResult(result))) => result.0,
            other => {
                tracing::warn!(?other, "the MCP client gave no command for a pi sub-agent");
                return None;
            }
        };
        let argv: Vec<String> = answer
            .get("argv")?
            .as_array()?
            .iter()
            .filter_map(|item| item.as_str().map(str::to_string))
            .collect();
        (!argv.is_empty()).then_some(argv)
    }
}

/// Where a child's `final_answer(text)` is written, in its workspace: a pi child answers with its
/// final text, but a cell of it may have called `final_answer`, which then wins.
pub const FINAL_ANSWER_FILE: &str = "final_answer.txt";

/// What reading a pi child's events fills in.
pub struct Reading {
    pub heard: Arc<Mutex<Heard>>,
    pub usage: Arc<Mutex<Usage>>,
    pub max_tokens: u64,
    /// The child's [`FINAL_ANSWER_FILE`].
    pub final_file: std::path::PathBuf,
}

/// Reads a pi child's JSON events until its stdout closes. `on_news` is called after each step
/// and at the end; `over_budget` when its tokens pass `max_tokens`.
pub async fn read_events(
    from_child: impl AsyncRead + Unpin,
    reading: Reading,
    on_news: impl Fn(),
    over_budget: impl Fn(),
) {
    let Reading {
        heard,
        usage,
        max_tokens,
        final_file,
    } = reading;
    let mut lines = BufReader::new(from_child).lines();
    let mut last_text: Option<String> = None;
    while let Ok(Some(line)) = lines.next_line().await {
        let Ok(event) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        match event.get("type").and_then(Value::as_str) {
            Some("tool_execution_end") => {
                {
                    let mut heard = heard.lock().unwrap_or_else(|e| e.into_inner());
                    heard.steps += 1;
                    heard.last_line = last_line(&text_of(&event["result"]["content"]))
                        .or_else(|| heard.last_line.clone());
                }
                on_news();
            }
            Some("message_end") if event["message"]["role"] == "assistant" => {
                let message = &event["message"];
                let text = text_of(&message["content"]);
                if !text.trim().is_empty() {
                    last_text = Some(text);
                }
                let spent = {
                    let mut usage = usage.lock().unwrap_or_else(|e| e.into_inner());
                    usage.calls += 1;
                    usage.input_tokens += message["usage"]["input"].as_u64().unwrap_or(0);
                    usage.output_tokens += message["usage"]["output"].as_u64().unwrap_or(0);
                    usage.input_tokens + usage.output_tokens
                };
                if spent > max_tokens {
                    over_budget();
                }
                if let Some(error) = message["errorMessage"].as_str() {
                    let mut heard = heard.lock().unwrap_or_else(|e| e.into_inner());
                    heard.last_line = Some(format!("error: {error}"));
                }
            }
            Some("agent_end") => {
                let given = std::fs::read_to_string(&final_file).ok();
                let last = match given.or_else(|| last_text.take()) {
                    Some(text) => Final {
                        status: Status::Completed,
                        result: Some(text.trim().to_string()),
                        error: None,
                    },
                    None => Final {
                        status: Status::Errored,
                        result: None,
                        error: Some(
                            heard
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .last_line
                                .clone()
                                .unwrap_or_else(|| "pi ended without an answer".to_string()),
                        ),
                    },
                };
                heard.lock().unwrap_or_else(|e| e.into_inner()).last = Some(last);
                on_news();
            }
            _ => {}
        }
    }
}

/// The text blocks of a pi content array, joined.
fn text_of(content: &Value) -> String {
    content
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .filter(|block| block["type"] == "text")
                .filter_map(|block| block["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn steps_usage_and_the_final_answer_come_from_pis_events() {
        let events = [
            json!({"type": "session"}),
            json!({"type": "message_end", "message": {"role": "assistant", "content": [{"type": "toolCall"}], "usage": {"input": 10, "output": 2}}}),
            json!({"type": "tool_execution_end", "result": {"content": [{"type": "text", "text": "42\n"}]}}),
            json!({"type": "message_end", "message": {"role": "assistant", "content": [{"type": "text", "text": "The answer is 42."}], "usage": {"input": 20, "output": 5}}}),
            json!({"type": "agent_end", "messages": []}),
        ]
        .iter()
        .map(|event| format!("{event}\n"))
        .collect::<String>();
        let heard: Arc<Mutex<Heard>> = Arc::default();
        let usage: Arc<Mutex<Usage>> = Arc::default();
        let news = Arc::new(Mutex::new(0));
        let over = Arc::new(Mutex::new(false));
        let (n, o) = (Arc::clone(&news), Arc::clone(&over));
        let reading = Reading {
            heard: Arc::clone(&heard),
            usage: Arc::clone(&usage),
            max_tokens: 30,
            final_file: std::path::PathBuf::from("/nonexistent/final_answer.txt"),
        };
        read_events(
            events.as_bytes(),
            reading,
            move || *n.lock().unwrap() += 1,
            move || *o.lock().unwrap() = true,
        )
        .await;
        let heard = heard.lock().unwrap();
        assert_eq!(heard.steps, 1);
        assert_eq!(heard.last_line.as_deref(), Some("42"));
        let last = heard.last.clone().expect("an end");
        assert_eq!(last.status, Status::Completed);
        assert_eq!(last.result.as_deref(), Some("The answer is 42."));
        assert_eq!(usage.lock().unwrap().input_tokens, 30);
        assert_eq!(*news.lock().unwrap(), 2);
        assert!(*over.lock().unwrap(), "37 tokens is over a budget of 30");
    }
}
