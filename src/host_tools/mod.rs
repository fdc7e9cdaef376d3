//! Host tools in cells: `tools.<name>(**kwargs)` in a cell runs a tool of the agent that drives
//! pi-repl (in pi: pi's own tools and other extensions' tools, everything but `execute`).
//!
//! The path of one call: the kernel module sends an `input_request` marked `tool/1` on the stdin
//! channel (`requests`: the wire format); the engine's stdin loop (`engine::stdin_requests`)
//! hands it, through the service the front door wired in (`cli/stdin_services.rs`), to
//! [`HostTools`], which sends the MCP client the custom request [`CALL_METHOD`] (or
//! [`LIST_METHOD`]); the client (the pi extension, `extension/src/host-tools.ts`) checks the
//! arguments against the tool's schema, runs it and answers; its answer goes back to the kernel
//! as the `input_reply`.
//!
//! Only a client that declares the experimental capability [`CAPABILITY`] at `initialize` is
//! asked; for any other client (or none: `pi-repl exec`) a call is refused with
//! `HostToolUnavailable`, saying that host tools exist only under pi.
//!
//! Owns: the client's peer and whether it offers host tools, sending one request and reading
//! its answer, and cancelling it (`notifications/cancelled`) when the cell is interrupted.
//! Does not own: validation or running the tool (the client's), nor a time limit: a tool runs
//! as long as the cell lets it (the cell's `timeout_ms`, an interrupt).

pub mod requests;

use std::sync::{Arc, OnceLock};

use rmcp::model::{ClientResult, CustomRequest, ServerRequest};
use rmcp::service::PeerRequestOptions;
use rmcp::{Peer, RoleServer};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use requests::{Refusal, ToolRequest};

/// The experimental capability a client declares when it runs host tools for cells.
pub const CAPABILITY: &str = "pi-repl/host-tools";

/// The request that runs one host tool: params `{name, arguments}`, answered
/// `{ok: true, text, images}` or `{ok: false, error, message}`.
pub const CALL_METHOD: &str = "pi-repl/hostTools/call";

/// The request that lists the host tools: answered `{tools: [{name, signature, summary}]}`.
pub const LIST_METHOD: &str = "pi-repl/hostTools/list";

/// The MCP client as the runner of host tools.
#[derive(Default)]
pub struct HostTools {
    client: OnceLock<Client>,
}

struct Client {
    peer: Peer<RoleServer>,
    offers: bool,
    name: String,
}

impl std::fmt::Debug for HostTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let client = self.client.get();
        f.debug_struct("HostTools")
            .field("client", &client.map(|client| &client.name))
            .field("offers", &client.is_some_and(|client| client.offers))
            .finish()
    }
}

impl HostTools {
    pub fn new() -> Arc<HostTools> {
        Arc::new(HostTools::default())
    }

    /// The client initialized: `offers` when it declared [`CAPABILITY`].
    pub fn connect(&self, peer: Peer<RoleServer>, offers: bool, name: String) {
        // A second `initialize` is refused by the server before it gets here.
        let _ = self.client.set(Client { peer, offers, name });
    }

    /// Answers one request from a cell: the `input_reply` value. Ends promptly with
    /// `HostToolCancelled` when `cancel` fires, after telling the client.
    pub async fn serve(&self, request: ToolRequest, cancel: CancellationToken) -> String {
        let client = match self.client.get() {
            Some(client) if client.offers => client,
            other => {
                let name = other.map(|client| client.name.as_str());
                return requests::refuse(&requests::unavailable(name));
            }
        };
        let (method, params) = match &request {
            ToolRequest::Call { name, arguments } => {
                (CALL_METHOD, json!({"name": name, "arguments": arguments}))
            }
            ToolRequest::List => (LIST_METHOD, json!({})),
        };
        let params = match params {
            Value::Object(map) => Some(Value::Object(map)),
            _ => None,
        };
        let sent = ServerRequest::CustomRequest(CustomRequest::new(method, params));
        let mut handle = match client
            .peer
            .send_cancellable_request(sent, PeerRequestOptions::no_options())
            .await
        {
            Ok(handle) => handle,
            Err(error) => {
                return requests::refuse(&Refusal::Failed(format!(
                    "pi-repl could not ask the MCP client to run the tool: {error}"
                )));
            }
        };
        let response = tokio::select! {
            response = &mut handle.rx => response,
            _ = cancel.cancelled() => {
                // The client is told; its answer is not awaited.
                let _ = handle.cancel(Some("the cell was interrupted".into())).await;
                return requests::refuse(&Refusal::Cancelled);
            }
        };
        let value = match response {
            Ok(Ok(ClientResult::CustomResult(result))) => result.0,
            Ok(Ok(ClientResult::EmptyResult(_))) => json!({}),
            Ok(Ok(other)) => {
                return requests::refuse(&Refusal::Failed(format!(
                    "the MCP client answered the tool call with something else: {other:?}"
                )));
            }
            Ok(Err(error)) => {
                return requests::refuse(&Refusal::Failed(format!(
                    "the MCP client failed the tool call: {error}"
                )));
            }
            Err(_) => {
                return requests::refuse(&Refusal::Failed(
                    "the MCP client went away before the tool answered".to_string(),
                ));
            }
        };
        answer_of(&request, value)
    }
}

/// The kernel's answer for the client's result: passed through when it has the expected shape.
fn answer_of(request: &ToolRequest, value: Value) -> String {
    match request {
        ToolRequest::List => match value.get("tools") {
            Some(Value::Array(tools)) => json!({"ok": true, "tools": tools}).to_string(),
            _ => requests::refuse(&Refusal::Failed(
                "the MCP client's tool list has no `tools` array".to_string(),
            )),
        },
        ToolRequest::Call { .. } => match value.get("ok") {
            Some(Value::Bool(_)) => value.to_string(),
            _ => requests::refuse(&Refusal::Failed(
                "the MCP client's answer to the tool call has no `ok` field".to_string(),
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_answer_is_passed_through_only_with_its_shape() {
        let call = ToolRequest::Call {
            name: "read".into(),
            arguments: Default::default(),
        };
        let passed = answer_of(&call, json!({"ok": true, "text": "hi", "images": []}));
        assert_eq!(
            serde_json::from_str::<Value>(&passed).expect("json")["text"],
            "hi"
        );
        let odd = answer_of(&call, json!({"text": "hi"}));
        assert_eq!(
            serde_json::from_str::<Value>(&odd).expect("json")["error"],
            "HostToolError"
        );
        let listed = answer_of(&ToolRequest::List, json!({"tools": [{"name": "read"}]}));
        let listed: Value = serde_json::from_str(&listed).expect("json");
        assert_eq!(listed["ok"], true);
        assert_eq!(listed["tools"][0]["name"], "read");
    }

    #[tokio::test]
    async fn without_a_client_a_call_says_host_tools_are_pis() {
        let tools = HostTools::new();
        let request = ToolRequest::Call {
            name: "read".into(),
            arguments: Default::default(),
        };
        let answer: Value =
            serde_json::from_str(&tools.serve(request, CancellationToken::new()).await)
                .expect("json");
        assert_eq!(answer["error"], "HostToolUnavailable");
    }
}
