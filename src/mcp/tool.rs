//! The `execute` tool as the model sees it: name, input schema (generated from the typed
//! arguments, `execute_args`), and its manual.
//!
//! The description is the model's whole manual, so it is short and exact: what persists, how
//! resets are announced, how output is capped, and the functions loaded into the workspace
//! (exactly what the kernel holds). Built once per server, so `tools/list` is stable.

use rmcp::model::{JsonObject, MetaObject, Tool, ToolAnnotations};
use serde_json::json;

use super::execute_args::input_schema;

/// The tool's name.
pub const TOOL_NAME: &str = "execute";

/// A function loaded into the workspace, as listed to the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedFunction {
    pub name: String,
    /// `(path, offset=None, limit=None)`
    pub signature: String,
    pub summary: Option<String>,
}

impl ListedFunction {
    pub fn line(&self) -> String {
        match &self.summary {
            Some(summary) => format!("{}{} — {summary}", self.name, self.signature),
            None => format!("{}{}", self.name, self.signature),
        }
    }
}

/// The functions the model sees, from the helper records in load order: what loaded, once per
/// name, a later (nearer) definition replacing an earlier one in place.
pub fn listed_functions(records: &[crate::helpers::LoadRecord]) -> Vec<ListedFunction> {
    let mut listed: Vec<ListedFunction> = Vec::new();
    for record in records.iter().filter(|r| r.error.is_none()) {
        for function in &record.functions {
            let entry = ListedFunction {
                name: function.name.clone(),
                signature: function.signature.clone().unwrap_or_default(),
                summary: record
                    .summary
                    .clone()
                    .filter(|_| record.functions.len() == 1)
                    .or_else(|| function.summary.clone()),
            };
            match listed.iter_mut().find(|l| l.name == entry.name) {
                Some(existing) => *existing = entry,
                None => listed.push(entry),
            }
        }
    }
    listed
}

/// What goes into the manual besides the fixed text.
#[derive(Debug, Clone, Default)]
pub struct Manual {
    pub functions: Vec<ListedFunction>,
    /// Characters per output channel before the middle is cut.
    pub max_output_chars: usize,
    /// How long a call waits for its cell by default before answering `running`; `None`
    /// waits for the end.
    pub wait: Option<std::time::Duration>,
    /// The kernelspec when it is not pi-repl's Python kernel (`--kernel deno`): the
    /// description then speaks of that kernel, with no Python workspace features.
    pub other_kernel: Option<String>,
    /// How long results may be (`--max-result-chars`): declared to Claude Code in `_meta`.
    pub result_limit: super::fit::ResultLimit,
}

/// One line for a system prompt's tool list (the host prints the tool's name before it).
pub const PROMPT_SNIPPET: &str =
    "run Python in a persistent workspace (state survives across calls and restarts)";

impl Manual {
    pub fn description(&self) -> String {
        if let Some(kernel) = &self.other_kernel {
            return self.other_kernel_description(kernel);
        }
        let mut text = String::from(
            "Run Python code in a persistent workspace: a real IPython kernel whose variables, \
             functions, imports and data stay alive across calls. The code runs like a notebook \
             cell: what it prints is returned, then the value of its last expression.\n\n",
        );
        text.push_str(&format!(
            "- Output over {} characters per stream keeps its head and tail; the full output is \
             saved to a file named in the result. Lines over 4096 characters are cut.\n",
            self.max_output_chars
        ));
        text.push_str(
            "- The workspace is saved after successful calls and revived after a crash or \
             restart. When it was rebuilt, the result starts with a <repl_engine_reset> block \
             saying why, what came back and what was lost: re-check before relying on earlier \
             state.\n\
             - input() is unavailable. A call can be bounded with timeout_ms; an aborted call \
             raises KeyboardInterrupt and the workspace survives.\n\
             - As in a notebook: a trailing `;` hides the value; `_`, `__`, `Out[n]` hold the \
             last 10 results; tracebacks say `Cell In[n]` for call n; `obj?` shows help. Output \
             a background thread prints after its call ended arrives with the next result, under \
             `[output from cell n after it finished]`.\n\
             - Add a package with `%pip install NAME` (uv when available); `python` and `pip` in \
             a shell are the workspace's own, and a durable session keeps what you add.\n",
        );
        if let Some(wait) = self.wait {
            text.push_str(&format!(
                "- A call waits up to {} (or wait_ms) for its cell. A longer cell keeps \
                 running: the result says `running` with its output so far; collect it later \
                 with {{\"cell\": N}} (new output, then its outcome), stop it with \
                 {{\"cell\": N, \"interrupt\": true}}. New code queues behind it.\n",
                crate::mcp::seconds_text(wait)
            ));
        }
        if self.functions.is_empty() {
            text.push_str("- Run shell commands with Python's subprocess module.\n");
        } else {
            text.push_str(
                "- Functions already loaded in the workspace (help(name) shows details):\n",
            );
            for function in &self.functions {
                text.push_str(&format!("  {}\n", function.line()));
            }
        }
        text
    }

    /// The description for a kernel that does not run pi-repl's Python workspace.
    fn other_kernel_description(&self, kernel: &str) -> String {
        let mut text = format!(
            "Run code in a persistent Jupyter kernel (`{kernel}`, in that kernel's language, \
             not Python): its variables, functions and imports stay alive across calls while \
             the kernel lives. The code runs like a notebook cell: what it prints is returned, \
             then the value of its last expression.\n\n"
        );
        text.push_str(&format!(
            "- Output over {} characters per stream keeps its head and tail; the full output is \
             saved to a file named in the result.\n\
             - The workspace is not saved: when the kernel dies or restarts, the result starts \
             with a <repl_engine_reset> block and earlier state is gone.\n\
             - A call can be bounded with timeout_ms; an aborted call is interrupted and the \
             kernel survives if it honours the interrupt.\n",
            self.max_output_chars
        ));
        if let Some(wait) = self.wait {
            text.push_str(&format!(
                "- A call waits up to {} (or wait_ms) for its cell; a longer one answers \
                 `running`: collect it with {{\"cell\": N}}, stop it with \
                 {{\"cell\": N, \"interrupt\": true}}.\n",
                crate::mcp::seconds_text(wait)
            ));
        }
        text
    }

    /// Short rules for a system prompt, one per line.
    pub fn guidelines(&self) -> Vec<String> {
        let mut lines = vec![
            "Keep state in variables instead of re-reading or re-deriving it; print only what the \
             next step needs."
                .to_string(),
            "After a <repl_engine_reset> notice, check which variables exist before using them."
                .to_string(),
        ];
        if !self.functions.is_empty() {
            lines.push(
                "Use the loaded functions (read, write, edit, bash, ...) for files and shell \
                 commands; they return values you can keep working with."
                    .to_string(),
            );
        }
        lines
    }

    /// The tool definition served by `tools/list`.
    pub fn tool(&self) -> Tool {
        let mut tool = Tool::new(TOOL_NAME, self.description(), input_schema());
        tool.annotations = Some(
            ToolAnnotations::new()
                .read_only(false)
                .destructive(true)
                .idempotent(false)
                .open_world(true),
        );
        let mut meta = JsonObject::new();
        meta.insert("pi-repl/promptSnippet".into(), json!(PROMPT_SNIPPET));
        meta.insert("pi-repl/promptGuidelines".into(), json!(self.guidelines()));
        meta.insert(
            super::fit::CLAUDE_CODE_MAX_RESULT_META.into(),
            json!(self.result_limit.claude_code_declaration()),
        );
        tool.meta = Some(MetaObject(meta));
        tool
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listed_functions_come_from_what_loaded_nearest_winning() {
        use crate::helpers::{LoadError, LoadRecord, LoadedFunction};
        let function = |name: &str, signature: &str| LoadedFunction {
            name: name.into(),
            signature: Some(signature.into()),
            summary: Some(format!("{name} docstring")),
        };
        let records = vec![
            LoadRecord {
                file: "toolbox/read.py".into(),
                summary: Some("Read a file.".into()),
                functions: vec![function("read", "(path)")],
                error: None,
            },
            LoadRecord {
                file: "global/tools.py".into(),
                summary: Some("Two tools.".into()),
                functions: vec![function("a", "()"), function("b", "(x)")],
                error: None,
            },
            LoadRecord {
                file: "project/broken.py".into(),
                summary: None,
                functions: vec![],
                error: Some(LoadError {
                    kind: "ImportError".into(),
                    message: "x".into(),
                    line: None,
                    text: String::new(),
                }),
            },
            LoadRecord {
                file: "project/read.py".into(),
                summary: Some("Read, the project's way.".into()),
                functions: vec![function("read", "(path, raw=False)")],
                error: None,
            },
        ];
        let lines: Vec<String> = listed_functions(&records)
            .iter()
            .map(ListedFunction::line)
            .collect();
        assert_eq!(
            lines,
            vec![
                "read(path, raw=False) — Read, the project's way.",
                "a() — a docstring",
                "b(x) — b docstring",
            ]
        );
    }

    #[test]
    fn the_manual_lists_exactly_the_loaded_functions() {
        let manual = Manual {
            functions: vec![ListedFunction {
                name: "read".into(),
                signature: "(path, offset=None, limit=None)".into(),
                summary: Some("Read a text file.".into()),
            }],
            max_output_chars: 30_000,
            wait: None,
            other_kernel: None,
            result_limit: Default::default(),
        };
        let description = manual.description();
        assert!(
            description.contains("  read(path, offset=None, limit=None) — Read a text file.\n")
        );
        assert!(description.contains("30000 characters"));
        let tool = manual.tool();
        assert_eq!(tool.name, "execute");
        assert!(tool.input_schema.get("required").is_none(), "code or cell");
        assert!(
            !description.contains("wait_ms"),
            "no wait line without a default wait"
        );
        let waiting = Manual {
            wait: Some(std::time::Duration::from_secs(50)),
            ..manual
        };
        assert!(
            waiting
                .description()
                .contains("waits up to 50 s (or wait_ms)")
        );
    }

    #[test]
    fn another_kernel_is_described_without_pythons_workspace() {
        let manual = Manual {
            functions: Vec::new(),
            max_output_chars: 30_000,
            wait: None,
            other_kernel: Some("deno".into()),
            result_limit: Default::default(),
        };
        let description = manual.description();
        assert!(description.contains("(`deno`, in that kernel's language, not Python)"));
        assert!(description.contains("not saved"));
        assert!(!description.contains("IPython"));
    }
}
