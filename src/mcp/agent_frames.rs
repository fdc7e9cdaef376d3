//! Agent frames: a cell's sub-agents shown live by the MCP client (the pi extension draws them
//! under the spawning cell).
//!
//! Streamed as a custom notification, [`METHOD`], to a client that declared the experimental
//! capability [`CAPABILITY`] at `initialize` (no other client gets it). Its params are
//! `{"agents": [frame, ...]}`: every child of this session (depth 1) spawned while this server
//! ran, each as `{id, name, cell, call, status, started, elapsed_ms, steps, last_line, error}`,
//! where `cell` is the spawning cell, `call` the progress token of the `tools/call` that started
//! that cell (so the client can match a running call before its result names the cell), `status`
//! the record's effective status (`lost` for a dead process), `started` RFC 3339 (the client
//! counts the elapsed time of a running child itself), and `elapsed_ms` set once it settled.
//! A notification is sent when a record changes (the supervisor's change counter, never a poll),
//! at most one per [`MIN_GAP`]; the last change is always sent.
//!
//! Owns: building the frames from the records on disk and sending them. Does not own: the
//! records (`agents::record`) nor how they are drawn (`extension/src/agent-frames.ts`).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{CustomNotification, ProgressToken, ServerNotification};
use rmcp::{Peer, RoleServer};
use serde_json::{Value, json};

use crate::agents::Supervisor;
use crate::agents::record::{Record, Status};

/// The experimental capability a client declares to receive agent frames.
pub const CAPABILITY: &str = "pi-repl/agent-frames";

/// The notification carrying them.
pub const METHOD: &str = "notifications/pi-repl/agents";

/// Least time between two notifications (a burst of record writes is one notification).
pub const MIN_GAP: Duration = Duration::from_millis(100);

/// The progress token of the call that started each cell (filled by the server).
pub type CellCalls = Arc<Mutex<HashMap<u64, ProgressToken>>>;

/// Sends the frames to `peer` until it goes away.
pub async fn publish(peer: Peer<RoleServer>, supervisor: Arc<Supervisor>, calls: CellCalls) {
    let mut changes = supervisor.watch();
    let agents = supervisor.agents_dir();
    // Children of earlier runs of the session are not this server's to show.
    let earlier: HashSet<String> = read_children(&agents)
        .into_iter()
        .map(|record| record.id)
        .collect();
    loop {
        if changes.changed().await.is_err() {
            return;
        }
        // Let a burst of writes settle into one notification.
        tokio::time::sleep(MIN_GAP).await;
        changes.borrow_and_update();
        let records = read_children(&agents);
        let frames: Vec<Value> = {
            let calls = calls.lock().unwrap_or_else(|e| e.into_inner());
            records
                .iter()
                .filter(|record| !earlier.contains(&record.id))
                .map(|record| frame(record, calls.get(&record.parent_cell)))
                .collect()
        };
        if frames.is_empty() {
            continue;
        }
        let notification = CustomNotification::new(METHOD, Some(json!({ "agents": frames })));
        if let Err(error) = peer
            .send_notification(ServerNotification::CustomNotification(notification))
            .await
        {
            tracing::debug!(%error, "agent frames not delivered; the client went away");
            return;
        }
    }
}

/// The children of a workspace (not their children), by id.
fn read_children(agents: &std::path::Path) -> Vec<Record> {
    let mut records: Vec<Record> = std::fs::read_dir(agents)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| entry.path().extension().is_some_and(|ext| ext == "json"))
        .filter_map(|entry| Record::read(&entry.path()))
        .collect();
    records.sort_by_key(|record| number_of(&record.id));
    records
}

fn number_of(id: &str) -> u64 {
    id.rsplit('-')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(u64::MAX)
}

/// One child as the client draws it.
fn frame(record: &Record, call: Option<&ProgressToken>) -> Value {
    let status = record.effective_status();
    json!({
        "id": record.id,
        "name": record.name,
        "cell": record.parent_cell,
        "call": call.map(|token| serde_json::to_value(token).unwrap_or(Value::Null)),
        "status": status,
        "started": record.started,
        "elapsed_ms": if status == Status::Running { None } else { elapsed_ms(record) },
        "steps": record.steps,
        "last_line": record.last_line,
        "error": record.error,
    })
}

/// How long a settled child ran: as recorded at its end, or from its start and end times (the
/// record says how it ended a moment before the host has timed it).
fn elapsed_ms(record: &Record) -> Option<u64> {
    record.elapsed_ms.or_else(|| {
        let started = chrono::DateTime::parse_from_rfc3339(&record.started).ok()?;
        let ended = chrono::DateTime::parse_from_rfc3339(record.ended.as_deref()?).ok()?;
        u64::try_from((ended - started).num_milliseconds()).ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_are_read_in_id_order() {
        assert!(number_of("agent-2") < number_of("agent-10"));
        assert_eq!(number_of("odd"), u64::MAX);
    }
}
