//! The kernel's sub-agent requests on the stdin channel: the wire format.
//!
//! `pi_repl_kernel.agents` sends an `input_request` whose prompt is JSON marked
//! `"pi_repl": "agent/1"` (the channel and why: `llm::kernel_requests`), with an `op`:
//!
//! - `spawn` (`task`, `name`, `model`, `budget`, `fork`, and for a live fork `live`: the copy
//!   of the kernel to adopt, or `fallback`: why the fork is from the snapshot): admit a child,
//!   start it, answer with its record at once (never waiting for the child to do anything);
//! - `cancel` (`id`): end a running child of this workspace;
//! - `root`: the directory whose `agents/` holds this workspace's children (the kernel reads
//!   records and walks the tree itself, without holding the channel);
//! - `final` (`text`): in a sub-agent's workspace, the final answer (`final_answer(text)`).
//!
//! The reply is `{"ok": true, ...}` or `{"ok": false, "error": <Python exception name>,
//! "message": ...}`. Waiting for a child is never a request: the kernel polls the record file,
//! so `llm_query` from other threads and interrupts keep working while a cell waits.

use serde::Deserialize;

/// The marker of a sub-agent request.
pub const MARKER: &str = "agent/1";

/// What a cell may say about a budget; missing parts take the defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetRequest {
    #[serde(default)]
    pub seconds: Option<u64>,
    #[serde(default)]
    pub tokens: Option<u64>,
    #[serde(default)]
    pub steps: Option<u32>,
}

/// A spawn's parameters.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct SpawnRequest {
    pub task: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub budget: Option<BudgetRequest>,
    #[serde(default = "yes")]
    pub fork: bool,
    /// A live fork the kernel made for this child (`pi_repl_kernel.live_fork`): its copy to
    /// adopt. Absent with `fork` when the kernel could not fork live (`fallback` says why): the
    /// child then starts from the snapshot.
    #[serde(default)]
    pub live: Option<crate::kernel::live_fork::LiveFork>,
    /// Why a `fork` is seeded from the snapshot instead of live.
    #[serde(default)]
    pub fallback: Option<String>,
}

fn yes() -> bool {
    true
}

/// One request.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum AgentRequest {
    Spawn(Box<SpawnRequest>),
    Cancel { id: String },
    Root,
    Final { text: String },
}

/// Reads an `input_request` prompt: a sub-agent request, or `None` for anything else.
pub fn parse(prompt: &str) -> Option<Result<AgentRequest, String>> {
    let mut value: serde_json::Value = serde_json::from_str(prompt).ok()?;
    if value.get("pi_repl").and_then(|v| v.as_str()) != Some(MARKER) {
        return None;
    }
    if let Some(object) = value.as_object_mut() {
        object.remove("pi_repl");
    }
    Some(
        serde_json::from_value(value)
            .map_err(|error| format!("pi-repl could not read the sub-agent request: {error}")),
    )
}

/// Why a request was refused: the Python exception to raise and the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub kind: &'static str,
    pub message: String,
}

impl Refusal {
    /// A plain `AgentError`.
    pub fn error(message: impl Into<String>) -> Refusal {
        Refusal {
            kind: "AgentError",
            message: message.into(),
        }
    }

    /// A limit (depth, children running at once) refused it.
    pub fn limit(message: impl Into<String>) -> Refusal {
        Refusal {
            kind: "AgentLimitExceeded",
            message: message.into(),
        }
    }
}

/// The reply value: `{"ok": true, ...fields}` or the refusal.
pub fn reply(result: Result<serde_json::Value, Refusal>) -> String {
    match result {
        Ok(mut value) => {
            if let Some(object) = value.as_object_mut() {
                object.insert("ok".into(), true.into());
            }
            value.to_string()
        }
        Err(refusal) => serde_json::json!({
            "ok": false,
            "error": refusal.kind,
            "message": refusal.message,
        })
        .to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_marked_requests_are_read_and_fork_defaults_on() {
        assert!(parse(r#"{"pi_repl": "llm/1", "prompts": []}"#).is_none());
        assert!(parse("Name: ").is_none());
        let spawn = parse(r#"{"pi_repl": "agent/1", "op": "spawn", "task": "count"}"#)
            .expect("marked")
            .expect("readable");
        let AgentRequest::Spawn(spawn) = spawn else {
            panic!("not a spawn: {spawn:?}");
        };
        assert!(spawn.fork);
        assert_eq!(spawn.task, "count");
        let bad =
            parse(r#"{"pi_repl": "agent/1", "op": "spawn", "task": "t", "budget": {"secs": 1}}"#)
                .expect("marked");
        assert!(
            bad.unwrap_err().contains("secs"),
            "an unknown budget key is named"
        );
        assert_eq!(
            parse(r#"{"pi_repl": "agent/1", "op": "root"}"#)
                .unwrap()
                .unwrap(),
            AgentRequest::Root
        );
    }

    #[test]
    fn a_refusal_names_the_exception() {
        let value: serde_json::Value =
            serde_json::from_str(&reply(Err(Refusal::limit("too deep")))).unwrap();
        assert_eq!(value["ok"], false);
        assert_eq!(value["error"], "AgentLimitExceeded");
        assert_eq!(value["message"], "too deep");
    }
}
