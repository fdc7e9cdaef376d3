//! Remote kernels (issue 16): the real `pi-repl` binary driving a kernel on a real Jupyter
//! Server (`jupyter-server` from the test venv) that each test starts on 127.0.0.1 with its own
//! token, runtime and data directories, and on a real Jupyter Enterprise Gateway (from PyPI, in
//! a venv of its own under `target/tmp`, see `enterprise_gateway_venv`) started the same way.
//!
//! The server's kernel list is read with the test interpreter's `urllib`, not with pi-repl's
//! own client, so "gone from `/api/kernels`" is what the server says.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use common::mcp_client::{McpClient, outcome, text};
use common::{TestHome, test_python};

/// How long a Jupyter Server may take to write its runtime file.
const SERVER_START: Duration = Duration::from_secs(60);

/// A Jupyter Server this test started; stopped (its process and kernels) when dropped.
struct JupyterServer {
    child: Child,
    url: String,
    token: String,
    _dir: tempfile::TempDir,
}

/// The pinned Enterprise Gateway install (`tests/enterprise-gateway-requirements.txt`).
const EG_REQUIREMENTS: &str = include_str!("enterprise-gateway-requirements.txt");

/// How long creating the Enterprise Gateway venv may take (a pip install from the registry).
const EG_INSTALL: Duration = Duration::from_secs(600);

/// The venv with Jupyter Enterprise Gateway, created once per requirements file under
/// `target/tmp/enterprise-gateway-<hash>` (a `flock` on `<dir>.lock` lets one test binary's
/// tests, or two test runs, share it; an `installed` stamp marks a complete one).
fn enterprise_gateway_venv() -> PathBuf {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    EG_REQUIREMENTS.hash(&mut hasher);
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(&base).unwrap();
    let dir = base.join(format!("enterprise-gateway-{:016x}", hasher.finish()));
    let lock = std::fs::File::create(dir.with_extension("lock")).unwrap();
    let _held = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, errno)| errno)
        .expect("lock the Enterprise Gateway venv");
    let stamp = dir.join("installed");
    if stamp.is_file() {
        return dir;
    }
    let _ = std::fs::remove_dir_all(&dir);
    let started = Instant::now();
    let created = Command::new(test_python())
        .args(["-m", "venv"])
        .arg(&dir)
        .output()
        .expect("run python -m venv");
    assert!(created.status.success(), "python -m venv: {created:?}");
    let requirements = dir.join("requirements.txt");
    std::fs::write(&requirements, EG_REQUIREMENTS).unwrap();
    let installed = Command::new(dir.join("bin").join("python"))
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "-r",
        ])
        .arg(&requirements)
        .output()
        .expect("run pip");
    assert!(
        installed.status.success(),
        "installing Jupyter Enterprise Gateway (tests/enterprise-gateway-requirements.txt) failed:\n{}",
        String::from_utf8_lossy(&installed.stderr)
    );
    assert!(
        started.elapsed() < EG_INSTALL,
        "the install took {:?}",
        started.elapsed()
    );
    std::fs::write(&stamp, b"").unwrap();
    dir
}

impl JupyterServer {
    fn start() -> JupyterServer {
        JupyterServer::start_with(|_| Vec::new())
    }

    /// Starts a server with extra arguments, made from its private directory.
    fn start_with(extra: impl FnOnce(&std::path::Path) -> Vec<String>) -> JupyterServer {
        let dir = tempfile::Builder::new()
            .prefix("pi-repl-jupyter-")
            .tempdir()
            .expect("temp dir");
        let token = format!("tok-{}", uuid::Uuid::new_v4().simple());
        let runtime = dir.path().join("runtime");
        let root = dir.path().join("root");
        std::fs::create_dir_all(&root).unwrap();
        let mut child = Command::new(test_python())
            .args(["-m", "jupyter_server", "--no-browser", "--allow-root"])
            .arg("--ServerApp.ip=127.0.0.1")
            .arg("--ServerApp.port=0")
            .arg(format!("--ServerApp.root_dir={}", root.display()))
            // The token reaches the server through its config file, not its argv.
            .arg(format!(
                "--config={}",
                write_config(dir.path(), &token).display()
            ))
            .args(extra(dir.path()))
            .env("JUPYTER_RUNTIME_DIR", &runtime)
            .env("JUPYTER_CONFIG_DIR", dir.path().join("config"))
            .env("JUPYTER_DATA_DIR", dir.path().join("data"))
            .env_remove("JUPYTER_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(dir.path().join("server.log")).unwrap(),
            ))
            .spawn()
            .expect("start jupyter server (is jupyter-server in python/test-requirements.txt?)");
        let deadline = Instant::now() + SERVER_START;
        let info: Value = loop {
            if let Some(info) = server_info(&runtime) {
                break info;
            }
            if let Some(status) = child.try_wait().unwrap() {
                let log = std::fs::read_to_string(dir.path().join("server.log")).unwrap();
                panic!("the Jupyter Server exited ({status}) while starting:\n{log}");
            }
            assert!(
                Instant::now() < deadline,
                "the Jupyter Server did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let url = info["url"]
            .as_str()
            .expect("the server's URL")
            .trim_end_matches('/')
            .to_string();
        JupyterServer {
            child,
            url,
            token,
            _dir: dir,
        }
    }

    /// Starts Jupyter Enterprise Gateway on 127.0.0.1 with a token, listing enabled and a
    /// `python3` kernelspec that runs the test venv's ipykernel (EG's own venv has none; EG
    /// starts it with its default local process proxy). Everything but the port is in its
    /// config file, none of it in its argv.
    fn enterprise_gateway() -> JupyterServer {
        JupyterServer::enterprise_gateway_refusing(&[])
    }

    /// Enterprise Gateway that refuses kernels to `users` (its `unauthorized_users`).
    fn enterprise_gateway_refusing(users: &[&str]) -> JupyterServer {
        let venv = enterprise_gateway_venv();
        let dir = tempfile::Builder::new()
            .prefix("pi-repl-eg-")
            .tempdir()
            .expect("temp dir");
        let token = format!("tok-{}", uuid::Uuid::new_v4().simple());
        let config_dir = dir.path().join("config");
        std::fs::create_dir_all(&config_dir).unwrap();
        let config = serde_json::json!({"EnterpriseGatewayApp": {
            "auth_token": token,
            // EG refuses kernels to `root` by default; the tests may run as root.
            "unauthorized_users": users,
            // Off by default in EG; the tests read the list.
            "list_kernels": true,
        }});
        std::fs::write(
            config_dir.join("jupyter_enterprise_gateway_config.json"),
            config.to_string(),
        )
        .unwrap();
        let spec_dir = dir.path().join("data").join("kernels").join("python3");
        std::fs::create_dir_all(&spec_dir).unwrap();
        let spec = serde_json::json!({
            "argv": [test_python(), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Python 3",
            "language": "python",
        });
        std::fs::write(spec_dir.join("kernel.json"), spec.to_string()).unwrap();
        // EG writes no runtime file with its port: a free one is picked (bound, then released).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = Command::new(venv.join("bin").join("jupyter-enterprisegateway"))
            .arg("--ip=127.0.0.1")
            .arg(format!("--port={port}"))
            .arg("--port_retries=0")
            .env("JUPYTER_RUNTIME_DIR", dir.path().join("runtime"))
            .env("JUPYTER_CONFIG_DIR", &config_dir)
            .env("JUPYTER_DATA_DIR", dir.path().join("data"))
            .env_remove("JUPYTER_TOKEN")
            .env_remove("EG_AUTH_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(dir.path().join("server.log")).unwrap(),
            ))
            .spawn()
            .expect("start jupyter-enterprisegateway");
        let deadline = Instant::now() + SERVER_START;
        // Listening means ready: tornado binds once the app is set up.
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = child.try_wait().unwrap() {
                let log = std::fs::read_to_string(dir.path().join("server.log")).unwrap();
                panic!("Enterprise Gateway exited ({status}) while starting:\n{log}");
            }
            assert!(
                Instant::now() < deadline,
                "Enterprise Gateway did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        JupyterServer {
            child,
            url: format!("http://127.0.0.1:{port}"),
            token,
            _dir: dir,
        }
    }

    /// The kernel ids the server lists, asked with Python's `urllib`.
    fn kernel_ids(&self) -> Vec<String> {
        assert!(
            self.url.starts_with("http://"),
            "listing is for plain-HTTP servers"
        );
        let script = "import json, sys, urllib.request\n\
                      r = urllib.request.Request(sys.argv[1] + '/api/kernels', \
                      headers={'Authorization': 'token ' + sys.argv[2]})\n\
                      print(json.dumps([k['id'] for k in json.load(urllib.request.urlopen(r))]))";
        let output = Command::new(test_python())
            .args(["-c", script, &self.url, &self.token])
            .output()
            .expect("run python");
        assert!(output.status.success(), "{output:?}");
        serde_json::from_slice(&output.stdout).expect("kernel list")
    }

    /// Starts a kernel on the server through its REST API (as another client would).
    fn start_kernel(&self) -> String {
        let script = "import json, sys, urllib.request\n\
                      r = urllib.request.Request(sys.argv[1] + '/api/kernels', method='POST', \
                      data=b'{\"name\": \"python3\"}', \
                      headers={'Authorization': 'token ' + sys.argv[2]})\n\
                      print(json.load(urllib.request.urlopen(r))['id'])";
        let output = Command::new(test_python())
            .args(["-c", script, &self.url, &self.token])
            .output()
            .expect("run python");
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout).unwrap().trim().to_string()
    }

    /// `pi-repl exec --jupyter-url <this server> --json <cells>` with the token in
    /// `JUPYTER_TOKEN` and debug logging on (so a leaked token would show).
    fn exec(&self, home: &TestHome, args: &[&str]) -> Output {
        let output = home
            .cli()
            .args(["exec", "--json", "--jupyter-url", &self.url])
            .args(args)
            .env("JUPYTER_TOKEN", &self.token)
            .env("PI_REPL_LOG", "debug")
            .output()
            .expect("run pi-repl");
        self.assert_no_token(&output);
        output
    }

    fn assert_no_token(&self, output: &Output) {
        for stream in [&output.stdout, &output.stderr] {
            assert!(
                !String::from_utf8_lossy(stream).contains(&self.token),
                "the token leaked into pi-repl's output"
            );
        }
    }
}

impl Drop for JupyterServer {
    fn drop(&mut self) {
        // SIGTERM lets the server shut its kernels down; it is waited for, then killed.
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        // Not `common::exited`: a failed `try_wait` must not panic in a drop.
        let exited = common::poll(Duration::from_secs(10), || {
            self.child.try_wait().ok().flatten()
        });
        if exited.is_some() {
            return;
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn write_config(dir: &std::path::Path, token: &str) -> PathBuf {
    let path = dir.join("jupyter_server_config.json");
    let config = serde_json::json!({"IdentityProvider": {"token": token}});
    std::fs::write(&path, config.to_string()).unwrap();
    path
}

/// The server's `jpserver-<pid>.json`, once it is complete.
fn server_info(runtime: &std::path::Path) -> Option<Value> {
    let entries = std::fs::read_dir(runtime).ok()?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("jpserver-") && name.ends_with(".json") {
            let text = std::fs::read_to_string(entry.path()).ok()?;
            if let Ok(info) = serde_json::from_str::<Value>(&text)
                && info.get("port").is_some()
            {
                return Some(info);
            }
        }
    }
    None
}

/// One JSON outcome per line of `exec --json`.
fn outcomes(output: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn state_lives_across_cells_and_the_kernel_is_gone_from_the_server_at_exit() {
    state_lives_across_cells_and_the_kernel_is_gone_from_the_server_at_exit_on(
        &JupyterServer::start(),
    );
}

#[test]
fn enterprise_gateway_keeps_state_across_cells_and_the_kernel_is_gone_at_exit() {
    state_lives_across_cells_and_the_kernel_is_gone_from_the_server_at_exit_on(
        &JupyterServer::enterprise_gateway(),
    );
}

fn state_lives_across_cells_and_the_kernel_is_gone_from_the_server_at_exit_on(
    server: &JupyterServer,
) {
    let home = TestHome::new();
    let output = server.exec(
        &home,
        &[
            "x = 41",
            "import ipykernel, os; os.path.basename(ipykernel.get_connection_file())",
            "x + 1",
            // The module arrived in the first cell: the toolbox runs on the server's machine,
            // and the kernel refuses input() as a local one does.
            "bash('echo $((6 * 7))').stdout",
            "input('name? ')",
        ],
    );
    // The worst outcome (the refused input()) sets the exit code.
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let cells = outcomes(&output);
    assert_eq!(cells.len(), 5, "{}", stderr(&output));
    assert_eq!(cells[2]["result"], "42", "{cells:?}");
    assert_eq!(cells[3]["result"], "'42\\n'", "{cells:?}");
    assert_eq!(cells[4]["status"], "error", "{cells:?}");
    assert!(
        cells[4]["error"]["evalue"]
            .as_str()
            .unwrap_or_default()
            .contains("input() is not available in pi-repl"),
        "{cells:?}"
    );
    // The kernel ran on the server: its connection file is the server's, named by its id.
    let connection_file = cells[1]["result"].as_str().unwrap().to_string();
    assert!(connection_file.contains("kernel-"), "{connection_file}");
    let notice = cells[0]["notices"][0].as_str().unwrap_or_default();
    assert!(notice.contains(&server.url), "{cells:?}");
    assert!(notice.contains("Not available remotely"), "{notice}");
    assert_eq!(server.kernel_ids(), Vec::<String>::new());
}

#[test]
fn a_cell_over_its_timeout_is_interrupted_through_the_server_and_state_is_kept() {
    a_cell_over_its_timeout_is_interrupted_through_the_server_and_state_is_kept_on(
        &JupyterServer::start(),
    );
}

#[test]
fn enterprise_gateway_interrupts_a_cell_over_its_timeout_and_state_is_kept() {
    a_cell_over_its_timeout_is_interrupted_through_the_server_and_state_is_kept_on(
        &JupyterServer::enterprise_gateway(),
    );
}

fn a_cell_over_its_timeout_is_interrupted_through_the_server_and_state_is_kept_on(
    server: &JupyterServer,
) {
    let home = TestHome::new();
    let output = server.exec(
        &home,
        &[
            "--timeout",
            "1500",
            "import time; y = 5; time.sleep(120)",
            "y * 2",
        ],
    );
    let cells = outcomes(&output);
    assert_eq!(cells[0]["status"], "aborted", "{cells:?}");
    assert_eq!(cells[0]["error"]["ename"], "KeyboardInterrupt", "{cells:?}");
    assert_eq!(cells[1]["status"], "ok", "{cells:?}");
    assert_eq!(cells[1]["result"], "10", "{cells:?}");
    assert_eq!(server.kernel_ids(), Vec::<String>::new());
}

#[test]
fn a_kernel_killed_on_the_server_side_is_reported_died_and_replaced_over_mcp() {
    a_kernel_killed_on_the_server_side_is_reported_died_and_replaced_over_mcp_on(
        &JupyterServer::start(),
    );
}

#[test]
fn enterprise_gateway_a_kernel_killed_there_is_reported_died_and_replaced_over_mcp() {
    a_kernel_killed_on_the_server_side_is_reported_died_and_replaced_over_mcp_on(
        &JupyterServer::enterprise_gateway(),
    );
}

fn a_kernel_killed_on_the_server_side_is_reported_died_and_replaced_over_mcp_on(
    server: &JupyterServer,
) {
    let home = TestHome::new();
    let mut command = home.cli();
    command
        .args(["mcp", "--jupyter-url", &server.url])
        .env("JUPYTER_TOKEN", &server.token);
    let mut client = McpClient::spawn(command);
    client.initialize();
    let first = client.execute("import os; kept = 1; os.getpid()");
    assert_eq!(outcome(&first)["status"], "ok", "{first}");
    let pid: i32 = outcome(&first)["result"].as_str().unwrap().parse().unwrap();
    // Killed outside pi-repl, as the out-of-memory killer or an operator would.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill the kernel");
    let during = client.execute("import time; time.sleep(120)");
    assert_eq!(outcome(&during)["status"], "died", "{during}");
    assert!(
        text(&during).contains("Jupyter server"),
        "the death names its source: {}",
        text(&during)
    );
    let after = client.execute("import os; (os.getpid(), 'kept' in globals())");
    assert_eq!(outcome(&after)["status"], "ok", "{after}");
    let result = outcome(&after)["result"].as_str().unwrap().to_string();
    assert!(result.ends_with("False)"), "a fresh kernel: {result}");
    assert!(!result.starts_with(&format!("({pid},")), "{result}");
    assert!(client.close(Duration::from_secs(60)).is_some());
    // Both the replaced kernel (which the server restarted under its id) and the new one.
    assert_eq!(server.kernel_ids(), Vec::<String>::new());
}

#[test]
fn a_durable_session_revives_through_the_remote_kernel_in_a_new_process() {
    a_durable_session_revives_through_the_remote_kernel_in_a_new_process_on(&JupyterServer::start());
}

#[test]
fn enterprise_gateway_a_durable_session_revives_in_a_new_process() {
    a_durable_session_revives_through_the_remote_kernel_in_a_new_process_on(
        &JupyterServer::enterprise_gateway(),
    );
}

fn a_durable_session_revives_through_the_remote_kernel_in_a_new_process_on(server: &JupyterServer) {
    let home = TestHome::new();
    let first = server.exec(&home, &["--session", "far", "numbers = [1, 2, 3]"]);
    assert!(first.status.success(), "{}", stderr(&first));
    let second = server.exec(&home, &["--session", "far", "numbers"]);
    let cells = outcomes(&second);
    assert_eq!(cells[0]["result"], "[1, 2, 3]", "{cells:?}");
    assert_eq!(cells[0]["reset"]["revived"][0], "numbers", "{cells:?}");
    assert_eq!(server.kernel_ids(), Vec::<String>::new());
}

#[test]
fn an_attached_kernel_keeps_its_state_and_is_left_running() {
    let server = JupyterServer::start();
    let home = TestHome::new();
    let id = server.start_kernel();
    let first = server.exec(&home, &["--kernel-id", &id, "shared = 'from one pi-repl'"]);
    assert!(first.status.success(), "{}", stderr(&first));
    assert_eq!(server.kernel_ids(), vec![id.clone()]);
    let second = server.exec(&home, &["--kernel-id", &id, "shared"]);
    let cells = outcomes(&second);
    assert_eq!(cells[0]["result"], "'from one pi-repl'", "{cells:?}");
    assert_eq!(server.kernel_ids(), vec![id]);
}

#[test]
fn a_wrong_token_or_url_is_a_clear_error_naming_the_server() {
    let server = JupyterServer::start();
    let home = TestHome::new();
    let wrong = home
        .cli()
        .args(["exec", "--jupyter-url", &server.url, "1"])
        .env("JUPYTER_TOKEN", "not-the-token")
        .output()
        .unwrap();
    assert!(!wrong.status.success());
    let message = stderr(&wrong);
    assert!(message.contains(&server.url), "{message}");
    assert!(message.contains("refused the token"), "{message}");
    assert!(!message.contains("not-the-token"), "{message}");

    // A port with nothing listening: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let nowhere = format!("http://127.0.0.1:{port}");
    let unreachable = home
        .cli()
        .args(["exec", "--jupyter-url", &nowhere, "1"])
        .env("JUPYTER_TOKEN", &server.token)
        .output()
        .unwrap();
    assert!(!unreachable.status.success());
    let message = stderr(&unreachable);
    assert!(message.contains(&nowhere), "{message}");
    assert!(message.contains("cannot start a kernel"), "{message}");
    server.assert_no_token(&unreachable);

    let missing = home
        .cli()
        .args([
            "exec",
            "--jupyter-url",
            &server.url,
            "--kernel-id",
            "no-such-kernel",
            "1",
        ])
        .env("JUPYTER_TOKEN", &server.token)
        .output()
        .unwrap();
    assert!(!missing.status.success());
    assert!(
        stderr(&missing).contains("there is no kernel no-such-kernel"),
        "{}",
        stderr(&missing)
    );
}

/// A CA and a certificate for 127.0.0.1 signed by it, made with the `openssl` command.
fn make_certificates(dir: &std::path::Path) {
    let openssl = |args: &[&str]| {
        let output = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("the openssl command makes the test certificates");
        assert!(output.status.success(), "openssl {args:?}: {output:?}");
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=pi-repl test CA",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    std::fs::write(
        dir.join("ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "ext",
    ]);
}

#[test]
fn an_https_server_works_when_its_ca_is_trusted_and_fails_clearly_when_not() {
    let certs = tempfile::tempdir().unwrap();
    make_certificates(certs.path());
    let (cert, key) = (
        certs.path().join("server.pem"),
        certs.path().join("server.key"),
    );
    let server = JupyterServer::start_with(|_| {
        vec![
            format!("--ServerApp.certfile={}", cert.display()),
            format!("--ServerApp.keyfile={}", key.display()),
        ]
    });
    assert!(server.url.starts_with("https://"), "{}", server.url);
    let home = TestHome::new();
    let mut trusted = home.cli();
    trusted
        .args([
            "exec",
            "--json",
            "--jupyter-url",
            &server.url,
            "x = 6",
            "x * 7",
        ])
        .env("JUPYTER_TOKEN", &server.token)
        .env("SSL_CERT_FILE", certs.path().join("ca.pem"));
    let output = trusted.output().unwrap();
    server.assert_no_token(&output);
    let cells = outcomes(&output);
    assert_eq!(cells[1]["result"], "42", "{}", stderr(&output));

    let untrusted = home
        .cli()
        .args(["exec", "--jupyter-url", &server.url, "1"])
        .env("JUPYTER_TOKEN", &server.token)
        .env_remove("SSL_CERT_FILE")
        .output()
        .unwrap();
    assert!(!untrusted.status.success());
    let message = stderr(&untrusted);
    assert!(message.contains(&server.url), "{message}");
    assert!(message.contains("certificate"), "{message}");
}

/// Registers Deno's kernel (the binary from the `deno` package in the test venv) with the
/// server's data directory, as `deno jupyter --install` would in the user's.
fn install_deno_kernelspec(server_dir: &std::path::Path) {
    let deno = test_python().with_file_name("deno");
    assert!(
        deno.is_file(),
        "{} is missing: `deno` is in python/test-requirements.txt",
        deno.display()
    );
    let spec_dir = server_dir.join("data").join("kernels").join("deno");
    std::fs::create_dir_all(&spec_dir).unwrap();
    let spec = serde_json::json!({
        "argv": [deno, "jupyter", "--kernel", "--conn", "{connection_file}"],
        "display_name": "Deno",
        "language": "typescript",
    });
    std::fs::write(spec_dir.join("kernel.json"), spec.to_string()).unwrap();
}

#[test]
fn a_deno_kernel_runs_typescript_cells_without_pythons_workspace() {
    let server = JupyterServer::start_with(|dir| {
        install_deno_kernelspec(dir);
        Vec::new()
    });
    let home = TestHome::new();
    let output = server.exec(
        &home,
        &[
            "--kernel",
            "deno",
            "const x: number = 41; x + 1",
            "await Promise.resolve(x * 2)",
            "console.log('from deno'); throw new Error('boom')",
        ],
    );
    let cells = outcomes(&output);
    assert_eq!(cells.len(), 3, "{}", stderr(&output));
    assert_eq!(cells[0]["result"], "42", "{cells:?}");
    let notices = cells[0]["notices"].to_string();
    assert!(notices.contains("typescript, not Python"), "{notices}");
    assert_eq!(cells[1]["result"], "82", "{cells:?}");
    assert_eq!(cells[2]["status"], "error", "{cells:?}");
    assert_eq!(cells[2]["stdout"], "from deno\n", "{cells:?}");
    assert!(cells[2]["error"].to_string().contains("boom"), "{cells:?}");
    assert_eq!(server.kernel_ids(), Vec::<String>::new());

    // Over MCP the tool describes that kernel, not Python's workspace.
    let mut command = home.cli();
    command
        .args(["mcp", "--jupyter-url", &server.url, "--kernel", "deno"])
        .env("JUPYTER_TOKEN", &server.token);
    let mut client = McpClient::spawn(command);
    client.initialize();
    let id = client.request("tools/list", serde_json::json!({}));
    let tools = client.response(id, Duration::from_secs(120));
    let description = tools["result"]["tools"][0]["description"].as_str().unwrap();
    assert!(description.contains("`deno`"), "{description}");
    assert!(!description.contains("IPython"), "{description}");
    let sum = client.execute("[1, 2, 3].reduce((a, b) => a + b, 0)");
    assert_eq!(outcome(&sum)["result"], "6", "{sum}");
    assert!(client.close(Duration::from_secs(60)).is_some());
    assert_eq!(server.kernel_ids(), Vec::<String>::new());
}

#[test]
fn a_stop_signal_to_the_mcp_server_still_shuts_the_remote_kernel_down() {
    let server = JupyterServer::start();
    let home = TestHome::new();
    let mut command = home.cli();
    command
        .args(["mcp", "--jupyter-url", &server.url])
        .env("JUPYTER_TOKEN", &server.token);
    let mut client = McpClient::spawn(command);
    client.initialize();
    let first = client.execute("x = 1");
    assert_eq!(outcome(&first)["status"], "ok", "{first}");
    assert_eq!(server.kernel_ids().len(), 1);
    // What Claude Code and Codex send first when they stop a server.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(client.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status =
        common::exited(&mut client.child, Duration::from_secs(60)).expect("the server exited");
    assert!(status.code().is_some() || status.signal().is_some());
    assert_eq!(server.kernel_ids(), Vec::<String>::new());
}

#[test]
fn a_projects_helper_file_is_sent_to_the_remote_kernel() {
    let server = JupyterServer::start();
    let home = TestHome::new();
    let helpers = home.path().join(".pi").join("helpers");
    std::fs::create_dir_all(&helpers).unwrap();
    std::fs::write(
        helpers.join("greet.py"),
        "def greet(name):\n    \"\"\"Say hello.\"\"\"\n    return f'hi {name}'\n",
    )
    .unwrap();
    let output = server.exec(&home, &["greet('pi')", "greet.__code__.co_filename"]);
    let cells = outcomes(&output);
    assert_eq!(cells[0]["result"], "'hi pi'", "{cells:?}");
    // Loaded from the copy the host sent, not from the host's path.
    let loaded_from = cells[1]["result"].as_str().unwrap_or_default();
    assert!(loaded_from.contains("pi-repl-modules-"), "{loaded_from}");
    assert!(loaded_from.contains("/helpers-"), "{loaded_from}");
    assert!(!loaded_from.contains(".pi/helpers"), "{loaded_from}");
}

/// Every `manifest.json` under `dir`.
fn manifests(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.file_name().is_some_and(|name| name == "manifest.json") {
                found.push(path);
            }
        }
    }
    found
}

#[test]
fn a_remote_snapshot_dir_keeps_the_session_on_the_kernels_machine_and_revives_from_it() {
    let server = JupyterServer::start();
    let home = TestHome::new();
    let far = tempfile::tempdir().unwrap();
    let run = |cell: &str| {
        let output = home
            .cli()
            .args([
                "exec",
                "--json",
                "--jupyter-url",
                &server.url,
                "--session",
                "kept",
            ])
            .arg(cell)
            .env("JUPYTER_TOKEN", &server.token)
            .env("PI_REPL_REMOTE_SNAPSHOT_DIR", far.path())
            .output()
            .unwrap();
        server.assert_no_token(&output);
        output
    };
    let first = run("numbers = [4, 5, 6]");
    assert!(first.status.success(), "{}", stderr(&first));
    let second = run("numbers");
    let cells = outcomes(&second);
    assert_eq!(cells[0]["result"], "[4, 5, 6]", "{cells:?}");
    assert_eq!(cells[0]["reset"]["revived"][0], "numbers", "{cells:?}");
    // The store is where the kernel's machine keeps it, with the key beside it; the host's
    // session directory holds no snapshot.
    assert_eq!(
        manifests(far.path()).len(),
        1,
        "{:?}",
        manifests(far.path())
    );
    assert!(far.path().join("snapshot.key").is_file());
    assert_eq!(manifests(home.home.root()), Vec::<PathBuf>::new());
}

#[test]
fn enterprise_gateway_refusals_are_clear_errors_naming_the_gateway_and_its_reason() {
    let me = Command::new("id").arg("-un").output().expect("id -un");
    let me = String::from_utf8(me.stdout).unwrap().trim().to_string();
    let server = JupyterServer::enterprise_gateway_refusing(&[&me]);
    let home = TestHome::new();
    let refused = server.exec(&home, &["1"]);
    assert_eq!(refused.status.code(), Some(5), "{}", stderr(&refused));
    let message = stderr(&refused);
    assert!(message.contains(&server.url), "{message}");
    // The gateway's own reason, not a guess about the token.
    assert!(
        message.contains(&format!("User '{me}' is not authorized to start kernel")),
        "{message}"
    );
    assert!(!message.contains("refused the token"), "{message}");

    let wrong = home
        .cli()
        .args(["exec", "--jupyter-url", &server.url, "1"])
        .env("JUPYTER_TOKEN", "not-the-token")
        .output()
        .unwrap();
    let message = stderr(&wrong);
    assert!(message.contains("refused the token"), "{message}");
    assert!(!message.contains("not-the-token"), "{message}");
}
