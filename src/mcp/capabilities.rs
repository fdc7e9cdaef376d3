//! What the server wires to the client at `initialize`: each part of pi-repl that asks the
//! client something (a cell's `llm_query` through sampling, its host tools, sub-agents as pi
//! processes) or tells it something (the agent frames) gets the client's peer and whether the
//! client declared the capability it needs.
//!
//! Owns: the [`ClientCapability`] trait, one implementation per part, and reading a client's
//! declaration (standard `sampling`, or pi-repl's experimental keys). Does not own what each
//! part does with the client (`llm::sampling`, `host_tools`, `agents::pi_child`,
//! `agent_frames`), nor refusing a second `initialize` (the server, before any of this runs).

use std::sync::Arc;

use rmcp::model::InitializeRequestParams;
use rmcp::service::{Peer, RoleServer};

/// The client's `initialize`, as a capability is connected with it.
pub struct Initialize<'a> {
    pub peer: &'a Peer<RoleServer>,
    pub request: &'a InitializeRequestParams,
    /// The progress token of the call that started each cell (agent frames name it).
    pub cell_calls: &'a super::agent_frames::CellCalls,
}

impl Initialize<'_> {
    /// The client declared pi-repl's experimental capability `key`.
    pub fn offers(&self, key: &str) -> bool {
        declares(self.request, key)
    }

    fn client_name(&self) -> String {
        self.request.client_info.name.clone()
    }
}

/// A part of pi-repl that learns of the client at `initialize`, declared or not (a part told
/// the client lacks its capability answers its cells with that).
pub trait ClientCapability: Send + Sync {
    fn connect(&self, client: &Initialize<'_>);
}

/// A cell's `llm_query` answered by the client (MCP sampling).
impl ClientCapability for crate::llm::sampling::SamplingBroker {
    fn connect(&self, client: &Initialize<'_>) {
        #[allow(deprecated)] // sampling: see llm::sampling
        let declared = client.request.capabilities.sampling.is_some();
        crate::llm::sampling::SamplingBroker::connect(
            self,
            client.peer.clone(),
            declared,
            client.client_name(),
        );
    }
}

/// A cell's `tools.<name>(...)` run by the client (the pi extension).
impl ClientCapability for crate::host_tools::HostTools {
    fn connect(&self, client: &Initialize<'_>) {
        crate::host_tools::HostTools::connect(
            self,
            client.peer.clone(),
            client.offers(crate::host_tools::CAPABILITY),
            client.client_name(),
        );
    }
}

/// Sub-agents as pi processes, when the client (the pi extension) says how to start one.
impl ClientCapability for crate::agents::pi_child::PiChildren {
    fn connect(&self, client: &Initialize<'_>) {
        crate::agents::pi_child::PiChildren::connect(
            self,
            client.peer.clone(),
            client.offers(crate::agents::pi_child::CAPABILITY),
        );
    }
}

/// The session's sub-agents streamed to a client that asks for them (`agent_frames`).
pub struct AgentFrames(pub Arc<crate::agents::Supervisor>);

impl ClientCapability for AgentFrames {
    fn connect(&self, client: &Initialize<'_>) {
        if client.offers(super::agent_frames::CAPABILITY) {
            // Ends when the client goes away (a send fails) or with the runtime.
            tokio::spawn(super::agent_frames::publish(
                client.peer.clone(),
                Arc::clone(&self.0),
                Arc::clone(client.cell_calls),
            ));
        }
    }
}

/// Whether `request` declares the experimental capability `key`.
fn declares(request: &InitializeRequestParams, key: &str) -> bool {
    request
        .capabilities
        .experimental
        .as_ref()
        .is_some_and(|experimental| experimental.contains_key(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(capabilities: serde_json::Value) -> InitializeRequestParams {
        serde_json::from_value(serde_json::json!({
            "protocolVersion": "2025-06-18",
            "capabilities": capabilities,
            "clientInfo": {"name": "c", "version": "1"},
        }))
        .unwrap()
    }

    #[test]
    fn an_experimental_capability_is_declared_by_its_key_only() {
        let pi = request(serde_json::json!({"experimental": {
            crate::host_tools::CAPABILITY: {},
            crate::agents::pi_child::CAPABILITY: {"command": ["pi"]},
        }}));
        assert!(declares(&pi, crate::host_tools::CAPABILITY));
        assert!(declares(&pi, crate::agents::pi_child::CAPABILITY));
        assert!(!declares(&pi, super::super::agent_frames::CAPABILITY));
        let plain = request(serde_json::json!({"sampling": {}}));
        assert!(!declares(&plain, crate::host_tools::CAPABILITY));
    }
}
