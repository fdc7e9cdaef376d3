//! The engine's runner against a scripted kernel (`tests/scripted_kernel/kernel.py`): a process
//! that speaks the real Jupyter wire protocol over the same IPC sockets ipykernel would use, but
//! whose behaviour each test scripts: never ready, dying in a cell or right after one, losing a
//! reply, ignoring an interrupt. These are the moves of the runner's kernel slot (booting,
//! ready, failed, lost, stopped) that a real ipykernel cannot be made to show on demand; every
//! request must settle, whatever the kernel does.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{TestHome, within};
use pi_repl::engine::outcome::Status;
use pi_repl::engine::{CellOptions, Engine, EngineConfig, EngineError};
use serde_json::{Value, json};

/// A home whose engine runs the scripted kernel with `rules` (see kernel.py's doc).
struct Scripted {
    home: TestHome,
    log: PathBuf,
    pids: PathBuf,
}

impl Scripted {
    fn new(kernel_info: &str, rules: Value) -> Scripted {
        let home = TestHome::new();
        let log = home.path().join("cells.log");
        let pids = home.path().join("pids.log");
        let script = home.path().join("script.json");
        std::fs::write(
            &script,
            json!({"log": log, "kernel_info": kernel_info, "rules": rules}).to_string(),
        )
        .unwrap();
        // pi-repl runs `<python> -c BOOTSTRAP <module dir> -f <connection file>`; this
        // "python" runs the scripted kernel instead, with the same arguments.
        let kernel = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripted_kernel/kernel.py");
        let wrapper = home.path().join("python");
        std::fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\necho $$ >> '{}'\nexec '{}' '{}' '{}' \"$@\"\n",
                pids.display(),
                common::test_python().display(),
                kernel.display(),
                script.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
        Scripted { home, log, pids }
    }

    fn config(&self) -> EngineConfig {
        let mut config = self.home.engine_config();
        config.kernel.python.path = self.home.path().join("python");
        config
    }

    /// The code of every execute_request the scripted kernels received, in order.
    fn cells_run(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    /// The pids of the kernels started so far.
    fn kernel_pids(&self) -> Vec<i32> {
        std::fs::read_to_string(&self.pids)
            .unwrap_or_default()
            .lines()
            .map(|line| line.trim().parse().unwrap())
            .collect()
    }
}

async fn run(
    engine: &Engine,
    code: &str,
) -> Result<pi_repl::engine::outcome::Outcome, EngineError> {
    within(60, engine.submit(code, CellOptions::default()).outcome()).await
}

#[tokio::test]
async fn a_scripted_kernel_runs_cells_like_any_kernel() {
    let scripted = Scripted::new(
        "answer",
        json!([{"code": "hello", "do": [{"print": "hi\n"}, {"result": "42"}]},
               {"code": "fail", "do": [{"error": ["ValueError", "bad"]}]}]),
    );
    let engine = Engine::start(scripted.config());
    let first = run(&engine, "hello").await.unwrap();
    assert_eq!(first.status, Status::Ok);
    assert_eq!(first.stdout, "hi\n");
    assert_eq!(first.result.as_deref(), Some("42"));
    assert!(
        first.notices.iter().any(|n| n.contains("not Python")),
        "the first result says the workspace is not durable: {:?}",
        first.notices
    );
    let second = run(&engine, "fail").await.unwrap();
    assert_eq!(second.status, Status::Error);
    assert_eq!(second.error.as_ref().unwrap().ename, "ValueError");
    assert_eq!(scripted.cells_run(), ["hello", "fail"]);
    engine.shutdown().await;
}

#[tokio::test]
async fn a_kernel_that_never_gets_ready_fails_the_first_cell_and_the_next_cell_tries_again() {
    let scripted = Scripted::new("never", json!([]));
    let mut config = scripted.config();
    config.boot_timeout = Duration::from_secs(2);
    let engine = Engine::start(config);
    // The eager start failed (slot: failed); the first cell is told why, not started again.
    let first = run(&engine, "1").await;
    match first {
        Err(EngineError::KernelStart(error)) => {
            assert!(error.to_string().contains("did not"), "{error}")
        }
        other => panic!("expected a start failure, got {other:?}"),
    }
    assert_eq!(
        scripted.kernel_pids().len(),
        1,
        "the failure was told, not retried"
    );
    // The next cell starts a kernel again (slot: lost), which fails the same way.
    assert!(matches!(
        run(&engine, "2").await,
        Err(EngineError::KernelStart(_))
    ));
    assert_eq!(scripted.kernel_pids().len(), 2);
    assert!(scripted.cells_run().is_empty(), "no cell ever ran");
    engine.shutdown().await;
}

#[tokio::test]
async fn a_kernel_that_dies_in_a_cell_is_replaced_and_the_next_cell_is_told_why() {
    let scripted = Scripted::new("answer", json!([{"code": "die", "do": [{"exit": 7}]}]));
    let engine = Engine::start(scripted.config());
    run(&engine, "x = 1").await.unwrap();
    let died = run(&engine, "die").await.unwrap();
    assert_eq!(died.status, Status::Died);
    let next = run(&engine, "after").await.unwrap();
    assert_eq!(next.status, Status::Ok);
    let reset = next
        .reset
        .expect("the next cell is told the kernel was lost");
    assert!(reset.reason.contains("died"), "{}", reset.reason);
    assert_eq!(scripted.kernel_pids().len(), 2, "one replacement kernel");
    assert_eq!(scripted.cells_run(), ["x = 1", "die", "after"]);
    engine.shutdown().await;
}

#[tokio::test]
async fn a_kernel_that_dies_between_cells_is_noticed_while_idle_and_replaced() {
    let home = tempfile::tempdir().unwrap();
    let trigger = home.path().join("die now");
    let scripted = Scripted::new(
        "answer",
        json!([{"code": "last words", "do": [{"exit_when": trigger, "status": 5}]}]),
    );
    let engine = Engine::start(scripted.config());
    let outcome = run(&engine, "last words").await.unwrap();
    assert_eq!(
        outcome.status,
        Status::Ok,
        "the cell itself finished: {outcome:?}"
    );
    // The kernel dies now, while the engine is idle.
    std::fs::write(&trigger, b"").unwrap();
    // Wait (without blocking the runtime the engine runs on) until the process is reaped by
    // the engine: a zombie's `/proc` entry shows while its threads are still exiting, when the
    // process is not yet waitable.
    let first_pid = scripted.kernel_pids()[0];
    let reaped = || !Path::new(&format!("/proc/{first_pid}")).exists();
    common::eventually_async(
        "the engine reaped the kernel",
        Duration::from_secs(60),
        reaped,
    )
    .await;
    let next = run(&engine, "next").await.unwrap();
    assert_eq!(next.status, Status::Ok, "{next:?}");
    let reset = next.reset.expect("told about the death between cells");
    assert!(reset.reason.contains("between cells"), "{}", reset.reason);
    assert_eq!(scripted.kernel_pids().len(), 2, "one replacement kernel");
    assert!(
        reset.reason.contains('5'),
        "names the exit code: {}",
        reset.reason
    );
    engine.shutdown().await;
}

#[tokio::test]
async fn a_cell_whose_reply_never_comes_still_settles_and_the_engine_goes_on() {
    let scripted = Scripted::new(
        "answer",
        json!([{"code": "lost", "do": [{"no_reply": true}]}]),
    );
    let engine = Engine::start(scripted.config());
    let options = CellOptions {
        timeout: Some(Duration::from_secs(3)),
    };
    let lost = within(60, engine.submit("lost", options).outcome())
        .await
        .expect("the cell settles");
    assert_ne!(
        lost.status,
        Status::Ok,
        "a cell without a reply is not reported ok"
    );
    let next = run(&engine, "next").await.unwrap();
    assert_eq!(next.status, Status::Ok);
    assert_eq!(
        scripted.cells_run().last().map(String::as_str),
        Some("next")
    );
    engine.shutdown().await;
}

#[tokio::test]
async fn a_kernel_that_ignores_an_interrupt_is_replaced_and_the_queue_behind_it_runs() {
    let scripted = Scripted::new(
        "answer",
        json!([{"code": "wedge", "do": [{"hang_forever": true}]},
               {"code": "hang", "do": [{"hang": true}]}]),
    );
    let engine = Engine::start(scripted.config());
    run(&engine, "warm").await.unwrap();
    let options = CellOptions {
        timeout: Some(Duration::from_secs(1)),
    };
    // An interruptible cell: the timeout's SIGINT stops it and the kernel stays.
    let hung = within(60, engine.submit("hang", options.clone()).outcome())
        .await
        .unwrap();
    assert_eq!(hung.status, Status::Aborted);
    assert_eq!(scripted.kernel_pids().len(), 1);
    // A wedged one: SIGINT is ignored, so the kernel is replaced; the cells queued behind it
    // run in the new kernel, in order.
    let wedged = engine.submit("wedge", options);
    let queued: Vec<_> = (1..=3)
        .map(|i| engine.submit(format!("queued {i}"), CellOptions::default()))
        .collect();
    let wedged = within(120, wedged.outcome()).await.unwrap();
    assert_ne!(wedged.status, Status::Ok);
    for (i, handle) in queued.into_iter().enumerate() {
        let outcome = within(60, handle.outcome()).await.unwrap();
        assert_eq!(outcome.status, Status::Ok, "queued cell {}", i + 1);
    }
    assert_eq!(
        scripted.kernel_pids().len(),
        2,
        "the wedged kernel was replaced"
    );
    let run_codes = scripted.cells_run();
    assert_eq!(
        &run_codes[run_codes.len() - 3..],
        ["queued 1", "queued 2", "queued 3"]
    );
    engine.shutdown().await;
}

#[tokio::test]
async fn stopping_the_engine_settles_the_running_cell_and_every_queued_one() {
    let scripted = Scripted::new("answer", json!([{"code": "hang", "do": [{"hang": true}]}]));
    let engine = Engine::start(scripted.config());
    run(&engine, "warm").await.unwrap();
    let running = engine.submit("hang", CellOptions::default());
    let queued: Vec<_> = (1..=3)
        .map(|i| engine.submit(format!("queued {i}"), CellOptions::default()))
        .collect();
    // Shut down once the hanging cell is in the kernel (its code is in the log).
    let hanging = || scripted.cells_run().iter().any(|code| code == "hang");
    common::eventually_async(
        "the hanging cell is in the kernel",
        Duration::from_secs(60),
        hanging,
    )
    .await;
    within(60, engine.shutdown()).await;
    let running = within(60, running.outcome()).await;
    assert!(
        !matches!(running, Ok(ref outcome) if outcome.status == Status::Ok),
        "the running cell did not finish: {running:?}"
    );
    for handle in queued {
        assert!(
            matches!(
                within(60, handle.outcome()).await,
                Err(EngineError::Stopped)
            ),
            "a queued cell settles with Stopped"
        );
    }
    assert!(
        !scripted
            .cells_run()
            .iter()
            .any(|code| code.starts_with("queued")),
        "no queued cell ran"
    );
    let pid = scripted.kernel_pids()[0];
    assert!(
        common::wait_gone(pid, 30.0),
        "the kernel is stopped with the engine"
    );
    // The engine takes no more cells (slot: stopped).
    assert!(matches!(
        run(&engine, "after").await,
        Err(EngineError::Stopped)
    ));
}

#[tokio::test]
async fn a_cell_cancelled_while_queued_never_reaches_the_kernel() {
    let scripted = Scripted::new("answer", json!([{"code": "hang", "do": [{"hang": true}]}]));
    let engine = Engine::start(scripted.config());
    run(&engine, "warm").await.unwrap();
    let running = engine.submit(
        "hang",
        CellOptions {
            timeout: Some(Duration::from_secs(2)),
        },
    );
    let cancelled = engine.submit("cancelled", CellOptions::default());
    let after = engine.submit("after", CellOptions::default());
    cancelled.cancel();
    let cancelled = within(60, cancelled.outcome()).await.unwrap();
    assert_eq!(cancelled.status, Status::Aborted);
    assert_eq!(
        within(60, running.outcome()).await.unwrap().status,
        Status::Aborted
    );
    assert_eq!(
        within(60, after.outcome()).await.unwrap().status,
        Status::Ok
    );
    assert_eq!(scripted.cells_run(), ["warm", "hang", "after"]);
    engine.shutdown().await;
}
