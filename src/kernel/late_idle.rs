//! A kernel that is not pi-repl's ipykernel may publish a request's `idle` before its last
//! output: Deno's kernel sends `idle` ahead of its `execute_result` for about one cell in ten
//! that also prints (34 of 400 measured locally, the result 0.1 to 0.7 ms after the `idle`),
//! and a cell is settled at its `idle`: the result would be lost. Such a kernel's `idle` is held
//! back for a late output of the same request.
//!
//! Owns: the IOPub reader of a local kernelspec's kernel that holds `idle` back, and the
//! helpers the remote kernel's reader (`remote::read_frames`, whose frames carry every channel)
//! shares with it.
//! Does not own: which kernels are held (the launcher and `RemoteLink::hold_idles` decide).
//!
//! Invariants: nothing is reordered but one `idle` behind messages of its own request. An `idle`
//! whose request already had its result goes at once: a request has one. A held one goes with
//! its request's result, before any other message, or after `IDLE_GRACE` of silence (a cell
//! without a value, or one that failed, pays that).

use std::time::Duration;

use jupyter_protocol::{ExecutionState, JupyterMessage, JupyterMessageContent};
use jupyter_zmq_client::ClientIoPubConnection;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::KernelEvent;

/// How long an `idle` is held back for a late output of the same request.
pub(super) const IDLE_GRACE: Duration = Duration::from_millis(30);

/// The `msg_id` of the request `message` answers.
pub(super) fn parent_id(message: &JupyterMessage) -> Option<&str> {
    message
        .parent_header
        .as_ref()
        .map(|parent| parent.msg_id.as_str())
}

/// True for a request's value, its last output. Not its error: Deno's kernel can publish what
/// the cell printed (`console.log`) after the error it then threw (seen under load), so a cell
/// that failed keeps its `idle` held for `IDLE_GRACE` like one without a value.
pub(super) fn is_last_output(message: &JupyterMessage) -> bool {
    matches!(&message.content, JupyterMessageContent::ExecuteResult(_))
}

/// True for an `idle` status.
pub(super) fn is_idle(message: &JupyterMessage) -> bool {
    matches!(
        &message.content,
        JupyterMessageContent::Status(status) if status.execution_state == ExecutionState::Idle
    )
}

/// One reader's hold: at most one `idle` held back, and the request whose value came
/// last (its `idle` has nothing to wait for). Both readers (`forward_iopub`, and the remote
/// kernel's `read_frames`) keep one and forward what it hands back, in order.
#[derive(Default)]
pub(super) struct IdleHold {
    held: Option<JupyterMessage>,
    completed: Option<String>,
}

impl IdleHold {
    /// True while an `idle` is held: the reader waits at most `IDLE_GRACE` for a next message.
    pub(super) fn is_holding(&self) -> bool {
        self.held.is_some()
    }

    /// `IDLE_GRACE` passed in silence: the held `idle`, to forward now.
    pub(super) fn release(&mut self) -> Option<JupyterMessage> {
        self.held.take()
    }

    /// An IOPub message arrived: what to forward now, in order. With `hold` off (pi-repl's own
    /// ipykernel, remotely) nothing is held.
    pub(super) fn on_iopub(&mut self, message: JupyterMessage, hold: bool) -> Vec<JupyterMessage> {
        let last = is_last_output(&message);
        if last {
            self.completed = parent_id(&message).map(String::from);
        }
        if hold && is_idle(&message) && parent_id(&message) != self.completed.as_deref() {
            return self.held.replace(message).into_iter().collect();
        }
        // A held idle goes first unless this message belongs to its request (a late value).
        let mut out: Vec<JupyterMessage> = self.before(parent_id(&message)).into_iter().collect();
        out.push(message);
        // The late value came: its held `idle` follows it now.
        if last {
            out.extend(self.held.take());
        }
        out
    }

    /// A message of another channel, answering request `parent`, is about to go: a held `idle`
    /// of another request goes before it.
    pub(super) fn before(&mut self, parent: Option<&str>) -> Option<JupyterMessage> {
        self.held.take_if(|idle| parent_id(idle) != parent)
    }
}

/// Reads IOPub into `events` as `KernelEvent::IoPub`, each `idle` held back as the module
/// says, until nobody listens; an unreadable message is skipped.
pub(super) fn forward_iopub(
    mut connection: ClientIoPubConnection,
    events: mpsc::UnboundedSender<KernelEvent>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut hold = IdleHold::default();
        loop {
            let next = if hold.is_holding() {
                match tokio::time::timeout(IDLE_GRACE, connection.read()).await {
                    Ok(next) => next,
                    Err(_) => {
                        if let Some(idle) = hold.release()
                            && events.send(KernelEvent::IoPub(idle)).is_err()
                        {
                            return;
                        }
                        continue;
                    }
                }
            } else {
                connection.read().await
            };
            let message = match next {
                Ok(message) => message,
                Err(error) => {
                    tracing::debug!(%error, "skipping an unreadable IOPub message");
                    continue;
                }
            };
            for message in hold.on_iopub(message, true) {
                if events.send(KernelEvent::IoPub(message)).is_err() {
                    return;
                }
            }
        }
    })
}
