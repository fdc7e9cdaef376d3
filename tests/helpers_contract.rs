//! Helpers and the default toolbox, end to end: discovery over real trees, loading into a real
//! kernel, the tool description against what the kernel holds, and the CLI reports (issue #5).

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::mcp_client::{McpClient, outcome, text};
use common::{TestHome, run, run_with};
use pi_repl::engine::outcome::Status;
use pi_repl::engine::{CellOptions, Engine};
use serde_json::json;

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// A repository with nested helper dirs, a global helper dir, a skipped and a broken helper.
struct Project {
    deep: PathBuf,
    repo: PathBuf,
}

fn project(home: &TestHome) -> Project {
    let repo = home.path().join("repo");
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    let deep = repo.join("pkg/sub");
    write(
        &repo.join(".pi/helpers/read.py"),
        "helper_description = \"Read, the project's way.\"\n\n\
         def read(path,\n         *,\n         loud: bool = True) -> str:\n    \"\"\"Read loudly.\"\"\"\n    return 'PROJECT READ'\n",
    );
    write(
        &deep.join(".pi/helpers/nearby.py"),
        "import json\nhelper_description = 'Things near the code.'\n\ndef nearby(x=1):\n    \"\"\"Near.\"\"\"\n    return x + 1\n",
    );
    write(
        &deep.join(".pi/helpers/_draft.py"),
        "def draft(): return 1\n",
    );
    write(
        &deep.join(".pi/helpers/broken.py"),
        "import module_that_does_not_exist\n\ndef broken(): pass\n",
    );
    write(
        &home.home.helpers().join("globaltool.py"),
        "function_description = 'A global tool (old-style description).'\n\ndef globaltool(a, b=2):\n    \"\"\"Add.\"\"\"\n    return a + b\n",
    );
    write(
        &home.home.helpers().join("nearby.py"),
        "def shadowed_nearby(): return 'global'\n",
    );
    write(
        &repo.parent().unwrap().join(".pi/helpers/outside.py"),
        "def outside(): pass\n",
    );
    Project { deep, repo }
}

fn mcp_in(home: &TestHome, cwd: &Path) -> McpClient {
    let mut command = home.cli();
    command.arg("mcp").arg("--cwd").arg(cwd);
    McpClient::spawn(command)
}

#[tokio::test]
async fn the_default_toolbox_is_in_every_kernel() {
    let home = TestHome::new();
    let mut config = home.engine_config();
    let module_dir = config.kernel.module_dir.clone();
    config.helpers = pi_repl::helpers::discover(
        &config.kernel.cwd,
        &home.home.helpers(),
        &pi_repl::python_env::embedded_package::toolbox_dir(&module_dir),
    )
    .load_order();
    let engine = Engine::start(config);
    let outcome = run(
        &engine,
        "r = bash('echo hi; echo oops >&2; exit 4')\n\
         write('notes/a.txt', 'one\\ntwo\\n')\n\
         edit('notes/a.txt', 'two', 'three')\n\
         (r.returncode, r.stdout, r.stderr, str(read('notes/a.txt')))",
    )
    .await;
    assert_eq!(outcome.status, Status::Ok, "{outcome:?}");
    assert_eq!(
        outcome.result.as_deref(),
        Some("(4, 'hi\\n', 'oops\\n', '     1\\tone\\n     2\\tthree')")
    );
    let leaked = run(
        &engine,
        "sorted(k for k in ('os', 'subprocess', 'difflib') if k in globals())",
    )
    .await;
    assert_eq!(
        leaked.result.as_deref(),
        Some("[]"),
        "helper imports leaked into the namespace"
    );
    engine.shutdown().await;
}

#[test]
fn the_description_lists_exactly_what_the_kernel_loaded_nearest_winning() {
    let home = TestHome::new();
    let project = project(&home);
    let mut client = mcp_in(&home, &project.deep);
    client.initialize();
    let id = client.request("tools/list", json!({}));
    let listed = client.response(id, Duration::from_secs(120));
    let description = listed["result"]["tools"][0]["description"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        description
            .contains("  read(path, *, loud: bool = True) -> str — Read, the project's way.\n"),
        "{description}"
    );
    assert!(
        description.contains("  nearby(x=1) — Things near the code.\n"),
        "{description}"
    );
    assert!(
        description.contains("  globaltool(a, b=2) — A global tool (old-style description).\n")
    );
    assert!(
        description.contains("  bash(command, timeout=None, cwd=None, echo=True) — "),
        "{description}"
    );
    for absent in ["draft", "broken(", "outside", "shadowed_nearby"] {
        assert!(
            !description.contains(absent),
            "{absent} must not be listed:\n{description}"
        );
    }
    let listed_names: Vec<String> = description
        .lines()
        .filter_map(|line| line.strip_prefix("  "))
        .filter_map(|line| line.split('(').next())
        .map(str::to_string)
        .collect();
    let first = client.execute(
        "sorted(__import__('pi_repl_kernel.helpers', fromlist=['loaded']).loaded()['names'])",
    );
    let body = text(&first);
    assert!(
        body.starts_with("[pi-repl: helper "),
        "the broken helper is told first: {body}"
    );
    assert!(
        body.contains("broken.py, line 1 did not load: ModuleNotFoundError"),
        "{body}"
    );
    let mut sorted = listed_names.clone();
    sorted.sort();
    let held: Vec<String> = serde_json::from_str(
        &outcome(&first)["result"]
            .as_str()
            .unwrap()
            .replace('\'', "\""),
    )
    .unwrap();
    assert_eq!(sorted, held, "listed and loaded differ");
    assert_eq!(text(&client.execute("read('x')")), "'PROJECT READ'");
    let second = client.execute("nearby(2)");
    assert_eq!(text(&second), "3", "the notice is told once");
}

#[tokio::test]
async fn a_helper_that_kills_the_kernel_at_import_is_skipped_and_named() {
    let home = TestHome::new();
    let killer = home.path().join("helpers/killer.py");
    let fine = home.path().join("helpers/fine.py");
    write(&killer, "import os\nos._exit(3)\n");
    write(&fine, "def fine():\n    return 'fine'\n");
    let mut config = home.engine_config();
    config.helpers = vec![killer.clone(), fine.clone()];
    let engine = Engine::start(config);
    let outcome = run(&engine, "fine()").await;
    assert_eq!(outcome.result.as_deref(), Some("'fine'"), "{outcome:?}");
    let notice = outcome.notices.join("\n");
    assert!(notice.contains("killer.py did not load"), "{notice}");
    assert!(notice.contains("loading it ended the kernel"), "{notice}");
    assert!(notice.contains("code 3"), "{notice}");
    engine.shutdown().await;
}

#[tokio::test]
async fn a_helper_that_hangs_at_import_is_interrupted_within_the_boot_budget() {
    let home = TestHome::new();
    let hang = home.path().join("helpers/hang.py");
    write(&hang, "import time\ntime.sleep(3600)\n");
    let mut config = home.engine_config();
    config.helpers = vec![hang];
    config.boot_timeout = Duration::from_secs(6);
    let engine = Engine::start(config);
    let started = std::time::Instant::now();
    let outcome = run(&engine, "1 + 1").await;
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(outcome.result.as_deref(), Some("2"));
    let notice = outcome.notices.join("\n");
    assert!(
        notice.contains("hang.py") && notice.contains("KeyboardInterrupt"),
        "{notice}"
    );
    engine.shutdown().await;
}

#[tokio::test]
async fn an_aborted_bash_call_leaves_no_process_behind() {
    let home = TestHome::new();
    let mut config = home.engine_config();
    config.helpers = vec![
        pi_repl::python_env::embedded_package::toolbox_dir(&config.kernel.module_dir)
            .join("bash.py"),
    ];
    let engine = Engine::start(config);
    let pid_file = home.path().join("sleep.pid");
    let code = format!(
        "bash(\"sh -c 'echo $(readlink /proc/self/ns/pid) $$ > {}; exec sleep 300'\")",
        pid_file.display()
    );
    let options = CellOptions {
        timeout: Some(Duration::from_millis(1500)),
    };
    let outcome = run_with(&engine, &code, options).await;
    assert_eq!(outcome.status, Status::Aborted);
    // Named by the kernel's PID namespace and its pid there.
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    assert!(
        common::wait_gone_in_namespace(&pid, 2.0),
        "the sleep under bash outlived the aborted cell: {pid}"
    );

    let timed = run(
        &engine,
        "import os\nr = bash(\"sh -c 'sleep 300 & echo $!; wait'\", timeout=1, echo=False)\n\
         assert r.timed_out\nprint(os.readlink('/proc/self/ns/pid'), r.stdout.strip())",
    )
    .await;
    let grandchild = timed.stdout.trim().to_string();
    assert_eq!(grandchild.split_whitespace().count(), 2, "{grandchild}");
    assert!(
        common::wait_gone_in_namespace(&grandchild, 2.0),
        "bash's timeout left the grandchild running: {grandchild}"
    );
    engine.shutdown().await;
}

#[test]
fn the_helpers_command_shows_origins_shadowing_and_skips() {
    let home = TestHome::new();
    let project = project(&home);
    let output = home
        .cli()
        .arg("helpers")
        .arg("--cwd")
        .arg(&project.deep)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8_lossy(&output.stdout);
    let read_header = format!(
        "read.py  [project ({})]",
        project.repo.join(".pi/helpers").display()
    );
    assert!(text.contains(&read_header), "{text}");
    assert!(
        text.contains("    read(path, *, loud: bool = True) -> str\n"),
        "{text}"
    );
    assert!(
        text.contains("shadows ") && text.contains("toolbox/read.py"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "shadows {}",
            home.home.helpers().join("nearby.py").display()
        )),
        "{text}"
    );
    assert!(text.contains("skipped (name starts with _): "), "{text}");
    assert!(!text.contains("outside.py"), "{text}");
}

#[test]
fn doctor_reports_a_broken_helper_and_passes_when_all_is_well() {
    let home = TestHome::new();
    let project = project(&home);
    let broken = home
        .cli()
        .arg("doctor")
        .arg("--cwd")
        .arg(&project.deep)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&broken.stdout);
    assert_eq!(broken.status.code(), Some(1), "{text}");
    assert!(
        text.contains("FAIL  helper ") && text.contains("broken.py"),
        "{text}"
    );
    assert!(
        text.contains("fix: fix the file, or rename it to start with `_`"),
        "{text}"
    );
    assert!(
        text.contains("ok    kernel starts and runs a cell in"),
        "{text}"
    );

    std::fs::remove_file(project.deep.join(".pi/helpers/broken.py")).unwrap();
    let fixed = home
        .cli()
        .arg("doctor")
        .arg("--cwd")
        .arg(&project.deep)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&fixed.stdout);
    assert_eq!(fixed.status.code(), Some(0), "{text}");
    assert!(text.contains("all checks passed"), "{text}");
}

#[test]
fn doctor_flags_a_snapshot_key_others_can_read() {
    use std::os::unix::fs::PermissionsExt;
    let home = TestHome::new();
    let key = pi_repl::session::ensure_key(&home.home).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let output = home.cli().arg("doctor").output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert!(text.contains("snapshot.key is 644"), "{text}");
}
