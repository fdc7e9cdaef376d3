//! Sub-agents spawned from a cell: `spawn_agent(task)` in the kernel asks this host, which
//! starts a child `pi-repl agent` process with a workspace of its own and returns at admission.
//!
//! Why the host and not the kernel starts them: the processes an aborted cell started are ended
//! with it (`kernel::processes`), and a child must outlive the cell that spawned it. The kernel
//! asks over the same stdin channel as `llm_query` (`requests`, marked `"pi_repl": "agent/1"`).
//!
//! One source of truth on disk (`record`): each child is `<session>/agents/<id>.json` beside
//! its transcript `<id>.log` and its workspace `<id>/` (whose own children are under
//! `<id>/agents/`), so the whole tree is one directory walk that works after every process has
//! exited. The host's memory holds only process handles (`supervisor`).
//!
//! The child runs pi-repl's own agent loop (`cli/agent_loop.rs`, the front door of
//! `pi-repl agent`): it asks a model, runs the code the
//! model writes as cells in its kernel, feeds the output back, until `final_answer(text)`. Its
//! model requests go to the parent host over the child's stdin/stdout (`link`), so the child
//! holds no key and counts against the parent's budgets.
//!
//! Owns: the limits (depth, children running at once, per-child budgets).

mod child_process;
mod drive;
pub mod link;
pub mod orphans;
pub mod pi_child;
pub mod record;
pub mod requests;
mod spawn;
pub mod supervisor;

use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use record::{Record, Status};
pub use supervisor::{ChildCommand, Supervisor};

/// Default nesting: the session's children and their children.
pub const DEFAULT_MAX_DEPTH: u32 = 2;

/// Default number of children one workspace may have running.
pub const DEFAULT_MAX_RUNNING: usize = 4;

/// What a child may spend, unless `spawn_agent(budget=...)` says otherwise.
pub const DEFAULT_BUDGET: Budget = Budget {
    seconds: 600,
    tokens: 200_000,
    steps: 30,
};

/// What one child may spend: wall time, model tokens (input + output), cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Budget {
    pub seconds: u64,
    pub tokens: u64,
    pub steps: u32,
}

impl Budget {
    pub fn time(&self) -> Duration {
        Duration::from_secs(self.seconds)
    }
}

/// The limits of one workspace's children.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Deepest a child may be (the session is depth 0).
    pub max_depth: u32,
    /// Children running at once.
    pub max_running: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_depth: DEFAULT_MAX_DEPTH,
            max_running: DEFAULT_MAX_RUNNING,
        }
    }
}
