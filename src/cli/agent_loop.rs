//! A sub-agent's own loop, the front door of `pi-repl agent` (as `mcp.rs` is of `pi-repl mcp`):
//! ask the model, run the code it writes as a cell in this workspace's
//! kernel, show it the output, until it gives its final answer.
//!
//! The convention (told to the model in [`SYSTEM_PROMPT`]): each reply holds one fenced
//! ```` ```python ```` block, run as the next cell; the task ends when a cell calls
//! `final_answer(text)` (a default helper), or when a reply holds no code block (the reply is
//! then the answer). Bounded by the budget's steps here; its time and tokens are enforced by
//! the parent, which answers every model request (`link`).

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::agents::Status;
use crate::agents::link::{Final, Parent, last_line};
use crate::agents::supervisor::{Supervisor, TaskFile};
use crate::engine::outcome::Outcome;
use crate::engine::{CellOptions, Engine};
use crate::llm::{ModelBroker, Prompt};

/// What the child's model is told.
pub const SYSTEM_PROMPT: &str = "You are a sub-agent working in a persistent Python workspace \
(a Jupyter kernel). To act, reply with exactly one fenced ```python code block; it runs as the \
next cell and you are shown its output. Variables, imports and files persist between cells. The \
workspace may already hold data from the agent that started you: look with `dir()` or \
`globals()`. Helpers available: read, write, edit, bash, llm_query, llm_query_batched, \
spawn_agent. When you have the answer, call `final_answer(text)` in a cell (text is a string), \
or reply with the answer and no code block. Be brief.";

/// Most characters of one cell's output shown back to the model.
const OUTPUT_CHARS: usize = 8_000;

/// Runs the task to its end.
pub async fn run(
    task: &TaskFile,
    engine: &Engine,
    parent: &Parent,
    supervisor: &Arc<Supervisor>,
) -> Final {
    let mut transcript = format!("# Task\n{}\n", task.task);
    say(&format!("task: {}", task.task));
    for step in 1..=task.budget.steps {
        let prompt = Prompt {
            prompt: transcript.clone(),
            system: Some(SYSTEM_PROMPT.to_string()),
            max_tokens: None,
            model: task.model.clone(),
            schema: None,
        };
        let reply = match parent.complete(&prompt, CancellationToken::new()).await {
            Ok(completion) => completion.text,
            Err(error) => {
                say(&format!("the model request failed: {error}"));
                return errored(format!("its model request failed: {error}"));
            }
        };
        say(&format!("model (step {step}):\n{reply}"));
        let Some(code) = code_block(&reply) else {
            return Final {
                status: Status::Completed,
                result: Some(reply.trim().to_string()),
                error: None,
            };
        };
        let output = match engine
            .submit(code.clone(), CellOptions::default())
            .outcome()
            .await
        {
            Ok(outcome) => shown(&outcome),
            Err(error) => {
                say(&format!("the cell could not run: {error}"));
                return errored(format!("a cell could not run: {error}"));
            }
        };
        say(&format!("output (step {step}):\n{output}"));
        if let Some(answer) = supervisor.take_final_answer() {
            parent.step(step, last_line(&answer));
            return Final {
                status: Status::Completed,
                result: Some(answer),
                error: None,
            };
        }
        parent.step(step, last_line(&output));
        transcript.push_str(&format!(
            "\n# Step {step}: your cell\n```python\n{code}\n```\n# Its output\n{output}\n"
        ));
    }
    errored(format!(
        "its step budget ran out ({} cells) before a final answer \
         (spawn_agent(budget={{'steps': N}}) sets it)",
        task.budget.steps
    ))
}

fn errored(error: String) -> Final {
    Final {
        status: Status::Errored,
        result: None,
        error: Some(error),
    }
}

/// A line of the transcript (`<id>.log`, the child's stderr).
pub fn say(text: &str) {
    crate::stderr_line!("[{}] {text}", chrono::Local::now().format("%H:%M:%S"));
}

/// The first fenced code block of a reply (```python, ```py or a bare ```).
pub fn code_block(reply: &str) -> Option<String> {
    let mut lines = reply.lines();
    while let Some(line) = lines.next() {
        let fence = line.trim_start();
        let Some(info) = fence.strip_prefix("```") else {
            continue;
        };
        let info = info.trim().to_ascii_lowercase();
        if !(info.is_empty() || info == "python" || info == "py" || info == "python3") {
            continue;
        }
        let mut code = Vec::new();
        for line in lines.by_ref() {
            if line.trim_start().starts_with("```") {
                break;
            }
            code.push(line);
        }
        let code = code.join("\n");
        return (!code.trim().is_empty()).then_some(code);
    }
    None
}

/// A cell's outcome as the model is shown it: the text an MCP client would see, capped.
fn shown(outcome: &Outcome) -> String {
    let budget = crate::view::ImageBudget {
        max_side: crate::view::DEFAULT_MAX_SIDE,
        max_count: 0,
    };
    let rendered = crate::view::render::render(outcome, budget, None);
    let value = serde_json::to_value(&rendered).unwrap_or_default();
    let mut text: String = value["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|block| block["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n");
    if text.trim().is_empty() {
        text = "(no output)".to_string();
    }
    if text.chars().count() > OUTPUT_CHARS {
        let head: String = text.chars().take(OUTPUT_CHARS).collect();
        text = format!("{head}\n[... output cut at {OUTPUT_CHARS} characters]");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_python_block_is_the_cell_and_no_block_is_an_answer() {
        assert_eq!(
            code_block("Let me look.\n```python\nx = 1\nprint(x)\n```\nthen more"),
            Some("x = 1\nprint(x)".into())
        );
        assert_eq!(
            code_block("```\nfinal_answer('a')\n```"),
            Some("final_answer('a')".into())
        );
        assert_eq!(code_block("```json\n{}\n```"), None, "not Python");
        assert_eq!(code_block("The answer is 42."), None);
    }
}
