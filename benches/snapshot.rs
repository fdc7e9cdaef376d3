//! Snapshot benchmark at the product level: restart to the first result of a durable session
//! holding ~1 GB, against an empty session, in one run (issue #3's "restart-to-first-result").
//!
//! Each row runs the real binary, `pi-repl exec --session NAME '1+1'`: a new process, a new
//! kernel, the helpers, the snapshot store, the eager revive, then the cell. The 1 GB is five
//! 200 MB numpy arrays plus small values; they come back memory-mapped, so the cost of reading
//! them moves to first use (measured too, for honesty). The store-level rows (no-op save, one
//! small change, against the full re-pickle baseline) are `python/bench/snapshot_bench.py`.
//!
//! Run: `PI_REPL_PYTHON=target/test-home/venv/bin/python cargo bench --bench snapshot` (any
//! interpreter with pi-repl's requirements and numpy; `scripts/test` builds that one).

use std::process::Command;
use std::time::Instant;

const RUNS: usize = 5;

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("snapshot: benchmark");
        return;
    }
    let python = std::env::var("PI_REPL_PYTHON").unwrap_or_else(|_| {
        panic!("set PI_REPL_PYTHON to an interpreter with pi-repl's requirements and numpy (scripts/test builds target/test-home/venv)")
    });
    let numpy = Command::new(&python)
        .args(["-c", "import numpy"])
        .status()
        .expect("python");
    assert!(
        numpy.success(),
        "{python} has no numpy: pip install numpy into it"
    );
    let home = tempfile::tempdir().expect("temp");
    let exec = |args: &[&str]| -> f64 {
        let started = Instant::now();
        let output = Command::new(env!("CARGO_BIN_EXE_pi-repl"))
            .arg("exec")
            .args(args)
            .env("PI_REPL_HOME", home.path())
            .env("PI_REPL_PYTHON", &python)
            .output()
            .expect("pi-repl");
        let elapsed = started.elapsed().as_secs_f64() * 1000.0;
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        elapsed
    };
    exec(&["--session", "empty", "n = 1"]);
    let setup = Instant::now();
    exec(&[
        "--session",
        "big",
        "import numpy as np\n\
         arrays = [np.full(25_000_000, float(i)) for i in range(5)]\n\
         small = {'k%d' % i: i for i in range(1000)}\n\
         def f(x):\n    return x + len(small)",
    ]);
    println!(
        "setup: a session holding 5 x 200 MB arrays saved in {:.1} s",
        setup.elapsed().as_secs_f64()
    );
    let median = |mut times: Vec<f64>| -> f64 {
        times.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
        times[times.len() / 2]
    };
    let mut empty = Vec::new();
    let mut big = Vec::new();
    let mut ephemeral = Vec::new();
    let mut touched = Vec::new();
    for _ in 0..RUNS {
        ephemeral.push(exec(&["1+1"]));
        empty.push(exec(&["--session", "empty", "1+1"]));
        big.push(exec(&["--session", "big", "1+1"]));
        touched.push(exec(&[
            "--session",
            "big",
            "sum(float(a.sum()) for a in arrays)",
        ]));
    }
    let (ephemeral, empty, big, touched) = (
        median(ephemeral),
        median(empty),
        median(big),
        median(touched),
    );
    println!("\nrestart to first result (`pi-repl exec --session S '1+1'`), median of {RUNS}");
    println!("  ephemeral workspace (no session)           {ephemeral:.0} ms");
    println!("  empty session (one small binding)          {empty:.0} ms");
    println!("  session holding ~1 GB (5 x 200 MB arrays)   {big:.0} ms");
    println!(
        "  ratio 1 GB / empty: {:.2}x   (target <= 1.2x)",
        big / empty
    );
    println!(
        "\nfirst cell that reads all of the 1 GB after a restart (page-in moved to first use)"
    );
    println!("  {touched:.0} ms");
}
