//! A kernel on a Jupyter Server: its channels over the server's WebSocket, its lifecycle over
//! the REST API (`jupyter_server`), and how its end is noticed.
//!
//! Owns: connecting `/api/kernels/<id>/channels` (the v1 binary protocol when the server
//! accepts it, else JSON; both codecs are runtimed's `jupyter-websocket-client`), routing what arrives to
//! `KernelEvent`s by channel, sending on the right channel, interrupt/restart/shutdown through
//! REST, and the death watch.
//! Does not own: the handshake and the event stream's contract (`kernel::Kernel`).
//!
//! Invariants:
//! - Every frame is sent with its channel named: the crate's own `Sink` puts everything that
//!   is not a control message on `shell` in binary mode, which would send `input_reply` to the
//!   wrong channel, so frames are encoded here with the crate's `serialize_v1` and written to
//!   the socket directly. The socket is opened here too (`open_socket`), not by the crate's
//!   `connect_to_kernel`, which puts the token in the URL, leaves Nagle's algorithm on and
//!   verifies TLS against an empty root store (its `manual-roots` feature).
//! - Death is learnt from the kernel's status (`restarting`, `autorestarting`, `dead`: the
//!   server's restarter saw the process end), from the socket closing, and from the REST kernel
//!   list (a kernel the server no longer lists, or lists as dead), polled every `POLL_EVERY`.
//!   The first of these ends the kernel: `Exited` carries the reason.
//! - A kernel this host started is shut down through REST when its handle stops or drops; an
//!   attached one (`--kernel-id`) is left running (a kill restarts it instead).
//! - The token is never logged or put in an error: connection errors are scrubbed of it.

pub mod jupyter_server;
mod quick_ack;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_tungstenite::tungstenite::Message;
use async_tungstenite::tungstenite::client::IntoClientRequest;
use async_tungstenite::tungstenite::http::HeaderValue;
use futures::StreamExt;
use jupyter_protocol::{ExecutionState, JupyterMessage, JupyterMessageContent};
use jupyter_websocket_client::{ProtocolMode, binary_protocol};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::late_idle::{IDLE_GRACE, IdleHold, parent_id};
use super::{KernelError, KernelEvent, KernelExit, KilledBy};
use jupyter_server::{JupyterServer, ServerSpec};
use quick_ack::QuickAck;

/// How often the server's kernel list is asked whether the kernel is still there.
const POLL_EVERY: Duration = Duration::from_secs(2);

/// Failed polls in a row after which the server is taken to be gone.
const POLL_FAILURES: u32 = 3;

/// After the kernel is known to have ended, how long the socket gets to deliver what it sent
/// last before `Exited` is reported.
const EXIT_DRAIN: Duration = Duration::from_millis(100);

/// How long stopping waits for the server to shut the kernel down.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// How long `stop` waits for the kernels this one replaced to leave the server.
const RETIRED_GRACE: Duration = Duration::from_secs(20);

type Stream = async_tungstenite::tokio::ClientStream<QuickAck>;
type Socket = async_tungstenite::WebSocketStream<Stream>;
type Sender = async_tungstenite::WebSocketSender<Stream>;
type Receiver = async_tungstenite::WebSocketReceiver<Stream>;

/// The host's side of one remote kernel's channels.
pub(super) struct RemoteLink {
    server: JupyterServer,
    id: String,
    /// Attached with `--kernel-id`: left running at exit.
    attached: bool,
    writer: Sender,
    mode: ProtocolMode,
    token: String,
    exited: Arc<AtomicBool>,
    killed_by: Arc<Mutex<Option<KilledBy>>>,
    /// Where the reasons for the kernel's end go; the first one wins.
    endings: mpsc::UnboundedSender<String>,
    /// Shut down (or, attached, left alone) already: Drop has nothing to do.
    stopped: bool,
    /// Set for a kernel that is not pi-repl's ipykernel: `read_frames` holds `idle` back.
    hold_idles: Arc<AtomicBool>,
    /// The REST call a `kill` started; `stop` waits for it. Not aborted with the kernel's
    /// other tasks: a host exiting right after a kill must still have the kernel shut down.
    ending: Option<JoinHandle<()>>,
}

/// A connected remote kernel and the tasks that feed its events.
pub(super) struct Connected {
    pub link: RemoteLink,
    pub tasks: Vec<JoinHandle<()>>,
}

/// Starts (or finds, with `kernel_id`) the kernel and connects its channels.
pub(super) async fn connect(
    spec: &ServerSpec,
    events: mpsc::UnboundedSender<KernelEvent>,
) -> Result<Connected, KernelError> {
    let server = JupyterServer::new(spec)?;
    let (id, attached) = match &spec.kernel_id {
        Some(id) => match server.kernel(id).await? {
            Some(model) => (model.id, true),
            None => {
                return Err(KernelError::Remote {
                    server: server.url().to_string(),
                    detail: format!("there is no kernel {id} on this server (--kernel-id)"),
                });
            }
        },
        None => (server.start_kernel(&spec.kernel_name).await?.id, false),
    };
    tracing::debug!(kernel = %id, attached, "remote kernel");
    let (socket, mode) = match open_socket(spec, &id).await {
        Ok(opened) => opened,
        Err(error) => {
            if !attached && let Err(error) = server.shutdown(&id).await {
                tracing::warn!(%error, "cannot shut down the kernel that could not be connected");
            }
            return Err(error);
        }
    };
    let (writer, reader) = socket.split();
    let exited = Arc::new(AtomicBool::new(false));
    let killed_by = Arc::new(Mutex::new(None));
    let (endings, ending_rx) = mpsc::unbounded_channel();
    let hold_idles = Arc::new(AtomicBool::new(false));
    let tasks = vec![
        tokio::spawn(read_frames(
            reader,
            events.clone(),
            endings.clone(),
            hold_idles.clone(),
        )),
        tokio::spawn(poll_server(server.clone(), id.clone(), endings.clone())),
        tokio::spawn(report_end(
            ending_rx,
            exited.clone(),
            killed_by.clone(),
            events,
        )),
    ];
    Ok(Connected {
        link: RemoteLink {
            server,
            id,
            attached,
            writer,
            mode,
            token: spec.token.0.clone(),
            exited,
            killed_by,
            endings,
            stopped: false,
            hold_idles,
            ending: None,
        },
        tasks,
    })
}

/// Opens the kernel's channels: TCP with `TCP_NODELAY` and `TCP_QUICKACK` (`quick_ack`: small
/// frames are not held back by Nagle's algorithm against delayed ACKs, ~40 ms each), TLS verified by
/// the platform's trust store for `https` URLs, the token in the `Authorization` header (never
/// in the URL, which servers and proxies log), the v1 binary protocol offered.
async fn open_socket(spec: &ServerSpec, id: &str) -> Result<(Socket, ProtocolMode), KernelError> {
    let failed = |detail: String| {
        let detail = if spec.token.0.is_empty() {
            detail
        } else {
            detail.replace(&spec.token.0, "<token>")
        };
        KernelError::Remote {
            server: spec.url.clone(),
            detail: format!("cannot connect to the kernel's channels: {detail}"),
        }
    };
    let base = reqwest::Url::parse(&spec.url).map_err(|error| failed(error.to_string()))?;
    let secure = base.scheme() == "https";
    let host = base
        .host_str()
        .ok_or_else(|| failed("the URL has no host".into()))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = base
        .port_or_known_default()
        .ok_or_else(|| failed("the URL has no port".into()))?;
    let session = uuid::Uuid::new_v4();
    let ws_base = match spec.url.strip_prefix("https") {
        Some(rest) => format!("wss{rest}"),
        None => format!("ws{}", spec.url.trim_start_matches("http")),
    };
    let url = format!("{ws_base}/api/kernels/{id}/channels?session_id={session}");
    let mut request = url
        .into_client_request()
        .map_err(|error| failed(error.to_string()))?;
    let headers = request.headers_mut();
    headers.insert(
        "Sec-WebSocket-Protocol",
        HeaderValue::from_static(binary_protocol::KERNEL_WEBSOCKET_PROTOCOL),
    );
    headers.insert(
        "User-Agent",
        HeaderValue::from_static(concat!("pi-repl/", env!("CARGO_PKG_VERSION"))),
    );
    if !spec.token.0.is_empty() {
        let mut value = HeaderValue::from_str(&format!("token {}", spec.token.0))
            .map_err(|_| failed("the token is not a valid HTTP header value".into()))?;
        value.set_sensitive(true);
        headers.insert("Authorization", value);
    }
    let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|error| failed(error.to_string()))?;
    tcp.set_nodelay(true)
        .map_err(|error| failed(error.to_string()))?;
    let tcp = QuickAck::new(tcp);
    let connector = if secure {
        use rustls_platform_verifier::BuilderVerifierExt;
        let config = rustls::ClientConfig::builder()
            .with_platform_verifier()
            .map_err(|error| failed(format!("cannot set up TLS: {error}")))?
            .with_no_client_auth();
        Some(tokio_rustls::TlsConnector::from(std::sync::Arc::new(
            config,
        )))
    } else {
        None
    };
    let (socket, response) =
        async_tungstenite::tokio::client_async_tls_with_connector(request, tcp, connector)
            .await
            .map_err(|error| failed(error.to_string()))?;
    let mode = match response
        .headers()
        .get("Sec-WebSocket-Protocol")
        .and_then(|value| value.to_str().ok())
    {
        Some(binary_protocol::KERNEL_WEBSOCKET_PROTOCOL) => ProtocolMode::BinaryV1,
        _ => ProtocolMode::Json,
    };
    Ok((socket, mode))
}

impl RemoteLink {
    /// The kernel's id on the server.
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn is_alive(&self) -> bool {
        !self.exited.load(Ordering::SeqCst)
    }

    /// Tells the reader that the kernel is not pi-repl's ipykernel (see `read_frames`).
    pub fn hold_idles(&self) {
        self.hold_idles.store(true, Ordering::Relaxed);
    }

    /// Sends `message` on `channel` (`shell`, `stdin` or `control`).
    pub async fn send(
        &mut self,
        channel: &str,
        message: JupyterMessage,
    ) -> Result<(), KernelError> {
        let frame = match self.mode {
            ProtocolMode::BinaryV1 => binary_protocol::serialize_v1(&message, channel)
                .map(|bytes| Message::Binary(bytes.into())),
            ProtocolMode::Json => serde_json::to_value(&message)
                .map_err(anyhow::Error::from)
                .map(|mut value| {
                    value["channel"] = serde_json::Value::String(channel.to_string());
                    Message::Text(value.to_string().into())
                }),
        }
        .map_err(|error| self.error(format!("cannot encode a {channel} message: {error:#}")))?;
        self.writer.send(frame).await.map_err(|error| {
            let detail = error.to_string().replace(&self.token, "<token>");
            self.error(format!("cannot send to the kernel: {detail}"))
        })
    }

    /// Interrupts the running cell through the REST API (the server signals the kernel or
    /// sends `interrupt_request`, as its kernelspec says).
    pub fn interrupt(&self) -> Option<JoinHandle<()>> {
        if !self.is_alive() {
            return None;
        }
        let server = self.server.clone();
        let id = self.id.clone();
        Some(tokio::spawn(async move {
            if let Err(error) = server.interrupt(&id).await {
                tracing::warn!(%error, "cannot interrupt the remote kernel");
            }
        }))
    }

    /// Ends the kernel now, recording why: a kernel this host started is shut down; an
    /// attached one is restarted (it stays the user's). `Exited` follows; `stop` waits for the
    /// server's answer.
    pub fn kill(&mut self, reason: KilledBy) {
        if let Ok(mut slot) = self.killed_by.lock() {
            slot.get_or_insert(reason);
        }
        if !self.is_alive() || self.stopped {
            return;
        }
        self.stopped = true;
        let server = self.server.clone();
        let id = self.id.clone();
        let attached = self.attached;
        let endings = self.endings.clone();
        self.ending = Some(tokio::spawn(async move {
            let done = if attached {
                server.restart(&id).await
            } else {
                server.shutdown(&id).await
            };
            if let Err(error) = done {
                tracing::warn!(%error, "cannot end the remote kernel");
            }
            // The receiver is gone only when the kernel's tasks were aborted.
            let _ = endings.send("pi-repl ended the kernel".into());
        }));
    }

    /// Shuts the kernel down (unless attached) and waits for the server to confirm.
    pub async fn stop(&mut self) {
        if let Ok(mut slot) = self.killed_by.lock() {
            slot.get_or_insert(KilledBy::Host);
        }
        self.stop_this_kernel().await;
        // Kernels this one replaced, still being shut down.
        self.server.retired(RETIRED_GRACE).await;
    }

    async fn stop_this_kernel(&mut self) {
        if let Some(ending) = self.ending.take() {
            // A kill's REST call is under way: its end is the kernel's.
            if tokio::time::timeout(STOP_GRACE, ending).await.is_err() {
                tracing::warn!(kernel = %self.id, "the server did not end the kernel in time");
            }
            return;
        }
        if self.stopped {
            return;
        }
        self.stopped = true;
        // Closing is a courtesy: the server notices a dropped socket too.
        let _ = tokio::time::timeout(STOP_GRACE, self.writer.close(None)).await;
        if self.attached {
            return;
        }
        match tokio::time::timeout(STOP_GRACE, self.server.shutdown(&self.id)).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(%error, "cannot shut the remote kernel down"),
            Err(_) => {
                tracing::warn!(kernel = %self.id, "the server did not shut the kernel down in time")
            }
        }
    }

    fn error(&self, detail: String) -> KernelError {
        KernelError::Remote {
            server: self.server.url().to_string(),
            detail,
        }
    }
}

impl Drop for RemoteLink {
    fn drop(&mut self) {
        if self.stopped || self.attached {
            return;
        }
        // A handle dropped without `stop` (a kernel replaced after it died: the server may
        // have restarted it under the same id) must not leave a kernel on the server; the next
        // kernel's `stop` waits for this.
        self.server.retire(self.id.clone());
    }
}

/// Reads frames until the socket closes, routing each message by its channel.
///
/// With `hold_idles` set (a kernel that is not pi-repl's ipykernel), an IOPub `status: idle` is
/// held back as `late_idle` says: Deno's kernel now and then publishes `idle` before its
/// `execute_result`, and a cell is settled at its `idle`, so its value would be lost. An `idle`
/// whose request already had its value goes at once; a held one goes right after its
/// late value, or after `IDLE_GRACE` without another message for its request.
async fn read_frames(
    mut reader: Receiver,
    events: mpsc::UnboundedSender<KernelEvent>,
    endings: mpsc::UnboundedSender<String>,
    hold_idles: Arc<AtomicBool>,
) {
    let mut hold = IdleHold::default();
    let reason = loop {
        let next = if hold.is_holding() {
            match tokio::time::timeout(IDLE_GRACE, next_message(&mut reader)).await {
                Ok(next) => next,
                Err(_) => {
                    if let Some(idle) = hold.release()
                        && events.send(KernelEvent::IoPub(idle)).is_err()
                    {
                        return;
                    }
                    continue;
                }
            }
        } else {
            next_message(&mut reader).await
        };
        let (channel, message) = match next {
            Ok(decoded) => decoded,
            Err(reason) => break reason,
        };
        let event = match channel.as_str() {
            "iopub" => {
                if let Some(state) = ending_state(&message) {
                    break format!(
                        "the Jupyter server reported the kernel {state}: its process ended \
                         on the server's side (killed, out of memory, or crashed)"
                    );
                }
                for message in hold.on_iopub(message, hold_idles.load(Ordering::Relaxed)) {
                    if events.send(KernelEvent::IoPub(message)).is_err() {
                        return;
                    }
                }
                continue;
            }
            "shell" => KernelEvent::ShellReply(message),
            "stdin" => KernelEvent::StdinRequest(message),
            _ => continue,
        };
        if let Some(idle) = hold.before(event_parent(&event))
            && events.send(KernelEvent::IoPub(idle)).is_err()
        {
            return;
        }
        if events.send(event).is_err() {
            return;
        }
    };
    if let Some(idle) = hold.release() {
        // The receiver is gone only when the kernel's tasks were aborted.
        let _ = events.send(KernelEvent::IoPub(idle));
    }
    // The receiver is gone only when the kernel's tasks were aborted.
    let _ = endings.send(reason);
}

/// The next message and its channel; `Err` with the reason when the socket ended.
async fn next_message(reader: &mut Receiver) -> Result<(String, JupyterMessage), String> {
    loop {
        let decoded = match reader.next().await {
            Some(Ok(Message::Text(text))) => decode_json(&text),
            Some(Ok(Message::Binary(bytes))) => binary_protocol::deserialize_v1(&bytes),
            Some(Ok(Message::Close(_))) | None => {
                return Err("the server closed the kernel's channels".to_string());
            }
            Some(Ok(_)) => continue,
            Some(Err(error)) => return Err(format!("the connection to the kernel broke: {error}")),
        };
        match decoded {
            Ok((channel, message)) => {
                tracing::trace!(
                    %channel,
                    msg_type = %message.header.msg_type,
                    parent = ?parent_id(&message),
                    "from the kernel"
                );
                return Ok((channel, message));
            }
            Err(error) => tracing::debug!(%error, "skipping an unreadable message"),
        }
    }
}

fn event_parent(event: &KernelEvent) -> Option<&str> {
    match event {
        KernelEvent::IoPub(message)
        | KernelEvent::ShellReply(message)
        | KernelEvent::StdinRequest(message) => parent_id(message),
        KernelEvent::Exited(_) => None,
    }
}

/// A JSON frame (the legacy protocol): the message plus its `channel` field.
fn decode_json(text: &str) -> anyhow::Result<(String, JupyterMessage)> {
    let value: serde_json::Value = serde_json::from_str(text)?;
    let channel = value
        .get("channel")
        .and_then(|channel| channel.as_str())
        .unwrap_or_default()
        .to_string();
    Ok((channel, JupyterMessage::from_value(value)?))
}

/// The word for a status that means the kernel process is gone.
fn ending_state(message: &JupyterMessage) -> Option<&'static str> {
    match &message.content {
        JupyterMessageContent::Status(status) => match status.execution_state {
            ExecutionState::Restarting => Some("restarting"),
            ExecutionState::AutoRestarting => Some("autorestarting"),
            ExecutionState::Dead => Some("dead"),
            _ => None,
        },
        _ => None,
    }
}

/// Asks the server's kernel list about the kernel every `POLL_EVERY`.
async fn poll_server(server: JupyterServer, id: String, endings: mpsc::UnboundedSender<String>) {
    let mut failures = 0;
    loop {
        tokio::time::sleep(POLL_EVERY).await;
        let reason = match server.kernel(&id).await {
            Ok(Some(model)) if model.execution_state == "dead" => {
                "the Jupyter server lists the kernel as dead".to_string()
            }
            Ok(Some(_)) => {
                failures = 0;
                continue;
            }
            Ok(None) => "the kernel is gone from the Jupyter server's kernel list (shut down \
                         by another client or by the server)"
                .to_string(),
            Err(error) => {
                failures += 1;
                if failures < POLL_FAILURES {
                    continue;
                }
                format!("the Jupyter server stopped answering: {error}")
            }
        };
        // The receiver is gone only when the kernel's tasks were aborted.
        let _ = endings.send(reason);
        return;
    }
}

/// Waits for the first reason the kernel ended and reports `Exited` with it.
async fn report_end(
    mut endings: mpsc::UnboundedReceiver<String>,
    exited: Arc<AtomicBool>,
    killed_by: Arc<Mutex<Option<KilledBy>>>,
    events: mpsc::UnboundedSender<KernelEvent>,
) {
    let Some(reason) = endings.recv().await else {
        return;
    };
    exited.store(true, Ordering::SeqCst);
    tokio::time::sleep(EXIT_DRAIN).await;
    let exit = KernelExit {
        code: None,
        signal: None,
        oom_killed: false,
        killed_by: killed_by.lock().ok().and_then(|slot| slot.clone()),
        remote: Some(reason),
    };
    // The receiver is gone when the kernel handle was dropped; nobody needs the news then.
    let _ = events.send(KernelEvent::Exited(exit));
}
