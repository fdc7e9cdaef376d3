//! Shared by the benchmarks: an ephemeral engine configuration, and a minimal MCP client for
//! `pi-repl mcp` (this build) on pipes. Each bench uses part of it.
#![allow(dead_code)]

use std::process::Command;

use std::time::Duration;

use pi_repl::engine::EngineConfig;
use pi_repl::engine::output::OutputLimits;
use pi_repl::home::Home;
use pi_repl::kernel::KernelSpec;
use pi_repl::python_env::interpreter::{Interpreter, Source};

/// `pi-repl mcp` (this build) on pipes, spoken to one request at a time.
pub struct McpStdio {
    pub child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl McpStdio {
    pub fn spawn(python: &std::path::Path, home: &Home, args: &[&str]) -> McpStdio {
        McpStdio::spawn_binary(
            std::path::Path::new(env!("CARGO_BIN_EXE_pi-repl")),
            python,
            home,
            args,
        )
    }

    /// `binary mcp args` (another build of pi-repl, for a baseline).
    pub fn spawn_binary(
        binary: &std::path::Path,
        python: &std::path::Path,
        home: &Home,
        args: &[&str],
    ) -> McpStdio {
        let mut child = Command::new(binary)
            .arg("mcp")
            .args(args)
            .env("PI_REPL_HOME", home.root())
            .env("PI_REPL_PYTHON", python)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("pi-repl mcp");
        McpStdio {
            stdin: child.stdin.take(),
            stdout: std::io::BufReader::new(child.stdout.take().expect("stdout")),
            child,
        }
    }

    /// Writes one line (a whole JSON-RPC message) to the server.
    pub fn write_line(&mut self, line: &str) {
        use std::io::Write;
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(line.as_bytes()).expect("write");
        stdin.write_all(b"\n").expect("write");
        stdin.flush().expect("flush");
    }

    /// Sends a notification.
    pub fn notify(&mut self, method: &str) {
        self.write_line(&serde_json::json!({"jsonrpc": "2.0", "method": method}).to_string());
    }

    /// The next message the server writes.
    pub fn read_message(&mut self) -> serde_json::Value {
        use std::io::BufRead;
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("read");
        serde_json::from_str(&line).expect("json")
    }

    /// Sends a request and returns its response (notifications are skipped).
    pub fn call(&mut self, id: u64, method: &str, params: serde_json::Value) -> serde_json::Value {
        use std::io::{BufRead, Write};
        let request =
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{request}").expect("write");
        stdin.flush().expect("flush");
        loop {
            let mut line = String::new();
            self.stdout.read_line(&mut line).expect("read");
            let message: serde_json::Value = serde_json::from_str(&line).expect("json");
            if message["id"] == id {
                return message;
            }
        }
    }

    /// Like `call`, but answers the server's own requests (e.g. `sampling/createMessage`)
    /// with `answer` while it waits.
    pub fn call_answering(
        &mut self,
        id: u64,
        method: &str,
        params: serde_json::Value,
        mut answer: impl FnMut(&serde_json::Value) -> serde_json::Value,
    ) -> serde_json::Value {
        use std::io::{BufRead, Write};
        let request =
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{request}").expect("write");
        stdin.flush().expect("flush");
        loop {
            let mut line = String::new();
            self.stdout.read_line(&mut line).expect("read");
            let message: serde_json::Value = serde_json::from_str(&line).expect("json");
            if message.get("method").is_some() && message.get("id").is_some() {
                let result = answer(&message);
                let reply =
                    serde_json::json!({"jsonrpc": "2.0", "id": message["id"], "result": result});
                let stdin = self.stdin.as_mut().expect("stdin open");
                writeln!(stdin, "{reply}").expect("write");
                stdin.flush().expect("flush");
                continue;
            }
            if message["id"] == id {
                return message;
            }
        }
    }

    /// Sends a request and returns at the first message whose text contains `seen` (a progress
    /// notification carrying a running cell's output).
    pub fn start_until(&mut self, id: u64, method: &str, params: serde_json::Value, seen: &str) {
        use std::io::{BufRead, Write};
        let request =
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{request}").expect("write");
        stdin.flush().expect("flush");
        loop {
            let mut line = String::new();
            self.stdout.read_line(&mut line).expect("read");
            assert!(!line.is_empty(), "the server closed its stdout");
            if line.contains(seen) {
                return;
            }
        }
    }

    /// Closes stdin (the graceful stop) and waits for the exit.
    pub fn close(&mut self) {
        drop(self.stdin.take());
        self.child.wait().expect("exit");
    }
}

/// An ephemeral engine running `python` in `home`, from the current directory.
pub fn config(python: &std::path::Path, home: &Home) -> EngineConfig {
    EngineConfig {
        kernel: KernelSpec {
            python: Interpreter {
                path: python.to_path_buf(),
                source: Source::Flag,
            },
            cwd: std::env::current_dir().expect("cwd"),
            module_dir: pi_repl::python_env::embedded_package::ensure_unpacked(home)
                .expect("unpack"),
            ipython_dir: home.ipython(),
            pass_credentials: false,
            pass_env: Vec::new(),
            extra_env: Vec::new(),
            withhold: Vec::new(),
            isolate_processes: std::env::var("PI_REPL_PROCESS_ISOLATION").as_deref() != Ok("0"),
            huge_pages: std::env::var("PI_REPL_HUGE_PAGES").as_deref() != Ok("0"),
            remote: None,
            kernelspec: None,
        },
        boot_timeout: Duration::from_secs(90),
        abort_grace: Duration::from_secs(20),
        silence_timeout: None,
        limits: OutputLimits::default(),
        output_dir: Some(home.outputs().join("bench")),
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

/// One `1+1` cell through `engine`, checked, timed in milliseconds.
pub async fn timed_one_plus_one(engine: &pi_repl::engine::Engine) -> f64 {
    let started = std::time::Instant::now();
    let outcome = engine
        .submit("1+1", pi_repl::engine::CellOptions::default())
        .outcome()
        .await
        .expect("cell");
    let elapsed = started.elapsed().as_secs_f64() * 1000.0;
    assert_eq!(outcome.result.as_deref(), Some("2"));
    elapsed
}
