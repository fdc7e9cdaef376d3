//! A minimal JSON-RPC client over the real `pi-repl mcp` binary's stdio, for protocol tests.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

pub struct McpClient {
    pub child: Child,
    stdin: Option<ChildStdin>,
    messages: mpsc::Receiver<Value>,
    next_id: i64,
    /// Notifications and other messages read while waiting for a response.
    pub seen: Vec<Value>,
}

impl McpClient {
    /// Spawns `command` (already `pi-repl mcp ...`) with piped stdio.
    pub fn spawn(mut command: Command) -> McpClient {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn pi-repl mcp");
        let stdout = child.stdout.take().unwrap();
        let (tx, messages) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let value: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("the server wrote a non-JSON line ({e}): {line}"));
                if tx.send(value).is_err() {
                    break;
                }
            }
        });
        McpClient {
            stdin: child.stdin.take(),
            child,
            messages,
            next_id: 0,
            seen: Vec::new(),
        }
    }

    pub fn send_raw(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    pub fn send(&mut self, message: &Value) {
        self.send_raw(&message.to_string());
    }

    /// Sends a request and returns its id.
    pub fn request(&mut self, method: &str, params: Value) -> i64 {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    pub fn notify(&mut self, method: &str, params: Value) {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// The next message of any kind.
    pub fn next_message(&mut self, timeout: Duration) -> Value {
        self.messages
            .recv_timeout(timeout)
            .unwrap_or_else(|e| panic!("no message from the server within {timeout:?}: {e}"))
    }

    /// Waits for the response to `id` (which may have been read already, while waiting for
    /// something else), keeping everything else in `seen`.
    pub fn response(&mut self, id: i64, timeout: Duration) -> Value {
        let is_response = |message: &Value| {
            message.get("id") == Some(&json!(id)) && message.get("method").is_none()
        };
        if let Some(at) = self.seen.iter().position(is_response) {
            return self.seen.remove(at);
        }
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let message = self.next_message(left);
            if is_response(&message) {
                return message;
            }
            self.seen.push(message);
        }
    }

    /// Waits for the next message that is a request or notification named `method` (one read
    /// earlier is taken first), keeping everything else in `seen`.
    pub fn next_named(&mut self, method: &str, timeout: Duration) -> Value {
        let named = |message: &Value| message.get("method") == Some(&json!(method));
        if let Some(at) = self.seen.iter().position(named) {
            return self.seen.remove(at);
        }
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let message = self.next_message(left);
            if named(&message) {
                return message;
            }
            self.seen.push(message);
        }
    }

    /// Answers a request the server sent.
    pub fn respond(&mut self, request: &Value, result: Value) {
        self.send(&json!({"jsonrpc": "2.0", "id": request["id"], "result": result}));
    }

    /// `initialize` + `notifications/initialized`; returns the initialize result.
    pub fn initialize(&mut self) -> Value {
        self.initialize_with(json!({}))
    }

    /// `initialize` declaring `capabilities` (e.g. `{"sampling": {}}`).
    pub fn initialize_with(&mut self, capabilities: Value) -> Value {
        let id = self.request(
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": capabilities,
                "clientInfo": {"name": "pi-repl-tests", "version": "0"}
            }),
        );
        let response = self.response(id, Duration::from_secs(120));
        self.notify("notifications/initialized", json!({}));
        response["result"].clone()
    }

    /// Calls `execute` and returns the tool result.
    pub fn execute(&mut self, code: &str) -> Value {
        let id = self.request(
            "tools/call",
            json!({"name": "execute", "arguments": {"code": code}}),
        );
        let response = self.response(id, Duration::from_secs(120));
        response
            .get("result")
            .cloned()
            .unwrap_or_else(|| panic!("tools/call failed: {response}"))
    }

    /// Closes stdin and waits (bounded) for the server to exit.
    pub fn close(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        self.stdin.take();
        super::exited(&mut self.child, timeout)
    }
}

impl Drop for McpClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The text of a tool result's first content block.
pub fn text(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The machine-readable outcome of a tool result (its `_meta`, never shown to the model).
pub fn outcome(result: &Value) -> &Value {
    &result["_meta"]["pi-repl/outcome"]
}
