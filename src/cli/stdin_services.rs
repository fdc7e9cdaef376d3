//! The services a command gives its engine for a cell's stdin requests (`engine::StdinService`):
//! sub-agents (`spawn_agent`, served by `agents::Supervisor`) and host tools
//! (`tools.<name>(...)`, served by `host_tools::HostTools`).
//!
//! Owns: recognising each kind's request (its wire format is `agents::requests`,
//! `host_tools::requests`), refusing an unreadable one, and handing the rest to its server in a
//! future. These adapters live with the front doors, which build the engine, so the engine
//! names neither service and neither service knows the engine: the three stay apart, with no
//! import between them in either direction.

use std::path::PathBuf;
use std::sync::Arc;

use crate::agents::Supervisor;
use crate::agents::requests::{self as agent_requests, Refusal as AgentRefusal};
use crate::engine::{Served, StdinCall, StdinService, SubAgents};
use crate::host_tools::HostTools;
use crate::host_tools::requests::{self as tool_requests, Refusal as ToolRefusal};

/// A workspace's sub-agents as the engine reaches them.
pub fn sub_agents(supervisor: Arc<Supervisor>) -> Arc<dyn SubAgents> {
    Arc::new(SubAgentService(supervisor))
}

/// A workspace's host tools as the engine reaches them. A `HostTools` no client connected to
/// (`exec`, `agent`) tells a cell that host tools exist only under pi.
pub fn host_tools(host_tools: Arc<HostTools>) -> Arc<dyn StdinService> {
    Arc::new(HostToolService(host_tools))
}

struct SubAgentService(Arc<Supervisor>);

impl StdinService for SubAgentService {
    /// Served in a task (a spawn copies a snapshot and starts a process), even while the cell
    /// aborts: a cancel or a final answer must still land.
    fn take(self: Arc<Self>, prompt: &str, call: &StdinCall) -> Option<Served> {
        let request = match agent_requests::parse(prompt)? {
            Ok(request) => request,
            Err(error) => {
                let value = agent_requests::reply(Err(AgentRefusal::error(error)));
                return Some(Served::Now(value));
            }
        };
        let cell = call.cell;
        let supervisor = Arc::clone(&self.0);
        Some(Served::Later(Box::pin(async move {
            agent_requests::reply(supervisor.handle(request, cell).await)
        })))
    }
}

impl SubAgents for SubAgentService {
    fn agents_dir(&self) -> PathBuf {
        self.0.agents_dir()
    }
}

struct HostToolService(Arc<HostTools>);

impl StdinService for HostToolService {
    /// Served in a task (the client runs the tool, for as long as it takes); refused at once
    /// while the cell aborts.
    fn take(self: Arc<Self>, prompt: &str, call: &StdinCall) -> Option<Served> {
        let request = match tool_requests::parse(prompt)? {
            Ok(request) => request,
            Err(error) => {
                return Some(Served::Now(tool_requests::refuse(&ToolRefusal::Failed(
                    error,
                ))));
            }
        };
        if call.aborting || call.cancel.is_cancelled() {
            return Some(Served::Now(tool_requests::refuse(&ToolRefusal::Cancelled)));
        }
        let cancel = call.cancel.clone();
        let host_tools = Arc::clone(&self.0);
        Some(Served::Later(Box::pin(async move {
            host_tools.serve(request, cancel).await
        })))
    }
}
