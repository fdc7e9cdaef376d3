//! A guard in front of the MCP transport: every malformed frame gets a JSON-RPC error, and
//! stdout is written by one ordered writer.
//!
//! The protocol on stdio is one JSON-RPC message per line. rmcp drops a line it cannot parse
//! without a word; a client that sent a typo then waits forever. This layer reads stdin line
//! by line, answers a line that is not JSON with `-32700 Parse error` and a line that is not a
//! JSON-RPC 2.0 message (or is a batch, which MCP does not use) with `-32600 Invalid Request`,
//! and passes every well-formed line to rmcp through an in-memory pipe. A second `initialize`
//! is answered `-32600` here too (rmcp would answer one whose params it cannot read `-32601`).
//! A valid JSON number outside what a double holds (`1e400`, `-1e400`; serde_json refuses
//! them, JavaScript and Python read them as infinities) is read as the largest double of its
//! sign, so the message is served like any other instead of being refused as not JSON.
//!
//! rmcp's output and these errors share stdout one whole line at a time, in the order rmcp
//! wrote them. Invariant (issue 22): a response that follows a progress notification is
//! written only once the client has read everything before it (asked of stdout, see
//! `unread`), so no client reads a progress notification together with a response, and none
//! can handle them out of order. A call's progress is written before its result is made
//! (`Progress::send` waits until rmcp has written it into this pipe), so no progress for a
//! call follows its result.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::call_order::CallOrder;

/// Size of the in-memory pipes between the guard and rmcp.
const PIPE_BYTES: usize = 1 << 20;

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

/// The two ends rmcp reads and writes, and the tasks that connect them to the real streams.
pub struct GuardedTransport {
    pub reader: DuplexStream,
    pub writer: DuplexStream,
    pub tasks: Vec<JoinHandle<()>>,
}

/// Wraps `input` and `output` (stdin and stdout in production); `unread` says how much of
/// `output` the client has not read yet.
pub fn guard(
    input: impl AsyncRead + Unpin + Send + 'static,
    output: impl AsyncWrite + Unpin + Send + 'static,
    unread: Unread,
    order: CallOrder,
) -> GuardedTransport {
    let (rmcp_reader, feeder) = tokio::io::duplex(PIPE_BYTES);
    let (drain, rmcp_writer) = tokio::io::duplex(PIPE_BYTES);
    let (errors_tx, errors_rx) = mpsc::unbounded_channel::<String>();
    let reading = tokio::spawn(read_frames(input, feeder, errors_tx, order));
    let writing = tokio::spawn(write_frames(drain, errors_rx, output, unread));
    GuardedTransport {
        reader: rmcp_reader,
        writer: rmcp_writer,
        tasks: vec![reading, writing],
    }
}

/// What to do with one line from the client.
#[derive(Debug, PartialEq)]
pub enum Frame {
    /// A JSON-RPC message: pass it on.
    Message,
    /// A well-formed `tools/call` request: book it, then pass it on.
    Call(rmcp::model::RequestId),
    /// An `initialize` request (with this id): pass on the first, refuse any other.
    Initialize(Value),
    /// Nothing to do (a blank line).
    Blank,
    /// Answer with this error response.
    Reject(Value),
}

/// Classifies one line.
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
    mut feeder: DuplexStream,
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
        let (frame, rewritten) = match &line {
            Ok(text) => classify_line(text),
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
            Frame::Message => true,
            Frame::Call(id) => {
                order.arrived(&id);
                true
            }
        };
        if pass_on {
            let text = rewritten.or(line.ok()).unwrap_or_default();
            let forwarded = async {
                feeder.write_all(text.as_bytes()).await?;
                feeder.write_all(b"\n").await
            };
            if forwarded.await.is_err() {
                break; // rmcp has stopped reading
            }
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

/// What an outgoing line is, as far as the order of stdout is concerned.
#[derive(Debug, PartialEq)]
enum Outgoing {
    Progress,
    Response,
    Other,
}

fn outgoing(line: &str) -> Outgoing {
    #[derive(serde::Deserialize)]
    struct Head<'a> {
        #[serde(borrow, default)]
        method: Option<std::borrow::Cow<'a, str>>,
        #[serde(default)]
        id: Option<serde::de::IgnoredAny>,
    }
    match serde_json::from_str::<Head>(line) {
        Ok(Head {
            method: Some(method),
            ..
        }) if method == "notifications/progress" => Outgoing::Progress,
        Ok(Head {
            method: None,
            id: Some(_),
        }) => Outgoing::Response,
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
    drain: DuplexStream,
    mut errors: mpsc::UnboundedReceiver<String>,
    mut output: impl AsyncWrite + Unpin,
    unread: Unread,
) {
    let mut lines = BufReader::new(drain).lines();
    let mut errors_open = true;
    // When a progress notification was last written, until the client has read it.
    let mut progress_unread: Option<Instant> = None;
    loop {
        let line = tokio::select! {
            line = lines.next_line() => match line {
                Ok(Some(line)) => line,
                _ => break,
            },
            error = errors.recv(), if errors_open => match error {
                Some(line) => line,
                None => { errors_open = false; continue; }
            },
        };
        let kind = outgoing(&line);
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
        assert_eq!(
            outgoing(&serde_json::to_string(&progress).unwrap()),
            Outgoing::Progress
        );
        assert_eq!(
            outgoing(&serde_json::to_string(&response).unwrap()),
            Outgoing::Response
        );
        assert_eq!(
            outgoing(r#"{"jsonrpc":"2.0","id":3,"error":{"code":1,"message":"x"}}"#),
            Outgoing::Response
        );
        assert_eq!(
            outgoing(r#"{"jsonrpc":"2.0","id":3,"method":"sampling/createMessage"}"#),
            Outgoing::Other
        );
    }

    /// Issue 22: a progress notification and the response after it must never reach the
    /// client in one read. The response waits until the client has read the progress.
    #[tokio::test]
    async fn a_response_after_progress_waits_until_the_client_has_read_it() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicU64, Ordering};
        let (mut rmcp_side, drain) = tokio::io::duplex(1 << 16);
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
        let progress = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}"#;
        let response = r#"{"jsonrpc":"2.0","id":1,"result":{}}"#;
        // The client has not read the progress yet.
        unread_count.store(1, Ordering::SeqCst);
        rmcp_side
            .write_all(format!("{progress}\n{response}\n").as_bytes())
            .await
            .unwrap();
        let mut reader = BufReader::new(&mut client);
        let mut first = String::new();
        reader.read_line(&mut first).await.unwrap();
        assert_eq!(first.trim_end(), progress);
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
        assert_eq!(second.trim_end(), response);
        drop(rmcp_side);
        writer.await.unwrap();
    }
}
