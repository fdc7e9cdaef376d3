//! A fake model endpoint on 127.0.0.1, for tests of the host-side provider (`--llm-base-url`).
//!
//! A mock because no real model endpoint is reachable from the test machine. It speaks enough
//! HTTP/1.1 and OpenAI's chat completions (or Anthropic's Messages) to answer as they do
//! (text, model, usage), records every request with its headers, can hold its answers until
//! released (to see a request cancelled: the client closing its connection is counted), and
//! counts requests in flight. Runs on threads, so it serves sync and async tests alike; stopped
//! when dropped.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// Which API the fake speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FakeApi {
    OpenAi,
    Anthropic,
}

/// One request as the fake received it.
#[derive(Debug, Clone)]
pub struct SeenRequest {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl SeenRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The user message's text.
    pub fn user_text(&self) -> String {
        self.body["messages"]
            .as_array()
            .and_then(|messages| messages.iter().find(|m| m["role"] == "user"))
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default()
            .to_string()
    }
}

/// How the fake answers one request.
pub enum Reply {
    /// A successful answer with this text.
    Text(String),
    /// An HTTP error status with this body.
    Status(u16, String),
}

type Answer = Box<dyn Fn(&SeenRequest) -> Reply + Send + Sync>;

#[derive(Default)]
struct State {
    seen: Vec<SeenRequest>,
    in_flight: usize,
    max_in_flight: usize,
    held: bool,
    /// Requests whose client closed the connection before the answer.
    dropped: usize,
    stopped: bool,
}

struct Shared {
    api: FakeApi,
    answer: Answer,
    state: Mutex<State>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A running fake endpoint.
pub struct FakeModel {
    /// The base URL to pass as `--llm-base-url`.
    pub base_url: String,
    shared: Arc<Shared>,
}

impl FakeModel {
    /// A fake answering each request with `answer`.
    pub fn start(
        api: FakeApi,
        answer: impl Fn(&SeenRequest) -> Reply + Send + Sync + 'static,
    ) -> FakeModel {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let address = listener.local_addr().expect("local address");
        let shared = Arc::new(Shared {
            api,
            answer: Box::new(answer),
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        });
        let serving = Arc::clone(&shared);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if serving.lock().stopped {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let shared = Arc::clone(&serving);
                std::thread::spawn(move || serve(&shared, stream));
            }
        });
        let base_url = match api {
            FakeApi::OpenAi => format!("http://{address}/v1"),
            FakeApi::Anthropic => format!("http://{address}"),
        };
        FakeModel { base_url, shared }
    }

    /// A fake answering `echo: <the user's text>`.
    pub fn echo(api: FakeApi) -> FakeModel {
        FakeModel::start(api, |request| {
            Reply::Text(format!("echo: {}", request.user_text()))
        })
    }

    /// Answers wait until [`FakeModel::release`].
    pub fn hold(&self) {
        self.shared.lock().held = true;
    }

    pub fn release(&self) {
        self.shared.lock().held = false;
        self.shared.changed.notify_all();
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<SeenRequest> {
        self.shared.lock().seen.clone()
    }

    /// The most requests that were in flight at once.
    pub fn max_in_flight(&self) -> usize {
        self.shared.lock().max_in_flight
    }

    /// Waits until `n` requests have arrived; panics after `limit` (a hang made a failure).
    pub fn wait_for_requests(&self, n: usize, limit: Duration) -> Vec<SeenRequest> {
        self.wait_until(limit, |state| state.seen.len() >= n, "requests");
        self.requests()
    }

    /// Waits until the client has closed `n` connections before their answer.
    pub fn wait_for_dropped(&self, n: usize, limit: Duration) {
        self.wait_until(limit, |state| state.dropped >= n, "dropped requests");
    }

    fn wait_until(&self, limit: Duration, done: impl Fn(&State) -> bool, what: &str) {
        let deadline = Instant::now() + limit;
        let mut state = self.shared.lock();
        while !done(&state) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "the fake model did not see the {what} within {limit:?}: {} requests, {} dropped",
                state.seen.len(),
                state.dropped
            );
            state = self
                .shared
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        self.shared.lock().stopped = true;
        self.shared.changed.notify_all();
        // Wakes the accept loop so it sees the stop.
        if let Some(address) = self.base_url.strip_prefix("http://") {
            let address = address.trim_end_matches("/v1");
            let _ = TcpStream::connect(address);
        }
    }
}

fn serve(shared: &Shared, stream: TcpStream) {
    let Some(request) = read_request(&stream) else {
        return;
    };
    {
        let mut state = shared.lock();
        if state.stopped {
            return;
        }
        state.seen.push(request.clone());
        state.in_flight += 1;
        state.max_in_flight = state.max_in_flight.max(state.in_flight);
        shared.changed.notify_all();
    }
    let closed = wait_while_held(shared, &stream);
    let written = !closed && write_reply(shared, &request, &stream);
    let mut state = shared.lock();
    state.in_flight -= 1;
    if !written {
        state.dropped += 1;
    }
    shared.changed.notify_all();
}

/// Waits while answers are held; true when the client closed the connection meanwhile.
fn wait_while_held(shared: &Shared, stream: &TcpStream) -> bool {
    let mut state = shared.lock();
    while state.held && !state.stopped {
        drop(state);
        if client_closed(stream) {
            return true;
        }
        state = shared.lock();
        // The client closing cannot wake a condvar: look again every few milliseconds.
        state = shared
            .changed
            .wait_timeout(state, Duration::from_millis(20))
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .0;
    }
    false
}

fn client_closed(stream: &TcpStream) -> bool {
    let mut byte = [0u8; 1];
    if stream.set_nonblocking(true).is_err() {
        return true;
    }
    let closed = match stream.peek(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(error) => error.kind() != std::io::ErrorKind::WouldBlock,
    };
    let _ = stream.set_nonblocking(false);
    closed
}

fn read_request(stream: &TcpStream) -> Option<SeenRequest> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let path = parts.next()?.to_string();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).ok()?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':')?;
        headers.push((name.trim().to_string(), value.trim().to_string()));
    }
    let length: usize = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(SeenRequest {
        method,
        path,
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    })
}

fn write_reply(shared: &Shared, request: &SeenRequest, mut stream: &TcpStream) -> bool {
    let (status, body) = match (shared.answer)(request) {
        Reply::Text(text) => (200, answer_body(shared.api, request, &text)),
        Reply::Status(status, body) => (status, body),
    };
    let head = format!(
        "HTTP/1.1 {status} Fake\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).is_ok() && stream.write_all(body.as_bytes()).is_ok()
}

/// The API's answer for `text`; usage counts 4 characters a token.
fn answer_body(api: FakeApi, request: &SeenRequest, text: &str) -> String {
    let input = (request.body.to_string().len() as u64).div_ceil(4);
    let output = (text.len() as u64).div_ceil(4);
    let model = request.body["model"].as_str().unwrap_or("fake-model");
    match api {
        FakeApi::OpenAi => json!({
            "id": "chatcmpl-fake", "object": "chat.completion", "model": model,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": input, "completion_tokens": output,
                      "total_tokens": input + output},
        }),
        FakeApi::Anthropic => json!({
            "id": "msg_fake", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
            "usage": {"input_tokens": input, "output_tokens": output},
        }),
    }
    .to_string()
}
