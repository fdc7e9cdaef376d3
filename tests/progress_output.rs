//! Issue 29: what the model sees is what a person sees. Progress bars, carriage returns,
//! `clear_output` and widgets from the real libraries (tqdm, tqdm.auto with ipywidgets,
//! rich.progress, a Keras-style `\b` bar, matplotlib), through the real `pi-repl mcp` binary.
//! Needs tqdm, rich and ipywidgets in the test venv (python/test-requirements.txt).

mod common;

use std::time::Duration;

use common::TestHome;
use common::mcp_client::{McpClient, outcome, text};
use serde_json::{Value, json};

fn server(home: &TestHome) -> McpClient {
    let mut command = home.cli();
    command.arg("mcp");
    let mut client = McpClient::spawn(command);
    client.initialize();
    client
}

/// Issue 29: 300 `\r` updates came back as 4 303 characters with a cut marker, and 200 tqdm
/// updates went past the line cap so the model never saw the bar's last state.
#[test]
fn a_carriage_return_loop_a_tqdm_bar_and_a_keras_bar_read_as_their_last_state() {
    let home = TestHome::new();
    let mut client = server(&home);

    let result = client.execute(
        "for i in range(300):\n    print(f'\\rprogress {i}/300', end='')\nprint()\nprint('done')",
    );
    assert_eq!(text(&result), "progress 299/300\ndone");
    assert_eq!(outcome(&result)["truncated"], json!([]));

    let result = client.execute(
        "from tqdm import tqdm\nfor i in tqdm(range(200), mininterval=0): pass\nprint('after')",
    );
    let shown = text(&result);
    let (stdout, stderr) = shown.split_once("\n[stderr]\n").expect("a stderr section");
    assert_eq!(stdout, "after");
    assert_eq!(stderr.lines().count(), 1, "{stderr:?}");
    assert!(
        stderr.starts_with("100%|██████████| 200/200 ["),
        "{stderr:?}"
    );
    assert_eq!(outcome(&result)["truncated"], json!([]));

    // Keras's Progbar in a kernel: the old bar erased with `\b`s, then `\r` and the new one.
    let keras = r#"
import sys
width = 0
for step in range(1, 31):
    bar = f"{step}/30 [" + "=" * step + "." * (30 - step) + "] - loss: " + f"{1 / step:.4f}"
    sys.stdout.write("\b" * width + "\r" + bar)
    sys.stdout.flush()
    width = len(bar)
sys.stdout.write("\n");
"#;
    let result = client.execute(keras);
    assert_eq!(
        text(&result),
        format!("30/30 [{}] - loss: 0.0333", "=".repeat(30))
    );
}

/// Issue 29's acceptance: a 10 000-step tqdm loop reaches the model as its last state, and the
/// output as printed (every redraw, far over the cap) is still in a file, named in `_meta`.
#[test]
fn a_long_tqdm_loop_is_one_line_and_its_raw_output_is_kept_in_a_file() {
    let home = TestHome::new();
    let mut client = server(&home);
    let result = client.execute(
        "import sys\nfrom tqdm import tqdm\n\
         for i in tqdm(range(10_000), mininterval=0, file=sys.stdout): pass",
    );
    let shown = text(&result);
    assert_eq!(shown.lines().count(), 1, "{shown:?}");
    assert!(
        shown.starts_with("100%|██████████| 10000/10000 ["),
        "{shown:?}"
    );
    let meta = outcome(&result);
    assert_eq!(meta["truncated"], json!([]));
    let files = meta["raw_output"].as_array().expect("raw_output in _meta");
    assert_eq!(files.len(), 1, "{meta}");
    let raw = std::fs::read_to_string(files[0].as_str().unwrap()).expect("the raw file");
    assert!(raw.chars().count() > 30_000, "{} characters", raw.len());
    assert_eq!(
        raw.matches('\r').count(),
        10_002,
        "every redraw kept, as printed"
    );
    assert!(
        raw.contains(" 5000/10000 ["),
        "a middle state is in the file"
    );

    // Small redrawn output keeps no file.
    let result = client.execute("for i in range(50):\n    print(f'\\rstep {i}', end='')\nprint()");
    assert_eq!(text(&result), "step 49");
    assert!(outcome(&result).get("raw_output").is_none());
}

/// Issue 29: `tqdm.auto` with ipywidgets installed showed nothing (comm messages); rich's
/// progress bar draws inside an Output widget it clears and redraws.
#[test]
fn tqdm_auto_with_ipywidgets_and_rich_progress_read_as_text() {
    let home = TestHome::new();
    let mut client = server(&home);

    let result = client.execute(
        "from tqdm.auto import tqdm\nfor i in tqdm(range(200), desc='train'): pass\nprint('after')",
    );
    let shown = text(&result);
    assert!(shown.starts_with("after\n"), "{shown}");
    let bar = shown.lines().nth(1).unwrap_or_default();
    assert!(
        bar.starts_with("train: 100%|██████████| 200/200 ["),
        "{shown}"
    );
    assert_eq!(shown.lines().count(), 2, "{shown}");

    let result = client.execute(
        "print('before')\nfrom rich.progress import track\n\
         for i in track(range(30), description='work'): pass\nprint('after')",
    );
    let shown = text(&result);
    // rich draws each frame inside an Output widget it clears, but sends its last frame (when
    // the loop stops) outside it, after a `clear_output(wait=True)`: a notebook front end
    // reading those messages clears the cell there too, and so does pi-repl, so `before` goes.
    let bar = shown
        .lines()
        .find(|line| line.starts_with("work "))
        .unwrap_or_else(|| panic!("no bar: {shown}"));
    assert!(
        bar.contains("━━━━━━━━━━") && bar.contains("100%"),
        "{shown}"
    );
    assert!(shown.contains("\nafter"), "{shown}");
    assert!(!shown.contains('\u{1b}'), "no colour codes: {shown:?}");
    assert_eq!(shown.matches("work ").count(), 1, "one frame: {shown}");

    // A widget with no text form is named in one line, not dropped.
    let result =
        client.execute("import ipywidgets as w\nfrom IPython.display import display\ndisplay(w.Button(description='Go'))");
    assert_eq!(
        text(&result),
        "[Button widget \"Go\": a notebook front end shows it]"
    );
}

/// Issue 29: `clear_output(wait=True); print(...)` loops returned every epoch, and a live-plot
/// loop one image per epoch; Jupyter keeps only what is left after the last clear.
#[test]
fn clear_output_leaves_what_jupyter_leaves_images_included() {
    let home = TestHome::new();
    let mut client = server(&home);

    let result = client.execute(
        "from IPython.display import clear_output\nprint('header')\n\
         for i in range(20):\n    clear_output(wait=True)\n    print(f'epoch {i}')",
    );
    let shown = text(&result);
    assert!(shown.ends_with("\nepoch 19"), "{shown}");
    assert!(!shown.contains("epoch 18"), "{shown}");
    assert!(!shown.contains("header"), "{shown}");
    assert!(
        shown.starts_with(
            "[pi-repl: clear_output() ran 20 time(s) and removed 20 earlier output(s)"
        ),
        "{shown}"
    );

    let result = client.execute(
        "import matplotlib.pyplot as plt\nfrom IPython.display import clear_output, display\n\
         for epoch in range(5):\n    clear_output(wait=True)\n    fig, ax = plt.subplots(figsize=(2, 2))\n\
         \x20   ax.plot(range(epoch + 2))\n    display(fig)\n    plt.close(fig)\n    print(f'epoch {epoch}')",
    );
    let images: Vec<&Value> = result["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|block| block["type"] == "image")
        .collect();
    assert_eq!(images.len(), 1, "{result}");
    assert_eq!(outcome(&result)["images"].as_array().unwrap().len(), 1);
    let shown = text(&result);
    assert!(
        shown.contains("epoch 4") && !shown.contains("epoch 3"),
        "{shown}"
    );

    // A clear with nothing after it clears nothing (wait=True), as in Jupyter.
    let result = client.execute(
        "from IPython.display import clear_output\nprint('kept')\nclear_output(wait=True)",
    );
    assert_eq!(text(&result), "kept");
}

/// Issue 29: streaming a progress bar sent every update; now each progress notification redraws
/// the bar in place, so what a client renders is the bar's current state, one line.
#[test]
fn progress_notifications_redraw_the_bar_in_place() {
    let home = TestHome::new();
    let mut client = server(&home);
    // Long enough to stream on a loaded machine (nothing streams in a call's first 250 ms).
    let code = "import time, sys\nprint('start', flush=True)\ntime.sleep(0.5)\n\
                for i in range(1, 41):\n    sys.stderr.write(f'\\r{i:3d}/40 ' + '#' * i)\n\
                \x20   sys.stderr.flush()\n    time.sleep(0.02)\nsys.stderr.write('\\n');";
    let id = client.request(
        "tools/call",
        json!({"name": "execute", "arguments": {"code": code}, "_meta": {"progressToken": "bar"}}),
    );
    let response = client.response(id, Duration::from_secs(120));
    let mut streamed = String::new();
    for message in &client.seen {
        if message["method"] == "notifications/progress"
            && let Some(text) = message["params"]["message"].as_str()
        {
            streamed.push_str(text);
        }
    }
    let rendered = pi_repl::terminal_text::render(&streamed, 4096);
    assert!(rendered.contains("start\n"), "{rendered:?}");
    let bars: Vec<&str> = rendered.lines().filter(|l| l.contains('#')).collect();
    assert!(bars.len() <= 1, "one bar line at most: {rendered:?}");
    assert_eq!(
        text(&response["result"]),
        format!("start\n[stderr]\n 40/40 {}", "#".repeat(40))
    );
}
