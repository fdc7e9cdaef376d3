//! From `spawn_agent` to the child's first cell (issue 25): a live fork against the snapshot
//! seeding it replaces (`PI_REPL_SNAPSHOT_FORK=0` turns live forks off), with an empty
//! namespace and with 2 GB built in the same cell as the spawn, in one run.
//!
//! The bench is the MCP client of a durable `pi-repl mcp` and the child's model: it answers
//! each `sampling/createMessage` at once with one cell that reads the data and gives the time
//! it started as its final answer. The parent's cell takes the time just before
//! `spawn_agent` and waits for the answer: the difference is spawn-to-first-cell (admission,
//! the fork or the commit, the child's process and kernel, one model round trip through the
//! MCP client, the child's cell starting). Same machine, same clock (`time.time()`).
//!
//! 2 GB is the issue's namespace: a 2 GB bytearray (every page written) and a 1 M-entry dict,
//! built in the spawning cell, so the snapshot baseline must commit all of it first. 8 GB (live
//! only) is built once, in the first round's spawning cell, and kept for the next rounds.
//!
//! Run: `PI_REPL_PYTHON=target/test-home/venv/bin/python cargo bench --bench live_fork`
//! (`-- 8gb` adds a live row with 8 GB).

use std::path::PathBuf;

use pi_repl::home::Home;

#[path = "common/support.rs"]
mod support;
use support::McpStdio;

const ROUNDS: usize = 3;

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("live_fork: benchmark");
        return;
    }
    let python = PathBuf::from(
        std::env::var_os("PI_REPL_PYTHON").expect("set PI_REPL_PYTHON (scripts/test builds one)"),
    );
    let mut sizes = vec![("empty", 0usize), ("2 GB", 2)];
    if std::env::args().any(|a| a == "8gb") {
        sizes.push(("8 GB", 8));
    }
    println!("spawn_agent to the child's first cell, median of {ROUNDS} (ms)");
    println!("| namespace | live fork | snapshot seeding | ratio |");
    println!("|---|---|---|---|");
    for (label, gigabytes) in sizes {
        let live = measure(&python, gigabytes, true);
        // The baseline commits the whole namespace each round: one round at 8 GB is plenty.
        let seeded = if gigabytes > 2 {
            None
        } else {
            Some(measure(&python, gigabytes, false))
        };
        match seeded {
            Some(seeded) => println!(
                "| {label} | {live:.0} | {seeded:.0} | {:.1}x |",
                seeded / live
            ),
            None => println!("| {label} | {live:.0} | (not run) | |"),
        }
    }
}

/// The median spawn-to-first-cell time, in ms, of `ROUNDS` spawns from a namespace of
/// `gigabytes`, each built afresh in the spawning cell.
fn measure(python: &std::path::Path, gigabytes: usize, live: bool) -> f64 {
    let dir = tempfile::tempdir().expect("temp");
    let home = Home::at(dir.path());
    let mut server = if live {
        McpStdio::spawn(python, &home, &["--session", "bench", "--wait-ms", "end"])
    } else {
        spawn_without_fork(python, &home)
    };
    server.call(
        0,
        "initialize",
        serde_json::json!({
            "protocolVersion": "2025-06-18", "capabilities": {"sampling": {}},
            "clientInfo": {"name": "bench", "version": "0"}
        }),
    );
    server.notify("notifications/initialized");
    let mut times = Vec::new();
    for round in 0..ROUNDS {
        // Built in the spawning cell every round, except past 2 GB: a rebound bytearray stays
        // alive in the snapshot store until the next save (it takes no weak reference), and two
        // 8 GB copies would not leave the free memory a live fork asks for.
        let build = if gigabytes <= 2 || round == 0 {
            format!(
                "data = bytearray(b'x') * ({gigabytes} * 10**9)\n\
                 table = {{i: i for i in range(1_000_000 if {gigabytes} else 0)}}\n"
            )
        } else {
            String::new()
        };
        let code = format!(
            "import time\n\
             {build}\
             marker = {round}\n\
             started = time.time()\n\
             h = spawn_agent('read the data')\n\
             answer = h.wait(600)\n\
             print((float(answer) - started) * 1000, h.record['fork_kind'])"
        );
        let response = server.call_answering(
            (round + 1) as u64,
            "tools/call",
            serde_json::json!({"name": "execute", "arguments": {"code": code}}),
            |_request| {
                serde_json::json!({"model": "scripted", "role": "assistant",
                    "content": {"type": "text", "text":
                        "```python\nimport time\nstarted = time.time()\n\
                         assert len(data) >= 0 and marker >= 0\n\
                         final_answer(repr(started))\n```"}})
            },
        );
        let text = response["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let line = text.lines().last().unwrap_or_default().to_string();
        let (ms, kind) = line.split_once(' ').unwrap_or_else(|| panic!("{text}"));
        let expected = if live { "live" } else { "snapshot" };
        assert_eq!(kind, expected, "{text}");
        times.push(ms.parse::<f64>().unwrap_or_else(|_| panic!("{text}")));
    }
    server.close();
    times.sort_by(|a, b| a.total_cmp(b));
    times[times.len() / 2]
}

/// `pi-repl mcp` with forks of the kernel turned off (`PI_REPL_SNAPSHOT_FORK=0`): a fork is then
/// seeded from the snapshot, as before live forks.
fn spawn_without_fork(python: &std::path::Path, home: &Home) -> McpStdio {
    // SAFETY: the bench is single-threaded here; the variable is read by the child at spawn.
    unsafe { std::env::set_var("PI_REPL_SNAPSHOT_FORK", "0") };
    let server = McpStdio::spawn(python, home, &["--session", "bench", "--wait-ms", "end"]);
    // SAFETY: as above.
    unsafe { std::env::remove_var("PI_REPL_SNAPSHOT_FORK") };
    server
}
