//! Shared by the integration tests: the real interpreter, a private home per test, and ways to
//! run the real engine and the real binary against a real ipykernel.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use pi_repl::engine::outcome::Outcome;
use pi_repl::engine::output::OutputLimits;
use pi_repl::engine::{
    CellOptions, DEFAULT_ABORT_GRACE, DEFAULT_BOOT_TIMEOUT, Engine, EngineConfig,
};
use pi_repl::home::Home;
use pi_repl::kernel::KernelSpec;
use pi_repl::python_env::interpreter::{Interpreter, Source};

/// The interpreter with ipykernel that `scripts/test` prepared.
pub fn test_python() -> PathBuf {
    let path = std::env::var_os("PI_REPL_TEST_PYTHON").unwrap_or_else(|| {
        panic!(
            "PI_REPL_TEST_PYTHON is not set: run the tests with `scripts/test`, which builds \
             the Python environment they need"
        )
    });
    PathBuf::from(path)
}

/// A private PI_REPL_HOME, removed when dropped.
pub struct TestHome {
    pub dir: tempfile::TempDir,
    pub home: Home,
}

impl TestHome {
    pub fn new() -> TestHome {
        let dir = tempfile::Builder::new()
            .prefix("pi-repl-test-")
            .tempdir()
            .expect("temp dir");
        let home = Home::at(dir.path().join("home"));
        pi_repl::fsutil::create_private_dir(home.root()).expect("home");
        TestHome { dir, home }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// An engine configuration running the test interpreter in this home.
    pub fn engine_config(&self) -> EngineConfig {
        let module_dir =
            pi_repl::python_env::embedded_package::ensure_unpacked(&self.home).expect("unpack");
        let cwd = self.dir.path().join("work");
        std::fs::create_dir_all(&cwd).expect("work dir");
        EngineConfig {
            kernel: KernelSpec {
                python: Interpreter {
                    path: test_python(),
                    source: Source::Flag,
                },
                cwd,
                module_dir,
                ipython_dir: self.home.ipython(),
                pass_credentials: false,
                pass_env: Vec::new(),
                extra_env: Vec::new(),
                withhold: Vec::new(),
                isolate_processes: true,
                huge_pages: true,
                remote: None,
                kernelspec: None,
            },
            boot_timeout: DEFAULT_BOOT_TIMEOUT,
            abort_grace: DEFAULT_ABORT_GRACE,
            silence_timeout: None,
            limits: OutputLimits::default(),
            output_dir: Some(self.home.outputs().join("test")),
            helpers: Vec::new(),
            snapshot: None,
            notices: Vec::new(),
            llm: None,
            agents: None,
            host_tools: None,
            notebook: None,
            attach_file: None,
            live_fork: None,
        }
    }

    /// An engine configuration for the durable session `name` (snapshots on), and the open
    /// session, which must live as long as the engine (it holds the session's lock).
    pub fn durable_config(&self, name: &str) -> (EngineConfig, pi_repl::session::Session) {
        let mut config = self.engine_config();
        let session = pi_repl::session::open(
            &self.home,
            &config.kernel.cwd,
            &pi_repl::session::SessionRequest {
                name: Some(name.to_string()),
                ..Default::default()
            },
        )
        .expect("open session");
        config.output_dir = Some(session.outputs_dir().to_path_buf());
        config.snapshot = Some(pi_repl::engine::SnapshotSettings {
            dir: session.snapshot_dir().expect("durable"),
            key_file: pi_repl::session::ensure_key(&self.home).expect("key"),
            max_binding_bytes: pi_repl::engine::DEFAULT_MAX_BINDING_BYTES,
            max_total_bytes: pi_repl::engine::DEFAULT_MAX_TOTAL_BYTES,
            refresh: None,
            forked_from: session.forked_from.clone(),
            fork: true,
            child_limit: pi_repl::engine::SAVE_CHILD_LIMIT,
            reinstall_packages: true,
            remote_dir: None,
            rewind_max_bytes: pi_repl::engine::DEFAULT_REWIND_MAX_BYTES,
        });
        (config, session)
    }

    /// The real `pi-repl` binary with this home and the test interpreter.
    pub fn cli(&self) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_pi-repl"));
        command
            .env("PI_REPL_HOME", self.home.root())
            .env("PI_REPL_PYTHON", test_python())
            .env_remove("PI_REPL_TIMEOUT_MS")
            .env_remove("PI_REPL_MAX_OUTPUT_CHARS")
            // The developer's own ~/.pi/agent/pi-repl.toml stays out (a missing file is
            // nothing); the working directory is a temp dir, with no project file.
            .env("PI_REPL_CONFIG", self.dir.path().join("no-pi-repl.toml"))
            .current_dir(self.dir.path());
        // The credentials of the environment the tests run in stay out of the binary under
        // test: its first result would name them (tests compare stderr exactly), and a test
        // has no use for a developer's keys. A test that wants one sets it after this.
        for (name, value) in std::env::vars_os() {
            let (text, value) = (name.to_string_lossy(), value.to_string_lossy());
            if pi_repl::kernel::secrets::classify(&text, &value).is_some() {
                command.env_remove(name);
            }
        }
        command
    }
}

/// Fails the test instead of hanging it.
pub async fn within<T>(seconds: u64, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(seconds), future)
        .await
        .unwrap_or_else(|_| panic!("did not finish within {seconds} s"))
}

/// The session's committed manifest, or `null` before the first commit.
pub fn manifest(session: &pi_repl::session::Session) -> serde_json::Value {
    let path = session
        .snapshot_dir()
        .expect("a durable session")
        .join("manifest.json");
    let text = std::fs::read_to_string(path).unwrap_or_default();
    serde_json::from_str(&text).unwrap_or_default()
}

/// Waits (bounded) until the session's snapshot holds `name`: a background save committed it.
pub async fn saved(session: &pi_repl::session::Session, name: &str) {
    let what = format!("a save committed `{name}`");
    eventually_async(&what, Duration::from_secs(60), || {
        manifest(session)["bindings"].get(name).is_some()
    })
    .await;
}

/// Runs one cell and waits (bounded) for its outcome.
pub async fn run(engine: &Engine, code: &str) -> Outcome {
    run_with(engine, code, CellOptions::default()).await
}

pub async fn run_with(engine: &Engine, code: &str, options: CellOptions) -> Outcome {
    within(120, engine.submit(code, options).outcome())
        .await
        .expect("the engine ran the cell")
}

/// True while a process with this pid exists (and is not a zombie).
pub fn process_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Waits up to `seconds` for `pid` to be gone.
pub fn wait_gone(pid: i32, seconds: f64) -> bool {
    poll(Duration::from_secs_f64(seconds), || !process_alive(pid)).is_some()
}

/// The process group `pid` is in (from `/proc/<pid>/stat`); panics when there is no such
/// process. A local kernel's group is led by the process the host started (the kernel, or its
/// launcher when it runs in a PID namespace), whose exit is the kernel's death to the host.
pub fn process_group(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|e| panic!("no process {pid}: {e}"));
    let after_name = &stat[stat.rfind(')').expect("a stat line") + 1..];
    // After the name: state, ppid, pgrp.
    after_name
        .split_whitespace()
        .nth(2)
        .and_then(|pgrp| pgrp.parse().ok())
        .expect("a process group in the stat line")
}
pub mod eventually;
pub mod fake_model;
pub mod mcp_client;

// Each test binary uses some of these (`common` is compiled into each one).
#[allow(unused_imports)]
pub use eventually::{eventually, eventually_async, exited, poll};

/// A Python expression naming the process it runs in as the host can find it: its PID
/// namespace and its pid there (a local kernel has a PID namespace of its own, issue 11, so
/// `os.getpid()` alone means nothing to the host).
pub const SELF_PID_EXPR: &str = "(__import__('os').readlink('/proc/self/ns/pid') + ' ' + \
                                 str(__import__('os').getpid()))";

/// A cell whose result names the kernel process (`SELF_PID_EXPR`).
pub const KERNEL_PID_CELL: &str = SELF_PID_EXPR;

/// The host's pids of the processes `described` names: `pid:[…] <pid> [<pid>…]` (a PID
/// namespace, then pids in it), as a cell's result (quotes allowed) or a line it wrote. `None`
/// for a pid that no process has (now) in that namespace.
pub fn find_host_pids(described: &str) -> Vec<Option<i32>> {
    let text = described.trim().trim_matches(['\'', '"']);
    let mut words = text.split_whitespace();
    let namespace = words.next().expect("a PID namespace").to_string();
    let wanted: Vec<i32> = words.map(|w| w.parse().expect("a pid")).collect();
    let mut found = vec![None; wanted.len()];
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let in_namespace = std::fs::read_link(entry.path().join("ns/pid"))
            .is_ok_and(|link| link.to_string_lossy() == namespace);
        if !in_namespace {
            continue;
        }
        let inner = std::fs::read_to_string(entry.path().join("status"))
            .ok()
            .and_then(|status| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix("NSpid:"))
                    .and_then(|pids| pids.split_whitespace().last()?.parse::<i32>().ok())
            });
        for (at, local) in wanted.iter().enumerate() {
            if inner == Some(*local) && process_alive(pid) {
                found[at] = Some(pid);
            }
        }
    }
    found
}

/// The host's pid of the one process `described` names (see `find_host_pids`); panics when it
/// is not running.
pub fn host_pid(described: &str) -> i32 {
    find_host_pids(described)[0].unwrap_or_else(|| panic!("no process is {described}"))
}

/// A Python expression: the PID namespace of the process it runs in (`pid:[…]`), to put before
/// pids a cell reports (see `find_host_pids`).
pub const PID_NAMESPACE_EXPR: &str = "__import__('os').readlink('/proc/self/ns/pid')";

/// Waits up to `seconds` until no process is any of those `described` names (see
/// `find_host_pids`).
pub fn wait_gone_in_namespace(described: &str, seconds: f64) -> bool {
    poll(Duration::from_secs_f64(seconds), || {
        find_host_pids(described).iter().all(Option::is_none)
    })
    .is_some()
}
