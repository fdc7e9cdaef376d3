//! `pi-repl mcp` over real JSON-RPC on stdio, against a real kernel.

mod common;

use std::time::{Duration, Instant};

use base64::Engine as _;
use common::mcp_client::{McpClient, outcome, text};
use common::{TestHome, wait_gone};
use serde_json::json;

fn server(home: &TestHome) -> McpClient {
    let mut command = home.cli();
    command.arg("mcp");
    McpClient::spawn(command)
}

fn kernel_pid(client: &mut McpClient) -> i32 {
    let result = client.execute(common::KERNEL_PID_CELL);
    common::host_pid(outcome(&result)["result"].as_str().unwrap())
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
    let properties = tools[0]["inputSchema"]["properties"].as_object().unwrap();
    let names: Vec<&str> = properties.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "cell",
            "code",
            "interrupt",
            "rewind",
            "timeout_ms",
            "wait_ms"
        ],
        "code, a cell to look at, or a cell to rewind to"
    );
    // Generated from the typed arguments (issue 24), and still the plain object schema every
    // client takes: nothing required, nothing else accepted, no generator's noise.
    let schema = tools[0]["inputSchema"].as_object().unwrap();
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["additionalProperties"], false);
    for noise in ["required", "$schema", "$defs", "definitions", "title"] {
        assert!(!schema.contains_key(noise), "{noise} in {schema:?}");
    }
    assert_eq!(properties["timeout_ms"]["type"], "integer");
    assert_eq!(properties["timeout_ms"]["minimum"], 1);
    assert!(
        tools[0]["description"]
            .as_str()
            .unwrap()
            .contains("<repl_engine_reset>")
    );
    // Issue 22: twice Claude Code's 40 000-character budget (docs/mcp.md, "Long results").
    assert_eq!(tools[0]["_meta"]["anthropic/maxResultSizeChars"], 80_000);
}

/// Issue 22: Claude Code is told how long a result may be before it swaps it for a preview
/// (twice the `--max-result-chars` budget), and a silent cell reads `(no output)` to it, where
/// its own marker for an empty result is longer.
#[test]
fn claude_code_is_told_the_result_limit_and_a_silent_cell_reads_no_output() {
    let home = TestHome::new();
    let mut command = home.cli();
    command.args(["mcp", "--max-result-chars", "100000"]);
    let mut client = McpClient::spawn(command);
    let id = client.request(
        "initialize",
        json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "claude-code", "version": "2.1.332"}
        }),
    );
    client.response(id, Duration::from_secs(120));
    client.notify("notifications/initialized", json!({}));
    let id = client.request("tools/list", json!({}));
    let tools = client.response(id, Duration::from_secs(120))["result"]["tools"].clone();
    assert_eq!(tools[0]["_meta"]["anthropic/maxResultSizeChars"], 200_000);
    let silent = client.execute("x = 1");
    assert_eq!(
        silent["content"],
        json!([{"type": "text", "text": "(no output)"}]),
        "{silent}"
    );
    assert_eq!(silent["isError"], false);
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
    // Clients show the model `structuredContent` instead of the text when both are present.
    assert!(first.get("structuredContent").is_none(), "{first}");
    // Issue 22: a silent cell is an empty result (no marker) for a client that reads it so.
    let silent = client.execute("y = 2");
    assert_eq!(silent["content"], json!([]), "{silent}");
    assert_eq!(outcome(&silent)["status"], "ok");
    let second = client.execute("x + 1");
    assert_eq!(text(&second), "42");
    assert_eq!(outcome(&second)["status"], "ok");
    assert_eq!(outcome(&second)["result"], "42");
    assert!(outcome(&second)["duration_ms"].is_u64());
}

/// Issue 10: the first version asserted "first output within 1000 ms" of a request sent before
/// the kernel was warm, and failed on a busy machine. Every wait here is for an event.
#[test]
fn output_streams_as_progress_and_a_silent_cell_gets_heartbeats() {
    let home = TestHome::new();
    let release = home.path().join("release");
    let mut command = home.cli();
    command.arg("mcp").env("PI_REPL_HEARTBEAT_MS", "200");
    let mut client = McpClient::spawn(command);
    client.initialize();
    // The cell prints, then stays silent until the test has seen that print and heartbeats.
    let code = format!(
        "import os, time\nprint('first', flush=True)\n\
         while not os.path.exists({release:?}): time.sleep(0.01)\nprint('second')"
    );
    let id = client.request(
        "tools/call",
        json!({
            "name": "execute",
            "arguments": {"code": code},
            "_meta": {"progressToken": "p1"}
        }),
    );
    let mut heartbeats = 0;
    let mut printed = None;
    while printed.is_none() || heartbeats < 2 {
        let message = client.next_message(Duration::from_secs(60));
        assert!(
            message.get("id") != Some(&json!(id)),
            "the call ended before its output streamed: {message}"
        );
        if message["method"] == "notifications/progress" {
            assert_eq!(message["params"]["progressToken"], "p1");
            match message["params"]["message"].as_str() {
                Some(text) => printed = Some(text.to_string()),
                None if printed.is_some() => heartbeats += 1,
                None => {}
            }
        }
        client.seen.push(message);
    }
    // Streamed while the cell was still running (it cannot end before `release` exists).
    assert_eq!(printed.as_deref(), Some("first\n"));
    std::fs::write(&release, b"").unwrap();
    let result = client.response(id, Duration::from_secs(60));
    assert_eq!(text(&result["result"]), "first\nsecond");
    let progress: Vec<f64> = client
        .seen
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .map(|m| m["params"]["progress"].as_f64().unwrap())
        .collect();
    assert!(
        progress.windows(2).all(|w| w[0] < w[1]),
        "progress must increase: {progress:?}"
    );
    // Nothing for this call arrives after its result.
    client.execute("'after'");
    assert!(
        !client
            .seen
            .iter()
            .any(|m| m["method"] == "notifications/progress"
                && m["params"]["progressToken"] == "p1"
                && m["params"]["progress"].as_f64().unwrap() > *progress.last().unwrap()),
        "a progress notification came after its result"
    );
}

/// Issue 9: rmcp serves each request in its own task, so calls sent back to back ran in any
/// order (`[0, 49, 1, 2, …]`).
#[test]
fn pipelined_calls_run_in_wire_order() {
    let home = TestHome::new();
    let mut client = server(&home);
    client.initialize();
    client.execute("_seq = []");
    let ids: Vec<i64> = (0..50)
        .map(|i| {
            client.request(
                "tools/call",
                json!({"name": "execute", "arguments": {"code": format!("_seq.append({i})")}}),
            )
        })
        .collect();
    for id in ids {
        let response = client.response(id, Duration::from_secs(120));
        assert_eq!(response["result"]["isError"], false, "{response}");
    }
    let order = client.execute("print(_seq)");
    let expected: Vec<String> = (0..50).map(|i| i.to_string()).collect();
    assert_eq!(text(&order), format!("[{}]", expected.join(", ")));
}

/// Issue 9: a call cancelled while it waits behind others never runs, and the calls after it
/// still run, in order.
#[test]
fn a_call_cancelled_while_queued_never_runs_and_the_rest_keep_their_order() {
    let home = TestHome::new();
    let release = home.path().join("release");
    let mut client = server(&home);
    client.initialize();
    client.execute("_seq = []");
    let blocker = client.request(
        "tools/call",
        json!({"name": "execute", "arguments": {"code": format!(
            "import os, time\nprint('running', flush=True)\n\
             while not os.path.exists({release:?}): time.sleep(0.01)"
        )}, "_meta": {"progressToken": "b"}}),
    );
    let queued: Vec<i64> = (0..3)
        .map(|i| {
            client.request(
                "tools/call",
                json!({"name": "execute", "arguments": {"code": format!("_seq.append({i})")}}),
            )
        })
        .collect();
    // The blocker is running (it printed), so the three are queued behind it.
    loop {
        let message = client.next_message(Duration::from_secs(60));
        if message["method"] == "notifications/progress"
            && message["params"]["message"] == "running\n"
        {
            break;
        }
        client.seen.push(message);
    }
    client.notify(
        "notifications/cancelled",
        json!({"requestId": queued[1], "reason": "test"}),
    );
    std::fs::write(&release, b"").unwrap();
    let mut texts: Vec<String> = [blocker, queued[0], queued[2]]
        .into_iter()
        .map(|id| text(&client.response(id, Duration::from_secs(60))["result"]))
        .collect();
    let last = text(&client.execute("print(_seq)"));
    assert!(last.ends_with("[0, 2]"), "{last}");
    // Issue 13: the cancelled call's answer is never read, so the next result to leave says
    // that its cell (4) ended without running, once.
    texts.push(last);
    let notices: Vec<&String> = texts
        .iter()
        .filter(|t| t.contains("<cell_finished cell=4 "))
        .collect();
    assert_eq!(notices.len(), 1, "{texts:?}");
    assert!(notices[0].contains("status=aborted"), "{}", notices[0]);
}

/// Issue 9: a frame between rmcp's own 16 MiB line limit and the guard's 64 MiB was dropped
/// without an answer, and the client waited forever. Issue 22: frames near the limit (60 MiB,
/// in the code or in an argument the kernel never sees) are answered; how fast is measured
/// by `benches/mcp_frames.rs`, not asserted here.
#[test]
fn every_frame_the_guard_accepts_is_served() {
    let home = TestHome::new();
    let mut client = server(&home);
    client.initialize();
    let big = "a".repeat(60 << 20);
    let result = client.execute(&format!("s = '{big}'\nlen(s)"));
    assert_eq!(text(&result), (60 << 20).to_string());
    let id = client.request(
        "tools/call",
        json!({"name": "execute", "arguments": {"code": "21 * 2"}, "_meta": {"blob": big}}),
    );
    let response = client.response(id, Duration::from_secs(120));
    assert_eq!(text(&response["result"]), "42", "{response:.200}");
}

/// Issue 22: a valid JSON number beyond a double (`1e400`) anywhere in a request made the
/// whole line "not JSON" (`-32700`, `id: null`), and the call was never answered.
#[test]
fn a_number_beyond_a_double_is_served_not_refused() {
    let home = TestHome::new();
    let mut client = server(&home);
    client.initialize();
    let huge_integer = format!("1{}", "0".repeat(400));
    for (n, number) in [
        "1e400",
        "-1e400",
        "1e-400",
        "123456789012345678901234567890",
        &huge_integer,
    ]
    .into_iter()
    .enumerate()
    {
        let id = 1000 + n as i64;
        client.send_raw(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"execute","arguments":{{"code":"21 * 2"}},"_meta":{{"progressToken":"p{id}","x":[{number}]}}}}}}"#
        ));
        let response = client.response(id, Duration::from_secs(60));
        assert_eq!(text(&response["result"]), "42", "{number}: {response}");
    }
    // In an argument the server reads: answered, with its id, as a timeout it cannot take.
    client.send_raw(
        r#"{"jsonrpc":"2.0","id":2000,"method":"tools/call","params":{"name":"execute","arguments":{"code":"1","timeout_ms":1e400}}}"#,
    );
    let response = client.response(2000, Duration::from_secs(60));
    assert_eq!(response["error"]["code"], -32602, "{response}");
    assert!(
        response["error"]["message"]
            .as_str()
            .unwrap()
            .contains("timeout_ms"),
        "{response}"
    );
}

/// Issue 22, item 2: Claude Code handles a response at once and a progress notification a
/// tick later, so a progress read in the same read as its call's response (or after it) hits
/// an unknown token and can drop the connection. This client is busy for 300 ms after each
/// read of stdout (an event loop under load), and records what each read returned. Each cell
/// prints, prints again just after its first progress went out (at 250 ms, which the client
/// reads at once), and ends: its second progress and its result both reach the pipe while the
/// client is busy. The server before this fix (a fixed 50 ms between the two) had 10 of 32
/// progress notifications read together with their response in this run; none may be.
#[test]
fn progress_never_reaches_a_client_with_or_after_its_result() {
    use std::io::{Read, Write};
    use std::process::Stdio;
    let home = TestHome::new();
    let mut child = home
        .cli()
        .arg("mcp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let (reads_tx, reads) = std::sync::mpsc::channel::<Vec<serde_json::Value>>();
    let reader = std::thread::spawn(move || {
        let mut pending = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = match stdout.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            pending.extend_from_slice(&buf[..n]);
            let whole = pending
                .iter()
                .rposition(|b| *b == b'\n')
                .map_or(0, |at| at + 1);
            let lines: Vec<serde_json::Value> = pending[..whole]
                .split(|b| *b == b'\n')
                .filter(|line| !line.is_empty())
                .map(|line| serde_json::from_slice(line).unwrap())
                .collect();
            pending.drain(..whole);
            if reads_tx.send(lines).is_err() {
                break;
            }
            // A busy client: the next read comes a while later.
            std::thread::sleep(Duration::from_millis(300));
        }
    });
    let mut send = |message: serde_json::Value| {
        stdin.write_all(format!("{message}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
    };
    // Every read so far, in order.
    let mut seen: Vec<Vec<serde_json::Value>> = Vec::new();
    let wait_for = |id: i64, seen: &mut Vec<Vec<serde_json::Value>>| loop {
        let read = reads.recv_timeout(Duration::from_secs(120)).unwrap();
        let answered = read
            .iter()
            .any(|m| m["id"] == id && m.get("method").is_none());
        seen.push(read);
        if answered {
            return;
        }
    };
    send(
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "claude-code", "version": "0"}}}),
    );
    wait_for(0, &mut seen);
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let calls = 16;
    for id in 1..=calls {
        let first = 0.26 + 0.01 * (id % 4) as f64;
        let second = 0.01 * (1 + id % 3) as f64;
        let code = format!(
            "import time\nprint('call {id}', flush=True)\ntime.sleep({first})\n\
             print('more', flush=True)\ntime.sleep({second})"
        );
        send(
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "execute",
            "arguments": {"code": code},
            "_meta": {"progressToken": format!("t{id}")}}}),
        );
        wait_for(id, &mut seen);
    }
    let mut answered = std::collections::HashSet::new();
    let mut progress = 0;
    for read in &seen {
        let answered_here: Vec<String> = read
            .iter()
            .filter(|m| m.get("method").is_none())
            .map(|m| format!("t{}", m["id"]))
            .collect();
        for message in read {
            if message["method"] == "notifications/progress" {
                progress += 1;
                let token = message["params"]["progressToken"]
                    .as_str()
                    .unwrap()
                    .to_string();
                assert!(
                    !answered.contains(&token) && !answered_here.contains(&token),
                    "progress for {token} was read with or after its response: {read:?}"
                );
            }
        }
        answered.extend(answered_here);
    }
    assert!(
        progress >= calls / 2,
        "too few progress notifications to prove anything: {progress}"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    reader.join().unwrap();
}

#[test]
fn cancellation_interrupts_the_cell_and_the_next_call_is_answered() {
    let home = TestHome::new();
    let mut client = server(&home);
    client.initialize();
    client.execute("kept = 'alive'");
    // The cancel is sent once the cell is running (its first line reached the client), so
    // what it tests is the interrupt of a running cell, not the drop of a queued one.
    let id = client.request(
        "tools/call",
        json!({"name": "execute", "arguments": {
            "code": "import time\nprint('running', flush=True)\ntime.sleep(30)"},
            "_meta": {"progressToken": "c"}}),
    );
    loop {
        let message = client.next_named("notifications/progress", Duration::from_secs(120));
        if message["params"]["message"]
            .as_str()
            .is_some_and(|text| text.contains("running"))
        {
            break;
        }
    }
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
    // Issue 13: the cancelled call's answer is never read (a client that gave up at its own
    // timeout, or a user who stopped it), so the next result starts by saying how its cell
    // ended.
    let next_text = text(&next);
    assert!(next_text.ends_with("\n'alive'"), "{next_text}");
    assert!(
        next_text.starts_with("<cell_finished cell=2 status=aborted")
            && next_text.contains("[aborted: the call was cancelled]"),
        "{next_text}"
    );
    assert!(
        outcome(&next).get("reset").is_none(),
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
    let meta = &outcome(&result)["images"][0];
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
fn saved_outputs_of_two_servers_never_overwrite_each_other() {
    let home = TestHome::new();
    let mut saved: Vec<(String, &str)> = Vec::new();
    // Two servers of the same session, one after the other: the same call and cell numbers.
    for word in ["first", "second"] {
        let mut command = home.cli();
        command.args(["mcp", "--session", "shared"]);
        let mut client = McpClient::spawn(command);
        client.initialize();
        // Long enough to be cut in the result, so the whole is saved to a file.
        let result = client.execute(&format!(
            "from IPython.display import HTML, display\n\
             display(HTML('<b>{word}</b>' + '<p>filler</p>' * 200))"
        ));
        let body = text(&result);
        let path = body
            .split("; the whole is in ")
            .nth(1)
            .and_then(|rest| rest.split(']').next())
            .unwrap_or_else(|| panic!("{body}"))
            .to_string();
        saved.push((path, word));
        assert!(client.close(Duration::from_secs(60)).is_some());
    }
    assert_ne!(saved[0].0, saved[1].0);
    for (path, word) in &saved {
        let html = std::fs::read_to_string(path).unwrap();
        assert!(html.contains(word), "{path}: {html}");
    }
}

/// Issue 22: printing a lone surrogate put ipykernel's own traceback (session.py, iostream.py)
/// into the cell's stderr, and the cell ended ok. It is the cell's `UnicodeEncodeError` now,
/// raised at the user's line, as on a UTF-8 terminal.
#[test]
fn printing_a_lone_surrogate_is_the_cells_unicode_encode_error() {
    let home = TestHome::new();
    let mut client = server(&home);
    client.initialize();
    let result = client.execute("x = 1\nprint('a\\ud800b')");
    assert_eq!(result["isError"], true, "{result}");
    assert_eq!(outcome(&result)["error"]["ename"], "UnicodeEncodeError");
    let shown = text(&result);
    assert!(shown.contains("Cell In[1], line 2"), "{shown}");
    assert!(shown.contains("surrogates not allowed"), "{shown}");
    for internal in [
        "iostream",
        "session.py",
        "zmqstream",
        "launch.py",
        "[stderr]",
    ] {
        assert!(!shown.contains(internal), "{internal}: {shown}");
    }
    assert_eq!(text(&client.execute("print('after')")), "after");
}

#[test]
fn an_error_is_a_tool_result_with_is_error() {
    let home = TestHome::new();
    let mut client = server(&home);
    client.initialize();
    let result = client.execute("raise ValueError('bad thing')");
    assert_eq!(result["isError"], true);
    assert!(text(&result).contains("ValueError: bad thing"));
    assert_eq!(outcome(&result)["status"], "error");
    assert_eq!(outcome(&result)["error"]["ename"], "ValueError");
}

#[test]
fn kernel_death_is_reported_with_its_cause_and_the_next_call_works() {
    let home = TestHome::new();
    let mut client = server(&home);
    client.initialize();
    let died = client.execute("import os\nos._exit(5)");
    assert_eq!(died["isError"], true);
    assert_eq!(outcome(&died)["status"], "died");
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
    common::exited(&mut client.child, Duration::from_secs(10))
        .expect("the server exited on SIGTERM");
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

    // Issue 22: `-32600`, as documented, also when rmcp could not read its params (it answered
    // those `-32601`).
    for params in [
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "x", "version": "0"}}),
        json!({}),
    ] {
        let again = client.request("initialize", params);
        let again = client.response(again, Duration::from_secs(10));
        assert_eq!(again["error"]["code"], -32600, "{again}");
    }

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

    // Arguments as a string (not an object) are invalid params, not an unknown method.
    let string_args = client.request(
        "tools/call",
        json!({"name": "execute", "arguments": "x = 1"}),
    );
    let string_args = client.response(string_args, Duration::from_secs(10));
    assert_eq!(string_args["error"]["code"], -32602, "{string_args}");

    let fractional = client.request(
        "tools/call",
        json!({"name": "execute", "arguments": {"code": "1", "timeout_ms": 1.5}}),
    );
    let fractional = client.response(fractional, Duration::from_secs(10));
    assert_eq!(fractional["error"]["code"], -32602, "{fractional}");

    assert_eq!(text(&client.execute("'still serving'")), "'still serving'");
}

#[test]
fn a_flood_reports_its_truncation_and_spill_file() {
    let home = TestHome::new();
    let mut client = server(&home);
    client.initialize();
    let result = client.execute("for i in range(100_000): print(i)");
    let truncated = &outcome(&result)["truncated"][0];
    assert_eq!(truncated["channel"], "stdout");
    let path = outcome(&result)["full_output"][0].as_str().unwrap();
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
    assert_eq!(outcome(&result)["reset"]["revived"], json!(["notes"]));
    let again = second.execute("len(notes)");
    assert_eq!(text(&again), "1", "the notice is told once");
}

/// Issue 9: Claude Code stops a server with SIGINT (stdin left open), then SIGTERM 100 ms later
/// and SIGKILL 400 ms after that. The server must end at once, with its kernel, even while a
/// save is stuck; a save that never finished is named by the next start. Issue 21: the save
/// outlives the server, and the next start waits for it (here it ends itself at its limit,
/// 2 s) before it revives. (How fast it ends is measured in `docs/benchmarks.md`, not asserted
/// here.)
#[test]
fn a_stop_signal_ends_the_server_at_once_and_the_next_start_names_what_was_not_saved() {
    let home = TestHome::new();
    let start = |home: &TestHome| {
        let mut command = home.cli();
        command.env("PI_REPL_SNAPSHOT_CHILD_LIMIT_MS", "2000");
        command.args(["mcp", "--session", "signalled"]);
        let mut client = McpClient::spawn(command);
        client.initialize();
        client
    };
    let mut first = start(&home);
    let pid = kernel_pid(&mut first);
    // Saving `slow` never ends: no snapshot can commit before the signal, nor after it.
    first.execute(
        "import time\nclass Slow:\n    def __reduce__(self):\n        time.sleep(10_000)\n        \
         return (int, ())\nslow = Slow()",
    );
    let server_pid = nix::unistd::Pid::from_raw(first.child.id() as i32);
    let signalled = Instant::now();
    nix::sys::signal::kill(server_pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let status = common::exited(&mut first.child, Duration::from_secs(20))
        .expect("the server exited on SIGINT");
    eprintln!("exited {:?} after SIGINT", signalled.elapsed());
    assert!(status.success(), "{status}");
    assert!(wait_gone(pid, 5.0), "the kernel outlived the server");

    let mut second = start(&home);
    let body = text(&second.execute("'slow' in globals()"));
    assert!(body.starts_with("<repl_engine_reset>"), "{body}");
    assert!(
        body.contains("Not in the snapshot, so gone: the changes made by cell"),
        "{body}"
    );
    assert!(body.contains("in the previous run"), "{body}");
    assert!(body.ends_with("False"), "{body}");
    // Told once.
    let again = text(&second.execute("1"));
    assert_eq!(again, "1");
}

/// Issue 9: on a machine where pi-repl's environment does not exist yet, `initialize` is
/// answered before the environment is built (clients with short connect timeouts gave up);
/// a failure to build it is a clear error on the call, not a silent exit.
#[test]
fn initialize_is_answered_while_the_environment_is_still_being_built() {
    let home = TestHome::new();
    let bin = home.path().join("fake-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let release = home.path().join("release");
    // The only python3 on PATH: blocks until the test releases it, then fails.
    let fake = bin.join("python3");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\nwhile [ ! -e {release:?} ]; do sleep 0.01; done\necho 'broken python' >&2\nexit 1\n"
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut command = home.cli();
    command
        .arg("mcp")
        .env_remove("PI_REPL_PYTHON")
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()));
    let mut client = McpClient::spawn(command);
    // Answered while the fake python3 is still blocked (it cannot finish before `release`).
    let info = client.initialize();
    assert_eq!(info["serverInfo"]["name"], "pi-repl");
    assert!(!release.exists());
    std::fs::write(&release, b"").unwrap();
    let result = client.execute("1 + 1");
    assert_eq!(result["isError"], true, "{result}");
    let body = text(&result);
    assert!(body.starts_with("error: "), "{body}");
    assert!(body.contains("hint: "), "{body}");
}

/// Issue 9: a stop signal while the first `tools/list` waits for a kernel that never gets ready
/// ended the server only after the whole boot timeout (90 s); clients kill it long before.
#[test]
fn a_stop_signal_during_a_boot_that_never_gets_ready_ends_the_server_at_once() {
    let home = TestHome::new();
    // An "interpreter" that never becomes a kernel: it waits for its lifeline (stdin) to close.
    let fake = home.path().join("python");
    std::fs::write(&fake, "#!/bin/sh\nexec cat > /dev/null\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut command = home.cli();
    command.arg("mcp").env("PI_REPL_PYTHON", &fake);
    let mut client = McpClient::spawn(command);
    client.initialize();
    client.request("tools/list", json!({}));
    let server_pid = nix::unistd::Pid::from_raw(client.child.id() as i32);
    nix::sys::signal::kill(server_pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    // Far below the 90 s boot timeout the server would otherwise wait out.
    common::exited(&mut client.child, Duration::from_secs(30))
        .expect("the server exited without waiting for the boot");
    let fake_alive = || {
        std::fs::read_dir("/proc").unwrap().flatten().any(|entry| {
            std::fs::read(entry.path().join("cmdline"))
                .map(|cmdline| String::from_utf8_lossy(&cmdline).contains(&*fake.to_string_lossy()))
                .unwrap_or(false)
        })
    };
    common::eventually(
        "the half-started kernel ended with the server",
        Duration::from_secs(10),
        || !fake_alive(),
    );
}
