//! `--kernel NAME` on this machine (issue 16): the real `pi-repl` binary launching installed
//! kernelspecs. Deno's comes from `pi-repl setup --deno` in the setup test (the pinned `deno`
//! package from PyPI, installed with the test interpreter's pip; its wheel is in pip's cache
//! after the test venv's install); the other Deno tests use the kernelspec `setup --deno` writes
//! (`python_env::deno::write_kernelspec`) with the test venv's copy of the same package. Another
//! Python's ipykernel comes from a kernelspec the test writes.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde_json::Value;

use common::mcp_client::{McpClient, outcome, text};
use common::{TestHome, test_python};

/// A 1×1 PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";

/// A private home where `pi-repl setup --deno` installed Deno; returns the deno binary.
fn home_after_setup_deno() -> (TestHome, PathBuf) {
    let home = TestHome::new();
    let output = home.cli().args(["setup", "--deno"]).output().unwrap();
    assert!(
        output.status.success(),
        "pi-repl setup --deno failed (the deno package must install from PyPI):\n{}",
        stderr(&output)
    );
    let deno = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    assert_eq!(deno, home.home.root().join("deno/bin/deno"));
    assert!(deno.is_file());
    (home, deno)
}

/// A private home with the `deno` kernelspec `setup --deno` writes, pointing at the test venv's
/// deno (the same pinned package) instead of a fresh 90 MB copy per test.
fn deno_home() -> (TestHome, PathBuf) {
    let home = TestHome::new();
    let deno = test_python().with_file_name("deno");
    assert!(
        deno.is_file(),
        "{} is missing: `deno` is in python/test-requirements.txt",
        deno.display()
    );
    pi_repl::python_env::deno::write_kernelspec(&home.home, &deno).unwrap();
    (home, deno)
}

fn exec(home: &TestHome, args: &[&str]) -> Output {
    home.cli().arg("exec").args(args).output().unwrap()
}

/// One JSON outcome per line of `exec --json`.
fn outcomes(output: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Waits until no process is left in the process group `pgid` (the kernel and its lifeline
/// watcher), failing after a minute.
fn wait_for_group_gone(pgid: i32) {
    let what = format!("process group {pgid} gone with pi-repl");
    common::eventually(&what, Duration::from_secs(60), || {
        killpg(Pid::from_raw(pgid), None).is_err()
    });
}

#[test]
fn setup_deno_installs_a_kernel_that_exec_runs_and_is_idempotent() {
    let (home, _deno) = home_after_setup_deno();
    let spec = home.home.root().join("jupyter/kernels/deno/kernel.json");
    let written = std::fs::read_to_string(&spec).unwrap();

    let again = home.cli().args(["setup", "--deno"]).output().unwrap();
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(
        stderr(&again).contains("already installed"),
        "{}",
        stderr(&again)
    );
    assert_eq!(std::fs::read_to_string(&spec).unwrap(), written);

    let run = exec(&home, &["--kernel", "deno", "const x = 41; x + 1"]);
    assert!(run.status.success(), "{}", stderr(&run));
    assert_eq!(String::from_utf8_lossy(&run.stdout), "42\n");
    // The first result says the workspace is not Python's.
    assert!(
        stderr(&run).contains("typescript, not Python"),
        "{}",
        stderr(&run)
    );
    // ...and that its cells see the user's processes: no PID namespace for a kernelspec's
    // kernel (issue 11).
    assert!(
        stderr(&run).contains("the kernelspec `deno` starts its own kernel"),
        "{}",
        stderr(&run)
    );

    // A wrong name lists what is installed.
    let wrong = exec(&home, &["--kernel", "no-such-kernel", "1"]);
    assert_eq!(wrong.status.code(), Some(2), "{}", stderr(&wrong));
    let message = stderr(&wrong);
    assert!(
        message.contains("no kernelspec named `no-such-kernel` is installed; installed: deno"),
        "{message}"
    );
    assert!(
        message.contains(
            &home
                .home
                .root()
                .join("jupyter/kernels")
                .display()
                .to_string()
        ),
        "the hint names where pi-repl looked: {message}"
    );
}

#[test]
fn a_deno_kernel_streams_awaits_imports_caps_and_interrupts_by_message() {
    let (home, _deno) = deno_home();
    // A local module import (an `npm:` one needs the registry: see docs/kernelspecs.md).
    std::fs::write(
        home.path().join("lib.ts"),
        "export const double = (n: number): number => n * 2;\n",
    )
    .unwrap();
    let output = exec(
        &home,
        &[
            "--json",
            "--kernel",
            "deno",
            "--max-output",
            "1000",
            "--timeout",
            "1500",
            "const x: number = 41; x + 1",
            "const { double } = await import('./lib.ts'); double(x)",
            "console.log('from deno'); console.error('to stderr'); throw new Error('boom')",
            "console.log('y'.repeat(5000))",
            "let y = 5; while (true) {}",
            "y * 2",
        ],
    );
    let cells = outcomes(&output);
    assert_eq!(cells.len(), 6, "{}", stderr(&output));
    assert_eq!(cells[0]["result"], "42", "{cells:?}");
    assert_eq!(cells[1]["result"], "82", "{cells:?}");
    assert_eq!(cells[2]["status"], "error", "{cells:?}");
    assert_eq!(cells[2]["stdout"], "from deno\n", "{cells:?}");
    assert_eq!(cells[2]["stderr"], "to stderr\n", "{cells:?}");
    assert_eq!(cells[2]["error"]["evalue"], "boom", "{cells:?}");
    let capped = cells[3]["stdout"].as_str().unwrap();
    assert!(capped.len() < 2000, "{capped}");
    assert!(capped.contains("characters omitted"), "{capped}");
    // The loop is stopped by an interrupt_request (SIGINT would end Deno's kernel) and the
    // workspace survives it.
    assert_eq!(cells[4]["status"], "aborted", "{cells:?}");
    assert_eq!(cells[4]["abort"]["kernel_killed"], false, "{cells:?}");
    assert_eq!(cells[5]["status"], "ok", "{cells:?}");
    assert_eq!(cells[5]["result"], "10", "{cells:?}");
}

#[test]
fn a_killed_deno_kernel_is_reported_died_and_replaced_and_no_process_outlives_exec() {
    let (home, _deno) = deno_home();
    let output = exec(
        &home,
        &[
            "--json",
            "--kernel",
            "deno",
            "let kept = 1; Deno.pid",
            "Deno.kill(Deno.pid, 'SIGKILL')",
            "[typeof kept, Deno.pid]",
        ],
    );
    let cells = outcomes(&output);
    assert_eq!(cells.len(), 3, "{}", stderr(&output));
    let first_pid: i32 = cells[0]["result"].as_str().unwrap().parse().unwrap();
    assert_eq!(cells[1]["status"], "died", "{cells:?}");
    assert!(
        cells[1]["error"]["evalue"]
            .as_str()
            .unwrap()
            .contains("SIGKILL"),
        "{cells:?}"
    );
    let after = cells[2]["result"].as_str().unwrap();
    assert!(
        after.starts_with("[ \"undefined\","),
        "a fresh kernel: {after}"
    );
    assert!(cells[2]["reset"]["reason"].is_string(), "{cells:?}");
    assert!(!after.contains(&first_pid.to_string()), "{after}");
    let second_pid: i32 = after
        .trim_matches(|c: char| !c.is_ascii_digit())
        .parse()
        .unwrap();
    // Each kernel led its own process group (with its lifeline watcher): both are gone.
    wait_for_group_gone(first_pid);
    wait_for_group_gone(second_pid);
}

#[test]
fn over_mcp_the_tool_speaks_of_deno_shows_images_and_a_killed_host_takes_the_kernel_along() {
    let (home, _deno) = deno_home();
    let mut command = home.cli();
    command.args(["mcp", "--kernel", "deno"]);
    let mut client = McpClient::spawn(command);
    client.initialize();
    let id = client.request("tools/list", serde_json::json!({}));
    let tools = client.response(id, Duration::from_secs(120));
    let description = tools["result"]["tools"][0]["description"].as_str().unwrap();
    assert!(description.contains("`deno`"), "{description}");
    assert!(!description.contains("IPython"), "{description}");

    let pid = client.execute("Deno.pid");
    assert_eq!(outcome(&pid)["status"], "ok", "{pid}");
    let kernel_pid: i32 = outcome(&pid)["result"].as_str().unwrap().parse().unwrap();
    assert!(text(&pid).contains("not Python"), "{}", text(&pid));
    let image = client.execute(&format!(
        "Deno.jupyter.display({{ 'image/png': '{PNG}' }}, {{ raw: true }}); 'shown'"
    ));
    let content = image["content"].as_array().unwrap();
    assert!(
        content.iter().any(|block| block["type"] == "image"),
        "{image}"
    );

    // SIGKILL gives pi-repl no chance to stop the kernel: its lifeline watcher does.
    kill(Pid::from_raw(client.child.id() as i32), Signal::SIGKILL).unwrap();
    let _ = client.child.wait();
    wait_for_group_gone(kernel_pid);
}

/// A kernelspec for the test interpreter's ipykernel under another name, as another venv's
/// `python -m ipykernel install --name other-python` would write it.
fn install_other_python(home: &TestHome) {
    let dir = home.home.root().join("jupyter/kernels/other-python");
    std::fs::create_dir_all(&dir).unwrap();
    let spec = serde_json::json!({
        "argv": [test_python(), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Other Python",
        "language": "python",
    });
    std::fs::write(dir.join("kernel.json"), spec.to_string()).unwrap();
}

#[test]
fn another_pythons_kernelspec_gets_pi_repls_module_without_an_install() {
    let home = TestHome::new();
    install_other_python(&home);
    let output = exec(
        &home,
        &[
            "--json",
            "--kernel",
            "other-python",
            "--timeout",
            "1500",
            "import sys, os; here = os.getcwd(); sys.executable",
            "bash('echo $((6 * 7))').stdout",
            "input('name? ')",
            "import time; time.sleep(120)",
            "here == os.getcwd()",
            "from pi_repl_kernel.agents import AgentError\n\
             try:\n    spawn_agent('anything')\nexcept AgentError as e:\n    print(e)",
        ],
    );
    let cells = outcomes(&output);
    assert_eq!(cells.len(), 6, "{}", stderr(&output));
    assert_eq!(
        cells[0]["result"],
        format!("'{}'", test_python().display()),
        "{cells:?}"
    );
    // The toolbox and the input() refusal came with the module the first cell loaded.
    assert_eq!(cells[1]["result"], "'42\\n'", "{cells:?}");
    assert!(
        cells[2]["error"]["evalue"]
            .as_str()
            .unwrap_or_default()
            .contains("input() is not available in pi-repl"),
        "{cells:?}"
    );
    // Interrupted with SIGINT (the kernelspec's default), state kept.
    assert_eq!(cells[3]["status"], "aborted", "{cells:?}");
    assert_eq!(cells[3]["error"]["ename"], "KeyboardInterrupt", "{cells:?}");
    assert_eq!(cells[4]["result"], "True", "{cells:?}");
    // Not pi-repl's launcher: no live fork, and this ephemeral workspace has no snapshot to
    // seed a child from either; the refusal says both and what to do.
    let refused = cells[5]["stdout"].as_str().unwrap_or_default();
    assert!(
        refused.contains(
            "could not copy this workspace live (this kernel was not started by \
                          pi-repl's launcher"
        ) && refused.contains("ephemeral")
            && refused.contains("pass fork=False"),
        "{cells:?}"
    );
}

#[test]
fn a_kernelspec_whose_command_is_missing_is_a_clear_error() {
    let home = TestHome::new();
    let dir = home.home.root().join("jupyter/kernels/gone");
    std::fs::create_dir_all(&dir).unwrap();
    let missing = Path::new("/nonexistent/bin/kernel");
    let spec = serde_json::json!({
        "argv": [missing, "{connection_file}"],
        "display_name": "Gone",
        "language": "gone",
    });
    std::fs::write(dir.join("kernel.json"), spec.to_string()).unwrap();
    let output = exec(&home, &["--kernel", "gone", "1"]);
    assert!(!output.status.success());
    let message = stderr(&output);
    assert!(
        message.contains("kernelspec `gone`") && message.contains("/nonexistent/bin/kernel"),
        "{message}"
    );
}

#[test]
fn every_deno_value_arrives_though_its_idle_may_come_first() {
    let (home, _deno) = deno_home();
    // Deno publishes `idle` before the value of about one printing cell in ten: 120 such cells
    // lose a value unless the `idle` is held for it (kernel/late_idle.rs); every third cell has
    // no value and is settled after the hold's grace.
    let cells: Vec<String> = (1..=120)
        .map(|i| match i % 3 {
            0 => format!("let v{i} = {i}"),
            _ => format!("console.log({i}); [{i}].map(v => v * 2)[0]"),
        })
        .collect();
    let mut args = vec!["--json", "--kernel", "deno"];
    args.extend(cells.iter().map(String::as_str));
    let output = exec(&home, &args);
    let outcomes = outcomes(&output);
    assert_eq!(outcomes.len(), 120, "{}", stderr(&output));
    for (i, cell) in (1..).zip(&outcomes) {
        if i % 3 == 0 {
            assert_eq!(cell["result"], Value::Null, "{cell}");
        } else {
            assert_eq!(cell["result"], (i * 2).to_string(), "{cell}");
            assert_eq!(cell["stdout"], format!("{i}\n"), "{cell}");
        }
    }
}
