//! MCP's transport on stdio, in front of rmcp: every frame is parsed once, every malformed one
//! gets a JSON-RPC error, and stdout is written by one ordered writer.
//!
//! The protocol on stdio is one JSON-RPC message per line. This layer reads stdin line by line
//! and parses each line once, straight into rmcp's typed message, which it hands to rmcp on a
//! channel (rmcp's `(Sink, Stream)` transport: rmcp never sees text). Only a line that does not
//! parse is looked at again, as JSON, to say what is wrong: a line that is not JSON gets
//! `-32700 Parse error`, one that is not a JSON-RPC 2.0 message (or is a batch, which MCP does
//! not use) `-32600 Invalid Request`, a request whose params its method cannot take `-32602
//! Invalid params` (rmcp would drop it without a word, and the client would wait for ever). A
//! second `initialize` is answered `-32600` here too. A valid JSON number outside what a double
//! holds (`1e400`, `-1e400`; serde_json refuses them, JavaScript and Python read them as
//! infinities) is read as the largest double of its sign, so the message is served like any
//! other instead of being refused as not JSON. Each `tools/call` is given its place in wire
//! order as it is read, inside the message (`call_order`), so its handler knows it whatever order
//! rmcp's tasks run in.
//!
//! rmcp's output arrives typed on a channel and is serialized here, once; it and these errors
//! share stdout one whole line at a time, in the order rmcp sent them. Invariant (issue 22): a response that follows a progress notification is
//! written only once the client has read everything before it (asked of stdout, see
//! `unread`), so no client reads a progress notification together with a response, and none
//! can handle them out of order. A call's progress is written before its result is made
//! (`Progress::send` waits until rmcp has handed it to this writer's channel), so no progress
//! for a call follows its result.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, ServerJsonRpcMessage, ServerNotification};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::call_order::CallOrder;

/// Messages waiting on each channel between the guard and rmcp: a full channel holds the
/// sender back (the reader stops reading stdin; rmcp waits to send), as a full pipe would.
const CHANNEL_MESSAGES: usize = 16;

/// How much of stdin one read asks for. Tokio reads stdin on its blocking pool, one hand-off
/// per read: at `BufReader`'s default 8 KiB a 60 MiB frame took 7 680 of them and half the
/// frame's protocol time (docs/benchmarks.md, "Where a 60 MiB frame's time goes"). A read
/// returns what the pipe holds, so a small message waits no longer.
const READ_CHUNK_BYTES: usize = 1 << 20;

/// Longest message accepted, in bytes. A longer line is answered with an error and skipped,
/// so a client that never sends a newline cannot exhaust memory. The one limit on a frame:
/// rmcp's own line limit is lifted (see `serve_stdio`), so every frame accepted here is served.
pub const MAX_FRAME_BYTES: usize = 64 << 20;

/// The longest a response that follows a progress notification waits for the client to read
/// what was written before it; a client that reads nothing for this long gets it anyway.
const READ_WAIT: Duration = Duration::from_secs(10);

/// How often the writer looks whether the client has read what it was sent.
const READ_POLL: Duration = Duration::from_millis(1);

/// When stdout cannot tell what the client has read (a file, a terminal): the least time
/// between a progress notification and the response written after it.
pub const RESULT_GAP: Duration = Duration::from_millis(50);

/// Bytes written to stdout that the client has not read yet, if stdout can tell.
pub type Unread = Box<dyn Fn() -> Option<u64> + Send + Sync>;

/// The two ends rmcp takes as its transport (`(Sink, Stream)` of typed messages), and the tasks
/// that connect them to the real streams.
pub struct GuardedTransport {
    /// What the client sent, parsed.
    pub incoming: futures::channel::mpsc::Receiver<ClientJsonRpcMessage>,
    /// What rmcp sends the client, to be serialized and written in order.
    pub outgoing: futures::channel::mpsc::Sender<ServerJsonRpcMessage>,
    pub tasks: Vec<JoinHandle<()>>,
}

/// Wraps `input` and `output` (stdin and stdout in production); `unread` says how much of
/// `output` the client has not read yet.
pub fn guard(
    input: impl AsyncRead + Unpin + Send + 'static,
    output: impl AsyncWrite + Unpin + Send + 'static,
    unread: Unread,
) -> GuardedTransport {
    let (feeder, incoming) = futures::channel::mpsc::channel(CHANNEL_MESSAGES);
    let (outgoing, drain) = futures::channel::mpsc::channel(CHANNEL_MESSAGES);
    let (errors_tx, errors_rx) = mpsc::unbounded_channel::<String>();
    let reading = tokio::spawn(read_frames(input, feeder, errors_tx, CallOrder::default()));
    let writing = tokio::spawn(write_frames(drain, errors_rx, output, unread));
    GuardedTransport {
        incoming,
        outgoing,
        tasks: vec![reading, writing],
    }
}

/// What to do with one line from the client.
#[derive(Debug, PartialEq)]
pub enum Frame {
    /// A JSON-RPC message: pass it on.
    Message,
    /// A well-formed `tools/call` request: pass it on with its place in wire order.
    Call(rmcp::model::RequestId),
    /// An `initialize` request (with this id): pass on the first, refuse any other.
    Initialize(Value),
    /// Nothing to do (a blank line).
    Blank,
    /// Answer with this error response.
    Reject(Value),
}

/// Reads one line: the message rmcp is handed (parsed once, on the way here) and what to do
/// with it. A line that does not parse is looked at as JSON ([`classify_line`]) to say why; a
/// well-formed JSON-RPC message rmcp's types still refuse is a request whose params its method
/// cannot take (`-32602`), or a notification or response nobody can act on (skipped).
pub fn read_message(line: &str) -> (Frame, Option<ClientJsonRpcMessage>) {
    let trimmed = line.trim();
    if trimmed.is_empty() {
        return (Frame::Blank, None);
    }
    if let Ok(message) = serde_json::from_str::<ClientJsonRpcMessage>(trimmed) {
        return handed_on(message);
    }
    let (frame, rewritten) = classify_line(trimmed);
    if matches!(frame, Frame::Reject(_) | Frame::Blank) {
        return (frame, None);
    }
    let text = rewritten.as_deref().unwrap_or(trimmed);
    match serde_json::from_str::<ClientJsonRpcMessage>(text) {
        Ok(message) => handed_on(message),
        Err(error) => (unreadable(text, &error), None),
    }
}

/// A parsed message's frame, and the message unless the frame refuses it.
fn handed_on(message: ClientJsonRpcMessage) -> (Frame, Option<ClientJsonRpcMessage>) {
    let frame = frame_of(&message);
    let message = (!matches!(frame, Frame::Reject(_))).then_some(message);
    (frame, message)
}

/// What to do with a message that parsed: book a tool call, tell an `initialize` apart (by its
/// method: one whose params rmcp cannot read arrives as a custom request), refuse a tool call
/// whose params are not one (rmcp reads it as a custom request too, and would answer "method
/// not found").
fn frame_of(message: &ClientJsonRpcMessage) -> Frame {
    let rmcp::model::JsonRpcMessage::Request(request) = message else {
        return Frame::Message;
    };
    let id = || serde_json::to_value(&request.id).unwrap_or(Value::Null);
    match &request.request {
        ClientRequest::CallToolRequest(_) => Frame::Call(request.id.clone()),
        ClientRequest::InitializeRequest(_) => Frame::Initialize(id()),
        ClientRequest::CustomRequest(custom) if custom.method == "initialize" => {
            Frame::Initialize(id())
        }
        ClientRequest::CustomRequest(custom) if custom.method == "tools/call" => {
            let mut message = serde_json::Map::new();
            message.insert(
                "params".into(),
                custom.params.clone().unwrap_or(Value::Null),
            );
            classify_call(&message, id())
        }
        _ => Frame::Message,
    }
}

/// A well-formed JSON-RPC message that rmcp's types refuse (an id that is not a whole number
/// or a string, say): a request is answered `-32600` with serde's reason; anything else (a
/// notification, a response) is skipped and logged.
fn unreadable(text: &str, error: &serde_json::Error) -> Frame {
    let value: Value = serde_json::from_str(text).unwrap_or(Value::Null);
    let method = value
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match value.get("id") {
        Some(id) if !method.is_empty() => Frame::Reject(error_response(
            id.clone(),
            -32600,
            &format!("Invalid Request: this server cannot read this `{method}` request ({error})"),
        )),
        _ => {
            tracing::warn!(%error, "skipped a message rmcp cannot read");
            Frame::Blank
        }
    }
}

/// Classifies one line as JSON (the rare path of [`read_message`], and what it says of a
/// line that does not parse).
pub fn classify(line: &str) -> Frame {
    let trimmed = line.trim();
    if trimmed.is_empty() {
        return Frame::Blank;
    }
    let value: Value = match serde_json::from_str(trimmed) {
        Ok(value) => value,
        Err(error) => {
            return Frame::Reject(error_response(
                Value::Null,
                -32700,
                &format!("Parse error: the line is not JSON ({error})"),
            ));
        }
    };
    let Value::Object(message) = &value else {
        let what = if value.is_array() {
            "batches are not supported; send one message per line"
        } else {
            "a message must be a JSON object"
        };
        return Frame::Reject(error_response(
            Value::Null,
            -32600,
            &format!("Invalid Request: {what}"),
        ));
    };
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    let id_ok = matches!(
        message.get("id"),
        None | Some(Value::String(_)) | Some(Value::Number(_))
    );
    let version_ok = message.get("jsonrpc") == Some(&Value::String("2.0".into()));
    let method_ok = match message.get("method") {
        Some(Value::String(_)) => true,
        Some(_) => false,
        // A response to one of our requests.
        None => {
            message.contains_key("id")
                && (message.contains_key("result") || message.contains_key("error"))
        }
    };
    if !(version_ok && method_ok && id_ok) {
        let reason = if !version_ok {
            "\"jsonrpc\" must be \"2.0\""
        } else if !id_ok {
            "\"id\" must be a string or a number"
        } else {
            "a request needs a string \"method\""
        };
        let id = if id_ok { id } else { Value::Null };
        return Frame::Reject(error_response(
            id,
            -32600,
            &format!("Invalid Request: {reason}"),
        ));
    }
    match message.get("method").and_then(Value::as_str) {
        Some("tools/call") => classify_call(message, id),
        Some("initialize") if message.contains_key("id") => Frame::Initialize(id),
        _ => Frame::Message,
    }
}

/// Classifies one line as [`classify`] does, reading numbers beyond a double's range as the
/// largest double of their sign; with the text to pass on when it had to be rewritten so.
pub fn classify_line(line: &str) -> (Frame, Option<String>) {
    let frame = classify(line);
    let not_json = matches!(&frame, Frame::Reject(response) if response["error"]["code"] == -32700);
    if not_json && let Some(rewritten) = saturate_numbers(line.trim()) {
        let again = classify(&rewritten);
        if !matches!(&again, Frame::Reject(response) if response["error"]["code"] == -32700) {
            return (again, Some(rewritten));
        }
    }
    (frame, None)
}

/// The largest double, written so serde_json reads it back exactly.
const MAX_DOUBLE: &str = "1.7976931348623157e308";

/// `text` with every number outside a double's range (outside JSON strings) replaced by the
/// largest double of its sign; `None` when there is none. A linear scan, run only on a line
/// that serde_json refused.
fn saturate_numbers(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut changed = false;
    let mut in_string = false;
    let mut at = 0;
    while at < bytes.len() {
        let byte = bytes[at];
        if in_string {
            match byte {
                b'\\' => at += 2,
                b'"' => {
                    in_string = false;
                    at += 1;
                }
                _ => at += 1,
            }
            continue;
        }
        if byte == b'"' {
            in_string = true;
            at += 1;
            continue;
        }
        if byte != b'-' && !byte.is_ascii_digit() {
            at += 1;
            continue;
        }
        let start = at;
        at += 1;
        while at < bytes.len()
            && matches!(bytes[at], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-')
        {
            at += 1;
        }
        let number = &text[start..at];
        if number.parse::<f64>().is_ok_and(f64::is_infinite) {
            out.push_str(&text[copied..start]);
            if number.starts_with('-') {
                out.push('-');
            }
            out.push_str(MAX_DOUBLE);
            copied = at;
            changed = true;
        }
    }
    if !changed {
        return None;
    }
    out.push_str(&text[copied..]);
    Some(out)
}

/// A `tools/call` request: its params must be what rmcp reads as a tool call.
fn classify_call(message: &serde_json::Map<String, Value>, id: Value) -> Frame {
    use serde::Deserialize;
    let Ok(request_id) = rmcp::model::RequestId::deserialize(&id) else {
        // A notification, or an id rmcp cannot read: rmcp answers (or ignores) it itself.
        return Frame::Message;
    };
    let params = message.get("params").unwrap_or(&Value::Null);
    match rmcp::model::CallToolRequestParams::deserialize(params) {
        Ok(_) => Frame::Call(request_id),
        Err(error) => Frame::Reject(error_response(
            id,
            -32602,
            &format!(
                "Invalid params: tools/call takes {{\"name\": \"execute\", \"arguments\": \
                 {{\"code\": \"...\"}}}} ({error})"
            ),
        )),
    }
}

fn error_response(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

async fn read_frames(
    input: impl AsyncRead + Unpin,
    mut feeder: futures::channel::mpsc::Sender<ClientJsonRpcMessage>,
    errors: mpsc::UnboundedSender<String>,
    order: CallOrder,
) {
    let mut reader = BufReader::with_capacity(READ_CHUNK_BYTES, input);
    // An `initialize` request was passed on: any later one is refused.
    let mut initialized = false;
    loop {
        let line = match read_line(&mut reader, MAX_FRAME_BYTES).await {
            Ok(Line::Eof) => break,
            Ok(Line::Complete(bytes)) => String::from_utf8(bytes),
            Ok(Line::TooLong(length)) => {
                let response = error_response(
                    Value::Null,
                    -32600,
                    &format!(
                        "Invalid Request: a message of {length} bytes exceeds the {MAX_FRAME_BYTES}-byte limit"
                    ),
                );
                if errors.send(response.to_string()).is_err() {
                    break;
                }
                continue;
            }
            Err(_) => break, // stdin failed: the client is gone
        };
        let (frame, message) = match &line {
            Ok(text) => read_message(text),
            Err(_) => (
                Frame::Reject(error_response(
                    Value::Null,
                    -32700,
                    "Parse error: the line is not UTF-8",
                )),
                None,
            ),
        };
        let frame = match frame {
            Frame::Initialize(id) if initialized => Frame::Reject(error_response(
                id,
                -32600,
                "Invalid Request: the session is already initialized; `initialize` is sent once \
                 per connection",
            )),
            Frame::Initialize(_) => {
                initialized = true;
                Frame::Message
            }
            frame => frame,
        };
        let pass_on = match frame {
            Frame::Blank | Frame::Initialize(_) => false,
            Frame::Reject(response) => {
                tracing::warn!("rejected a malformed frame");
                if errors.send(response.to_string()).is_err() {
                    break;
                }
                false
            }
            Frame::Message | Frame::Call(_) => true,
        };
        if pass_on
            && let Some(mut message) = message
            && {
                order.book(&mut message);
                feeder.send(message).await.is_err()
            }
        {
            break; // rmcp has stopped reading
        }
    }
    // Dropping the feeder tells rmcp that the client closed stdin.
}

/// One line read with a length limit.
enum Line {
    Complete(Vec<u8>),
    /// The line was longer than the limit; it was consumed and discarded. Holds its length.
    TooLong(usize),
    Eof,
}

async fn read_line(
    reader: &mut BufReader<impl AsyncRead + Unpin>,
    limit: usize,
) -> std::io::Result<Line> {
    use tokio::io::AsyncBufReadExt;
    let mut line = Vec::new();
    let mut length = 0usize;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(if length == 0 {
                Line::Eof
            } else if length > limit {
                Line::TooLong(length)
            } else {
                Line::Complete(line)
            });
        }
        let (chunk, done) = match available.iter().position(|b| *b == b'\n') {
            Some(end) => (&available[..end], Some(end + 1)),
            None => (available, None),
        };
        length += chunk.len();
        if length <= limit {
            line.extend_from_slice(chunk);
        } else if !line.is_empty() {
            line = Vec::new(); // over the limit: stop holding it
        }
        let consumed = done.unwrap_or(available.len());
        reader.consume(consumed);
        if done.is_some() {
            return Ok(if length > limit {
                Line::TooLong(length)
            } else {
                Line::Complete(line)
            });
        }
    }
}

/// What an outgoing message is, as far as the order of stdout is concerned.
#[derive(Debug, PartialEq)]
enum Outgoing {
    Progress,
    Response,
    Other,
}

fn outgoing(message: &ServerJsonRpcMessage) -> Outgoing {
    match message {
        rmcp::model::JsonRpcMessage::Notification(notification)
            if matches!(
                notification.notification,
                ServerNotification::ProgressNotification(_)
            ) =>
        {
            Outgoing::Progress
        }
        rmcp::model::JsonRpcMessage::Response(_) | rmcp::model::JsonRpcMessage::Error(_) => {
            Outgoing::Response
        }
        _ => Outgoing::Other,
    }
}

/// Waits until the client has read everything written so far (at most [`READ_WAIT`]); when
/// stdout cannot tell, until [`RESULT_GAP`] after the progress written at `progress_at`.
async fn until_read(unread: &Unread, progress_at: Instant) {
    let deadline = Instant::now() + READ_WAIT;
    loop {
        match unread() {
            Some(0) => return,
            Some(_) if Instant::now() < deadline => tokio::time::sleep(READ_POLL).await,
            Some(bytes) => {
                tracing::warn!(
                    bytes,
                    "the client has not read stdout for a while; writing on"
                );
                return;
            }
            None => {
                tokio::time::sleep_until(progress_at + RESULT_GAP).await;
                return;
            }
        }
    }
}

async fn write_frames(
    mut drain: futures::channel::mpsc::Receiver<ServerJsonRpcMessage>,
    mut errors: mpsc::UnboundedReceiver<String>,
    mut output: impl AsyncWrite + Unpin,
    unread: Unread,
) {
    let mut errors_open = true;
    // When a progress notification was last written, until the client has read it.
    let mut progress_unread: Option<Instant> = None;
    loop {
        let (line, kind) = tokio::select! {
            message = drain.next() => match message {
                Some(message) => match serde_json::to_string(&message) {
                    Ok(line) => (line, outgoing(&message)),
                    Err(error) => {
                        tracing::warn!(%error, "cannot write a message rmcp sent");
                        continue;
                    }
                },
                None => break,
            },
            // The guard's own errors are responses (to a request it refused).
            error = errors.recv(), if errors_open => match error {
                Some(line) => (line, Outgoing::Response),
                None => { errors_open = false; continue; }
            },
        };
        if kind == Outgoing::Response
            && let Some(progress_at) = progress_unread.take()
        {
            until_read(&unread, progress_at).await;
        }
        let written = async {
            output.write_all(line.as_bytes()).await?;
            output.write_all(b"\n").await?;
            output.flush().await
        };
        if written.await.is_err() {
            break; // the client is gone
        }
        if kind == Outgoing::Progress {
            progress_unread = Some(Instant::now());
        }
    }
    while let Ok(line) = errors.try_recv() {
        let _ = output.write_all(format!("{line}\n").as_bytes()).await;
    }
    let _ = output.flush().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code_of(frame: Frame) -> i64 {
        match frame {
            Frame::Reject(response) => response["error"]["code"].as_i64().unwrap(),
            other => panic!("not rejected: {other:?}"),
        }
    }

    #[test]
    fn well_formed_messages_pass() {
        assert_eq!(
            classify(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#),
            Frame::Message
        );
        assert_eq!(
            classify(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Frame::Message
        );
        assert_eq!(
            classify(r#"{"jsonrpc":"2.0","id":"a","result":{}}"#),
            Frame::Message
        );
        assert_eq!(classify("   "), Frame::Blank);
    }

    #[test]
    fn malformed_frames_get_the_json_rpc_error_codes() {
        assert_eq!(code_of(classify("not json")), -32700);
        assert_eq!(code_of(classify("[1, 2]")), -32600);
        assert_eq!(code_of(classify("42")), -32600);
        assert_eq!(code_of(classify(r#"{"id":1,"method":"x"}"#)), -32600);
        assert_eq!(code_of(classify(r#"{"jsonrpc":"2.0","id":1}"#)), -32600);
        assert_eq!(
            code_of(classify(r#"{"jsonrpc":"2.0","id":{},"method":"x"}"#)),
            -32600
        );
    }

    #[tokio::test]
    async fn an_endless_line_is_rejected_without_holding_it() {
        let mut input = vec![b'x'; 5000];
        input.push(b'\n');
        input.extend_from_slice(b"{}\n");
        let mut reader = BufReader::with_capacity(64, &input[..]);
        assert!(matches!(
            read_line(&mut reader, 1000).await.unwrap(),
            Line::TooLong(5000)
        ));
        assert!(
            matches!(read_line(&mut reader, 1000).await.unwrap(), Line::Complete(l) if l == b"{}")
        );
        assert!(matches!(
            read_line(&mut reader, 1000).await.unwrap(),
            Line::Eof
        ));
    }

    #[test]
    fn a_tool_call_is_booked_and_bad_call_params_are_invalid_params() {
        assert_eq!(
            classify(
                r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"execute","arguments":{"code":"1"}}}"#
            ),
            Frame::Call(rmcp::model::RequestId::Number(3))
        );
        for params in [
            r#""x = 1""#,
            r#"{"name":"execute","arguments":"x = 1"}"#,
            r#"{"arguments":{"code":"1"}}"#,
        ] {
            let line =
                format!(r#"{{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{params}}}"#);
            match classify(&line) {
                Frame::Reject(response) => {
                    assert_eq!(response["error"]["code"], -32602, "{params}");
                    assert_eq!(response["id"], 4);
                }
                other => panic!("{params}: not rejected: {other:?}"),
            }
        }
    }

    #[test]
    fn an_invalid_request_keeps_its_id() {
        match classify(r#"{"jsonrpc":"1.0","id":7,"method":"x"}"#) {
            Frame::Reject(response) => assert_eq!(response["id"], 7),
            other => panic!("{other:?}"),
        }
    }

    /// Issue 22: a valid number beyond a double (`1e400`) made the whole line "not JSON", and
    /// the call it carried was never answered.
    #[test]
    fn numbers_beyond_a_double_are_read_as_the_largest_double() {
        let call = |number: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{{"name":"execute","arguments":{{"code":"x = '1e400'"}},"_meta":{{"n":{number},"s":"\"{number}"}}}}}}"#
            )
        };
        for number in [
            "1e400",
            "-1e400",
            "1E+400",
            &format!("1{}", "0".repeat(400)),
        ] {
            let (frame, rewritten) = classify_line(&call(number));
            assert_eq!(
                frame,
                Frame::Call(rmcp::model::RequestId::Number(5)),
                "{number}"
            );
            let value: Value = serde_json::from_str(&rewritten.unwrap()).unwrap();
            let n = value["params"]["_meta"]["n"].as_f64().unwrap();
            assert_eq!(n.abs(), f64::MAX, "{number}");
            assert_eq!(n < 0.0, number.starts_with('-'));
            // Strings are left alone, escaped quotes included.
            assert_eq!(value["params"]["_meta"]["s"], format!("\"{number}"));
            assert_eq!(value["params"]["arguments"]["code"], "x = '1e400'");
        }
        // Numbers serde_json reads (tiny, long, huge but finite) pass unchanged.
        for number in [
            "1e-400",
            "-1e-400",
            "123456789012345678901234567890",
            "1.5e308",
        ] {
            let (frame, rewritten) = classify_line(&call(number));
            assert_eq!(
                frame,
                Frame::Call(rmcp::model::RequestId::Number(5)),
                "{number}"
            );
            assert!(rewritten.is_none(), "{number}");
        }
        // A line that is not JSON stays a parse error.
        let (frame, _) = classify_line(r#"{"jsonrpc":"2.0","id":1e400,"method":"#);
        assert_eq!(code_of(frame), -32700);
    }

    #[test]
    fn an_initialize_request_is_told_apart() {
        assert_eq!(
            classify(r#"{"jsonrpc":"2.0","id":2,"method":"initialize"}"#),
            Frame::Initialize(json!(2))
        );
        assert_eq!(
            classify(r#"{"jsonrpc":"2.0","method":"initialize"}"#),
            Frame::Message
        );
    }

    #[test]
    fn outgoing_lines_are_told_apart_as_rmcp_writes_them() {
        use rmcp::model::{
            ProgressNotificationParam, ProgressToken, ServerJsonRpcMessage, ServerNotification,
            ServerResult,
        };
        let progress = ServerJsonRpcMessage::notification(ServerNotification::from(
            rmcp::model::ProgressNotification::new(ProgressNotificationParam::new(
                ProgressToken(rmcp::model::NumberOrString::Number(1)),
                1.0,
            )),
        ));
        let response = ServerJsonRpcMessage::response(
            ServerResult::empty(()),
            rmcp::model::RequestId::Number(1),
        );
        let parsed = |text: &str| serde_json::from_str::<ServerJsonRpcMessage>(text).unwrap();
        assert_eq!(outgoing(&progress), Outgoing::Progress);
        assert_eq!(outgoing(&response), Outgoing::Response);
        assert_eq!(
            outgoing(&parsed(
                r#"{"jsonrpc":"2.0","id":3,"error":{"code":1,"message":"x"}}"#
            )),
            Outgoing::Response
        );
        assert_eq!(
            outgoing(&parsed(r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#)),
            Outgoing::Other
        );
    }

    #[test]
    fn a_line_is_parsed_once_into_the_message_rmcp_is_handed() {
        let (frame, message) = read_message(
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"execute","arguments":{"code":"1+1"}}}"#,
        );
        assert_eq!(frame, Frame::Call(rmcp::model::RequestId::Number(7)));
        let Some(rmcp::model::JsonRpcMessage::Request(request)) = message else {
            panic!("not a request: {message:?}");
        };
        let ClientRequest::CallToolRequest(call) = request.request else {
            panic!("not a tool call");
        };
        assert_eq!(call.params.name, "execute");
        let (frame, message) = read_message(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}"#,
        );
        assert_eq!(frame, Frame::Initialize(json!(1)));
        assert!(message.is_some());
        // What does not parse gets the error it always got, and nothing is handed on.
        let (frame, message) = read_message("not json");
        assert_eq!(code_of(frame), -32700);
        assert!(message.is_none());
        // A number beyond a double is read as the largest one, then parsed as a message.
        let (frame, message) = read_message(
            r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"execute","arguments":{"code":"x","wait_ms":1e400}}}"#,
        );
        assert_eq!(frame, Frame::Call(rmcp::model::RequestId::Number(5)));
        assert!(message.is_some());
        // A tool call or an initialize whose params rmcp cannot read (it reads them as custom
        // requests) is still told apart.
        let (frame, message) = read_message(
            r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"arguments":3}}"#,
        );
        assert_eq!(code_of(frame), -32602);
        assert!(message.is_none());
        let (frame, _) =
            read_message(r#"{"jsonrpc":"2.0","id":2,"method":"initialize","params":{}}"#);
        assert_eq!(frame, Frame::Initialize(json!(2)));
        // JSON-RPC that rmcp's types refuse (an id that is no whole number) is answered, where
        // rmcp would drop it without a word.
        let (frame, message) = read_message(r#"{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}"#);
        assert_eq!(code_of(frame), -32600);
        assert!(message.is_none());
    }

    /// Issue 22: a progress notification and the response after it must never reach the
    /// client in one read. The response waits until the client has read the progress.
    #[tokio::test]
    async fn a_response_after_progress_waits_until_the_client_has_read_it() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicU64, Ordering};
        use tokio::io::AsyncBufReadExt;
        let (mut rmcp_side, drain) = futures::channel::mpsc::channel(4);
        let (output, mut client) = tokio::io::duplex(1 << 16);
        let unread_count = Arc::new(AtomicU64::new(0));
        let probe = Arc::clone(&unread_count);
        let (asked_tx, mut asked) = mpsc::unbounded_channel();
        let unread: Unread = Box::new(move || {
            let count = probe.load(Ordering::SeqCst);
            // Nobody listens once the test has what it needs.
            let _ = asked_tx.send(count);
            Some(count)
        });
        let (_errors_tx, errors_rx) = mpsc::unbounded_channel();
        let writer = tokio::spawn(write_frames(drain, errors_rx, output, unread));
        let progress = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1.0}}"#;
        let response = r#"{"jsonrpc":"2.0","id":1,"result":{}}"#;
        let typed = |text: &str| serde_json::from_str::<ServerJsonRpcMessage>(text).unwrap();
        let same = |line: &str, text: &str| {
            serde_json::from_str::<Value>(line).unwrap()
                == serde_json::from_str::<Value>(text).unwrap()
        };
        // The client has not read the progress yet.
        unread_count.store(1, Ordering::SeqCst);
        rmcp_side.send(typed(progress)).await.unwrap();
        rmcp_side.send(typed(response)).await.unwrap();
        let mut reader = BufReader::new(&mut client);
        let mut first = String::new();
        reader.read_line(&mut first).await.unwrap();
        assert!(same(first.trim_end(), progress), "{first}");
        // The writer asked, heard that something is unread, and holds the response...
        while asked.recv().await != Some(1) {}
        let mut second = String::new();
        use futures::FutureExt;
        assert!(
            reader.read_line(&mut second).now_or_never().is_none(),
            "the response was written before the progress was read: {second}"
        );
        // ...and written once the client has read everything.
        unread_count.store(0, Ordering::SeqCst);
        reader.read_line(&mut second).await.unwrap();
        assert!(same(second.trim_end(), response), "{second}");
        drop(rmcp_side);
        writer.await.unwrap();
    }
}
