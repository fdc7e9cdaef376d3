//! Issue 21, the stop matrix: once a result has reached the client, the state it reports is kept
//! whatever happens to the host, the kernel or the save afterwards; when a save is lost anyway,
//! the next start names the answered cell.
//!
//! Each case runs the real `pi-repl mcp --session` against a real kernel, answers a last cell
//! that changes a 24 MB buffer and binds `last`, stops something the way a client or a fault
//! would, and starts a new server of the same session, whose first result is read:
//!
//! - host SIGINT, SIGTERM, SIGKILL 0, 10 and 100 ms after the answer, Claude Code's escalation
//!   (SIGINT, SIGTERM 100 ms later, SIGKILL 400 ms after that) and Codex's (SIGTERM, SIGKILL
//!   9 ms later): `last` comes back;
//! - a save held mid-write (a binding whose pickling waits for a file) outlives the host killed
//!   by SIGKILL (with and without a PID namespace), the kernel killed then the host, and a
//!   SIGTERM while a later cell runs: the new start waits for it, and `last` comes back;
//! - the save child SIGKILLed, or stopped (SIGSTOP) and never resumed, then the host SIGKILLed;
//!   a full disk: `last` is lost and the first result names its cell;
//! - the save child stopped while the host lives: the next results say so within seconds, and
//!   the save is done again.
//!
//! The pauses before a signal are the scenario (where in the save the stop lands), never a wait
//! for something to happen; every wait is for an event, bounded.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::TestHome;
use common::mcp_client::{McpClient, outcome, text};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// The first cell: the data, and a binding whose pickling waits while `<hold>` exists.
const SETUP: &str = r#"import os, time
HOLD = os.environ["STOP_MATRIX_HOLD"]
class Held:
    def __reduce__(self):
        while os.path.exists(HOLD):
            time.sleep(0.01)
        return (Held, ())
held = Held()
data = bytearray(os.urandom(24_000_000))
last = 'setup'"#;

/// The last answered cell: its state is what must come back.
const LAST: &str = "data[:6] = b'stop-m'\nheld = Held()\nlast = 'answered'";

/// What the new server's first cell asks.
const PROBE: &str = "last, bytes(data[:6])";

struct Case {
    home: TestHome,
    hold: PathBuf,
    extra_env: Vec<(&'static str, &'static str)>,
}

impl Case {
    fn new() -> Case {
        let home = TestHome::new();
        let hold = home.path().join("hold");
        Case {
            home,
            hold,
            extra_env: Vec::new(),
        }
    }

    fn server(&self) -> McpClient {
        let mut command = self.home.cli();
        command
            .env("STOP_MATRIX_HOLD", &self.hold)
            .args(["mcp", "--session", "matrix"]);
        for (name, value) in &self.extra_env {
            command.env(name, value);
        }
        let mut client = McpClient::spawn(command);
        client.initialize();
        client
    }

    /// A server that answered `SETUP`, with its snapshot committed, and then `LAST` (its save
    /// held while `held` is true).
    fn answered(&self, held: bool) -> McpClient {
        let mut client = self.server();
        let setup = client.execute(SETUP);
        assert_eq!(outcome(&setup)["status"], "ok", "{}", text(&setup));
        self.wait_committed("setup");
        // The setup's save child exits once committed: then the only save child is the one
        // the last cell forks (the held one, which `held_child` must find, not this one).
        wait_for(
            "the setup's save child to exit",
            Duration::from_secs(30),
            || self.save_children().is_empty(),
        );
        if held {
            std::fs::write(&self.hold, b"").unwrap();
        }
        let last = client.execute(LAST);
        assert_eq!(outcome(&last)["status"], "ok", "{}", text(&last));
        client
    }

    fn snapshot_dir(&self) -> PathBuf {
        let session = std::fs::read_dir(self.home.home.state())
            .unwrap()
            .flatten()
            .find(|entry| entry.path().is_dir())
            .expect("the session's directory");
        session.path().join("snapshot")
    }

    /// Waits until the committed manifest holds `last` = `value` (its blob is not read: the
    /// manifest's generation moving past the first commit is what is waited for).
    fn wait_committed(&self, _value: &str) {
        let manifest = self.snapshot_dir().join("manifest.json");
        wait_for("the first commit", Duration::from_secs(60), || {
            std::fs::read_to_string(&manifest)
                .ok()
                .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
                .is_some_and(|m| m["bindings"].get("last").is_some())
        });
    }

    /// The save children holding this session's save lock (named `pi-repl-save`: the kernel
    /// holds the lock file open too for a moment around each fork, and is no save child).
    fn save_children(&self) -> Vec<i32> {
        let lock = std::fs::canonicalize(self.snapshot_dir().join("save.lock")).unwrap();
        let mut found = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue;
            };
            let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
                continue;
            };
            let named_save = std::fs::read_to_string(entry.path().join("comm"))
                .is_ok_and(|comm| comm.trim() == "pi-repl-save");
            if named_save
                && fds
                    .flatten()
                    .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|t| t == lock))
            {
                found.push(pid);
            }
        }
        found
    }

    /// The held save child, once it has the lock.
    fn held_child(&self) -> i32 {
        let mut child = None;
        wait_for("the held save child", Duration::from_secs(30), || {
            child = self.save_children().first().copied();
            child.is_some()
        });
        child.unwrap()
    }

    fn release(&self) {
        let _ = std::fs::remove_file(&self.hold);
    }

    /// The first result of a new server of the session.
    fn next_start(&self) -> String {
        let mut client = self.server();
        let body = text(&client.execute(PROBE));
        client.close(Duration::from_secs(30));
        body
    }
}

fn wait_for(what: &str, limit: Duration, done: impl FnMut() -> bool) {
    common::eventually(what, limit, done);
}

fn signal(pid: i32, signal: Signal) {
    // ESRCH: it is gone already, which is what the next signal would have done.
    let _ = kill(Pid::from_raw(pid), signal);
}

fn server_pid(client: &McpClient) -> i32 {
    client.child.id() as i32
}

/// Waits for the server to exit (bounded).
fn reaped(client: &mut McpClient) {
    common::exited(&mut client.child, Duration::from_secs(30)).expect("the server exited");
}

fn came_back(body: &str) {
    assert!(
        body.ends_with("('answered', b'stop-m')"),
        "the answered cell's state did not come back: {body}"
    );
    assert!(
        !body.contains("the changes made by"),
        "nothing answered is lost, so nothing is named: {body}"
    );
}

fn named_lost(body: &str) {
    assert!(
        body.contains("Not in the snapshot, so gone: the changes made by cell 2 (`data[:6]"),
        "the lost answered cell is not named: {body}"
    );
    assert!(body.contains("('setup', b"), "{body}");
}

/// Stops the host with `signals`, each after its pause from the answer.
fn stop_after_answer(signals: &[(u64, Signal)]) -> String {
    let case = Case::new();
    let mut client = case.answered(false);
    let pid = server_pid(&client);
    let answered = Instant::now();
    for &(at_ms, sig) in signals {
        let at = answered + Duration::from_millis(at_ms);
        // The workload: each signal at its moment, as a client's escalation sends them.
        std::thread::sleep(at.saturating_duration_since(Instant::now()));
        signal(pid, sig);
    }
    reaped(&mut client);
    case.next_start()
}

#[test]
fn a_host_stopped_by_any_signal_right_after_an_answer_keeps_it() {
    for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGKILL] {
        for at_ms in [0, 10, 100] {
            let body = stop_after_answer(&[(at_ms, sig)]);
            assert!(
                body.ends_with("('answered', b'stop-m')"),
                "{sig} {at_ms} ms after the answer: {body}"
            );
        }
    }
}

#[test]
fn claude_codes_and_codexs_stop_sequences_keep_the_last_answer() {
    let claude = [
        (0, Signal::SIGINT),
        (100, Signal::SIGTERM),
        (500, Signal::SIGKILL),
    ];
    came_back(&stop_after_answer(&claude));
    let codex = [(0, Signal::SIGTERM), (9, Signal::SIGKILL)];
    came_back(&stop_after_answer(&codex));
}

#[test]
fn a_save_held_mid_write_outlives_a_killed_host_and_is_waited_for() {
    a_save_held_mid_write_outlives_a_killed_host(Case::new());
}

/// The host is SIGKILLed while its save child is held mid-write: the child lives on, and once
/// released its commit is what the next start revives.
fn a_save_held_mid_write_outlives_a_killed_host(case: Case) {
    let mut client = case.answered(true);
    let child = case.held_child();
    signal(server_pid(&client), Signal::SIGKILL);
    reaped(&mut client);
    assert!(common::process_alive(child), "the save died with its host");
    case.release();
    came_back(&case.next_start());
}

/// Without a PID namespace (where user namespaces are refused) the save child is the host's to
/// adopt: the lifeline's sweep and the host's spare it all the same.
#[test]
fn without_a_namespace_a_save_held_mid_write_outlives_a_killed_host() {
    let mut case = Case::new();
    case.extra_env.push((
        "PI_REPL_NAMESPACE_UNAVAILABLE",
        "simulated for the stop matrix",
    ));
    a_save_held_mid_write_outlives_a_killed_host(case);
}

#[test]
fn a_kernel_killed_and_then_its_host_keep_the_answered_cell() {
    let case = Case::new();
    let mut client = case.answered(true);
    let kernel = common::host_pid(
        outcome(&client.execute(common::KERNEL_PID_CELL))["result"]
            .as_str()
            .unwrap(),
    );
    let child = case.held_child();
    signal(kernel, Signal::SIGKILL);
    assert!(common::wait_gone(kernel, 10.0), "the kernel did not die");
    signal(server_pid(&client), Signal::SIGKILL);
    reaped(&mut client);
    assert!(
        common::process_alive(child),
        "the save died with its kernel"
    );
    case.release();
    came_back(&case.next_start());
}

#[test]
fn a_sigterm_while_a_later_cell_runs_keeps_the_answered_cell() {
    let case = Case::new();
    let mut client = case.answered(true);
    client.request(
        "tools/call",
        json_call("import time\nprint('running', flush=True)\ntime.sleep(60)"),
    );
    // The running cell's first output: it is under way.
    wait_for("the later cell to start", Duration::from_secs(60), || {
        let message = client.next_message(Duration::from_secs(60));
        let seen = message.to_string().contains("running");
        client.seen.push(message);
        seen
    });
    signal(server_pid(&client), Signal::SIGTERM);
    reaped(&mut client);
    case.release();
    came_back(&case.next_start());
}

#[test]
fn a_killed_save_child_loses_the_answered_state_and_names_it() {
    let case = Case::new();
    let mut client = case.answered(true);
    let child = case.held_child();
    // The host is stopped first, so it cannot save again between the child's death and its own
    // (given that moment, it does, and the answered state comes back: a busy machine gave it
    // one). This pins the other outcome: nothing saved, and the loss named.
    let host = server_pid(&client);
    signal(host, Signal::SIGSTOP);
    signal(child, Signal::SIGKILL);
    assert!(common::wait_gone(child, 10.0));
    signal(host, Signal::SIGKILL);
    reaped(&mut client);
    case.release();
    named_lost(&case.next_start());
}

#[test]
fn a_stopped_save_child_left_by_a_killed_host_is_stopped_by_the_next_start_and_named() {
    let mut case = Case::new();
    // The next start waits for a save at most its limit (2 s) and a little more.
    case.extra_env
        .push(("PI_REPL_SNAPSHOT_CHILD_LIMIT_MS", "2000"));
    let mut client = case.answered(true);
    let child = case.held_child();
    signal(child, Signal::SIGSTOP);
    signal(server_pid(&client), Signal::SIGKILL);
    reaped(&mut client);
    let body = case.next_start();
    case.release();
    named_lost(&body);
    assert!(body.contains("was stopped"), "{body}");
    assert!(common::wait_gone(child, 10.0), "the stopped save was left");
}

#[test]
fn a_stopped_save_child_is_found_in_seconds_named_and_the_save_done_again() {
    let case = Case::new();
    let mut client = case.answered(true);
    let child = case.held_child();
    signal(child, Signal::SIGSTOP);
    let deadline = Instant::now() + Duration::from_secs(120);
    let notice = loop {
        let body = text(&client.execute("1 + 1"));
        if body.contains("could not be saved") {
            break body;
        }
        assert!(body.ends_with('2'), "{body}");
        assert!(Instant::now() < deadline, "the stopped save was never told");
    };
    assert!(notice.contains("was stopped"), "{notice}");
    assert!(
        common::wait_gone(child, 10.0),
        "the stopped save was not ended"
    );
    case.release();
    // Saved again: a host killed now keeps the answered cell.
    let manifest = case.snapshot_dir().join("manifest.json");
    wait_for("the save done again", Duration::from_secs(60), || {
        std::fs::read_to_string(&manifest).is_ok_and(|m| {
            m.contains("\"held\"") && {
                let value: serde_json::Value = serde_json::from_str(&m).unwrap_or_default();
                value["cells"]["through"].as_u64() >= Some(2)
            }
        })
    });
    signal(server_pid(&client), Signal::SIGKILL);
    reaped(&mut client);
    came_back(&case.next_start());
}

#[test]
fn a_full_disk_during_the_save_loses_the_answered_state_and_names_it() {
    let case = Case::new();
    let mut client = case.server();
    client.execute(SETUP);
    case.wait_committed("setup");
    // Every blob write fails from now on, as on a full disk.
    let blobs = case.snapshot_dir().join("blobs");
    std::fs::remove_dir_all(&blobs).unwrap();
    std::fs::write(&blobs, b"not a directory").unwrap();
    client.execute(LAST);
    // The failed save is told (the next result says the workspace could not be saved).
    let deadline = Instant::now() + Duration::from_secs(120);
    let told = loop {
        let body = text(&client.execute("1 + 1"));
        if body.contains("could not be saved") {
            break body;
        }
        assert!(Instant::now() < deadline, "the failed save was never told");
    };
    assert!(
        told.contains("Not saved yet: the changes made by cell 2"),
        "{told}"
    );
    signal(server_pid(&client), Signal::SIGKILL);
    reaped(&mut client);
    let body = case.next_start();
    assert!(
        body.contains("the changes made by cell 2 (`data[:6]"),
        "the lost answered cell is not named: {body}"
    );
}

fn json_call(code: &str) -> serde_json::Value {
    serde_json::json!({"name": "execute", "arguments": {"code": code}})
}
