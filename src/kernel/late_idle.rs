//! A kernel that is not pi-repl's ipykernel may publish a request's `idle` before its last
//! output: Deno's kernel now and then sends `idle` ahead of its `execute_result` (seen in 2 of
//! 6 runs), and a cell is settled at its `idle`. Such a kernel's `idle` is held back for
//! `IDLE_GRACE` so a late output of the same request goes first.
//!
//! Owns: the IOPub reader of a local kernelspec's kernel that holds `idle` back, and the
//! helpers the remote kernel's reader (`remote::read_frames`, whose frames carry every channel)
//! shares with it.
//! Does not own: which kernels are held (the launcher and `RemoteLink::hold_idles` decide).
//!
//! Invariant: nothing is reordered but one `idle` behind messages of its own request; any
//! other message, or `IDLE_GRACE` of silence, releases it first.

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

/// True for an `idle` status.
pub(super) fn is_idle(message: &JupyterMessage) -> bool {
    matches!(
        &message.content,
        JupyterMessageContent::Status(status) if status.execution_state == ExecutionState::Idle
    )
}

/// Reads IOPub into `events` as `KernelEvent::IoPub`, each `idle` held back as the module
/// says, until nobody listens; an unreadable message is skipped.
pub(super) fn forward_iopub(
    mut connection: ClientIoPubConnection,
    events: mpsc::UnboundedSender<KernelEvent>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut held: Option<JupyterMessage> = None;
        loop {
            let next = match &held {
                None => connection.read().await,
                Some(_) => match tokio::time::timeout(IDLE_GRACE, connection.read()).await {
                    Ok(next) => next,
                    Err(_) => {
                        if let Some(idle) = held.take()
                            && events.send(KernelEvent::IoPub(idle)).is_err()
                        {
                            return;
                        }
                        continue;
                    }
                },
            };
            let message = match next {
                Ok(message) => message,
                Err(error) => {
                    tracing::debug!(%error, "skipping an unreadable IOPub message");
                    continue;
                }
            };
            if is_idle(&message) {
                if let Some(earlier) = held.replace(message)
                    && events.send(KernelEvent::IoPub(earlier)).is_err()
                {
                    return;
                }
                continue;
            }
            // A held idle goes first unless this message belongs to its request (a late value).
            if let Some(idle) = held.take_if(|idle| parent_id(idle) != parent_id(&message))
                && events.send(KernelEvent::IoPub(idle)).is_err()
            {
                return;
            }
            if events.send(KernelEvent::IoPub(message)).is_err() {
                return;
            }
        }
    })
}
