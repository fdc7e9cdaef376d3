//! A guard in front of the MCP transport: every malformed frame gets a JSON-RPC error.
//!
//! The protocol on stdio is one JSON-RPC message per line. rmcp drops a line it cannot parse
//! without a word; a client that sent a typo then waits forever. This layer reads stdin line
//! by line, answers a line that is not JSON with `-32700 Parse error` and a line that is not a
//! JSON-RPC 2.0 message (or is a batch, which MCP does not use) with `-32600 Invalid Request`,
//! and passes every well-formed line to rmcp through an in-memory pipe. rmcp's output and these
//! errors share stdout one whole line at a time.

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::call_order::CallOrder;

/// Size of the in-memory pipes between the guard and rmcp.
const PIPE_BYTES: usize = 1 << 20;

/// Longest message accepted, in bytes. A longer line is answered with an error and skipped,
/// so a client that never sends a newline cannot exhaust memory. The one limit on a frame:
/// rmcp's own line limit is lifted (see `serve_stdio`), so every frame accepted here is served.
pub const MAX_FRAME_BYTES: usize = 64 << 20;

/// The two ends rmcp reads and writes, and the tasks that connect them to the real streams.
pub struct GuardedTransport {
    pub reader: DuplexStream,
    pub writer: DuplexStream,
    pub tasks: Vec<JoinHandle<()>>,
}

/// Wraps `input` and `output` (stdin and stdout in production).
pub fn guard(
    input: impl AsyncRead + Unpin + Send + 'static,
    output: impl AsyncWrite + Unpin + Send + 'static,
    order: CallOrder,
) -> GuardedTransport {
    let (rmcp_reader, feeder) = tokio::io::duplex(PIPE_BYTES);
    let (drain, rmcp_writer) = tokio::io::duplex(PIPE_BYTES);
    let (errors_tx, errors_rx) = mpsc::unbounded_channel::<String>();
    let reading = tokio::spawn(read_frames(input, feeder, errors_tx, order));
    let writing = tokio::spawn(write_frames(drain, errors_rx, output));
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
    if message.get("method") == Some(&Value::String("tools/call".into())) {
        return classify_call(message, id);
    }
    Frame::Message
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
    let mut reader = BufReader::new(input);
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
        let frame = match &line {
            Ok(text) => classify(text),
            Err(_) => Frame::Reject(error_response(
                Value::Null,
                -32700,
                "Parse error: the line is not UTF-8",
            )),
        };
        let pass_on = match frame {
            Frame::Blank => false,
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
            let text = line.unwrap_or_default();
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

async fn write_frames(
    drain: DuplexStream,
    mut errors: mpsc::UnboundedReceiver<String>,
    mut output: impl AsyncWrite + Unpin,
) {
    let mut lines = BufReader::new(drain).lines();
    let mut errors_open = true;
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
        let written = async {
            output.write_all(line.as_bytes()).await?;
            output.write_all(b"\n").await?;
            output.flush().await
        };
        if written.await.is_err() {
            break; // the client is gone
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
}
