//! Issue 25, rewind: `execute {"rewind": N}` returns a durable workspace to its state right after
//! answered cell N, over real MCP against a real kernel, with a ~400 MB value, after a restart,
//! and back again (`docs/rewind.md`).

mod common;

use std::time::Duration;

use common::TestHome;
use common::mcp_client::{McpClient, outcome, text};
use serde_json::{Value, json};

fn start(home: &TestHome, session: &str) -> McpClient {
    let mut command = home.cli();
    command.args(["mcp", "--session", session]);
    let mut client = McpClient::spawn(command);
    client.initialize();
    client
}

fn rewind(client: &mut McpClient, to: u64) -> Value {
    let id = client.request(
        "tools/call",
        json!({"name": "execute", "arguments": {"rewind": to}}),
    );
    let response = client.response(id, Duration::from_secs(300));
    response
        .get("result")
        .cloned()
        .unwrap_or_else(|| panic!("tools/call failed: {response}"))
}

/// The values the test reads back after each rewind, as one line.
const LOOK: &str = "(len(big), big[0], big[-1], small, 'later' in globals())";

#[test]
fn a_rewind_returns_a_400_mb_workspace_to_an_earlier_cell_after_a_restart_and_back() {
    let home = TestHome::new();
    let mut first = start(&home, "rewound");
    // Cell 1: a 400 MB value and a small one.
    let one = first.execute("big = bytearray(400 << 20); big[0] = 1; small = 'one'");
    assert_eq!(outcome(&one)["status"], "ok", "{one}");
    // Cell 2 changes the large value in place, rebinds the small one and binds a new name.
    first.execute("big[0] = 2; big[-1] = 7; small = 'two'; later = [1, 2]");
    assert!(
        first
            .close(Duration::from_secs(120))
            .is_some_and(|s| s.success())
    );

    let mut second = start(&home, "rewound");
    let listed = home
        .cli()
        .args(["sessions", "show", "rewound"])
        .output()
        .expect("pi-repl sessions show");
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.contains("states a rewind can return to: after cells 1-2"),
        "{listed}"
    );

    // Cell 3: the rewind.
    let back = rewind(&mut second, 1);
    let notice = text(&back);
    assert_eq!(outcome(&back)["status"], "ok", "{back}");
    assert_eq!(outcome(&back)["cell"], 3, "numbering goes on");
    assert!(
        notice.contains("Rewound the workspace to its state right after cell 1"),
        "{notice}"
    );
    assert!(
        notice.contains("Restored as they were then: big, small."),
        "{notice}"
    );
    assert!(
        notice.contains("Removed (bound after cell 1): later."),
        "{notice}"
    );
    assert!(notice.contains("Files, processes"), "{notice}");
    assert_eq!(
        text(&second.execute(LOOK)),
        "(419430400, 1, 0, 'one', False)"
    );

    // Cell 5: back to the state after cell 2, which the rewind kept.
    let forth = rewind(&mut second, 2);
    assert_eq!(outcome(&forth)["status"], "ok", "{forth}");
    assert_eq!(
        text(&second.execute(LOOK)),
        "(419430400, 2, 7, 'two', True)"
    );

    // And to the rewind's own state (cell 3), after another restart.
    assert!(
        second
            .close(Duration::from_secs(120))
            .is_some_and(|s| s.success())
    );
    let mut third = start(&home, "rewound");
    let again = rewind(&mut third, 3);
    assert_eq!(outcome(&again)["status"], "ok", "{again}");
    assert_eq!(
        text(&third.execute(LOOK)),
        "(419430400, 1, 0, 'one', False)"
    );
}

#[test]
fn a_rewind_to_a_state_not_kept_changes_nothing_and_names_the_kept_ones() {
    let home = TestHome::new();
    let mut client = start(&home, "refused");
    client.execute("x = 1");
    client.execute("x = 2");
    let refused = rewind(&mut client, 9);
    assert_eq!(refused["isError"], true, "{refused}");
    let body = text(&refused);
    assert!(
        body.contains("error: the state after cell 9 is not kept"),
        "{body}"
    );
    assert!(
        body.contains("hint: states kept: after cells 1-2"),
        "{body}"
    );
    assert_eq!(text(&client.execute("x")), "2");
}

#[test]
fn an_ephemeral_workspace_says_it_keeps_no_states() {
    let home = TestHome::new();
    let mut command = home.cli();
    command.arg("mcp");
    let mut client = McpClient::spawn(command);
    client.initialize();
    client.execute("x = 1");
    let refused = rewind(&mut client, 1);
    assert_eq!(refused["isError"], true, "{refused}");
    let body = text(&refused);
    assert!(
        body.contains("error: this workspace is not durable"),
        "{body}"
    );
    assert!(body.contains("hint:"), "{body}");
}

#[test]
fn a_malformed_rewind_is_refused_as_invalid_params() {
    let home = TestHome::new();
    let mut client = start(&home, "malformed");
    let id = client.request(
        "tools/call",
        json!({"name": "execute", "arguments": {"rewind": 1, "code": "1"}}),
    );
    let response = client.response(id, Duration::from_secs(60));
    assert_eq!(response["error"]["code"], -32602, "{response}");
    assert!(
        response["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`rewind` goes alone"),
        "{response}"
    );
}

/// Durability (issue 21's bar, kept by issue 25): the host SIGKILLed right after a rewind's
/// answer loses nothing. The next start revives the rewound state, names no lost cell, and
/// can still return to the state before the rewind.
#[test]
fn a_host_killed_right_after_a_rewind_revives_the_rewound_state_and_keeps_the_one_before() {
    let home = TestHome::new();
    let mut first = start(&home, "killed");
    first.execute("items = ['one']");
    first.execute("items.append('two'); extra = 2");
    let back = rewind(&mut first, 1);
    assert_eq!(outcome(&back)["status"], "ok", "{back}");
    first.child.kill().expect("SIGKILL the host");
    first.child.wait().expect("reaped");

    let mut second = start(&home, "killed");
    let revived = second.execute("(items, 'extra' in globals())");
    let body = text(&revived);
    assert!(body.ends_with("(['one'], False)"), "{body}");
    assert!(!body.contains("lost"), "no answered cell is lost: {body}");
    let before = rewind(&mut second, 2);
    assert_eq!(outcome(&before)["status"], "ok", "{before}");
    assert!(
        text(&second.execute("(items, extra)")).ends_with("(['one', 'two'], 2)"),
        "the state before the rewind is kept"
    );
}

#[test]
fn a_stopped_session_rewinds_from_the_command_line_then_runs_its_cells() {
    // `pi-repl exec --session S --rewind N [CODE…]`: no server runs the session; the rewind is
    // the first cell of a one-off run, and the cells after it see the rewound workspace. The
    // next server of the session revives the rewound state.
    let home = TestHome::new();
    let exec = |args: &[&str]| {
        let output = home
            .cli()
            .args(["exec", "--session", "undo"])
            .args(args)
            .output()
            .expect("exec");
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        (output.status.code(), stdout, stderr)
    };
    let (code, _, stderr) = exec(&["x = 'first'", "x = 'second'; y = 2"]);
    assert_eq!(code, Some(0), "{stderr}");
    let (code, stdout, stderr) = exec(&["--rewind", "1", "print(x, 'y' in globals())"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.contains("Rewound the workspace to its state right after cell 1"),
        "{stdout}"
    );
    assert!(
        stdout.contains("Removed (bound after cell 1): y."),
        "{stdout}"
    );
    assert!(stdout.trim_end().ends_with("first False"), "{stdout}");
    let mut client = start(&home, "undo");
    let back = text(&client.execute("(x, 'y' in globals())"));
    assert!(back.contains("Revived from the snapshot"), "{back}");
    assert!(back.ends_with("('first', False)"), "{back}");
    drop(client);

    let (code, _, stderr) = exec(&["--rewind", "99"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("the state after cell 99 is not kept"),
        "{stderr}"
    );
    let ephemeral = home
        .cli()
        .args(["exec", "--rewind", "1"])
        .output()
        .expect("exec");
    assert_eq!(ephemeral.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&ephemeral.stderr);
    assert!(
        stderr.contains("--rewind needs a durable session"),
        "{stderr}"
    );
    assert!(stderr.contains("hint: name the session"), "{stderr}");
    let nothing = home.cli().arg("exec").output().expect("exec");
    assert_eq!(nothing.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&nothing.stderr);
    assert!(stderr.contains("error: nothing to run"), "{stderr}");
}
