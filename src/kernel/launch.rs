//! Starting a kernel process: private runtime dir, connection file, environment, process group.
//!
//! Owns: everything up to a spawned child whose sockets will appear in the runtime dir.
//! Does not own: connecting or the handshake (`kernel::Kernel::start`).
//!
//! Invariants: IPC sockets only, inside a fresh 0700 directory; a fresh random HMAC key per
//! kernel; the kernel leads its own process group; its fd 0 is a lifeline pipe only the host
//! holds, so it ends when the host does (even on SIGKILL).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use jupyter_protocol::ConnectionInfo;
use jupyter_protocol::connection_info::Transport;

use super::KernelError;
use super::environment::kernel_environment;
use crate::interpreter::Interpreter;
use crate::kernel_module::BOOTSTRAP;

/// What a kernel needs to start.
#[derive(Debug, Clone)]
pub struct KernelSpec {
    pub python: Interpreter,
    /// The session's working directory; the host's is used if it no longer exists.
    pub cwd: PathBuf,
    /// Directory holding the unpacked `pi_repl_kernel` package.
    pub module_dir: PathBuf,
    /// IPYTHONDIR for the kernel (unless the user set one).
    pub ipython_dir: PathBuf,
    /// Pass `*_API_KEY`, `*_TOKEN`, ... to the kernel.
    pub pass_credentials: bool,
    /// Extra variables for the kernel-side module.
    pub extra_env: Vec<(String, String)>,
}

/// The socket-name suffixes: the five channels become `<dir>/kernel-<n>`.
const SHELL: u16 = 1;
const IOPUB: u16 = 2;
const STDIN: u16 = 3;
const CONTROL: u16 = 4;
const HEARTBEAT: u16 = 5;

/// A fresh private directory and the connection info pointing into it.
pub struct RuntimeDir {
    /// Held so the directory (and the sockets in it) is removed when the kernel is dropped.
    _dir: tempfile::TempDir,
    pub connection: ConnectionInfo,
    pub connection_file: PathBuf,
}

impl RuntimeDir {
    pub fn create() -> Result<RuntimeDir, KernelError> {
        let dir = tempfile::Builder::new()
            .prefix("pi-repl-")
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()
            .map_err(|source| KernelError::Io {
                context: "cannot create the kernel's runtime directory".into(),
                source,
            })?;
        let connection = ConnectionInfo {
            ip: dir.path().join("kernel").display().to_string(),
            transport: Transport::IPC,
            shell_port: SHELL,
            iopub_port: IOPUB,
            stdin_port: STDIN,
            control_port: CONTROL,
            hb_port: HEARTBEAT,
            key: random_key(),
            signature_scheme: "hmac-sha256".to_string(),
            kernel_name: Some("python3".to_string()),
        };
        let connection_file = dir.path().join("connection.json");
        let json = serde_json::to_vec(&connection).map_err(|e| KernelError::Io {
            context: "cannot encode the connection file".into(),
            source: std::io::Error::other(e),
        })?;
        write_private(&connection_file, &json).map_err(|source| KernelError::Io {
            context: format!("cannot write {}", connection_file.display()),
            source,
        })?;
        Ok(RuntimeDir {
            _dir: dir,
            connection,
            connection_file,
        })
    }

    /// The socket files the kernel binds; all exist once it is listening.
    pub fn socket_paths(&self) -> Vec<PathBuf> {
        [SHELL, IOPUB, STDIN, CONTROL, HEARTBEAT]
            .iter()
            .map(|n| PathBuf::from(format!("{}-{n}", self.connection.ip)))
            .collect()
    }
}

/// 256 random bits, hex encoded.
fn random_key() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)
}

/// The working directory the kernel actually gets: `wanted`, or the host's own if `wanted` is
/// gone. Returns the directory and whether it fell back.
pub fn working_dir(wanted: &Path) -> (PathBuf, bool) {
    if wanted.is_dir() {
        (wanted.to_path_buf(), false)
    } else {
        let fallback = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        (fallback, true)
    }
}

/// Spawns the kernel process. The returned child has its lifeline on stdin and stderr piped.
pub fn spawn(
    spec: &KernelSpec,
    runtime: &RuntimeDir,
) -> Result<tokio::process::Child, KernelError> {
    let (cwd, fell_back) = working_dir(&spec.cwd);
    if fell_back {
        tracing::warn!(
            wanted = %spec.cwd.display(),
            using = %cwd.display(),
            "the session's working directory is gone; the kernel starts in the host's"
        );
    }
    let (env, removed) = kernel_environment(std::env::vars_os(), spec.pass_credentials);
    if !removed.is_empty() {
        tracing::debug!(?removed, "credentials not passed to the kernel");
    }
    let mut command = tokio::process::Command::new(&spec.python.path);
    command
        .arg("-c")
        .arg(BOOTSTRAP)
        .arg(&spec.module_dir)
        .arg("-f")
        .arg(&runtime.connection_file)
        .env_clear()
        .envs(env)
        .env("JPY_PARENT_PID", std::process::id().to_string())
        .current_dir(&cwd)
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(false);
    if std::env::var_os("IPYTHONDIR").is_none() {
        command.env("IPYTHONDIR", &spec.ipython_dir);
    }
    for (name, value) in &spec.extra_env {
        command.env(name, value);
    }
    command.spawn().map_err(|source| KernelError::Spawn {
        python: spec.python.clone(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_dir_is_private_and_uses_ipc() {
        let runtime = RuntimeDir::create().unwrap();
        let mode = std::fs::metadata(runtime.connection_file.parent().unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o700);
        let file_mode = std::fs::metadata(&runtime.connection_file)
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(file_mode, 0o600);
        assert_eq!(runtime.connection.transport, Transport::IPC);
        assert!(runtime.connection.shell_url().starts_with("ipc://"));
        assert_eq!(runtime.connection.key.len(), 64);
        let other = RuntimeDir::create().unwrap();
        assert_ne!(runtime.connection.key, other.connection.key);
    }

    #[test]
    fn a_missing_cwd_falls_back_to_the_hosts() {
        let (dir, fell_back) = working_dir(Path::new("/no/such/dir/anywhere"));
        assert!(fell_back);
        assert_eq!(dir, std::env::current_dir().unwrap());
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(working_dir(tmp.path()), (tmp.path().to_path_buf(), false));
    }
}
