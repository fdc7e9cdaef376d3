//! `pi-repl mcp` over real JSON-RPC on stdio, against a real kernel.

mod common;

use std::time::{Duration, Instant};

use base64::Engine as _;
use common::mcp_client::{McpClient, text};
use common::{TestHome, wait_gone};
use serde_json::json;

fn server(home: &TestHome) -> McpClient {
    let mut command = home.cli();
    command.arg("mcp");
    McpClient::spawn(command)
}

fn kernel_pid(client: &mut McpClient) -> i32 {
    let result = client.execute("import os\nos.getpid()");
    result["structuredContent"]["result"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn identifies_itself_and_lists_one_stable_tool() {
    let home = TestHome::new();
    let mut client = server(&home);
    let info = client.initialize();
    assert_eq!(info["serverInfo"]["name"], "pi-repl");
    assert!(info["instructions"].as_str().unwrap().contains("execute"));
    let first = client.request("tools/list", json!({}));
    let first = client.response(first, Duration::from_secs(30))["result"].clone();
    let second = client.request("tools/list", json!({}));
    let second = client.response(second, Duration::from_secs(30))["result"].clone();
    assert_eq!(first, second);
    let tools = first["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0]["name"], "execute");
    assert_eq!(tools[0]["inputSchema"]["required"], json!(["code"]));
    assert!(
        tools[0]["description"]
            .as_str()
            .unwrap()
            .contains("<repl_engine_reset>")
    );
}

#[test]
fn state_persists_across_calls_and_results_read_like_a_cell() {
    let home = TestHome::new();
    let mut client = server(&home);
    client.initialize();
    let first =
        client.execute("import sys\nx = 41\nprint('hello')\nprint('warn', file=sys.stderr)");
    assert_eq!(first["isError"], false);
    assert_eq!(text(&first), "hello\n[stderr]\nwarn");
    let second = client.execute("x + 1");
    assert_eq!(text(&second), "42");
    assert_eq!(second["structuredContent"]["status"], "ok");
    assert_eq!(second["structuredContent"]["result"], "42");
    assert!(second["structuredContent"]["duration_ms"].is_u64());
}

#[test]
fn output_streams_as_progress_and_a_silent_cell_gets_heartbeats() {
    let home = TestHome::new();
    let mut command = home.cli();
    command.arg("mcp").env("PI_REPL_HEARTBEAT_MS", "200");
    let mut client = McpClient::spawn(command);
    client.initialize();
    let id = client.request(
        "tools/call",
        json!({
            "name": "execute",
            "arguments": {"code": "import time\nprint('first', flush=True)\ntime.sleep(1.2)\nprint('second')"},
            "_meta": {"progressToken": "p1"}
        }),
    );
    let started = Instant::now();
    let first = loop {
        let message = client.next_message(Duration::from_secs(60));
        if message["method"] == "notifications/progress" && message["params"]["message"].is_string()
        {
            break message;
        }
        client.seen.push(message);
    };
    assert!(
        started.elapsed() < Duration::from_millis(1000),
        "the first output came only at the end"
    );
    assert_eq!(first["params"]["progressToken"], "p1");
    assert_eq!(first["params"]["message"], "first\n");
    let result = client.response(id, Duration::from_secs(60));
    assert_eq!(text(&result["result"]), "first\nsecond");
    let progress: Vec<f64> = client
        .seen
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .map(|m| m["params"]["progress"].as_f64().unwrap())
        .collect();
    assert!(
        progress.len() >= 3,
        "expected heartbeats during the 1.2 s sleep, got {progress:?}"
    );
    assert!(
        progress.windows(2).all(|w| w[0] < w[1]),
        "progress must increase: {progress:?}"
    );
}

#[test]
fn cancellation_interrupts_the_cell_and_the_next_call_is_answered() {
    let home = TestHome::new();
    let mut client = server(&home);
    client.initialize();
    client.execute("kept = 'alive'");
    let id = client.request(
        "tools/call",
        json!({"name": "execute", "arguments": {"code": "import time\ntime.sleep(30)"}}),
    );
    std::thread::sleep(Duration::from_millis(800));
    let cancelled_at = Instant::now();
    client.notify(
        "notifications/cancelled",
        json!({"requestId": id, "reason": "user pressed stop"}),
    );
    let next = client.execute("kept");
    assert!(
        cancelled_at.elapsed() < Duration::from_secs(5),
        "took {:?}",
        cancelled_at.elapsed()
    );
    assert_eq!(text(&next), "'alive'");
    assert!(
        next["structuredContent"].get("reset").is_none(),
        "the kernel must survive a cancel"
    );
}

#[test]
fn a_plot_comes_back_as_a_native_image_within_the_budget() {
    let home = TestHome::new();
    let mut client = server(&home);
    client.initialize();
    let result = client.execute(
        "import matplotlib\nimport matplotlib.pyplot as plt\n\
         fig = plt.figure(figsize=(30, 15), dpi=100)\nplt.plot([1, 3, 2])\nplt.show()",
    );
    assert_eq!(result["isError"], false, "{result}");
    let content = result["content"].as_array().unwrap();
    let images: Vec<_> = content.iter().filter(|c| c["type"] == "image").collect();
    assert_eq!(images.len(), 1, "{content:?}");
    assert_eq!(images[0]["mimeType"], "image/png");
    let png = base64::engine::general_purpose::STANDARD
        .decode(images[0]["data"].as_str().unwrap())
        .unwrap();
    let width = u32::from_be_bytes(png[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(png[20..24].try_into().unwrap());
    assert_eq!(width.max(height), 1568, "{width}x{height}");
    let body = text(&result);
    assert!(!body.contains("iVBOR"), "base64 leaked into the text");
    let meta = &result["structuredContent"]["images"][0];
    let original_width = meta["width"].as_u64().unwrap();
    assert!(original_width > 1568, "{meta}");
    assert!(
        body.contains(&format!("downscaled from {original_width}×")),
        "{body}"
    );
    let original = meta["path"].as_str().unwrap();
    let saved = std::fs::read(original).unwrap();
    assert_eq!(
        u32::from_be_bytes(saved[16..20].try_into().unwrap()) as u64,
        original_width
    );
}

#[test]
fn more_images_than_the_cap_are_saved_and_listed() {
    let home = TestHome::new();
    let mut command = home.cli();
    command.args(["mcp", "--image-max-count", "2"]);
    let mut client = McpClient::spawn(command);
    client.initialize();
    let result = client.execute(
        "from PIL import Image\nfrom IPython.display import display\n\
         for i in range(4):\n    display(Image.new('RGB', (20, 10), (i * 60, 0, 0)))",
    );
    let images = result["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["type"] == "image")
        .count();
    assert_eq!(images, 2);
    let body = text(&result);
    assert!(
        body.contains("[2 more image(s) not shown (at most 2 per call); saved:"),
        "{body}"
    );
}

#[test]
fn an_error_is_a_tool_result_with_is_error() {
    let home = TestHome::new();
    let mut client = server(&home);
    client.initialize();
    let result = client.execute("raise ValueError('bad thing')");
    assert_eq!(result["isError"], true);
    assert!(text(&result).contains("ValueError: bad thing"));
    assert_eq!(result["structuredContent"]["status"], "error");
    assert_eq!(result["structuredContent"]["error"]["ename"], "ValueError");
}

#[test]
fn kernel_death_is_reported_with_its_cause_and_the_next_call_works() {
    let home = TestHome::new();
    let mut client = server(&home);
    client.initialize();
    let died = client.execute("import os\nos._exit(5)");
    assert_eq!(died["isError"], true);
    assert_eq!(died["structuredContent"]["status"], "died");
    assert!(
        text(&died).contains("exited with code 5"),
        "{}",
        text(&died)
    );
    let next = client.execute("1 + 1");
    assert_eq!(next["isError"], false);
    let body = text(&next);
    assert!(body.starts_with("<repl_engine_reset>"), "{body}");
    assert!(body.ends_with("\n2"), "{body}");
}

#[test]
fn closing_stdin_stops_the_server_and_its_kernel() {
    let home = TestHome::new();
    let mut client = server(&home);
    client.initialize();
    let pid = kernel_pid(&mut client);
    let status = client
        .close(Duration::from_secs(10))
        .expect("the server exits when stdin closes");
    assert!(status.success(), "{status}");
    assert!(wait_gone(pid, 2.0), "the kernel outlived the server");
}

#[test]
fn sigterm_stops_the_server_and_its_kernel() {
    let home = TestHome::new();
    let mut client = server(&home);
    client.initialize();
    let pid = kernel_pid(&mut client);
    let server_pid = nix::unistd::Pid::from_raw(client.child.id() as i32);
    nix::sys::signal::kill(server_pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while client.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the server ignored SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(wait_gone(pid, 2.0));
}

#[test]
fn malformed_frames_a_second_initialize_and_unknown_tools_get_json_rpc_errors() {
    let home = TestHome::new();
    let mut client = server(&home);
    client.initialize();
    client.send_raw("this is not json");
    let parse = client.next_message(Duration::from_secs(10));
    assert_eq!(parse["error"]["code"], -32700, "{parse}");
    assert_eq!(parse["id"], serde_json::Value::Null);

    client.send_raw(r#"{"jsonrpc":"2.0","id":99}"#);
    let invalid = client.next_message(Duration::from_secs(10));
    assert_eq!(invalid["error"]["code"], -32600, "{invalid}");
    assert_eq!(invalid["id"], 99);

    let again = client.request(
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "x", "version": "0"}}),
    );
    let again = client.response(again, Duration::from_secs(10));
    assert!(again.get("error").is_some(), "{again}");

    let unknown = client.request("tools/call", json!({"name": "shell", "arguments": {}}));
    let unknown = client.response(unknown, Duration::from_secs(10));
    assert!(
        unknown["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown tool `shell`")
    );

    let bad_args = client.request(
        "tools/call",
        json!({"name": "execute", "arguments": {"code": 3}}),
    );
    let bad_args = client.response(bad_args, Duration::from_secs(10));
    assert_eq!(bad_args["error"]["code"], -32602, "{bad_args}");

    assert_eq!(text(&client.execute("'still serving'")), "'still serving'");
}

#[test]
fn a_flood_reports_its_truncation_and_spill_file() {
    let home = TestHome::new();
    let mut client = server(&home);
    client.initialize();
    let result = client.execute("for i in range(100_000): print(i)");
    let truncated = &result["structuredContent"]["truncated"][0];
    assert_eq!(truncated["channel"], "stdout");
    let path = result["structuredContent"]["full_output"][0]
        .as_str()
        .unwrap();
    let full = std::fs::read_to_string(path).unwrap();
    assert_eq!(full.lines().count(), 100_000);
    assert!(text(&result).contains(path));
}

#[test]
fn the_official_python_sdk_lists_tools_and_keeps_state_between_calls() {
    let home = TestHome::new();
    let script = r#"
import asyncio, os, sys
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

async def main():
    params = StdioServerParameters(command=sys.argv[1], args=["mcp"], env=dict(os.environ))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = await session.list_tools()
            print("tools:", [t.name for t in tools.tools])
            first = await session.call_tool("execute", {"code": "n = 20"})
            second = await session.call_tool("execute", {"code": "n + 22"})
            print("first error:", first.is_error)
            print("second:", second.content[0].text, second.is_error)

asyncio.run(main())
"#;
    let output = std::process::Command::new(common::test_python())
        .arg("-c")
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_pi-repl"))
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
    assert!(stdout.contains("tools: ['execute']"), "{stdout}");
    assert!(stdout.contains("first error: False"), "{stdout}");
    assert!(stdout.contains("second: 42 False"), "{stdout}");
}

#[test]
fn a_durable_session_is_flushed_on_close_and_revived_by_the_next_server() {
    let home = TestHome::new();
    let start = |home: &TestHome| {
        let mut command = home.cli();
        command.args(["mcp", "--session", "conversation-1"]);
        let mut client = McpClient::spawn(command);
        client.initialize();
        client
    };
    let mut first = start(&home);
    // Close right after the call: only the flush at shutdown can save it.
    first.execute("notes = ['saved on close']");
    let status = first
        .close(Duration::from_secs(30))
        .expect("the server exits");
    assert!(status.success());

    let mut second = start(&home);
    let result = second.execute("notes");
    let body = text(&result);
    assert!(body.starts_with("<repl_engine_reset>"), "{body}");
    assert!(body.contains("Revived from the snapshot"), "{body}");
    assert!(body.ends_with("['saved on close']"), "{body}");
    assert_eq!(
        result["structuredContent"]["reset"]["revived"],
        json!(["notes"])
    );
    let again = second.execute("len(notes)");
    assert_eq!(text(&again), "1", "the notice is told once");
}
