//! The wire format of a cell's host-tool requests (`tools.<name>(...)`, marked `tool/1`) on the
//! Jupyter stdin channel, and of the answers the kernel reads.
//!
//! A request is `{"pi_repl": "tool/1", "name": N, "arguments": {...}}` (call the tool `N`) or
//! `{"pi_repl": "tool/1", "list": true}` (which tools are there). An answer is
//! `{"ok": true, "text": ..., "images": [{"data", "mimeType"}]}` for a call,
//! `{"ok": true, "tools": [{"name", "signature", "summary"}]}` for a list, or
//! `{"ok": false, "error": <exception class>, "message": ...}`; the kernel module
//! (`python/pi_repl_kernel/host_tools.py`) raises the class named in `error`.
//!
//! Owns: reading a request and writing the answers pi-repl itself gives (refusals). What the
//! client answers is passed through as it is (`super::HostTools` checks its shape).

use serde::Deserialize;
use serde_json::{Map, Value, json};

/// The marker of a host-tool request in the `input_request` prompt.
pub const MARKER: &str = "tool/1";

/// A cell's host-tool request.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolRequest {
    /// Run the tool `name` with `arguments`.
    Call {
        name: String,
        arguments: Map<String, Value>,
    },
    /// List the tools.
    List,
}

#[derive(Deserialize)]
struct Wire {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<Map<String, Value>>,
    #[serde(default)]
    list: bool,
}

/// Reads an `input_request` prompt: a host-tool request, or `None` for anything else.
pub fn parse(prompt: &str) -> Option<Result<ToolRequest, String>> {
    let value: Value = serde_json::from_str(prompt).ok()?;
    if value.get("pi_repl").and_then(Value::as_str) != Some(MARKER) {
        return None;
    }
    let wire: Wire = match serde_json::from_value(value) {
        Ok(wire) => wire,
        Err(error) => {
            return Some(Err(format!(
                "pi-repl could not read the tool request: {error}"
            )));
        }
    };
    if wire.list {
        return Some(Ok(ToolRequest::List));
    }
    Some(match wire.name {
        Some(name) => Ok(ToolRequest::Call {
            name,
            arguments: wire.arguments.unwrap_or_default(),
        }),
        None => Err("pi-repl could not read the tool request: it names no tool".to_string()),
    })
}

/// Why a host-tool request got no answer from a tool; the kernel raises the matching class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Nobody runs host tools here.
    Unavailable(String),
    /// The cell was interrupted.
    Cancelled,
    /// Anything else: the client failed, the request was unreadable.
    Failed(String),
}

impl Refusal {
    /// The exception class the kernel raises.
    fn kind(&self) -> &'static str {
        match self {
            Refusal::Unavailable(_) => "HostToolUnavailable",
            Refusal::Cancelled => "HostToolCancelled",
            Refusal::Failed(_) => "HostToolError",
        }
    }

    fn message(&self) -> String {
        match self {
            Refusal::Unavailable(message) | Refusal::Failed(message) => message.clone(),
            Refusal::Cancelled => {
                "the tool call was cancelled because the cell was interrupted".to_string()
            }
        }
    }
}

/// The `input_reply` value for a refusal.
pub fn refuse(refusal: &Refusal) -> String {
    json!({"ok": false, "error": refusal.kind(), "message": refusal.message()}).to_string()
}

/// What a cell is told when the client offers no host tools.
pub fn unavailable(client: Option<&str>) -> Refusal {
    let client = match client {
        Some(name) => format!("this workspace's MCP client ({name}) does not offer them"),
        None => "this workspace has no MCP client that offers them".to_string(),
    };
    Refusal::Unavailable(format!(
        "host tools (tools.<name>) exist only under pi (`pi --repl`), where they are the pi \
         session's own tools: {client}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_marked_requests_are_tool_requests() {
        assert!(parse("Name: ").is_none());
        assert!(parse(r#"{"pi_repl": "llm/1", "prompts": []}"#).is_none());
        let call = parse(r#"{"pi_repl": "tool/1", "name": "read", "arguments": {"path": "a"}}"#)
            .expect("marked")
            .expect("readable");
        let ToolRequest::Call { name, arguments } = call else {
            panic!("a call")
        };
        assert_eq!(name, "read");
        assert_eq!(arguments["path"], "a");
        assert_eq!(
            parse(r#"{"pi_repl": "tool/1", "list": true}"#)
                .expect("marked")
                .expect("readable"),
            ToolRequest::List
        );
        assert!(parse(r#"{"pi_repl": "tool/1"}"#).expect("marked").is_err());
        assert!(
            parse(r#"{"pi_repl": "tool/1", "name": "x", "arguments": 3}"#)
                .expect("marked")
                .is_err()
        );
    }

    #[test]
    fn a_refusal_names_the_exception_to_raise() {
        let value: Value =
            serde_json::from_str(&refuse(&unavailable(Some("claude-code")))).expect("json");
        assert_eq!(value["ok"], false);
        assert_eq!(value["error"], "HostToolUnavailable");
        let message = value["message"].as_str().expect("message");
        assert!(message.contains("only under pi"), "{message}");
        assert!(message.contains("claude-code"), "{message}");
        let value: Value = serde_json::from_str(&refuse(&Refusal::Cancelled)).expect("json");
        assert_eq!(value["error"], "HostToolCancelled");
    }
}
