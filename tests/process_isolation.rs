//! Issue 11: a cell cannot see the agent that started pi-repl. A local kernel runs in a PID
//! namespace of its own (with a user namespace unless root): a cell sees only the kernel's
//! processes, what it starts ends with the kernel and with the host, orphans are reaped, and
//! background saves still commit. Where namespaces are unavailable the kernel starts as before
//! and the first result says why, once. Real binary, real ipykernel, real MCP.
//!
//! The namespace test runs as `nobody` when the suite runs as root: root gets PID and mount
//! namespaces without a user namespace (another path), and reads every environment anyway.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::TestHome;
use common::mcp_client::{McpClient, text};

fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// A place `nobody` can use when the suite runs as root: a world-writable directory and a venv
/// it can run: the test venv hard-linked (it sits below a 0700 directory) on a base interpreter
/// of the same Python version that `nobody` can reach (the test venv's may be under `/root`).
/// As another user, the directory and the test interpreter as they are.
struct Unprivileged {
    dir: PathBuf,
    python: PathBuf,
    /// The pi-repl binary, where `nobody` can run it (the build dir may sit below a 0700
    /// directory, as a fresh clone in a `mktemp -d` does).
    bin: PathBuf,
}

impl Unprivileged {
    fn new(home: &TestHome) -> Unprivileged {
        let dir = home.path().join("unprivileged");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let python = common::test_python();
        let built = PathBuf::from(env!("CARGO_BIN_EXE_pi-repl"));
        if !running_as_root() {
            return Unprivileged {
                dir,
                python,
                bin: built,
            };
        }
        let bin = home.path().join("pi-repl");
        if std::fs::hard_link(&built, &bin).is_err() {
            std::fs::copy(&built, &bin).expect("copy pi-repl where nobody can run it");
        }
        let venv = python.parent().and_then(Path::parent).expect("a venv");
        let copy = home.path().join("venv");
        let status = Command::new("cp")
            .arg("-al")
            .arg(venv)
            .arg(&copy)
            .status()
            .expect("cp");
        assert!(status.success(), "cannot link the venv for nobody");
        let config = std::fs::read_to_string(venv.join("pyvenv.cfg")).expect("pyvenv.cfg");
        let setting = |name: &str| {
            config.lines().find_map(|line| {
                let (key, value) = line.split_once('=')?;
                (key.trim() == name).then(|| value.trim().to_string())
            })
        };
        let version = setting("version").expect("the venv's version");
        let minor: Vec<&str> = version.split('.').take(2).collect();
        let name = format!("python{}", minor.join("."));
        let candidates = [
            setting("home").map(|home| PathBuf::from(home).join(&name)),
            Some(PathBuf::from("/usr/bin").join(&name)),
            Some(PathBuf::from("/usr/local/bin").join(&name)),
        ];
        let base = candidates
            .into_iter()
            .flatten()
            .find(|candidate| {
                as_nobody(Path::new("/bin/sh"))
                    .args(["-c", "exec \"$0\" -c 'import sys'"])
                    .arg(candidate)
                    .status()
                    .is_ok_and(|status| status.success())
            })
            .unwrap_or_else(|| panic!("no {name} that nobody can run, for the venv's packages"));
        // Replace (never write through) the hard-linked files that name the base interpreter.
        for link in ["python", "python3", name.as_str()] {
            let path = copy.join("bin").join(link);
            let _ = std::fs::remove_file(&path);
            std::os::unix::fs::symlink(&base, &path).unwrap();
        }
        std::fs::remove_file(copy.join("pyvenv.cfg")).unwrap();
        std::fs::write(
            copy.join("pyvenv.cfg"),
            format!(
                "home = {}\ninclude-system-site-packages = false\nversion = {version}\n",
                base.parent().unwrap().display()
            ),
        )
        .unwrap();
        Unprivileged {
            dir,
            python: copy.join("bin").join("python"),
            bin,
        }
    }

    /// `program args` as `nobody` when root, else as is.
    fn command(&self, program: &Path, args: &[&str]) -> Command {
        let mut command = if running_as_root() {
            as_nobody(program)
        } else {
            Command::new(program)
        };
        command
            .args(args)
            .env("PI_REPL_HOME", self.dir.join("home"))
            .env("PI_REPL_PYTHON", &self.python)
            .env_remove("PI_REPL_PROCESS_ISOLATION")
            .env_remove("PI_REPL_NAMESPACE_UNAVAILABLE")
            .current_dir(&self.dir);
        command
    }
}

/// `program` run as `nobody`.
fn as_nobody(program: &Path) -> Command {
    let mut command = Command::new("setpriv");
    command
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(program);
    command
}

/// A cell reporting what it can see, as JSON: its parent, every pid in `/proc` (after trying
/// to unmount it), the pids whose environment it can read and that hold `AGENT_MARKER_SECRET`,
/// its uid, and (in a file) the owner of what it writes.
const LOOK_AROUND: &str = r#"import ctypes, json, os
# Unmounting the namespace's /proc would show the host's again: the kernel holds no
# capability to do it.
unmounted = ctypes.CDLL(None, use_errno=True).umount2(b'/proc', 2) == 0
pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
marked = []
for pid in pids:
    try:
        with open(f'/proc/{pid}/environ', 'rb') as f:
            if b'AGENT_MARKER_SECRET=' in f.read():
                marked.append(pid)
    except OSError:
        pass
open('written-by-a-cell', 'w').write('x')
print(json.dumps({'ppid': os.getppid(), 'pids': pids, 'marked': marked, 'uid': os.getuid(),
                  'unmounted': unmounted}))"#;

/// The agent that started pi-repl, standing in: a shell that holds a secret in its environment
/// and stays the parent of `pi-repl exec` (it has a command left to run, so it does not exec).
fn look_around_from_an_agent(
    place: &Unprivileged,
    env: &[(&str, &str)],
) -> (serde_json::Value, String) {
    let bin = place.bin.to_str().expect("a UTF-8 path");
    let mut command = place.command(
        Path::new("/bin/sh"),
        &[
            "-c",
            "\"$0\" exec \"$1\"; status=$?; exit $status",
            bin,
            LOOK_AROUND,
        ],
    );
    command
        .env("AGENT_MARKER_SECRET", "the-agents-api-key")
        .stdin(Stdio::null());
    for (name, value) in env {
        command.env(name, value);
    }
    let output = command.output().expect("run the agent stand-in");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let seen = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    (seen, stderr)
}

/// Issue 11: a cell read `/proc/<agent pid>/environ` (the agent's API key) because the agent is
/// a process of the same user. In its own PID namespace the kernel has no ancestor to read.
#[test]
fn a_cell_sees_no_ancestor_and_cannot_read_the_agents_environment() {
    let home = TestHome::new();
    let place = Unprivileged::new(&home);
    let (seen, stderr) = look_around_from_an_agent(&place, &[]);
    assert_eq!(
        seen["ppid"], 1,
        "the kernel's parent is the namespace's init: {seen}"
    );
    // Init and the kernel: no host, no agent, no other process of the user.
    assert_eq!(seen["pids"], serde_json::json!([1, 2]), "{seen}");
    assert_eq!(seen["marked"], serde_json::json!([]), "{seen}");
    assert_eq!(seen["unmounted"], false, "{seen}");
    assert!(!stderr.contains("not isolated"), "{stderr}");
    // The user is mapped to itself, not to root: a cell's file has the user's owner.
    let uid = if running_as_root() {
        65534
    } else {
        std::fs::metadata("/proc/self").unwrap().uid()
    };
    assert_eq!(seen["uid"], uid);
    let written = std::fs::metadata(place.dir.join("written-by-a-cell")).unwrap();
    assert_eq!(written.uid(), uid);

    // The method works: without isolation the same cell finds the agent's secret.
    let (seen, stderr) = look_around_from_an_agent(&place, &[("PI_REPL_PROCESS_ISOLATION", "0")]);
    assert_ne!(seen["marked"], serde_json::json!([]), "{seen}");
    assert_ne!(seen["ppid"], 1);
    assert!(
        !stderr.contains("not isolated"),
        "turned off on purpose: no notice: {stderr}"
    );
}

/// Issue 11: where user namespaces are unavailable the kernel starts as before, and the first
/// result (only) says that cells can see the user's processes, and why.
#[test]
fn without_namespaces_the_kernel_starts_and_the_first_result_says_why_once() {
    let home = TestHome::new();
    let mut command = home.cli();
    command.arg("mcp").env(
        "PI_REPL_NAMESPACE_UNAVAILABLE",
        "simulated: no user namespaces here",
    );
    let mut client = McpClient::spawn(command);
    client.initialize();
    let first = text(&client.execute("import os\nos.getppid() != 1"));
    assert!(first.contains("this kernel is not isolated"), "{first}");
    assert!(
        first.contains("simulated: no user namespaces here"),
        "{first}"
    );
    assert!(first.contains("True"), "{first}");
    let second = text(&client.execute("2 + 2"));
    assert!(
        second.contains('4') && !second.contains("not isolated"),
        "{second}"
    );
    // A replaced kernel does not say it again.
    client.execute("import os\nos._exit(1)");
    let third = text(&client.execute("3 + 3"));
    assert!(
        third.contains('6') && !third.contains("not isolated"),
        "{third}"
    );
}

/// `pi-repl doctor` says which mode the kernel runs in.
#[test]
fn doctor_reports_whether_cells_are_isolated() {
    let home = TestHome::new();
    let run = |env: &[(&str, &str)]| {
        let mut command = home.cli();
        command.arg("doctor");
        for (name, value) in env {
            command.env(name, value);
        }
        String::from_utf8_lossy(&command.output().unwrap().stdout).into_owned()
    };
    let isolated = run(&[]);
    assert!(
        isolated.contains("ok    process isolation: cells see only the kernel's own processes"),
        "{isolated}"
    );
    let unavailable = run(&[("PI_REPL_NAMESPACE_UNAVAILABLE", "simulated")]);
    assert!(
        unavailable.contains("warn  process isolation is unavailable")
            && unavailable.contains("why: simulated"),
        "{unavailable}"
    );
    let off = run(&[("PI_REPL_PROCESS_ISOLATION", "0")]);
    assert!(off.contains("process isolation: off"), "{off}");
}

/// The host's pids of the processes a cell started: it prints its PID namespace and their pids
/// there.
fn start_sleepers(client: &mut McpClient) -> Vec<i32> {
    let started = text(&client.execute(
        "import os, subprocess\n\
         plain = subprocess.Popen(['sleep', '1000'])\n\
         detached = subprocess.Popen(['sleep', '1001'], start_new_session=True)\n\
         print(os.readlink('/proc/self/ns/pid'), plain.pid, detached.pid)",
    ));
    let line = started
        .lines()
        .find(|line| line.starts_with("pid:"))
        .unwrap_or_else(|| panic!("{started}"));
    common::find_host_pids(line)
        .into_iter()
        .map(|pid| pid.unwrap_or_else(|| panic!("a sleeper is not running: {started}")))
        .collect()
}

/// Issue 10/11: every process a cell started (in the kernel's process group or in a session of
/// its own) ends when the kernel dies, and when the host is killed.
#[test]
fn processes_a_cell_started_end_with_the_kernel_and_with_the_host() {
    let home = TestHome::new();
    let mut command = home.cli();
    command.arg("mcp");
    let mut client = McpClient::spawn(command);
    client.initialize();
    let first = start_sleepers(&mut client);
    let died = text(&client.execute("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"));
    assert!(died.to_lowercase().contains("kernel"), "{died}");
    for pid in &first {
        assert!(common::wait_gone(*pid, 60.0), "{pid} outlived its kernel");
    }
    let second = start_sleepers(&mut client);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(client.child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    client.child.wait().unwrap();
    for pid in &second {
        assert!(
            common::wait_gone(*pid, 60.0),
            "{pid} outlived the killed host"
        );
    }
}

/// The kernel's namespace has an init of its own: a cell's orphan is reparented to it and
/// reaped when it exits (no zombie is left), while the kernel's own children keep their exit
/// statuses.
#[test]
fn orphans_of_cells_are_reaped_and_children_keep_their_exit_status() {
    let home = TestHome::new();
    let mut command = home.cli();
    command.arg("mcp");
    let mut client = McpClient::spawn(command);
    client.initialize();
    let result = text(&client.execute(
        "import os, subprocess, sys, time\n\
         orphan = 'import os, sys, time\\nif os.fork(): sys.exit(0)\\n\
         time.sleep(0.2)\\nopen(\"orphan\", \"w\").write(f\"{os.getpid()} {os.getppid()}\")'\n\
         subprocess.run([sys.executable, '-c', orphan], check=True)\n\
         deadline = time.monotonic() + 60\n\
         while not os.path.exists('orphan') or not open('orphan').read().strip():\n\
         \x20   assert time.monotonic() < deadline, 'the orphan never wrote'\n\
         \x20   time.sleep(0.01)\n\
         pid, parent = map(int, open('orphan').read().split())\n\
         while os.path.exists(f'/proc/{pid}'):\n\
         \x20   assert time.monotonic() < deadline, 'the orphan was never reaped'\n\
         \x20   time.sleep(0.01)\n\
         status = subprocess.run(['sh', '-c', 'exit 7']).returncode\n\
         print('parent', parent, 'reaped', not os.path.exists(f'/proc/{pid}'), 'status', status)",
    ));
    assert!(result.contains("parent 1 reaped True status 7"), "{result}");
}

/// A background save in a forked save child still commits from inside the namespace (it
/// names itself by its pid there and a token), is reaped, and a new process revives the value.
#[test]
fn a_forked_save_commits_and_a_new_process_revives_it() {
    let home = TestHome::new();
    let session = |home: &TestHome| {
        let mut command = home.cli();
        command.args(["mcp", "--session", "isolated"]);
        let mut client = McpClient::spawn(command);
        client.initialize();
        client
    };
    let mut client = session(&home);
    client.execute("kept = list(range(1000))");
    let kernel = common::host_pid(&text(&client.execute(common::KERNEL_PID_CELL)));
    let manifest_path = || {
        std::fs::read_dir(home.home.state())
            .ok()?
            .flatten()
            .map(|entry| entry.path().join("snapshot").join("manifest.json"))
            .find(|path| path.exists())
    };
    // Wait for the commit of a save child (only a save child writes a token).
    let manifest = common::eventually(
        "a save child committed `kept`",
        Duration::from_secs(120),
        || {
            let manifest: serde_json::Value = manifest_path()
                .and_then(|path| std::fs::read_to_string(path).ok())
                .and_then(|text| serde_json::from_str(&text).ok())?;
            (manifest["bindings"].get("kept").is_some() && manifest["saved_by_token"].is_string())
                .then_some(manifest)
        },
    );
    assert!(manifest["saved_by"].as_i64().unwrap() > 2, "{manifest}");
    // The kernel reaps it once the host asks: no child of the kernel stays a zombie.
    let zombie_children = || {
        pi_repl::kernel::processes::all_processes()
            .into_iter()
            .filter(|p| p.ppid == kernel && !common::process_alive(p.pid))
            .count()
    };
    common::eventually(
        "the kernel reaped the save child",
        Duration::from_secs(120),
        || zombie_children() == 0,
    );
    client.close(Duration::from_secs(60));
    let mut revived = session(&home);
    let value = text(&revived.execute("sum(kept)"));
    assert!(value.contains("499500"), "{value}");
}
