//! The live notebook (issue 26): `--notebook FILE` and a durable session's `notebook.ipynb`
//! hold every cell and output in order, validate under nbformat 4.5 (the real `nbformat`
//! package), and `pi-repl sessions export` writes them, also while the session runs.

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use base64::Engine as _;
use common::TestHome;
use common::mcp_client::McpClient;
use serde_json::Value;

fn run(command: &mut Command) -> Output {
    command.output().expect("pi-repl runs")
}

/// Checks `path` with the real `nbformat.validate` (the schema of the notebook's own minor
/// version, 4.5: cell ids required); panics with nbformat's message when it is not valid.
fn validate(path: &Path) -> Value {
    let script = "import sys, nbformat\n\
                  nb = nbformat.read(sys.argv[1], as_version=nbformat.NO_CONVERT)\n\
                  nbformat.validate(nb)\n\
                  print(nb.nbformat, nb.nbformat_minor)";
    let checked = Command::new(common::test_python())
        .args(["-c", script])
        .arg(path)
        .output()
        .expect("python runs");
    assert!(
        checked.status.success(),
        "nbformat refused {}: {}",
        path.display(),
        String::from_utf8_lossy(&checked.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&checked.stdout).trim(), "4 5");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn cells(notebook: &Value) -> &Vec<Value> {
    notebook["cells"].as_array().expect("cells")
}

fn kinds(notebook: &Value) -> Vec<String> {
    cells(notebook)
        .iter()
        .map(|cell| cell["cell_type"].as_str().unwrap().to_string())
        .collect()
}

/// The width and height a PNG's header gives.
fn png_size(png: &[u8]) -> (u32, u32) {
    assert_eq!(&png[1..4], b"PNG");
    let be = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().unwrap());
    (be(16), be(20))
}

#[test]
fn the_notebook_holds_every_cell_and_output_in_order_and_validates() {
    let home = TestHome::new();
    let file = home.path().join("work").join("session.ipynb");
    let ran = run(home.cli().args(["exec", "--notebook"]).arg(&file).args([
        "import sys; print('to stdout'); print('to stderr', file=sys.stderr); 40 + 2",
        // A figure far larger than any model's image budget: the notebook keeps it whole.
        "import io, matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n\
         from IPython.display import Image, display\n\
         fig = plt.figure(figsize=(20, 10), dpi=100); plt.plot([1, 3, 2])\n\
         buf = io.BytesIO(); fig.savefig(buf, format='png'); plt.close(fig)\n\
         display(Image(data=buf.getvalue())); print(len(buf.getvalue()))",
        "from IPython.display import HTML, display\n\
         h = display(HTML('<b>first</b>'), display_id=True); h.update(HTML('<b>second</b>'))\n\
         import pandas as pd; pd.DataFrame({'a': [1, 2]})",
        "1/0",
        "import os; os.kill(os.getpid(), 9)",
        "print('after the death')",
    ]));
    assert!(!ran.status.success(), "the death fails the run");
    let notebook = validate(&file);
    assert_eq!(
        kinds(&notebook),
        ["code", "code", "code", "code", "code", "markdown", "code"]
    );
    let cells = cells(&notebook);
    let counts: Vec<Value> = cells
        .iter()
        .filter(|c| c["cell_type"] == "code")
        .map(|c| c["execution_count"].clone())
        .collect();
    assert_eq!(counts, [1, 2, 3, 4, 5, 6].map(Value::from));
    assert_eq!(notebook["metadata"]["kernelspec"]["name"], "python3");

    // Print and value, in the order the kernel sent them.
    let first = &cells[0]["outputs"];
    assert_eq!(first[0]["name"], "stdout");
    assert_eq!(first[0]["text"], "to stdout\n");
    assert_eq!(first[1]["name"], "stderr");
    assert_eq!(first[2]["output_type"], "execute_result");
    assert_eq!(first[2]["data"]["text/plain"], "42");
    assert_eq!(cells[0]["source"], cells[0]["source"].as_str().unwrap());

    // The image at its original size, byte for byte what the cell displayed.
    let image = &cells[1]["outputs"][0];
    assert_eq!(image["output_type"], "display_data");
    let png = base64::engine::general_purpose::STANDARD
        .decode(
            image["data"]["image/png"]
                .as_str()
                .unwrap()
                .replace('\n', ""),
        )
        .unwrap();
    assert_eq!(png_size(&png), (2000, 1000));
    assert_eq!(
        cells[1]["outputs"][1]["text"].as_str().unwrap().trim(),
        png.len().to_string()
    );

    // A display updated in place, then the value with every MIME type.
    let third = &cells[2]["outputs"];
    assert_eq!(third[0]["data"]["text/html"], "<b>second</b>");
    assert_eq!(third[1]["output_type"], "execute_result");
    assert!(
        third[1]["data"]["text/html"]
            .as_str()
            .unwrap()
            .contains("<table")
    );
    assert!(third[1]["data"]["text/plain"].is_string());

    // The error with its traceback, as the kernel sent it.
    let error = &cells[3]["outputs"][0];
    assert_eq!(error["output_type"], "error");
    assert_eq!(error["ename"], "ZeroDivisionError");
    assert!(!error["traceback"].as_array().unwrap().is_empty());
    assert_eq!(cells[3]["metadata"]["pi_repl"]["status"], "error");

    // The cell lost to a dead kernel is marked, and the reset is a markdown cell before the next.
    assert_eq!(cells[4]["metadata"]["pi_repl"]["status"], "died");
    let last_output = cells[4]["outputs"].as_array().unwrap().last().unwrap();
    assert!(
        last_output["text"]
            .as_str()
            .unwrap()
            .contains("the kernel died while this cell ran"),
        "{last_output}"
    );
    assert!(
        cells[5]["source"]
            .as_str()
            .unwrap()
            .contains("the workspace was rebuilt before cell 6"),
        "{}",
        cells[5]["source"]
    );
    assert_eq!(cells[6]["outputs"][0]["text"], "after the death\n");

    // A second run continues the same file; an aborted cell says why.
    let again = run(home
        .cli()
        .args(["exec", "--timeout", "500", "--notebook"])
        .arg(&file)
        .args(["import time; time.sleep(60)"]));
    assert_ne!(again.status.code(), Some(0));
    let notebook = validate(&file);
    let cells = self::cells(&notebook);
    assert_eq!(cells.len(), 8);
    let aborted = &cells[7];
    assert_eq!(aborted["metadata"]["pi_repl"]["status"], "aborted");
    let note = aborted["outputs"].as_array().unwrap().last().unwrap();
    assert!(
        note["text"]
            .as_str()
            .unwrap()
            .contains("this cell was aborted: the cell's time limit (500 ms) passed"),
        "{note}"
    );
}

#[test]
fn a_durable_session_keeps_its_notebook_and_export_writes_it_even_while_it_runs() {
    let home = TestHome::new();
    let ran = run(home
        .cli()
        .args(["exec", "--session", "nb", "x = 20", "x + 1"]));
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );

    // While a server of the same session runs, export reads its latest whole notebook.
    let mut server = McpClient::spawn({
        let mut command = home.cli();
        command.args(["mcp", "--session", "nb"]);
        command
    });
    server.initialize();
    let result = server.execute("print(x * 2)");
    assert!(common::mcp_client::text(&result).ends_with("40"));
    let exported = home.path().join("exported.ipynb");
    let export = run(home
        .cli()
        .args(["sessions", "export", "nb", "-o"])
        .arg(&exported));
    assert!(
        export.status.success(),
        "{}",
        String::from_utf8_lossy(&export.stderr)
    );
    let notebook = validate(&exported);
    let sources: Vec<&str> = cells(&notebook)
        .iter()
        .filter(|c| c["cell_type"] == "code")
        .map(|c| c["source"].as_str().unwrap())
        .collect();
    assert_eq!(sources, ["x = 20", "x + 1", "print(x * 2)"]);
    // The new server revived the workspace: said in a markdown cell before its first cell.
    assert_eq!(kinds(&notebook), ["code", "code", "markdown", "code"]);
    assert!(
        cells(&notebook)[2]["source"]
            .as_str()
            .unwrap()
            .contains("Revived from the snapshot")
    );
    let last = cells(&notebook)
        .iter()
        .rfind(|c| c["cell_type"] == "code")
        .unwrap();
    assert_eq!(last["outputs"][0]["text"], "40\n");
    assert_eq!(last["execution_count"], 3, "a durable session numbers on");
    server.close(Duration::from_secs(60));

    // To stdout, and the errors of a wrong name or sub-agent.
    let to_stdout = run(home.cli().args(["sessions", "export", "nb", "-o", "-"]));
    let printed: Value = serde_json::from_slice(&to_stdout.stdout).unwrap();
    assert_eq!(cells(&printed).len(), cells(&notebook).len());
    let no_agent = run(home
        .cli()
        .args(["sessions", "export", "nb", "--agent", "a9", "-o", "x.ipynb"]));
    assert_eq!(no_agent.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&no_agent.stderr);
    assert!(
        stderr.contains("error: session \"nb\" has no sub-agent \"a9\""),
        "{stderr}"
    );
    assert!(stderr.contains("hint:"), "{stderr}");
}

#[test]
fn an_ephemeral_workspace_writes_no_notebook_unless_asked() {
    let home = TestHome::new();
    let cwd = home.path().join("project");
    std::fs::create_dir_all(&cwd).unwrap();
    let ran = run(home.cli().current_dir(&cwd).args(["exec", "1 + 1"]));
    assert!(ran.status.success());
    let written: Vec<_> = walk(home.path())
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "ipynb"))
        .collect();
    assert!(written.is_empty(), "{written:?}");
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                found.extend(walk(&path));
            } else {
                found.push(path);
            }
        }
    }
    found
}

/// `pi-repl attach` (issue 26): a Jupyter client this project did not write (`jupyter_client`,
/// what `jupyter console --existing` uses) runs a cell in the live kernel of a running session
/// through the printed connection file; the agent's next result names it and sees its effect.
#[test]
fn a_person_attached_with_jupyter_client_runs_a_cell_and_the_agent_is_told() {
    let home = TestHome::new();
    let not_running = run(home.cli().args(["attach", "att"]));
    assert_ne!(not_running.status.code(), Some(0));

    let mut server = McpClient::spawn({
        let mut command = home.cli();
        command.args(["mcp", "--session", "att"]);
        command
    });
    server.initialize();
    server.execute("x = 1");
    let attach = run(home.cli().args(["attach", "att"]));
    assert!(
        attach.status.success(),
        "{}",
        String::from_utf8_lossy(&attach.stderr)
    );
    let file = String::from_utf8_lossy(&attach.stdout).trim().to_string();
    assert!(file.ends_with("kernel.json"), "{file}");
    assert!(
        String::from_utf8_lossy(&attach.stderr).contains("jupyter console --existing"),
        "the person is told how to use it"
    );

    let script = "import sys\n\
                  from jupyter_client import BlockingKernelClient\n\
                  c = BlockingKernelClient(connection_file=sys.argv[1])\n\
                  c.load_connection_file()\n\
                  c.start_channels()\n\
                  c.wait_for_ready(timeout=60)\n\
                  reply = c.execute_interactive('x = x + 41', timeout=60)\n\
                  print(reply['content']['status'])\n\
                  c.stop_channels()";
    let person = Command::new(common::test_python())
        .args(["-c", script, &file])
        .output()
        .expect("python runs");
    assert_eq!(
        String::from_utf8_lossy(&person.stdout).trim(),
        "ok",
        "{}",
        String::from_utf8_lossy(&person.stderr)
    );

    let result = server.execute("x");
    let text = common::mcp_client::text(&result);
    assert!(
        text.contains("A person ran a cell in this workspace"),
        "{text}"
    );
    assert!(text.contains("x = x + 41"), "{text}");
    assert!(text.trim_end().ends_with("42"), "{text}");
    server.close(Duration::from_secs(60));
    assert!(
        !Path::new(&file).exists(),
        "the key leaves the disk with the session's server"
    );
}

/// A sub-agent's cells are in its own notebook, linked from the parent's by a markdown cell
/// after the cell that started it; `sessions export --agent` writes the child's.
#[test]
fn a_sub_agents_notebook_is_its_own_and_the_parents_links_it() {
    let home = TestHome::new();
    let mut client = McpClient::spawn({
        let mut command = home.cli();
        command.args(["mcp", "--wait-ms", "end", "--session", "parent"]);
        command
    });
    client.initialize_with(serde_json::json!({"sampling": {}}));
    client.execute("h = spawn_agent('count to two', name='counter')");
    let request = client.next_named("sampling/createMessage", Duration::from_secs(180));
    client.respond(
        &request,
        serde_json::json!({"model": "scripted", "role": "assistant", "content": {"type": "text",
            "text": "Running this.\n```python\nprint('one, two')\nfinal_answer('done')\n```"}}),
    );
    let waited = common::mcp_client::text(&client.execute("h.wait(timeout=150)"));
    assert!(waited.contains("done"), "{waited}");
    client.close(Duration::from_secs(60));

    let parent = run(home.cli().args(["sessions", "export", "parent", "-o", "-"]));
    assert!(
        parent.status.success(),
        "{}",
        String::from_utf8_lossy(&parent.stderr)
    );
    let parent: Value = serde_json::from_slice(&parent.stdout).unwrap();
    let link = cells(&parent)
        .iter()
        .find(|c| c["metadata"]["pi_repl"]["kind"] == "agent")
        .unwrap_or_else(|| panic!("no link to the sub-agent: {parent}"));
    assert_eq!(link["metadata"]["pi_repl"]["id"], "agent-1");
    let source = link["source"].as_str().unwrap();
    assert!(source.contains("count to two"), "{source}");
    assert!(
        source.contains("(agents/agent-1/notebook.ipynb)"),
        "{source}"
    );

    let child_file = home.path().join("child.ipynb");
    let child = run(home
        .cli()
        .args(["sessions", "export", "parent", "--agent", "agent-1", "-o"])
        .arg(&child_file));
    assert!(
        child.status.success(),
        "{}",
        String::from_utf8_lossy(&child.stderr)
    );
    let child = validate(&child_file);
    let ran = cells(&child)
        .iter()
        .find(|c| {
            c["source"]
                .as_str()
                .is_some_and(|s| s.contains("print('one, two')"))
        })
        .unwrap_or_else(|| panic!("the child's cell is not in its notebook: {child}"));
    let printed = ran["outputs"][0]["text"].as_str().unwrap();
    assert!(printed.starts_with("one, two\n"), "{printed}");
}
