//! Budgets and usage of model requests: per cell and per session, checked before a request is
//! sent and summed after it answers.
//!
//! Owns: the limits ([`Limits`], from flags and `PI_REPL_LLM_*`), the session's running totals
//! (kept in `<session>/llm-usage.json` for a durable session, so a restart does not reset the
//! budget), and the size check of a prompt.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Completion, LlmError, Prompt, estimated_tokens};

/// Limits on model requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Requests one cell may make.
    pub calls_per_cell: u64,
    /// Requests the session may make in all.
    pub calls_per_session: u64,
    /// Input plus output tokens the session may use in all.
    pub tokens_per_session: u64,
    /// The largest prompt sent, in estimated tokens (4 characters each).
    pub prompt_tokens: u64,
    /// How long one request may take.
    pub timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            calls_per_cell: 200,
            calls_per_session: 5_000,
            tokens_per_session: 20_000_000,
            prompt_tokens: 150_000,
            timeout: Duration::from_secs(300),
        }
    }
}

/// Requests and tokens used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub calls: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Answers whose answerer reported no token counts (MCP sampling does not): their tokens
    /// are estimated from the text (4 characters each).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub estimated: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Usage {
    fn add(&mut self, prompt: &Prompt, completion: &Completion) {
        match (completion.input_tokens, completion.output_tokens) {
            (Some(input), Some(output)) => {
                self.input_tokens += input;
                self.output_tokens += output;
            }
            (input, output) => {
                self.estimated += 1;
                self.input_tokens += input.unwrap_or_else(|| estimated_tokens(prompt));
                self.output_tokens +=
                    output.unwrap_or_else(|| (completion.text.chars().count() as u64).div_ceil(4));
            }
        }
    }

    fn tokens(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }
}

/// The session's budget and totals.
#[derive(Debug)]
pub struct Ledger {
    limits: Limits,
    session: Mutex<Usage>,
    /// Where a durable session keeps its totals.
    path: Option<PathBuf>,
}

/// The file a durable session's totals are kept in.
pub const USAGE_FILE: &str = "llm-usage.json";

impl Ledger {
    /// A ledger with `limits`; `session_dir` for a durable session (its totals so far are read).
    pub fn new(limits: Limits, session_dir: Option<&Path>) -> Ledger {
        let path = session_dir.map(|dir| dir.join(USAGE_FILE));
        let session = path.as_deref().and_then(read_usage).unwrap_or_default();
        Ledger {
            limits,
            session: Mutex::new(session),
            path,
        }
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The session's totals.
    pub fn session(&self) -> Usage {
        *self.lock()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Usage> {
        self.session
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Admits one request of a cell that has used `cell` so far: counts it, or says which
    /// limit it would pass.
    pub fn admit(&self, cell: &mut Usage, prompt: &Prompt) -> Result<(), LlmError> {
        let size = estimated_tokens(prompt);
        if size > self.limits.prompt_tokens {
            return Err(LlmError::TooLarge(format!(
                "the prompt is about {size} tokens ({} characters), over the limit of {} tokens \
                 (--llm-max-prompt-tokens): split the input and query the parts",
                size * 4,
                self.limits.prompt_tokens
            )));
        }
        if cell.calls >= self.limits.calls_per_cell {
            return Err(LlmError::Budget(format!(
                "this cell has made {} model requests, its limit (--llm-max-calls-per-cell)",
                cell.calls
            )));
        }
        let mut session = self.lock();
        if session.calls >= self.limits.calls_per_session {
            return Err(LlmError::Budget(format!(
                "this session has made {} model requests, its limit (--llm-max-calls)",
                session.calls
            )));
        }
        if session.tokens() >= self.limits.tokens_per_session {
            return Err(LlmError::Budget(format!(
                "this session has used {} tokens, its limit (--llm-max-tokens)",
                session.tokens()
            )));
        }
        session.calls += 1;
        cell.calls += 1;
        let totals = *session;
        drop(session);
        self.persist(totals);
        Ok(())
    }

    /// Adds an answer's tokens to the cell's and the session's totals (estimated when the
    /// answerer does not say).
    pub fn record(&self, cell: &mut Usage, prompt: &Prompt, completion: &Completion) {
        cell.add(prompt, completion);
        let totals = {
            let mut session = self.lock();
            session.add(prompt, completion);
            *session
        };
        self.persist(totals);
    }

    fn persist(&self, totals: Usage) {
        let Some(path) = &self.path else {
            return;
        };
        let written = serde_json::to_vec(&totals)
            .map_err(anyhow::Error::from)
            .and_then(|bytes| crate::fsutil::write_atomic(path, &bytes));
        if let Err(error) = written {
            tracing::warn!(%error, "could not write the session's model usage");
        }
    }
}

/// A durable session's totals, if it has any.
pub fn read_usage(path: &Path) -> Option<Usage> {
    let bytes = std::fs::read(path).ok()?;
    serde_json::from_slice(&bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prompt(chars: usize) -> Prompt {
        Prompt {
            prompt: "x".repeat(chars),
            system: None,
            max_tokens: None,
            model: None,
            schema: None,
        }
    }

    fn answer(input: u64, output: u64) -> Completion {
        Completion {
            text: "ok".into(),
            model: None,
            input_tokens: Some(input),
            output_tokens: Some(output),
        }
    }

    #[test]
    fn the_eleventh_call_of_a_cell_limited_to_ten_is_refused() {
        let ledger = Ledger::new(
            Limits {
                calls_per_cell: 10,
                ..Limits::default()
            },
            None,
        );
        let mut cell = Usage::default();
        for _ in 0..10 {
            ledger.admit(&mut cell, &prompt(10)).expect("within budget");
        }
        let refused = ledger.admit(&mut cell, &prompt(10)).unwrap_err();
        assert_eq!(refused.kind(), "LLMBudgetExceeded");
        assert!(refused.to_string().contains("--llm-max-calls-per-cell"));
        let mut next_cell = Usage::default();
        ledger
            .admit(&mut next_cell, &prompt(10))
            .expect("a new cell");
    }

    #[test]
    fn an_answer_without_token_counts_is_estimated_and_says_so() {
        let ledger = Ledger::new(Limits::default(), None);
        let mut cell = Usage::default();
        ledger.admit(&mut cell, &prompt(400)).unwrap();
        let unreported = Completion {
            text: "y".repeat(40),
            model: None,
            input_tokens: None,
            output_tokens: None,
        };
        ledger.record(&mut cell, &prompt(400), &unreported);
        assert_eq!(
            (cell.input_tokens, cell.output_tokens, cell.estimated),
            (100, 10, 1)
        );
    }

    #[test]
    fn a_prompt_over_the_size_limit_is_refused_naming_its_size() {
        let ledger = Ledger::new(
            Limits {
                prompt_tokens: 100,
                ..Limits::default()
            },
            None,
        );
        let refused = ledger
            .admit(&mut Usage::default(), &prompt(1000))
            .unwrap_err();
        assert_eq!(refused.kind(), "LLMPromptTooLarge");
        assert!(
            refused.to_string().contains("about 250 tokens"),
            "{refused}"
        );
    }

    #[test]
    fn a_durable_session_keeps_its_totals_and_its_token_budget_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let limits = Limits {
            tokens_per_session: 100,
            ..Limits::default()
        };
        let ledger = Ledger::new(limits, Some(dir.path()));
        let mut cell = Usage::default();
        ledger.admit(&mut cell, &prompt(4)).unwrap();
        ledger.record(&mut cell, &prompt(4), &answer(70, 40));
        assert_eq!(
            cell,
            Usage {
                calls: 1,
                input_tokens: 70,
                output_tokens: 40,
                estimated: 0
            }
        );
        let again = Ledger::new(limits, Some(dir.path()));
        assert_eq!(again.session().output_tokens, 40);
        let refused = again.admit(&mut Usage::default(), &prompt(4)).unwrap_err();
        assert!(
            refused.to_string().contains("--llm-max-tokens"),
            "{refused}"
        );
    }
}
