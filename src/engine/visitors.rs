//! Cells another Jupyter client ran in this workspace's kernel (a person who attached with
//! `pi-repl attach`, docs/notebook.md), told to the agent in its next result.
//!
//! Owns: spotting them and the notice's words. ipykernel broadcasts an `execute_input` on IOPub
//! for every request that is not silent, whoever sent it; pi-repl's host calls are silent and
//! its own cell's `execute_input` is routed to that cell, so any other one the engine reads (set
//! aside between cells, or not owned by the running cell) is someone else's cell.
//! Does not own: reading the kernel's messages (`cell` hands over the ones it does not own).

use jupyter_protocol::{JupyterMessage, JupyterMessageContent};

/// Characters of a person's cell quoted in the notice.
const QUOTED_CHARS: usize = 300;

/// The other clients' cells not yet told.
#[derive(Debug, Default)]
pub struct Visitors {
    ran: Vec<String>,
}

impl Visitors {
    /// Takes a message the running cell does not own; true when it was another client's cell.
    pub fn take(&mut self, message: &JupyterMessage) -> bool {
        let JupyterMessageContent::ExecuteInput(input) = &message.content else {
            return false;
        };
        self.ran.push(input.code.clone());
        true
    }

    /// The notice for the next result, once (empty when nobody else ran anything).
    pub fn notices(&mut self) -> Vec<String> {
        std::mem::take(&mut self.ran)
            .into_iter()
            .map(|code| {
                let quoted: String = code.chars().take(QUOTED_CHARS).collect();
                let more = if code.chars().count() > QUOTED_CHARS {
                    " …"
                } else {
                    ""
                };
                format!(
                    "A person ran a cell in this workspace from another Jupyter client (pi-repl \
                     attach); the namespace may have changed:\n{quoted}{more}"
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jupyter_protocol::{ExecuteInput, StreamContent};

    #[test]
    fn another_clients_cell_is_told_once() {
        let mut visitors = Visitors::default();
        let input = JupyterMessage::new(
            JupyterMessageContent::ExecuteInput(ExecuteInput {
                code: "y = 7".into(),
                ..ExecuteInput::default()
            }),
            None,
        );
        assert!(visitors.take(&input));
        assert!(!visitors.take(&JupyterMessage::new(StreamContent::stdout("x"), None)));
        let notices = visitors.notices();
        assert_eq!(notices.len(), 1);
        assert!(notices[0].ends_with("\ny = 7"), "{}", notices[0]);
        assert!(visitors.notices().is_empty());
    }
}
