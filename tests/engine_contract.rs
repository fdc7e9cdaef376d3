//! Contract tests of the engine against a real ipykernel: one test per guarantee of issue #2.

mod common;

use std::time::Duration;

use common::{TestHome, process_alive, run, run_with, wait_gone, within};
use pi_repl::engine::outcome::{AbortReason, CellEvent, Channel, Status};
use pi_repl::engine::{CellOptions, Engine, EngineError};

#[tokio::test]
async fn variables_functions_and_imports_persist_across_cells() {
    let home = TestHome::new();
    let engine = Engine::start(home.engine_config());
    run(
        &engine,
        "import math\nx = 40\ndef add(a, b):\n    return a + b",
    )
    .await;
    let outcome = run(&engine, "add(x, 2), math.floor(2.5)").await;
    assert_eq!(outcome.status, Status::Ok);
    assert_eq!(outcome.result.as_deref(), Some("(42, 2)"));
    engine.shutdown().await;
}

#[tokio::test]
async fn cells_submitted_at_once_run_in_submission_order() {
    let home = TestHome::new();
    let engine = Engine::start(home.engine_config());
    run(&engine, "seen = []").await;
    let handles: Vec<_> = (0..20)
        .map(|i| {
            engine.submit(
                format!("import random, time\ntime.sleep(random.random() / 100)\nseen.append({i})"),
                CellOptions::default(),
            )
        })
        .collect();
    for handle in handles {
        assert_eq!(
            within(60, handle.outcome()).await.unwrap().status,
            Status::Ok
        );
    }
    let outcome = run(&engine, "seen").await;
    let expected = format!("{:?}", (0..20).collect::<Vec<_>>());
    assert_eq!(outcome.result.as_deref(), Some(expected.as_str()));
    engine.shutdown().await;
}

#[tokio::test]
async fn output_is_attributed_to_its_cell_with_stdout_and_stderr_apart() {
    let home = TestHome::new();
    let engine = Engine::start(home.engine_config());
    let first = engine.submit(
        "import sys\nprint('one out')\nprint('one err', file=sys.stderr)",
        CellOptions::default(),
    );
    let second = engine.submit("print('two out')\n'two result'", CellOptions::default());
    let first = within(60, first.outcome()).await.unwrap();
    let second = within(60, second.outcome()).await.unwrap();
    assert_eq!(first.stdout, "one out\n");
    assert_eq!(first.stderr, "one err\n");
    assert_eq!(first.result, None);
    assert_eq!(second.stdout, "two out\n");
    assert_eq!(second.stderr, "");
    assert_eq!(second.result.as_deref(), Some("'two result'"));
    engine.shutdown().await;
}

#[tokio::test]
async fn output_streams_while_the_cell_is_still_running() {
    let home = TestHome::new();
    let engine = Engine::start(home.engine_config());
    let mut handle = engine.submit(
        "import time\nprint('first', flush=True)\ntime.sleep(1.5)\nprint('second')",
        CellOptions::default(),
    );
    let first = within(60, async {
        loop {
            match handle.events.recv().await {
                Some(CellEvent::Output {
                    channel: Channel::Stdout,
                    text,
                }) => break text,
                Some(_) => continue,
                None => panic!("events ended before any output"),
            }
        }
    })
    .await;
    assert_eq!(first, "first\n");
    let outcome = within(60, handle.outcome()).await.unwrap();
    assert!(outcome.duration_ms >= 1000, "{outcome:?}");
    assert_eq!(outcome.stdout, "first\nsecond\n");
    engine.shutdown().await;
}

#[tokio::test]
async fn a_flood_is_capped_with_head_tail_and_a_spill_file_holding_everything() {
    let home = TestHome::new();
    let engine = Engine::start(home.engine_config());
    let outcome = run(&engine, "for i in range(200_000):\n    print(f'line {i}')").await;
    assert_eq!(outcome.status, Status::Ok);
    assert!(
        outcome.stdout.chars().count() < 31_000,
        "{}",
        outcome.stdout.len()
    );
    assert!(outcome.stdout.starts_with("line 0\nline 1\n"));
    assert!(outcome.stdout.ends_with("line 199999\n"));
    let truncation = &outcome.truncated[0];
    assert_eq!(truncation.channel, "stdout");
    let spilled = truncation.full_output.as_ref().expect("spill file");
    assert!(outcome.stdout.contains(&spilled.display().to_string()));
    let expected: String = (0..200_000).map(|i| format!("line {i}\n")).collect();
    assert_eq!(std::fs::read_to_string(spilled).unwrap(), expected);
    engine.shutdown().await;
}

#[tokio::test]
async fn a_long_line_is_cut_at_4096_characters_and_announced() {
    let home = TestHome::new();
    let engine = Engine::start(home.engine_config());
    let outcome = run(&engine, "print('a' * 10_000)\nprint('short')").await;
    let first_line = outcome.stdout.lines().next().unwrap();
    assert!(first_line.starts_with(&"a".repeat(4096)));
    assert!(
        first_line.ends_with("… [line truncated: 5904 more characters]"),
        "{first_line}"
    );
    assert!(outcome.stdout.contains("\nshort\n"));
    assert_eq!(outcome.truncated[0].lines_cut, 1);
    engine.shutdown().await;
}

#[tokio::test]
async fn an_exception_is_data_and_the_namespace_survives_it() {
    let home = TestHome::new();
    let engine = Engine::start(home.engine_config());
    run(&engine, "kept = 'still here'").await;
    let failed = run(&engine, "def f():\n    raise ValueError('bad input')\nf()").await;
    assert_eq!(failed.status, Status::Error);
    let error = failed.error.unwrap();
    assert_eq!(error.ename, "ValueError");
    assert_eq!(error.evalue, "bad input");
    let joined = error.traceback.join("\n");
    assert!(joined.contains("raise ValueError('bad input')"), "{joined}");
    assert!(
        !joined.contains('\u{1b}'),
        "colour codes left in {joined:?}"
    );
    assert_eq!(
        run(&engine, "kept").await.result.as_deref(),
        Some("'still here'")
    );
    engine.shutdown().await;
}

#[tokio::test]
async fn a_timeout_interrupts_with_keyboard_interrupt_and_keeps_the_namespace() {
    let home = TestHome::new();
    let engine = Engine::start(home.engine_config());
    run(&engine, "kept = [1, 2, 3]").await;
    let options = CellOptions {
        timeout: Some(Duration::from_millis(500)),
    };
    let outcome = run_with(&engine, "import time\ntime.sleep(30)", options).await;
    assert_eq!(outcome.status, Status::Aborted);
    assert!(outcome.duration_ms < 10_000, "{outcome:?}");
    assert_eq!(outcome.error.as_ref().unwrap().ename, "KeyboardInterrupt");
    let abort = outcome.abort.unwrap();
    assert_eq!(abort.reason, AbortReason::Timeout { after_ms: 500 });
    assert!(!abort.kernel_killed);
    let after = run(&engine, "kept").await;
    assert_eq!(after.result.as_deref(), Some("[1, 2, 3]"));
    assert!(after.reset.is_none());
    engine.shutdown().await;
}

#[tokio::test]
async fn cancelling_a_running_cell_interrupts_it() {
    let home = TestHome::new();
    let engine = Engine::start(home.engine_config());
    let mut handle = engine.submit(
        "import time\nprint('started', flush=True)\ntime.sleep(30)",
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
    let outcome = within(15, handle.outcome()).await.unwrap();
    assert_eq!(outcome.status, Status::Aborted);
    assert_eq!(outcome.abort.unwrap().reason, AbortReason::Cancelled);
    engine.shutdown().await;
}

#[tokio::test]
async fn a_cancelled_queued_cell_settles_at_once_and_never_runs() {
    let home = TestHome::new();
    let engine = Engine::start(home.engine_config());
    let running = engine.submit(
        "import time\ntime.sleep(2)\nran = ['first']",
        CellOptions::default(),
    );
    let queued = engine.submit("ran.append('second')", CellOptions::default());
    assert_eq!(
        (running.number, queued.number),
        (1, 2),
        "numbered as submitted"
    );
    queued.cancel();
    let skipped = within(1, queued.outcome()).await.unwrap();
    assert_eq!(skipped.status, Status::Aborted);
    assert_eq!(
        skipped.cell, 2,
        "a cell keeps the number it was given, run or not"
    );
    within(60, running.outcome()).await.unwrap();
    assert_eq!(
        run(&engine, "ran").await.result.as_deref(),
        Some("['first']")
    );
    engine.shutdown().await;
}

#[tokio::test]
async fn an_abort_ends_the_processes_the_cell_started() {
    let home = TestHome::new();
    let engine = Engine::start(home.engine_config());
    let pids = home.path().join("pids");
    let code = format!(
        r#"
import os, subprocess, time
stubborn = subprocess.Popen(['sh', '-c', 'trap "" INT; sleep 300'])
detached = subprocess.Popen(['sleep', '301'], start_new_session=True)
open({pids:?}, 'w').write(f'{{os.readlink("/proc/self/ns/pid")}} {{stubborn.pid}} {{detached.pid}}')
time.sleep(60)
"#,
        pids = pids.display().to_string()
    );
    let options = CellOptions {
        timeout: Some(Duration::from_millis(1500)),
    };
    let outcome = run_with(&engine, &code, options).await;
    assert_eq!(outcome.status, Status::Aborted);
    // Named by the kernel's PID namespace and their pids there.
    let listed = std::fs::read_to_string(&pids).unwrap();
    assert_eq!(listed.split_whitespace().count(), 3, "{listed}");
    assert!(
        common::wait_gone_in_namespace(&listed, 3.0),
        "a process outlived the aborted cell: {listed}"
    );
    assert!(outcome.abort.unwrap().processes_ended >= 1);
    engine.shutdown().await;
}

#[tokio::test]
async fn a_cell_that_ignores_the_interrupt_is_killed_after_the_grace_and_the_next_cell_gets_a_fresh_kernel()
 {
    let home = TestHome::new();
    let mut config = home.engine_config();
    config.abort_grace = Duration::from_millis(1000);
    let engine = Engine::start(config);
    run(&engine, "x = 1").await;
    let code = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(60)";
    let options = CellOptions {
        timeout: Some(Duration::from_millis(300)),
    };
    let outcome = run_with(&engine, code, options).await;
    assert_eq!(outcome.status, Status::Aborted);
    let abort = outcome.abort.unwrap();
    assert!(abort.kernel_killed);
    let evalue = &outcome.error.unwrap().evalue;
    assert!(evalue.contains("still running 1 s later"), "{evalue}");
    let next = run(&engine, "'x' in globals()").await;
    assert_eq!(next.result.as_deref(), Some("False"));
    let reset = next
        .reset
        .expect("the next cell is told the kernel was replaced");
    assert!(
        reset.reason.contains("an abort killed the kernel"),
        "{}",
        reset.reason
    );
    assert!(reset.notice().starts_with("<repl_engine_reset>"));
    engine.shutdown().await;
}

#[tokio::test]
async fn death_by_os_exit_is_reported_with_its_code_and_the_next_cell_runs() {
    let home = TestHome::new();
    let engine = Engine::start(home.engine_config());
    let died = run(&engine, "import os\nos._exit(7)").await;
    assert_eq!(died.status, Status::Died);
    let error = died.error.unwrap();
    assert_eq!(error.ename, "KernelDied");
    assert!(
        error.evalue.contains("exited with code 7"),
        "{}",
        error.evalue
    );
    let next = run(&engine, "1 + 1").await;
    assert_eq!(next.status, Status::Ok);
    assert_eq!(next.result.as_deref(), Some("2"));
    let reason = next.reset.unwrap().reason;
    assert!(reason.contains("cell 1 (`import os …`)"), "{reason}");
    assert!(reason.contains("code 7"), "{reason}");
    engine.shutdown().await;
}

#[tokio::test]
async fn death_by_segfault_names_the_signal_and_where() {
    let home = TestHome::new();
    let engine = Engine::start(home.engine_config());
    let died = run(&engine, "import ctypes\nctypes.string_at(0)").await;
    assert_eq!(died.status, Status::Died);
    let error = died.error.unwrap();
    assert!(error.evalue.contains("signal 11"), "{}", error.evalue);
    assert!(
        error.evalue.contains("segmentation fault"),
        "{}",
        error.evalue
    );
    let report = error.traceback.join("\n");
    assert!(
        report.contains("Fatal Python error: Segmentation fault"),
        "{report}"
    );
    assert!(report.contains("string_at"), "{report}");
    engine.shutdown().await;
}

#[tokio::test]
async fn death_by_sigkill_points_at_the_out_of_memory_killer() {
    let home = TestHome::new();
    let engine = Engine::start(home.engine_config());
    let died = run(
        &engine,
        "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)",
    )
    .await;
    assert_eq!(died.status, Status::Died);
    let evalue = died.error.unwrap().evalue;
    assert!(evalue.contains("SIGKILL"), "{evalue}");
    assert!(evalue.contains("out-of-memory"), "{evalue}");
    engine.shutdown().await;
}

#[tokio::test]
async fn cells_queued_behind_a_dying_cell_still_run_in_a_fresh_kernel() {
    let home = TestHome::new();
    let engine = Engine::start(home.engine_config());
    // No wait in the dying cell: `submit` queues at once and this runtime runs the engine only
    // at the first `.await`, so all four cells are queued before the first one runs.
    let dying = engine.submit("import os\nos._exit(1)", CellOptions::default());
    let queued: Vec<_> = (0..3)
        .map(|i| engine.submit(format!("{i} * 10"), CellOptions::default()))
        .collect();
    assert_eq!(
        within(60, dying.outcome()).await.unwrap().status,
        Status::Died
    );
    let mut results = Vec::new();
    for (i, handle) in queued.into_iter().enumerate() {
        let outcome = within(60, handle.outcome()).await.unwrap();
        assert_eq!(outcome.status, Status::Ok);
        assert_eq!(
            outcome.reset.is_some(),
            i == 0,
            "only the first queued cell carries the notice"
        );
        results.push(outcome.result.unwrap());
    }
    assert_eq!(results, vec!["0", "10", "20"]);
    engine.shutdown().await;
}

#[tokio::test]
async fn a_kernel_that_dies_between_cells_is_replaced_and_the_next_cell_is_told() {
    let home = TestHome::new();
    let engine = Engine::start(home.engine_config());
    // The kernel dies once the test says so (a file appears), so its cell has surely settled;
    // the test then waits for the process the host watches (the kernel's group leader) to be
    // gone, so the next cell finds the kernel dead before it is sent.
    let go = home.path().join("die");
    let code = format!(
        "import threading, os, time\n\
         def die():\n\
         \x20   while not os.path.exists({go:?}):\n\
         \x20       time.sleep(0.01)\n\
         \x20   os._exit(9)\n\
         threading.Thread(target=die).start()\n\
         {}",
        common::KERNEL_PID_CELL,
        go = go.display().to_string()
    );
    let outcome = run(&engine, &code).await;
    assert_eq!(outcome.status, Status::Ok);
    let watched = common::process_group(common::host_pid(&outcome.result.unwrap()));
    std::fs::write(&go, b"").unwrap();
    common::eventually_async("the kernel died", Duration::from_secs(60), || {
        !common::process_alive(watched)
    })
    .await;
    let next = run(&engine, "'threading' in globals()").await;
    assert_eq!(next.result.as_deref(), Some("False"));
    let reason = next.reset.unwrap().reason;
    assert!(reason.contains("between cells"), "{reason}");
    assert!(reason.contains("code 9"), "{reason}");
    engine.shutdown().await;
}

#[tokio::test]
async fn input_raises_a_clear_error_instead_of_hanging() {
    let home = TestHome::new();
    let engine = Engine::start(home.engine_config());
    let outcome = within(
        30,
        engine
            .submit("input('name? ')", CellOptions::default())
            .outcome(),
    )
    .await
    .unwrap();
    assert_eq!(outcome.status, Status::Error);
    let error = outcome.error.unwrap();
    assert_eq!(error.ename, "StdinNotImplementedError");
    assert!(
        error.evalue.contains("input() is not available"),
        "{}",
        error.evalue
    );
    let getpass = run(&engine, "import getpass\ngetpass.getpass()").await;
    assert!(
        getpass
            .error
            .unwrap()
            .evalue
            .contains("getpass() is not available")
    );
    engine.shutdown().await;
}

#[tokio::test]
async fn the_silence_watchdog_interrupts_a_quiet_cell_but_not_a_chatty_one() {
    let home = TestHome::new();
    let mut config = home.engine_config();
    config.silence_timeout = Some(Duration::from_millis(800));
    let engine = Engine::start(config);
    let chatty = run(
        &engine,
        "import time\nfor i in range(6):\n    print(i, flush=True)\n    time.sleep(0.3)",
    )
    .await;
    assert_eq!(chatty.status, Status::Ok, "{chatty:?}");
    let quiet = run(&engine, "import time\ntime.sleep(30)").await;
    assert_eq!(quiet.status, Status::Aborted);
    assert_eq!(
        quiet.abort.unwrap().reason,
        AbortReason::Silent { after_ms: 800 }
    );
    engine.shutdown().await;
}

#[tokio::test]
async fn the_kernel_starts_in_the_session_cwd_or_the_hosts_when_it_is_gone() {
    let home = TestHome::new();
    let config = home.engine_config();
    let wanted = config.kernel.cwd.clone();
    let engine = Engine::start(config.clone());
    let outcome = run(&engine, "import os\nos.getcwd()").await;
    assert_eq!(
        outcome.result.unwrap(),
        format!("{:?}", wanted.display().to_string()).replace('"', "'")
    );
    engine.shutdown().await;

    let mut config = config;
    config.kernel.cwd = home.path().join("deleted");
    let engine = Engine::start(config);
    let outcome = run(&engine, "import os\nos.getcwd()").await;
    let host = std::env::current_dir().unwrap();
    assert_eq!(outcome.result.unwrap(), format!("'{}'", host.display()));
    engine.shutdown().await;
}

#[tokio::test]
async fn a_stopped_engine_settles_every_call_promptly() {
    let home = TestHome::new();
    let engine = Engine::start(home.engine_config());
    run(&engine, "1").await;
    let pid_outcome = run(&engine, common::KERNEL_PID_CELL).await;
    let kernel_pid = common::host_pid(&pid_outcome.result.unwrap());
    let mut running = engine.submit(
        "import time\nprint('running', flush=True)\ntime.sleep(30)",
        CellOptions::default(),
    );
    let queued = engine.submit("2", CellOptions::default());
    // Stop once the cell runs (its first line arrived), so the abort is of a running cell.
    within(120, async {
        while let Some(event) = running.events.recv().await {
            if matches!(event, CellEvent::Output { .. }) {
                break;
            }
        }
    })
    .await;
    within(10, engine.shutdown()).await;
    let running = within(5, running.outcome()).await.unwrap();
    assert_eq!(running.status, Status::Aborted);
    assert_eq!(running.abort.unwrap().reason, AbortReason::Shutdown);
    assert!(matches!(
        within(5, queued.outcome()).await,
        Err(EngineError::Stopped)
    ));
    assert!(matches!(
        within(5, engine.submit("3", CellOptions::default()).outcome()).await,
        Err(EngineError::Stopped)
    ));
    assert!(wait_gone(kernel_pid, 3.0), "the kernel outlived shutdown");
}

#[tokio::test]
async fn a_wedged_boot_fails_loudly_within_the_boot_timeout() {
    let home = TestHome::new();
    let mut config = home.engine_config();
    config.boot_timeout = Duration::from_millis(50);
    let engine = Engine::start(config);
    let result = within(30, engine.submit("1", CellOptions::default()).outcome()).await;
    let error = result.expect_err("a 50 ms boot cannot succeed");
    assert!(
        error.to_string().contains("did not become ready within"),
        "{error}"
    );
    assert!(error.hint().unwrap().contains("PI_REPL_BOOT_TIMEOUT_MS"));
    engine.shutdown().await;
}

#[tokio::test]
async fn rich_outputs_keep_their_mime_bundle() {
    let home = TestHome::new();
    let engine = Engine::start(home.engine_config());
    let outcome = run(
        &engine,
        "from IPython.display import display, HTML\ndisplay(HTML('<b>hi</b>'))",
    )
    .await;
    assert_eq!(outcome.displays.len(), 1);
    assert_eq!(outcome.displays[0].data["text/html"], "<b>hi</b>");
    engine.shutdown().await;
}

#[tokio::test]
async fn no_process_is_left_after_a_kernel_dies_and_is_replaced() {
    let home = TestHome::new();
    let engine = Engine::start(home.engine_config());
    let first = common::host_pid(&run(&engine, common::KERNEL_PID_CELL).await.result.unwrap());
    run(&engine, "import os\nos._exit(1)").await;
    let second = common::host_pid(&run(&engine, common::KERNEL_PID_CELL).await.result.unwrap());
    assert_ne!(first, second);
    assert!(!process_alive(first));
    engine.shutdown().await;
    assert!(wait_gone(second, 3.0));
}

#[tokio::test]
async fn the_event_stream_ends_after_the_kernel_exits() {
    use pi_repl::kernel::{Kernel, KernelEvent, KilledBy};
    let home = TestHome::new();
    let spec = home.engine_config().kernel;
    let mut kernel = within(
        120,
        Kernel::start(&spec, pi_repl::engine::DEFAULT_BOOT_TIMEOUT),
    )
    .await
    .expect("the kernel starts");
    kernel.kill(KilledBy::Host);
    within(60, async {
        loop {
            match kernel.next_event().await {
                Some(KernelEvent::Exited(_)) => break,
                Some(_) => {}
                None => panic!("the stream ended before `Exited`"),
            }
        }
    })
    .await;
    // The socket readers are still alive; the stream must end anyway, and stay ended.
    assert!(within(30, kernel.next_event()).await.is_none());
    assert!(within(30, kernel.next_event()).await.is_none());
}

#[tokio::test]
async fn every_process_a_cell_started_ends_with_its_kernel() {
    let home = TestHome::new();
    let engine = Engine::start(home.engine_config());
    // One in the kernel's process group, one in a session of its own (as `bash()` runs its
    // commands), and a grandchild of a shell that exits (re-parented when its parent dies).
    let started = run(
        &engine,
        "import os, subprocess\n\
         plain = subprocess.Popen(['sleep', '31337'])\n\
         own = subprocess.Popen(['sleep', '31338'], start_new_session=True)\n\
         shell = subprocess.run(['sh', '-c', 'sleep 31339 > /dev/null 2>&1 & echo $!'],\n\
         \x20   start_new_session=True, capture_output=True, text=True)\n\
         f'{os.readlink(\"/proc/self/ns/pid\")} {plain.pid} {own.pid} {shell.stdout.strip()}'",
    )
    .await;
    // Named by the kernel's PID namespace and their pids there.
    let listed = started
        .result
        .clone()
        .unwrap_or_else(|| panic!("{started:?}"));
    let pids = common::find_host_pids(&listed);
    assert_eq!(pids.len(), 3);
    assert!(pids.iter().all(Option::is_some), "{listed}: {pids:?}");
    let died = run(&engine, "import os\nos._exit(1)").await;
    assert_eq!(died.status, Status::Died);
    // Ended before the death was reported: no waiting.
    for pid in pids.into_iter().flatten() {
        assert!(!process_alive(pid), "process {pid} outlived its kernel");
    }
    // The replacement's processes end with it at shutdown, too.
    let next = run(
        &engine,
        "import os, subprocess\n\
         p = subprocess.Popen(['sleep', '31340'], start_new_session=True)\n\
         f'{os.readlink(\"/proc/self/ns/pid\")} {p.pid}'",
    )
    .await
    .result
    .unwrap();
    let next = common::host_pid(&next);
    engine.shutdown().await;
    assert!(!process_alive(next), "process {next} outlived the engine");
}
