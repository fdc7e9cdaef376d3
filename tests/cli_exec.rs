//! `pi-repl exec` end to end: the real binary, a real kernel, real exit codes.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{TestHome, wait_gone};

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn exec(command: &mut Command) -> Run {
    let output = command.output().expect("pi-repl runs");
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

#[test]
fn cells_share_one_kernel_and_streams_go_to_their_own_descriptor() {
    let home = TestHome::new();
    let run = exec(home.cli().args([
        "exec",
        "x = 40",
        "import sys; print('to stderr', file=sys.stderr); print('to stdout')",
        "x + 2",
    ]));
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout, "to stdout\n42\n");
    assert_eq!(run.stderr, "to stderr\n");
}

#[test]
fn every_cell_runs_after_an_error_and_the_exit_code_says_error() {
    let home = TestHome::new();
    let run = exec(home.cli().args(["exec", "1/0", "print('after')"]));
    assert_eq!(run.code, 1);
    assert_eq!(run.stdout, "after\n");
    assert!(
        run.stderr.contains("ZeroDivisionError: division by zero"),
        "{}",
        run.stderr
    );
}

#[test]
fn json_prints_one_object_per_cell() {
    let home = TestHome::new();
    let run = exec(home.cli().args([
        "exec",
        "--json",
        "print('hi')",
        "6 * 7",
        "raise KeyError('k')",
    ]));
    assert_eq!(run.code, 1, "{}", run.stderr);
    let lines: Vec<serde_json::Value> = run
        .stdout
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON object per line"))
        .collect();
    assert_eq!(lines.len(), 3);
    for line in &lines {
        for key in [
            "status",
            "stdout",
            "stderr",
            "result",
            "error",
            "duration_ms",
        ] {
            assert!(line.get(key).is_some(), "missing {key} in {line}");
        }
    }
    assert_eq!(lines[0]["status"], "ok");
    assert_eq!(lines[0]["stdout"], "hi\n");
    assert_eq!(lines[1]["result"], "42");
    assert_eq!(lines[2]["status"], "error");
    assert_eq!(lines[2]["error"]["ename"], "KeyError");
    assert_eq!(lines[2]["error"]["evalue"], "'k'");
    assert!(lines[2]["error"]["traceback"].as_array().unwrap().len() > 1);
}

#[test]
fn a_dash_reads_a_cell_from_stdin() {
    let home = TestHome::new();
    let mut child = home
        .cli()
        .args(["exec", "y = 5", "-", "y"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"y = y * 3\nprint('from stdin')\n")
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&output.stdout), "from stdin\n15\n");
    assert!(output.status.success());
}

#[test]
fn exit_codes_report_the_worst_outcome() {
    let home = TestHome::new();
    let aborted = exec(home.cli().args([
        "exec",
        "--timeout",
        "500",
        "import time; time.sleep(30)",
        "1",
    ]));
    assert_eq!(aborted.code, 3, "{}", aborted.stderr);
    assert!(
        aborted
            .stderr
            .contains("[aborted: the cell's time limit (500 ms) passed]"),
        "{}",
        aborted.stderr
    );
    assert_eq!(aborted.stdout, "1\n", "later cells still run");

    let died = exec(home.cli().args([
        "exec",
        "import os; os._exit(2)",
        "1/0",
        "print('still runs')",
    ]));
    assert_eq!(died.code, 4, "died outranks error");
    assert!(died.stderr.contains("KernelDied"), "{}", died.stderr);
    assert!(
        died.stderr.contains("<repl_engine_reset>"),
        "{}",
        died.stderr
    );
    assert_eq!(died.stdout, "still runs\n");
}

#[test]
fn ctrl_c_interrupts_the_running_cell_and_skips_the_rest() {
    let home = TestHome::new();
    let mut child = home
        .cli()
        .args([
            "exec",
            "import time; print('go', flush=True); time.sleep(30)",
            "print('skipped')",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    // The signal goes once the cell is running: its first line has reached stdout.
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut first_line = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut first_line).unwrap();
    assert_eq!(first_line, "go\n");
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let started = Instant::now();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert_eq!(rest, "", "nothing runs after the interrupted cell");
    assert!(stderr.contains("KeyboardInterrupt"), "{stderr}");
}

#[test]
fn no_kernel_survives_its_host_being_killed() {
    let home = TestHome::new();
    let pid_file = home.path().join("kernel.pid");
    let code = format!(
        "import os, subprocess, time\nchild = subprocess.Popen(['sleep', '120'])\n\
         open({:?}, 'w').write(f'{{os.readlink(\"/proc/self/ns/pid\")}} {{os.getpid()}} {{child.pid}}')\n\
         time.sleep(120)",
        pid_file.display().to_string()
    );
    let mut host = home
        .cli()
        .args(["exec", &code])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pids = common::eventually("the cell started", Duration::from_secs(60), || {
        std::fs::read_to_string(&pid_file)
            .ok()
            .filter(|text| text.split_whitespace().count() == 3)
    });
    let pids: Vec<i32> = common::find_host_pids(&pids)
        .into_iter()
        .map(|pid| pid.expect("the kernel and its child run"))
        .collect();
    host.kill().unwrap(); // SIGKILL: no chance to clean up
    host.wait().unwrap();
    for pid in pids {
        assert!(
            wait_gone(pid, 2.0),
            "process {pid} outlived its host by more than 2 s"
        );
    }
}

#[test]
fn a_bash_command_ends_with_the_kernel_when_it_dies() {
    let home = TestHome::new();
    let output = home
        .cli()
        .args([
            "exec",
            "import os\nr = bash('sleep 31341 > /dev/null 2>&1 & echo $!')\n\
             print(os.readlink('/proc/self/ns/pid'), r.stdout.strip())",
            "import os\nos._exit(1)",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    // bash() echoes the command's output first; the cell's own line names the namespace.
    let line = stdout
        .lines()
        .find(|line| line.starts_with("pid:") && line.split_whitespace().count() == 2)
        .unwrap_or_else(|| panic!("{stdout}{}", String::from_utf8_lossy(&output.stderr)));
    // Named by its PID namespace and its pid there: no process is that one any more.
    assert_eq!(
        common::find_host_pids(line),
        vec![None],
        "the bash() command {line} outlived its kernel and `pi-repl exec`"
    );
}

#[test]
fn a_detached_process_does_not_survive_its_host_being_killed() {
    let home = TestHome::new();
    let pid_file = home.path().join("detached.pid");
    let code = format!(
        "import os, subprocess, time\n\
         child = subprocess.Popen(['sleep', '31342'], start_new_session=True)\n\
         open({:?}, 'w').write(os.readlink('/proc/self/ns/pid') + ' ' + str(child.pid))\n\
         time.sleep(120)",
        pid_file.display().to_string()
    );
    let mut host = home
        .cli()
        .args(["exec", &code])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let text = common::eventually("the cell started", Duration::from_secs(60), || {
        std::fs::read_to_string(&pid_file)
            .ok()
            .filter(|text| text.split_whitespace().count() == 2)
    });
    let pid = common::host_pid(&text);
    host.kill().unwrap(); // SIGKILL: the kernel's lifeline ends it
    host.wait().unwrap();
    assert!(
        wait_gone(pid, 30.0),
        "the detached process {pid} outlived its host"
    );
}

/// Runs `pi-repl exec` with `cells`, reads its first stdout line, closes the pipe (as `head -1`
/// does), creates `go` (so the cell writes only after the close) and returns the first line,
/// the exit status and stderr.
fn exec_with_stdout_closed_early(
    home: &TestHome,
    cells: &[&str],
    go: &std::path::Path,
) -> (String, std::process::ExitStatus, String) {
    use std::io::{BufRead, Read};
    let mut child = home
        .cli()
        .arg("exec")
        .args(cells)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    reader.read_line(&mut first).unwrap();
    drop(reader); // the reader goes away
    std::fs::write(go, b"").unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    (first, status, stderr)
}

#[test]
fn a_stdout_closed_by_its_reader_ends_exec_quietly_with_141() {
    let home = TestHome::new();
    let go = home.path().join("go");
    let ran = home.path().join("ran");
    let wait = format!(
        "import os, time\nprint('first', flush=True)\n\
         while not os.path.exists({go:?}):\n    time.sleep(0.01)\n'the result'"
    );
    let after = format!("open({ran:?}, 'w').close()");
    let (first, status, stderr) = exec_with_stdout_closed_early(&home, &[&wait, &after], &go);
    assert_eq!(first, "first\n");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(status.code(), Some(141), "{stderr}");
    assert!(
        !ran.exists(),
        "a cell ran after its output's reader had gone"
    );
}

#[test]
fn a_flood_into_a_closed_stdout_is_aborted() {
    let home = TestHome::new();
    let go = home.path().join("go");
    let flood = format!(
        "import os, time\nprint('first', flush=True)\n\
         while not os.path.exists({go:?}):\n    time.sleep(0.01)\n\
         while True:\n    print('x' * 1000, flush=True)"
    );
    let (first, status, stderr) = exec_with_stdout_closed_early(&home, &[&flood], &go);
    assert_eq!(first, "first\n");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(status.code(), Some(141), "{stderr}");
}

#[test]
fn provider_credentials_stay_out_of_the_kernel_unless_passed() {
    let home = TestHome::new();
    let cell = "import os; print(os.environ.get('EXAMPLE_API_KEY'), os.environ.get('GH_TOKEN'), os.environ.get('PLAIN_SETTING'))";
    let hidden = exec(
        home.cli()
            .args(["exec", cell])
            .env("EXAMPLE_API_KEY", "sk-secret")
            .env("GH_TOKEN", "ghp-secret")
            .env("PLAIN_SETTING", "visible"),
    );
    assert_eq!(hidden.stdout, "None None visible\n", "{}", hidden.stderr);
    let passed = exec(
        home.cli()
            .args(["exec", "--pass-credentials", cell])
            .env("EXAMPLE_API_KEY", "sk-secret")
            .env("GH_TOKEN", "ghp-secret")
            .env("PLAIN_SETTING", "visible"),
    );
    assert_eq!(passed.stdout, "sk-secret ghp-secret visible\n");
    let by_env = exec(
        home.cli()
            .args(["exec", cell])
            .env("PI_REPL_PASS_CREDENTIALS", "1")
            .env("EXAMPLE_API_KEY", "sk-secret"),
    );
    assert!(by_env.stdout.starts_with("sk-secret "), "{}", by_env.stdout);
}

#[test]
fn an_interpreter_without_ipykernel_is_reported_with_the_fix() {
    let home = TestHome::new();
    let bare = home.path().join("bare-venv");
    let made = Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&bare)
        .status()
        .unwrap();
    assert!(made.success());
    let python = bare.join("bin/python");
    let run = exec(home.cli().arg("exec").arg("--python").arg(&python).arg("1"));
    assert_eq!(run.code, 5, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "error: --python {} cannot run the kernel",
            python.display()
        )),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("No module named"), "{}", run.stderr);
    assert!(
        run.stderr.contains("hint: install the kernel into it with"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("-m pip install ipykernel=="),
        "{}",
        run.stderr
    );
}

#[test]
fn a_missing_python_flag_target_is_a_usage_error() {
    let home = TestHome::new();
    let run = exec(
        home.cli()
            .args(["exec", "--python", "/no/such/python", "1"]),
    );
    assert_eq!(run.code, 2);
    assert!(
        run.stderr
            .contains("error: --python /no/such/python does not exist"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_missing_cwd_is_a_usage_error() {
    let home = TestHome::new();
    let run = exec(home.cli().args(["exec", "--cwd", "/no/such/dir", "1"]));
    assert_eq!(run.code, 2);
    assert!(
        run.stderr
            .contains("error: --cwd /no/such/dir: no such directory"),
        "{}",
        run.stderr
    );
}

#[test]
fn without_an_environment_or_auto_setup_the_error_names_the_setup_command() {
    let home = TestHome::new();
    let run = exec(
        home.cli()
            .args(["exec", "1"])
            .env_remove("PI_REPL_PYTHON")
            .env("PI_REPL_AUTO_SETUP", "0")
            .env("PATH", home.path()),
    );
    assert_eq!(run.code, 5, "{}", run.stderr);
    assert!(
        run.stderr.contains("error: no Python interpreter"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("hint: run `pi-repl setup`"),
        "{}",
        run.stderr
    );
}

#[test]
fn setup_is_idempotent() {
    let Some(test_home) = std::env::var_os("PI_REPL_TEST_HOME") else {
        panic!("PI_REPL_TEST_HOME is not set: run the tests with scripts/test");
    };
    let output = Command::new(env!("CARGO_BIN_EXE_pi-repl"))
        .arg("setup")
        .env("PI_REPL_HOME", &test_home)
        .output()
        .unwrap();
    assert!(output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.trim().ends_with("venv/bin/python"), "{stdout}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("already up to date"));
}

#[test]
fn pi_repl_home_relocates_every_file_it_writes() {
    let home = TestHome::new();
    let user_home = home.path().join("user-home");
    std::fs::create_dir_all(&user_home).unwrap();
    let run = exec(
        home.cli()
            .args(["exec", "for i in range(50_000): print(i)"])
            .env("HOME", &user_home),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("the full output is in"),
        "the flood should spill"
    );
    let written: Vec<_> = std::fs::read_dir(&user_home).unwrap().collect();
    assert!(
        written.is_empty(),
        "files written outside PI_REPL_HOME: {written:?}"
    );
    let spill_dir = home.home.outputs().join("ephemeral");
    assert_eq!(std::fs::read_dir(spill_dir).unwrap().count(), 1);
}

#[test]
fn a_stderr_closed_by_its_reader_never_panics_and_the_exit_code_stands() {
    use std::io::{BufRead, Read};
    let home = TestHome::new();
    let go = home.path().join("go");
    // The cell fails only after the stderr reader has gone, so pi-repl's traceback meets a
    // broken pipe.
    let cell = format!(
        "import os, time\nprint('first', flush=True)\n\
         while not os.path.exists({go:?}):\n    time.sleep(0.01)\n1/0"
    );
    let mut child = home
        .cli()
        .args(["exec", &cell])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    assert_eq!(first, "first\n");
    drop(child.stderr.take()); // the stderr reader goes away
    std::fs::write(&go, b"").unwrap();
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(1),
        "a cell that raised exits 1, not with a panic (101); stdout: {rest}"
    );
}

/// The kernel's heap is on transparent huge pages (glibc's tunable, `kernel::huge_pages`), the
/// user's own `GLIBC_TUNABLES` are kept, and neither ours nor the marker reaches what a cell
/// starts: a subprocess sees the user's value, or none. (glibc rewrites the variable in the
/// process's own environment block when it reads it, so the effect is what is checked: how
/// much of a new 256 MiB buffer is on huge pages.)
#[test]
fn the_kernel_runs_with_the_huge_page_tunable_and_its_children_see_only_the_users() {
    let cell = "import os, subprocess\n\
                def huge():\n    \
                    rollup = open('/proc/self/smaps_rollup').read().splitlines()\n    \
                    return int(next(l for l in rollup if l.startswith('AnonHugePages')).split()[1])\n\
                before = huge()\n\
                buffer = bytearray(256 << 20)\n\
                for at in range(0, len(buffer), 4096):\n    buffer[at] = 1\n\
                print('huge:', 'most' if huge() - before > 128 << 10 else 'little')\n\
                print('cell:', os.environ.get('GLIBC_TUNABLES', '-'), \
                      os.environ.get('PI_REPL_ORIGINAL_GLIBC_TUNABLES', '-'))\n\
                print(subprocess.run(['sh', '-c', 'echo \"child: ${GLIBC_TUNABLES:--}\"'], \
                      capture_output=True, text=True).stdout, end='')";
    // Where the system's THP mode is `never` nothing is on huge pages; with `always` all is.
    let mode =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    let (on, off) = if mode.contains("[madvise]") {
        ("most", "little")
    } else if mode.contains("[always]") {
        ("most", "most")
    } else {
        eprintln!("THP mode {mode:?}: the pages are not checked, only the variables");
        ("little", "little")
    };
    let home = TestHome::new();
    let run = exec(home.cli().args(["exec", cell]).env_remove("GLIBC_TUNABLES"));
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout, format!("huge: {on}\ncell: - -\nchild: -\n"));

    let run = exec(
        home.cli()
            .args(["exec", cell])
            .env("GLIBC_TUNABLES", "glibc.malloc.arena_max=4"),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        run.stdout,
        format!("huge: {on}\ncell: glibc.malloc.arena_max=4 -\nchild: glibc.malloc.arena_max=4\n")
    );

    let run = exec(
        home.cli()
            .args(["exec", cell])
            .env_remove("GLIBC_TUNABLES")
            .env("PI_REPL_HUGE_PAGES", "0"),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout, format!("huge: {off}\ncell: - -\nchild: -\n"));
}
