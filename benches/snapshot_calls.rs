//! Snapshot benchmark while the agent works (issue #10): with a ~300 MB value that pickles
//! in-band and changes every call, the median call time of a durable session against an
//! ephemeral one in the same run; whether saves commit during the calls; and the kernel's pause
//! at `fork()` (the only part of a save a cell can wait for) with 100 MB and 1 GB resident.
//!
//! Drives the engine library (what `pi-repl mcp` and `pi-repl exec` call) with a real kernel.
//! Each call is sent as soon as the previous one answered, as an agent does.
//!
//! Then: the real `pi-repl mcp --session` is SIGKILLed after 20 busy calls (each changes
//! the list and works for 0.5 s), and a new server revives the session: which call's state
//! came back (issue #10: one of the last 3; issue 21: the last).
//!
//! Last rows (issue 21): with 0, 1 and 4 GB resident, a call that changes the data (its answer
//! waits for the capture's `fork()`) and `1+1` right after it, durable against ephemeral in the
//! same run (target: `1+1` within ephemeral + 10 ms).
//!
//! Run: `PI_REPL_PYTHON=target/test-home/venv/bin/python cargo bench --bench snapshot_calls`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pi_repl::engine::{CellOptions, Engine, SAVE_CHILD_LIMIT, SnapshotSettings};
use pi_repl::home::Home;

#[path = "common/support.rs"]
mod support;
use support::{McpStdio, config};

/// Busy calls before the host is killed, and how long each works (seconds): back-to-back
/// calls of half a second (faster than any model turn), then a pace closer to an agent's.
const BUSY_CALLS: u64 = 20;
const BUSY_PACES: [f64; 2] = [0.5, 1.5];

const CALLS: usize = 40;

/// About 300 MB of small Python objects: pickled in-band, so a save copies nothing out-of-band.
const BUILD: &str = "data = [(i, str(i)) for i in range(2_000_000)]\nk = 0";

/// One small change to `data` per call (its name is mentioned, so every save re-checks it).
const CHANGE: &str = "k += 1\ndata[k] = (k, 'changed')\nk";

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("snapshot_calls: benchmark");
        return;
    }
    let python = PathBuf::from(
        std::env::var_os("PI_REPL_PYTHON").expect("set PI_REPL_PYTHON (scripts/test builds one)"),
    );
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let dir = tempfile::tempdir().expect("temp");
        let home = Home::at(dir.path());
        let ephemeral = calls(&python, &home, None).await;
        let session = pi_repl::session::open(
            &home,
            dir.path(),
            &pi_repl::session::SessionRequest {
                name: Some("bench".into()),
                ..Default::default()
            },
        )
        .expect("session");
        let settings = SnapshotSettings {
            dir: session.snapshot_dir().expect("durable"),
            key_file: pi_repl::session::ensure_key(&home).expect("key"),
            max_binding_bytes: pi_repl::engine::DEFAULT_MAX_BINDING_BYTES,
            max_total_bytes: pi_repl::engine::DEFAULT_MAX_TOTAL_BYTES,
            refresh: None,
            forked_from: None,
            fork: true,
            child_limit: SAVE_CHILD_LIMIT,
            reinstall_packages: true,
            remote_dir: None,
            rewind_max_bytes: pi_repl::engine::DEFAULT_REWIND_MAX_BYTES,
        };
        let durable = calls(&python, &home, Some(settings.clone())).await;
        let (e_median, e_max) = stats(&ephemeral.times);
        let (d_median, d_max) = stats(&durable.times);
        let (e_p90, d_p90) = (p90(&ephemeral.times), p90(&durable.times));
        println!("\n{CALLS} calls, each changing one item of a ~300 MB list of 2M tuples");
        println!("  ephemeral: median {e_median:.1} ms, p90 {e_p90:.1} ms, max {e_max:.1} ms");
        println!("  durable:   median {d_median:.1} ms, p90 {d_p90:.1} ms, max {d_max:.1} ms");
        println!(
            "  ratio durable / ephemeral: median {:.2}x, p90 {:.2}x   (target <= 1.2x)",
            d_median / e_median,
            d_p90 / e_p90
        );
        println!(
            "  snapshots committed during the {CALLS} calls: {} (generation {} -> {})",
            durable.generation_after - durable.generation_before,
            durable.generation_before,
            durable.generation_after
        );
        println!(
            "  then two more snapshots committed during {} back-to-back calls",
            durable.busy_calls
        );
        println!(
            "  after a pause, a new kernel revives the last call's value: {}",
            durable.last_value_saved
        );
        drop(session);
        for pace in BUSY_PACES {
            kill_after_busy_calls(&python, &home, pace);
        }
        println!("\n`1+1` right after a call that changed the data (medians of {AFTER_CELL_ROUNDS})");
        for (label, bytes) in [("0 GB", 0u64), ("1 GB", 1_000_000_000), ("4 GB", 4_000_000_000)] {
            let ephemeral = after_a_cell(&python, &home, dir.path(), None, bytes).await;
            let durable = after_a_cell(&python, &home, dir.path(), Some(label), bytes).await;
            let (ec, _) = stats(&ephemeral.0);
            let (dc, _) = stats(&durable.0);
            let (e1, _) = stats(&ephemeral.1);
            let (d1, _) = stats(&durable.1);
            println!(
                "  {label}: the changing call {ec:.1} -> {dc:.1} ms (+{:.1}); `1+1` after it \
                 {e1:.1} -> {d1:.1} ms (+{:.1}, target <= +10)",
                dc - ec,
                d1 - e1
            );
        }
        for (label, bytes, saves) in [
            ("100 MB", 100_000_000u64, 5),
            ("1 GB", 1_000_000_000, 5),
            ("4 GB", 4_000_000_000, 2),
        ] {
            let code = format!("import numpy as np\nheld = np.ones({bytes} // 8)");
            let pauses = fork_pauses(&python, &home, dir.path(), label, &code, saves).await;
            let (median, max) = stats(&pauses);
            println!(
                "fork pause with {label} resident (kernel's os.fork(), {} saves): median {median:.1} ms, max {max:.1} ms",
                pauses.len()
            );
        }
    });
}

struct Calls {
    times: Vec<f64>,
    generation_before: u64,
    generation_after: u64,
    /// Calls made after the timed ones until two more snapshots committed during calls.
    busy_calls: usize,
    last_value_saved: bool,
}

async fn calls(python: &Path, home: &Home, snapshot: Option<SnapshotSettings>) -> Calls {
    let dir = snapshot.as_ref().map(|s| s.dir.clone());
    let mut config = config(python, home);
    config.snapshot = snapshot.clone();
    let engine = Engine::start(config.clone());
    run(&engine, BUILD).await;
    let generation = || dir.as_deref().map_or(0, generation_of);
    // Let the first save of the big value finish, so every row starts alike.
    if dir.is_some() {
        wait_for(|| generation() > 0, 300).await;
    }
    let generation_before = generation();
    let mut times = Vec::new();
    let mut last = String::new();
    for _ in 0..CALLS {
        let started = Instant::now();
        last = run(&engine, CHANGE).await;
        times.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    let generation_after = generation();
    // Calls go on, back to back, until two more snapshots have committed during them.
    let mut busy_calls = 0;
    if dir.is_some() {
        let target = generation() + 2;
        let deadline = Instant::now() + Duration::from_secs(300);
        while generation() < target && Instant::now() < deadline {
            last = run(&engine, CHANGE).await;
            busy_calls += 1;
        }
    }
    let mut last_value_saved = false;
    if let Some(dir) = &dir {
        // A pause: the engine saves the last calls; then the kernel is killed and a new one
        // revives the snapshot.
        let journal = dir.parent().expect("session dir").join("answered.jsonl");
        wait_for(
            || !std::fs::read_to_string(&journal).is_ok_and(|t| t.contains("\"cell\"")),
            300,
        )
        .await;
        engine.shutdown_now(Duration::ZERO).await;
        let revived = Engine::start(config);
        last_value_saved = run(&revived, "k").await == last;
        revived.shutdown_now(Duration::ZERO).await;
    } else {
        engine.shutdown().await;
    }
    Calls {
        times,
        generation_before,
        generation_after,
        busy_calls,
        last_value_saved,
    }
}

/// Rounds of the `1+1` rows.
const AFTER_CELL_ROUNDS: usize = 15;

/// With `bytes` of array resident, `AFTER_CELL_ROUNDS` times: a call that changes it, then `1+1`
/// at once; their times. `label`: a durable session of that name; `None`: ephemeral.
async fn after_a_cell(
    python: &Path,
    home: &Home,
    cwd: &Path,
    label: Option<&str>,
    bytes: u64,
) -> (Vec<f64>, Vec<f64>) {
    let mut config = config(python, home);
    let session = label.map(|label| {
        pi_repl::session::open(
            home,
            cwd,
            &pi_repl::session::SessionRequest {
                name: Some(format!("after-{}", label.replace(' ', ""))),
                ..Default::default()
            },
        )
        .expect("session")
    });
    if let Some(session) = &session {
        config.snapshot = Some(SnapshotSettings {
            dir: session.snapshot_dir().expect("durable"),
            key_file: pi_repl::session::ensure_key(home).expect("key"),
            max_binding_bytes: pi_repl::engine::DEFAULT_MAX_BINDING_BYTES,
            max_total_bytes: pi_repl::engine::DEFAULT_MAX_TOTAL_BYTES,
            refresh: None,
            forked_from: None,
            fork: true,
            child_limit: SAVE_CHILD_LIMIT,
            reinstall_packages: true,
            remote_dir: None,
            rewind_max_bytes: pi_repl::engine::DEFAULT_REWIND_MAX_BYTES,
        });
    }
    let engine = Engine::start(config);
    run(
        &engine,
        &format!("import numpy as np\nheld = np.ones(max({bytes} // 8, 1))"),
    )
    .await;
    if let Some(session) = &session {
        let dir = session.snapshot_dir().expect("durable");
        wait_for(|| generation_of(&dir) > 0, 600).await;
    }
    let (mut changing, mut after) = (Vec::new(), Vec::new());
    for _ in 0..AFTER_CELL_ROUNDS {
        let started = Instant::now();
        run(&engine, "held[0] += 1").await;
        changing.push(started.elapsed().as_secs_f64() * 1000.0);
        let started = Instant::now();
        run(&engine, "1+1").await;
        after.push(started.elapsed().as_secs_f64() * 1000.0);
        // The save of the change goes on in its child; the next round starts once it is done
        // (the ephemeral engine has none), so every round meets the same state.
        if let Some(session) = &session {
            let journal = session
                .snapshot_dir()
                .expect("durable")
                .parent()
                .expect("session dir")
                .join("answered.jsonl");
            wait_for(
                || !std::fs::read_to_string(&journal).is_ok_and(|t| t.contains("\"cell\"")),
                600,
            )
            .await;
        }
    }
    engine.shutdown().await;
    (changing, after)
}

/// The fork pauses of the saves of a session holding `code`'s data.
async fn fork_pauses(
    python: &Path,
    home: &Home,
    cwd: &Path,
    label: &str,
    code: &str,
    saves: usize,
) -> Vec<f64> {
    let session = pi_repl::session::open(
        home,
        cwd,
        &pi_repl::session::SessionRequest {
            name: Some(format!("fork-{}", label.replace(' ', ""))),
            ..Default::default()
        },
    )
    .expect("session");
    let mut config = config(python, home);
    config.snapshot = Some(SnapshotSettings {
        dir: session.snapshot_dir().expect("durable"),
        key_file: pi_repl::session::ensure_key(home).expect("key"),
        max_binding_bytes: pi_repl::engine::DEFAULT_MAX_BINDING_BYTES,
        max_total_bytes: pi_repl::engine::DEFAULT_MAX_TOTAL_BYTES,
        refresh: None,
        forked_from: None,
        fork: true,
        child_limit: SAVE_CHILD_LIMIT,
        reinstall_packages: true,
        remote_dir: None,
        rewind_max_bytes: pi_repl::engine::DEFAULT_REWIND_MAX_BYTES,
    });
    let engine = Engine::start(config);
    run(&engine, code).await;
    let mut pauses = Vec::new();
    let status = "__import__('pi_repl_kernel.snapshot', fromlist=['status']).status()['last_save']";
    let mut seen = std::collections::BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(600);
    while pauses.len() < saves && Instant::now() < deadline {
        // Each call makes a save due (the array is hinted, so it is re-hashed by the child).
        let text = run(&engine, &format!("held[0] += 1\n{status}")).await;
        if let (Some(pid), Some(ms)) = (field(&text, "'pid': "), field(&text, "'fork_ms': "))
            && seen.insert(pid.to_string())
        {
            pauses.push(ms.parse().expect("fork_ms"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    engine.shutdown().await;
    pauses
}

/// The text after `key` in a printed dict, up to the next comma or brace.
/// SIGKILL of the host after `BUSY_CALLS` busy calls; prints which call the revive holds.
fn kill_after_busy_calls(python: &Path, home: &Home, pace: f64) {
    let busy = format!("import time\nk += 1\ndata[k] = (k, 'changed')\ntime.sleep({pace})\nk");
    let session = format!("busy-{pace}");
    let initialize = serde_json::json!({
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "bench", "version": "0"}
    });
    let execute = |code: &str| serde_json::json!({"name": "execute", "arguments": {"code": code}});
    let text = |response: &serde_json::Value| {
        response["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let mut server = McpStdio::spawn(python, home, &["--session", &session]);
    server.call(0, "initialize", initialize.clone());
    server.call(1, "tools/call", execute(BUILD));
    server.call(2, "tools/call", execute("1"));
    // The kernel's pid as this process sees it (inside its PID namespace it is 2).
    let kernel = kernel_of(server.child.id() as i32).expect("the kernel under its host");
    for call in 1..=BUSY_CALLS {
        server.call(2 + call, "tools/call", execute(&busy));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server.child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("SIGKILL");
    server.child.wait().expect("reaped");
    // The kernel ends with its host (the lifeline); the next server must not meet it. This
    // process adopted it (the engine rows above made it a child subreaper), so it may linger
    // as a zombie: that counts as gone.
    let deadline = Instant::now() + Duration::from_secs(120);
    while std::fs::read_to_string(format!("/proc/{kernel}/stat")).is_ok_and(|stat| {
        stat.rsplit(')')
            .next()
            .and_then(|s| s.split_whitespace().next())
            != Some("Z")
    }) {
        assert!(Instant::now() < deadline, "the kernel outlived its host");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut next = McpStdio::spawn(python, home, &["--session", &session]);
    next.call(0, "initialize", initialize);
    let revived = text(&next.call(1, "tools/call", execute("k")));
    let held: u64 = revived
        .lines()
        .last()
        .and_then(|line| line.trim().parse().ok())
        .unwrap_or(0);
    next.close();
    println!(
        "SIGKILL of `pi-repl mcp` after {BUSY_CALLS} busy calls ({pace} s each, each changing the \
         ~300 MB list): the revive holds call {held} of {BUSY_CALLS} (one of the last 3: {})",
        held + 3 > BUSY_CALLS
    );
}

fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let start = text.find(key)? + key.len();
    let rest = &text[start..];
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    Some(rest[..end].trim())
}

async fn run(engine: &Engine, code: &str) -> String {
    let outcome = engine
        .submit(code, CellOptions::default())
        .outcome()
        .await
        .expect("the engine ran the cell");
    assert!(outcome.error.is_none(), "{outcome:?}");
    outcome.result.unwrap_or_default()
}

async fn wait_for(done: impl Fn() -> bool, seconds: u64) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while !done() {
        assert!(Instant::now() < deadline, "timed out");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn generation_of(dir: &Path) -> u64 {
    let text = std::fs::read_to_string(dir.join("manifest.json")).unwrap_or_default();
    serde_json::from_str::<serde_json::Value>(&text).unwrap_or_default()["generation"]
        .as_u64()
        .unwrap_or(0)
}

fn p90(times: &[f64]) -> f64 {
    let mut sorted = times.to_vec();
    sorted.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    sorted
        .get((sorted.len() * 9).div_ceil(10).saturating_sub(1))
        .copied()
        .unwrap_or(f64::NAN)
}

fn stats(times: &[f64]) -> (f64, f64) {
    let mut sorted = times.to_vec();
    sorted.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    let median = sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN);
    let max = sorted.last().copied().unwrap_or(f64::NAN);
    (median, max)
}

/// The kernel under `host`, as this process's /proc names it: the deepest process running
/// pi-repl's kernel module (a launcher may stand above it), not the namespace's init
/// (`pi-repl-init`) nor a save child (`pi-repl-save`), which outlive a host on purpose.
fn kernel_of(host: i32) -> Option<i32> {
    let parent_of = |pid: i32| -> Option<i32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit(')')
            .next()?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    let depth_under_host = |pid: i32| -> Option<usize> {
        let mut at = pid;
        for depth in 1..=16 {
            let parent = parent_of(at)?;
            if parent == host {
                return Some(depth);
            }
            if parent <= 1 {
                return None;
            }
            at = parent;
        }
        None
    };
    std::fs::read_dir("/proc")
        .ok()?
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            String::from_utf8_lossy(&cmdline).contains("pi_repl_kernel")
                && !comm.trim().starts_with("pi-repl-")
        })
        .filter_map(|pid| Some((depth_under_host(pid)?, pid)))
        .max()
        .map(|(_, pid)| pid)
}
