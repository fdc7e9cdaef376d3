//! Background saves in a forked child of the kernel, end to end (issue #10): a cell never waits
//! for a save, saves commit while calls continue, a killed or hanging save child never harms the
//! committed snapshot, and the in-process fallback still saves. Real binary, real kernel.
//!
//! Waits are on events: the save child announces it reached a binding's `__reduce__` through a
//! FIFO (and then waits on another one until the test releases it); commits are seen in the
//! manifest and the journal of answered cells.

mod common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use common::{TestHome, process_alive, run, within};
use pi_repl::engine::outcome::{CellEvent, Status};
use pi_repl::engine::{CellOptions, Engine};

/// Two FIFOs and a file: a binding whose `__reduce__` reports its process id on `reached`, then
/// blocks until `release` is written, unless `done` exists (then it pickles at once).
struct Gate {
    reached: PathBuf,
    release: PathBuf,
    done: PathBuf,
}

impl Gate {
    fn new(dir: &Path) -> Gate {
        let gate = Gate {
            reached: dir.join("reached"),
            release: dir.join("release"),
            done: dir.join("done"),
        };
        for fifo in [&gate.reached, &gate.release] {
            nix::unistd::mkfifo(fifo, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
        }
        gate
    }

    /// A cell that binds `name` to a gated value.
    fn cell(&self, name: &str) -> String {
        format!(
            "import os\n\
             class Blocker:\n    \
                 def __init__(self, reached, release, done):\n        \
                     self.reached, self.release, self.done = reached, release, done\n    \
                 def __reduce__(self):\n        \
                     if not os.path.exists(self.done):\n            \
                         with open(self.reached, 'w') as fifo:\n                \
                             fifo.write({})\n            \
                         with open(self.release) as fifo:\n                \
                             fifo.read()\n        \
                     return (str, ('released',))\n\
             {name} = Blocker({:?}, {:?}, {:?})",
            common::SELF_PID_EXPR,
            self.reached,
            self.release,
            self.done
        )
    }

    /// Waits (bounded) until a save child is inside the gated `__reduce__`; returns its pid.
    async fn reached(&self) -> i32 {
        let text = read_fifo(&self.reached, 60).await;
        common::host_pid(&text)
    }

    /// Lets the blocked child go on, and every later pickle of the value pass at once.
    fn release(&self) {
        std::fs::write(&self.done, b"").unwrap();
        let mut fifo = std::fs::OpenOptions::new()
            .write(true)
            .open(&self.release)
            .unwrap();
        fifo.write_all(b"go").unwrap();
    }
}

/// Reads a FIFO to its end on a thread; at the bound, unblocks that thread and fails the test.
async fn read_fifo(path: &Path, seconds: u64) -> String {
    let (sender, receiver) = mpsc::channel();
    let reader_path = path.to_path_buf();
    std::thread::spawn(move || {
        let mut text = String::new();
        let read = std::fs::File::open(&reader_path).and_then(|mut f| f.read_to_string(&mut text));
        let _ = sender.send(read.map(|_| text));
    });
    let wait =
        tokio::task::spawn_blocking(move || receiver.recv_timeout(Duration::from_secs(seconds)));
    match wait.await.unwrap() {
        Ok(read) => read.expect("read the FIFO"),
        Err(_) => {
            // Open the other end so the reader thread ends, then fail.
            let _ = std::fs::OpenOptions::new().write(true).open(path);
            panic!("no save child reached the gate within {seconds} s");
        }
    }
}

fn manifest(session: &pi_repl::session::Session) -> serde_json::Value {
    let path = session.snapshot_dir().unwrap().join("manifest.json");
    let text = std::fs::read_to_string(path).unwrap_or_default();
    serde_json::from_str(&text).unwrap_or_default()
}

fn generation(session: &pi_repl::session::Session) -> u64 {
    manifest(session)["generation"].as_u64().unwrap_or(0)
}

/// Waits until `done` holds (polling the files the engine writes).
async fn until(seconds: u64, done: impl Fn() -> bool) {
    common::eventually_async("the files showed it", Duration::from_secs(seconds), done).await;
}

/// True once the engine has recorded that a commit covers every cell run so far (its journal of
/// answered cells holds no cell any more).
fn all_saved(session: &pi_repl::session::Session) -> bool {
    let log = session
        .snapshot_dir()
        .unwrap()
        .parent()
        .unwrap()
        .join("answered.jsonl");
    !std::fs::read_to_string(log).is_ok_and(|text| text.contains("\"cell\""))
}

#[tokio::test]
async fn a_cell_that_arrives_during_a_save_runs_at_once() {
    let home = TestHome::new();
    let (config, session) = home.durable_config("busy");
    let gate = Gate::new(home.path());
    let engine = Engine::start(config);
    run(&engine, &gate.cell("gated")).await;
    let child = gate.reached().await;
    // The save child is stuck pickling `gated`; a cell still runs, and the child goes on.
    let quick = run(&engine, "'quick'").await;
    assert_eq!(quick.result.as_deref(), Some("'quick'"));
    assert!(process_alive(child), "the cell waited for the save child");
    assert!(manifest(&session)["bindings"].get("gated").is_none());
    gate.release();
    until(60, || manifest(&session)["bindings"].get("gated").is_some()).await;
    engine.shutdown().await;
}

#[tokio::test]
async fn saves_commit_while_calls_continue_and_the_last_values_are_kept() {
    let home = TestHome::new();
    let (config, session) = home.durable_config("steady");
    let gate = Gate::new(home.path());
    let engine = Engine::start(config.clone());
    let step = |i: u64| format!("counter = {i}\ndata = list(range({}))", 1000 + i);
    run(&engine, &format!("{}\n{}", gate.cell("gated"), step(0))).await;
    let child = gate.reached().await;
    for i in 1..=10 {
        run(&engine, &step(i)).await;
    }
    assert!(
        process_alive(child),
        "ten calls ran while the first save was blocked"
    );
    assert_eq!(generation(&session), 0);
    gate.release();
    // Calls go on; a save commits between them.
    let mut last = 10;
    within(120, async {
        while generation(&session) == 0 {
            last += 1;
            run(&engine, &step(last)).await;
        }
    })
    .await;
    for _ in 0..5 {
        last += 1;
        run(&engine, &step(last)).await;
    }
    // A pause: the engine saves what the last calls did.
    until(120, || all_saved(&session)).await;
    engine.shutdown_now(Duration::ZERO).await;
    let revived = Engine::start(config);
    let check = run(&revived, "counter, len(data) - 1000").await;
    assert_eq!(check.result, Some(format!("({last}, {last})")));
    revived.shutdown().await;
}

#[tokio::test]
async fn sigkill_of_a_save_child_never_breaks_the_committed_snapshot() {
    let home = TestHome::new();
    let (config, session) = home.durable_config("killed");
    let gate = Gate::new(home.path());
    let engine = Engine::start(config.clone());
    run(&engine, "kept = 'first'").await;
    until(60, || all_saved(&session)).await;
    let committed = manifest(&session);
    run(
        &engine,
        &format!(
            "{}\nkept = 'second'\nbig = bytearray(8_000_000)",
            gate.cell("gated")
        ),
    )
    .await;
    let child = gate.reached().await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    until(60, || !process_alive(child)).await;
    assert_eq!(manifest(&session), committed);
    engine.shutdown_now(Duration::ZERO).await;
    // A new process revives the last committed snapshot, and saves again over it.
    let revived = Engine::start(config);
    let check = run(&revived, "kept").await;
    assert_eq!(check.result.as_deref(), Some("'first'"));
    let reset = check.reset.expect("a revive is told");
    assert!(reset.lost.is_empty(), "{}", reset.notice());
    std::fs::write(&gate.done, b"").unwrap();
    run(&revived, "kept = 'third'").await;
    until(60, || all_saved(&session)).await;
    assert!(generation(&session) > committed["generation"].as_u64().unwrap());
    let leftovers: Vec<String> = std::fs::read_dir(session.snapshot_dir().unwrap())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains(".tmp-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    revived.shutdown().await;
}

#[tokio::test]
async fn a_hanging_save_child_is_killed_retried_and_reported() {
    let home = TestHome::new();
    let (mut config, session) = home.durable_config("hangs");
    let gate = Gate::new(home.path());
    if let Some(settings) = config.snapshot.as_mut() {
        settings.child_limit = Duration::from_millis(500);
    }
    let engine = Engine::start(config);
    // Nobody reads the gate: every save child hangs opening it, and is killed at its limit.
    run(&engine, &gate.cell("gated")).await;
    let notice = within(120, async {
        loop {
            let outcome = run(&engine, "'probe'").await;
            if let Some(notice) = outcome
                .notices
                .iter()
                .find(|n| n.contains("could not be saved"))
            {
                break notice.clone();
            }
        }
    })
    .await;
    assert!(notice.contains("did not finish"), "{notice}");
    assert!(notice.contains("times in a row"), "{notice}");
    assert_eq!(generation(&session), 0);
    // Released, the next save commits.
    std::fs::write(&gate.done, b"").unwrap();
    run(&engine, "after = 1").await;
    until(120, || {
        manifest(&session)["bindings"].get("after").is_some()
    })
    .await;
    engine.shutdown().await;
}

#[tokio::test]
async fn with_fork_disabled_saves_run_in_the_kernel_and_commit() {
    let home = TestHome::new();
    let (mut config, session) = home.durable_config("inprocess");
    if let Some(settings) = config.snapshot.as_mut() {
        settings.fork = false;
    }
    let engine = Engine::start(config);
    let status = run(
        &engine,
        "x = 41\n__import__('pi_repl_kernel.snapshot', fromlist=['status']).status()['fork']",
    )
    .await;
    assert!(
        status
            .result
            .as_deref()
            .is_some_and(|r| r.contains("PI_REPL_SNAPSHOT_FORK=0")),
        "{status:?}"
    );
    until(60, || manifest(&session)["bindings"].get("x").is_some()).await;
    let outcome = run(&engine, "x + 1").await;
    assert_eq!(outcome.result.as_deref(), Some("42"));
    assert!(outcome.notices.is_empty(), "{:?}", outcome.notices);
    engine.shutdown().await;
}

#[tokio::test]
async fn where_cuda_is_initialised_saves_run_in_the_kernel_and_say_so_once() {
    let home = TestHome::new();
    let (config, session) = home.durable_config("cuda");
    let engine = Engine::start(config);
    // torch is not installed here: a stand-in module answers the one question the kernel asks.
    run(
        &engine,
        "import sys, types\n\
         sys.modules['torch'] = types.SimpleNamespace(\n    \
             cuda=types.SimpleNamespace(is_initialized=lambda: True))\n\
         x = 1",
    )
    .await;
    until(60, || manifest(&session)["bindings"].get("x").is_some()).await;
    let told = run(&engine, "x = 2").await;
    let notice = told.notices.join("\n");
    assert!(
        notice.contains("saved in the kernel process (CUDA is initialised"),
        "{notice}"
    );
    let generation_before = generation(&session);
    until(60, || generation(&session) > generation_before).await;
    let again = run(&engine, "x").await;
    assert_eq!(again.result.as_deref(), Some("2"));
    assert!(again.notices.is_empty(), "{:?}", again.notices);
    engine.shutdown().await;
}

#[tokio::test]
async fn an_aborted_cell_leaves_a_running_save_child_alone() {
    let home = TestHome::new();
    let (config, session) = home.durable_config("abort");
    let gate = Gate::new(home.path());
    let engine = Engine::start(config);
    run(&engine, &gate.cell("gated")).await;
    let child = gate.reached().await;
    // The abort's cleanup tells processes the cell started by their start time, in clock ticks
    // (10 ms): a save child forked in the same tick as the cell began would count as the cell's
    // (then it is ended, and the save retried). Start the cell in a later tick.
    let line = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap();
    let forked = pi_repl::kernel::processes::parse_stat(&line).unwrap().start;
    until(10, || pi_repl::kernel::processes::BootTicks::now() > forked).await;
    // The abort interrupts the kernel's process group and ends what the cell started; the save
    // child started before the cell, ignores SIGINT, and goes on.
    let mut handle = engine.submit(
        "import time\nprint('started', flush=True)\ntime.sleep(60)",
        CellOptions::default(),
    );
    within(60, async {
        while let Some(event) = handle.events.recv().await {
            if matches!(event, CellEvent::Output { .. }) {
                break;
            }
        }
    })
    .await;
    handle.cancel();
    let outcome = within(60, handle.outcome()).await.unwrap();
    assert_eq!(outcome.status, Status::Aborted);
    assert!(process_alive(child), "the abort ended the save child");
    gate.release();
    until(60, || manifest(&session)["bindings"].get("gated").is_some()).await;
    engine.shutdown().await;
}
