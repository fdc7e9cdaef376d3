//! MCP Tasks (the `io.modelcontextprotocol/tasks` extension, SEP-2663) over the cell book: a
//! long `execute` call of a client that declares the extension is answered with a task handle,
//! and the client polls `tasks/get` for the cell's result.
//!
//! Owns: which calls become tasks, task ids, the task state seen by `tasks/get`, and
//! `tasks/cancel`. A task is exactly one cell: its id is this server's identity plus the cell
//! number, so an id from another server (an earlier run of the same session, another
//! workspace) is refused with a message that says so. Its status is the cell's: queued or
//! running is `working`; ended is `completed`, with the tool result the call would have
//! returned as the task's `result` (a cell that raised is still `completed`, with `isError`);
//! `tasks/cancel` is the same interrupt as `{"cell": N, "interrupt": true}`, and a cell that it
//! aborted ends as `cancelled`.
//!
//! A call becomes a task only when its request declared the extension (rmcp refuses a task
//! handle for any other request) and it submitted code (a look at a cell, `{"cell": N}`, never
//! does). It still waits first, so a quick cell answers with its result as before: up to its
//! `wait_ms` when the call gives one, else up to [`TASK_AFTER`] (or the server's default wait,
//! if shorter). A server run with `--wait-ms end` makes no tasks.
//!
//! Does not own: the cells (`cell_book`), the text of a result (the server's, handed in to
//! `get_state`),
//! the 2025-11-25 experimental task shape (`task` in `tools/call`, `tasks/result`,
//! `tasks/list`), which rmcp 3.11 does not implement and no client here speaks.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use rmcp::ErrorData as McpError;
use rmcp::RoleServer;
use rmcp::model::{
    CallToolResponse, CallToolResult, CreateTaskResult, DetailedTask, GetTaskResult, JsonObject,
    ProtocolVersion, Task, TaskPayload, TaskStatus,
};
use rmcp::service::RequestContext;
use serde_json::json;

use super::cell_book::{CellBook, CellState, Final, Look, Pending};
use crate::view::render::meta_of;

/// How long a call of a tasks-capable client waits for its cell before answering with a task
/// handle: a quick cell is answered with its result, at no extra round trip.
pub const TASK_AFTER: Duration = Duration::from_secs(1);

/// The polling interval suggested to clients.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Completed tasks whose results are kept for repeated `tasks/get` (the oldest go first).
const KEPT_RESULTS: usize = 20;

/// Starts every task id, before this server's identity.
const ID_PREFIX: &str = "pi-repl-";

/// Between the server's identity and the cell number in a task id.
const ID_CELL: &str = "-cell-";

/// The first protocol version whose `initialize` lists the extension: capability extensions
/// (SEP-2133) are read by 2025-11-25 clients; 2025-06-18 and 2025-03-26 have no such field
/// (issue 22).
pub const TASKS_FROM: ProtocolVersion = ProtocolVersion::V_2025_11_25;

/// Whether a session at protocol `version` is told of the extension (and may get tasks).
pub fn listed_at(version: &ProtocolVersion) -> bool {
    // ISO dates: compared as text, they compare as dates.
    version.as_str() >= TASKS_FROM.as_str()
}

/// Whether the request that carries `context` declared the tasks extension (per request, or
/// at `initialize` for a session that began with one), in a protocol version that has it.
pub fn client_declared(context: &RequestContext<RoleServer>) -> bool {
    context.protocol_version().is_some_and(|v| listed_at(&v))
        && context
            .client_capabilities()
            .is_some_and(|capabilities| capabilities.supports_tasks())
}

/// How long a call that may become a task and gives no `wait_ms` waits for its cell: the
/// server's default `wait` capped at [`TASK_AFTER`].
pub fn wait_before_task(wait: Option<Duration>) -> Option<Duration> {
    wait.map(|wait| wait.min(TASK_AFTER))
}

/// One task, as `tasks/get` reports it.
struct TaskEntry {
    created_at: String,
    last_updated_at: String,
    /// `tasks/cancel` interrupted its cell.
    cancel_requested: bool,
    settled: Option<Settled>,
}

/// A task in a terminal state (kept so a repeated `tasks/get` answers the same).
#[derive(Clone)]
enum Settled {
    Completed(JsonObject),
    Cancelled(String),
    /// Completed, and its result dropped after [`KEPT_RESULTS`] newer ones.
    Expired,
}

/// The tasks of one server.
pub struct TaskBook {
    /// Identifies this server in its task ids: a fresh id per server process.
    server_id: String,
    tasks: Mutex<BTreeMap<u64, TaskEntry>>,
}

impl Default for TaskBook {
    fn default() -> Self {
        TaskBook {
            server_id: uuid::Uuid::new_v4().simple().to_string(),
            tasks: Mutex::new(BTreeMap::new()),
        }
    }
}

impl TaskBook {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, TaskEntry>> {
        // A panic while holding the lock leaves plain data behind; keep serving.
        self.tasks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The id of the task for cell `cell`.
    pub fn task_id(&self, cell: u64) -> String {
        format!("{ID_PREFIX}{}{ID_CELL}{cell}", self.server_id)
    }

    /// The cell of task `id`, or the error a client gets for an id that is not one of this
    /// server's tasks.
    fn cell_of(&self, id: &str) -> Result<u64, McpError> {
        let parsed = id
            .strip_prefix(ID_PREFIX)
            .and_then(|rest| rest.rsplit_once(ID_CELL))
            .and_then(|(server, cell)| Some((server, cell.parse::<u64>().ok()?)));
        let Some((server, cell)) = parsed else {
            return Err(McpError::invalid_params(
                format!(
                    "there is no task `{id}`: pi-repl's task ids look like {}",
                    self.task_id(1)
                ),
                None,
            ));
        };
        if server != self.server_id {
            return Err(McpError::invalid_params(
                format!(
                    "task `{id}` (cell {cell}) was made by another pi-repl server, not this one: \
                     a task lives as long as the server that made it. Over a durable session, \
                     execute {{\"cell\": {cell}}} returns that cell's outcome if it was recorded"
                ),
                None,
            ));
        }
        if !self.lock().contains_key(&cell) {
            return Err(McpError::invalid_params(
                format!(
                    "there is no task `{id}` on this server: cell {cell}'s call was not answered \
                     with a task"
                ),
                None,
            ));
        }
        Ok(cell)
    }

    /// Makes cell `pending.cell`, whose call's wait is over, a task, and returns its handle.
    fn create(&self, book: &CellBook, pending: &Pending) -> CreateTaskResult {
        let cell = pending.cell;
        book.hand_to_task(cell);
        let now = rmcp::task_manager::current_timestamp();
        self.lock().insert(
            cell,
            TaskEntry {
                created_at: now.clone(),
                last_updated_at: now.clone(),
                cancel_requested: false,
                settled: None,
            },
        );
        let state = if pending.queued {
            CellState::Queued {
                blocked_by: pending.blocked_by,
                elapsed: pending.elapsed,
            }
        } else {
            CellState::Running {
                elapsed: pending.elapsed,
            }
        };
        let task = self
            .task(cell, &now, &now)
            .with_status_message(working_message(cell, &state));
        CreateTaskResult::new(task).with_meta(meta_of(json!({
            "status": if pending.queued { "queued" } else { "running" },
            "cell": cell,
            "elapsed_ms": pending.elapsed.as_millis() as u64,
            "blocked_by": pending.blocked_by,
            "task_id": self.task_id(cell),
        })))
    }

    fn task(&self, cell: u64, created_at: &str, last_updated_at: &str) -> Task {
        // `ttlMs` null: a task lives as long as this server (its result among the last
        // [`KEPT_RESULTS`]).
        Task::new(
            self.task_id(cell),
            TaskStatus::Working,
            created_at,
            last_updated_at,
        )
        .with_poll_interval_ms(POLL_INTERVAL.as_millis() as u64)
    }

    /// Records how task `cell` ended, dropping the oldest kept results beyond
    /// [`KEPT_RESULTS`] (their tasks then answer that they expired).
    fn settle(&self, cell: u64, settled: Settled) -> Option<Result<DetailedTask, McpError>> {
        let mut tasks = self.lock();
        let entry = tasks.get_mut(&cell)?;
        // Two polls that saw the end together: the first one's result stands.
        if entry.settled.is_none() {
            entry.last_updated_at = rmcp::task_manager::current_timestamp();
            entry.settled = Some(settled);
        }
        let detailed = self.detailed(cell, entry);
        let kept: Vec<u64> = tasks
            .iter()
            .filter(|(_, e)| matches!(e.settled, Some(Settled::Completed(_))))
            .map(|(n, _)| *n)
            .collect();
        for old in &kept[..kept.len().saturating_sub(KEPT_RESULTS)] {
            if let Some(entry) = tasks.get_mut(old) {
                entry.settled = Some(Settled::Expired);
            }
        }
        detailed
    }

    /// A settled task as `tasks/get` reports it (`None` while it is working; an error once its
    /// result was dropped).
    fn detailed(&self, cell: u64, entry: &TaskEntry) -> Option<Result<DetailedTask, McpError>> {
        let task = self.task(cell, &entry.created_at, &entry.last_updated_at);
        Some(Ok(match entry.settled.clone()? {
            Settled::Completed(result) => {
                DetailedTask::new(task, TaskPayload::Completed { result })
            }
            Settled::Cancelled(message) => {
                DetailedTask::new(task.with_status_message(message), TaskPayload::Cancelled)
            }
            Settled::Expired => {
                return Some(Err(McpError::invalid_params(
                    format!(
                        "task `{}` has expired: its result was dropped after {KEPT_RESULTS} newer \
                         tasks completed; execute {{\"cell\": {cell}}} repeats cell {cell}'s \
                         outcome while this server keeps it",
                        self.task_id(cell)
                    ),
                    None,
                )));
            }
        }))
    }
}

/// What a working task's status message says.
fn working_message(cell: u64, state: &CellState) -> String {
    match state {
        CellState::Queued {
            blocked_by: Some(blocker),
            elapsed,
        } => format!(
            "cell {cell} is queued behind cell {blocker} ({} so far)",
            super::seconds_text(*elapsed)
        ),
        CellState::Queued { elapsed, .. } => format!(
            "cell {cell} is queued behind earlier cells ({} so far)",
            super::seconds_text(*elapsed)
        ),
        CellState::Running { elapsed } => format!(
            "cell {cell} is running ({} so far)",
            super::seconds_text(*elapsed)
        ),
        CellState::Ended { status, elapsed } => format!(
            "cell {cell} ended: {status} after {}",
            super::seconds_text(*elapsed)
        ),
    }
}

impl TaskBook {
    /// The answer to a call whose wait ended: a task handle when the call may become a task
    /// and its cell is still going, else `None` (the call answers as usual).
    pub fn task_for(
        &self,
        book: &CellBook,
        may_become_task: bool,
        look: &Look,
    ) -> Option<CallToolResponse> {
        match look {
            Look::Pending(pending) if may_become_task => {
                Some(CallToolResponse::Task(self.create(book, pending)))
            }
            _ => None,
        }
    }

    /// `tasks/get`: where the task's cell stands; once it has ended, the result its call would
    /// have returned (`result_of` makes it, as the server answers a call whose cell ended).
    pub async fn get_state(
        &self,
        book: &CellBook,
        id: &str,
        result_of: impl AsyncFnOnce(Final) -> CallToolResult,
    ) -> Result<GetTaskResult, McpError> {
        let cell = self.cell_of(id)?;
        let (created_at, last_updated_at, cancel_requested) = {
            let tasks = self.lock();
            let Some(entry) = tasks.get(&cell) else {
                return Err(McpError::invalid_params(
                    format!("there is no task `{id}`"),
                    None,
                ));
            };
            if let Some(detailed) = self.detailed(cell, entry) {
                return detailed.map(GetTaskResult::new);
            }
            (
                entry.created_at.clone(),
                entry.last_updated_at.clone(),
                entry.cancel_requested,
            )
        };
        let state = book.state(cell).ok_or_else(|| {
            McpError::invalid_params(
                format!("task `{id}`: cell {cell} is no longer kept by this server"),
                None,
            )
        })?;
        let settled = match &state {
            CellState::Ended { status, .. } if cancel_requested && status == "aborted" => {
                // Left uncollected: `{"cell": N}` still returns what it printed.
                Settled::Cancelled(format!(
                    "cancelled: {}; execute {{\"cell\": {cell}}} returns what it printed",
                    working_message(cell, &state)
                ))
            }
            CellState::Ended { .. } => {
                let look = book.finish_wait(cell);
                let Look::Ended(ended) = look else {
                    return Err(McpError::internal_error(
                        format!("cell {cell} ended but its outcome could not be read"),
                        None,
                    ));
                };
                let result = result_of(ended).await;
                match serde_json::to_value(&result) {
                    Ok(serde_json::Value::Object(object)) => Settled::Completed(object),
                    _ => {
                        return Err(McpError::internal_error(
                            format!("cell {cell}'s result could not be encoded"),
                            None,
                        ));
                    }
                }
            }
            working => {
                let task = self
                    .task(cell, &created_at, &last_updated_at)
                    .with_status_message(working_message(cell, working));
                return Ok(GetTaskResult::new(DetailedTask::new(
                    task,
                    TaskPayload::Working,
                )));
            }
        };
        self.settle(cell, settled)
            .ok_or_else(|| McpError::invalid_params(format!("there is no task `{id}`"), None))?
            .map(GetTaskResult::new)
    }

    /// `tasks/cancel`: interrupts the task's cell (a queued cell never runs), as
    /// `{"cell": N, "interrupt": true}` does. A task that has ended is left as it is.
    pub fn cancel_cell(&self, book: &CellBook, id: &str) -> Result<(), McpError> {
        let cell = self.cell_of(id)?;
        if book.interrupt(cell)
            && let Some(entry) = self.lock().get_mut(&cell)
        {
            entry.cancel_requested = true;
        }
        Ok(())
    }

    /// `tasks/update`: pi-repl's tasks never ask the client for input, so there is nothing to
    /// deliver; a known task is acknowledged (responses for keys never issued are ignored, as
    /// the extension asks).
    pub fn update_cell(&self, id: &str) -> Result<(), McpError> {
        self.cell_of(id).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn book_with(cells: impl IntoIterator<Item = u64>) -> TaskBook {
        let book = TaskBook::default();
        for cell in cells {
            book.lock().insert(
                cell,
                TaskEntry {
                    created_at: "2026-01-01T00:00:00Z".into(),
                    last_updated_at: "2026-01-01T00:00:00Z".into(),
                    cancel_requested: false,
                    settled: None,
                },
            );
        }
        book
    }

    fn message(error: McpError) -> String {
        error.message.to_string()
    }

    #[test]
    fn a_task_id_names_this_server_and_its_cell() {
        let book = book_with([7]);
        let id = book.task_id(7);
        assert_eq!(book.cell_of(&id).unwrap(), 7);
        let other = TaskBook::default().task_id(7);
        assert!(message(book.cell_of(&other).unwrap_err()).contains("another pi-repl server"));
        assert!(message(book.cell_of(&book.task_id(8)).unwrap_err()).contains("not answered"));
        assert!(message(book.cell_of("7").unwrap_err()).contains("look like"));
    }

    #[test]
    fn the_oldest_results_beyond_the_kept_ones_expire_with_a_message() {
        let cells: Vec<u64> = (1..=KEPT_RESULTS as u64 + 1).collect();
        let book = book_with(cells.clone());
        for cell in &cells {
            let mut result = JsonObject::new();
            result.insert("cell".into(), json!(cell));
            let settled = book.settle(*cell, Settled::Completed(result)).unwrap();
            assert_eq!(settled.unwrap().status(), TaskStatus::Completed);
        }
        let tasks = book.lock();
        let expired = book.detailed(1, &tasks[&1]).unwrap().unwrap_err();
        assert!(message(expired).contains("has expired"));
        let kept = book.detailed(2, &tasks[&2]).unwrap().unwrap();
        assert_eq!(kept.status(), TaskStatus::Completed);
    }

    #[test]
    fn the_first_result_of_a_task_stands() {
        let book = book_with([3]);
        book.settle(3, Settled::Cancelled("first".into()));
        let again = book
            .settle(3, Settled::Cancelled("second".into()))
            .unwrap()
            .unwrap();
        assert_eq!(again.task.status_message.as_deref(), Some("first"));
    }
}
