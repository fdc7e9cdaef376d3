//! Models called from a cell: `llm_query(...)` in the kernel asks the host, and the host asks a
//! model on the kernel's behalf, so no key ever enters the kernel.
//!
//! Owns: what a request and an answer are ([`Prompt`], [`Completion`]), why one fails
//! ([`LlmError`]), who answers ([`ModelBroker`], tried in order by [`Brokers`]), and the
//! budgets and usage of a session ([`ledger`]).
//! The kernel asks over the Jupyter stdin channel (`kernel_requests`: why that channel, and the
//! wire format); the MCP client answers through `sampling/createMessage` (`sampling`); a
//! configured endpoint answers otherwise (`provider`).

pub mod kernel_requests;
pub mod ledger;
pub mod provider;
pub mod sampling;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

/// A boxed future, for the object-safe broker trait.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One model request from a cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prompt {
    pub prompt: String,
    #[serde(default)]
    pub system: Option<String>,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// A model name the answerer should prefer (a hint over MCP sampling).
    #[serde(default)]
    pub model: Option<String>,
    /// A JSON schema the answer must follow (the kernel validates the answer).
    #[serde(default)]
    pub schema: Option<serde_json::Value>,
}

/// Tokens a prompt would take, estimated as the providers' rule of thumb (4 characters each).
pub fn estimated_tokens(prompt: &Prompt) -> u64 {
    let chars = prompt.prompt.chars().count()
        + prompt.system.as_deref().map_or(0, |s| s.chars().count())
        + prompt
            .schema
            .as_ref()
            .map_or(0, |s| s.to_string().chars().count());
    (chars as u64).div_ceil(4)
}

/// The system prompt sent with `prompt`: the cell's own, followed, when the cell gives a schema,
/// by the instruction to answer with JSON that follows it. `None` when there is neither.
pub fn system_prompt(prompt: &Prompt) -> Option<String> {
    let mut system = prompt.system.clone().unwrap_or_default();
    if let Some(schema) = &prompt.schema {
        if !system.is_empty() {
            system.push_str("\n\n");
        }
        system.push_str(&format!(
            "Answer with a single JSON value and nothing else. It must follow this JSON schema:\n{schema}"
        ));
    }
    (!system.is_empty()).then_some(system)
}

/// A model's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Completion {
    pub text: String,
    /// The model that answered, when the answerer says.
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub input_tokens: Option<u64>,
    #[serde(default)]
    pub output_tokens: Option<u64>,
}

/// Why a model request got no answer. The kernel raises the matching Python exception.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LlmError {
    /// Nobody can answer: what to configure.
    #[error("{0}")]
    Unavailable(String),
    /// A budget would be exceeded.
    #[error("{0}")]
    Budget(String),
    /// The prompt is larger than allowed.
    #[error("{0}")]
    TooLarge(String),
    /// The answerer failed (an HTTP error, a refusal, a malformed answer).
    #[error("{0}")]
    Failed(String),
    /// No answer within the time limit.
    #[error("{0}")]
    TimedOut(String),
    /// The cell was interrupted.
    #[error("the request was cancelled because the cell was interrupted")]
    Cancelled,
}

impl LlmError {
    /// The Python exception class the kernel raises.
    pub fn kind(&self) -> &'static str {
        match self {
            LlmError::Unavailable(_) => "LLMUnavailable",
            LlmError::Budget(_) => "LLMBudgetExceeded",
            LlmError::TooLarge(_) => "LLMPromptTooLarge",
            LlmError::Failed(_) => "LLMError",
            LlmError::TimedOut(_) => "LLMTimeout",
            LlmError::Cancelled => "LLMCancelled",
        }
    }
}

/// Something that can answer model requests.
pub trait ModelBroker: Send + Sync {
    /// Whether it can answer now (an MCP client that declared `sampling`, a configured
    /// endpoint).
    fn available(&self) -> bool;

    /// Who answers, for the docs and errors: "the MCP client (sampling)".
    fn describe(&self) -> String;

    /// Answers `prompt`; when `cancel` fires, it tells its answerer if it can and returns
    /// `LlmError::Cancelled` promptly (callers rely on it: they do not drop the future).
    fn complete<'a>(
        &'a self,
        prompt: &'a Prompt,
        cancel: CancellationToken,
    ) -> BoxFuture<'a, Result<Completion, LlmError>>;
}

/// What to configure when nobody can answer.
pub const UNAVAILABLE: &str = "no model is available to answer llm_query: connect pi-repl to an \
    MCP client that supports sampling (the pi extension does), or configure an endpoint for the \
    host with --llm-base-url URL --llm-model NAME (or PI_REPL_LLM_BASE_URL, PI_REPL_LLM_MODEL; \
    the key is read by pi-repl from PI_REPL_LLM_API_KEY and never reaches the kernel)";

/// The answerers, tried in order: the first available one answers.
#[derive(Clone, Default)]
pub struct Brokers {
    list: Vec<Arc<dyn ModelBroker>>,
}

impl Brokers {
    pub fn new(list: Vec<Arc<dyn ModelBroker>>) -> Brokers {
        Brokers { list }
    }

    /// The same list with `first` tried before the others.
    pub fn with_first(&self, first: Arc<dyn ModelBroker>) -> Brokers {
        let mut list = vec![first];
        list.extend(self.list.iter().cloned());
        Brokers { list }
    }

    /// The broker that answers now, if any.
    pub fn current(&self) -> Option<Arc<dyn ModelBroker>> {
        self.list.iter().find(|broker| broker.available()).cloned()
    }

    /// Answers `prompt` with the first available broker.
    pub async fn complete(
        &self,
        prompt: &Prompt,
        cancel: CancellationToken,
    ) -> Result<Completion, LlmError> {
        match self.current() {
            Some(broker) => broker.complete(prompt, cancel).await,
            None => Err(LlmError::Unavailable(UNAVAILABLE.to_string())),
        }
    }
}

impl std::fmt::Debug for Brokers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self.list.iter().map(|b| b.describe()).collect();
        f.debug_struct("Brokers").field("list", &names).finish()
    }
}
