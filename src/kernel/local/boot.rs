//! Starting a local kernel: spawn (pi-repl's launcher or an installed kernelspec), wait for its
//! sockets, connect IOPub, shell, stdin (and control) with their reader tasks, and watch the
//! process until it exits (ending what it started first). The handshake that proves IOPub is
//! subscribed is the facade's (`Kernel::handshake`), shared with a remote kernel.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jupyter_zmq_client::DealerSendConnection;
use nix::unistd::Pid;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::launch::{self, KernelSpec, RuntimeDir};
use super::{isolation, leftovers, processes};
use crate::kernel::exit::{KernelExit, KilledBy, OomCounter};
use crate::kernel::stderr_tail::{StderrTail, drain_stderr};
use crate::kernel::{
    Kernel, KernelError, KernelEvent, Link, LocalProcess, kill_group, late_idle, remote_module,
};
use crate::python_env::interpreter::Interpreter;

/// How often the host looks for the kernel's socket files while it boots.
const SOCKET_POLL: Duration = Duration::from_millis(2);

/// After the process exits, how long the sockets get to deliver the kernel's last messages
/// before `Exited` is reported.
const EXIT_DRAIN: Duration = Duration::from_millis(100);

/// A task that reads `$connection` (any channel) and sends each message on `$events` as
/// `KernelEvent::$variant`, until nobody listens; an unreadable message is skipped.
macro_rules! forward {
    ($connection:expr, $events:expr, $variant:ident, $what:literal) => {{
        let mut connection = $connection;
        let events = $events.clone();
        tokio::spawn(async move {
            loop {
                match connection.read().await {
                    Ok(message) => {
                        if events.send(KernelEvent::$variant(message)).is_err() {
                            return;
                        }
                    }
                    Err(error) => {
                        tracing::debug!(%error, concat!("skipping an unreadable ", $what, " message"))
                    }
                }
            }
        })
    }};
}

impl Kernel {
    pub(in crate::kernel) async fn start_local(
        spec: &KernelSpec,
        boot_timeout: Duration,
    ) -> Result<Kernel, KernelError> {
        let deadline = Instant::now() + boot_timeout;
        let runtime = match &spec.kernelspec {
            Some(kernelspec) => RuntimeDir::create_tcp(&kernelspec.name)?,
            None => RuntimeDir::create()?,
        };
        leftovers::become_subreaper();
        let tag = leftovers::new_tag();
        let mut child = match &spec.kernelspec {
            Some(kernelspec) => launch::spawn_kernelspec(spec, kernelspec, &runtime, &tag)?,
            None => launch::spawn(spec, &runtime, &tag)?,
        };
        let pid = child
            .id()
            .map(|id| id as i32)
            .ok_or_else(|| KernelError::Io {
                context: "the kernel process vanished at spawn".into(),
                source: std::io::Error::other("no pid"),
            })?;
        let lifeline = child.stdin.take();
        let stderr = StderrTail::default();
        let (events_tx, events) = mpsc::unbounded_channel();
        let exited = Arc::new(AtomicBool::new(false));
        let killed_by = Arc::new(Mutex::new(None));
        let mut tasks = Vec::new();
        if let Some(pipe) = child.stderr.take() {
            tasks.push(tokio::spawn(drain_stderr(pipe, stderr.clone())));
        }
        let oom = OomCounter::for_process(pid as u32);
        tasks.push(tokio::spawn(watch_exit(
            child,
            tag.clone(),
            oom,
            exited.clone(),
            killed_by.clone(),
            events_tx.clone(),
        )));
        let ((shell, stdin, control), events, tasks) =
            Booting::new(events, stderr.clone(), spec, deadline, boot_timeout, tasks)
                .connect_or_end(&runtime, events_tx, pid, &exited)
                .await?;
        let mut kernel = Kernel::connected(
            Link::Local(Box::new(LocalProcess {
                pid,
                kernel_pid: pid,
                namespaced: false,
                isolation: isolation::Isolation::Off,
                shell,
                stdin,
                control,
                exited,
                killed_by,
                _lifeline: lifeline.map(|pipe| Box::new(pipe) as _),
                pid_namespace: None,
                runtime,
                tag,
            })),
            events,
            stderr,
            tasks,
        );
        let python = spec.kernelspec.is_none().then_some(&spec.python);
        if let Err(error) = kernel.handshake(python, deadline, boot_timeout).await {
            kernel.kill(KilledBy::Host);
            return Err(error);
        }
        if spec.kernelspec.is_some() && kernel.runs_python() {
            // Another Python's ipykernel: pi-repl's module is not installed there, so it
            // arrives as for a remote kernel (written once per version on this machine).
            match remote_module::load(&mut kernel, deadline, boot_timeout).await {
                Ok(module_dir) => kernel.remote_module_dir = Some(module_dir),
                Err(error) => {
                    kernel.kill(KilledBy::Host);
                    return Err(error);
                }
            }
        }
        // The kernel read its key at start and we hold it in memory: it need not stay on disk,
        // where a host killed before its cleanup (Codex sends SIGKILL tens of milliseconds
        // after SIGTERM) would leave it.
        if let Link::Local(local) = &mut kernel.link {
            local.runtime.forget_connection_file();
            if let (true, Some(kernelspec)) = (spec.isolate_processes, &spec.kernelspec) {
                // Started as its kernelspec says: pi-repl's launcher is not in it.
                local.isolation = isolation::Isolation::Unavailable(format!(
                    "the kernelspec `{}` starts its own kernel, which pi-repl does not put in a \
                     namespace",
                    kernelspec.name
                ));
            } else if spec.isolate_processes {
                // Written before the kernel process existed, which has answered by now.
                let (isolation, namespaced) = isolation::Isolation::read(local.runtime.path());
                if namespaced {
                    let found = tokio::task::spawn_blocking(move || {
                        isolation::kernel_below(
                            &processes::all_processes(),
                            pid,
                            isolation::innermost_pid,
                        )
                    })
                    .await;
                    match found {
                        Ok(Some(kernel_pid)) => local.kernel_pid = kernel_pid,
                        _ => tracing::warn!("cannot find the kernel process below its launcher"),
                    }
                }
                tracing::debug!(?isolation, kernel_pid = local.kernel_pid, "kernel started");
                local.isolation = isolation;
                local.namespaced = namespaced;
            }
        }
        Ok(kernel)
    }
}

pub(in crate::kernel) fn boot_exit_error(
    exit: KernelExit,
    stderr_tail: Vec<String>,
    python: Option<&Interpreter>,
) -> KernelError {
    if let (true, Some(python)) = (exit.is_missing_kernel(), python) {
        let detail = stderr_tail
            .iter()
            .rev()
            .find_map(|line| line.strip_prefix("pi-repl: this interpreter cannot run the kernel: "))
            .unwrap_or("ipykernel is not installed")
            .to_string();
        return KernelError::MissingKernel {
            python: python.clone(),
            detail,
        };
    }
    KernelError::ExitedDuringBoot { exit, stderr_tail }
}

/// State of a kernel between spawn and a connected shell socket.
pub(in crate::kernel) struct Booting<'a> {
    events: mpsc::UnboundedReceiver<KernelEvent>,
    stderr: StderrTail,
    spec: &'a KernelSpec,
    deadline: Instant,
    boot_timeout: Duration,
    tasks: Vec<JoinHandle<()>>,
}

impl<'a> Booting<'a> {
    pub(in crate::kernel) fn new(
        events: mpsc::UnboundedReceiver<KernelEvent>,
        stderr: StderrTail,
        spec: &'a KernelSpec,
        deadline: Instant,
        boot_timeout: Duration,
        tasks: Vec<JoinHandle<()>>,
    ) -> Booting<'a> {
        Booting {
            events,
            stderr,
            spec,
            deadline,
            boot_timeout,
            tasks,
        }
    }

    /// Connects (as `connect`) and hands back the channels, the event receiver and the tasks;
    /// when it cannot, the process group `pid` is killed and the tasks are aborted.
    pub(in crate::kernel) async fn connect_or_end(
        mut self,
        runtime: &RuntimeDir,
        events_tx: mpsc::UnboundedSender<KernelEvent>,
        pid: i32,
        exited: &AtomicBool,
    ) -> Result<Connected, KernelError> {
        match self.connect(runtime, events_tx).await {
            Ok(channels) => Ok((channels, self.events, self.tasks)),
            Err(error) => {
                kill_group(pid, exited);
                for task in self.tasks {
                    task.abort();
                }
                Err(error)
            }
        }
    }

    /// The interpreter named if the kernel exits for want of ipykernel: pi-repl's own only.
    fn python(&self) -> Option<&'_ Interpreter> {
        self.spec.kernelspec.is_none().then_some(&self.spec.python)
    }

    /// Waits for the socket files (IPC; over TCP the connections retry until the kernel
    /// listens), connects IOPub, shell and stdin (and control, for a kernelspec interrupted by
    /// message), and starts their reader tasks.
    pub(in crate::kernel) async fn connect(
        &mut self,
        runtime: &RuntimeDir,
        events_tx: mpsc::UnboundedSender<KernelEvent>,
    ) -> Result<Channels, KernelError> {
        let sockets = runtime.socket_paths();
        while !sockets.iter().all(|path| path.exists()) {
            if let Ok(KernelEvent::Exited(exit)) = self.events.try_recv() {
                return Err(boot_exit_error(exit, self.stderr.lines(), self.python()));
            }
            if Instant::now() >= self.deadline {
                return Err(KernelError::BootTimeout {
                    after: self.boot_timeout,
                    stderr_tail: self.stderr.lines(),
                });
            }
            tokio::time::sleep(SOCKET_POLL).await;
        }
        let connection = &runtime.connection;
        let session_id = uuid::Uuid::new_v4().to_string();
        let io_error = |what: &str, e: jupyter_zmq_client::RuntimeError| KernelError::Io {
            context: format!("cannot connect to the kernel's {what} socket"),
            source: std::io::Error::other(e.to_string()),
        };
        let remaining = self.deadline.saturating_duration_since(Instant::now());
        let by_message = self
            .spec
            .kernelspec
            .as_ref()
            .is_some_and(|kernelspec| kernelspec.interrupt_by_message);
        let connecting = tokio::time::timeout(remaining, async {
            let iopub =
                jupyter_zmq_client::create_client_iopub_connection(connection, "", &session_id)
                    .await
                    .map_err(|e| io_error("IOPub", e))?;
            let identity = jupyter_zmq_client::peer_identity_for_session(&session_id)
                .map_err(|e| io_error("shell", e))?;
            let shell = jupyter_zmq_client::create_client_shell_connection_with_identity(
                connection,
                &session_id,
                identity.clone(),
            )
            .await
            .map_err(|e| io_error("shell", e))?;
            // The same identity, so the kernel routes a cell's `input_request` to us.
            let stdin = jupyter_zmq_client::create_client_stdin_connection_with_identity(
                connection,
                &session_id,
                identity,
            )
            .await
            .map_err(|e| io_error("stdin", e))?;
            let control = if by_message {
                Some(
                    jupyter_zmq_client::create_client_control_connection(connection, &session_id)
                        .await
                        .map_err(|e| io_error("control", e))?,
                )
            } else {
                None
            };
            Ok::<_, KernelError>((iopub, shell, stdin, control))
        });
        // Over TCP the connections wait for the kernel to listen: a kernel that exits first
        // must not leave them waiting until the deadline.
        let connected = tokio::select! {
            connected = connecting => connected,
            exit = exit_of(&mut self.events) => {
                return Err(boot_exit_error(exit, self.stderr.lines(), self.python()));
            }
        };
        let (iopub, shell, stdin, control) = match connected {
            Ok(result) => result?,
            Err(_) => {
                return Err(KernelError::BootTimeout {
                    after: self.boot_timeout,
                    stderr_tail: self.stderr.lines(),
                });
            }
        };
        let (shell_send, shell_recv) = shell.split();
        let (stdin_send, stdin_recv) = stdin.split();
        self.tasks
            .push(forward!(stdin_recv, events_tx, StdinRequest, "stdin"));
        match &self.spec.kernelspec {
            Some(kernelspec) if !kernelspec.is_python() => self
                .tasks
                .push(late_idle::forward_iopub(iopub, events_tx.clone())),
            _ => self.tasks.push(forward!(iopub, events_tx, IoPub, "IOPub")),
        }
        self.tasks
            .push(forward!(shell_recv, events_tx, ShellReply, "shell"));
        let control = control.map(|control| {
            let (send, mut replies) = control.split();
            // The interrupt replies say nothing the cell's own reply does not.
            self.tasks.push(tokio::spawn(async move {
                while replies.read().await.is_ok() {}
            }));
            Arc::new(tokio::sync::Mutex::new(send))
        });
        Ok((shell_send, stdin_send, control))
    }
}

/// A booted kernel's channels, its event receiver and its reader and watcher tasks.
pub(in crate::kernel) type Connected = (
    Channels,
    mpsc::UnboundedReceiver<KernelEvent>,
    Vec<JoinHandle<()>>,
);

/// The send halves of a local kernel's shell, stdin and (interrupt by message) control channels.
pub(in crate::kernel) type Channels = (
    DealerSendConnection,
    DealerSendConnection,
    Option<Arc<tokio::sync::Mutex<DealerSendConnection>>>,
);

/// The kernel's exit, once the exit watcher reports it (nothing else arrives before the
/// channels are connected).
async fn exit_of(events: &mut mpsc::UnboundedReceiver<KernelEvent>) -> KernelExit {
    loop {
        match events.recv().await {
            Some(KernelEvent::Exited(exit)) => return exit,
            Some(_) => {}
            // The watcher holds a sender until it reports: never reached while it runs.
            None => std::future::pending::<()>().await,
        }
    }
}

/// True unless process `pid` has exited: a zombie not reaped yet is seen without reaping it
/// (`WNOWAIT`, so the exit watcher still collects its status), and one already reaped (or not
/// this process's child) is looked up by pid.
pub(in crate::kernel) fn process_running(pid: i32) -> bool {
    use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
    let pid = Pid::from_raw(pid);
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    match waitid(Id::Pid(pid), flags) {
        Ok(WaitStatus::StillAlive) => true,
        Ok(_) => false,
        // Reaped already, or not our child: does the pid exist at all?
        Err(_) => nix::sys::signal::kill(pid, None).is_ok(),
    }
}

async fn watch_exit(
    mut child: tokio::process::Child,
    tag: String,
    oom: Option<OomCounter>,
    exited: Arc<AtomicBool>,
    killed_by: Arc<Mutex<Option<KilledBy>>>,
    events: mpsc::UnboundedSender<KernelEvent>,
) {
    let pid = child.id().map(|id| id as i32);
    let status = child.wait().await;
    exited.store(true, Ordering::SeqCst);
    // What it started ends with it, before anyone hears of the exit.
    if let Some(pid) = pid {
        let ended = tokio::task::spawn_blocking(move || leftovers::end(pid, &tag)).await;
        if let Err(error) = ended {
            tracing::warn!(%error, "could not end the processes the kernel left");
        }
    }
    let mut exit = match status {
        Ok(status) => KernelExit::from_status(status),
        Err(_) => KernelExit {
            code: None,
            signal: None,
            oom_killed: false,
            killed_by: None,
            remote: None,
        },
    };
    exit.oom_killed = exit.signal == Some(9) && oom.is_some_and(|counter| counter.fired());
    exit.killed_by = killed_by.lock().ok().and_then(|slot| slot.clone());
    tokio::time::sleep(EXIT_DRAIN).await;
    // The receiver is gone when the kernel handle was dropped; nobody needs the news then.
    let _ = events.send(KernelEvent::Exited(exit));
}
