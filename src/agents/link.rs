//! The line between a parent host and its child `pi-repl agent`: JSON lines over the child's
//! stdin and stdout.
//!
//! The child asks the parent for every model answer (its own loop's and its cells'
//! `llm_query`), so no key or endpoint is ever in the child, and the parent counts them against
//! the child's token budget and its own session's budgets. The child also reports each step and
//! its final answer, which the parent writes into the child's record (the parent is the record's
//! only writer).
//!
//! Child → parent: `{"op": "complete", "id": N, "prompt": {...}}`,
//! `{"op": "step", "steps": N, "last_line": "..."}`,
//! `{"op": "final", "status": "completed"|"errored", "result": ..., "error": ...}`.
//! Parent → child: `{"id": N, "answer": {"ok": ..., "text": ..., "error": ..., ...}}` (the same
//! answer a cell's `llm_query` gets).
//!
//! When the parent goes away the child's stdin ends: the child ends too (`parent_gone`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::Budget;
use crate::llm::kernel_requests::{Answer, Answerer, KernelRequest};
use crate::llm::ledger::Usage;
use crate::llm::{BoxFuture, Completion, LlmError, ModelBroker, Prompt};

/// A message from the child.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum FromChild {
    Complete {
        id: u64,
        prompt: Prompt,
    },
    Step {
        steps: u32,
        last_line: Option<String>,
    },
    Final(Final),
}

/// How the child's loop ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Final {
    /// `completed` or `errored`.
    pub status: super::Status,
    #[serde(default)]
    pub result: Option<String>,
    #[serde(default)]
    pub error: Option<String>,
}

/// An answer as the child reads it (`kernel_requests::Answer` on the wire).
#[derive(Debug, Clone, Deserialize)]
struct WireAnswer {
    ok: bool,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
}

impl WireAnswer {
    fn into_result(self) -> Result<Completion, LlmError> {
        if self.ok {
            return Ok(Completion {
                text: self.text.unwrap_or_default(),
                model: self.model,
                input_tokens: self.input_tokens,
                output_tokens: self.output_tokens,
            });
        }
        let message = self
            .message
            .unwrap_or_else(|| "the parent could not get a model answer".into());
        Err(match self.error.as_deref() {
            Some("LLMUnavailable") => LlmError::Unavailable(message),
            Some("LLMBudgetExceeded") => LlmError::Budget(message),
            Some("LLMPromptTooLarge") => LlmError::TooLarge(message),
            Some("LLMTimeout") => LlmError::TimedOut(message),
            Some("LLMCancelled") => LlmError::Cancelled,
            _ => LlmError::Failed(message),
        })
    }
}

/// What the parent learned from a child so far.
#[derive(Debug, Default)]
pub struct Heard {
    pub steps: u32,
    pub last_line: Option<String>,
    pub last: Option<Final>,
}

/// What the parent keeps about one child while serving it.
#[derive(Clone)]
pub struct Served {
    /// Told of every message from the child (its processes are looked up: `orphans`).
    pub offspring: Option<Arc<super::orphans::Offspring>>,
    /// Who answers its model requests (the parent's brokers and budgets).
    pub answerer: Option<Answerer>,
    pub budget: Budget,
    /// The tokens and requests it used.
    pub usage: Arc<Mutex<Usage>>,
    pub heard: Arc<Mutex<Heard>>,
    /// Cancels its requests in flight.
    pub cancel: CancellationToken,
}

/// Parent side: serves the child's requests from `from_child` until it closes its stdout.
/// `on_news` is called after each step and at the final answer (the supervisor rewrites the
/// record).
pub async fn serve_child(
    from_child: impl AsyncRead + Unpin,
    mut to_child: impl AsyncWrite + Unpin + Send + 'static,
    served: Served,
    on_news: impl Fn() + Send,
) {
    let Served {
        offspring,
        answerer,
        budget,
        usage,
        heard,
        cancel,
    } = served;
    let (replies, mut outgoing) = mpsc::unbounded_channel::<String>();
    let writer = tokio::spawn(async move {
        while let Some(line) = outgoing.recv().await {
            if to_child.write_all(line.as_bytes()).await.is_err()
                || to_child.write_all(b"\n").await.is_err()
                || to_child.flush().await.is_err()
            {
                break;
            }
        }
    });
    let mut lines = BufReader::new(from_child).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if let Some(offspring) = &offspring {
            offspring.look();
        }
        let message = match serde_json::from_str::<FromChild>(&line) {
            Ok(message) => message,
            Err(error) => {
                tracing::warn!(%error, "a sub-agent wrote a line pi-repl cannot read");
                continue;
            }
        };
        match message {
            FromChild::Complete { id, prompt } => {
                let replies = replies.clone();
                let answerer = answerer.clone();
                let usage = Arc::clone(&usage);
                let cancel = cancel.clone();
                tokio::spawn(async move {
                    let answer = answer_child(answerer, prompt, budget, usage, cancel).await;
                    let line = serde_json::json!({"id": id, "answer": answer}).to_string();
                    let _ = replies.send(line);
                });
            }
            FromChild::Step { steps, last_line } => {
                {
                    let mut heard = heard.lock().unwrap_or_else(|e| e.into_inner());
                    heard.steps = steps;
                    heard.last_line = last_line;
                }
                on_news();
            }
            FromChild::Final(last) => {
                heard.lock().unwrap_or_else(|e| e.into_inner()).last = Some(last);
                on_news();
            }
        }
    }
    drop(replies);
    writer.abort();
}

async fn answer_child(
    answerer: Option<Answerer>,
    prompt: Prompt,
    budget: Budget,
    usage: Arc<Mutex<Usage>>,
    cancel: CancellationToken,
) -> Answer {
    let Some(answerer) = answerer else {
        return Answer::from(Err(LlmError::Unavailable(
            crate::llm::UNAVAILABLE.to_string(),
        )));
    };
    let spent = {
        let usage = usage.lock().unwrap_or_else(|e| e.into_inner());
        usage.input_tokens + usage.output_tokens
    };
    if spent >= budget.tokens {
        return Answer::from(Err(LlmError::Budget(format!(
            "this sub-agent's token budget is spent ({spent} of {} tokens; \
             spawn_agent(budget={{'tokens': N}}) sets it)",
            budget.tokens
        ))));
    }
    let request = KernelRequest {
        pi_repl: crate::llm::kernel_requests::MARKER.to_string(),
        prompts: vec![prompt],
        concurrency: Some(1),
    };
    let mut answers = answerer.serve(request, usage, cancel).await;
    answers.pop().unwrap_or_else(|| {
        Answer::from(Err(LlmError::Failed(
            "pi-repl got no answer for the sub-agent".into(),
        )))
    })
}

/// The child's model requests waiting for the parent's answer, by id.
type Waiting = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Completion, LlmError>>>>>;

/// Child side: the parent host, as a model broker and the receiver of steps and the final
/// answer.
#[derive(Clone)]
pub struct Parent {
    outgoing: mpsc::UnboundedSender<(String, Option<oneshot::Sender<()>>)>,
    waiting: Waiting,
    next: Arc<AtomicU64>,
    /// Fires when the parent closed this process's stdin (it ended, or ended this child).
    pub gone: CancellationToken,
}

impl Parent {
    /// Speaks to the parent over this process's stdin and stdout.
    pub fn over_stdio() -> Parent {
        Parent::over(tokio::io::stdin(), tokio::io::stdout())
    }

    pub fn over(
        from_parent: impl AsyncRead + Unpin + Send + 'static,
        mut to_parent: impl AsyncWrite + Unpin + Send + 'static,
    ) -> Parent {
        let (outgoing, mut lines) =
            mpsc::unbounded_channel::<(String, Option<oneshot::Sender<()>>)>();
        tokio::spawn(async move {
            while let Some((line, written)) = lines.recv().await {
                if to_parent.write_all(line.as_bytes()).await.is_err()
                    || to_parent.write_all(b"\n").await.is_err()
                    || to_parent.flush().await.is_err()
                {
                    break;
                }
                if let Some(written) = written {
                    let _ = written.send(());
                }
            }
        });
        let waiting: Waiting = Arc::default();
        let gone = CancellationToken::new();
        let (reader_waiting, reader_gone) = (Arc::clone(&waiting), gone.clone());
        tokio::spawn(async move {
            let mut lines = BufReader::new(from_parent).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                #[derive(Deserialize)]
                struct Reply {
                    id: u64,
                    answer: WireAnswer,
                }
                let Ok(reply) = serde_json::from_str::<Reply>(&line) else {
                    tracing::warn!("the parent wrote a line this sub-agent cannot read");
                    continue;
                };
                let sender = reader_waiting
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&reply.id);
                if let Some(sender) = sender {
                    let _ = sender.send(reply.answer.into_result());
                }
            }
            reader_gone.cancel();
            // Whoever still waits learns the parent is gone (their senders drop here).
            reader_waiting
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clear();
        });
        Parent {
            outgoing,
            waiting,
            next: Arc::new(AtomicU64::new(1)),
            gone,
        }
    }

    fn send(&self, message: &FromChild) {
        if let Ok(line) = serde_json::to_string(message) {
            let _ = self.outgoing.send((line, None));
        }
    }

    pub fn step(&self, steps: u32, last_line: Option<String>) {
        self.send(&FromChild::Step { steps, last_line });
    }

    /// Tells the parent how the task ended; returns once it is written.
    pub async fn finish(&self, last: Final) {
        let Ok(line) = serde_json::to_string(&FromChild::Final(last)) else {
            return;
        };
        let (written, done) = oneshot::channel();
        if self.outgoing.send((line, Some(written))).is_ok() {
            let _ = done.await;
        }
    }
}

impl ModelBroker for Parent {
    fn available(&self) -> bool {
        !self.gone.is_cancelled()
    }

    fn describe(&self) -> String {
        "the parent pi-repl (sub-agent)".into()
    }

    fn complete<'a>(
        &'a self,
        prompt: &'a Prompt,
        cancel: CancellationToken,
    ) -> BoxFuture<'a, Result<Completion, LlmError>> {
        Box::pin(async move {
            let id = self.next.fetch_add(1, Ordering::SeqCst);
            let (sender, answer) = oneshot::channel();
            self.waiting
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(id, sender);
            self.send(&FromChild::Complete {
                id,
                prompt: prompt.clone(),
            });
            tokio::select! {
                answer = answer => answer.unwrap_or_else(|_| Err(LlmError::Failed(
                    "the parent pi-repl went away before it answered".into(),
                ))),
                _ = cancel.cancelled() => {
                    self.waiting.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
                    Err(LlmError::Cancelled)
                }
            }
        })
    }
}

/// The last non-blank line of `text`, cut at 200 characters: what a frame shows of a child
/// (a step's `last_line`, from its own loop or from a pi child's events).
pub fn last_line(text: &str) -> Option<String> {
    text.lines()
        .rev()
        .find(|line| !line.trim().is_empty())
        .map(|line| line.chars().take(200).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use crate::llm::Brokers;
    use crate::llm::ledger::{Ledger, Limits};

    /// Answers every prompt with its own text reversed, reporting 30 tokens each way.
    struct Echo;

    impl ModelBroker for Echo {
        fn available(&self) -> bool {
            true
        }

        fn describe(&self) -> String {
            "echo".into()
        }

        fn complete<'a>(
            &'a self,
            prompt: &'a Prompt,
            _cancel: CancellationToken,
        ) -> BoxFuture<'a, Result<Completion, LlmError>> {
            Box::pin(async move {
                Ok(Completion {
                    text: prompt.prompt.chars().rev().collect(),
                    model: Some("echo".into()),
                    input_tokens: Some(30),
                    output_tokens: Some(30),
                })
            })
        }
    }

    fn prompt(text: &str) -> Prompt {
        Prompt {
            prompt: text.into(),
            system: None,
            max_tokens: None,
            model: None,
            schema: None,
        }
    }

    #[tokio::test]
    async fn the_parent_answers_within_the_childs_token_budget_and_hears_its_end() {
        let (child_end, parent_end) = tokio::io::duplex(64 * 1024);
        let (from_child, to_child) = tokio::io::split(parent_end);
        let (from_parent, to_parent) = tokio::io::split(child_end);
        let served = Served {
            offspring: None,
            answerer: Some(Answerer {
                brokers: Brokers::new(vec![Arc::new(Echo)]),
                ledger: Arc::new(Ledger::new(Limits::default(), None)),
            }),
            budget: Budget {
                seconds: 60,
                tokens: 100,
                steps: 5,
            },
            usage: Arc::default(),
            heard: Arc::default(),
            cancel: CancellationToken::new(),
        };
        let (usage, heard) = (Arc::clone(&served.usage), Arc::clone(&served.heard));
        let (told, mut news) = mpsc::unbounded_channel::<()>();
        let serving = tokio::spawn(serve_child(from_child, to_child, served, move || {
            let _ = told.send(());
        }));
        let parent = Parent::over(from_parent, to_parent);
        let first = parent
            .complete(&prompt("abc"), CancellationToken::new())
            .await;
        assert_eq!(first.map(|c| c.text), Ok("cba".to_string()));
        parent.step(1, Some("one".into()));
        let second = parent
            .complete(&prompt("de"), CancellationToken::new())
            .await;
        assert_eq!(second.map(|c| c.text), Ok("ed".to_string()));
        // 120 tokens spent of 100: the next request is refused without being sent.
        let third = parent
            .complete(&prompt("f"), CancellationToken::new())
            .await;
        assert!(
            matches!(&third, Err(LlmError::Budget(m)) if m.contains("120 of 100 tokens")),
            "{third:?}"
        );
        parent
            .finish(Final {
                status: super::super::Status::Completed,
                result: Some("done".into()),
                error: None,
            })
            .await;
        // Told twice: the step, then the final answer.
        for _ in 0..2 {
            tokio::time::timeout(Duration::from_secs(10), news.recv())
                .await
                .expect("news in time")
                .expect("news");
        }
        let usage = *usage.lock().unwrap();
        assert_eq!(
            (usage.calls, usage.input_tokens + usage.output_tokens),
            (2, 120)
        );
        let heard = heard.lock().unwrap();
        assert_eq!(heard.steps, 1);
        assert_eq!(
            heard.last.as_ref().and_then(|l| l.result.as_deref()),
            Some("done")
        );
        serving.abort();
    }
}
