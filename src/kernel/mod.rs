//! One running kernel: its process (or its place on a Jupyter Server), its channels, and the
//! events they produce. The engine drives a local and a remote kernel through this one type.
//!
//! Owns: the `Kernel` facade (events, requests, interrupt, kill, stop) and the `kernel_info`
//! handshake; a local kernel's start, channels and process watcher are `local::boot`'s
//! (launching itself `launch`'s), its errors `errors`' and its stderr `stderr_tail`'s. An
//! installed kernelspec (`kernelspecs`, `--kernel NAME`) is launched here too, over loopback
//! TCP, and interrupted by message when its kernelspec says so. A remote
//! kernel (`remote`, over `jupyter_server`'s REST API and the kernel's WebSocket) produces the
//! same events; its death is learnt from the server instead of a process.
//! Does not own: what a cell means (`execution`) or queueing and recovery (`engine`).
//!
//! Invariants:
//! - IOPub is read on its own task from the moment the kernel starts, never gated on the shell
//!   reply (ipykernel drops messages, even `idle`, for a lagging reader).
//! - Death is learnt from the process, not the sockets: a watcher task waits on the child and
//!   reports `KernelEvent::Exited` after the sockets have had a moment to deliver what the
//!   kernel sent last.
//! - `Exited` is the last event: `next_event` returns `None` after it.
//! - Every process a kernel started ends with it (`leftovers`): when the kernel exits, its
//!   process group and every process carrying its tag are killed before `Exited` is reported.
//!   A kernel in a PID namespace of its own (`isolation`) takes every process in it along.
//! - A local kernel's `pid` is the process the host started (the kernel, or its launcher):
//!   group signals, death and OOM go by it; a signal to the kernel alone goes to `kernel_pid`.
//! - Dropping a `Kernel` kills its process group if it is still alive, so no kernel outlives
//!   its handle.

mod environment;
mod errors;
pub mod exit;
mod late_idle;
mod local;
mod remote;
mod remote_module;
pub mod secrets;
mod stderr_tail;

use local::{boot, launch};
pub use local::{isolation, kernelspecs, leftovers, live_fork, processes};
pub use remote::jupyter_server;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jupyter_protocol::{ExecuteRequest, JupyterMessage, JupyterMessageContent, KernelInfoRequest};
use jupyter_zmq_client::DealerSendConnection;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

pub use environment::{Withheld, is_credential, kernel_environment, withheld_notice};
pub use errors::KernelError;
pub use exit::{KernelExit, KilledBy};
pub use launch::{KernelSpec, kernel_variables, working_dir};
pub use stderr_tail::{StderrMark, StderrTail};

use crate::python_env::interpreter::Interpreter;
use boot::{boot_exit_error, process_running};
use launch::RuntimeDir;

/// How long to wait for IOPub to prove it is subscribed before asking `kernel_info` again.
const IOPUB_PROOF_WAIT: Duration = Duration::from_millis(500);

/// How long a stopping kernel gets after SIGTERM before its process group is killed.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// Something the kernel did.
#[derive(Debug)]
pub enum KernelEvent {
    /// A message on IOPub (outputs, status).
    IoPub(JupyterMessage),
    /// A reply on the shell channel.
    ShellReply(JupyterMessage),
    /// A request on the stdin channel: the running cell asks the host something
    /// (`input_request`; pi-repl's own use is `llm::kernel_requests`).
    StdinRequest(JupyterMessage),
    /// The process ended. Always the last event.
    Exited(KernelExit),
}

/// A running kernel. Events arrive in `next_event`; requests go out through `execute`.
pub struct Kernel {
    link: Link,
    events: mpsc::UnboundedReceiver<KernelEvent>,
    stderr: StderrTail,
    tasks: Vec<JoinHandle<()>>,
    /// Stream output a host call read but did not own (a thread of an earlier cell printing
    /// while the engine saved), kept for the engine's late output; bounded by `ASIDE_CHARS`.
    aside: Vec<JupyterMessage>,
    aside_chars: usize,
    /// Stream characters `set_aside` had no room for since the last `take_aside`.
    aside_dropped: usize,
    /// `Exited` was handed out: the event stream is over.
    ended: bool,
    /// A remote kernel: where the host's copy of the kernel module was written on the kernel's
    /// machine (`remote_module`), so host paths inside the module can be translated.
    remote_module_dir: Option<PathBuf>,
    /// The language the kernel named in its `kernel_info_reply` (`python`, `typescript`, ...).
    language: Option<String>,
}

/// How the host reaches the kernel.
enum Link {
    Local(Box<LocalProcess>),
    Remote(remote::RemoteLink),
}

/// A kernel process this host started, and its ZMQ channels over IPC.
struct LocalProcess {
    /// The process the host started, which leads the kernel's process group: the kernel itself,
    /// or its launcher when the kernel runs in a PID namespace (`isolation`).
    pid: i32,
    /// The kernel process (the host's pid), for a signal to the kernel alone.
    kernel_pid: i32,
    /// Pids the kernel reports are namespace-local (`isolation::host_pid` maps them).
    namespaced: bool,
    isolation: isolation::Isolation,
    shell: DealerSendConnection,
    /// Where `input_reply` goes (the stdin channel, same peer identity as the shell).
    stdin: DealerSendConnection,
    /// A kernelspec's kernel with `interrupt_mode: message`: interrupted by an
    /// `interrupt_request` here instead of SIGINT.
    control: Option<Arc<tokio::sync::Mutex<DealerSendConnection>>>,
    exited: Arc<AtomicBool>,
    killed_by: Arc<Mutex<Option<KilledBy>>>,
    /// Kept so the lifeline stays open while the handle lives (the kernel's stdin pipe, or a
    /// live fork's FIFO).
    _lifeline: Option<Box<dyn std::any::Any + Send + Sync>>,
    /// A live fork's PID namespace when it is not the host's: its save children's pids are
    /// found by namespace (`live_fork::host_pid`), not below a launcher.
    pid_namespace: Option<String>,
    /// Removed (with the sockets) when the kernel is dropped.
    runtime: RuntimeDir,
    /// Marks the processes this kernel started (`leftovers`).
    tag: String,
}

/// Characters of stream output `set_aside` keeps; later messages are dropped.
const ASIDE_CHARS: usize = 1 << 20;

impl Kernel {
    /// A kernel whose channels are connected, before its handshake.
    fn connected(
        link: Link,
        events: mpsc::UnboundedReceiver<KernelEvent>,
        stderr: StderrTail,
        tasks: Vec<JoinHandle<()>>,
    ) -> Kernel {
        Kernel {
            link,
            events,
            stderr,
            tasks,
            aside: Vec::new(),
            aside_chars: 0,
            aside_dropped: 0,
            ended: false,
            remote_module_dir: None,
            language: None,
        }
    }

    /// Launches a kernel and waits until it answers `kernel_info` with IOPub connected.
    /// With `spec.remote` set, the kernel is started (or attached) on that Jupyter Server and
    /// the kernel-side module is loaded into it before it is handed out.
    pub async fn start(spec: &KernelSpec, boot_timeout: Duration) -> Result<Kernel, KernelError> {
        match &spec.remote {
            Some(server) => Kernel::start_remote(server, boot_timeout).await,
            None => Kernel::start_local(spec, boot_timeout).await,
        }
    }

    async fn start_remote(
        server: &jupyter_server::ServerSpec,
        boot_timeout: Duration,
    ) -> Result<Kernel, KernelError> {
        let deadline = Instant::now() + boot_timeout;
        let (events_tx, events) = mpsc::unbounded_channel();
        let connected = tokio::time::timeout(boot_timeout, remote::connect(server, events_tx))
            .await
            .map_err(|_| KernelError::BootTimeout {
                after: boot_timeout,
                stderr_tail: Vec::new(),
            })??;
        let mut kernel = Kernel::connected(
            Link::Remote(connected.link),
            events,
            StderrTail::default(),
            connected.tasks,
        );
        let prepared = async {
            kernel.handshake(None, deadline, boot_timeout).await?;
            if !kernel.runs_python() {
                if let Link::Remote(link) = &kernel.link {
                    link.hold_idles();
                }
                // pi-repl's module is Python: any other kernel runs cells only.
                return Ok(None);
            }
            remote_module::load(&mut kernel, deadline, boot_timeout)
                .await
                .map(Some)
        };
        match prepared.await {
            Ok(module_dir) => kernel.remote_module_dir = module_dir,
            Err(error) => {
                kernel.kill(KilledBy::Host);
                return Err(error);
            }
        }
        Ok(kernel)
    }

    /// How another Jupyter client reaches this local kernel (its IPC or loopback TCP sockets and
    /// its key); `None` for a remote kernel (its server has its own way in).
    pub fn connection_info(&self) -> Option<&jupyter_protocol::connection_info::ConnectionInfo> {
        match &self.link {
            Link::Local(local) => Some(&local.runtime.connection),
            Link::Remote(_) => None,
        }
    }

    /// Whether the local kernel's cells see only its processes; `None` for a remote kernel.
    pub fn isolation(&self) -> Option<&isolation::Isolation> {
        match &self.link {
            Link::Local(local) => Some(&local.isolation),
            Link::Remote(_) => None,
        }
    }

    /// The host's pid of the process the kernel calls `pid` (a save child): the same number
    /// unless the kernel runs in a PID namespace. `None` when it cannot be found (it is gone)
    /// or the kernel is remote.
    pub async fn host_pid_of(&self, pid: i32) -> Option<i32> {
        let Link::Local(local) = &self.link else {
            return None;
        };
        if !local.namespaced {
            return Some(pid);
        }
        if let Some(namespace) = local.pid_namespace.clone() {
            return tokio::task::spawn_blocking(move || live_fork::host_pid(pid, &namespace))
                .await
                .ok()
                .flatten()
                .map(|(pid, _)| pid);
        }
        let launcher = local.pid;
        tokio::task::spawn_blocking(move || {
            if processes::children_of(launcher).is_some() {
                let children = |parent| processes::children_of(parent).unwrap_or_default();
                return isolation::host_pid(children, launcher, pid, isolation::innermost_pid);
            }
            let all = processes::all_processes();
            isolation::host_pid(
                isolation::children_in(&all),
                launcher,
                pid,
                isolation::innermost_pid,
            )
        })
        .await
        .ok()
        .flatten()
    }

    /// The local kernel's pid, which is also its process group id; `None` for a remote kernel
    /// (its process is on another machine, out of reach of signals and `/proc`).
    pub fn pid(&self) -> Option<i32> {
        match &self.link {
            Link::Local(local) => Some(local.pid),
            Link::Remote(_) => None,
        }
    }

    /// What kills this local kernel without the `Kernel` (its process group and its tag), for a
    /// stop that does not wait for the engine; `None` for a remote kernel.
    pub fn kill_target(&self) -> Option<(i32, String)> {
        match &self.link {
            Link::Local(local) => Some((local.pid, local.tag.clone())),
            Link::Remote(_) => None,
        }
    }

    /// The remote kernel's id on its Jupyter Server; `None` for a local kernel.
    pub fn remote_id(&self) -> Option<&str> {
        match &self.link {
            Link::Local(_) => None,
            Link::Remote(link) => Some(link.id()),
        }
    }

    /// The language the kernel runs, as its `kernel_info_reply` named it.
    pub fn language(&self) -> Option<&str> {
        self.language.as_deref()
    }

    /// True for a Python kernel (the only kind pi-repl's module, helpers and snapshots run
    /// in); a kernel that has not named its language is taken to be pi-repl's ipykernel.
    pub fn runs_python(&self) -> bool {
        self.language
            .as_deref()
            .is_none_or(|language| language.eq_ignore_ascii_case("python"))
    }

    /// Where the kernel reads `path`, a file of the host's copy of the kernel module (under
    /// `module_dir`): the same path for a local kernel, the copy on its own machine for a
    /// remote one. Other paths are returned as they are.
    pub fn module_path(&self, module_dir: &Path, path: &Path) -> PathBuf {
        match (&self.remote_module_dir, path.strip_prefix(module_dir)) {
            (Some(remote_dir), Ok(relative)) => remote_dir.join(relative),
            _ => path.to_path_buf(),
        }
    }

    /// False once the process has exited (for a remote kernel: once the server said so).
    /// A local kernel is also asked directly, so a cell that arrives in the moment between the
    /// process's exit and the exit watcher's turn finds it dead (and runs in a new kernel)
    /// instead of being sent to it.
    pub fn is_alive(&self) -> bool {
        match &self.link {
            Link::Local(local) => {
                !local.exited.load(Ordering::SeqCst) && process_running(local.pid)
            }
            Link::Remote(link) => link.is_alive(),
        }
    }

    /// The last lines the kernel wrote to its own stderr.
    pub fn stderr_tail(&self) -> Vec<String> {
        self.stderr.lines()
    }

    /// A position in the kernel's stderr; `stderr_since` returns what came after it.
    pub fn stderr_mark(&self) -> StderrMark {
        self.stderr.mark()
    }

    /// Lines the kernel wrote to its stderr after `mark` (as many as are kept).
    pub fn stderr_since(&self, mark: StderrMark) -> Vec<String> {
        self.stderr.since(mark)
    }

    /// The next thing the kernel did. After `Exited`, returns `None` (at once, forever): the
    /// socket readers still hold senders, so the channel itself would never close.
    pub async fn next_event(&mut self) -> Option<KernelEvent> {
        if self.ended {
            return None;
        }
        let event = self.events.recv().await;
        if matches!(event, Some(KernelEvent::Exited(_)) | None) {
            self.ended = true;
            self.events.close();
        }
        event
    }

    /// Keeps stream output that the caller read but does not own, for `take_aside`. Other
    /// messages are dropped; stream text beyond `ASIDE_CHARS` is counted, not kept.
    pub fn set_aside(&mut self, message: JupyterMessage) {
        if let JupyterMessageContent::StreamContent(stream) = &message.content {
            let chars = stream.text.chars().count();
            if self.aside_chars + chars <= ASIDE_CHARS {
                self.aside_chars += chars;
                self.aside.push(message);
            } else {
                self.aside_dropped += chars;
            }
        }
    }

    /// What `set_aside` kept, oldest first, and how many stream characters it could not keep.
    pub fn take_aside(&mut self) -> (Vec<JupyterMessage>, usize) {
        self.aside_chars = 0;
        let dropped = std::mem::take(&mut self.aside_dropped);
        (std::mem::take(&mut self.aside), dropped)
    }

    /// Sends an `execute_request` and returns its msg_id, which its outputs carry as parent.
    /// `silent`: a host call (no history, no execution count, no result shown); otherwise a
    /// user cell, which IPython stores in its history and numbers.
    /// `expressions` are evaluated after the code and come back in the reply (host calls use
    /// them to read results without touching stdout).
    pub async fn execute(
        &mut self,
        code: &str,
        silent: bool,
        expressions: Option<HashMap<String, String>>,
    ) -> Result<String, KernelError> {
        let request = ExecuteRequest {
            code: code.to_string(),
            silent,
            // A user cell is stored as in Jupyter (`;`, `_`, `Out`, `Cell In[N]`); a silent host
            // call never is. The kernel module keeps the stored history small.
            store_history: !silent,
            user_expressions: expressions,
            allow_stdin: false,
            stop_on_error: false,
        };
        let message: JupyterMessage = request.into();
        let msg_id = message.header.msg_id.clone();
        self.send_shell(message, "cannot send the cell to the kernel")
            .await?;
        Ok(msg_id)
    }

    async fn send_shell(
        &mut self,
        message: JupyterMessage,
        context: &str,
    ) -> Result<(), KernelError> {
        match &mut self.link {
            Link::Local(local) => local
                .shell
                .send(message)
                .await
                .map_err(|e| KernelError::Io {
                    context: context.into(),
                    source: std::io::Error::other(e.to_string()),
                }),
            Link::Remote(link) => link.send("shell", message).await,
        }
    }

    /// Answers an `input_request` on the stdin channel with `value`.
    pub async fn reply_stdin(
        &mut self,
        request: &JupyterMessage,
        value: String,
    ) -> Result<(), KernelError> {
        let reply = jupyter_protocol::InputReply {
            value,
            status: jupyter_protocol::ReplyStatus::Ok,
            error: None,
        };
        let message = JupyterMessage::new(reply, Some(request));
        match &mut self.link {
            Link::Local(local) => local
                .stdin
                .send(message)
                .await
                .map_err(|e| KernelError::Io {
                    context: "cannot answer the kernel's stdin request".into(),
                    source: std::io::Error::other(e.to_string()),
                }),
            Link::Remote(link) => link.send("stdin", message).await,
        }
    }

    /// Sends SIGINT to the kernel's process group: the running cell gets `KeyboardInterrupt`,
    /// and the processes it started in the group get SIGINT too. A remote kernel is
    /// interrupted through the server's REST API (the kernel alone: no group there).
    pub fn interrupt(&mut self) {
        match &self.link {
            Link::Local(local) => {
                if let Some(control) = &local.control {
                    self.tasks.push(interrupt_by_message(control.clone()));
                } else if self.is_alive() {
                    // ESRCH means it just exited, which the exit watcher reports.
                    let _ = killpg(Pid::from_raw(local.pid), Signal::SIGINT);
                }
            }
            Link::Remote(link) => {
                if let Some(task) = link.interrupt() {
                    self.tasks.push(task);
                }
            }
        }
    }

    /// Sends SIGINT to the kernel process alone, not its group: for interrupting the host's own
    /// work (a helper that hangs at import, a snapshot to preempt) without touching processes
    /// the user started. A remote kernel: the same as `interrupt`.
    pub fn interrupt_kernel_only(&mut self) {
        match &self.link {
            Link::Local(local) => {
                if let Some(control) = &local.control {
                    self.tasks.push(interrupt_by_message(control.clone()));
                } else if self.is_alive() {
                    // ESRCH means it just exited, which the exit watcher reports.
                    let _ = nix::sys::signal::kill(Pid::from_raw(local.kernel_pid), Signal::SIGINT);
                }
            }
            Link::Remote(_) => self.interrupt(),
        }
    }

    /// Kills the kernel's process group now, recording why.
    /// Processes it started outside its group (a session of their own) are killed at once too:
    /// a host about to exit may not see the kernel's exit, when `leftovers::end` would do it.
    /// A remote kernel is shut down through the server (an attached one is restarted).
    pub fn kill(&mut self, reason: KilledBy) {
        match &mut self.link {
            Link::Local(local) => {
                if let Ok(mut slot) = local.killed_by.lock() {
                    slot.get_or_insert(reason);
                }
                if !local.exited.load(Ordering::SeqCst) {
                    leftovers::kill_tagged(local.pid, &local.tag);
                }
                kill_group(local.pid, &local.exited);
            }
            Link::Remote(link) => link.kill(reason),
        }
    }

    /// Stops the kernel: SIGTERM to its group, then SIGKILL if it has not exited in time.
    /// A remote kernel is shut down through the server (an attached one is left running).
    pub async fn stop(mut self) {
        let local = match &mut self.link {
            Link::Local(local) => local,
            Link::Remote(link) => {
                link.stop().await;
                return;
            }
        };
        if let Ok(mut slot) = local.killed_by.lock() {
            slot.get_or_insert(KilledBy::Host);
        }
        let (pid, exited) = (local.pid, local.exited.clone());
        if self.is_alive() {
            // ESRCH: already gone.
            let _ = killpg(Pid::from_raw(pid), Signal::SIGTERM);
        }
        let deadline = Instant::now() + STOP_GRACE;
        while self.is_alive() {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Some(KernelEvent::Exited(_))) | Ok(None) => break,
                Ok(Some(_)) => {}
                Err(_) => {
                    kill_group(pid, &exited);
                    break;
                }
            }
        }
    }

    /// `python`: the interpreter of pi-repl's own kernel, named if it exits for want of
    /// ipykernel; `None` for any other kernel.
    async fn handshake(
        &mut self,
        python: Option<&Interpreter>,
        deadline: Instant,
        boot_timeout: Duration,
    ) -> Result<(), KernelError> {
        let mut reply_seen = false;
        let mut iopub_seen = false;
        let mut request_id = self.send_kernel_info().await?;
        let mut retry_at = Instant::now() + IOPUB_PROOF_WAIT;
        loop {
            if reply_seen && iopub_seen {
                return Ok(());
            }
            let event = tokio::select! {
                event = self.events.recv() => event,
                _ = tokio::time::sleep_until(retry_at), if reply_seen => {
                    // The reply came but IOPub has shown nothing yet: it may not be subscribed.
                    request_id = self.send_kernel_info().await?;
                    retry_at = Instant::now() + IOPUB_PROOF_WAIT;
                    continue;
                }
                _ = tokio::time::sleep_until(deadline) => {
                    return Err(KernelError::BootTimeout {
                        after: boot_timeout,
                        stderr_tail: self.stderr.lines(),
                    });
                }
            };
            match event {
                // No cell runs during the handshake; the kernel module asks nothing yet.
                Some(KernelEvent::StdinRequest(_)) => {}
                Some(KernelEvent::ShellReply(message)) => {
                    if let JupyterMessageContent::KernelInfoReply(reply) = &message.content {
                        self.language = Some(reply.language_info.name.clone());
                        reply_seen = true;
                    }
                }
                Some(KernelEvent::IoPub(message)) => {
                    let welcome = matches!(message.content, JupyterMessageContent::IoPubWelcome(_));
                    let ours = message
                        .parent_header
                        .as_ref()
                        .is_some_and(|parent| parent.msg_id == request_id);
                    if welcome || ours {
                        iopub_seen = true;
                    }
                }
                Some(KernelEvent::Exited(exit)) => {
                    return Err(boot_exit_error(exit, self.stderr.lines(), python));
                }
                None => {
                    return Err(KernelError::Io {
                        context: "the kernel's event stream closed while starting".into(),
                        source: std::io::Error::other("closed"),
                    });
                }
            }
        }
    }

    async fn send_kernel_info(&mut self) -> Result<String, KernelError> {
        let message: JupyterMessage = KernelInfoRequest {}.into();
        let id = message.header.msg_id.clone();
        self.send_shell(message, "cannot send kernel_info_request")
            .await?;
        Ok(id)
    }
}

impl Drop for Kernel {
    fn drop(&mut self) {
        if let Link::Local(local) = &self.link {
            kill_group(local.pid, &local.exited);
        }
        // A remote kernel: `RemoteLink`'s own drop shuts it down on the server.
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Sends an `interrupt_request` on the control channel, in a task (interrupts are not async).
fn interrupt_by_message(control: Arc<tokio::sync::Mutex<DealerSendConnection>>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let message: JupyterMessage = jupyter_protocol::InterruptRequest {}.into();
        if let Err(error) = control.lock().await.send(message).await {
            tracing::debug!(%error, "cannot send interrupt_request to the kernel");
        }
    })
}

/// Kills the process group `pid` unless the process has already been reaped.
fn kill_group(pid: i32, exited: &AtomicBool) {
    if !exited.load(Ordering::SeqCst) {
        // ESRCH: the group is already gone.
        let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
    }
}
