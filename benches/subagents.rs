//! `spawn_agent` admission time (issue #15): how long the cell waits for a handle, with and
//! without a fork, measured in the cell around the call.
//!
//! One `pi-repl exec --session` run: a cell with a small namespace spawns N children one after
//! another (each waited for before the next, so the running limit never refuses) and prints the
//! median and the worst of each kind. No model answers here: each child ends `errored` at its
//! first model request, which does not matter for the time to admission. `fork=True` includes
//! the in-cell snapshot commit (`snapshot.save_for_fork`).
//!
//! Run: `PI_REPL_PYTHON=target/test-home/venv/bin/python cargo bench --bench subagents`.

use std::path::PathBuf;
use std::process::Command;

const SPAWNS: usize = 15;

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("subagents: benchmark");
        return;
    }
    let python = PathBuf::from(
        std::env::var_os("PI_REPL_PYTHON").expect("set PI_REPL_PYTHON (scripts/test builds one)"),
    );
    let dir = tempfile::tempdir().expect("temp");
    let code = format!(
        "import time, statistics\n\
         rows = [list(range(1000)) for _ in range(100)]\n\
         out = {{}}\n\
         for fork in (False, True):\n    \
             ts = []\n    \
             for i in range({SPAWNS}):\n        \
                 rows[i % 100].append(i)  # something changed since the last save\n        \
                 t = time.perf_counter()\n        \
                 h = spawn_agent('measure', fork=fork)\n        \
                 ts.append((time.perf_counter() - t) * 1000)\n        \
                 while h.status == 'running':\n            \
                     time.sleep(0.02)\n    \
             out[fork] = (statistics.median(ts), max(ts))\n\
         for fork, (median, worst) in out.items():\n    \
             print(f'fork={{fork}}: median {{median:.1f}} ms, worst {{worst:.1f}} ms')"
    );
    let output = Command::new(env!("CARGO_BIN_EXE_pi-repl"))
        .args(["exec", "--session", "bench", "--python"])
        .arg(&python)
        .arg(code)
        .env("PI_REPL_HOME", dir.path().join("home"))
        .env("PI_REPL_AGENT_MAX_RUNNING", "64")
        .current_dir(dir.path())
        .output()
        .expect("run pi-repl exec");
    println!("spawn_agent: time to the handle, {SPAWNS} spawns each, in the cell");
    print!("{}", String::from_utf8_lossy(&output.stdout));
    if !output.status.success() {
        eprint!("{}", String::from_utf8_lossy(&output.stderr));
        std::process::exit(1);
    }
}
