//! The snapshot store's correctness end to end (issues #10, #11): a revived array changed in
//! place survives the background revive of a binding beside it, a host killed while it revives a
//! binding does not poison that binding, and a damaged raw blob is never used nor signed again.
//! Real binary, real kernel, real `pi-repl mcp`.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::mcp_client::{McpClient, outcome};
use common::{TestHome, run, saved, wait_gone, within};
use pi_repl::engine::Engine;

#[tokio::test]
async fn a_revived_array_changed_in_place_survives_the_background_revive() {
    let home = TestHome::new();
    {
        let (config, session) = home.durable_config("inplace");
        let engine = Engine::start(config);
        // `arr` (8 MB, out-of-band) revives eagerly; `big` (a stream over 1 MiB) stays pending
        // and is revived in the background once the queue is idle.
        run(
            &engine,
            "import numpy as np\narr = np.arange(1_000_000.0)\nbig = list(range(400_000))",
        )
        .await;
        saved(&session, "big").await;
        engine.shutdown().await;
    }
    let (config, _session) = home.durable_config("inplace");
    let engine = Engine::start(config);
    // This cell does not name `big`, so it does not wait for it (a cell that names a pending
    // binding waits for the revive: `snapshot_contract`).
    let changed = run(&engine, "arr *= 2\nfloat(arr[1])").await;
    assert_eq!(changed.result.as_deref(), Some("2.0"), "{changed:?}");
    assert_eq!(
        changed.reset.as_ref().map(|reset| reset.pending.clone()),
        Some(vec!["big".to_string()]),
        "`big` was still pending when the array changed: {changed:?}"
    );
    // The background revive of `big` runs between cells; wait for it by asking the kernel.
    within(60, async {
        loop {
            let probe = run(&engine, "'big' in globals()").await;
            if probe.result.as_deref() == Some("True") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    let after = run(
        &engine,
        "float(arr[1]), bool((arr == np.arange(1_000_000.0) * 2).all()), len(big)",
    )
    .await;
    assert_eq!(
        after.result.as_deref(),
        Some("(2.0, True, 400000)"),
        "{after:?}"
    );
    engine.shutdown().await;
}

#[test]
fn a_host_killed_while_it_revives_a_binding_does_not_poison_it() {
    let home = TestHome::new();
    let define = home
        .cli()
        .args([
            "exec",
            "--session",
            "big",
            "data = [str(i) for i in range(4_000_000)]",
        ])
        .output()
        .unwrap();
    assert!(
        define.status.success(),
        "{}",
        String::from_utf8_lossy(&define.stderr)
    );

    // Kill the host while the kernel is inside the unpickle of `data` (the journal shows its
    // `start` and no `done` after the kill); a kill that came too late is tried again.
    let interrupted = (0..5).any(|_| {
        let mut client = McpClient::spawn({
            let mut command = home.cli();
            command.args(["mcp", "--session", "big"]);
            command
        });
        client.initialize();
        // The eager revive is done when this answers; `data` is revived in the background.
        let kernel_pid = common::host_pid(
            outcome(&client.execute(common::KERNEL_PID_CELL))["result"]
                .as_str()
                .unwrap_or_default(),
        );
        within_blocking(60, || reviving_data(&home).then_some(()));
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(client.child.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        client.child.wait().unwrap();
        // The kernel ends with its host (its lifeline); only then is the journal final.
        assert!(wait_gone(kernel_pid, 60.0), "the kernel outlived its host");
        reviving_data(&home)
    });
    assert!(interrupted, "every kill came after the revive had finished");

    let next = home
        .cli()
        .args(["exec", "--session", "big", "len(data)", "len(data)"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&next.stdout);
    let stderr = String::from_utf8_lossy(&next.stderr);
    assert!(
        stdout.contains("4000000\n"),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    assert!(
        !stderr.contains("data (crashed") && !stderr.contains("data (its revive"),
        "{stderr}"
    );
}

/// True while the journal shows the unpickle of `data` started and not finished.
fn reviving_data(home: &TestHome) -> bool {
    let Some(text) = session_file(home, "journal").and_then(|p| std::fs::read_to_string(p).ok())
    else {
        return false;
    };
    let lines: Vec<&str> = text.lines().collect();
    let last = |line: &str| lines.iter().rposition(|l| *l == line);
    match (last("start data"), last("done data")) {
        (Some(start), Some(done)) => start > done,
        (Some(_), None) => true,
        _ => false,
    }
}

/// Polls `probe` until it returns a value; fails the test after `seconds`.
fn within_blocking<T>(seconds: u64, probe: impl FnMut() -> Option<T>) -> T {
    common::eventually("the probe held", Duration::from_secs(seconds), probe)
}

/// The file named `name` in the only session under `home`'s state directory.
fn session_file(home: &TestHome, name: &str) -> Option<PathBuf> {
    fn find(dir: &Path, name: &str) -> Option<PathBuf> {
        for entry in std::fs::read_dir(dir).ok()?.flatten() {
            let path = entry.path();
            if path.is_dir() {
                if let Some(found) = find(&path, name) {
                    return Some(found);
                }
            } else if path.file_name().is_some_and(|n| n == name) {
                return Some(path);
            }
        }
        None
    }
    find(&home.home.state(), name)
}

fn raw_blob_of(home: &TestHome, binding: &str) -> (String, PathBuf) {
    let manifest_path = session_file(home, "manifest.json").expect("a manifest");
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&manifest_path).unwrap()).unwrap();
    let id = manifest["bindings"][binding]["buffers"][0]["id"]
        .as_str()
        .expect("a raw buffer")
        .to_string();
    let path = manifest_path
        .parent()
        .unwrap()
        .join("blobs")
        .join(&id[..2])
        .join(&id);
    (id, path)
}

#[test]
fn a_flipped_byte_in_a_raw_blob_is_never_used_nor_signed_again() {
    let home = TestHome::new();
    let define = home
        .cli()
        .args([
            "exec",
            "--session",
            "flip",
            "import numpy as np\narr = np.arange(200_000)\nfine = 'fine'",
        ])
        .output()
        .unwrap();
    assert!(define.status.success());
    let (id, path) = raw_blob_of(&home, "arr");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[4000] ^= 1;
    std::fs::write(&path, &bytes).unwrap();

    let next = home
        .cli()
        .args(["exec", "--session", "flip", "fine, 'arr' in globals()"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&next.stdout);
    let stderr = String::from_utf8_lossy(&next.stderr);
    assert_eq!(stdout, "('fine', False)\n", "{stderr}");
    assert!(
        stderr.contains("arr (") && stderr.contains("does not match its checksum"),
        "{stderr}"
    );
    assert_eq!(
        raw_blob_of(&home, "arr").0,
        id,
        "the damaged value was re-signed"
    );
}
