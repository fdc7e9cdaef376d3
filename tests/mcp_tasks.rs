//! MCP Tasks (the `io.modelcontextprotocol/tasks` extension) on the real `pi-repl mcp` binary
//! against a real kernel: raw JSON-RPC at protocol 2026-07-28 (capabilities declared per
//! request, as the extension asks), and the official Python SDK's client with a tasks
//! extension. Issue 13, item 6. Every wait is for an event: cells block until the test
//! creates a file.

mod common;

use std::path::Path;
use std::time::Duration;

use common::TestHome;
use common::mcp_client::{McpClient, outcome, text};
use serde_json::{Value, json};

const TASKS: &str = "io.modelcontextprotocol/tasks";

/// How long a test waits for something a cell or the server does.
const EVENT_WAIT: Duration = Duration::from_secs(120);

fn server(home: &TestHome) -> McpClient {
    let mut command = home.cli();
    command.arg("mcp");
    McpClient::spawn(command)
}

/// The per-request `_meta` of protocol 2026-07-28, declaring the tasks extension or not.
fn request_meta(tasks: bool) -> Value {
    let capabilities = if tasks {
        json!({"extensions": {TASKS: {}}})
    } else {
        json!({})
    };
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "pi-repl-tests", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    })
}

/// Sends a 2026-07-28 request (its `_meta` added to `params`) and returns the whole response.
fn send(client: &mut McpClient, method: &str, mut params: Value, tasks: bool) -> Value {
    params["_meta"] = request_meta(tasks);
    let id = client.request(method, params);
    client.response(id, EVENT_WAIT)
}

fn result_of(response: Value) -> Value {
    response
        .get("result")
        .cloned()
        .unwrap_or_else(|| panic!("expected a result: {response}"))
}

/// `server/discover` and `tools/list` (which waits for the kernel) at 2026-07-28.
fn discover(client: &mut McpClient) -> Value {
    let discovered = result_of(send(client, "server/discover", json!({}), true));
    let listed = result_of(send(client, "tools/list", json!({}), true));
    assert_eq!(listed["tools"][0]["name"], "execute");
    discovered
}

fn execute(client: &mut McpClient, arguments: Value, tasks: bool) -> Value {
    result_of(send(
        client,
        "tools/call",
        json!({"name": "execute", "arguments": arguments}),
        tasks,
    ))
}

fn get_task(client: &mut McpClient, task_id: &str) -> Value {
    send(client, "tasks/get", json!({"taskId": task_id}), true)
}

/// Polls `tasks/get` (at 2026-07-28) until the task leaves `working` (an event: the cell
/// ends).
fn poll_until_settled(client: &mut McpClient, task_id: &str) -> Value {
    poll(|| result_of(get_task(client, task_id)))
}

/// Asks `get` for a task's state until it leaves `working`.
fn poll(mut get: impl FnMut() -> Value) -> Value {
    common::eventually("the task settled", EVENT_WAIT, || {
        let state = get();
        (state["status"] != "working").then_some(state)
    })
}

fn wait_for_file(path: &Path) {
    let what = format!("{} appeared", path.display());
    common::eventually(&what, EVENT_WAIT, || path.exists());
}

/// A result saying its cell goes on (`wait_ms: 0` can answer before the cell has started).
fn is_pending(result: &Value) -> bool {
    ["running", "queued"].contains(&outcome(result)["status"].as_str().unwrap_or_default())
}

/// A cell that prints, blocks until `release` exists, prints again and returns `'done'`.
fn blocking_cell(release: &Path) -> String {
    format!(
        "import os, time\nprint('first line')\nwhile not os.path.exists({release:?}):\n    \
         time.sleep(0.01)\nprint('last line')\n'done'"
    )
}

#[test]
fn a_tasks_client_gets_a_task_for_a_long_cell_and_polls_it_to_its_whole_result() {
    let home = TestHome::new();
    let release = home.path().join("release");
    let mut client = server(&home);
    let discovered = discover(&mut client);
    assert!(
        discovered["capabilities"]["extensions"][TASKS].is_object(),
        "the server declares the tasks extension: {discovered}"
    );

    // A cell that ends within the call's wait answers with its result, not a task.
    let quick = execute(
        &mut client,
        json!({"code": "6 * 7", "wait_ms": 120000}),
        true,
    );
    assert_ne!(quick["resultType"], "task", "{quick}");
    assert_eq!(text(&quick), "42");

    let handle = execute(
        &mut client,
        json!({"code": blocking_cell(&release), "wait_ms": 0}),
        true,
    );
    assert_eq!(handle["resultType"], "task", "{handle}");
    assert_eq!(handle["status"], "working");
    let task_id = handle["taskId"].as_str().unwrap().to_string();
    let cell = outcome(&handle)["cell"].as_u64().unwrap();
    assert_eq!(outcome(&handle)["task_id"], task_id.as_str());

    let working = result_of(get_task(&mut client, &task_id));
    assert_eq!(working["status"], "working", "{working}");
    assert_eq!(working["resultType"], "complete");
    assert!(
        working["statusMessage"]
            .as_str()
            .unwrap()
            .starts_with(&format!("cell {cell} is ")),
        "{working}"
    );

    // An id of another server (another run of this session, another workspace) is refused.
    let (_, cell_part) = task_id.rsplit_once("-cell-").unwrap();
    let foreign = format!("pi-repl-0123456789abcdef0123456789abcdef-cell-{cell_part}");
    let refused = get_task(&mut client, &foreign);
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("another pi-repl server"),
        "{refused}"
    );

    std::fs::write(&release, "").unwrap();
    let completed = poll_until_settled(&mut client, &task_id);
    assert_eq!(completed["status"], "completed", "{completed}");
    let result = &completed["result"];
    assert_eq!(result["isError"], false, "{completed}");
    let whole = text(result);
    let first = whole
        .find("first line")
        .expect("the output before the wait");
    let last = whole.find("last line").expect("the output after the wait");
    assert!(first < last, "{whole}");
    assert!(whole.contains("'done'"), "{whole}");
    assert_eq!(outcome(result)["status"], "ok");

    // Polled again, a completed task answers the same.
    let again = result_of(get_task(&mut client, &task_id));
    assert_eq!(again["result"], completed["result"]);

    // The task reported the cell: no <cell_finished> notice for it.
    let next = execute(&mut client, json!({"code": "1"}), true);
    assert_eq!(text(&next), "1", "{next}");

    // The same server, a request that does not declare the extension: the handle path.
    let release_2 = home.path().join("release-2");
    let running = execute(
        &mut client,
        json!({"code": blocking_cell(&release_2), "wait_ms": 0}),
        false,
    );
    assert_ne!(running["resultType"], "task", "{running}");
    assert!(is_pending(&running), "{running}");
    let second_cell = outcome(&running)["cell"].as_u64().unwrap();
    std::fs::write(&release_2, "").unwrap();
    // A look at a cell never becomes a task, even for a tasks-capable request.
    let collected = execute(&mut client, json!({"cell": second_cell}), true);
    assert_ne!(collected["resultType"], "task", "{collected}");
    assert!(text(&collected).contains("last line"), "{collected}");

    // A cell that raises is a completed task whose result is an error.
    let release_3 = home.path().join("release-3");
    let code = format!("{}\n1 / 0", blocking_cell(&release_3));
    let handle = execute(&mut client, json!({"code": code, "wait_ms": 0}), true);
    assert_eq!(handle["resultType"], "task", "{handle}");
    std::fs::write(&release_3, "").unwrap();
    let raised = poll_until_settled(&mut client, handle["taskId"].as_str().unwrap());
    assert_eq!(raised["status"], "completed", "{raised}");
    assert_eq!(raised["result"]["isError"], true, "{raised}");
    assert!(
        text(&raised["result"]).contains("ZeroDivisionError"),
        "{raised}"
    );
}

#[test]
fn cancelling_a_task_interrupts_its_cell_and_the_workspace_survives() {
    let home = TestHome::new();
    let started = home.path().join("started");
    let mut client = server(&home);
    discover(&mut client);
    execute(&mut client, json!({"code": "kept = 'still here'"}), true);
    let code = format!(
        "import time\nopen({started:?}, 'w').close()\nprint('before the cancel')\nwhile True:\n    \
         time.sleep(0.01)"
    );
    let handle = execute(&mut client, json!({"code": code, "wait_ms": 0}), true);
    assert_eq!(handle["resultType"], "task", "{handle}");
    let task_id = handle["taskId"].as_str().unwrap().to_string();
    let cell = outcome(&handle)["cell"].as_u64().unwrap();
    wait_for_file(&started);

    let ack = result_of(send(
        &mut client,
        "tasks/cancel",
        json!({"taskId": task_id}),
        true,
    ));
    assert_eq!(ack, json!({"resultType": "complete"}));

    let cancelled = poll_until_settled(&mut client, &task_id);
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    assert!(
        cancelled["statusMessage"]
            .as_str()
            .unwrap()
            .contains("aborted"),
        "{cancelled}"
    );
    // What it printed is still there for a look by number.
    let look = execute(&mut client, json!({"cell": cell}), true);
    assert!(text(&look).contains("before the cancel"), "{look}");
    assert!(text(&look).contains("KeyboardInterrupt"), "{look}");
    let after = execute(&mut client, json!({"code": "kept"}), true);
    assert_eq!(text(&after), "'still here'");
}

#[test]
fn a_client_without_the_tasks_extension_never_gets_a_task() {
    let home = TestHome::new();
    let release = home.path().join("release");
    let mut client = server(&home);
    // A 2025 session that declares nothing at `initialize`.
    client.initialize();
    let id = client.request(
        "tools/call",
        json!({"name": "execute", "arguments": {"code": blocking_cell(&release), "wait_ms": 0}}),
    );
    let running = result_of(client.response(id, EVENT_WAIT));
    assert!(running.get("resultType").is_none(), "{running}");
    assert!(is_pending(&running), "{running}");
    assert!(
        text(&running).contains("is still running") || text(&running).contains("is queued"),
        "{running}"
    );
    let cell = outcome(&running)["cell"].as_u64().unwrap();
    // `tasks/*` ask for the capability it did not declare.
    let id = client.request(
        "tasks/get",
        json!({"taskId": format!("pi-repl-x-cell-{cell}")}),
    );
    let refused = client.response(id, EVENT_WAIT);
    assert_eq!(refused["error"]["code"], -32021, "{refused}");
    std::fs::write(&release, "").unwrap();
    let id = client.request(
        "tools/call",
        json!({"name": "execute", "arguments": {"cell": cell}}),
    );
    let collected = result_of(client.response(id, EVENT_WAIT));
    assert!(text(&collected).contains("last line"), "{collected}");
}

/// A 2025 session (`initialize`) whose client declared the extension there gets tasks too: rmcp
/// reads the session's capabilities when a request carries none.
#[test]
fn a_2025_session_that_declares_tasks_at_initialize_gets_them() {
    let home = TestHome::new();
    let release = home.path().join("release");
    let mut client = server(&home);
    let id = client.request(
        "initialize",
        json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {"extensions": {TASKS: {}}},
            "clientInfo": {"name": "pi-repl-tests", "version": "0"}
        }),
    );
    let initialized = result_of(client.response(id, EVENT_WAIT));
    assert!(
        initialized["capabilities"]["extensions"][TASKS].is_object(),
        "{initialized}"
    );
    client.notify("notifications/initialized", json!({}));
    let id = client.request(
        "tools/call",
        json!({"name": "execute", "arguments": {"code": blocking_cell(&release), "wait_ms": 0}}),
    );
    let handle = result_of(client.response(id, EVENT_WAIT));
    assert_eq!(handle["resultType"], "task", "{handle}");
    let task_id = handle["taskId"].as_str().unwrap().to_string();
    std::fs::write(&release, "").unwrap();
    // Without per-request `_meta`: the session's capabilities hold.
    let completed = poll(|| {
        let id = client.request("tasks/get", json!({"taskId": task_id}));
        result_of(client.response(id, EVENT_WAIT))
    });
    assert_eq!(completed["status"], "completed", "{completed}");
    assert!(
        text(&completed["result"]).contains("last line"),
        "{completed}"
    );
}

/// Issue 22: `capabilities.extensions` exists from protocol 2025-11-25 on; a 2025-06-18 or
/// 2025-03-26 session is not told of the tasks extension (even when its client put it in its
/// own capabilities), and its long call answers `running` (or `queued`), never a task handle.
#[test]
fn an_older_session_is_not_told_of_tasks_and_gets_none() {
    for version in ["2025-06-18", "2025-03-26"] {
        let home = TestHome::new();
        let release = home.path().join("release");
        let mut client = server(&home);
        let id = client.request(
            "initialize",
            json!({
                "protocolVersion": version,
                "capabilities": {"extensions": {TASKS: {}}},
                "clientInfo": {"name": "pi-repl-tests", "version": "0"}
            }),
        );
        let initialized = result_of(client.response(id, EVENT_WAIT));
        assert_eq!(initialized["protocolVersion"], version);
        assert!(
            initialized["capabilities"].get("extensions").is_none(),
            "{version}: {initialized}"
        );
        assert!(initialized["capabilities"]["tools"].is_object());
        client.notify("notifications/initialized", json!({}));
        let id = client.request(
            "tools/call",
            json!({"name": "execute", "arguments": {"code": blocking_cell(&release), "wait_ms": 0}}),
        );
        let answer = result_of(client.response(id, EVENT_WAIT));
        assert!(answer.get("resultType").is_none(), "{version}: {answer}");
        let status = &answer["_meta"]["pi-repl/outcome"]["status"];
        assert!(status == "running" || status == "queued", "{answer}");
        std::fs::write(&release, "").unwrap();
    }
}

/// The official Python SDK (`mcp` 2.3) speaks 2026-07-28 with pi-repl and hands a `task`
/// result to a client extension's claim; the SDK ships no tasks extension, so the test's
/// script declares one (the identifier, and a resolver that polls `tasks/get`). The script
/// releases the cell only after a poll saw it `working`.
#[test]
fn the_official_python_sdk_runs_a_long_cell_as_a_task() {
    let home = TestHome::new();
    let release = home.path().join("release");
    let script = r#"
import asyncio, os, sys
from typing import Any, Literal
import anyio
import mcp_types as types
from mcp import StdioServerParameters
from mcp.client.client import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim

release = sys.argv[2]

class TaskHandle(types.Result):
    result_type: Literal["task"]
    task_id: str
    status: str

class GetTaskParams(types.RequestParams):
    task_id: str

class GetTask(types.Request[GetTaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: GetTaskParams
    name_param = "taskId"

class TaskState(types.Result):
    task_id: str
    status: str
    result: dict[str, Any] | None = None

seen = []

async def resolve(handle: TaskHandle, ctx: ClaimContext) -> types.CallToolResult:
    seen.append(handle.status)
    while True:
        request = GetTask(params=GetTaskParams(task_id=handle.task_id))
        state = await ctx.session.send_request(request, TaskState)
        if not seen or seen[-1] != state.status:
            seen.append(state.status)
        if state.status != "working":
            break
        open(release, "w").close()
        await anyio.sleep(0.05)
    return types.CallToolResult.model_validate(state.result)

class Tasks(ClientExtension):
    identifier = "io.modelcontextprotocol/tasks"
    def claims(self):
        return (ResultClaim(result_type="task", model=TaskHandle, resolve=resolve),)

async def main():
    params = StdioServerParameters(command=sys.argv[1], args=["mcp"], env=dict(os.environ))
    async with Client(params, extensions=[Tasks()]) as client:
        await client.list_tools()
        code = (
            "import os, time\nprint('first line')\n"
            f"while not os.path.exists({release!r}):\n    time.sleep(0.01)\n"
            "print('last line')\n6 * 7"
        )
        result = await client.call_tool("execute", {"code": code, "wait_ms": 0})
        print("states:", seen)
        print("error:", result.is_error)
        print("text:", repr(result.content[0].text))

asyncio.run(main())
"#;
    let output = std::process::Command::new(common::test_python())
        .arg("-c")
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_pi-repl"))
        .arg(&release)
        .env("PI_REPL_HOME", home.home.root())
        .env("PI_REPL_PYTHON", common::test_python())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("states: ['working', 'completed']"),
        "{stdout}"
    );
    assert!(stdout.contains("error: False"), "{stdout}");
    let text_line = stdout
        .lines()
        .find(|line| line.starts_with("text:"))
        .unwrap();
    let first = text_line.find("first line").expect("first line");
    let last = text_line.find("last line").expect("last line");
    assert!(first < last && text_line.contains("42"), "{stdout}");
}
