//! Cells behave as in Jupyter (issue 9): a trailing `;`, `_`/`Out` with a bounded cache, real
//! cell numbers in tracebacks, pager text, errors said once, the debugger's refusal (one line),
//! and output of a thread that outlives its cell. Real binary, real ipykernel.

mod common;

use std::time::Duration;

use common::mcp_client::{McpClient, text};
use common::{TestHome, run, within};
use pi_repl::engine::Engine;
use pi_repl::engine::outcome::{Channel, LateOutput, Status};

/// Results kept in `Out`/`_N` (python/pi_repl_kernel/cell_history.py).
const KEPT_RESULTS: usize = 10;

#[tokio::test]
async fn a_trailing_semicolon_hides_the_result_and_later_results_still_show() {
    let home = TestHome::new();
    let engine = Engine::start(home.engine_config());
    let hidden = run(&engine, "x = 41\nx + 1;").await;
    assert_eq!(hidden.status, Status::Ok);
    assert_eq!(hidden.result, None, "`;` hides the value");
    let commented = run(&engine, "x + 1;  # still hidden").await;
    assert_eq!(commented.result, None);
    let shown = run(&engine, "x + 1").await;
    assert_eq!(
        shown.result.as_deref(),
        Some("42"),
        "a stored `;` cell must not silence later results"
    );
    engine.shutdown().await;
}

#[tokio::test]
async fn underscore_names_and_out_hold_recent_results() {
    let home = TestHome::new();
    let engine = Engine::start(home.engine_config());
    let first = run(&engine, "1 + 1").await;
    assert_eq!(first.cell, 1);
    assert_eq!(run(&engine, "_").await.result.as_deref(), Some("2"));
    run(&engine, "'three'").await;
    let names = run(&engine, "(_, __, ___, Out[1], _1, _i1)").await;
    assert_eq!(
        names.result.as_deref(),
        Some("('three', 2, 2, 2, 2, '1 + 1')")
    );
    engine.shutdown().await;
}

#[tokio::test]
async fn the_history_keeps_only_the_last_results_and_no_copy_of_printed_text() {
    let home = TestHome::new();
    let engine = Engine::start(home.engine_config());
    let cells = KEPT_RESULTS + 4;
    for i in 1..=cells {
        let outcome = run(&engine, &format!("{i} * 100")).await;
        assert_eq!(outcome.cell, i as u64);
    }
    let probe = run(
        &engine,
        "print('printed text is not copied into the history')\n\
         h = get_ipython().history_manager\n\
         (sorted(Out), '_1' in globals(), '_i1' in globals(), _14, \
         sum(1 for s in In if s), len(h.outputs), len(h.db_input_cache))",
    )
    .await;
    let kept: Vec<String> = (cells - KEPT_RESULTS + 1..=cells)
        .map(|n| n.to_string())
        .collect();
    assert_eq!(
        probe.result.as_deref(),
        Some(
            format!(
                "([{}], False, False, 1400, {}, 0, 1)",
                kept.join(", "),
                KEPT_RESULTS + 1
            )
            .as_str()
        ),
        "Out keeps the last {KEPT_RESULTS} results, In the last inputs, IPython's capture is emptied"
    );
    engine.shutdown().await;
}

#[tokio::test]
async fn tracebacks_name_the_outcomes_cell_number_and_keep_blank_lines() {
    let home = TestHome::new();
    let engine = Engine::start(home.engine_config());
    run(&engine, "x = 1").await;
    let defined = run(&engine, "def f():\n\n    return 1 / 0").await;
    let failed = run(&engine, "y = 2\nf()").await;
    assert_eq!((defined.cell, failed.cell), (2, 3));
    assert_eq!(failed.status, Status::Error);
    let traceback = failed.error.unwrap().traceback.join("\n");
    assert!(traceback.contains("Cell In[3], line 2"), "{traceback}");
    assert!(
        traceback.contains("Cell In[2], line 3, in f()"),
        "{traceback}"
    );
    assert!(
        traceback.contains("----> 2 f()\n\nCell In[2]"),
        "a blank line separates frames, as in Jupyter: {traceback}"
    );
    assert!(
        traceback.contains("      1 def f():\n      2 \n----> 3     return 1 / 0"),
        "{traceback}"
    );
    engine.shutdown().await;
}

#[tokio::test]
async fn cell_numbers_continue_after_the_kernel_dies_and_is_rebuilt() {
    let home = TestHome::new();
    let engine = Engine::start(home.engine_config());
    run(&engine, "x = 1").await;
    let died = run(&engine, "import os\nos._exit(3)").await;
    assert_eq!((died.status, died.cell), (Status::Died, 2));
    let failed = run(&engine, "1 / 0").await;
    assert!(failed.reset.is_some(), "the rebuild is told");
    assert_eq!(failed.cell, 3);
    let traceback = failed.error.unwrap().traceback.join("\n");
    assert!(traceback.contains("Cell In[3], line 1"), "{traceback}");
    let history = run(&engine, "In[3], _i3").await;
    assert_eq!(history.cell, 4);
    assert_eq!(history.result.as_deref(), Some("('1 / 0', '1 / 0')"));
    engine.shutdown().await;
}

#[tokio::test]
async fn a_usage_error_is_the_cells_error_said_once() {
    let home = TestHome::new();
    let engine = Engine::start(home.engine_config());
    let outcome = run(&engine, "%nonexistent_magic").await;
    assert_eq!(outcome.status, Status::Error);
    assert_eq!(outcome.stderr, "", "not also printed on stderr");
    let error = outcome.error.unwrap();
    assert_eq!(error.ename, "UsageError");
    assert_eq!(
        error.traceback,
        vec!["UsageError: Line magic function `%nonexistent_magic` not found."]
    );
    engine.shutdown().await;

    let mut client = McpClient::spawn({
        let mut command = home.cli();
        command.arg("mcp");
        command
    });
    client.initialize();
    let result = client.execute("%nonexistent_magic");
    assert_eq!(result["isError"], true);
    let said = text(&result);
    assert_eq!(
        said.matches("Line magic function `%nonexistent_magic` not found")
            .count(),
        1,
        "{said}"
    );
}

#[tokio::test]
async fn help_profiles_and_loaded_code_sent_as_payloads_come_back_as_stdout() {
    let home = TestHome::new();
    let engine = Engine::start(home.engine_config());
    let help = run(&engine, "len?").await;
    assert_eq!(help.status, Status::Ok);
    assert!(
        help.stdout
            .contains("Return the number of items in a container."),
        "{:?}",
        help.stdout
    );
    assert!(!help.stdout.contains('\u{1b}'), "no colour codes");
    let source = run(&engine, "def double(v):\n    return v * 2").await;
    assert_eq!(source.status, Status::Ok);
    let source = run(&engine, "double??").await;
    assert!(
        source.stdout.contains("return v * 2"),
        "{:?}",
        source.stdout
    );
    let profile = run(&engine, "%prun -l 1 sum(range(10))").await;
    assert!(
        profile.stdout.contains("function calls"),
        "{:?}",
        profile.stdout
    );
    let script = home.path().join("loadme.py");
    std::fs::write(&script, "y = 42\n").unwrap();
    let loaded = run(&engine, &format!("%load {}", script.display())).await;
    assert_eq!(
        loaded.stdout,
        format!(
            "{}\n# %load {}\ny = 42\n",
            pi_repl::engine::execution::NEXT_INPUT_HEADING,
            script.display()
        )
    );
    let not_run = run(&engine, "'y' in globals()").await;
    assert_eq!(not_run.result.as_deref(), Some("False"));
    engine.shutdown().await;
}

#[tokio::test]
async fn the_debugger_says_it_needs_interactive_input() {
    let home = TestHome::new();
    let engine = Engine::start(home.engine_config());
    run(&engine, "1 / 0").await;
    for code in ["%debug", "breakpoint()"] {
        let outcome = within(60, engine.submit(code, Default::default()).outcome())
            .await
            .unwrap();
        assert_eq!(outcome.status, Status::Error, "{code}");
        let error = outcome.error.unwrap();
        assert_eq!(error.ename, "StdinNotImplementedError", "{code}");
        assert!(
            error
                .evalue
                .contains("the debugger (%debug, %pdb, pdb or breakpoint())")
                && error.evalue.contains("Read the traceback instead"),
            "{code}: {}",
            error.evalue
        );
        // One line: the frames of pdb's command loop that led to the prompt say nothing.
        assert_eq!(error.traceback.len(), 1, "{code}: {:?}", error.traceback);
        assert!(
            error.traceback[0].starts_with("StdinNotImplementedError: the debugger"),
            "{code}: {:?}",
            error.traceback
        );
    }
    let plain = run(&engine, "input()").await;
    assert!(
        plain
            .error
            .unwrap()
            .evalue
            .contains("input() is not available"),
        "input() outside the debugger keeps its own message"
    );
    engine.shutdown().await;
}

/// A cell that starts a thread which waits for `go` and then prints three lines.
const START_THREAD: &str = r#"import threading
go = threading.Event()
def work():
    go.wait()
    for i in range(3):
        print('tick', i, flush=True)
worker = threading.Thread(target=work)
worker.start()
print('started')"#;

fn late(cell: u64, channel: Channel, text: &str) -> LateOutput {
    LateOutput {
        cell,
        channel,
        text: text.to_string(),
    }
}

#[tokio::test]
async fn a_threads_output_during_a_later_cell_stays_with_the_cell_that_started_it() {
    let home = TestHome::new();
    let engine = Engine::start(home.engine_config());
    let first = run(&engine, START_THREAD).await;
    assert_eq!((first.cell, first.stdout.as_str()), (1, "started\n"));
    let second = run(&engine, "go.set()\nworker.join()\nprint('second')").await;
    assert_eq!(
        second.stdout, "second\n",
        "never merged into this cell's output"
    );
    assert_eq!(
        second.late_output,
        vec![late(1, Channel::Stdout, "tick 0\ntick 1\ntick 2\n")]
    );
    let third = run(&engine, "print('third')").await;
    assert!(third.late_output.is_empty(), "delivered once");
    engine.shutdown().await;
}

#[tokio::test]
async fn a_threads_output_after_its_cell_settled_comes_with_the_next_result() {
    let home = TestHome::new();
    let engine = Engine::start(home.engine_config());
    let go = home.path().join("go");
    let printed = home.path().join("printed");
    let code = format!(
        "import threading, os, time, sys\n\
         def work():\n\
         \x20   while not os.path.exists({go:?}):\n\
         \x20       time.sleep(0.01)\n\
         \x20   print('late out', flush=True)\n\
         \x20   print('late err', file=sys.stderr, flush=True)\n\
         \x20   open({printed:?}, 'w').close()\n\
         threading.Thread(target=work).start()"
    );
    let first = run(&engine, &code).await;
    assert_eq!(first.status, Status::Ok);
    // The thread prints only once its cell has settled, and says when it has printed.
    std::fs::write(&go, b"").unwrap();
    common::eventually_async("the thread printed", Duration::from_secs(60), || {
        printed.exists()
    })
    .await;
    let next = run(&engine, "print('next')").await;
    assert_eq!(next.stdout, "next\n");
    assert_eq!(
        next.late_output,
        vec![
            late(1, Channel::Stdout, "late out\n"),
            late(1, Channel::Stderr, "late err\n")
        ]
    );
    engine.shutdown().await;
}

#[tokio::test]
async fn a_thread_pool_prints_into_the_cell_that_submitted_the_work() {
    let home = TestHome::new();
    let engine = Engine::start(home.engine_config());
    run(
        &engine,
        "from concurrent.futures import ThreadPoolExecutor\npool = ThreadPoolExecutor(2)\n\
         pool.submit(print, 'warm', flush=True).result()",
    )
    .await;
    let used = run(
        &engine,
        "pool.submit(print, 'from the pool', flush=True).result()",
    )
    .await;
    assert_eq!(used.stdout, "from the pool\n");
    assert!(used.late_output.is_empty());
    engine.shutdown().await;
}

#[test]
fn exec_prints_a_threads_late_output_under_the_cell_that_started_it() {
    let home = TestHome::new();
    let output = home
        .cli()
        .args([
            "exec",
            START_THREAD,
            "go.set()\nworker.join()\nprint('second')",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(stdout, "started\nsecond\ntick 0\ntick 1\ntick 2\n");
    assert_eq!(stderr, "[output from cell 1 after it finished]\n");
}

#[test]
fn over_mcp_a_threads_late_output_is_labelled_at_the_top_of_the_next_result() {
    let home = TestHome::new();
    let mut client = McpClient::spawn({
        let mut command = home.cli();
        command.arg("mcp");
        command
    });
    client.initialize();
    assert_eq!(text(&client.execute(START_THREAD)), "started");
    let second = client.execute("go.set()\nworker.join()\nprint('second')");
    assert_eq!(
        text(&second),
        "[output from cell 1 after it finished]\ntick 0\ntick 1\ntick 2\nsecond"
    );
}

#[test]
fn snapshots_never_hold_ipythons_history_names() {
    let home = TestHome::new();
    let first = home
        .cli()
        .args(["exec", "--session", "s", "x = 40", "x + 2", "_ * 2;", "Out"])
        .output()
        .unwrap();
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let second = home
        .cli()
        .args([
            "exec",
            "--session",
            "s",
            "x, _, __, Out, [n for n in ('_2', '_3', '_i2') if n in globals()]",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(second.status.success(), "{stderr}");
    let revived = stderr
        .lines()
        .find(|l| l.starts_with("Revived"))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(revived.ends_with(": x."), "only x is revived: {revived}");
    assert_eq!(
        String::from_utf8_lossy(&second.stdout),
        "(40, '', '', {}, [])\n",
        "a fresh kernel's history is empty"
    );
}

#[tokio::test]
async fn a_thread_a_helper_starts_at_load_prints_into_the_running_cell() {
    let home = TestHome::new();
    let helper = home.path().join("ticker.py");
    std::fs::write(
        &helper,
        "import threading\n\
         _go, _done = threading.Event(), threading.Event()\n\
         def _work():\n\
         \x20   _go.wait()\n\
         \x20   print('from the helper thread', flush=True)\n\
         \x20   _done.set()\n\
         threading.Thread(target=_work, daemon=True).start()\n\
         def release():\n\
         \x20   \"\"\"Let the helper's thread print, and wait until it has.\"\"\"\n\
         \x20   _go.set()\n\
         \x20   _done.wait()\n",
    )
    .unwrap();
    let mut config = home.engine_config();
    config.helpers = vec![helper];
    let engine = Engine::start(config);
    let outcome = run(&engine, "release()").await;
    assert_eq!(outcome.status, Status::Ok, "{:?}", outcome.error);
    assert_eq!(outcome.stdout, "from the helper thread\n");
    assert!(outcome.late_output.is_empty());
    engine.shutdown().await;
}
