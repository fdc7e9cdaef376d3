//! Issue 21, item 5: keys never strand a session. A missing, empty or wrong snapshot key is told
//! in the result (not only on stderr), never re-signs a session's snapshot with another key, and
//! once the right key is back the session revives with no manual step; `pi-repl sessions` lists
//! refused snapshots with the one command that recovers them.
//!
//! Every test runs the real binary against a real ipykernel, in a home of its own.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::TestHome;
use common::mcp_client::{McpClient, text};

/// Runs the real binary with `args`.
fn run(home: &TestHome, args: &[&str]) -> std::process::Output {
    home.cli().args(args).output().expect("run pi-repl")
}

fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Saves `kept = 42` in session `s`; returns (session dir, the key's bytes, the manifest's).
fn saved_session(home: &TestHome) -> (PathBuf, Vec<u8>, Vec<u8>) {
    let first = run(home, &["exec", "--session", "s", "kept = 42"]);
    assert!(first.status.success(), "{first:?}");
    let dir = only_session(home);
    let key = std::fs::read(key_file(home)).expect("the key was made");
    let manifest = std::fs::read(dir.join("snapshot/manifest.json")).expect("a snapshot");
    (dir, key, manifest)
}

fn only_session(home: &TestHome) -> PathBuf {
    std::fs::read_dir(home.home.state())
        .expect("state")
        .flatten()
        .map(|entry| entry.path())
        .next()
        .expect("one session")
}

fn key_file(home: &TestHome) -> PathBuf {
    home.home.root().join("snapshot.key")
}

/// A key no snapshot here was signed with.
fn another_key() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

/// The names of the snapshots kept beside `snapshot/`.
fn kept_aside(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("session dir")
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("snapshot."))
        .collect();
    names.sort();
    names
}

fn mcp(home: &TestHome) -> McpClient {
    let mut command = home.cli();
    command.args(["mcp", "--session", "s"]);
    let mut client = McpClient::spawn(command);
    client.initialize();
    client
}

/// `kept` as the session revives it, through `exec`.
fn revived_kept(home: &TestHome) -> String {
    stdout(&run(home, &["exec", "--session", "s", "kept"]))
        .trim()
        .to_string()
}

/// Issue 21: with an empty `snapshot.key`, cells ran and "snapshots are off" went to stderr
/// only; nothing was revived and the result said nothing.
#[test]
fn an_empty_key_is_told_in_the_first_result_with_its_fix_and_the_session_revives_once_it_is_back() {
    let home = TestHome::new();
    let (dir, key, manifest) = saved_session(&home);
    std::fs::write(key_file(&home), b"").unwrap();

    let mut client = mcp(&home);
    let first = text(&client.execute("made = 'without a key'; made"));
    assert!(first.contains("<repl_engine_reset>"), "{first}");
    assert!(
        first.contains("snapshots are off for this session: the snapshot key")
            && first.contains("is empty"),
        "{first}"
    );
    assert!(
        first.contains("\nhint: put the key file back at "),
        "{first}"
    );
    assert!(first.contains("pi-repl sessions rekey"), "{first}");
    assert!(first.ends_with("'without a key'"), "the cell ran: {first}");
    let second = text(&client.execute("1 + 1"));
    assert_eq!(second, "2", "said once");
    assert!(client.close(Duration::from_secs(60)).is_some(), "exits");

    assert_eq!(
        std::fs::read(key_file(&home)).unwrap(),
        b"",
        "no key was made over it"
    );
    assert_eq!(
        std::fs::read(dir.join("snapshot/manifest.json")).unwrap(),
        manifest,
        "the snapshot is unchanged"
    );
    std::fs::write(key_file(&home), &key).unwrap();
    assert_eq!(revived_kept(&home), "42");
}

/// Issue 21: a wrong key moved the snapshot to `snapshot.refused-<t>` and signed a new one with
/// itself; after the right key was back the session was still refused.
#[test]
fn a_snapshot_signed_with_another_key_is_never_moved_nor_re_signed_and_revives_once_the_key_is_back()
 {
    let home = TestHome::new();
    let (dir, key, manifest) = saved_session(&home);
    std::fs::write(key_file(&home), another_key()).unwrap();

    let mut client = mcp(&home);
    let first = text(&client.execute("after = 1; after"));
    assert!(
        first.contains("not signed by this installation's key")
            && first.contains("it is kept where it is, unchanged, and nothing is saved over it"),
        "{first}"
    );
    assert!(
        first.contains("snapshots are off for this session: saving would replace the refused")
            && first.contains("\nhint: put back the snapshot key that signed it at "),
        "{first}"
    );
    assert!(first.ends_with("\n1"), "the cell ran: {first}");
    // More cells, then a graceful stop (which saves whatever a session has to save).
    assert_eq!(text(&client.execute("after += 1; after")), "2");
    assert!(client.close(Duration::from_secs(60)).is_some(), "exits");

    assert_eq!(
        std::fs::read(dir.join("snapshot/manifest.json")).unwrap(),
        manifest,
        "never re-signed"
    );
    assert_eq!(kept_aside(&dir), Vec::<String>::new(), "never moved");
    let listed = stdout(&run(&home, &["sessions"]));
    assert!(
        listed.contains("refused snapshots")
            && listed.contains("snapshot/ is signed with another key")
            && listed.contains("put back the key that signed it"),
        "{listed}"
    );

    std::fs::write(key_file(&home), &key).unwrap();
    assert_eq!(revived_kept(&home), "42", "revives with no other step");
    let listed = stdout(&run(&home, &["sessions"]));
    assert!(!listed.contains("refused snapshots"), "{listed}");
}

/// Issue 21: snapshots an older pi-repl set aside as `snapshot.refused-<t>` (with a new one
/// signed by the wrong key in their place) came back only by a manual rename.
#[test]
fn a_snapshot_an_older_version_set_aside_is_listed_and_recovered_by_one_command() {
    let home = TestHome::new();
    let (dir, key, _) = saved_session(&home);
    // What an older pi-repl left after a start with a wrong key.
    let old_aside = "snapshot.refused-20260101T000000Z";
    std::fs::rename(dir.join("snapshot"), dir.join(old_aside)).unwrap();
    std::fs::write(key_file(&home), another_key()).unwrap();
    let wrong = run(
        &home,
        &[
            "exec",
            "--session",
            "s",
            "wrong = 'signed with a wrong key'",
        ],
    );
    assert!(wrong.status.success(), "{wrong:?}");
    assert!(dir.join("snapshot/manifest.json").exists());
    std::fs::write(key_file(&home), &key).unwrap();

    let listed = stdout(&run(&home, &["sessions"]));
    let session = dir.file_name().unwrap().to_string_lossy().into_owned();
    let command = format!("pi-repl sessions recover {session}");
    assert!(
        listed.contains(&format!("{old_aside} is readable with this key"))
            && listed.contains(&command),
        "{listed}"
    );

    let recovered = run(&home, &["sessions", "recover", "s"]);
    assert!(recovered.status.success(), "{recovered:?}");
    assert!(stdout(&recovered).contains(old_aside), "{recovered:?}");
    assert_eq!(revived_kept(&home), "42");
    // The wrong-key snapshot is kept, listed with what would recover it.
    let aside = kept_aside(&dir);
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert!(aside[0].starts_with("snapshot.refused-2") && aside[0] != old_aside);
    let listed = stdout(&run(&home, &["sessions"]));
    assert!(
        listed.contains("is signed with another key")
            && listed.contains("put back the key that signed it, then: pi-repl sessions recover"),
        "{listed}"
    );

    // Nothing readable left to recover: a clear error with the fix.
    let again = run(&home, &["sessions", "recover", "s"]);
    assert!(!again.status.success());
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(
        stderr.contains("error: none of the snapshots kept aside for session")
            && stderr.contains("hint: put back the key that signed them"),
        "{stderr}"
    );
}
