//! Big frames over MCP stdio (issue 22): a `tools/call` near the 64 MiB frame limit, measured
//! against its floors in the same run.
//!
//! Rows (each prints its baseline beside it and the ratio):
//! 1. Protocol work: a `tools/call` of `1+1` carrying N MiB (15, 30, 60) in its `_meta`, which
//!    the kernel never sees, so everything above a small call's time is the server's reading,
//!    checking, parsing and answering the frame. Baseline: one `serde_json` parse of the same
//!    frame in this process (what any JSON-RPC server pays at least once). The rows show
//!    whether the time grows linearly with the size.
//! 2. A 60 MiB cell (`s = '<60 MiB>'`): the call end to end against IPython's own
//!    `run_cell` of the same code in the same interpreter (the kernel's floor: IPython
//!    transforms and compiles the code; pi-repl cannot make that faster), and against Python's
//!    `jupyter_client` sending the same cell to a fresh ipykernel of the same interpreter (what
//!    any client pays for the kernel's receiving a 60 MiB message).
//!
//! With `PI_REPL_BASELINE_BIN=<another pi-repl>` (a build of the commit before a change), row 1
//! also runs against that binary, each size right after this build's, with the ratio.
//!
//! Run: `PI_REPL_PYTHON=<venv python> cargo bench --bench mcp_frames`. Timings on a shared
//! machine are noisy: compare the ratios.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use pi_repl::home::Home;

#[path = "common/support.rs"]
mod support;
use support::McpStdio;

const SMALL_CALLS: usize = 5;

const IPYTHON_FLOOR: &str = r#"
import sys, time
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
shell.run_cell("1", store_history=True)
code = "s = '" + "a" * (int(sys.argv[1]) << 20) + "'\nlen(s)"
start = time.perf_counter()
result = shell.run_cell(code, store_history=True)
took = time.perf_counter() - start
assert result.success
print(took, file=sys.stderr)
"#;

const JUPYTER_CLIENT_CELL: &str = r#"
import sys, time
from jupyter_client.manager import start_new_kernel
km, kc = start_new_kernel(kernel_name="python3")
try:
    kc.execute_interactive("1+1", timeout=60, output_hook=lambda m: None)
    code = "s = '" + "a" * (int(sys.argv[1]) << 20) + "'\nlen(s)"
    start = time.perf_counter()
    reply = kc.execute_interactive(code, timeout=600, output_hook=lambda m: None)
    took = time.perf_counter() - start
    assert reply["content"]["status"] == "ok", reply
finally:
    kc.stop_channels()
    km.shutdown_kernel(now=True)
print(took, file=sys.stderr)
"#;

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("mcp_frames: benchmark");
        return;
    }
    let python = PathBuf::from(
        std::env::var_os("PI_REPL_PYTHON")
            .expect("set PI_REPL_PYTHON to an interpreter with ipykernel (the test venv)"),
    );
    let dir = tempfile::tempdir().expect("temp");
    let home = Home::at(dir.path());
    let mut ids = 1..;
    let mut mcp = Server::start(McpStdio::spawn(&python, &home, &[]), &mut ids);
    println!(
        "a small call (`1+1`, median of {SMALL_CALLS}): {:.1?}",
        mcp.small_call
    );
    // Another build of pi-repl (`PI_REPL_BASELINE_BIN`: the commit before a change) answers the
    // same frames in the same run, each size right after this build's.
    let mut baseline = std::env::var_os("PI_REPL_BASELINE_BIN").map(|binary| {
        let base_home = Home::at(dir.path().join("baseline"));
        let server = Server::start(
            McpStdio::spawn_binary(std::path::Path::new(&binary), &python, &base_home, &[]),
            &mut ids,
        );
        println!(
            "baseline {}: a small call {:.1?}",
            binary.display(),
            server.small_call
        );
        server
    });

    println!("\n1. protocol work: a call of `1+1` carrying N MiB in `_meta`");
    for mib in [15, 30, 60] {
        let params = serde_json::json!({"name": "execute", "arguments": {"code": "1+1"},
            "_meta": {"blob": "a".repeat(mib << 20)}});
        let line = frame(ids.next().unwrap(), &params);
        let parse = {
            let start = Instant::now();
            let value: serde_json::Value = serde_json::from_str(&line).expect("json");
            let took = start.elapsed();
            drop(value);
            took
        };
        let (took, work) = mcp.protocol_work(&line);
        println!(
            "   {mib:>2} MiB: answered in {took:.2?}; protocol work {work:.2?} ({:.1} ms/MiB); \
             one serde_json parse of the frame {parse:.2?}; ratio {:.1}x",
            work.as_secs_f64() * 1e3 / mib as f64,
            work.as_secs_f64() / parse.as_secs_f64()
        );
        if let Some(baseline) = &mut baseline {
            let line = frame(ids.next().unwrap(), &params);
            let (base_took, base_work) = baseline.protocol_work(&line);
            println!(
                "          baseline: answered in {base_took:.2?}; protocol work {base_work:.2?}; \
                 this build / baseline {:.2}x",
                work.as_secs_f64() / base_work.as_secs_f64()
            );
        }
    }
    if let Some(mut baseline) = baseline {
        baseline.mcp.close();
    }
    let mut mcp = mcp.mcp;
    let mut next_id = || ids.next().unwrap();

    println!("\n2. a 60 MiB cell (`s = '<60 MiB>'; len(s)`)");
    let code = format!("s = '{}'\nlen(s)", "a".repeat(60 << 20));
    let line = frame(
        next_id(),
        &serde_json::json!({"name": "execute", "arguments": {"code": code}}),
    );
    let (took, response) = timed(&mut mcp, &line);
    assert_eq!(
        response["result"]["content"][0]["text"],
        (60usize << 20).to_string(),
        "{response:.300}"
    );
    let floor = python_seconds(&python, IPYTHON_FLOOR, 60);
    let jupyter_client = python_seconds(&python, JUPYTER_CLIENT_CELL, 60);
    println!(
        "   pi-repl mcp: {took:.2?}; IPython's run_cell of the same code: {floor:.2?}, ratio {:.2}x; \
         jupyter_client's call of it: {jupyter_client:.2?}, ratio {:.2}x",
        took.as_secs_f64() / floor.as_secs_f64(),
        took.as_secs_f64() / jupyter_client.as_secs_f64()
    );
    mcp.close();
}

/// A served `pi-repl mcp`, initialized and warm, and its small call's median time.
struct Server {
    mcp: McpStdio,
    small_call: Duration,
}

impl Server {
    fn start(mut mcp: McpStdio, ids: &mut impl Iterator<Item = u64>) -> Server {
        mcp.call(
            ids.next().unwrap(),
            "initialize",
            serde_json::json!({"protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "bench", "version": "0"}}),
        );
        mcp.notify("notifications/initialized");
        let small = serde_json::json!({"name": "execute", "arguments": {"code": "1+1"}});
        for _ in 0..2 {
            // Warm: the kernel is up and the first calls' one-time work is done.
            mcp.call(ids.next().unwrap(), "tools/call", small.clone());
        }
        let mut times: Vec<Duration> = (0..SMALL_CALLS)
            .map(|_| timed(&mut mcp, &frame(ids.next().unwrap(), &small)).0)
            .collect();
        times.sort();
        Server {
            mcp,
            small_call: times[SMALL_CALLS / 2],
        }
    }

    /// The time to the answer of `line` (a call of `1+1` with a big `_meta`), and that time
    /// minus a small call's.
    fn protocol_work(&mut self, line: &str) -> (Duration, Duration) {
        let (took, response) = timed(&mut self.mcp, line);
        assert_eq!(
            response["result"]["content"][0]["text"], "2",
            "{response:.300}"
        );
        (took, took.saturating_sub(self.small_call))
    }
}

/// One JSON-RPC `tools/call` line.
fn frame(id: u64, params: &serde_json::Value) -> String {
    serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
        .to_string()
}

/// Sends `line` and waits for the response to its id: the time from the first byte written to
/// the response read, and the response.
fn timed(mcp: &mut McpStdio, line: &str) -> (Duration, serde_json::Value) {
    let id: serde_json::Value = {
        // The id is near the start of the line; read it without parsing the whole frame.
        let at = line.find("\"id\":").expect("id") + 5;
        let end = at + line[at..].find(',').expect("id end");
        serde_json::from_str(&line[at..end]).expect("id")
    };
    let start = Instant::now();
    mcp.write_line(line);
    loop {
        let message = mcp.read_message();
        if message["id"] == id && message.get("method").is_none() {
            return (start.elapsed(), message);
        }
    }
}

/// The seconds a Python `script` prints last on stderr, run with `mib` as its argument: IPython's
/// own `run_cell`, or `jupyter_client`'s call, of a cell holding an `mib` MiB string literal.
fn python_seconds(python: &std::path::Path, script: &str, mib: usize) -> Duration {
    let output = Command::new(python)
        .args(["-c", script, &mib.to_string()])
        .stdout(std::process::Stdio::null())
        .output()
        .expect("python");
    assert!(output.status.success(), "{output:?}");
    let seconds: f64 = String::from_utf8_lossy(&output.stderr)
        .lines()
        .last()
        .and_then(|line| line.trim().parse().ok())
        .expect("seconds");
    Duration::from_secs_f64(seconds)
}
