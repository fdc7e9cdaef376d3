//! `llm_query` round trip (issue #14): a cell asks a model through pi-repl's host and the MCP
//! client answers (`sampling/createMessage`), against the fake model's own latency, in one run.
//!
//! The bench is the MCP client: it answers each request after a fixed delay (the "model").
//! In the kernel, a cell times N sequential `llm_query` calls; the overhead is what a call
//! takes beyond the model's delay (the kernel's stdin request, the host, the MCP hop both
//! ways). Printed per delay: the model's own median, the in-cell median, the difference and
//! the ratio.
//!
//! Run: `PI_REPL_PYTHON=target/test-home/venv/bin/python cargo bench --bench llm_query`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use pi_repl::home::Home;

#[path = "common/support.rs"]
mod support;
use support::McpStdio;

const CALLS: usize = 200;
const DELAYS_MS: [u64; 2] = [0, 20];

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("llm_query: benchmark");
        return;
    }
    let python = PathBuf::from(
        std::env::var_os("PI_REPL_PYTHON").expect("set PI_REPL_PYTHON (scripts/test builds one)"),
    );
    let dir = tempfile::tempdir().expect("temp");
    let home = Home::at(dir.path());
    let mut server = McpStdio::spawn(&python, &home, &[]);
    server.call(
        0,
        "initialize",
        serde_json::json!({
            "protocolVersion": "2025-06-18", "capabilities": {"sampling": {}},
            "clientInfo": {"name": "bench", "version": "0"}
        }),
    );
    let mut id = 1;
    println!(
        "llm_query through the host, answered by the MCP client after a fixed delay; {CALLS} sequential calls in one cell"
    );
    for delay_ms in DELAYS_MS {
        let delay = Duration::from_millis(delay_ms);
        let mut model_times = Vec::with_capacity(CALLS);
        let code = format!(
            "import time\nts = []\nfor i in range({CALLS}):\n    t = time.perf_counter()\n    \
             llm_query('q')\n    ts.append(time.perf_counter() - t)\n\
             print(sorted(ts)[len(ts) // 2] * 1000)"
        );
        id += 1;
        let response = server.call_answering(
            id,
            "tools/call",
            serde_json::json!({"name": "execute", "arguments": {"code": code, "wait_ms": 600000}}),
            |_request| {
                let started = Instant::now();
                std::thread::sleep(delay);
                model_times.push(started.elapsed().as_secs_f64() * 1000.0);
                serde_json::json!({"model": "fake", "role": "assistant",
                                   "content": {"type": "text", "text": "a"}})
            },
        );
        let text = response["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let in_cell: f64 = text
            .lines()
            .next()
            .and_then(|line| line.trim().parse().ok())
            .unwrap_or_else(|| panic!("the cell did not print its median: {text}"));
        model_times.sort_by(f64::total_cmp);
        let model = model_times[model_times.len() / 2];
        println!(
            "  model delay {delay_ms:>3} ms: the model's own median {model:.2} ms, llm_query in the cell {in_cell:.2} ms, \
             overhead {:.2} ms, ratio {:.2}x",
            in_cell - model,
            in_cell / model.max(0.001)
        );
    }
    server.close();
}
