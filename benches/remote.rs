//! Remote-kernel benchmark: the same engine driving a local kernel (ZMQ over IPC) and a kernel
//! on a Jupyter Server on loopback (REST + WebSocket), measured in one run.
//!
//! Rows:
//! 1. `1+1` round trip, `CELLS` sequential cells, local vs remote, in alternating rounds.
//!    The floor beside it: Python's tornado WebSocket client against the same server.
//! 2. Cold start to the first result (kernel start, handshake, and for the remote kernel the
//!    module sent in its first silent cell), median of `COLD_STARTS`, local vs remote.
//!
//! Run: `PI_REPL_PYTHON=target/test-home/venv/bin/python cargo bench --bench remote` (an
//! interpreter with `jupyter-server` installed, as the test venv has: python/test-requirements.txt).
//! With `PI_REPL_BENCH_EG_VENV` set to a venv with Jupyter Enterprise Gateway (the one
//! `tests/remote_kernel.rs` creates under `target/tmp/enterprise-gateway-*`), row 1 also runs
//! a kernel on a gateway on loopback, in the same alternating rounds.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pi_repl::engine::{CellOptions, Engine};
use pi_repl::home::Home;
use pi_repl::kernel::jupyter_server::ServerSpec;

#[path = "common/support.rs"]
mod support;
use support::config;

const CELLS: usize = 300;

/// The floor: Python's tornado WebSocket client (the server's own library) against the same
/// server, JSON protocol, `1+1` until its `execute_reply` and `idle` are in.
const PYTHON_CLIENT: &str = r#"
import json, sys, time, uuid, urllib.request
from tornado import ioloop, websocket, httpclient
url, token, cells = sys.argv[1], sys.argv[2], int(sys.argv[3])
auth = {"Authorization": "token " + token}
req = urllib.request.Request(url + "/api/kernels", method="POST", data=b"{}", headers=auth)
kid = json.load(urllib.request.urlopen(req))["id"]
async def main():
    ws = await websocket.websocket_connect(httpclient.HTTPRequest(
        url.replace("http", "ws") + "/api/kernels/" + kid + "/channels", headers=auth))
    session = uuid.uuid4().hex
    async def run():
        mid = uuid.uuid4().hex
        ws.write_message(json.dumps({"header": {"msg_id": mid, "msg_type": "execute_request",
            "session": session, "username": "", "version": "5.3", "date": ""},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": "1+1", "silent": False, "store_history": True,
                        "user_expressions": {}, "allow_stdin": False, "stop_on_error": False}}))
        reply = idle = False
        while not (reply and idle):
            m = json.loads(await ws.read_message())
            if m.get("parent_header", {}).get("msg_id") != mid:
                continue
            reply = reply or m["msg_type"] == "execute_reply"
            idle = idle or (m["msg_type"] == "status" and m["content"]["execution_state"] == "idle")
    await run()
    times = []
    for _ in range(cells):
        t = time.perf_counter()
        await run()
        times.append((time.perf_counter() - t) * 1000)
    ws.close()
    print(json.dumps(times))
try:
    ioloop.IOLoop.current().run_sync(main)
finally:
    urllib.request.urlopen(urllib.request.Request(url + "/api/kernels/" + kid, method="DELETE", headers=auth))
"#;
const ROUND: usize = 50;
const COLD_STARTS: usize = 5;

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("remote: benchmark");
        return;
    }
    let python = PathBuf::from(
        std::env::var_os("PI_REPL_PYTHON")
            .expect("set PI_REPL_PYTHON to an interpreter with jupyter-server (the test venv)"),
    );
    println!("interpreter: {}", python.display());
    let server = Server::start(&python);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("temp");
    let home = Home::at(dir.path());
    let local = config(&python, &home);
    let mut remote = config(&python, &home);
    remote.kernel.remote =
        Some(ServerSpec::new(&server.url, Some(server.token.clone()), None, None).expect("spec"));
    let gateway = std::env::var_os("PI_REPL_BENCH_EG_VENV")
        .map(|venv| Gateway::start(Path::new(&venv), &python));
    let on_gateway = gateway.as_ref().map(|gateway| {
        let mut config = config(&python, &home);
        config.kernel.remote = Some(
            ServerSpec::new(&gateway.url, Some(gateway.token.clone()), None, None).expect("spec"),
        );
        config
    });
    runtime.block_on(async {
        let mut configs = vec![&local, &remote];
        configs.extend(on_gateway.as_ref());
        let timings = round_trips(&configs).await;
        let ((local_median, local_p90), (remote_median, remote_p90)) = (timings[0], timings[1]);
        println!(
            "\n1+1 round trip, {CELLS} sequential cells each, same engine code, alternating \
             rounds of {ROUND}"
        );
        println!("  local kernel (ZMQ over IPC)            median {local_median:.2} ms   p90 {local_p90:.2} ms");
        println!("  Jupyter Server on loopback (WebSocket) median {remote_median:.2} ms   p90 {remote_p90:.2} ms");
        println!("  ratio remote / local (median): {:.2}x", remote_median / local_median);
        if let Some((gateway_median, gateway_p90)) = timings.get(2) {
            println!("  Enterprise Gateway on loopback (JSON) median {gateway_median:.2} ms   p90 {gateway_p90:.2} ms");
            println!("  ratio gateway / local (median): {:.2}x", gateway_median / local_median);
        }
        let mut floor = python_client(&python, &server);
        let (floor_median, floor_p90) = summary(&mut floor);
        println!("  tornado client (Python), same server  median {floor_median:.2} ms   p90 {floor_p90:.2} ms");
        println!("  ratio pi-repl remote / tornado client (median): {:.2}x", remote_median / floor_median);

        let local_start = cold_start(&local).await;
        let remote_start = cold_start(&remote).await;
        println!("\ncold start to the first result, median of {COLD_STARTS}");
        println!("  local kernel                          {local_start:.0} ms");
        println!("  Jupyter Server on loopback            {remote_start:.0} ms");
        println!("  ratio remote / local: {:.2}x", remote_start / local_start);
    });
}

fn python_client(python: &Path, server: &Server) -> Vec<f64> {
    let output = Command::new(python)
        .args([
            "-c",
            PYTHON_CLIENT,
            &server.url,
            &server.token,
            &CELLS.to_string(),
        ])
        .output()
        .expect("python client");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("timings")
}

fn summary(times: &mut [f64]) -> (f64, f64) {
    times.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    (times[times.len() / 2], times[times.len() * 9 / 10])
}

/// The engines run at once and take turns, `ROUND` cells each, so a busy spell on the shared
/// machine hits every side alike. Median and p90 per engine, in the order given.
async fn round_trips(configs: &[&pi_repl::engine::EngineConfig]) -> Vec<(f64, f64)> {
    let engines: Vec<Engine> = configs
        .iter()
        .map(|config| Engine::start((*config).clone()))
        .collect();
    for engine in &engines {
        engine
            .submit("1+1", CellOptions::default())
            .outcome()
            .await
            .expect("warm-up");
    }
    let mut times = vec![Vec::with_capacity(CELLS); engines.len()];
    for _ in 0..CELLS / ROUND {
        for (engine, times) in engines.iter().zip(times.iter_mut()) {
            for _ in 0..ROUND {
                times.push(support::timed_one_plus_one(engine).await);
            }
        }
    }
    for engine in &engines {
        engine.shutdown().await;
    }
    times.iter_mut().map(|times| summary(times)).collect()
}

async fn cold_start(config: &pi_repl::engine::EngineConfig) -> f64 {
    let mut times = Vec::with_capacity(COLD_STARTS);
    for _ in 0..COLD_STARTS {
        let started = Instant::now();
        let engine = Engine::start(config.clone());
        let outcome = engine
            .submit("1+1", CellOptions::default())
            .outcome()
            .await
            .expect("cell");
        times.push(started.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(outcome.result.as_deref(), Some("2"));
        engine.shutdown().await;
    }
    summary(&mut times).0
}

/// A Jupyter Server on 127.0.0.1 with a random port and token, stopped when dropped.
struct Server {
    child: Child,
    url: String,
    token: String,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start(python: &Path) -> Server {
        let dir = tempfile::tempdir().expect("temp");
        let token = uuid::Uuid::new_v4().simple().to_string();
        let config = dir.path().join("jupyter_server_config.json");
        std::fs::write(
            &config,
            serde_json::json!({"IdentityProvider": {"token": token}}).to_string(),
        )
        .expect("config");
        let runtime = dir.path().join("runtime");
        let child = Command::new(python)
            .args(["-m", "jupyter_server", "--no-browser", "--allow-root"])
            .arg("--ServerApp.ip=127.0.0.1")
            .arg("--ServerApp.port=0")
            .arg(format!("--ServerApp.root_dir={}", dir.path().display()))
            .arg(format!("--config={}", config.display()))
            .env("JUPYTER_RUNTIME_DIR", &runtime)
            .env("JUPYTER_CONFIG_DIR", dir.path().join("config"))
            .env("JUPYTER_DATA_DIR", dir.path().join("data"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start jupyter server");
        let deadline = Instant::now() + Duration::from_secs(60);
        let port = loop {
            if let Some(port) = server_port(&runtime) {
                break port;
            }
            assert!(
                Instant::now() < deadline,
                "the Jupyter Server did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        Server {
            child,
            url: format!("http://127.0.0.1:{port}"),
            token,
            _dir: dir,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SIGTERM: the server shuts its kernels down. Best effort: the bench is over.
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }
}

/// Jupyter Enterprise Gateway on 127.0.0.1 (as `tests/remote_kernel.rs` starts it: a token and
/// a `python3` kernelspec running `python`'s ipykernel, root allowed), stopped when dropped.
struct Gateway {
    child: Child,
    url: String,
    token: String,
    _dir: tempfile::TempDir,
}

impl Gateway {
    fn start(venv: &Path, python: &Path) -> Gateway {
        let dir = tempfile::tempdir().expect("temp");
        let token = uuid::Uuid::new_v4().simple().to_string();
        let config_dir = dir.path().join("config");
        std::fs::create_dir_all(&config_dir).expect("config dir");
        std::fs::write(
            config_dir.join("jupyter_enterprise_gateway_config.json"),
            serde_json::json!({"EnterpriseGatewayApp": {
                "auth_token": token, "unauthorized_users": []}})
            .to_string(),
        )
        .expect("config");
        let spec_dir = dir.path().join("data/kernels/python3");
        std::fs::create_dir_all(&spec_dir).expect("kernelspec dir");
        std::fs::write(
            spec_dir.join("kernel.json"),
            serde_json::json!({
                "argv": [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "Python 3", "language": "python"})
            .to_string(),
        )
        .expect("kernelspec");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new(venv.join("bin/jupyter-enterprisegateway"))
            .args([
                "--ip=127.0.0.1",
                &format!("--port={port}"),
                "--port_retries=0",
            ])
            .env("JUPYTER_RUNTIME_DIR", dir.path().join("runtime"))
            .env("JUPYTER_CONFIG_DIR", &config_dir)
            .env("JUPYTER_DATA_DIR", dir.path().join("data"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start jupyter-enterprisegateway");
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "the gateway did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Gateway {
            child,
            url: format!("http://127.0.0.1:{port}"),
            token,
            _dir: dir,
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        // SIGTERM: the gateway shuts its kernels down. Best effort: the bench is over.
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }
}

fn server_port(runtime: &Path) -> Option<u64> {
    for entry in std::fs::read_dir(runtime).ok()?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("jpserver-") && name.ends_with(".json") {
            let text = std::fs::read_to_string(entry.path()).ok()?;
            let info: serde_json::Value = serde_json::from_str(&text).ok()?;
            if let Some(port) = info["port"].as_u64() {
                return Some(port);
            }
        }
    }
    None
}
