//! Durable workspaces end to end: snapshots saved in the background, revived after a restart
//! or a death, honest reset notices, refusal of foreign or damaged snapshots, poisoned
//! bindings, forks, and the sessions CLI (issue #3). Real binary, real kernel.

mod common;

use std::time::{Duration, Instant};

use common::{TestHome, manifest, run, saved, within};
use pi_repl::engine::outcome::Status;
use pi_repl::engine::{CellOptions, Engine};

#[test]
fn a_new_process_revives_the_session_and_says_what_came_back() {
    let home = TestHome::new();
    let first = home
        .cli()
        .args(["exec", "--session", "s", "x = 40\ndef f():\n    return x"])
        .output()
        .unwrap();
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let second = home
        .cli()
        .args(["exec", "--session", "s", "x + 2", "x = 1", "f()"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&second.stdout);
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(second.status.success(), "{stderr}");
    assert_eq!(
        stdout, "42\n1\n",
        "a revived function sees the live namespace"
    );
    assert!(stderr.contains("<repl_engine_reset>"), "{stderr}");
    assert!(
        stderr.contains("Revived from the snapshot saved at "),
        "{stderr}"
    );
    let revived_line = stderr.lines().find(|l| l.starts_with("Revived")).unwrap();
    assert!(
        revived_line.contains(" x") && revived_line.contains(" f"),
        "{revived_line}"
    );
}

#[test]
fn a_cell_that_names_a_binding_still_being_revived_waits_for_it() {
    let home = TestHome::new();
    // Over 1 MiB pickled: revived in the background, after the first cell.
    let first = home
        .cli()
        .args([
            "exec",
            "--session",
            "big",
            "d = {i: str(i) for i in range(100000)}\nsmall = 1",
        ])
        .output()
        .unwrap();
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let second = home
        .cli()
        .args(["exec", "--session", "big", "small", "len(d)"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&second.stdout);
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(second.status.success(), "{stderr}");
    assert_eq!(stdout, "1\n100000\n", "{stderr}");
    assert!(
        stderr.contains("Still being revived in the background: d (a cell that names one waits"),
        "the first cell ran before `d` was loaded: {stderr}"
    );
}

#[test]
fn a_first_ever_session_says_nothing() {
    let home = TestHome::new();
    let output = home
        .cli()
        .args(["exec", "--session", "new", "1 + 1"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&output.stdout), "2\n");
    assert!(!String::from_utf8_lossy(&output.stderr).contains("repl_engine_reset"));
}

#[tokio::test]
async fn a_death_revives_the_last_snapshot_before_the_next_cell_and_names_what_was_lost() {
    let home = TestHome::new();
    let (config, session) = home.durable_config("death");
    let engine = Engine::start(config);
    run(
        &engine,
        "kept = [1, 2, 3]\nimport threading\nlock = threading.Lock()",
    )
    .await;
    saved(&session, "kept").await;
    // Queued together, so no background save can run between them; `late` is answered, so its
    // state is captured before its answer and survives the death right after it (issue 21).
    let late = engine.submit("late = 'answered'", CellOptions::default());
    let dying = engine.submit("import os\nos._exit(9)", CellOptions::default());
    let next = engine.submit(
        "kept, 'late' in globals(), 'lock' in globals()",
        CellOptions::default(),
    );
    within(60, late.outcome()).await.unwrap();
    assert_eq!(
        within(60, dying.outcome()).await.unwrap().status,
        Status::Died
    );
    let next = within(60, next.outcome()).await.unwrap();
    assert_eq!(next.result.as_deref(), Some("([1, 2, 3], True, False)"));
    let reset = next.reset.expect("a reset notice");
    assert!(reset.reason.contains("code 9"), "{}", reset.reason);
    assert!(reset.revived.contains(&"kept".to_string()), "{reset:?}");
    let notice = reset.notice();
    assert!(
        notice.contains("lock (could not be saved: cannot pickle"),
        "{notice}"
    );
    assert!(
        !notice.contains("the changes made by"),
        "an answered cell came back, and is not named lost: {notice}"
    );
    engine.shutdown().await;
}

#[tokio::test]
async fn calls_that_land_during_the_periodic_refresh_are_all_answered() {
    let home = TestHome::new();
    let (mut config, session) = home.durable_config("refresh-calls");
    if let Some(snapshot) = config.snapshot.as_mut() {
        snapshot.refresh = Some(Duration::from_millis(200));
    }
    let arm = home.path().join("arm");
    let entered = home.path().join("entered");
    let release = home.path().join("release");
    let engine = Engine::start(config);
    // Pickling `gate` blocks once `arm` exists, until the host interrupts the save or the test
    // creates `release` (a save that runs outside the kernel's main thread is not
    // interrupted): the first save after arming is the periodic refresh, since no cell runs
    // in between.
    run(
        &engine,
        &format!(
            "import os, time\n\
             class Gate:\n\
            \x20   def __reduce__(self):\n\
            \x20       if os.path.exists({arm:?}):\n\
            \x20           os.remove({arm:?})\n\
            \x20           open({entered:?}, 'w').close()\n\
            \x20           while not os.path.exists({release:?}):\n\
            \x20               time.sleep(0.05)\n\
            \x20       return (Gate, ())\n\
             gate = Gate()"
        ),
    )
    .await;
    saved(&session, "gate").await;
    std::fs::write(&arm, b"").unwrap();
    common::eventually_async("the refresh began", Duration::from_secs(60), || {
        entered.exists()
    })
    .await;
    // Inside the refresh: the first call preempts it, the second waits in the queue.
    let first = engine.submit("1 + 1", CellOptions::default());
    let second = engine.submit("2 + 2", CellOptions::default());
    let first = within(120, first.outcome()).await.expect("answered");
    let second = within(120, second.outcome()).await.expect("answered");
    assert_eq!(first.result.as_deref(), Some("2"), "{first:?}");
    assert_eq!(second.result.as_deref(), Some("4"), "{second:?}");
    std::fs::write(&release, b"").unwrap();
    assert_eq!(run(&engine, "3 + 3").await.result.as_deref(), Some("6"));
    engine.shutdown().await;
}

#[tokio::test]
async fn a_kernel_that_dies_setting_up_snapshots_is_retried_a_bounded_number_of_times() {
    let home = TestHome::new();
    let (mut config, _session) = home.durable_config("configure-dies");
    // Loaded before the snapshot store is set up, in every kernel: setting it up kills the kernel.
    let helper = home.path().join("kills_configure.py");
    std::fs::write(
        &helper,
        "import os\nimport pi_repl_kernel.snapshot as _s\n\
         _s.configure = lambda *a, **k: os._exit(7)\n",
    )
    .unwrap();
    config.helpers = vec![helper];
    let engine = Engine::start(config);
    let outcome = run(&engine, "1 + 1").await;
    assert_eq!(outcome.result.as_deref(), Some("2"), "{outcome:?}");
    let notices = outcome.notices.join("\n");
    assert!(
        notices.contains("snapshots are off for this kernel")
            && notices.contains("ended the kernel 2 times")
            && notices.contains("code 7"),
        "{notices}"
    );
    engine.shutdown().await;
}

#[tokio::test]
async fn fifty_kills_at_random_moments_never_break_the_last_committed_snapshot() {
    let home = TestHome::new();
    let (config, session) = home.durable_config("chaos");
    let engine = Engine::start(config);
    run(&engine, "import os\nblob = bytearray(os.urandom(24_000_000))\nblob[:8] = bytes(8)\ncounter = 0\ndata = list(range(1000))").await;
    saved(&session, "counter").await;
    let mut seen = Vec::new();
    let mut children_killed = 0;
    let mut killed_in = std::collections::BTreeSet::new();
    for trial in 0..50u64 {
        let before = generation(&session);
        let outcome = run(
            &engine,
            &format!("counter = {trial}\nblob[:8] = counter.to_bytes(8, 'little')\ndata = list(range({}))\n{}", 1000 + trial * 997, common::KERNEL_PID_CELL),
        )
        .await;
        let pid = match outcome.result {
            Some(pid) => common::host_pid(&pid),
            None => panic!("trial {trial}: {outcome:?}"),
        };
        // Kill the kernel while the background save (24 MB rewritten by a save child: tens of
        // milliseconds) runs, after a pause that varies from trial to trial; every fourth trial
        // waits for the commit first, so both kinds of kill are certain to happen; in another
        // fourth the save child itself is killed first, wherever it is.
        if trial % 4 == 1 {
            if let Some(child) = save_child_of(pid).await
                && nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(child),
                    nix::sys::signal::Signal::SIGKILL,
                )
                .is_ok()
            {
                children_killed += 1;
                killed_in.insert(trial);
            }
            // The workload: the kernel's kill at a pseudo-random moment of the save.
            tokio::time::sleep(Duration::from_millis((trial * 7919) % 40)).await;
        } else if trial % 4 == 3 {
            common::eventually_async("a save committed", Duration::from_secs(30), || {
                generation(&session) > before
            })
            .await;
        } else {
            // The workload: a kill at a pseudo-random moment after the answer.
            tokio::time::sleep(Duration::from_millis((trial * 7919) % 40)).await;
        }
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        let probe = "counter, int.from_bytes(blob[:8], 'little') == counter, len(data) - 1000";
        let mut check = run(&engine, probe).await;
        if check.status == Status::Died {
            // The kill landed while this cell was starting: the next one runs in the revived
            // kernel.
            check = run(&engine, probe).await;
        }
        let reset = check.reset.clone().expect("the kill is told");
        assert!(
            !reset.reason.contains("refused") && !reset.reason.contains("could not be revived"),
            "trial {trial}: {}",
            reset.notice()
        );
        let result = check
            .result
            .clone()
            .unwrap_or_else(|| panic!("trial {trial}: {check:?}"));
        let inner = result.trim_matches(|c| c == '(' || c == ')');
        let parts: Vec<&str> = inner.split(", ").collect();
        let counter: u64 = parts[0].parse().unwrap();
        assert!(
            counter <= trial,
            "trial {trial}: the snapshot is from the future: {result}"
        );
        assert_eq!(
            parts[1], "True",
            "trial {trial}: blob and counter from different saves: {result}"
        );
        let data_len: u64 = parts[2].parse().unwrap();
        assert_eq!(
            data_len,
            counter * 997,
            "trial {trial}: data from another save: {result}"
        );
        seen.push((trial, counter));
    }
    // Issue 21: a kernel killed at any moment after an answer never loses that answer's state
    // (the capture's child outlives it); only a killed save child may leave an older value.
    let lost: Vec<_> = seen
        .iter()
        .filter(|&&(t, c)| c != t && !killed_in.contains(&t))
        .collect();
    assert!(lost.is_empty(), "answered cells lost: {lost:?} of {seen:?}");
    assert!(children_killed > 0, "no save child was ever killed");
    engine.shutdown().await;
}

/// The save child the kernel `kernel` forks after a cell, once it appears (bounded: it may
/// also have finished before it is seen).
async fn save_child_of(kernel: i32) -> Option<i32> {
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        let found = std::fs::read_dir("/proc").ok()?.find_map(|entry| {
            let pid: i32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let close = stat.rfind(')')?;
            let mut fields = stat[close + 1..].split_whitespace();
            let state = fields.next()?;
            let ppid: i32 = fields.next()?.parse().ok()?;
            // A zombie has finished (committed or not): killing it changes nothing.
            (ppid == kernel && state != "Z").then_some(pid)
        });
        if found.is_some() {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    None
}

/// A way to damage a manifest, for `tamper`.
type Damage = Box<dyn Fn(&mut serde_json::Value)>;

/// The snapshot's commit counter (0 before the first commit).
fn generation(session: &pi_repl::session::Session) -> u64 {
    manifest(session)["generation"].as_u64().unwrap_or(0)
}

fn tamper(home: &TestHome, name: &str, edit: impl Fn(&mut serde_json::Value)) {
    let dir = home
        .home
        .state()
        .read_dir()
        .unwrap()
        .filter_map(Result::ok)
        .find(|e| {
            e.file_name()
                .to_string_lossy()
                .ends_with(&format!("__{name}"))
        })
        .unwrap()
        .path();
    let path = dir.join("snapshot/manifest.json");
    let mut manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut manifest);
    std::fs::write(&path, serde_json::to_vec(&manifest).unwrap()).unwrap();
}

#[test]
fn damaged_foreign_and_future_snapshots_are_refused_and_nothing_is_unpickled() {
    let home = TestHome::new();
    let marker = home.path().join("unpickled.marker");
    let define = format!(
        "class Trap:\n    def __reduce__(self):\n        return (open, ({:?}, 'w'))\ntrap = Trap()\nplain = 5",
        marker.display().to_string()
    );
    let cases: [(&str, Damage, &str); 3] = [
        (
            "tampered",
            Box::new(|m| m["bindings"]["plain"]["type"] = "evil.Type".into()),
            "not signed by this installation's key",
        ),
        (
            "future",
            Box::new(|m| m["version"] = 99.into()),
            "written by a newer pi-repl",
        ),
        (
            "foreign",
            Box::new(|m| m["signature"] = "00".repeat(32).into()),
            "not signed by this installation's key",
        ),
    ];
    for (name, edit, expected) in cases {
        let first = home
            .cli()
            .args(["exec", "--session", name, &define])
            .output()
            .unwrap();
        assert!(
            first.status.success(),
            "{}",
            String::from_utf8_lossy(&first.stderr)
        );
        tamper(&home, name, edit);
        let second = home
            .cli()
            .args(["exec", "--session", name, "'plain' in globals()"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&second.stderr);
        assert_eq!(String::from_utf8_lossy(&second.stdout), "False\n");
        assert!(stderr.contains("refused"), "{name}: {stderr}");
        assert!(stderr.contains(expected), "{name}: {stderr}");
        assert!(!marker.exists(), "{name}: something was unpickled");
    }
    let truncated = home
        .cli()
        .args(["exec", "--session", "cut", &define])
        .output()
        .unwrap();
    assert!(truncated.status.success());
    let dir = home
        .home
        .state()
        .read_dir()
        .unwrap()
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().ends_with("__cut"))
        .unwrap()
        .path();
    let manifest = dir.join("snapshot/manifest.json");
    let text = std::fs::read(&manifest).unwrap();
    std::fs::write(&manifest, &text[..text.len() / 2]).unwrap();
    let second = home
        .cli()
        .args(["exec", "--session", "cut", "'plain' in globals()"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(
        stderr.contains("refused") && stderr.contains("truncated or corrupt"),
        "{stderr}"
    );
    assert!(!marker.exists());
}

#[test]
fn bindings_that_break_their_revive_are_skipped_and_named_and_the_session_stays_usable() {
    let home = TestHome::new();
    let define = "import ctypes, os\n\
        class Raises:\n    def __reduce__(self):\n        return (int, ('not a number',))\n\
        class Exits:\n    def __reduce__(self):\n        return (os._exit, (3,))\n\
        class Crashes:\n    def __reduce__(self):\n        return (ctypes.string_at, (0,))\n\
        raises, exits, crashes = Raises(), Exits(), Crashes()\nfine = 'fine'";
    let first = home
        .cli()
        .args(["exec", "--session", "poison", define])
        .output()
        .unwrap();
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let second = home
        .cli()
        .args([
            "exec",
            "--session",
            "poison",
            "fine",
            "sorted(k for k in ('raises', 'exits', 'crashes') if k in globals())",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&second.stdout);
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert_eq!(stdout, "'fine'\n[]\n", "{stderr}");
    let lost = stderr
        .lines()
        .find(|l| l.starts_with("Lost:"))
        .unwrap_or_else(|| panic!("{stderr}"));
    for name in ["raises", "exits", "crashes"] {
        assert!(lost.contains(name), "{name} not named: {lost}");
    }
}

#[test]
fn a_revive_that_hangs_is_bounded_and_the_binding_skipped() {
    let home = TestHome::new();
    let define = "import time\nclass Hangs:\n    def __reduce__(self):\n        return (time.sleep, (3600,))\nhangs = Hangs()\nfine = 'fine'";
    assert!(
        home.cli()
            .args(["exec", "--session", "hang", define])
            .output()
            .unwrap()
            .status
            .success()
    );
    let started = Instant::now();
    let second = home
        .cli()
        .args(["exec", "--session", "hang", "fine", "'hangs' in globals()"])
        .env("PI_REPL_BOOT_TIMEOUT_MS", "4000")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(
        started.elapsed() < Duration::from_secs(40),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(
        String::from_utf8_lossy(&second.stdout),
        "'fine'\nFalse\n",
        "{stderr}"
    );
    assert!(
        stderr.contains("hangs (reviving it hung for 4 s; skipped)")
            || stderr.contains("hangs (crashed"),
        "{stderr}"
    );
}

#[test]
fn a_fork_starts_from_the_parents_snapshot_and_leaves_the_parent_alone() {
    let home = TestHome::new();
    assert!(
        home.cli()
            .args(["exec", "--session", "parent", "x = 'parent'"])
            .output()
            .unwrap()
            .status
            .success()
    );
    let child = home
        .cli()
        .args([
            "exec",
            "--session",
            "child",
            "--fork-from",
            "parent",
            "x",
            "x = 'child'",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&child.stderr);
    assert_eq!(
        String::from_utf8_lossy(&child.stdout),
        "'parent'\n",
        "{stderr}"
    );
    assert!(stderr.contains("forked from another"), "{stderr}");
    let parent = home
        .cli()
        .args(["exec", "--session", "parent", "x"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&parent.stdout), "'parent'\n");
    let again = home
        .cli()
        .args(["exec", "--session", "child", "--fork-from", "parent", "x"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&again.stdout),
        "'child'\n",
        "a fork copies only once"
    );
}

/// Issue 25 (pi's `/fork` to an earlier message): `--fork-at N` seeds the fork with the state the
/// parent kept right after its cell N (a later binding is gone, a changed value is back), read
/// with the same signature checks as any snapshot (a tampered one is refused); a state no longer
/// kept seeds the parent's last snapshot, and the first result says so.
#[test]
fn a_fork_at_a_cell_starts_from_the_state_the_parent_kept_after_it() {
    let home = TestHome::new();
    for code in ["x = 1", "x = 2\nlater = 3"] {
        let run = home
            .cli()
            .args(["exec", "--session", "parent", code])
            .output()
            .unwrap();
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
    }
    let fork = |name: &str, at: &str| {
        home.cli()
            .args([
                "exec",
                "--session",
                name,
                "--fork-from",
                "parent",
                "--fork-at",
                at,
                "x",
                "'later' in globals()",
            ])
            .output()
            .unwrap()
    };
    let child = fork("child", "1");
    let stderr = String::from_utf8_lossy(&child.stderr);
    assert_eq!(
        String::from_utf8_lossy(&child.stdout),
        "1\nFalse\n",
        "{stderr}"
    );
    assert!(
        stderr.contains("as it was right after its cell 1"),
        "{stderr}"
    );
    let late = fork("late", "9");
    let stderr = String::from_utf8_lossy(&late.stderr);
    assert_eq!(
        String::from_utf8_lossy(&late.stdout),
        "2\nTrue\n",
        "{stderr}"
    );
    assert!(
        stderr.contains("at its cell 9, whose state is no longer kept"),
        "{stderr}"
    );
    let parent = home
        .cli()
        .args(["exec", "--session", "parent", "x"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&parent.stdout),
        "2\n",
        "the parent is untouched"
    );

    // A kept state that was tampered with is refused like any snapshot: nothing is unpickled.
    let states = home
        .home
        .state()
        .read_dir()
        .unwrap()
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().ends_with("__parent"))
        .unwrap()
        .path()
        .join("snapshot/states/1.json");
    let mut state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&states).unwrap()).unwrap();
    state["bindings"]["x"]["type"] = "evil.Type".into();
    std::fs::write(&states, serde_json::to_vec(&state).unwrap()).unwrap();
    let tampered = home
        .cli()
        .args([
            "exec",
            "--session",
            "tampered",
            "--fork-from",
            "parent",
            "--fork-at",
            "1",
            "'x' in globals()",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&tampered.stderr);
    assert_eq!(
        String::from_utf8_lossy(&tampered.stdout),
        "False\n",
        "{stderr}"
    );
    assert!(
        stderr.contains("refused") && stderr.contains("not signed by this installation's key"),
        "{stderr}"
    );
}

#[tokio::test]
async fn in_place_mutation_by_a_thread_is_caught_by_the_periodic_refresh() {
    let home = TestHome::new();
    let (mut config, session) = home.durable_config("refresh");
    if let Some(snapshot) = &mut config.snapshot {
        snapshot.refresh = Some(Duration::from_millis(1000));
    }
    let gate = home.path().join("gate");
    let done = home.path().join("done");
    let engine = Engine::start(config.clone());
    // A thread changes `items` in place after the cell answered, when the test opens the gate:
    // no cell runs after that, so only the periodic refresh can save the change.
    run(
        &engine,
        &format!(
            "import os, threading, time\nitems = []\n\
             def add():\n\
             \x20   while not os.path.exists({gate:?}):\n\
             \x20       time.sleep(0.01)\n\
             \x20   items.extend([1, 2, 3])\n\
             \x20   open({done:?}, 'w').close()\n\
             threading.Thread(target=add).start()"
        ),
    )
    .await;
    saved(&session, "items").await;
    let answered = generation(&session);
    std::fs::write(&gate, "").unwrap();
    common::eventually_async("the thread changed items", Duration::from_secs(60), || {
        done.exists()
    })
    .await;
    common::eventually_async("a refresh committed", Duration::from_secs(60), || {
        generation(&session) > answered
    })
    .await;
    // No flush at the stop: what the next kernel revives is what the refresh committed.
    engine.shutdown_now(Duration::ZERO).await;
    let revived = Engine::start(config);
    let check = run(&revived, "items").await;
    assert_eq!(check.result.as_deref(), Some("[1, 2, 3]"), "{check:?}");
    revived.shutdown().await;
}

#[test]
fn the_sessions_command_lists_shows_and_removes() {
    let home = TestHome::new();
    let define = "import threading\nbig = bytearray(300_000)\nsmall = 1\nalias = big\nlock = threading.Lock()";
    assert!(
        home.cli()
            .args(["exec", "--session", "inspect", define])
            .output()
            .unwrap()
            .status
            .success()
    );
    let list = home.cli().args(["sessions"]).output().unwrap();
    let text = String::from_utf8_lossy(&list.stdout);
    let row = text
        .lines()
        .find(|l| l.contains("__inspect"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        row.split_whitespace().any(|w| w == "4"),
        "4 bindings (threading, big, small, alias): {row}"
    );
    let show = home
        .cli()
        .args(["sessions", "show", "inspect"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&show.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[1].contains("300.1 KB"), "largest first: {text}");
    assert!(
        text.contains("alias of big") || text.contains("alias of alias"),
        "{text}"
    );
    assert!(
        text.contains("lock") && text.contains("not saved: cannot pickle"),
        "{text}"
    );
    let rm = home
        .cli()
        .args(["sessions", "rm", "inspect"])
        .output()
        .unwrap();
    assert!(
        rm.status.success(),
        "{}",
        String::from_utf8_lossy(&rm.stderr)
    );
    let list = home.cli().args(["sessions", "--json"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&list.stdout).trim(), "[]");
}
