//! The front door, pinned by snapshots (insta, `tests/snapshots/`): the `--help` of every
//! command, the `error:`/`hint:` text and exit code of each way a command can fail (no
//! interpreter, no ipykernel, a bad value from a flag or from an environment variable, a locked
//! session, a corrupt snapshot), and the output of `exec --json`, `sessions` and `doctor`.
//!
//! Each run is the real binary with a cleared environment (a private HOME and PI_REPL_HOME, a
//! fixed help width) against the real test interpreter. Paths, durations, sizes, ages and the
//! Python version are replaced by placeholders, so a snapshot changes only when what a user
//! reads changes. After an intended change: `INSTA_UPDATE=always cargo test --test
//! cli_front_door`, then review the `.snap` diffs.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::test_python;

/// A private home for one test, and how to run pi-repl in it.
struct FrontDoor {
    dir: tempfile::TempDir,
}

impl FrontDoor {
    fn new() -> FrontDoor {
        let dir = tempfile::Builder::new()
            .prefix("pi-repl-front-")
            .tempdir()
            .expect("temp dir");
        std::fs::create_dir_all(dir.path().join("work")).expect("work dir");
        FrontDoor { dir }
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn repl_home(&self) -> PathBuf {
        self.root().join("pi-repl-home")
    }

    /// pi-repl with nothing from the caller's environment but a PATH with the system's tools.
    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_pi-repl"));
        command
            .args(args)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", self.root())
            .env("PI_REPL_HOME", self.repl_home())
            .env("PI_REPL_AUTO_SETUP", "0")
            .env("COLUMNS", "100")
            .env("LANG", "C.UTF-8")
            .current_dir(self.root().join("work"));
        command
    }

    /// The same, with the test interpreter (ipykernel installed) as PI_REPL_PYTHON.
    fn with_python(&self, args: &[&str]) -> Command {
        let mut command = self.command(args);
        command.env("PI_REPL_PYTHON", test_python());
        command
    }

    /// Runs `command` and renders its exit code, stdout and stderr with placeholders.
    fn run(&self, mut command: Command) -> String {
        let output = command.output().expect("run pi-repl");
        let text = format!(
            "exit: {}\n----- stdout -----\n{}----- stderr -----\n{}",
            output
                .status
                .code()
                .map_or("signal".to_string(), |c| c.to_string()),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        self.normalize(&text)
    }

    fn normalize(&self, text: &str) -> String {
        let python = test_python();
        let mut text = text
            .replace(&self.repl_home().display().to_string(), "[PI_REPL_HOME]")
            .replace(&self.root().display().to_string(), "[TMP]")
            .replace(&python.display().to_string(), "[PYTHON]");
        if let Some(venv) = python.parent().and_then(Path::parent) {
            text = text.replace(&venv.display().to_string(), "[PYTHON_ENV]");
        }
        placeholders(&text)
    }
}

/// Replaces measured numbers: durations (`198 ms`, `1.2s`, `"elapsed_ms": 12`), sizes
/// (`1.4 KB`), ages (`3 s ago`), lib directory hashes, and the Python version.
fn placeholders(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let starts_number = chars[i].is_ascii_digit()
            && (i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_'));
        if !starts_number {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let mut end = i;
        while end < chars.len() && (chars[end].is_ascii_digit() || chars[end] == '.') {
            end += 1;
        }
        let number: String = chars[i..end].iter().collect();
        let rest: String = chars[end..chars.len().min(end + 6)].iter().collect();
        let unit = [
            "ms", " ms", "s", " s", " B", " KB", " KiB", " MB", " MiB", "B", "KB",
        ]
        .iter()
        .filter(|unit| {
            rest.starts_with(*unit)
                && !rest[unit.len()..]
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
        .max_by_key(|unit| unit.len());
        match unit {
            Some(unit) => {
                out.push_str(if unit.trim().ends_with('s') {
                    "[TIME]"
                } else {
                    "[SIZE]"
                });
                i = end + unit.len();
            }
            None => {
                out.push_str(&number);
                i = end;
            }
        }
    }
    let mut text = out;
    // Measured values in JSON: `"…_ms": 12`, `"…bytes": 345`.
    for key in ["_ms\":", "bytes\":", "_at\":"] {
        text = replace_value_after(&text, key);
    }
    text = iso_times(&text);
    // The kernel module's directory is named after a hash of its files.
    text = replace_word_after(&text, "pi_repl_kernel-", "[HASH]");
    text = replace_word_after(&text, "Python 3.", "[VERSION]");
    // A session's directory is named after a hash of its project's path; a refused snapshot is
    // set aside under a timestamp.
    text = replace_word_after(&text, "work-", "[PROJECT]");
    text = replace_word_after(&text, "refused-", "[STAMP]");
    text
}

/// Replaces UTC timestamps like `2026-11-30T17:53:23.440Z` with `[DATETIME]`.
fn iso_times(text: &str) -> String {
    const SHAPE: &[u8] = b"0000-00-00T00:00:00.000Z";
    let bytes = text.as_bytes();
    let mut out = String::new();
    let mut i = 0;
    let mut copied = 0;
    while i + SHAPE.len() <= bytes.len() {
        let matches = SHAPE.iter().zip(&bytes[i..]).all(|(shape, byte)| {
            if *shape == b'0' {
                byte.is_ascii_digit()
            } else {
                shape == byte
            }
        });
        if matches {
            out.push_str(&text[copied..i]);
            out.push_str("[DATETIME]");
            i += SHAPE.len();
            copied = i;
        } else {
            i += 1;
        }
    }
    out.push_str(&text[copied..]);
    out
}

/// Collapses runs of spaces: table columns are padded to the width of measured values.
fn squeeze_spaces(text: &str) -> String {
    let mut out = String::new();
    for (i, part) in text.split(' ').enumerate() {
        if i > 0 && !part.is_empty() {
            out.push(' ');
        }
        out.push_str(part);
    }
    out
}

/// Replaces the JSON scalar after each `key` (a number or a string) with `"[MEASURED]"`.
fn replace_value_after(text: &str, key: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(key) {
        let (head, tail) = rest.split_at(at + key.len());
        out.push_str(head);
        let spaces = tail.len() - tail.trim_start_matches(' ').len();
        out.push_str(&tail[..spaces]);
        let tail = &tail[spaces..];
        let end = if let Some(quoted) = tail.strip_prefix('"') {
            quoted.find('"').map_or(tail.len(), |q| q + 2)
        } else {
            tail.find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .unwrap_or(tail.len())
        };
        if end == 0 || tail.starts_with("null") {
            rest = tail;
            continue;
        }
        out.push_str("\"[MEASURED]\"");
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// Replaces the run of word characters and dots after each `prefix` with `placeholder`.
fn replace_word_after(text: &str, prefix: &str, placeholder: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(prefix) {
        let (head, tail) = rest.split_at(at + prefix.len());
        out.push_str(head);
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '.'))
            .unwrap_or(tail.len());
        let end = tail[..end].trim_end_matches('.').len();
        out.push_str(placeholder);
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

#[test]
fn placeholders_replace_measurements_and_keep_everything_else() {
    assert_eq!(
        placeholders("kernel starts in 198 ms (Python 3.11.7, ipykernel 7.4.0); 1.4 KB, 3s ago"),
        "kernel starts in [TIME] (Python 3.[VERSION], ipykernel 7.4.0); [SIZE], [TIME] ago"
    );
    assert_eq!(
        placeholders(r#"{"cell": 1, "elapsed_ms": 12, "status": "ok", "x2": 5}"#),
        r#"{"cell": 1, "elapsed_ms": "[MEASURED]", "status": "ok", "x2": 5}"#
    );
    assert_eq!(
        placeholders(
            r#"{"duration_ms":31,"saved_at":"2026-11-30T17:53:23.440Z"} at 2026-11-30T17:53:23.440Z"#
        ),
        r#"{"duration_ms":"[MEASURED]","saved_at":"[MEASURED]"} at [DATETIME]"#
    );
    assert_eq!(squeeze_spaces("a    b  c d"), "a b c d");
}

#[test]
fn help_of_every_command() {
    let door = FrontDoor::new();
    let commands: &[&[&str]] = &[
        &[],
        &["config"],
        &["doctor"],
        &["exec"],
        &["helpers"],
        &["mcp"],
        &["sessions"],
        &["sessions", "list"],
        &["sessions", "show"],
        &["sessions", "rm"],
        &["sessions", "prune"],
        &["sessions", "rekey"],
        &["sessions", "recover"],
        &["setup"],
    ];
    for command in commands {
        let mut args = command.to_vec();
        args.push("--help");
        let name = if command.is_empty() {
            "help".to_string()
        } else {
            format!("help_{}", command.join("_"))
        };
        insta::assert_snapshot!(name, door.run(door.command(&args)));
    }
}

#[test]
fn no_interpreter_at_all() {
    let door = FrontDoor::new();
    let empty = door.root().join("empty-bin");
    std::fs::create_dir_all(&empty).expect("dir");
    let mut command = door.command(&["exec", "1"]);
    command.env("PATH", &empty);
    insta::assert_snapshot!(door.run(command));
}

#[test]
fn an_interpreter_without_ipykernel_from_the_flag_and_from_the_environment() {
    let door = FrontDoor::new();
    // A real venv with nothing installed (not even pip): python, but no ipykernel.
    let base = Command::new(test_python())
        .args(["-c", "import sys; print(sys._base_executable)"])
        .output()
        .expect("base python");
    let base = String::from_utf8_lossy(&base.stdout).trim().to_string();
    let bare = door.root().join("bare");
    let made = Command::new(&base)
        .args(["-m", "venv", "--without-pip"])
        .arg(&bare)
        .status()
        .expect("venv");
    assert!(made.success());
    let python = bare.join("bin").join("python");
    let python_arg = python.display().to_string();
    insta::assert_snapshot!(
        "no_ipykernel_flag",
        door.run(door.command(&["exec", "--python", &python_arg, "1"]))
    );
    let mut from_env = door.command(&["exec", "1"]);
    from_env.env("PI_REPL_PYTHON", &python);
    insta::assert_snapshot!("no_ipykernel_env", door.run(from_env));
    insta::assert_snapshot!(
        "missing_interpreter_flag",
        door.run(door.command(&["exec", "--python", "/no/such/python", "1"]))
    );
}

/// A snapshot name, pi-repl's arguments, and the environment variable that carries the bad value.
type BadValueCase = (
    &'static str,
    &'static [&'static str],
    Option<(&'static str, &'static str)>,
);

#[test]
fn bad_values_from_flags_and_from_environment_variables() {
    let door = FrontDoor::new();
    let cases: &[BadValueCase] = &[
        ("timeout_flag", &["exec", "--timeout", "soon", "1"], None),
        (
            "timeout_env",
            &["exec", "1"],
            Some(("PI_REPL_TIMEOUT_MS", "soon")),
        ),
        (
            "max_output_flag",
            &["exec", "--max-output", "many", "1"],
            None,
        ),
        (
            "max_output_env",
            &["exec", "1"],
            Some(("PI_REPL_MAX_OUTPUT_CHARS", "lots")),
        ),
        ("wait_ms_flag", &["mcp", "--wait-ms", "later"], None),
        ("wait_ms_env", &["mcp"], Some(("PI_REPL_WAIT_MS", "later"))),
        ("llm_api_flag", &["exec", "--llm-api", "gemini", "1"], None),
        (
            "llm_api_env",
            &["exec", "1"],
            Some(("PI_REPL_LLM_API", "gemini")),
        ),
        (
            "boot_timeout_env",
            &["exec", "1"],
            Some(("PI_REPL_BOOT_TIMEOUT_MS", "-5")),
        ),
        (
            "snapshot_fork_env",
            &["exec", "1"],
            Some(("PI_REPL_SNAPSHOT_FORK", "maybe")),
        ),
        (
            "heartbeat_env",
            &["mcp"],
            Some(("PI_REPL_HEARTBEAT_MS", "often")),
        ),
        (
            "auto_setup_env",
            &["exec", "1"],
            Some(("PI_REPL_AUTO_SETUP", "maybe")),
        ),
        ("unknown_flag", &["exec", "--no-such-flag", "1"], None),
        (
            "prune_keep_flag",
            &["sessions", "prune", "--keep", "some"],
            None,
        ),
    ];
    for (name, args, env) in cases {
        let mut command = door.with_python(args);
        if let Some((key, value)) = env {
            command.env(key, value);
            if *key == "PI_REPL_AUTO_SETUP" {
                // Only reached without an interpreter: nothing explicit, no venv.
                command.env_remove("PI_REPL_PYTHON");
            }
        }
        insta::assert_snapshot!(format!("bad_value_{name}"), door.run(command));
    }
}

/// The one directory under PI_REPL_HOME/state (the session the test made).
fn only_session_dir(door: &FrontDoor) -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(door.repl_home().join("state"))
        .expect("state dir")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.is_dir())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs.remove(0)
}

#[test]
fn a_session_in_use_by_another_process() {
    let door = FrontDoor::new();
    let made = door.run(door.with_python(&["exec", "--session", "busy", "x = 1"]));
    assert!(made.starts_with("exit: 0"), "{made}");
    let lock = std::fs::OpenOptions::new()
        .write(true)
        .open(only_session_dir(&door).join("lock"))
        .expect("lock file");
    let held = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .map_err(|(_, errno)| errno)
        .expect("hold the session's lock");
    insta::assert_snapshot!(door.run(door.with_python(&["exec", "--session", "busy", "x"])));
    drop(held);
}

#[test]
fn a_corrupt_snapshot() {
    let door = FrontDoor::new();
    let made = door.run(door.with_python(&["exec", "--session", "broken", "x = 21"]));
    assert!(made.starts_with("exit: 0"), "{made}");
    let manifest = only_session_dir(&door)
        .join("snapshot")
        .join("manifest.json");
    assert!(manifest.is_file(), "no snapshot was saved: {made}");
    std::fs::write(&manifest, "{ not json").expect("corrupt");
    insta::assert_snapshot!(
        "corrupt_snapshot_sessions_show",
        door.run(door.with_python(&["sessions", "show", "broken"]))
    );
    insta::assert_snapshot!(
        "corrupt_snapshot_exec",
        door.run(door.with_python(&["exec", "--session", "broken", "x * 2"]))
    );
}

#[test]
fn exec_json() {
    let door = FrontDoor::new();
    insta::assert_snapshot!(door.run(door.with_python(&[
        "exec",
        "--json",
        "print('hi')",
        "6 * 7",
        "1/0"
    ])));
}

#[test]
fn sessions_empty_and_with_one() {
    let door = FrontDoor::new();
    insta::assert_snapshot!("sessions_empty", door.run(door.with_python(&["sessions"])));
    let made = door.run(door.with_python(&["exec", "--session", "one", "x = 1", "y = 'two'"]));
    assert!(made.starts_with("exit: 0"), "{made}");
    insta::assert_snapshot!(
        "sessions_one",
        squeeze_spaces(&door.run(door.with_python(&["sessions"])))
    );
    insta::assert_snapshot!(
        "sessions_show_one",
        squeeze_spaces(&door.run(door.with_python(&["sessions", "show", "one"])))
    );
}

#[test]
fn configuration_files_their_problems_and_pi_repl_config() {
    let door = FrontDoor::new();
    let user = door.root().join(".pi/agent/pi-repl.toml");
    let project = door.root().join("work/.pi/pi-repl.toml");
    std::fs::create_dir_all(user.parent().expect("dir")).expect("dir");
    std::fs::create_dir_all(project.parent().expect("dir")).expect("dir");
    std::fs::write(&user, "boot-timeout-ms = 61000\nimage-max-count = 2\n").expect("user");
    std::fs::write(&project, "max-output = 8000\n").expect("project");
    let mut sources = door.command(&["config", "exec", "--timeout", "500"]);
    sources.env("PI_REPL_ABORT_GRACE_MS", "3000");
    insta::assert_snapshot!("config_sources", door.run(sources));
    let cases: &[(&str, &str)] = &[
        (
            "config_unknown_key",
            "max-output = 8000\nmax-ouput = 9000\n",
        ),
        ("config_malformed", "max-output = [1\n"),
        ("config_bad_value", "wait-ms = \"soon\"\n"),
        ("config_guarded_key", "llm-model = \"qwen\"\n"),
    ];
    for (name, text) in cases {
        std::fs::write(&project, text).expect("project");
        insta::assert_snapshot!(*name, door.run(door.command(&["mcp"])));
    }
}

#[test]
fn doctor() {
    let door = FrontDoor::new();
    insta::assert_snapshot!(door.run(door.with_python(&["doctor"])));
}

/// How many `x` a run printed on stdout.
fn xs_printed(run: &str) -> usize {
    let stdout = run
        .split("----- stdout -----")
        .nth(1)
        .and_then(|rest| rest.split("----- stderr -----").next())
        .unwrap_or_default();
    stdout.chars().filter(|c| *c == 'x').count()
}

/// Issue 17: a setting's variable is read, its flag wins over it (a bad variable under a flag
/// is never read), and a variable set but empty reads as unset.
#[test]
fn a_flag_wins_over_its_variable_and_an_empty_variable_is_unset() {
    let door = FrontDoor::new();
    let cell = "print('x' * 1000)";
    let mut from_variable = door.with_python(&["exec", cell]);
    from_variable.env("PI_REPL_MAX_OUTPUT_CHARS", "100");
    let run = door.run(from_variable);
    assert!(run.starts_with("exit: 0"), "{run}");
    assert!(
        xs_printed(&run) < 1000,
        "the variable's limit was not applied: {run}"
    );

    let mut flag_wins = door.with_python(&["exec", "--max-output", "5000", cell]);
    flag_wins.env("PI_REPL_MAX_OUTPUT_CHARS", "lots");
    let run = door.run(flag_wins);
    assert!(run.starts_with("exit: 0"), "{run}");
    assert_eq!(xs_printed(&run), 1000, "{run}");

    let mut empty = door.with_python(&["exec", cell]);
    empty
        .env("PI_REPL_MAX_OUTPUT_CHARS", "")
        .env("PI_REPL_BOOT_TIMEOUT_MS", " ");
    let run = door.run(empty);
    assert!(run.starts_with("exit: 0"), "{run}");
    assert_eq!(xs_printed(&run), 1000, "{run}");
}

/// `--jupyter-token` needs `--jupyter-url`; a `JUPYTER_TOKEN` set for other programs does not.
#[test]
fn a_jupyter_token_flag_needs_a_url_and_the_variable_does_not() {
    let door = FrontDoor::new();
    insta::assert_snapshot!(
        "jupyter_token_without_url",
        door.run(door.with_python(&["exec", "--jupyter-token", "secret", "1"]))
    );
    let mut from_variable = door.with_python(&["exec", "1 + 1"]);
    from_variable.env("JUPYTER_TOKEN", "secret");
    let run = door.run(from_variable);
    assert!(run.starts_with("exit: 0"), "{run}");
}
