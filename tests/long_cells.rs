//! Long cells that outlive their calls (issue 13), over the real `pi-repl mcp` binary and a real
//! kernel, in raw JSON-RPC (and once through the official Python SDK).
//!
//! No test waits for time: every long cell blocks on a gate file the test creates, so "still
//! running" is certain while the gate is shut. Each cell prints numbered lines (`A1`, `A2`, …);
//! a test joins the lines of every result it got for a cell and checks that they are all there,
//! once, in order. The only durations are the calls' own `wait_ms`, which decide when a call
//! answers, never whether a test passes.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::TestHome;
use common::mcp_client::{McpClient, outcome, text};
use serde_json::{Value, json};

/// How long a test waits for any one answer before it fails (a kernel may be starting).
const ANSWER: Duration = Duration::from_secs(120);

/// A file the test creates to let a cell go on.
struct Gate {
    path: PathBuf,
}

impl Gate {
    fn new(home: &TestHome, name: &str) -> Gate {
        Gate {
            path: home.path().join(format!("gate-{name}")),
        }
    }

    /// Python that blocks until the gate is open.
    fn wait(&self) -> String {
        format!(
            "while not os.path.exists({:?}): time.sleep(0.01)\n",
            self.path
        )
    }

    fn open(&self) {
        std::fs::write(&self.path, b"").unwrap();
    }
}

/// Python printing `<tag><i>` for each `i` in `range`, each line flushed at once.
fn lines(tag: &str, range: std::ops::RangeInclusive<u32>) -> String {
    format!(
        "for _i in range({}, {}): print(f'{tag}{{_i}}', flush=True)\n",
        range.start(),
        range.end() + 1
    )
}

/// The numbered lines `<tag><i>` a result's text shows, in order.
fn printed(result: &Value, tag: &str) -> Vec<String> {
    text(result)
        .lines()
        .filter(|line| {
            line.strip_prefix(tag)
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(str::to_string)
        .collect()
}

fn expected(tag: &str, range: std::ops::RangeInclusive<u32>) -> Vec<String> {
    range.map(|i| format!("{tag}{i}")).collect()
}

/// `pi-repl mcp <args>` in `home`, initialized; no default wait from the environment.
fn start(home: &TestHome, args: &[&str]) -> McpClient {
    let mut command = home.cli();
    command.arg("mcp").args(args).env_remove("PI_REPL_WAIT_MS");
    let mut client = McpClient::spawn(command);
    client.initialize();
    client
}

/// Sends `execute` with `arguments` (and `_meta` when given); returns the request id.
fn send(client: &mut McpClient, arguments: Value, meta: Option<Value>) -> i64 {
    let mut params = json!({"name": "execute", "arguments": arguments});
    if let Some(meta) = meta {
        params["_meta"] = meta;
    }
    client.request("tools/call", params)
}

/// The tool result of request `id`.
fn result_of(client: &mut McpClient, id: i64) -> Value {
    let response = client.response(id, ANSWER);
    response
        .get("result")
        .cloned()
        .unwrap_or_else(|| panic!("tools/call failed: {response}"))
}

/// Calls `execute` with `arguments`; the tool result.
fn call(client: &mut McpClient, arguments: Value) -> Value {
    let id = send(client, arguments, None);
    result_of(client, id)
}

/// Runs quick code, waiting for its end whatever the server's default wait.
fn quick(client: &mut McpClient, code: &str) -> Value {
    let result = call(client, json!({"code": code, "wait_ms": 600_000}));
    assert_ne!(status(&result), "running", "{result}");
    result
}

/// Calls `execute` with `arguments` that must be refused as invalid params; the error.
fn refused(client: &mut McpClient, arguments: Value) -> Value {
    let id = send(client, arguments, None);
    let response = client.response(id, ANSWER);
    let error = response
        .get("error")
        .cloned()
        .unwrap_or_else(|| panic!("not refused: {response}"));
    assert_eq!(error["code"], -32602, "{response}");
    error
}

fn status(result: &Value) -> &str {
    outcome(result)["status"].as_str().unwrap_or_default()
}

fn cell_of(result: &Value) -> u64 {
    outcome(result)["cell"]
        .as_u64()
        .unwrap_or_else(|| panic!("no cell number in {result}"))
}

/// Looks at cell `cell` (`wait_ms` 200) until its results so far show `want` lines of `tag`;
/// every look must find it `running` (the test holds its gate shut). `first` is the result of
/// the call that started it. Returns every result, `first` included.
fn running_until(
    client: &mut McpClient,
    cell: u64,
    first: Value,
    tag: &str,
    want: usize,
) -> Vec<Value> {
    let mut results = vec![first];
    let seen = |results: &[Value]| results.iter().map(|r| printed(r, tag).len()).sum::<usize>();
    let deadline = Instant::now() + ANSWER;
    while seen(&results) < want {
        assert!(
            Instant::now() < deadline,
            "cell {cell} never showed {want} lines: {results:?}"
        );
        results.push(call(client, json!({"cell": cell, "wait_ms": 200})));
    }
    for result in &results {
        if !printed(result, tag).is_empty() {
            assert_eq!(status(result), "running", "{result}");
        }
    }
    results
}

/// The directory of durable session `name` in `home`.
fn session_dir(home: &TestHome, name: &str) -> PathBuf {
    let state = home.home.root().join("state");
    std::fs::read_dir(&state)
        .unwrap()
        .flatten()
        .map(|entry| entry.path())
        .find(|path| {
            path.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(&format!("__{name}")))
        })
        .unwrap_or_else(|| panic!("no session `{name}` in {}", state.display()))
}

/// Waits until the session's record of `cell` says it ended: its outcome is kept by then.
fn wait_for_record_ended(dir: &Path, cell: u64) -> Value {
    let path = dir.join("cells").join(format!("{cell}.json"));
    let what = format!("the record of cell {cell} says it ended");
    common::eventually(&what, ANSWER, || {
        let record: Value = std::fs::read(&path)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default();
        (record["state"] == "ended").then_some(record)
    })
}

/// Issue 13: a cell longer than its call's `wait_ms` answers `running` with its output so far
/// and goes on; looks return only what is new; the last returns the rest and the outcome.
#[test]
fn a_long_cell_answers_running_and_is_collected_in_pieces_with_all_its_output_in_order() {
    let home = TestHome::new();
    let (first_gate, second_gate) = (Gate::new(&home, "1"), Gate::new(&home, "2"));
    let mut client = start(&home, &[]);
    quick(&mut client, "import os, time");
    let code = format!(
        "{}{}{}{}{}'all done'",
        lines("L", 1..=3),
        first_gate.wait(),
        lines("L", 4..=6),
        second_gate.wait(),
        lines("L", 7..=9)
    );
    let sent = Instant::now();
    let first = call(&mut client, json!({"code": code, "wait_ms": 1000}));
    eprintln!("answered `running` after {:?}", sent.elapsed());
    assert_eq!(status(&first), "running", "{first}");
    assert_eq!(first["isError"], false);
    let cell = cell_of(&first);
    assert!(outcome(&first)["elapsed_ms"].is_u64(), "{first}");
    assert!(first.get("structuredContent").is_none(), "{first}");
    let body = text(&first);
    assert!(
        body.starts_with(&format!(
            "[cell {cell} is still running (" // the elapsed time follows
        )),
        "{body}"
    );
    assert!(
        body.lines().last().unwrap().starts_with(&format!(
            "[next: execute {{\"cell\": {cell}}} waits up to 50 s and returns what it prints next"
        )),
        "{body}"
    );
    assert!(
        body.contains(&format!(
            "{{\"cell\": {cell}, \"interrupt\": true}} stops it"
        )),
        "{body}"
    );
    let mut results = running_until(&mut client, cell, first, "L", 3);

    first_gate.open();
    let before = results.len();
    let deadline = Instant::now() + ANSWER;
    while results.iter().map(|r| printed(r, "L").len()).sum::<usize>() < 6 {
        assert!(Instant::now() < deadline, "{results:?}");
        let look = call(&mut client, json!({"cell": cell, "wait_ms": 200}));
        assert_eq!(status(&look), "running", "the second gate is shut: {look}");
        assert_eq!(cell_of(&look), cell);
        results.push(look);
    }
    assert!(results.len() > before);

    second_gate.open();
    let last = call(&mut client, json!({"cell": cell}));
    assert_eq!(status(&last), "ok", "{last}");
    assert_eq!(last["isError"], false);
    assert_eq!(cell_of(&last), cell);
    assert_eq!(outcome(&last)["result"], "'all done'");
    let body = text(&last);
    assert!(
        body.starts_with(&format!("[cell {cell} ended: ok after ")),
        "{body}"
    );
    assert!(body.ends_with("'all done'"), "{body}");
    assert_eq!(
        printed(&last, "L"),
        expected("L", 7..=9),
        "only what is new"
    );
    results.push(last);

    let all: Vec<String> = results.iter().flat_map(|r| printed(r, "L")).collect();
    assert_eq!(all, expected("L", 1..=9), "every line once, in order");
}

/// Issue 13: code sent while a detached cell runs queues behind it, answers `queued` naming
/// the cell in front, runs after it and is collected like any other.
#[test]
fn code_sent_while_a_cell_runs_answers_queued_naming_the_blocker_and_runs_after_it() {
    let home = TestHome::new();
    let gate = Gate::new(&home, "a");
    let mut client = start(&home, &[]);
    quick(&mut client, "import os, time\norder = []");
    let code = format!(
        "{}{}order.append('A')\n{}",
        lines("A", 1..=1),
        gate.wait(),
        lines("A", 2..=2)
    );
    let first = call(&mut client, json!({"code": code, "wait_ms": 1000}));
    let blocker = cell_of(&first);
    running_until(&mut client, blocker, first, "A", 1);

    let queued = call(
        &mut client,
        json!({"code": "order.append('B')\nprint('B1')\n'B done'", "wait_ms": 1000}),
    );
    assert_eq!(status(&queued), "queued", "{queued}");
    assert_eq!(queued["isError"], false);
    let cell = cell_of(&queued);
    assert!(cell > blocker);
    assert_eq!(outcome(&queued)["blocked_by"], blocker);
    let body = text(&queued);
    assert!(
        body.starts_with(&format!(
            "[cell {cell} is queued behind cell {blocker}, which is still running"
        )),
        "{body}"
    );
    assert!(
        body.contains(&format!(
            "{{\"cell\": {cell}, \"interrupt\": true}} cancels it; {{\"cell\": {blocker}, \
             \"interrupt\": true}} stops the cell in front"
        )),
        "{body}"
    );
    assert!(printed(&queued, "B").is_empty(), "it has not run: {body}");

    gate.open();
    let collected = call(&mut client, json!({"cell": cell}));
    assert_eq!(status(&collected), "ok", "{collected}");
    assert_eq!(cell_of(&collected), cell);
    assert_eq!(printed(&collected, "B"), ["B1"]);
    assert!(text(&collected).ends_with("'B done'"), "{collected}");
    let front = call(&mut client, json!({"cell": blocker}));
    assert_eq!(status(&front), "ok", "{front}");
    assert_eq!(printed(&front, "A"), ["A2"]);
    assert_eq!(text(&quick(&mut client, "order")), "['A', 'B']");
}

/// Issue 13: `{"cell": N, "interrupt": true}` cancels a queued cell without running it, and
/// interrupts a running one with KeyboardInterrupt; the workspace survives.
#[test]
fn an_interrupt_by_cell_number_cancels_a_queued_cell_and_stops_a_running_one() {
    let home = TestHome::new();
    let gate = Gate::new(&home, "never");
    let marker = home.path().join("queued-cell-ran");
    let mut client = start(&home, &[]);
    quick(&mut client, "import os, time\nkept = 'alive'");
    let code = format!(
        "try:\n    print('R1', flush=True)\n    {}except KeyboardInterrupt:\n    \
         print('R2', flush=True)\n    raise\n",
        gate.wait()
    );
    let first = call(&mut client, json!({"code": code, "wait_ms": 1000}));
    let running = cell_of(&first);
    running_until(&mut client, running, first, "R", 1);
    let queued = call(
        &mut client,
        json!({"code": format!("open({marker:?}, 'w').close()\nqueued_ran = True"), "wait_ms": 1000}),
    );
    assert_eq!(status(&queued), "queued", "{queued}");
    let waiting = cell_of(&queued);

    let cancelled = call(&mut client, json!({"cell": waiting, "interrupt": true}));
    assert_eq!(status(&cancelled), "aborted", "{cancelled}");
    assert_eq!(cell_of(&cancelled), waiting);
    assert_eq!(cancelled["isError"], true);
    let body = text(&cancelled);
    assert!(
        body.starts_with(&format!("[interrupting cell {waiting}]\n")),
        "{body}"
    );
    assert!(body.contains("[aborted: "), "{body}");

    let stopped = call(&mut client, json!({"cell": running, "interrupt": true}));
    assert_eq!(status(&stopped), "aborted", "{stopped}");
    assert_eq!(cell_of(&stopped), running);
    assert_eq!(stopped["isError"], true);
    let body = text(&stopped);
    assert!(body.contains("KeyboardInterrupt"), "{body}");
    assert_eq!(printed(&stopped, "R"), ["R2"], "only what is new: {body}");

    let again = call(&mut client, json!({"cell": running, "interrupt": true}));
    assert!(
        text(&again).starts_with(&format!(
            "[cell {running} is not running; nothing to interrupt]"
        )),
        "{again}"
    );

    let kept = quick(&mut client, "kept, 'queued_ran' in globals()");
    assert_eq!(text(&kept), "('alive', False)");
    assert!(outcome(&kept).get("reset").is_none(), "{kept}");
    assert!(!marker.exists(), "the cancelled cell ran");
    assert!(!gate.path.exists());
}

/// Issue 13: a detached cell that ends while nobody asks is reported once, at the top of the
/// next result, with its output file; collecting it returns the rest of its outcome, and a
/// second collection says so and repeats it. The default wait comes from `PI_REPL_WAIT_MS`.
#[test]
fn a_cell_that_ends_while_nobody_asks_is_reported_once_and_collected_once() {
    let home = TestHome::new();
    let gate = Gate::new(&home, "a");
    let mut command = home.cli();
    command
        .args(["mcp", "--session", "notice"])
        .env("PI_REPL_WAIT_MS", "1000");
    let mut client = McpClient::spawn(command);
    client.initialize();
    quick(&mut client, "import os, time");
    let code = format!(
        "{}{}{}'finished'",
        lines("F", 1..=2),
        gate.wait(),
        lines("F", 3..=8)
    );
    // No `wait_ms`: the server's default, 1 s.
    let first = call(&mut client, json!({"code": code}));
    let cell = cell_of(&first);
    assert!(
        text(&first).contains("waits up to 1 s and returns"),
        "{first}"
    );
    let shown = running_until(&mut client, cell, first, "F", 2);

    gate.open();
    let record = wait_for_record_ended(&session_dir(&home, "notice"), cell);
    assert_eq!(record["status"], "ok", "{record}");

    let next = quick(&mut client, "'next'");
    let body = text(&next);
    let opening = format!("<cell_finished cell={cell} status=ok after=");
    assert!(body.starts_with(&opening), "{body}");
    let notice = &body[..body.find("</cell_finished>").expect("closed") + 16];
    assert!(body.ends_with("'next'"), "{body}");
    assert!(
        notice.contains("[… 1 earlier lines]\nF4\nF5\nF6\nF7\nF8\n'finished'"),
        "the tail of what was not shown: {notice}"
    );
    let file = notice
        .split("; full output: ")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .unwrap_or_else(|| panic!("no output file named: {notice}"));
    let whole = std::fs::read_to_string(file).unwrap();
    let whole_lines: Vec<&str> = whole.lines().collect();
    assert_eq!(
        whole_lines,
        ["F1", "F2", "F3", "F4", "F5", "F6", "F7", "F8", "'finished'"]
    );

    let later = quick(&mut client, "'later'");
    assert_eq!(text(&later), "'later'", "reported once");

    let collected = call(&mut client, json!({"cell": cell}));
    assert_eq!(status(&collected), "ok", "{collected}");
    assert_eq!(cell_of(&collected), cell);
    let body = text(&collected);
    assert!(
        body.starts_with(&format!("[cell {cell} ended: ok after ")),
        "{body}"
    );
    assert!(body.contains(file), "names the output file: {body}");
    assert!(body.ends_with("'finished'"), "{body}");
    let all: Vec<String> = shown
        .iter()
        .chain([&collected])
        .flat_map(|r| printed(r, "F"))
        .collect();
    assert_eq!(all, expected("F", 1..=8));

    let repeat = call(&mut client, json!({"cell": cell}));
    let body = text(&repeat);
    assert!(
        body.starts_with(&format!("[cell {cell} ended earlier (ok after ")),
        "{body}"
    );
    assert!(body.contains("was already returned"), "{body}");
    assert_eq!(printed(&repeat, "F"), expected("F", 1..=8), "whole again");
    assert!(body.ends_with("'finished'"), "{body}");
}

/// Issue 13: malformed arguments are invalid params with a message for the model; a look at a
/// cell that does not exist names the cells there are.
#[test]
fn bad_arguments_are_refused_with_messages_that_say_what_to_send() {
    let home = TestHome::new();
    let mut client = start(&home, &[]);
    let before_any = call(&mut client, json!({"cell": 1}));
    assert_eq!(before_any["isError"], true);
    assert!(
        text(&before_any).starts_with(
            "error: there is no cell 1 in this session (no cell has run yet); {\"cell\": N} \
             takes the number of a cell whose call answered `running` or `queued`"
        ),
        "{before_any}"
    );
    let both = refused(&mut client, json!({"code": "1", "cell": 1}));
    assert!(
        both["message"].as_str().unwrap().contains("not both"),
        "{both}"
    );
    let zero = refused(&mut client, json!({"cell": 0}));
    assert!(
        zero["message"].as_str().unwrap().contains("cell number"),
        "{zero}"
    );
    let lone = refused(&mut client, json!({"code": "1", "interrupt": true}));
    assert!(
        lone["message"]
            .as_str()
            .unwrap()
            .contains("goes with `cell`"),
        "{lone}"
    );
    for wait in [json!(-1), json!(2.5), json!("10")] {
        refused(&mut client, json!({"code": "1", "wait_ms": wait}));
    }
    let bounded = refused(&mut client, json!({"cell": 1, "timeout_ms": 10}));
    assert!(
        bounded["message"].as_str().unwrap().contains("interrupt"),
        "{bounded}"
    );

    quick(&mut client, "a = 1");
    let last = cell_of(&quick(&mut client, "b = 2"));
    let unknown = call(&mut client, json!({"cell": 99}));
    assert_eq!(unknown["isError"], true);
    assert!(
        text(&unknown).starts_with(&format!(
            "error: there is no cell 99 in this session (cells so far: 1 to {last})"
        )),
        "{unknown}"
    );
    let interrupt_unknown = call(&mut client, json!({"cell": 99, "interrupt": true}));
    assert!(
        text(&interrupt_unknown).starts_with("[cell 99 is not running; nothing to interrupt]"),
        "{interrupt_unknown}"
    );
    // A cell that ended within its own call was answered there: the error says so, rather
    // than that the cell does not exist.
    let answered = call(&mut client, json!({"cell": last}));
    assert_eq!(answered["isError"], true, "{answered}");
    assert!(
        text(&answered).starts_with(&format!(
            "error: cell {last} has nothing left to look at: its outcome was returned by its own \
             call"
        )),
        "{answered}"
    );
}

/// Issue 13: a malformed default wait stops the server at start with a message naming it.
#[test]
fn a_malformed_default_wait_is_refused_at_start() {
    let home = TestHome::new();
    let refuse = |flag: Option<&str>, env: Option<&str>| {
        let mut command = home.cli();
        command.arg("mcp").env_remove("PI_REPL_WAIT_MS");
        if let Some(flag) = flag {
            // `=` keeps a value like `-5` from reading as a flag.
            command.arg(format!("--wait-ms={flag}"));
        }
        if let Some(env) = env {
            command.env("PI_REPL_WAIT_MS", env);
        }
        let output = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        assert!(!output.status.success(), "accepted {flag:?} {env:?}");
        assert!(output.stdout.is_empty(), "nothing on the protocol channel");
        String::from_utf8_lossy(&output.stderr).to_string()
    };
    let flag = refuse(Some("soon"), None);
    assert!(
        flag.contains(
            "invalid value \"soon\" for --wait-ms: expected a whole number of milliseconds, \
             or `end`"
        ),
        "{flag}"
    );
    assert!(flag.contains("hint: pass it like `--wait-ms "), "{flag}");
    let negative = refuse(Some("-5"), None);
    assert!(negative.contains("--wait-ms"), "{negative}");
    let env = refuse(None, Some("1.5s"));
    assert!(
        env.contains(
            "invalid value \"1.5s\" for PI_REPL_WAIT_MS (the variable of --wait-ms): expected a \
             whole number of milliseconds, or `end`"
        ),
        "{env}"
    );
    assert!(env.contains("hint: set it like `PI_REPL_WAIT_MS="), "{env}");
}

/// Issue 13: `--wait-ms end` makes every call wait for its cell's end, however long, and wins
/// over `PI_REPL_WAIT_MS`: the call below outlasts more heartbeats than the environment's 1 s
/// wait holds (the cell cannot end before the gate opens), and its one answer is the outcome.
#[test]
fn with_wait_ms_end_a_call_never_answers_running() {
    let home = TestHome::new();
    let gate = Gate::new(&home, "end");
    let mut command = home.cli();
    command
        .args(["mcp", "--wait-ms", "end"])
        .env("PI_REPL_WAIT_MS", "1000")
        .env("PI_REPL_HEARTBEAT_MS", "300");
    let mut client = McpClient::spawn(command);
    client.initialize();
    let listed = client.request("tools/list", json!({}));
    let listed = client.response(listed, ANSWER);
    let description = listed["result"]["tools"][0]["description"]
        .as_str()
        .unwrap();
    assert!(!description.contains("A call waits up to"), "{description}");
    client.execute("import os, time");

    let code = format!("{}{}{}", lines("E", 1..=1), gate.wait(), lines("E", 2..=2));
    let id = send(
        &mut client,
        json!({"code": code}),
        Some(json!({"progressToken": "e"})),
    );
    // Heartbeats come every 300 ms once the call has run 250 ms: eight take over 2 s, twice
    // the environment's wait, which would have answered `running` after the second.
    let mut heartbeats = 0;
    while heartbeats < 8 {
        let message = client.next_message(ANSWER);
        assert_ne!(
            message.get("id"),
            Some(&json!(id)),
            "answered early: {message}"
        );
        if message["method"] == "notifications/progress" && message["params"]["message"].is_null() {
            heartbeats += 1;
        }
    }
    gate.open();
    let result = result_of(&mut client, id);
    assert_eq!(status(&result), "ok", "{result}");
    assert_eq!(text(&result), "E1\nE2");
}

/// Issue 13: a durable session's cell still running when its server stops is reported by the
/// next server as lost, once; numbering goes on after it, in tracebacks too.
#[test]
fn a_cell_running_when_the_server_stops_is_reported_lost_by_the_next_server() {
    let home = TestHome::new();
    let gate = Gate::new(&home, "never");
    let mut first = start(&home, &["--session", "lost"]);
    quick(&mut first, "import os, time");
    let code = format!("{}{}", lines("G", 1..=2), gate.wait());
    let started = call(&mut first, json!({"code": code, "wait_ms": 1000}));
    let lost = cell_of(&started);
    running_until(&mut first, lost, started, "G", 2);
    let queued = call(
        &mut first,
        json!({"code": "never_set = 1", "wait_ms": 1000}),
    );
    assert_eq!(status(&queued), "queued", "{queued}");
    let never_ran = cell_of(&queued);
    // The stop aborts the running cell: however far this server gets with that before it
    // exits, the next one must read both cells as lost.
    let closed = Instant::now();
    let status_code = first
        .close(ANSWER)
        .expect("the server exits with stdin closed");
    assert!(status_code.success(), "{status_code}");
    eprintln!("exited {:?} after stdin closed", closed.elapsed());

    let mut second = start(&home, &["--session", "lost"]);
    let next = quick(&mut second, "1/0");
    let number = cell_of(&next);
    assert!(
        number > never_ran,
        "cell {number} after the lost {never_ran}"
    );
    let body = text(&next);
    assert!(
        body.starts_with(&format!("<cell_finished cell={lost} status=lost>\n")),
        "{body}"
    );
    assert!(
        body.contains(&format!("pi-repl stopped while cell {lost} was running")),
        "{body}"
    );
    assert!(
        body.contains(&format!(
            "[pi-repl stopped while cell {never_ran} was queued"
        )),
        "{body}"
    );
    assert!(body.contains("G1\nG2"), "its output as last seen: {body}");
    assert!(body.contains(&format!("Cell In[{number}]")), "{body}");
    let after = quick(&mut second, "'never_set' in globals()");
    assert_eq!(text(&after), "False", "reported once");
    assert_eq!(cell_of(&after), number + 1);

    let looked = call(&mut second, json!({"cell": lost}));
    assert_eq!(looked["isError"], true, "{looked}");
    let body = text(&looked);
    // How long it ran before it was lost is not known: no made-up duration.
    assert!(
        body.starts_with(&format!("[cell {lost} ended: lost]\n")),
        "{body}"
    );
    assert!(
        body.contains(&format!("pi-repl stopped while cell {lost} was running")),
        "{body}"
    );
}

/// Issue 13: a durable session's cell that ended uncollected before its server was stopped
/// (SIGTERM) is reported by the next server and collected there.
#[test]
fn a_cell_that_ended_uncollected_before_sigterm_is_reported_and_collected_by_the_next_server() {
    let home = TestHome::new();
    let gate = Gate::new(&home, "a");
    let mut first = start(&home, &["--session", "kept"]);
    quick(&mut first, "import os, time");
    let code = format!(
        "{}{}{}'kept result'",
        lines("K", 1..=1),
        gate.wait(),
        lines("K", 2..=3)
    );
    let started = call(&mut first, json!({"code": code, "wait_ms": 1000}));
    let cell = cell_of(&started);
    running_until(&mut first, cell, started, "K", 1);
    gate.open();
    wait_for_record_ended(&session_dir(&home, "kept"), cell);
    let pid = nix::unistd::Pid::from_raw(first.child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    common::exited(&mut first.child, ANSWER).expect("the server exited on SIGTERM");

    let mut second = start(&home, &["--session", "kept"]);
    let next = quick(&mut second, "'next'");
    assert!(cell_of(&next) > cell);
    let body = text(&next);
    assert!(
        body.starts_with(&format!("<cell_finished cell={cell} status=ok")),
        "{body}"
    );
    assert!(body.contains("K3\n'kept result'"), "{body}");
    // It ran for more than the first call's 1 s wait (it was still running then).
    assert!(
        !body.contains(" after=0 ms>"),
        "its recorded duration: {body}"
    );
    let collected = call(&mut second, json!({"cell": cell}));
    assert_eq!(collected["isError"], false, "{collected}");
    assert_eq!(status(&collected), "ok", "{collected}");
    assert_eq!(cell_of(&collected), cell);
    let body = text(&collected);
    assert!(body.contains("K2\nK3"), "{body}");
    assert!(body.ends_with("'kept result'"), "{body}");
    let later = quick(&mut second, "'later'");
    assert_eq!(text(&later), "'later'", "reported once");
}

/// Issue 13: cancelling (`notifications/cancelled`) the call that started a cell aborts the
/// cell; cancelling a look only ends the look, and the cell runs on. rmcp drops the response
/// of a cancelled request, so neither takes a notice or output that later results must show.
#[test]
fn cancelling_the_starting_call_aborts_the_cell_but_cancelling_a_look_does_not() {
    let home = TestHome::new();
    let never = Gate::new(&home, "never");
    let interrupted = home.path().join("interrupted");
    let mut client = start(&home, &["--session", "cancel"]);
    quick(&mut client, "import os, time\nkept = 'alive'");
    // A detached cell that ends unreported: its notice is due with the next delivered result.
    let unreported = Gate::new(&home, "unreported");
    let first = call(
        &mut client,
        json!({"code": format!("{}{}'X done'", lines("X", 1..=1), unreported.wait()), "wait_ms": 1000}),
    );
    let detached = cell_of(&first);
    running_until(&mut client, detached, first, "X", 1);
    unreported.open();
    wait_for_record_ended(&session_dir(&home, "cancel"), detached);

    // The call that started the cell, cancelled once the cell is surely running.
    let code = format!(
        "try:\n    print('C1', flush=True)\n    {}    finished = True\n\
         except KeyboardInterrupt:\n    open({interrupted:?}, 'w').close()\n    raise\n",
        never.wait()
    );
    let id = send(
        &mut client,
        json!({"code": code, "wait_ms": 600_000}),
        Some(json!({"progressToken": "start"})),
    );
    wait_for_progress(&mut client, "start", "C1");
    client.notify(
        "notifications/cancelled",
        json!({"requestId": id, "reason": "test"}),
    );
    // Runs after the cancelled cell ended, which it can only do by the interrupt.
    let after = quick(&mut client, "kept, 'finished' in globals()");
    let body = text(&after);
    assert!(
        body.starts_with(&format!("<cell_finished cell={detached} status=ok")),
        "the cancelled call's result, never delivered, did not take the notice: {body}"
    );
    assert!(body.ends_with("\n('alive', False)"), "{body}");
    assert!(interrupted.exists(), "the cell saw KeyboardInterrupt");
    assert!(outcome(&after).get("reset").is_none(), "{after}");

    // A look, cancelled once it is surely waiting (it streamed the cell's output).
    let (tick, end) = (Gate::new(&home, "tick"), Gate::new(&home, "end"));
    let code = format!(
        "{}{}{}{}{}'looked'",
        lines("D", 1..=1),
        tick.wait(),
        lines("D", 2..=2),
        end.wait(),
        lines("D", 3..=3)
    );
    let first = call(&mut client, json!({"code": code, "wait_ms": 1000}));
    let cell = cell_of(&first);
    let mut shown = running_until(&mut client, cell, first, "D", 1);
    let look = send(
        &mut client,
        json!({"cell": cell, "wait_ms": 600_000}),
        Some(json!({"progressToken": "look"})),
    );
    tick.open();
    wait_for_progress(&mut client, "look", "D2");
    client.notify(
        "notifications/cancelled",
        json!({"requestId": look, "reason": "test"}),
    );
    let still = call(&mut client, json!({"cell": cell, "wait_ms": 200}));
    assert_eq!(
        status(&still),
        "running",
        "the look's cancel left it running: {still}"
    );
    shown.push(still);
    end.open();
    let collected = call(&mut client, json!({"cell": cell}));
    assert_eq!(status(&collected), "ok", "{collected}");
    assert!(text(&collected).ends_with("'looked'"), "{collected}");
    shown.push(collected);
    // D2 was streamed to the cancelled look; a result that was never delivered showed nothing,
    // so D2 comes again, and nothing is missing.
    let all: Vec<String> = shown.iter().flat_map(|r| printed(r, "D")).collect();
    assert_eq!(all, expected("D", 1..=3), "{shown:?}");
}

/// Waits for a progress notification of `token` whose message contains `needle`.
fn wait_for_progress(client: &mut McpClient, token: &str, needle: &str) {
    loop {
        let message = client.next_message(ANSWER);
        let found = message["method"] == "notifications/progress"
            && message["params"]["progressToken"] == token
            && message["params"]["message"]
                .as_str()
                .is_some_and(|m| m.contains(needle));
        client.seen.push(message);
        if found {
            return;
        }
    }
}

/// Issue 13: the official MCP Python SDK (a client this project did not write) gets `running`
/// with `wait_ms` and collects the cell with `{"cell": N}`.
#[test]
fn the_official_python_sdk_gets_running_then_collects_the_cell() {
    let home = TestHome::new();
    let gate = Gate::new(&home, "sdk");
    let script = r#"
import asyncio, os, pathlib, sys
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

async def main():
    binary, gate = sys.argv[1], sys.argv[2]
    params = StdioServerParameters(command=binary, args=["mcp"], env=dict(os.environ))
    code = (
        "import os, time\nprint('S1', flush=True)\n"
        f"while not os.path.exists({gate!r}): time.sleep(0.01)\n"
        "print('S2')\n'sdk done'"
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            await session.call_tool("execute", {"code": "1"})
            first = await session.call_tool("execute", {"code": code, "wait_ms": 1000})
            meta = first.meta["pi-repl/outcome"]
            print("first:", meta["status"], first.is_error, meta["cell"])
            print("first text:", repr(first.content[0].text))
            pathlib.Path(gate).touch()
            second = await session.call_tool("execute", {"cell": meta["cell"]})
            meta2 = second.meta["pi-repl/outcome"]
            print("second:", meta2["status"], second.is_error, meta2["cell"])
            print("second text:", repr(second.content[0].text))

asyncio.run(main())
"#;
    let output = std::process::Command::new(common::test_python())
        .arg("-c")
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_pi-repl"))
        .arg(&gate.path)
        .env("PI_REPL_HOME", home.home.root())
        .env("PI_REPL_PYTHON", common::test_python())
        .env_remove("PI_REPL_WAIT_MS")
        .current_dir(home.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let line = |prefix: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no `{prefix}` in {stdout}"))
            .to_string()
    };
    let first = line("first: ");
    assert!(first.starts_with("running False "), "{stdout}");
    let cell = first.rsplit(' ').next().unwrap();
    assert_eq!(line("second: "), format!("ok False {cell}"), "{stdout}");
    let first_text = line("first text: ");
    let second_text = line("second text: ");
    assert!(
        first_text.starts_with(&format!("'[cell {cell} is still running")),
        "{stdout}"
    );
    assert!(
        second_text.starts_with(&format!("\"[cell {cell} ended: ok after "))
            || second_text.starts_with(&format!("'[cell {cell} ended: ok after ")),
        "{stdout}"
    );
    assert!(second_text.contains("S2\\n"), "{stdout}");
    // S1 is in exactly one of the two results.
    let s1 = [&first_text, &second_text]
        .iter()
        .filter(|t| t.contains("\\nS1\\n"))
        .count();
    assert_eq!(s1, 1, "{stdout}");
}

/// Issue 13: when the workspace was rebuilt before a long cell started, the first answer that
/// speaks of the cell says so (`running`, or its `<cell_finished>` notice), and the collection
/// does not say it again. Whichever answer comes first, the reset is told exactly once.
#[test]
fn a_rebuilt_workspace_is_told_with_the_first_answer_about_a_long_cell_once() {
    let home = TestHome::new();
    let mut client = start(&home, &["--session", "reset"]);
    quick(&mut client, "import os, time");
    let resets = |results: &[&Value]| {
        results
            .iter()
            .map(|r| text(r).matches("<repl_engine_reset>").count())
            .sum::<usize>()
    };

    // Answered `running`: the notice comes first in the first such answer.
    assert_eq!(status(&quick(&mut client, "os._exit(3)")), "died");
    let gate = Gate::new(&home, "running");
    let code = format!(
        "import os, time\n{}{}40 + 2",
        lines("R", 1..=1),
        gate.wait()
    );
    let first = call(&mut client, json!({"code": code, "wait_ms": 1000}));
    let cell = cell_of(&first);
    let shown = running_until(&mut client, cell, first, "R", 1);
    // The first answer may still find it queued while the new kernel starts.
    let first_running = shown
        .iter()
        .find(|r| status(r) == "running")
        .expect("answered running");
    assert!(
        text(first_running).starts_with("<repl_engine_reset>\n"),
        "{first_running}"
    );
    assert!(
        outcome(first_running)["reset"]["reason"].is_string(),
        "its machine-readable twin: {first_running}"
    );
    gate.open();
    let collected = call(&mut client, json!({"cell": cell}));
    assert_eq!(text(&collected).lines().last(), Some("42"), "{collected}");
    let mut all: Vec<&Value> = shown.iter().collect();
    all.push(&collected);
    assert_eq!(resets(&all), 1, "{all:?}");

    // Answered at once (queued or running, as the new kernel's start goes), then ended while
    // nobody asked: told once across its answer, its notice and its collection.
    assert_eq!(status(&quick(&mut client, "os._exit(3)")), "died");
    let gate = Gate::new(&home, "notice");
    let code = format!("import os, time\n{}40 + 3", gate.wait());
    let first = call(&mut client, json!({"code": code, "wait_ms": 0}));
    let cell = cell_of(&first);
    assert!(matches!(status(&first), "queued" | "running"), "{first}");
    gate.open();
    wait_for_record_ended(&session_dir(&home, "reset"), cell);
    let next = quick(&mut client, "'next'");
    assert!(
        text(&next).contains(&format!("<cell_finished cell={cell} status=ok")),
        "{next}"
    );
    let collected = call(&mut client, json!({"cell": cell}));
    assert_eq!(text(&collected).lines().last(), Some("43"), "{collected}");
    assert_eq!(
        resets(&[&first, &next, &collected]),
        1,
        "{first}\n{next}\n{collected}"
    );
}
