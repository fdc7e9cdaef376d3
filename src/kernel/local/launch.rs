//! Starting a kernel process: private runtime dir, connection file, environment, process group.
//!
//! Owns: everything up to a spawned child whose sockets will appear in the runtime dir (or, for
//! an installed kernelspec, on loopback ports), and the kernelspec launch (`spawn_kernelspec`).
//! Does not own: connecting or the handshake (`kernel::Kernel::start`).
//!
//! Invariants: pi-repl's ipykernel gets IPC sockets only, inside a fresh 0700 directory; a
//! kernelspec's kernel (which may not speak IPC) gets TCP on 127.0.0.1, ports picked by binding
//! and released before it starts; a fresh random HMAC key per kernel; the process the host
//! starts leads its own process group (the kernel, or with process isolation its launcher:
//! `isolation`); a lifeline pipe only the host holds ends it when the host does (even on
//! SIGKILL): pi-repl's kernel reads it on fd 0, a kernelspec's kernel has a watcher beside it in
//! its group (`LIFELINE_WATCHER`).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use jupyter_protocol::ConnectionInfo;
use jupyter_protocol::connection_info::Transport;

use crate::kernel::KernelError;
use crate::kernel::environment::kernel_environment;
use crate::python_env::embedded_package::BOOTSTRAP;
use crate::python_env::interpreter::Interpreter;

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
    /// Pass every credential (`*_API_KEY`, `*_TOKEN`, ...) to the kernel.
    pub pass_credentials: bool,
    /// Pass these variables even though they look like credentials.
    pub pass_env: Vec<String>,
    /// Extra variables for the kernel-side module.
    pub extra_env: Vec<(String, String)>,
    /// Variables never passed, whatever `pass_credentials` and `pass_env` say (the host's own
    /// key for `llm_query`'s endpoint).
    pub withhold: Vec<String>,
    /// Start a local kernel in a PID namespace of its own, where a cell sees only the kernel's
    /// processes (`isolation`); where that is unavailable the kernel starts without.
    pub isolate_processes: bool,
    /// Start pi-repl's own ipykernel with its heap on transparent huge pages, so that forking
    /// it (captures, saves) copies few page tables (`huge_pages`).
    pub huge_pages: bool,
    /// Run the kernel on this Jupyter Server instead of launching it here; the fields above
    /// that describe a local process (interpreter, environment, working directory) are unused.
    pub remote: Option<crate::kernel::jupyter_server::ServerSpec>,
    /// Launch this installed kernelspec here instead of pi-repl's ipykernel (`--kernel NAME`);
    /// `python` is then unused.
    pub kernelspec: Option<super::kernelspecs::Kernelspec>,
}

/// Runs a kernelspec's command (`"$@"`) with a watcher in its process group: the watcher reads
/// the lifeline (moved to fd 3) until the host closes it, by exiting or being killed, then
/// kills the group. It ignores SIGINT and SIGTERM, which the host sends the group to interrupt
/// or stop the kernel. The kernel gets /dev/null on fd 0 and keeps the shell's pid, so the
/// host's child is the kernel itself.
const LIFELINE_WATCHER: &str = "exec 3<&0 0</dev/null
( trap '' INT TERM; cat <&3 >/dev/null 2>&1; kill -s KILL 0 ) &
exec \"$@\" 3<&-";

/// The socket-name suffixes: the five channels become `<dir>/kernel-<n>`.
const SHELL: u16 = 1;
const IOPUB: u16 = 2;
const STDIN: u16 = 3;
const CONTROL: u16 = 4;
const HEARTBEAT: u16 = 5;

/// A fresh private directory and the connection info pointing into it.
pub struct RuntimeDir {
    /// Held so the directory (and the sockets in it) is removed when the kernel is dropped.
    dir: OwnedDir,
    pub connection: ConnectionInfo,
    pub connection_file: PathBuf,
}

/// A runtime directory this host removes when it is done with it.
enum OwnedDir {
    /// Made here.
    Temp(tempfile::TempDir),
    /// Made by another process and taken over (`RuntimeDir::adopt`).
    Adopted(PathBuf),
}

impl Drop for OwnedDir {
    fn drop(&mut self) {
        if let OwnedDir::Adopted(dir) = self
            && let Err(error) = std::fs::remove_dir_all(&*dir)
            && error.kind() != std::io::ErrorKind::NotFound
        {
            tracing::debug!(%error, dir = %dir.display(), "cannot remove an adopted runtime directory");
        }
    }
}

impl RuntimeDir {
    /// A new runtime directory for pi-repl's ipykernel, its sockets inside (IPC).
    pub fn create() -> Result<RuntimeDir, KernelError> {
        RuntimeDir::create_with(|dir| ConnectionInfo {
            ip: dir.join("kernel").display().to_string(),
            transport: Transport::IPC,
            shell_port: SHELL,
            iopub_port: IOPUB,
            stdin_port: STDIN,
            control_port: CONTROL,
            hb_port: HEARTBEAT,
            key: random_key(),
            signature_scheme: "hmac-sha256".to_string(),
            kernel_name: Some("python3".to_string()),
        })
    }

    /// A new runtime directory for a kernelspec's kernel: the connection file inside, the
    /// channels on five free TCP ports of 127.0.0.1 (IPC is not something every kernel speaks).
    pub fn create_tcp(kernel_name: &str) -> Result<RuntimeDir, KernelError> {
        let ports = free_loopback_ports().map_err(|source| KernelError::Io {
            context: "cannot find free ports on 127.0.0.1 for the kernel".into(),
            source,
        })?;
        RuntimeDir::create_with(|_| ConnectionInfo {
            ip: "127.0.0.1".to_string(),
            transport: Transport::TCP,
            shell_port: ports[0],
            iopub_port: ports[1],
            stdin_port: ports[2],
            control_port: ports[3],
            hb_port: ports[4],
            key: random_key(),
            signature_scheme: "hmac-sha256".to_string(),
            kernel_name: Some(kernel_name.to_string()),
        })
    }

    /// A new runtime directory, named after this host process (`pi-repl-<pid>-…`), holding the
    /// connection file `connection` makes; those of hosts that are gone (killed before they
    /// could clean up) are removed first.
    fn create_with(
        connection: impl FnOnce(&Path) -> ConnectionInfo,
    ) -> Result<RuntimeDir, KernelError> {
        sweep_stale(&std::env::temp_dir());
        let dir = tempfile::Builder::new()
            .prefix(&format!("{RUNTIME_PREFIX}{}-", std::process::id()))
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()
            .map_err(|source| KernelError::Io {
                context: "cannot create the kernel's runtime directory".into(),
                source,
            })?;
        let connection = connection(dir.path());
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
            dir: OwnedDir::Temp(dir),
            connection,
            connection_file,
        })
    }

    /// Takes over the runtime directory another process made (a live fork's, made by its
    /// parent kernel): its connection file is read here, and the directory is removed when the
    /// kernel is dropped, as a directory this host made.
    pub fn adopt(dir: &Path) -> Result<RuntimeDir, KernelError> {
        let connection_file = dir.join("connection.json");
        let read = std::fs::read(&connection_file).map_err(|source| KernelError::Io {
            context: format!("cannot read {}", connection_file.display()),
            source,
        })?;
        let connection: ConnectionInfo =
            serde_json::from_slice(&read).map_err(|e| KernelError::Io {
                context: format!("cannot read {}", connection_file.display()),
                source: std::io::Error::other(e),
            })?;
        Ok(RuntimeDir {
            dir: OwnedDir::Adopted(dir.to_path_buf()),
            connection,
            connection_file,
        })
    }

    /// The directory itself.
    pub fn path(&self) -> &Path {
        match &self.dir {
            OwnedDir::Temp(dir) => dir.path(),
            OwnedDir::Adopted(dir) => dir,
        }
    }

    /// Removes the connection file (with the key) once the kernel has read it.
    pub fn forget_connection_file(&self) {
        if let Err(error) = std::fs::remove_file(&self.connection_file)
            && error.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(%error, "cannot remove the kernel's connection file");
        }
    }

    /// The socket files the kernel binds; all exist once it is listening. None over TCP.
    pub fn socket_paths(&self) -> Vec<PathBuf> {
        if self.connection.transport != Transport::IPC {
            return Vec::new();
        }
        [SHELL, IOPUB, STDIN, CONTROL, HEARTBEAT]
            .iter()
            .map(|n| PathBuf::from(format!("{}-{n}", self.connection.ip)))
            .collect()
    }
}

/// How every runtime directory's name starts: `pi-repl-<host pid>-<random>`.
const RUNTIME_PREFIX: &str = "pi-repl-";

/// Removes the runtime directories in `dir` whose host process is gone. A directory whose pid
/// is alive (maybe reused) is left alone; one that cannot be removed is only logged.
fn sweep_stale(dir: &Path) {
    use std::os::unix::fs::MetadataExt;
    // Our own uid, without another nix feature: /proc/self belongs to us.
    let (Ok(entries), Ok(me)) = (std::fs::read_dir(dir), std::fs::metadata("/proc/self")) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(RUNTIME_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let mine = entry.metadata().is_ok_and(|m| m.uid() == me.uid());
        if !mine || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        if let Err(error) = std::fs::remove_dir_all(entry.path()) {
            tracing::debug!(%error, path = %entry.path().display(), "cannot remove a stale runtime directory");
        }
    }
}

/// Five distinct free TCP ports on 127.0.0.1: all bound at once (so they differ), then released
/// before the kernel starts (the listeners are close-on-exec and closed here: nothing of ours
/// holds them when the kernel binds).
fn free_loopback_ports() -> std::io::Result<[u16; 5]> {
    let listeners = (0..5)
        .map(|_| std::net::TcpListener::bind(("127.0.0.1", 0)))
        .collect::<std::io::Result<Vec<_>>>()?;
    let mut ports = [0u16; 5];
    for (port, listener) in ports.iter_mut().zip(&listeners) {
        *port = listener.local_addr()?.port();
    }
    Ok(ports)
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
    crate::fsutil::write_new(path, bytes)
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

/// The variables a kernel this host launched for `spec` would see, as text (a variable that is
/// not UTF-8 is left out): its environment (`where_and_with_what`) and what `spawn` adds, but
/// not what only a launch needs (`JPY_PARENT_PID`, the isolation and huge-page requests). A
/// live fork takes these in place of its parent's (`pi_repl_kernel.live_fork.take_environment`).
pub fn kernel_variables(spec: &KernelSpec, tag: &str) -> Vec<(String, String)> {
    let (_, env) = where_and_with_what(spec);
    let mut variables: Vec<(String, String)> = env
        .into_iter()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
        .collect();
    variables.push((
        super::processes::HOST_ID_VAR.to_string(),
        super::processes::own_identity(),
    ));
    variables.push((super::leftovers::TAG_VAR.to_string(), tag.to_string()));
    if std::env::var_os("IPYTHONDIR").is_none() {
        variables.push((
            "IPYTHONDIR".to_string(),
            spec.ipython_dir.display().to_string(),
        ));
    }
    variables.extend(spec.extra_env.iter().cloned());
    variables
}

/// The directory a local kernel starts in (the host's, with a warning, when the session's is
/// gone) and its environment (the host's, credentials removed as `spec` says).
fn where_and_with_what(
    spec: &KernelSpec,
) -> (PathBuf, Vec<(std::ffi::OsString, std::ffi::OsString)>) {
    let (cwd, fell_back) = working_dir(&spec.cwd);
    if fell_back {
        tracing::warn!(
            wanted = %spec.cwd.display(),
            using = %cwd.display(),
            "the session's working directory is gone; the kernel starts in the host's"
        );
    }
    let (env, removed) = kernel_environment(
        std::env::vars_os(),
        spec.pass_credentials,
        &spec.pass_env,
        &spec.withhold,
    );
    if !removed.is_empty() {
        let removed: Vec<String> = removed.iter().map(ToString::to_string).collect();
        tracing::debug!(
            ?removed,
            "credentials not passed to the kernel (names and rules only)"
        );
    }
    (cwd, env)
}

/// Spawns the kernel process. The returned child has its lifeline on stdin and stderr piped.
/// `tag` marks the kernel and what it starts (`leftovers`).
pub fn spawn(
    spec: &KernelSpec,
    runtime: &RuntimeDir,
    tag: &str,
) -> Result<tokio::process::Child, KernelError> {
    let (cwd, env) = where_and_with_what(spec);
    let mut command = tokio::process::Command::new(&spec.python.path);
    command
        .arg("-c")
        .arg(BOOTSTRAP)
        .arg(&spec.module_dir)
        .arg("-f")
        .arg(&runtime.connection_file)
        .env_clear()
        .envs(env.iter().cloned())
        .env("JPY_PARENT_PID", std::process::id().to_string())
        .env(
            super::processes::HOST_ID_VAR,
            super::processes::own_identity(),
        )
        .env(super::leftovers::TAG_VAR, tag)
        .current_dir(&cwd)
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(false);
    if std::env::var_os("IPYTHONDIR").is_none() {
        // IPython would create it 0755; it holds the kernel's profile and history settings.
        if let Err(error) = crate::fsutil::create_private_dir(&spec.ipython_dir) {
            tracing::warn!(%error, dir = %spec.ipython_dir.display(), "cannot create IPYTHONDIR");
        }
        command.env("IPYTHONDIR", &spec.ipython_dir);
    }
    if spec.isolate_processes {
        command.env(super::isolation::ISOLATE_VAR, "1");
    }
    if spec.huge_pages {
        let user = env
            .iter()
            .find(|(name, _)| name == super::huge_pages::TUNABLES_VAR)
            .map(|(_, value)| value.as_os_str());
        command.envs(super::huge_pages::variables(user));
    }
    for (name, value) in &spec.extra_env {
        command.env(name, value);
    }
    command.spawn().map_err(|source| KernelError::Spawn {
        python: spec.python.clone(),
        source,
    })
}

/// Spawns an installed kernelspec's kernel: its argv (`{connection_file}` and `{resource_dir}`
/// filled in) under `LIFELINE_WATCHER`, with the same environment rules as pi-repl's kernel
/// plus the kernelspec's `env`, in its own process group, stderr piped.
pub fn spawn_kernelspec(
    spec: &KernelSpec,
    kernelspec: &super::kernelspecs::Kernelspec,
    runtime: &RuntimeDir,
    tag: &str,
) -> Result<tokio::process::Child, KernelError> {
    let (cwd, env) = where_and_with_what(spec);
    let connection_file = runtime.connection_file.display().to_string();
    let resource_dir = kernelspec.dir.display().to_string();
    let argv: Vec<String> = kernelspec
        .argv
        .iter()
        .map(|arg| {
            arg.replace("{connection_file}", &connection_file)
                .replace("{resource_dir}", &resource_dir)
        })
        .collect();
    let program = Path::new(&argv[0]);
    let found = if program.components().count() > 1 {
        program.is_file()
    } else {
        crate::python_env::find_on_path(&argv[0]).is_some()
    };
    if !found {
        return Err(KernelError::Kernelspec {
            name: kernelspec.name.clone(),
            detail: format!(
                "its command {} is not installed ({})",
                argv[0],
                kernelspec.dir.join("kernel.json").display()
            ),
        });
    }
    let mut command = tokio::process::Command::new("/bin/sh");
    command
        .arg("-c")
        .arg(LIFELINE_WATCHER)
        .arg("pi-repl-kernel")
        .args(&argv)
        .env_clear()
        .envs(env)
        .envs(&kernelspec.env)
        .env("JPY_PARENT_PID", std::process::id().to_string())
        .env(super::leftovers::TAG_VAR, tag)
        .current_dir(&cwd)
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(false);
    for (name, value) in &spec.extra_env {
        command.env(name, value);
    }
    command.spawn().map_err(|source| KernelError::Kernelspec {
        name: kernelspec.name.clone(),
        detail: format!("cannot start {}: {source}", argv[0]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_dirs_of_hosts_that_are_gone_are_swept() {
        let tmp = tempfile::tempdir().unwrap();
        // Above the kernel's pid_max: no such process can exist.
        let gone = tmp.path().join("pi-repl-999999999-abc");
        let alive = tmp
            .path()
            .join(format!("pi-repl-{}-def", std::process::id()));
        let other = tmp.path().join("pi-repl-notes");
        for dir in [&gone, &alive, &other] {
            std::fs::create_dir(dir).unwrap();
            std::fs::write(dir.join("connection.json"), b"{}").unwrap();
        }
        sweep_stale(tmp.path());
        assert!(!gone.exists());
        assert!(alive.exists() && other.exists());
    }

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
    fn the_host_names_itself_by_pid_and_start_time() {
        let id = super::super::processes::own_identity();
        let (pid, start) = id.split_once('.').expect("pid.start");
        assert_eq!(pid, std::process::id().to_string());
        assert!(start.parse::<u64>().is_ok(), "{id}");
    }

    #[test]
    fn a_kernelspecs_runtime_dir_is_private_and_uses_five_loopback_ports() {
        let runtime = RuntimeDir::create_tcp("deno").unwrap();
        let mode = std::fs::metadata(runtime.connection_file.parent().unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o700);
        let connection = &runtime.connection;
        assert_eq!(connection.transport, Transport::TCP);
        assert_eq!(connection.ip, "127.0.0.1");
        assert_eq!(connection.kernel_name.as_deref(), Some("deno"));
        let mut ports = vec![
            connection.shell_port,
            connection.iopub_port,
            connection.stdin_port,
            connection.control_port,
            connection.hb_port,
        ];
        ports.sort();
        ports.dedup();
        assert_eq!(ports.len(), 5, "{ports:?}");
        // Released: the kernel can bind them.
        for port in ports {
            drop(std::net::TcpListener::bind(("127.0.0.1", port)).unwrap());
        }
        assert!(runtime.socket_paths().is_empty());
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
