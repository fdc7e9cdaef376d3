//! A live fork: a copy of another pi-repl kernel, forked by that kernel from inside a cell
//! (`pi_repl_kernel.live_fork`), adopted here as this host's kernel (issue 25).
//!
//! Owns: what the parent hands over (`LiveFork`: the copy's runtime directory, its pid in the
//! parent kernel's PID namespace, its tag), finding the copy's pid as this host sees it,
//! opening its lifeline (a FIFO it reads: this host's end closing, even by SIGKILL, ends it),
//! connecting its channels, and watching its exit through a pidfd (it is not this host's child:
//! its exit status belongs to whoever reaps it, so its end is described, not decoded).
//! Does not own: making the copy (the kernel side) or what the workspace does with it
//! (`engine::workspace`).
//!
//! Invariants:
//! - The copy leads a process group of its own: the host's group signals (interrupt, kill) go
//!   to it and never to the parent kernel's group.
//! - The runtime directory is this host's once adopted: removed when the kernel is dropped.
//! - The copy lives in its parent kernel's PID namespace (when that kernel has one), so it ends
//!   when the parent's kernel ends; the engine then revives this workspace from its own
//!   snapshots, as after any death.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::boot::Booting;
use super::isolation;
use super::launch::{KernelSpec, RuntimeDir};
use crate::kernel::exit::{KernelExit, KilledBy};
use crate::kernel::stderr_tail::StderrTail;
use crate::kernel::{Kernel, KernelError, KernelEvent, Link, LocalProcess};

/// The lifeline FIFO in the copy's runtime directory (`live_fork.LIFELINE_NAME`).
const LIFELINE: &str = "lifeline";

/// How often the host tries to open the lifeline before the copy has opened its end.
const LIFELINE_POLL: Duration = Duration::from_millis(2);

/// What a parent's kernel hands over for a child's workspace to adopt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveFork {
    /// The copy's runtime directory: connection file, sockets, lifeline, log.
    pub dir: PathBuf,
    /// The copy's pid as its parent kernel sees it.
    pub pid: i32,
    /// The PID namespace of the parent kernel (`pid:[N]`, `/proc/<pid>/ns/pid`).
    pub pid_namespace: String,
    /// The tag of the processes the copy's cells start (`leftovers`).
    pub tag: String,
    /// The parent's cell that called `spawn_agent`.
    pub parent_cell: u64,
    /// Threads the parent's cells had started, which the copy does not have.
    #[serde(default)]
    pub threads_left: Vec<String>,
}

impl Kernel {
    /// Adopts the copy `fork` describes as this host's kernel: connected, handshaken, its exit
    /// watched. `spec` is this workspace's kernel spec (for the handshake's interpreter).
    pub async fn attach_live_fork(
        fork: &LiveFork,
        spec: &KernelSpec,
        boot_timeout: Duration,
    ) -> Result<Kernel, KernelError> {
        let deadline = Instant::now() + boot_timeout;
        let gone = |what: String| KernelError::Io {
            context: format!("cannot adopt the live fork of the parent's kernel: {what}"),
            source: std::io::Error::other("the forked kernel is not reachable"),
        };
        let runtime = RuntimeDir::adopt(&fork.dir)?;
        let (pid, namespaced) = {
            let (local, namespace) = (fork.pid, fork.pid_namespace.clone());
            tokio::task::spawn_blocking(move || host_pid(local, &namespace))
                .await
                .ok()
                .flatten()
                .ok_or_else(|| gone(format!("its process (pid {} there) is gone", fork.pid)))?
        };
        let pidfd = pidfd_open(pid).map_err(|error| gone(format!("pidfd_open: {error}")))?;
        let lifeline = open_lifeline(&fork.dir.join(LIFELINE), deadline)
            .await
            .map_err(|error| gone(format!("its lifeline: {error}")))?;
        let (events_tx, events) = mpsc::unbounded_channel();
        let exited = Arc::new(AtomicBool::new(false));
        let killed_by = Arc::new(Mutex::new(None));
        let stderr = StderrTail::default();
        let tasks = vec![tokio::spawn(watch_exit(
            pidfd,
            pid,
            fork.tag.clone(),
            exited.clone(),
            killed_by.clone(),
            events_tx.clone(),
        ))];
        let ((shell, stdin, control), events, tasks) =
            Booting::new(events, stderr.clone(), spec, deadline, boot_timeout, tasks)
                .connect_or_end(&runtime, events_tx, pid, &exited)
                .await?;
        let mut kernel = Kernel::connected(
            Link::Local(Box::new(LocalProcess {
                pid,
                kernel_pid: pid,
                namespaced,
                isolation: if namespaced {
                    isolation::Isolation::Namespace
                } else {
                    isolation::Isolation::Off
                },
                pid_namespace: namespaced.then(|| fork.pid_namespace.clone()),
                shell,
                stdin,
                control,
                exited,
                killed_by,
                _lifeline: Some(Box::new(lifeline)),
                runtime,
                tag: fork.tag.clone(),
            })),
            events,
            stderr,
            tasks,
        );
        if let Err(error) = kernel
            .handshake(Some(&spec.python), deadline, boot_timeout)
            .await
        {
            kernel.kill(KilledBy::Host);
            return Err(error);
        }
        if let Link::Local(local) = &kernel.link {
            local.runtime.forget_connection_file();
        }
        Ok(kernel)
    }
}

/// This host's pid of the process that is `local` in the PID namespace `namespace`, and
/// whether that namespace is another than this host's. `None` when no such process runs.
pub fn host_pid(local: i32, namespace: &str) -> Option<(i32, bool)> {
    let own = pid_namespace_of("self");
    if own.as_deref() == Some(namespace) {
        return super::processes::is_running(local).then_some((local, false));
    }
    super::processes::all_processes()
        .into_iter()
        .map(|process| process.pid)
        .find(|&pid| {
            isolation::innermost_pid(pid) == Some(local)
                && pid_namespace_of(&pid.to_string()).as_deref() == Some(namespace)
        })
        .map(|pid| (pid, true))
}

/// The PID namespace of `/proc/<process>` (`pid:[N]`).
pub fn pid_namespace_of(process: &str) -> Option<String> {
    std::fs::read_link(format!("/proc/{process}/ns/pid"))
        .ok()
        .map(|link| link.display().to_string())
}

fn pidfd_open(pid: i32) -> std::io::Result<OwnedFd> {
    // SAFETY: a plain syscall with no pointers; a non-negative result is a new fd we own.
    let fd = unsafe { nix::libc::syscall(nix::libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this fd to us and nothing else holds it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Opens the copy's lifeline for writing (once the copy reads it) and writes the byte that
/// says it was adopted. Held open until the kernel is dropped.
async fn open_lifeline(path: &Path, deadline: Instant) -> std::io::Result<std::fs::File> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    loop {
        match std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_CLOEXEC)
            .open(path)
        {
            Ok(mut file) => {
                file.write_all(b"a")?;
                return Ok(file);
            }
            // ENXIO: no reader yet (the copy opens its end as it starts).
            Err(error) if error.raw_os_error() == Some(nix::libc::ENXIO) => {
                if Instant::now() >= deadline {
                    return Err(error);
                }
                tokio::time::sleep(LIFELINE_POLL).await;
            }
            Err(error) => return Err(error),
        }
    }
}

/// Waits for the copy to end (its pidfd turns readable), ends what it started, and reports
/// `Exited` with a described end.
async fn watch_exit(
    pidfd: OwnedFd,
    pid: i32,
    tag: String,
    exited: Arc<AtomicBool>,
    killed_by: Arc<Mutex<Option<KilledBy>>>,
    events: mpsc::UnboundedSender<KernelEvent>,
) {
    // SAFETY: the `OwnedFd` is moved into the `AsyncFd`, which owns it until it is dropped:
    // the descriptor stays open and the same for the `AsyncFd`'s whole life.
    match unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE)
    } {
        Ok(fd) => {
            let _ = fd.readable().await;
            tracing::debug!(fd = fd.get_ref().as_raw_fd(), "the live fork ended");
        }
        // No reactor for it: look every 50 ms instead.
        Err(_) => {
            while super::processes::is_running(pid) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    exited.store(true, Ordering::SeqCst);
    let ended = tokio::task::spawn_blocking(move || super::leftovers::end(pid, &tag)).await;
    if let Err(error) = ended {
        tracing::warn!(%error, "could not end the processes the live fork left");
    }
    let killed_by = killed_by.lock().ok().and_then(|slot| slot.clone());
    let exit = KernelExit {
        code: None,
        signal: None,
        oom_killed: false,
        remote: killed_by.is_none().then(|| {
            "the kernel (a live fork of the parent's) ended; it ends with the parent's kernel, \
             and its exit status is its parent's to read"
                .to_string()
        }),
        killed_by,
    };
    let _ = events.send(KernelEvent::Exited(exit));
}
