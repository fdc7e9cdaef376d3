//! `llm_query` round trip (issue #14): a cell asks a model through pi-repl's host and the MCP
//! client answers (`sampling/createMessage`), against the fake model's own latency, in one run.
//!
//! The bench is the MCP client: it answers each request after a fixed delay (the "model").
//! In the kernel, a cell times N sequential `llm_query` calls; the overhead is what a call
//! takes beyond the model's delay (the kernel's stdin request, the host, the MCP hop both
//! ways). Printed per delay: the model's own median, the in-cell median, the difference and
//! the ratio.
//!
//! Batched rows (issue 22): `llm_query_batched` of 100 prompts at concurrency 4 and 16 against
//! a scripted OpenAI-compatible server on 127.0.0.1 (`--llm-base-url`) that answers after 50 ms
//! and, like Python's `http.server`, leaves Nagle's algorithm on and writes a response's head
//! and body in two writes, keeping connections alive. Against the ideal (100 / concurrency ×
//! 50 ms) and, same server, same run: pi-repl's HTTP client as it was before issue 22 (reqwest
//! keeping connections alive, driven from here without a kernel), and plain Python clients,
//! `urllib` (a new connection per request) and `http.client` keeping one connection per worker.
//!
//! Run: `PI_REPL_PYTHON=target/test-home/venv/bin/python cargo bench --bench llm_query`
//! (`-- batched` for the batched rows only).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pi_repl::home::Home;

#[path = "common/support.rs"]
mod support;
use support::McpStdio;

const CALLS: usize = 200;
const DELAYS_MS: [u64; 2] = [0, 20];

/// The batched rows: prompts per batch, the scripted model's delay, rounds per row.
const BATCH: usize = 100;
const MODEL_DELAY: Duration = Duration::from_millis(50);
const CONCURRENCY: [usize; 2] = [4, 16];
const ROUNDS: usize = 5;

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("llm_query: benchmark");
        return;
    }
    let python = PathBuf::from(
        std::env::var_os("PI_REPL_PYTHON").expect("set PI_REPL_PYTHON (scripts/test builds one)"),
    );
    if !std::env::args().any(|a| a == "batched") {
        sequential(&python);
    }
    batched(&python);
}

fn sequential(python: &Path) {
    let dir = tempfile::tempdir().expect("temp");
    let home = Home::at(dir.path());
    let mut server = McpStdio::spawn(python, &home, &[]);
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

/// `llm_query_batched` through `--llm-base-url` against the scripted server, and the Python
/// clients against the same server, in alternating rounds.
fn batched(python: &Path) {
    let model = ScriptedModel::start();
    let dir = tempfile::tempdir().expect("temp");
    let home = Home::at(dir.path());
    let base_url = format!("http://{}/v1", model.address);
    let mut server = McpStdio::spawn(
        python,
        &home,
        &["--llm-base-url", &base_url, "--llm-model", "scripted"],
    );
    server.call(
        0,
        "initialize",
        serde_json::json!({
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "bench", "version": "0"}
        }),
    );
    let client = dir.path().join("client.py");
    std::fs::write(&client, PYTHON_CLIENT).expect("write the client");
    println!(
        "llm_query_batched of {BATCH} prompts, a scripted model answering after {} ms on 127.0.0.1 \
         (Nagle on, head and body written apart, connections kept alive); median of {ROUNDS} rounds",
        MODEL_DELAY.as_millis()
    );
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    // Only ring is built in, as in the provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let pooled = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let mut id = 10;
    for concurrency in CONCURRENCY {
        let ideal = (BATCH.div_ceil(concurrency) as f64) * MODEL_DELAY.as_secs_f64() * 1000.0;
        let (mut ours, mut before, mut fresh, mut kept) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let connections_before = model.connections();
        for _ in 0..ROUNDS {
            id += 1;
            ours.push(in_cell(&mut server, id, concurrency));
            before.push(runtime.block_on(kept_alive(&pooled, &base_url, concurrency)));
            fresh.push(python_client(
                python,
                &client,
                &model,
                concurrency,
                "urllib",
            ));
            kept.push(python_client(
                python,
                &client,
                &model,
                concurrency,
                "keep-alive",
            ));
        }
        let connections = model.connections() - connections_before;
        let (ours, before, fresh, kept) =
            (median(ours), median(before), median(fresh), median(kept));
        println!("  concurrency {concurrency:>2}: ideal {ideal:.0} ms");
        println!(
            "    pi-repl llm_query_batched   {ours:>7.1} ms  {:.2}x ideal",
            ours / ideal
        );
        println!(
            "    reqwest kept alive (before) {before:>7.1} ms  {:.2}x ideal",
            before / ideal
        );
        println!(
            "    python urllib (new conn.)   {fresh:>7.1} ms  {:.2}x ideal; pi-repl / urllib {:.2}x",
            fresh / ideal,
            ours / fresh
        );
        println!(
            "    python http.client kept     {kept:>7.1} ms  {:.2}x ideal",
            kept / ideal
        );
        println!(
            "    ({connections} connections opened in all {ROUNDS} rounds of the four clients)"
        );
    }
    server.close();
}

/// One cell timing one batch inside the kernel, in ms.
fn in_cell(server: &mut McpStdio, id: u64, concurrency: usize) -> f64 {
    let code = format!(
        "import time\nt = time.perf_counter()\n\
         answers = llm_query_batched(['q'] * {BATCH}, concurrency={concurrency})\n\
         elapsed = (time.perf_counter() - t) * 1000\n\
         assert all(a == 'a' for a in answers), answers[:3]\nprint(elapsed)"
    );
    let response = server.call(
        id,
        "tools/call",
        serde_json::json!({"name": "execute", "arguments": {"code": code, "wait_ms": 600000}}),
    );
    let text = response["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    text.lines()
        .next()
        .and_then(|line| line.trim().parse().ok())
        .unwrap_or_else(|| panic!("the cell did not print its time: {text}"))
}

/// A batch sent by a reqwest client that keeps its connections alive, as pi-repl's provider
/// did before issue 22 (host side only, no kernel), in ms.
async fn kept_alive(client: &reqwest::Client, base_url: &str, concurrency: usize) -> f64 {
    use futures::StreamExt as _;
    let url = format!("{base_url}/chat/completions");
    let body =
        serde_json::json!({"model": "scripted", "messages": [{"role": "user", "content": "q"}]});
    let started = Instant::now();
    let answers: Vec<String> = futures::stream::iter(0..BATCH)
        .map(|_| async {
            let response = client.post(&url).json(&body).send().await.expect("send");
            response.text().await.expect("body")
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let elapsed = started.elapsed().as_secs_f64() * 1000.0;
    assert!(
        answers.iter().all(|a| a.contains("\"content\":\"a\"")),
        "{answers:?}"
    );
    elapsed
}

/// The Python client's time for one batch, in ms.
fn python_client(
    python: &Path,
    client: &Path,
    model: &ScriptedModel,
    concurrency: usize,
    mode: &str,
) -> f64 {
    let output = Command::new(python)
        .arg(client)
        .args([
            model.address.port().to_string(),
            BATCH.to_string(),
            concurrency.to_string(),
            mode.to_string(),
        ])
        .output()
        .expect("python");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    text.trim().parse().expect("the client's time")
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// `python client.py PORT N CONCURRENCY MODE`: N chat completions, CONCURRENCY at a time;
/// prints the milliseconds.
const PYTHON_CLIENT: &str = r#"
import http.client, json, sys, threading, time, urllib.request
from concurrent.futures import ThreadPoolExecutor

port, n, concurrency, mode = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
body = json.dumps({"model": "scripted", "messages": [{"role": "user", "content": "q"}]}).encode()
headers = {"content-type": "application/json"}
local = threading.local()

def fresh(_):
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions", data=body, headers=headers)
    with urllib.request.urlopen(request) as response:
        return json.load(response)["choices"][0]["message"]["content"]

def kept(_):
    connection = getattr(local, "connection", None)
    if connection is None:
        connection = local.connection = http.client.HTTPConnection("127.0.0.1", port)
    connection.request("POST", "/v1/chat/completions", body, headers)
    return json.loads(connection.getresponse().read())["choices"][0]["message"]["content"]

started = time.perf_counter()
with ThreadPoolExecutor(concurrency) as pool:
    answers = list(pool.map(fresh if mode == "urllib" else kept, range(n)))
elapsed = (time.perf_counter() - started) * 1000
assert answers == ["a"] * n, answers[:3]
print(elapsed)
"#;

/// An OpenAI-compatible endpoint that answers every request with "a" after `MODEL_DELAY`, as a
/// plain server does: Nagle's algorithm left on, the head and the body written apart,
/// connections kept alive unless the client asks to close. Threads; lives as long as the bench.
struct ScriptedModel {
    address: std::net::SocketAddr,
    connections: Arc<AtomicUsize>,
}

impl ScriptedModel {
    fn start() -> ScriptedModel {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let address = listener.local_addr().expect("address");
        let connections = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&connections);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                counted.fetch_add(1, Ordering::Relaxed);
                std::thread::spawn(move || serve_connection(stream));
            }
        });
        ScriptedModel {
            address,
            connections,
        }
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::Relaxed)
    }
}

fn serve_connection(stream: TcpStream) {
    let mut reader = BufReader::new(&stream);
    let mut writer = &stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let (mut length, mut close) = (0usize, false);
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end().to_ascii_lowercase();
            if header.is_empty() {
                break;
            }
            if let Some(value) = header.strip_prefix("content-length:") {
                length = value.trim().parse().unwrap_or(0);
            }
            if header == "connection: close" {
                close = true;
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        std::thread::sleep(MODEL_DELAY);
        let answer = serde_json::json!({
            "id": "chatcmpl-scripted", "object": "chat.completion", "model": "scripted",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "a"}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        })
        .to_string();
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            answer.len()
        );
        if writer.write_all(head.as_bytes()).is_err()
            || writer.write_all(answer.as_bytes()).is_err()
            || close
        {
            return;
        }
    }
}
