//! The configuration files (issue 27), against the real binary: a user file
//! (`~/.pi/agent/pi-repl.toml`, or `PI_REPL_CONFIG`) and a project file (`.pi/pi-repl.toml` up
//! to the git root), layered under the variables and flags; guarded keys refused from a
//! project file unless the user file trusts it; a bad file or key is `error:` + `hint:` with
//! the file and line, exit code 2; `pi-repl config` names each value's source; `exec` and
//! `mcp` both run with the files' values.
//!
//! Every run has a cleared environment: `HOME` and the working directory are in a temp dir, so
//! the developer's own files never leak in.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::mcp_client::{self, McpClient};
use common::test_python;
use serde_json::Value;

/// A private HOME with a user file, and a git repository to work in with a project file.
struct Place {
    dir: tempfile::TempDir,
}

impl Place {
    fn new() -> Place {
        let dir = tempfile::Builder::new()
            .prefix("pi-repl-config-")
            .tempdir()
            .expect("temp dir");
        std::fs::create_dir_all(dir.path().join("home/.pi/agent")).expect("home");
        std::fs::create_dir_all(dir.path().join("repo/.git")).expect("repo");
        std::fs::create_dir_all(dir.path().join("repo/.pi")).expect(".pi");
        std::fs::create_dir_all(dir.path().join("repo/src")).expect("src");
        Place { dir }
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    fn repo(&self) -> PathBuf {
        self.dir.path().join("repo").canonicalize().expect("repo")
    }

    fn user_file(&self) -> PathBuf {
        self.home().join(".pi/agent/pi-repl.toml")
    }

    fn project_file(&self) -> PathBuf {
        self.repo().join(".pi/pi-repl.toml")
    }

    fn write_user(&self, text: &str) {
        std::fs::write(self.user_file(), text).expect("user file");
    }

    fn write_project(&self, text: &str) {
        std::fs::write(self.project_file(), text).expect("project file");
    }

    /// pi-repl in `repo/src` with nothing from the caller's environment but PATH.
    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_pi-repl"));
        command
            .args(args)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", self.home())
            .env("PI_REPL_HOME", self.dir.path().join("pi-repl-home"))
            .env("PI_REPL_AUTO_SETUP", "0")
            .env("LANG", "C.UTF-8")
            .current_dir(self.repo().join("src"));
        command
    }

    fn run(&self, command: &mut Command) -> Output {
        command.output().expect("run pi-repl")
    }

    /// `pi-repl config --json ARGS` as JSON (it must succeed).
    fn config(&self, args: &[&str], env: &[(&str, &str)]) -> Value {
        let mut command = self.command(&[&["config", "--json"], args].concat());
        command.envs(env.iter().copied());
        let output = self.run(&mut command);
        assert!(output.status.success(), "{}", stderr(&output));
        serde_json::from_slice(&output.stdout).expect("JSON")
    }
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The row of `key` in `pi-repl config --json`.
fn setting<'a>(config: &'a Value, key: &str) -> &'a Value {
    config["settings"]
        .as_array()
        .expect("settings")
        .iter()
        .find(|row| row["key"] == key)
        .unwrap_or_else(|| panic!("no {key} in {config}"))
}

#[test]
fn each_layer_wins_over_the_one_below_it() {
    let place = Place::new();
    let max = |config: &Value| {
        let row = setting(config, "max-output").clone();
        (
            row["value"].as_str().unwrap_or_default().to_string(),
            row["source"].as_str().unwrap_or_default().to_string(),
        )
    };
    let config = place.config(&["exec"], &[]);
    assert_eq!(max(&config), ("30000".into(), "default".into()));

    place.write_user("max-output = 5000\nboot-timeout-ms = 61000\n");
    let config = place.config(&["exec"], &[]);
    assert_eq!(max(&config), ("5000".into(), "user file".into()));
    let row = setting(&config, "max-output");
    assert_eq!(row["file"], place.user_file().to_str().unwrap());
    assert_eq!(row["line"], 1);

    place.write_project("# the project's own\nmax-output = 8000\n");
    let config = place.config(&["exec"], &[]);
    assert_eq!(max(&config), ("8000".into(), "project file".into()));
    assert_eq!(setting(&config, "max-output")["line"], 2);
    // A key only the user file sets still comes from it.
    assert_eq!(setting(&config, "boot-timeout-ms")["value"], "61000");
    assert_eq!(setting(&config, "boot-timeout-ms")["source"], "user file");

    let config = place.config(&["exec"], &[("PI_REPL_MAX_OUTPUT_CHARS", "9000")]);
    assert_eq!(max(&config), ("9000".into(), "variable".into()));

    let config = place.config(
        &["exec", "--max-output", "700"],
        &[("PI_REPL_MAX_OUTPUT_CHARS", "9000")],
    );
    assert_eq!(max(&config), ("700".into(), "flag".into()));
}

#[test]
fn pi_repl_config_names_every_source_and_the_file_and_line_of_each_file_value() {
    let place = Place::new();
    place.write_user("abort-grace-ms = 3000\ntimeout = 60000\n");
    place.write_project("\nmax-output = 8000\n");
    let mut command = place.command(&["config", "mcp", "--image-max-count", "2"]);
    command.env("PI_REPL_WAIT_MS", "end");
    let output = place.run(&mut command);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = String::from_utf8_lossy(&output.stdout);
    let line_of = |key: &str| {
        text.lines()
            .find(|line| line.starts_with(&format!("{key} ")))
            .unwrap_or_else(|| panic!("no {key} in:\n{text}"))
            .to_string()
    };
    assert!(
        line_of("image-max-count").ends_with("flag --image-max-count"),
        "{text}"
    );
    assert!(line_of("wait-ms").contains("\"end\""), "{text}");
    assert!(
        line_of("wait-ms").ends_with("variable PI_REPL_WAIT_MS"),
        "{text}"
    );
    assert!(
        line_of("max-output").ends_with(&format!(
            "project file {}:2",
            place.project_file().display()
        )),
        "{text}"
    );
    assert!(
        line_of("abort-grace-ms")
            .ends_with(&format!("user file {}:1", place.user_file().display())),
        "{text}"
    );
    assert!(line_of("heartbeat-ms").ends_with("default"), "{text}");
    // `timeout` is exec's: listed as in the files but not read by mcp.
    assert!(text.contains("not read by `pi-repl mcp`"), "{text}");
    assert!(
        text.contains(&format!(
            "timeout (user file {}:2)",
            place.user_file().display()
        )),
        "{text}"
    );
}

#[test]
fn a_project_file_cannot_set_a_guarded_key_unless_the_user_file_trusts_it() {
    let place = Place::new();
    place.write_project("max-output = 8000\nllm-base-url = \"http://127.0.0.1:9/v1\"\n");
    let output = place.run(&mut place.command(&["config", "mcp"]));
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let err = stderr(&output);
    assert!(
        err.starts_with(&format!(
            "error: {}:2: `llm-base-url` is not taken from a project file",
            place.project_file().display()
        )),
        "{err}"
    );
    assert!(err.contains("hint: "), "{err}");
    assert!(err.contains("trust-project = [\"llm-base-url\"]"), "{err}");
    // exec refuses it the same way, before any kernel starts.
    let output = place.run(&mut place.command(&["exec", "1"]));
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("`llm-base-url`"),
        "{}",
        stderr(&output)
    );

    // Trusted for this project only.
    place.write_user(&format!(
        "[project.\"{}\"]\ntrust-project = [\"llm-base-url\"]\n",
        place.repo().display()
    ));
    let config = place.config(&["mcp"], &[]);
    assert_eq!(
        setting(&config, "llm-base-url")["value"],
        "http://127.0.0.1:9/v1"
    );
    assert_eq!(setting(&config, "llm-base-url")["source"], "project file");

    // Trusted everywhere; another guarded key is still refused.
    place.write_user("trust-project = [\"llm-base-url\"]\n");
    let config = place.config(&["mcp"], &[]);
    assert_eq!(setting(&config, "llm-base-url")["source"], "project file");
    place.write_project("pass-credentials = true\n");
    let output = place.run(&mut place.command(&["config"]));
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains(":1: `pass-credentials` is not taken from a project file"),
        "{}",
        stderr(&output)
    );

    // Nor may a project choose a file anywhere for the session's notebook.
    place.write_project("notebook = \"/tmp/elsewhere.ipynb\"\n");
    let output = place.run(&mut place.command(&["config"]));
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains(":1: `notebook` is not taken from a project file"),
        "{}",
        stderr(&output)
    );

    // The user file itself may set any key.
    std::fs::remove_file(place.project_file()).expect("rm");
    place.write_user("pass-credentials = true\n");
    let config = place.config(&["exec"], &[]);
    assert_eq!(setting(&config, "pass-credentials")["value"], "true");
    assert_eq!(setting(&config, "pass-credentials")["source"], "user file");
}

#[test]
fn a_bad_file_an_unknown_key_and_a_bad_value_fail_with_the_file_and_line() {
    let place = Place::new();
    let fails = |command: &[&str], file: &Path, line: usize, says: &str, hint: &str| {
        let output = place.run(&mut place.command(command));
        let err = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{err}");
        assert!(
            err.starts_with(&format!("error: {}:{line}: {says}", file.display())),
            "{err}"
        );
        assert!(err.contains(&format!("\nhint: {hint}")), "{err}");
    };
    place.write_project("max-output = 8000\nllm-model = qwen\n");
    fails(
        &["exec", "1"],
        &place.project_file(),
        2,
        "not valid TOML",
        "fix the file",
    );
    place.write_project("max-output = 8000\n\nmax-ouput = 9000\n");
    fails(
        &["mcp"],
        &place.project_file(),
        3,
        "unknown key `max-ouput`",
        "did you mean `max-output`?",
    );
    place.write_project("PI_REPL_BOOT_TIMEOUT_MS = 1000\n");
    fails(
        &["config"],
        &place.project_file(),
        1,
        "unknown key",
        "did you mean `boot-timeout-ms`?",
    );
    place.write_project("max-output = 5\n");
    fails(
        &["exec", "1"],
        &place.project_file(),
        1,
        "invalid value \"5\" for `max-output`: expected a whole number of at least 100",
        "write it like max-output = 1000",
    );
    std::fs::remove_file(place.project_file()).expect("rm");
    place.write_user("[project.\"/x\"]\ntrust-project = [\"llm-base-ur\"]\n");
    fails(
        &["config"],
        &place.user_file(),
        2,
        "`trust-project` names `llm-base-ur`",
        "did you mean `llm-base-url`?",
    );
    // A missing file is nothing.
    std::fs::remove_file(place.user_file()).expect("rm");
    let output = place.run(&mut place.command(&["config"]));
    assert!(output.status.success(), "{}", stderr(&output));
}

#[test]
fn pi_repl_config_points_the_user_file_elsewhere_and_reads_the_reference_json() {
    let place = Place::new();
    let elsewhere = place.dir.path().join("mine.toml");
    std::fs::write(&elsewhere, "image-max-side = 999\n").expect("write");
    let config = place.config(&["mcp"], &[("PI_REPL_CONFIG", elsewhere.to_str().unwrap())]);
    assert_eq!(setting(&config, "image-max-side")["value"], "999");
    assert_eq!(
        setting(&config, "image-max-side")["file"],
        elsewhere.to_str().unwrap()
    );

    let json = place.home().join(".pi/agent/pi-repl.json");
    std::fs::write(
        &json,
        "{\n  \"pythonPath\": \"/usr/bin/python3\",\n  \"timeoutMs\": 60000,\n  \"toolboxDir\": \"~/tools\"\n}\n",
    )
    .expect("write");
    let config = place.config(&["exec"], &[]);
    assert_eq!(setting(&config, "python")["value"], "/usr/bin/python3");
    assert_eq!(setting(&config, "python")["line"], 2);
    assert_eq!(setting(&config, "timeout")["value"], "60000");
    let notes = config["notes"].to_string();
    assert!(notes.contains("`toolboxDir` is not read"), "{notes}");
    // The TOML user file wins over the JSON one.
    place.write_user("python = \"/opt/python\"\n");
    let config = place.config(&["exec"], &[]);
    assert_eq!(setting(&config, "python")["value"], "/opt/python");
}

#[test]
fn doctor_reports_a_bad_configuration_file_and_goes_on() {
    let place = Place::new();
    place.write_project("max-ouput = 9000\n");
    let mut command = place.command(&["doctor"]);
    command.env("PI_REPL_PYTHON", test_python());
    let output = place.run(&mut command);
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{text}{}", stderr(&output));
    assert!(
        text.contains(&format!(
            "FAIL  configuration: {}:1: unknown key `max-ouput`",
            place.project_file().display()
        )),
        "{text}"
    );
    assert!(text.contains("fix: did you mean `max-output`?"), "{text}");
    assert!(
        text.contains("ok    kernel"),
        "doctor went on to start a kernel:\n{text}"
    );
}

/// A cell printing 20 000 characters: cut under a `max-output` of 1000.
const FLOOD: &str = "print('\\n'.join('line %05d' % i for i in range(2000)))";

#[test]
fn exec_honours_the_project_files_max_output() {
    let place = Place::new();
    let run = |place: &Place| {
        let mut command = place.command(&["exec", FLOOD]);
        command.env("PI_REPL_PYTHON", test_python());
        let output = place.run(&mut command);
        assert!(output.status.success(), "{}", stderr(&output));
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let whole = run(&place);
    assert!(whole.contains("line 01000"), "not cut by default");
    place.write_project("max-output = 1000\n");
    let cut = run(&place);
    assert!(!cut.contains("line 01000"), "the middle is cut");
    assert!(
        cut.contains("line 00000") && cut.contains("line 01999"),
        "{cut}"
    );
    assert!(cut.len() < 3000, "{} characters: {cut}", cut.len());
}

#[test]
fn the_mcp_server_honours_the_project_files_max_output() {
    let place = Place::new();
    place.write_project("max-output = 1000\n");
    let mut command = place.command(&["mcp"]);
    command.env("PI_REPL_PYTHON", test_python());
    let mut client = McpClient::spawn(command);
    client.initialize();
    let result = client.execute(FLOOD);
    let text = mcp_client::text(&result);
    assert!(!text.contains("line 01000"), "the middle is cut: {text}");
    assert!(
        text.contains("line 00000") && text.contains("line 01999"),
        "{text}"
    );
    assert!(text.len() < 3000, "{} characters", text.len());
    client.close(Duration::from_secs(60));
}

#[test]
fn the_project_file_is_looked_for_from_cwd_and_allow_write_reaches_the_kernel() {
    let place = Place::new();
    place.write_project("max-output = 4444\n");
    place.write_user("allow-write = [\"/srv/a\", \"/srv/b\"]\n");
    let repo = place.repo();
    // Run from the home directory, naming the repository with --cwd.
    let run_here = |args: &[&str]| {
        let mut command = place.command(args);
        command.current_dir(place.home());
        command.env("PI_REPL_PYTHON", test_python());
        place.run(&mut command)
    };
    let output = run_here(&["config", "--json", "exec", "--cwd", repo.to_str().unwrap()]);
    assert!(output.status.success(), "{}", stderr(&output));
    let config: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(setting(&config, "max-output")["source"], "project file");
    assert_eq!(
        setting(&config, "allow-write")["value"],
        serde_json::json!(["/srv/a", "/srv/b"])
    );
    let output = run_here(&[
        "exec",
        "--cwd",
        repo.to_str().unwrap(),
        "import os; print(os.environ.get('PI_REPL_ALLOW_WRITE'))",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        "/srv/a:/srv/b"
    );
}

/// A Jupyter Server URL from a file satisfies `--kernel-id` (clap's `requires` would not: a
/// file's value is a default to clap); without any URL it is still refused.
#[test]
fn kernel_id_takes_its_jupyter_url_from_a_file() {
    let place = Place::new();
    let output = place.run(&mut place.command(&["config", "exec", "--kernel-id", "k1"]));
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("--kernel-id is given without --jupyter-url"),
        "{}",
        stderr(&output)
    );
    place.write_user("jupyter-url = \"http://127.0.0.1:9\"\n");
    let config = place.config(&["exec", "--kernel-id", "k1"], &[]);
    assert_eq!(setting(&config, "jupyter-url")["source"], "user file");
}

/// `setup` and `sessions` read no configuration, so a broken file never stops them (it stops
/// the commands that read it).
#[test]
fn a_broken_user_file_stops_only_the_commands_that_read_it() {
    let place = Place::new();
    place.write_user("max-output = \n");
    let output = place.run(&mut place.command(&["sessions"]));
    assert!(output.status.success(), "{}", stderr(&output));
    let output = place.run(&mut place.command(&["helpers"]));
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains(&format!("{}:1:", place.user_file().display())),
        "{}",
        stderr(&output)
    );
}
