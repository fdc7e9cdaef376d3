//! Rewind benchmark (issue 25): how long `execute {"rewind": N}` takes with a 400 MB and a 4 GB
//! value (random float64, so no two 16 MiB chunks are alike), alternating between the state
//! after cell 1 and the state after cell 2 (which changed one element, one chunk, and rebound
//! two small names), with `1+1` in the same run as the baseline.
//!
//! Drives the engine library (what `pi-repl mcp` calls) with a real kernel and a durable
//! session; each rewind includes what a real one does: waiting for the last save child, saving
//! the present (nothing to write), reviving the target in full (buffers memory-mapped and
//! hashed), and the capture of the new state before the answer.
//!
//! Run: `PI_REPL_PYTHON=target/test-home/venv/bin/python cargo bench --bench rewind` (the
//! recorded figures used `cargo test --bench rewind`, the debug build: the work is the
//! kernel's).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pi_repl::engine::{CellOptions, Engine, SAVE_CHILD_LIMIT, SnapshotSettings};
use pi_repl::home::Home;

#[path = "common/support.rs"]
mod support;
use support::{config, timed_one_plus_one};

/// Rewinds per size, alternating targets.
const ROUNDS: usize = 6;

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("rewind: benchmark");
        return;
    }
    let python = PathBuf::from(
        std::env::var_os("PI_REPL_PYTHON").expect("set PI_REPL_PYTHON (scripts/test builds one)"),
    );
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        println!("\nrewind between the states after cells 1 and 2 ({ROUNDS} rewinds per size)");
        for (label, bytes) in [("400 MB", 400_000_000u64), ("4 GB", 4_000_000_000)] {
            let dir = tempfile::tempdir().expect("temp");
            let home = Home::at(dir.path());
            let (baseline, rewinds) = one_size(&python, &home, dir.path(), bytes).await;
            let (b, _) = stats(&baseline);
            let (median, max) = stats(&rewinds);
            println!(
                "  {label}: rewind median {median:.1} ms, max {max:.1} ms; `1+1` in the same \
                 session {b:.1} ms (rewind / `1+1`: {:.0}x)",
                median / b
            );
        }
    });
}

async fn one_size(python: &Path, home: &Home, dir: &Path, bytes: u64) -> (Vec<f64>, Vec<f64>) {
    let session = pi_repl::session::open(
        home,
        dir,
        &pi_repl::session::SessionRequest {
            name: Some("rewind".into()),
            ..Default::default()
        },
    )
    .expect("session");
    let snapshot_dir = session.snapshot_dir().expect("durable");
    let mut engine_config = config(python, home);
    engine_config.snapshot = Some(SnapshotSettings {
        dir: snapshot_dir.clone(),
        key_file: pi_repl::session::ensure_key(home).expect("key"),
        max_binding_bytes: pi_repl::engine::DEFAULT_MAX_BINDING_BYTES,
        max_total_bytes: 16 << 30,
        refresh: None,
        forked_from: None,
        fork: true,
        child_limit: SAVE_CHILD_LIMIT,
        remote_dir: None,
        rewind_max_bytes: pi_repl::engine::DEFAULT_REWIND_MAX_BYTES,
        reinstall_packages: true,
    });
    let engine = Engine::start(engine_config);
    run(
        &engine,
        &format!(
            "import numpy as np\nbig = np.random.default_rng(1).random({} // 8)\nsmall = 1",
            bytes
        ),
    )
    .await;
    run(&engine, "big[0] = 2.0\nsmall = 2\nlater = 1").await;
    wait_for(&snapshot_dir.join("states").join("2.json")).await;
    let mut baseline = Vec::new();
    for _ in 0..5 {
        baseline.push(timed_one_plus_one(&engine).await);
    }
    let mut rewinds = Vec::new();
    for round in 0..ROUNDS {
        let target = if round % 2 == 0 { 1 } else { 2 };
        let started = Instant::now();
        let outcome = engine
            .submit_rewind(target)
            .outcome()
            .await
            .expect("rewind");
        rewinds.push(started.elapsed().as_secs_f64() * 1000.0);
        assert!(
            outcome.error.is_none() && outcome.stdout.contains("Rewound"),
            "{outcome:?}"
        );
        let check = run(&engine, "(float(big[0]) == 2.0, small)").await;
        let expected = if target == 1 {
            "(False, 1)"
        } else {
            "(True, 2)"
        };
        assert_eq!(check.result.as_deref(), Some(expected));
    }
    engine.shutdown().await;
    (baseline, rewinds)
}

async fn run(engine: &Engine, code: &str) -> pi_repl::engine::outcome::Outcome {
    let outcome = engine
        .submit(code, CellOptions::default())
        .outcome()
        .await
        .expect("cell");
    assert!(outcome.error.is_none(), "{code}: {outcome:?}");
    outcome
}

/// Waits (bounded) for the save of cell 2's state to commit: it is kept once committed.
async fn wait_for(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(600);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn stats(times: &[f64]) -> (f64, f64) {
    let mut sorted = times.to_vec();
    sorted.sort_by(f64::total_cmp);
    (sorted[sorted.len() / 2], sorted[sorted.len() - 1])
}
