//! Engine benchmark: the Rust host against its baselines, measured in one run.
//!
//! Rows (each prints the baseline beside it and the ratio):
//! 1. 500 sequential `1+1` cells through the engine vs Python's `jupyter_client`
//!    `BlockingKernelClient.execute_interactive` against the same kind of kernel (IPC).
//! 4. Cold start (spawn to the first result) vs the bare `import ipykernel.kernelapp`.
//! 2. The same 500 cells as `execute` calls over MCP stdio (`pi-repl mcp`, a real JSON-RPC
//!    client in this process) against the same Python client floor, and, with
//!    `PI_REPL_BENCH_BASELINE_BIN` set, against another build of pi-repl in the same run.
//! 3. Host peak memory (VmHWM) during a 100 MB print flood (1 KB lines) vs during a single
//!    `1+1`.
//! 5. Time from a stop to the exit of `pi-repl mcp --session` right after a call that changed
//!    the workspace: SIGINT and SIGTERM (what Claude Code and Codex send) vs closing stdin
//!    (the graceful stop, which flushes the snapshot and waits for the kernel).
//!
//! Run: `cargo bench --bench engine` (`-- stop` for row 5 alone; uses pi-repl's venv, building it if needed, or
//! `PI_REPL_PYTHON`). Timings on a shared machine are noisy: compare the ratios.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use pi_repl::engine::{CellOptions, Engine};
use pi_repl::home::Home;

#[path = "common/support.rs"]
mod support;
use support::{McpStdio, config};

const CELLS: usize = 500;
const COLD_STARTS: usize = 7;
const FLOOD_BYTES: usize = 100 * 1024 * 1024;

const PYTHON_CLIENT: &str = r#"
import json, statistics, sys, time
from jupyter_client.manager import KernelManager
km = KernelManager(kernel_name="python3", transport="ipc")
km.start_kernel()
kc = km.client()
kc.start_channels()
kc.wait_for_ready(timeout=90)
try:
    kc.execute_interactive("1+1", store_history=True, output_hook=lambda m: None)
    times = []
    for _ in range(int(sys.argv[1])):
        t = time.perf_counter()
        reply = kc.execute_interactive("1+1", store_history=True, output_hook=lambda m: None)
        times.append(time.perf_counter() - t)
        assert reply["content"]["status"] == "ok"
    print(json.dumps(times))
finally:
    kc.stop_channels()
    km.shutdown_kernel(now=True)
"#;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    if let Some(i) = args.iter().position(|a| a == "--flood-child") {
        let bytes: usize = args[i + 1].parse().expect("bytes");
        runtime.block_on(flood_child(bytes));
        return;
    }
    if args.iter().any(|a| a == "--list") {
        println!("engine: benchmark");
        return;
    }
    let python = python();
    println!("interpreter: {}", python.display());
    // `cargo bench --bench engine -- stop` runs only the stop row.
    if args.iter().skip(1).any(|a| a == "stop") {
        stop_latency(&python);
        return;
    }
    // `cargo bench --bench engine -- isolation` runs only the process-isolation row.
    if args.iter().skip(1).any(|a| a == "isolation") {
        runtime.block_on(isolation_cost(&python));
        return;
    }
    let python_floor = runtime.block_on(async {
        let floor = round_trips(&python).await;
        cold_start(&python).await;
        floor
    });
    mcp_round_trips(&python, python_floor);
    flood_memory();
    stop_latency(&python);
}

const STOP_TRIALS: usize = 7;

/// How a server is stopped in `stop_latency`.
#[derive(Clone, Copy, Debug)]
enum Stop {
    CloseStdin,
    Signal(nix::sys::signal::Signal),
    /// The signal while a later cell runs (issue 21: within 100 ms, median).
    SignalDuringCell(nix::sys::signal::Signal),
}

fn stop_latency(python: &std::path::Path) {
    let (_dir, home) = bench_home();
    let time_stop = |stop: Stop, trial: usize| -> f64 {
        let session = format!("stop-{trial}");
        let mut server = McpStdio::spawn(python, &home, &["--session", &session]);
        let mut call = |id: u64, method: &str, params: serde_json::Value| {
            server.call(id, method, params);
        };
        call(
            0,
            "initialize",
            serde_json::json!({
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "bench", "version": "0"}
            }),
        );
        let code = format!("rows = [(i, str(i)) for i in range(200_000)]\ntrial = {trial}");
        call(
            1,
            "tools/call",
            serde_json::json!({"name": "execute", "arguments": {"code": code}}),
        );
        if let Stop::SignalDuringCell(_) = stop {
            server.start_until(
                2,
                "tools/call",
                serde_json::json!({
                    "name": "execute",
                    "arguments": {"code": "import time\nprint('cell-started', flush=True)\ntime.sleep(60)"},
                    "_meta": {"progressToken": "running"},
                }),
                "cell-started",
            );
        }
        let started = Instant::now();
        match stop {
            Stop::CloseStdin => server.close(),
            Stop::Signal(signal) | Stop::SignalDuringCell(signal) => {
                nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(server.child.id() as i32),
                    signal,
                )
                .expect("signal");
                server.child.wait().expect("exit");
            }
        }
        started.elapsed().as_secs_f64() * 1000.0
    };
    let mut medians = Vec::new();
    for stop in [
        Stop::CloseStdin,
        Stop::Signal(nix::sys::signal::Signal::SIGINT),
        Stop::Signal(nix::sys::signal::Signal::SIGTERM),
        Stop::SignalDuringCell(nix::sys::signal::Signal::SIGINT),
        Stop::SignalDuringCell(nix::sys::signal::Signal::SIGTERM),
    ] {
        let mut times: Vec<f64> = (0..STOP_TRIALS).map(|t| time_stop(stop, t)).collect();
        medians.push((stop, summary(&mut times)));
    }
    println!(
        "\nstop to exit of `pi-repl mcp --session` right after a call changed 200k rows, \
         {STOP_TRIALS} trials each"
    );
    let baseline = medians[0].1.0;
    for (stop, (median, p90)) in &medians {
        println!(
            "  {:<28} median {median:.1} ms   p90 {p90:.1} ms   ratio to closing stdin {:.2}x",
            format!("{stop:?}"),
            median / baseline
        );
    }
}

fn python() -> PathBuf {
    if let Some(path) = std::env::var_os("PI_REPL_PYTHON") {
        return PathBuf::from(path);
    }
    let home = Home::from_env().expect("home");
    pi_repl::python_env::venv::run(&home, None, false)
        .expect("setup")
        .python
}

fn bench_home() -> (tempfile::TempDir, Home) {
    let dir = tempfile::tempdir().expect("temp");
    let home = Home::at(dir.path());
    (dir, home)
}

fn summary(times: &mut [f64]) -> (f64, f64) {
    times.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    let median = times[times.len() / 2];
    let p90 = times[times.len() * 9 / 10];
    (median, p90)
}

/// Returns the Python client's median, the floor the MCP row is compared with.
async fn round_trips(python: &std::path::Path) -> f64 {
    let (_dir, home) = bench_home();
    let engine = Engine::start(config(python, &home));
    engine
        .submit("1+1", CellOptions::default())
        .outcome()
        .await
        .expect("warm-up");
    let mut rust = Vec::with_capacity(CELLS);
    for _ in 0..CELLS {
        rust.push(support::timed_one_plus_one(&engine).await);
    }
    engine.shutdown().await;

    let output = Command::new(python)
        .arg("-c")
        .arg(PYTHON_CLIENT)
        .arg(CELLS.to_string())
        .output()
        .expect("python client");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut python_times: Vec<f64> = serde_json::from_slice::<Vec<f64>>(&output.stdout)
        .expect("timings")
        .into_iter()
        .map(|s| s * 1000.0)
        .collect();
    let (rust_median, rust_p90) = summary(&mut rust);
    let (py_median, py_p90) = summary(&mut python_times);
    println!(
        "\n1+1 round trip, {CELLS} sequential cells, store_history=True (as in Jupyter), both sides"
    );
    println!(
        "  pi-repl engine (Rust, IPC)          median {rust_median:.2} ms   p90 {rust_p90:.2} ms"
    );
    println!(
        "  jupyter_client BlockingKernelClient  median {py_median:.2} ms   p90 {py_p90:.2} ms"
    );
    println!(
        "  ratio engine / python client (median): {:.2}x",
        rust_median / py_median
    );
    py_median
}

/// `execute` calls over MCP stdio against the release binary.
/// A build of pi-repl to compare the MCP row with (`PI_REPL_BENCH_BASELINE_BIN`), e.g. the
/// commit before a change that touches every call.
const BASELINE_BIN: &str = "PI_REPL_BENCH_BASELINE_BIN";

fn mcp_round_trips(python: &std::path::Path, python_floor_ms: f64) {
    let this = std::path::PathBuf::from(env!("CARGO_BIN_EXE_pi-repl"));
    let baseline = std::env::var_os(BASELINE_BIN).map(std::path::PathBuf::from);
    let (_dir, home) = bench_home();
    let mut this_times = Vec::with_capacity(CELLS);
    let mut baseline_times = Vec::with_capacity(CELLS);
    // In rounds, alternating, so a noisy moment lands on both.
    const ROUNDS: usize = 5;
    for _ in 0..ROUNDS {
        this_times.extend(mcp_calls(&this, python, &home, CELLS / ROUNDS));
        if let Some(baseline) = &baseline {
            baseline_times.extend(mcp_calls(baseline, python, &home, CELLS / ROUNDS));
        }
    }
    let (median, p90) = summary(&mut this_times);
    println!("\n1+1 as MCP `execute` calls over stdio, {CELLS} sequential (release binary)");
    println!("  pi-repl mcp                          median {median:.2} ms   p90 {p90:.2} ms");
    println!("  jupyter_client floor (row above)     median {python_floor_ms:.2} ms");
    println!(
        "  ratio mcp / python client (median): {:.2}x",
        median / python_floor_ms
    );
    if let Some(baseline) = &baseline {
        let (base_median, base_p90) = summary(&mut baseline_times);
        println!(
            "  baseline build {}  median {base_median:.2} ms   p90 {base_p90:.2} ms",
            baseline.display()
        );
        println!(
            "  ratio this build / baseline build (median): {:.2}x",
            median / base_median
        );
    }
}

/// `calls` timed `1+1` calls to a fresh `binary mcp` (after one untimed warm-up call).
fn mcp_calls(
    binary: &std::path::Path,
    python: &std::path::Path,
    home: &Home,
    calls: usize,
) -> Vec<f64> {
    let mut server = McpStdio::spawn_binary(binary, python, home, &[]);
    let mut call =
        |id: u64, method: &str, params: serde_json::Value| server.call(id, method, params);
    call(
        0,
        "initialize",
        serde_json::json!({
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "bench", "version": "0"}
        }),
    );
    call(
        1,
        "tools/call",
        serde_json::json!({"name": "execute", "arguments": {"code": "1+1"}}),
    );
    let mut times = Vec::with_capacity(calls);
    for i in 0..calls as u64 {
        let started = Instant::now();
        let response = call(
            2 + i,
            "tools/call",
            serde_json::json!({"name": "execute", "arguments": {"code": "1+1"}}),
        );
        times.push(started.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(response["result"]["content"][0]["text"], "2");
    }
    server.close();
    times
}

async fn cold_start(python: &std::path::Path) {
    let mut imports = Vec::new();
    for _ in 0..COLD_STARTS {
        let started = Instant::now();
        let status = Command::new(python)
            .args(["-c", "import ipykernel.kernelapp"])
            .status()
            .expect("import");
        assert!(status.success());
        imports.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    let mut starts = Vec::new();
    let mut with_toolbox = Vec::new();
    for _ in 0..COLD_STARTS {
        for toolbox in [false, true] {
            let (_dir, home) = bench_home();
            let mut config = config(python, &home);
            if toolbox {
                let tools =
                    pi_repl::python_env::embedded_package::toolbox_dir(&config.kernel.module_dir);
                config.helpers =
                    pi_repl::helpers::discover(&config.kernel.cwd, &home.helpers(), &tools)
                        .load_order();
            }
            let started = Instant::now();
            let engine = Engine::start(config);
            let outcome = engine
                .submit("1+1", CellOptions::default())
                .outcome()
                .await
                .expect("cell");
            let elapsed = started.elapsed().as_secs_f64() * 1000.0;
            assert_eq!(outcome.result.as_deref(), Some("2"));
            engine.shutdown().await;
            if toolbox {
                with_toolbox.push(elapsed);
            } else {
                starts.push(elapsed);
            }
        }
    }
    let (import_median, _) = summary(&mut imports);
    let (start_median, _) = summary(&mut starts);
    let (toolbox_median, _) = summary(&mut with_toolbox);
    println!("\ncold start, median of {COLD_STARTS}");
    println!("  python -c 'import ipykernel.kernelapp'   {import_median:.0} ms");
    println!("  engine start to first 1+1 result          {start_median:.0} ms");
    println!("  same, with the default toolbox loaded     {toolbox_median:.0} ms");
    println!(
        "  ratio start / import floor: {:.2}x (with the toolbox: {:.2}x)",
        start_median / import_median,
        toolbox_median / import_median
    );
}

/// Engine start to the first `1+1` result, pairs of starts with and without the kernel's own
/// PID namespace (issue 11), alternating so both see the same machine.
async fn isolation_cost(python: &std::path::Path) {
    let mut isolated = Vec::new();
    let mut shared = Vec::new();
    for _ in 0..ISOLATION_PAIRS {
        for isolate in [true, false] {
            let (_dir, home) = bench_home();
            let mut config = config(python, &home);
            config.kernel.isolate_processes = isolate;
            let started = Instant::now();
            let engine = Engine::start(config);
            let outcome = engine
                .submit("1+1", CellOptions::default())
                .outcome()
                .await
                .expect("cell");
            let elapsed = started.elapsed().as_secs_f64() * 1000.0;
            assert_eq!(outcome.result.as_deref(), Some("2"));
            engine.shutdown().await;
            if isolate { &mut isolated } else { &mut shared }.push(elapsed);
        }
    }
    let (isolated_median, isolated_p90) = summary(&mut isolated);
    let (shared_median, shared_p90) = summary(&mut shared);
    println!("\ncold start with and without process isolation, median of {ISOLATION_PAIRS}");
    println!("  own PID namespace        {isolated_median:.0} ms (p90 {isolated_p90:.0})");
    println!("  isolation off            {shared_median:.0} ms (p90 {shared_p90:.0})");
    println!(
        "  ratio: {:.2}x (+{:.0} ms)",
        isolated_median / shared_median,
        isolated_median - shared_median
    );
}

const ISOLATION_PAIRS: usize = 21;

fn flood_memory() {
    let me = std::env::current_exe().expect("exe");
    let measure = |bytes: usize| -> (u64, f64) {
        let output = Command::new(&me)
            .args(["--flood-child", &bytes.to_string()])
            .output()
            .expect("flood child");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let text = String::from_utf8_lossy(&output.stdout);
        let mut parts = text.split_whitespace();
        let kib: u64 = parts.next().expect("hwm").parse().expect("kib");
        let seconds: f64 = parts.next().expect("secs").parse().expect("secs");
        (kib, seconds)
    };
    let (idle_kib, _) = measure(0);
    let (flood_kib, flood_secs) = measure(FLOOD_BYTES);
    println!("\nhost peak memory (VmHWM of the host process)");
    println!(
        "  one 1+1 cell                     {:.1} MB",
        idle_kib as f64 / 1024.0
    );
    println!(
        "  100 MB print flood               {:.1} MB   ({:.1} s, {:.0} MB/s)",
        flood_kib as f64 / 1024.0,
        flood_secs,
        100.0 / flood_secs
    );
    println!(
        "  ratio flood / one cell: {:.2}x",
        flood_kib as f64 / idle_kib as f64
    );
}

/// Runs in a child process so its peak memory is the engine's alone.
async fn flood_child(bytes: usize) {
    let python = python();
    let (_dir, home) = bench_home();
    let engine = Engine::start(config(&python, &home));
    let code = if bytes == 0 {
        "1+1".to_string()
    } else {
        format!(
            "line = 'x' * 999 + '\\n'\nfor _ in range({}):\n    print(line, end='')",
            bytes / 1000
        )
    };
    let started = Instant::now();
    let outcome = engine
        .submit(code, CellOptions::default())
        .outcome()
        .await
        .expect("cell");
    let seconds = started.elapsed().as_secs_f64();
    assert_eq!(outcome.status, pi_repl::engine::outcome::Status::Ok);
    if bytes > 0 {
        let total: usize = outcome.truncated.iter().map(|t| t.total_chars).sum();
        assert_eq!(total, bytes / 1000 * 1000, "every character arrived");
    }
    engine.shutdown().await;
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    let hwm = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .expect("VmHWM");
    println!("{hwm} {seconds}");
}
