//! Sub-agents spawned from a cell (`spawn_agent`): the real `pi-repl mcp` binary, real kernels
//! (the parent's and each child's), real `pi-repl agent` child processes, and this test as the
//! MCP client answering every model request through `sampling/createMessage` as a scripted
//! model (the child's requests reach the client through the parent host).

mod common;

use std::time::Duration;

use common::TestHome;
use common::mcp_client::{McpClient, text};
use serde_json::{Value, json};

const LONG: Duration = Duration::from_secs(180);

fn server(home: &TestHome, session: Option<&str>, env: &[(&str, &str)]) -> McpClient {
    let mut command = home.cli();
    // Calls wait for their cells however long the children take.
    command.args(["mcp", "--wait-ms", "end"]);
    if let Some(name) = session {
        command.args(["--session", name]);
    }
    for (name, value) in env {
        command.env(name, value);
    }
    let mut client = McpClient::spawn(command);
    client.initialize_with(json!({"sampling": {}}));
    client
}

fn call(client: &mut McpClient, code: &str) -> i64 {
    client.request(
        "tools/call",
        json!({"name": "execute", "arguments": {"code": code}}),
    )
}

fn result_text(client: &mut McpClient, id: i64) -> String {
    let response = client.response(id, LONG);
    let result = response
        .get("result")
        .unwrap_or_else(|| panic!("tools/call failed: {response}"));
    text(result)
}

/// The next model request of a sub-agent, and the task it works on (its prompt starts
/// `# Task\n<task>`).
fn child_request(client: &mut McpClient) -> (String, Value) {
    let request = client.next_named("sampling/createMessage", LONG);
    let prompt = request["params"]["messages"][0]["content"]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let task = prompt
        .strip_prefix("# Task\n")
        .and_then(|rest| rest.lines().next())
        .unwrap_or_else(|| panic!("not a sub-agent's request: {prompt}"))
        .to_string();
    (task, request)
}

/// The next model request of the sub-agent working on `task`; requests of other children
/// (ended ones, whose last request nobody answers) are passed over.
fn child_request_for(client: &mut McpClient, task: &str) -> Value {
    loop {
        let (asking, request) = child_request(client);
        if asking == task {
            return request;
        }
    }
}

fn prompt_of(request: &Value) -> String {
    request["params"]["messages"][0]["content"]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The scripted model's reply: one cell to run.
fn cell_reply(code: &str) -> Value {
    json!({"model": "scripted", "role": "assistant",
           "content": {"type": "text", "text": format!("Running this.\n```python\n{code}\n```")}})
}

#[test]
fn spawn_returns_at_admission_and_two_children_run_at_once_to_their_answers() {
    let home = TestHome::new();
    let mut client = server(&home, Some("fanout"), &[]);
    // No model request has been answered when the cell returns: the children cannot have done
    // anything yet, and the handles say they run.
    let admitted = text(&client.execute(
        "h1 = spawn_agent('task one', name='one')\n\
         h2 = spawn_agent('task two', name='two')\n\
         print(h1.status, h2.status, h1.id, h2.id)",
    ));
    assert_eq!(
        admitted.trim(),
        "running running agent-1 agent-2",
        "{admitted}"
    );
    // Both children ask before either gets an answer: they run at the same time.
    let first = child_request(&mut client);
    let second = child_request(&mut client);
    let mut tasks = [first.0.clone(), second.0.clone()];
    tasks.sort();
    assert_eq!(tasks, ["task one", "task two"]);
    let system = first.1["params"]["systemPrompt"]
        .as_str()
        .unwrap_or_default();
    assert!(system.contains("final_answer(text)"), "{system}");
    for (task, request) in [first, second] {
        let label = task.trim_start_matches("task ");
        client.respond(
            &request,
            cell_reply(&format!("final_answer('{label}: ' + str(6 * 7))")),
        );
    }
    let id = call(&mut client, "wait_all([h1, h2], timeout=150)");
    let results = result_text(&mut client, id);
    assert_eq!(
        results.lines().next(),
        Some("['one: 42', 'two: 42']"),
        "{results}"
    );
    // The record says where it came from and what it used.
    let record = text(&client.execute(
        "r = h1.record\n(r['status'], r['name'], r['parent_cell'], r['steps'], r['usage']['calls'], \
         h1.result)",
    ));
    assert_eq!(
        record.lines().next(),
        Some("('completed', 'one', 1, 1, 1, 'one: 42')"),
        "{record}"
    );
    let transcript = text(&client.execute("print(open(h2.output_path).read())"));
    assert!(transcript.contains("final answer: two: 42"), "{transcript}");
}

#[test]
fn a_live_fork_shares_the_parents_state_at_the_call_and_keeps_its_changes_its_own() {
    let home = TestHome::new();
    let mut client = server(&home, Some("live"), &[]);
    client.execute(
        "import threading, numpy as np\n\
         data = {'rows': list(range(100_000))}\n\
         big = np.arange(12_500_000, dtype=np.int64)  # 100 MB\n\
         stop = threading.Event()\n\
         ticker = threading.Thread(target=stop.wait, name='ticker', daemon=True)\n\
         ticker.start()\n\
         np.random.seed(7)",
    );
    let id = call(
        &mut client,
        "data['late'] = 'set in the same cell'\n\
         h = spawn_agent('edit the data')\n\
         print(h.record['fork_kind'], h.record.get('fork_fallback'))\n\
         print(repr(h.wait(150)))\n\
         print(len(data['rows']), 'child' in data, int(big[-1]), ticker.is_alive())",
    );
    let request = child_request_for(&mut client, "edit the data");
    client.respond(
        &request,
        cell_reply(
            "data['child'] = True\ndata['rows'].append(-1)\nbig[-1] = -1\n\
             print(len(data['rows']), data['late'], int(big[-1]), ticker.is_alive(), \
             np.random.rand() != np.random.RandomState(7).rand())",
        ),
    );
    let next = child_request_for(&mut client, "edit the data");
    let shown = prompt_of(&next);
    assert!(
        shown.contains("100001 set in the same cell -1 False True"),
        "the child sees the parent's state at the call, its thread not running, numpy \
         reseeded: {shown}"
    );
    assert!(
        shown.contains("live copy of the parent's") && shown.contains("ticker"),
        "the child's first result says it is a live copy and which thread it lacks: {shown}"
    );
    client.respond(&next, cell_reply("final_answer(str(data['child']))"));
    let seen = result_text(&mut client, id);
    let lines: Vec<&str> = seen.lines().collect();
    assert_eq!(lines.first(), Some(&"live None"), "{seen}");
    assert_eq!(lines.get(1), Some(&"'True'"), "{seen}");
    assert_eq!(
        lines.get(2),
        Some(&"100000 False 12499999 True"),
        "the parent's state is its own: {seen}"
    );
}

#[test]
fn a_fork_that_cannot_be_live_starts_from_the_snapshot_and_an_unforked_child_starts_empty() {
    let home = TestHome::new();
    // No fork of the kernel at all: the child is seeded from the snapshot, committed first.
    let mut client = server(&home, Some("fork"), &[("PI_REPL_SNAPSHOT_FORK", "0")]);
    client.execute("earlier = 'from an earlier cell'");
    let id = call(
        &mut client,
        "same = 'from the same cell'\nh = spawn_agent('read the data')\n\
         print(h.record['fork_kind'], '|', h.record['fork_fallback'])\n\
         try:\n    print(repr(h.wait(150)))\n\
         except Exception as e:\n    print('failed:', e, open(h.output_path).read())",
    );
    let (task, request) = child_request(&mut client);
    assert_eq!(task, "read the data");
    client.respond(&request, cell_reply("final_answer(earlier + ' / ' + same)"));
    let seen = result_text(&mut client, id);
    assert_eq!(
        seen.lines().next(),
        Some("snapshot | PI_REPL_SNAPSHOT_FORK=0: this kernel is not forked"),
        "{seen}"
    );
    assert_eq!(
        seen.lines().nth(1),
        Some("'from an earlier cell / from the same cell'"),
        "{seen}"
    );

    let id = call(
        &mut client,
        "h = spawn_agent('look around', fork=False)\nh.wait(150)",
    );
    let (_, request) = child_request(&mut client);
    client.respond(
        &request,
        cell_reply("final_answer(str('earlier' in globals()))"),
    );
    let seen = result_text(&mut client, id);
    assert_eq!(seen.lines().next(), Some("'False'"), "{seen}");
}

#[test]
fn a_killed_child_reads_lost_and_ending_the_session_cancels_the_rest() {
    let home = TestHome::new();
    let secret = "sk-test-not-for-children-4242";
    let mut client = server(
        &home,
        Some("ends"),
        &[("PI_REPL_LLM_API_KEY", secret), ("OPENAI_API_KEY", secret)],
    );
    // The first result also names the credentials withheld from the kernel (issue 23): the pid
    // is its last line.
    let pid: i32 = text(
        &client.execute("victim = spawn_agent('be killed', fork=False)\nvictim.record['pid']"),
    )
    .trim()
    .lines()
    .last()
    .unwrap_or_default()
    .parse()
    .expect("a pid");
    // The child is up and waits for its model; no key is in its environment.
    let _ = child_request(&mut client);
    let environ = std::fs::read(format!("/proc/{pid}/environ")).expect("the child's environment");
    let environ = String::from_utf8_lossy(&environ);
    assert!(
        environ.contains("PI_REPL_HOME="),
        "the environment was read"
    );
    assert!(!environ.contains(secret), "a key reached the child process");
    // Now it is killed from outside.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill the child");
    let lost = text(&client.execute(
        "from pi_repl_kernel.agents import AgentFailed\n\
         try:\n    victim.wait(150)\nexcept AgentFailed as e:\n    print(e.status, '|', e.error)",
    ));
    // Read before or after the host collected the process: the record is `lost` either way,
    // with the signal once the host has written it.
    assert!(
        lost.starts_with("lost | its process was killed by signal 9")
            || lost.starts_with("lost | its process is gone"),
        "{lost}"
    );

    // A child still working when the session ends is ended, and its record says so.
    let path = text(&client.execute(
        "survivor = spawn_agent('outlive the session', fork=False)\nprint(survivor._path)",
    ))
    .trim()
    .to_string();
    let (_, request) = child_request(&mut client);
    let started = home.path().join("survivor-started");
    client.respond(
        &request,
        cell_reply(&format!(
            "import time\nopen({:?}, 'w').close()\ntime.sleep(600)",
            started.display().to_string()
        )),
    );
    common::eventually("the child's cell began", LONG, || started.exists());
    let survivor_pid = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .and_then(|r| r["pid"].as_i64())
        .expect("the record names its pid") as i32;
    assert!(client.close(LONG).is_some(), "the server exits");
    let record: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("record")).expect("json");
    assert_eq!(record["status"], "cancelled", "{record}");
    assert_eq!(record["error"], "the parent session ended", "{record}");
    assert!(
        common::wait_gone(survivor_pid, 30.0),
        "the child process ended"
    );
}

#[test]
fn the_tree_survives_a_restart_of_the_parent_and_a_child_of_a_killed_host_reads_lost() {
    let home = TestHome::new();
    let mut client = server(&home, Some("tree"), &[]);
    let id = call(
        &mut client,
        "kept = spawn_agent('finish', name='kept', fork=False)\nkept.wait(150)",
    );
    let (_, request) = child_request(&mut client);
    client.respond(&request, cell_reply("final_answer('kept answer')"));
    assert_eq!(
        result_text(&mut client, id).lines().next(),
        Some("'kept answer'")
    );
    let pid: i32 = text(
        &client.execute("orphan = spawn_agent('be orphaned', fork=False)\norphan.record['pid']"),
    )
    .trim()
    .parse()
    .expect("a pid");
    let _ = child_request(&mut client);
    // The host is killed: nobody finishes the running child's record; the child sees its
    // stdin close and ends.
    client.child.kill().expect("kill the server");
    client.child.wait().expect("reap the server");
    assert!(common::wait_gone(pid, 60.0), "the orphaned child ended");

    let mut client = server(&home, Some("tree"), &[]);
    let tree =
        text(&client.execute("print([(h.id, h.name, h.status, h.result) for h in agents()])"));
    assert_eq!(
        tree.lines().find(|line| line.starts_with("[(")),
        Some("[('agent-1', 'kept', 'completed', 'kept answer'), ('agent-2', None, 'lost', None)]"),
        "{tree}"
    );
    // Ids are never reused after the restart.
    let next = text(&client.execute("spawn_agent('next', fork=False).id"));
    assert_eq!(next.lines().next(), Some("'agent-3'"), "{next}");
}

#[test]
fn limits_refuse_with_clear_errors() {
    let home = TestHome::new();
    let mut client = server(
        &home,
        Some("limits"),
        &[
            ("PI_REPL_AGENT_MAX_RUNNING", "1"),
            ("PI_REPL_AGENT_MAX_DEPTH", "1"),
        ],
    );
    let id = call(
        &mut client,
        "from pi_repl_kernel.agents import AgentLimitExceeded\n\
         first = spawn_agent('try to go deeper', fork=False)\n\
         try:\n    spawn_agent('one too many', fork=False)\n\
         except AgentLimitExceeded as e:\n    print(e)",
    );
    let refused = result_text(&mut client, id);
    assert!(
        refused.contains(
            "1 sub-agents are running here, the most at once (PI_REPL_AGENT_MAX_RUNNING)"
        ),
        "{refused}"
    );
    // The child, at depth 1 of 1, may not spawn its own.
    let (_, request) = child_request(&mut client);
    client.respond(
        &request,
        cell_reply(
            "try:\n    spawn_agent('grandchild', fork=False)\n\
             except Exception as e:\n    print(type(e).__name__, e)",
        ),
    );
    let (_, request) = child_request(&mut client);
    let shown = prompt_of(&request);
    assert!(
        shown.contains("AgentLimitExceeded spawn_agent refused: the child would be at depth 2, and sub-agents may nest 1 deep (PI_REPL_AGENT_MAX_DEPTH)"),
        "{shown}"
    );
    client.respond(&request, cell_reply("final_answer('stayed shallow')"));
    let done = text(&client.execute("first.wait(150)"));
    assert_eq!(done.lines().next(), Some("'stayed shallow'"), "{done}");
}

#[test]
fn an_ephemeral_workspace_forks_live_and_only_a_sub_agent_gives_a_final_answer() {
    let home = TestHome::new();
    let mut client = server(&home, None, &[]);
    // No snapshot is needed for a live copy.
    let id = call(
        &mut client,
        "from pi_repl_kernel.agents import AgentError\nvalue = 41\n\
         h = spawn_agent('add one')\nprint(h.record['fork_kind'])\nprint(h.wait(150))",
    );
    let request = child_request_for(&mut client, "add one");
    client.respond(&request, cell_reply("final_answer(str(value + 1))"));
    let seen = result_text(&mut client, id);
    assert_eq!(seen.lines().collect::<Vec<_>>(), ["live", "42"], "{seen}");
    let refused =
        text(&client.execute("try:\n    final_answer('x')\nexcept AgentError as e:\n    print(e)"));
    assert!(refused.contains("is not a sub-agent's"), "{refused}");
}

#[test]
fn aborting_the_parent_cell_leaves_the_child_working_and_cancel_ends_it() {
    let home = TestHome::new();
    let mut client = server(&home, Some("abort"), &[]);
    let id = call(
        &mut client,
        "h = spawn_agent('keep going', fork=False)\nimport time\ntime.sleep(600)",
    );
    let request = child_request_for(&mut client, "keep going");
    client.notify(
        "notifications/cancelled",
        json!({"requestId": id, "reason": "the user pressed Esc"}),
    );
    let status = text(&client.execute("h.status"));
    assert!(status.lines().any(|l| l == "'running'"), "{status}");
    // The child goes on: it runs its cell and asks for its next step.
    client.respond(&request, cell_reply("print('still here after the abort')"));
    let next = child_request_for(&mut client, "keep going");
    assert!(
        prompt_of(&next).contains("still here after the abort"),
        "{}",
        prompt_of(&next)
    );
    let cancelled = text(&client.execute("print(h.cancel(), '|', h.error)"));
    assert!(
        cancelled
            .lines()
            .any(|l| l.starts_with("cancelled | cancelled by cell ")),
        "{cancelled}"
    );
}

#[test]
fn a_child_out_of_time_or_tokens_ends_errored_and_says_which_budget() {
    let home = TestHome::new();
    let mut client = server(&home, Some("budgets"), &[]);
    let slow = text(&client.execute(
        "from pi_repl_kernel.agents import AgentFailed\n\
         slow = spawn_agent('slow', fork=False, budget={'seconds': 1})\n\
         try:\n    slow.wait(150)\nexcept AgentFailed as e:\n    print(e.status, '|', e.error)",
    ));
    assert!(
        slow.lines()
            .any(|l| l.starts_with("errored | its time budget of 1 s ran out")),
        "{slow}"
    );
    let id = call(
        &mut client,
        "thrifty = spawn_agent('thrifty', fork=False, budget={'tokens': 10})\n\
         try:\n    thrifty.wait(150)\nexcept AgentFailed as e:\n    print(e.status, '|', e.error)",
    );
    // The first request is within the budget (nothing spent yet); its answer spends it.
    let request = child_request_for(&mut client, "thrifty");
    client.respond(&request, cell_reply("print('one step')"));
    let thrifty = result_text(&mut client, id);
    assert!(
        thrifty
            .contains("errored | its model request failed: this sub-agent's token budget is spent"),
        "{thrifty}"
    );
}

#[test]
fn a_grandchild_works_through_two_hosts_and_the_tree_shows_both_depths() {
    let home = TestHome::new();
    let mut client = server(&home, Some("nested"), &[]);
    let id = call(
        &mut client,
        "top = spawn_agent('parent task', fork=False)\ntop.wait(170)",
    );
    let request = child_request_for(&mut client, "parent task");
    client.respond(
        &request,
        cell_reply(
            "g = spawn_agent('grandchild task', fork=False)\n\
             final_answer('grandchild says: ' + g.wait(150))",
        ),
    );
    // The grandchild's model request comes up through its parent to this client.
    let request = child_request_for(&mut client, "grandchild task");
    client.respond(&request, cell_reply("final_answer('hello from depth 2')"));
    let answer = result_text(&mut client, id);
    assert_eq!(
        answer.lines().next(),
        Some("'grandchild says: hello from depth 2'"),
        "{answer}"
    );
    let tree = text(&client.execute(
        "print([(h.id, h.record['depth'], h.status, h.result) for h in agents()])\nprint(agents())",
    ));
    assert!(
        tree.contains(
            "[('agent-1', 1, 'completed', 'grandchild says: hello from depth 2'), \
             ('agent-1', 2, 'completed', 'hello from depth 2')]"
        ),
        "{tree}"
    );
    assert!(
        tree.contains("  <agent-1 completed"),
        "a grandchild is indented: {tree}"
    );
}

/// The processes whose parent is `pid`, zombies included.
fn children_of(pid: i32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|child| {
            std::fs::read_to_string(format!("/proc/{child}/stat"))
                .ok()
                .and_then(|line| {
                    let close = line.rfind(')')?;
                    line[close + 1..]
                        .split_whitespace()
                        .nth(1)?
                        .parse::<i32>()
                        .ok()
                })
                == Some(pid)
        })
        .collect()
}

/// Issue 15: a sub-agent killed from outside left its kernel a zombie under the parent host (a
/// child subreaper) until the host exited; the host now collects it.
#[test]
fn a_killed_childs_kernel_is_collected_by_the_host_not_left_a_zombie() {
    let home = TestHome::new();
    let mut client = server(&home, None, &[]);
    let host = client.child.id() as i32;
    // The first result also names the credentials withheld from the kernel (issue 23): the pid
    // is its last line.
    let pid: i32 = text(
        &client.execute("victim = spawn_agent('be killed', fork=False)\nvictim.record['pid']"),
    )
    .trim()
    .lines()
    .last()
    .unwrap_or_default()
    .parse()
    .expect("a pid");
    // The child asks its model while its kernel starts in the background: wait for the kernel
    // process to appear under it.
    let _ = child_request(&mut client);
    let kernels = common::eventually(
        "the child runs its own kernel",
        Duration::from_secs(60),
        || Some(children_of(pid)).filter(|kernels| !kernels.is_empty()),
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill the child");
    let lost = text(&client.execute(
        "from pi_repl_kernel.agents import AgentFailed\n\
         try:\n    victim.wait(150)\nexcept AgentFailed as e:\n    print(e.status)",
    ));
    assert_eq!(lost.trim(), "lost", "{lost}");
    // Gone from /proc altogether (a zombie keeps its entry), while the host still runs.
    for kernel in &kernels {
        let gone = common::poll(Duration::from_secs(30), || {
            !std::path::Path::new(&format!("/proc/{kernel}")).exists()
        });
        assert!(
            gone.is_some(),
            "the killed child's kernel {kernel} is still there (a zombie of the host: {:?})",
            children_of(host)
        );
    }
    assert!(
        client.child.try_wait().expect("the host").is_none(),
        "the host still runs"
    );
}

#[test]
fn spawn_agents_starts_several_from_one_state_and_adopt_agent_takes_one_childs_workspace() {
    let home = TestHome::new();
    let mut client = server(&home, Some("bestof"), &[]);
    client.execute("base = 10\nkeep = 'parent'");
    let started = text(&client.execute(
        "hs = spawn_agents(['try a', 'try b'], name='try')\n\
         print([h.status for h in hs], [h.name for h in hs])",
    ));
    assert_eq!(
        started.trim(),
        "['running', 'running'] ['try-1', 'try-2']",
        "{started}"
    );
    // Both start from the parent's state, and each changes its own copy.
    for _ in 0..2 {
        let (task, request) = child_request(&mut client);
        let reply = match task.as_str() {
            "try a" => cell_reply("result = base * 2\nfinal_answer(str(result))"),
            "try b" => cell_reply("result = base * 3\nnew = 'from b'\nfinal_answer(str(result))"),
            other => panic!("unexpected task {other}"),
        };
        client.respond(&request, reply);
    }
    let id = call(&mut client, "wait_all(hs, timeout=150)");
    let answers = result_text(&mut client, id);
    assert_eq!(answers.lines().next(), Some("['20', '30']"), "{answers}");
    assert!(
        text(&client.execute("'result' in globals()")).ends_with("False"),
        "the children's work stays theirs until adopted"
    );

    let adopted = text(&client.execute("adopt_agent(hs[1])"));
    assert!(
        adopted.contains("Took sub-agent agent-2 (completed)'s workspace as this one's"),
        "{adopted}"
    );
    assert!(
        adopted.contains("Restored as they were then: new, result."),
        "{adopted}"
    );
    assert!(adopted.contains("were not taken over"), "{adopted}");
    let now = text(&client.execute("(result, new, keep, base)"));
    assert!(now.ends_with("(30, 'from b', 'parent', 10)"), "{now}");

    // A child that still works cannot be adopted; nothing changes.
    let refused = text(&client.execute(
        "h = spawn_agent('slow')\n\
         try:\n    adopt_agent(h)\nexcept Exception as e:\n    print(type(e).__name__, e)\n\
         print(h.cancel())",
    ));
    assert!(
        refused.contains("AgentError sub-agent agent-3 is still running: wait for it first"),
        "{refused}"
    );
    assert!(
        text(&client.execute("result")).ends_with("30"),
        "the refusal changed nothing"
    );
}

#[test]
fn spawn_agents_is_all_or_none_when_a_limit_refuses_one() {
    let home = TestHome::new();
    let mut client = server(
        &home,
        Some("allornone"),
        &[("PI_REPL_AGENT_MAX_RUNNING", "1")],
    );
    let refused = text(&client.execute(
        "from pi_repl_kernel.agents import AgentLimitExceeded\n\
         try:\n    spawn_agents(['first', 'second'])\n\
         except AgentLimitExceeded as e:\n    print('refused:', e)\n\
         print(agents())",
    ));
    assert!(
        refused.contains("refused: ") && refused.contains("PI_REPL_AGENT_MAX_RUNNING"),
        "{refused}"
    );
    // The one that had started was cancelled: nothing of the batch keeps running.
    assert!(refused.contains("[<agent-1 cancelled"), "{refused}");
    let bad = text(&client.execute(
        "try:\n    spawn_agents('one str')\nexcept TypeError as e:\n    print(e)\n\
         try:\n    spawn_agents([])\nexcept ValueError as e:\n    print(e)",
    ));
    assert!(bad.contains("tasks must be a list of str"), "{bad}");
    assert!(bad.contains("tasks is empty"), "{bad}");
}

#[test]
fn a_live_forks_kernel_leads_its_own_group_and_ends_with_its_host() {
    let home = TestHome::new();
    let mut client = server(&home, Some("lifeline"), &[]);
    let host: i32 = text(&client.execute(
        "import os\nparent_group = os.getpgrp()\nh = spawn_agent('report')\nh.record['pid']",
    ))
    .trim()
    .lines()
    .last()
    .unwrap_or_default()
    .parse()
    .expect("the child host's pid");
    let request = child_request_for(&mut client, "report");
    client.respond(
        &request,
        cell_reply("import os\nprint('KERNEL', os.getpid(), os.getpgrp(), parent_group)"),
    );
    // The child waits for its next step, which never comes: its host is killed instead.
    let next = child_request_for(&mut client, "report");
    let shown = prompt_of(&next);
    let line = shown
        .lines()
        .find(|line| line.starts_with("KERNEL "))
        .unwrap_or_else(|| panic!("no KERNEL line: {shown}"));
    let numbers: Vec<i32> = line[7..]
        .split_whitespace()
        .map(|n| n.parse().expect("a number"))
        .collect();
    let (kernel, group, parent_group) = (numbers[0], numbers[1], numbers[2]);
    assert_eq!(
        group, kernel,
        "the copy leads a process group of its own: {line}"
    );
    assert_ne!(group, parent_group, "{line}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(host),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill the child's host");
    // The copy lives in the parent kernel's PID namespace: the parent's cell sees it end.
    let ended = text(&client.execute(&format!(
        "import time\n\
         for _ in range(600):\n    \
             try:\n        state = open('/proc/{kernel}/stat').read().split()[2]\n    \
             except FileNotFoundError:\n        state = 'gone'\n    \
             if state in ('Z', 'gone'):\n        break\n    \
             time.sleep(0.05)\n\
         print(state, 6 * 7)"
    )));
    let last = ended.lines().last().unwrap_or_default().to_string();
    assert!(
        last == "gone 42" || last == "Z 42",
        "the copy ended with its host, the parent's kernel did not: {ended}"
    );
}

#[test]
fn a_live_fork_whose_parent_kernel_dies_revives_from_its_own_snapshot() {
    let home = TestHome::new();
    let mut client = server(&home, Some("orphaned"), &[]);
    client.execute("handed = list(range(1000))");
    client.execute("h = spawn_agent('keep working')");
    let request = child_request_for(&mut client, "keep working");
    client.respond(
        &request,
        cell_reply("made = sum(handed)\nimport os\nprint('COPY', os.getpid())"),
    );
    let next = child_request_for(&mut client, "keep working");
    let shown = prompt_of(&next);
    let copy: i32 = shown
        .lines()
        .find_map(|line| line.strip_prefix("COPY "))
        .unwrap_or_else(|| panic!("no COPY line: {shown}"))
        .trim()
        .parse()
        .expect("a pid");
    // The parent's kernel dies (and its PID namespace with it, the copy included) once the
    // copy's first answer is saved: the parent waits for the child's save lock to be free.
    let died = text(&client.execute(&format!(
        "import os, fcntl, time\n\
         lock = os.path.join(h.workspace, 'snapshot', 'save.lock')\n\
         for _ in range(600):\n    \
             if os.path.exists(os.path.join(h.workspace, 'snapshot', 'manifest.json')):\n        \
                 break\n    \
             time.sleep(0.05)\n\
         with open(lock, 'a') as f:\n    fcntl.flock(f, fcntl.LOCK_EX)\n\
         os.kill({copy}, 0)\n\
         os._exit(1)"
    )));
    assert!(died.contains("KernelDied"), "{died}");
    // The child's next cell runs in a new kernel, revived from the child's own snapshot.
    client.respond(&next, cell_reply("print('AFTER', made, len(handed))"));
    let after = child_request_for(&mut client, "keep working");
    let shown = prompt_of(&after);
    assert!(shown.contains("AFTER 499500 1000"), "{shown}");
    assert!(
        shown.contains("repl_engine_reset") || shown.contains("revived"),
        "the child is told its kernel was rebuilt: {shown}"
    );
    client.respond(&after, cell_reply("final_answer('done')"));
}
