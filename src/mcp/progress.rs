//! Progress notifications for one call (`notifications/progress`), when the client asked for
//! them: nothing during the call's first [`FIRST_PROGRESS_AFTER`] (a fast cell's output arrives in
//! its result alone), then what the cell prints and a heartbeat while it is silent. Each
//! notification is written to the frame guard's pipe before the call goes on, so all of a
//! call's progress precedes its result (the server's module docs say why that matters).

use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::{Peer, RoleServer};
use tokio::time::Instant;

use std::time::Duration;

/// A call streams no progress before it has run this long: a fast cell's output arrives in its
/// result alone.
pub const FIRST_PROGRESS_AFTER: Duration = Duration::from_millis(250);

/// Progress notifications for one call, when the client asked for them.
pub(super) struct Progress {
    peer: Peer<RoleServer>,
    token: Option<ProgressToken>,
    sent: u64,
    /// Before this, output is held (and sent as one message then, if the call still runs).
    pub(super) opens_at: Instant,
    held: Option<String>,
}

impl Progress {
    pub(super) fn new(peer: Peer<RoleServer>, token: Option<ProgressToken>) -> Progress {
        Progress {
            peer,
            token,
            sent: 0,
            opens_at: Instant::now() + FIRST_PROGRESS_AFTER,
            held: None,
        }
    }

    /// Output is being held for the opening.
    pub(super) fn holding(&self) -> bool {
        self.held.is_some()
    }

    pub(super) async fn message(&mut self, message: String) {
        if Instant::now() < self.opens_at {
            self.held.get_or_insert_with(String::new).push_str(&message);
            return;
        }
        self.open().await;
        self.send(Some(message)).await;
    }

    /// Sends what was held during the opening, if anything.
    pub(super) async fn open(&mut self) {
        if let Some(held) = self.held.take() {
            self.send(Some(held)).await;
        }
    }

    pub(super) async fn heartbeat(&mut self) {
        self.send(None).await;
    }

    async fn send(&mut self, message: Option<String>) {
        let Some(token) = &self.token else {
            return;
        };
        self.sent += 1;
        let mut param = ProgressNotificationParam::new(token.clone(), self.sent as f64);
        if let Some(message) = message {
            param = param.with_message(message);
        }
        // Returns once rmcp has written it into the frame guard's pipe, ahead of anything the
        // call sends later (its result included).
        if let Err(error) = self.peer.notify_progress(param).await {
            tracing::debug!(%error, "a progress notification was not delivered");
        }
    }
}
