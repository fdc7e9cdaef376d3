//! Local kernelspec benchmark: the same engine driving pi-repl's own ipykernel (ZMQ over IPC)
//! and Deno's kernel launched from a kernelspec (`--kernel deno`: ZMQ over loopback TCP), in
//! one run.
//!
//! Rows:
//! 1. `1+1` round trip, `CELLS` sequential cells each, in alternating rounds of `ROUND`.
//! 2. Cold start to the first result, median of `COLD_STARTS` (pi-repl's kernel without helpers;
//!    Deno's has none).
//!
//! Run: `PI_REPL_PYTHON=target/test-home/venv/bin/python cargo bench --bench kernelspec` (the
//! test venv has the `deno` package: its binary is `bin/deno` beside the interpreter; or set
//! `PI_REPL_DENO`).

use std::path::PathBuf;
use std::time::Instant;

use pi_repl::engine::{CellOptions, Engine, EngineConfig};
use pi_repl::home::Home;
use pi_repl::kernel::kernelspecs;

#[path = "common/support.rs"]
mod support;
use support::config;

const CELLS: usize = 300;
const ROUND: usize = 50;
const COLD_STARTS: usize = 7;

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("kernelspec: benchmark");
        return;
    }
    let python = PathBuf::from(
        std::env::var_os("PI_REPL_PYTHON")
            .expect("set PI_REPL_PYTHON to an interpreter with ipykernel (the test venv)"),
    );
    let deno = std::env::var_os("PI_REPL_DENO")
        .map(PathBuf::from)
        .unwrap_or_else(|| python.with_file_name("deno"));
    assert!(
        deno.is_file(),
        "no deno at {}: set PI_REPL_DENO",
        deno.display()
    );
    println!(
        "interpreter: {}\ndeno: {}",
        python.display(),
        deno.display()
    );
    let dir = tempfile::tempdir().expect("temp");
    let home = Home::at(dir.path());
    // The kernelspec `pi-repl setup --deno` writes, pointing at this binary.
    let spec_dir = home.jupyter().join("kernels").join("deno");
    std::fs::create_dir_all(&spec_dir).expect("kernelspec dir");
    let spec = serde_json::json!({
        "argv": [deno, "jupyter", "--kernel", "--conn", "{connection_file}"],
        "display_name": "Deno",
        "language": "typescript",
        "interrupt_mode": "message",
    });
    std::fs::write(spec_dir.join("kernel.json"), spec.to_string()).expect("kernelspec");
    let python_config = config(&python, &home);
    let mut deno_config = config(&python, &home);
    deno_config.kernel.kernelspec = Some(
        kernelspecs::find("deno", &kernelspecs::search_path(&home)).expect("the deno kernelspec"),
    );
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let [(python_median, python_p90), (deno_median, deno_p90)] =
            round_trips([&python_config, &deno_config]).await;
        println!("\n1+1 round trip, {CELLS} sequential cells each, alternating rounds of {ROUND}");
        println!("  pi-repl's ipykernel (IPC)        median {python_median:.2} ms   p90 {python_p90:.2} ms");
        println!("  Deno kernelspec (loopback TCP)   median {deno_median:.2} ms   p90 {deno_p90:.2} ms");
        println!("  ratio deno / python (median): {:.2}x", deno_median / python_median);

        let python_start = cold_start(&python_config).await;
        let deno_start = cold_start(&deno_config).await;
        println!("\ncold start to the first result, median of {COLD_STARTS}");
        println!("  pi-repl's ipykernel              {python_start:.0} ms");
        println!("  Deno kernelspec                  {deno_start:.0} ms");
    });
}

fn summary(times: &mut [f64]) -> (f64, f64) {
    times.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    (times[times.len() / 2], times[times.len() * 9 / 10])
}

/// Both engines run at once and take turns, `ROUND` cells each, so a busy spell on the shared
/// machine hits both alike.
async fn round_trips(configs: [&EngineConfig; 2]) -> [(f64, f64); 2] {
    let engines = configs.map(|config| Engine::start(config.clone()));
    for engine in &engines {
        support::timed_one_plus_one(engine).await;
    }
    let mut times = [Vec::with_capacity(CELLS), Vec::with_capacity(CELLS)];
    for _ in 0..CELLS / ROUND {
        for (engine, times) in engines.iter().zip(times.iter_mut()) {
            for _ in 0..ROUND {
                times.push(support::timed_one_plus_one(engine).await);
            }
        }
    }
    for engine in &engines {
        engine.shutdown().await;
    }
    times.map(|mut times| summary(&mut times))
}

async fn cold_start(config: &EngineConfig) -> f64 {
    let mut times = Vec::with_capacity(COLD_STARTS);
    for _ in 0..COLD_STARTS {
        let started = Instant::now();
        let engine = Engine::start(config.clone());
        let outcome = engine
            .submit("1+1", CellOptions::default())
            .outcome()
            .await
            .expect("cell");
        times.push(started.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(outcome.result.as_deref(), Some("2"));
        engine.shutdown().await;
    }
    summary(&mut times).0
}
