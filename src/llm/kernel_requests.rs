//! How a running cell asks the host for model answers: the Jupyter stdin channel.
//!
//! Why this channel: it is the protocol's own way for a running cell to ask its front end
//! something (`input_request` → `input_reply`), every message on it is signed with the kernel's
//! HMAC key (only the host and the kernel hold it), ipykernel's wait for the reply is
//! interruptible (a `KeyboardInterrupt` ends it, and a reply that arrives later is discarded by
//! the next request), and it works unchanged for a kernel reached over a Jupyter server. A comm
//! would need a message loop the busy kernel does not run during a cell. The cell's own
//! `input()` stays refused: pi-repl sends every cell with `allow_stdin: false`, so ipykernel's
//! `input()`/`getpass()` fail as before, while `pi_repl_kernel.model_requests` sends its request
//! itself and marks it as pi-repl's (`"pi_repl": "llm/1"`); anything else on the channel is
//! answered with an empty string.
//!
//! One request carries a batch of prompts (`llm_query` sends one, `llm_query_batched` many) and
//! the host answers them `concurrency` at a time; the reply holds one answer per prompt, in
//! order, each either the text or the error to raise.
//!
//! Owns: the wire format, and serving one batch (budget, size check, time limit, cancellation).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::ledger::{Ledger, Usage};
use super::{Brokers, Completion, LlmError, Prompt};

/// The marker of a pi-repl request in the `input_request` prompt.
pub const MARKER: &str = "llm/1";

/// Most prompts answered at once, whatever the cell asks.
pub const MAX_CONCURRENCY: usize = 16;

/// A cell's request, as the kernel module sends it in `input_request.prompt`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct KernelRequest {
    pub pi_repl: String,
    pub prompts: Vec<Prompt>,
    #[serde(default)]
    pub concurrency: Option<usize>,
}

/// Reads an `input_request` prompt: a pi-repl model request, or `None` for anything else.
pub fn parse(prompt: &str) -> Option<Result<KernelRequest, String>> {
    let value: serde_json::Value = serde_json::from_str(prompt).ok()?;
    if value.get("pi_repl").and_then(|v| v.as_str()) != Some(MARKER) {
        return None;
    }
    Some(
        serde_json::from_value(value)
            .map_err(|error| format!("pi-repl could not read the model request: {error}")),
    )
}

/// One answer in a reply.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Answer {
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The Python exception to raise (`LLMUnavailable`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
}

impl From<Result<Completion, LlmError>> for Answer {
    fn from(result: Result<Completion, LlmError>) -> Answer {
        match result {
            Ok(completion) => Answer {
                ok: true,
                text: Some(completion.text),
                model: completion.model,
                error: None,
                message: None,
                input_tokens: completion.input_tokens,
                output_tokens: completion.output_tokens,
            },
            Err(error) => Answer {
                ok: false,
                text: None,
                model: None,
                error: Some(error.kind().to_string()),
                message: Some(error.to_string()),
                input_tokens: None,
                output_tokens: None,
            },
        }
    }
}

/// The `input_reply` value for a batch's answers.
pub fn reply(answers: Vec<Answer>) -> String {
    serde_json::json!({ "answers": answers }).to_string()
}

/// The `input_reply` value for a request that could not be read.
pub fn reply_unreadable(message: &str) -> String {
    reply(vec![Answer::from(Err(LlmError::Failed(
        message.to_string(),
    )))])
}

/// The `input_request` prompt of a stdin message, if it is one.
pub fn prompt_of(message: &jupyter_protocol::JupyterMessage) -> Option<&str> {
    match &message.content {
        jupyter_protocol::JupyterMessageContent::InputRequest(request) => {
            Some(request.prompt.as_str())
        }
        _ => None,
    }
}

/// The reply to a stdin request that arrives while no user cell runs (a background thread of
/// an earlier cell, a helper file at load): a pi-repl request gets an error answer, anything
/// else an empty string.
pub fn refusal(message: &jupyter_protocol::JupyterMessage) -> String {
    if let Some(Ok(_)) = prompt_of(message).and_then(crate::host_tools::requests::parse) {
        return crate::host_tools::requests::refuse(&crate::host_tools::requests::Refusal::Failed(
            "host tools can only be called while a cell runs (not from a thread whose cell has \
             ended, nor while helpers load)"
                .to_string(),
        ));
    }
    match prompt_of(message).and_then(parse) {
        Some(_) => reply(vec![Answer::from(Err(LlmError::Failed(
            "llm_query can only run while a cell runs (not from a thread whose cell has ended, \
             nor while helpers load)"
                .to_string(),
        )))]),
        None => String::new(),
    }
}

/// What serving a cell's requests needs.
#[derive(Debug, Clone)]
pub struct Answerer {
    pub brokers: Brokers,
    pub ledger: Arc<Ledger>,
}

impl Answerer {
    /// Answers one batch, `concurrency` at a time, in order. Each prompt is checked against
    /// the budget (`cell` is this cell's running total) and bounded by the time limit; all stop
    /// when `cancel` fires (the cell was interrupted).
    pub async fn serve(
        &self,
        request: KernelRequest,
        cell: Arc<Mutex<Usage>>,
        cancel: CancellationToken,
    ) -> Vec<Answer> {
        if self.brokers.current().is_none() {
            // Nobody can answer: said once per prompt, and no budget spent.
            let error = LlmError::Unavailable(super::UNAVAILABLE.to_string());
            return request
                .prompts
                .iter()
                .map(|_| Answer::from(Err(error.clone())))
                .collect();
        }
        let concurrency = request.concurrency.unwrap_or(1).clamp(1, MAX_CONCURRENCY);
        let gate = Arc::new(tokio::sync::Semaphore::new(concurrency));
        let timeout = self.ledger.limits().timeout;
        let mut tasks = Vec::with_capacity(request.prompts.len());
        for prompt in request.prompts {
            let gate = Arc::clone(&gate);
            let answerer = self.clone();
            let cell = Arc::clone(&cell);
            let cancel = cancel.clone();
            tasks.push(tokio::spawn(async move {
                let Ok(_permit) = gate.acquire_owned().await else {
                    return Answer::from(Err(LlmError::Cancelled));
                };
                answerer.answer(&prompt, &cell, cancel, timeout).await
            }));
        }
        let mut answers = Vec::with_capacity(tasks.len());
        for task in tasks {
            answers.push(task.await.unwrap_or_else(|error| {
                Answer::from(Err(LlmError::Failed(format!(
                    "pi-repl failed while asking the model: {error}"
                ))))
            }));
        }
        answers
    }

    async fn answer(
        &self,
        prompt: &Prompt,
        cell: &Mutex<Usage>,
        cancel: CancellationToken,
        timeout: Duration,
    ) -> Answer {
        if cancel.is_cancelled() {
            return Answer::from(Err(LlmError::Cancelled));
        }
        {
            let mut usage = cell
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Err(error) = self.ledger.admit(&mut usage, prompt) {
                return Answer::from(Err(error));
            }
        }
        // The broker itself ends on `cancel` (so it can tell its answerer, e.g. MCP's
        // `notifications/cancelled`); a time limit cancels it the same way.
        let token = cancel.child_token();
        let asked = self.brokers.complete(prompt, token.clone());
        tokio::pin!(asked);
        let result = tokio::select! {
            result = &mut asked => result,
            _ = tokio::time::sleep(timeout) => {
                token.cancel();
                let _ = (&mut asked).await;
                Err(LlmError::TimedOut(format!(
                    "the model did not answer within {} s (--llm-timeout-ms)",
                    timeout.as_secs()
                )))
            }
        };
        if let Ok(completion) = &result {
            let mut usage = cell
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            self.ledger.record(&mut usage, prompt, completion);
        }
        Answer::from(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_marked_requests_are_pi_repls() {
        assert!(parse("Name: ").is_none());
        assert!(parse(r#"{"pi_repl": "other"}"#).is_none());
        let request =
            parse(r#"{"pi_repl": "llm/1", "prompts": [{"prompt": "hi"}], "concurrency": 4}"#)
                .expect("marked")
                .expect("readable");
        assert_eq!(request.prompts[0].prompt, "hi");
        assert_eq!(request.concurrency, Some(4));
        assert!(
            parse(r#"{"pi_repl": "llm/1", "prompts": 3}"#)
                .expect("marked")
                .is_err()
        );
    }

    #[test]
    fn an_error_answer_names_the_exception_to_raise() {
        let answer = Answer::from(Err(LlmError::Unavailable("configure it".into())));
        let text = reply(vec![answer]);
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["answers"][0]["ok"], false);
        assert_eq!(value["answers"][0]["error"], "LLMUnavailable");
        assert_eq!(value["answers"][0]["message"], "configure it");
    }
}
