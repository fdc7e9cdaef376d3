//! One code cell's outputs for the notebook, as the kernel produced them.
//!
//! Owns: turning a cell's raw IOPub messages into nbformat 4 outputs, in the order they came:
//! streams (consecutive text of one stream is one output, as Jupyter keeps it), `execute_result`
//! and `display_data` with every MIME type and their metadata (images stay at their original
//! size), `update_display_data` applied to the output with that `display_id`, `clear_output`
//! (with `wait=True` at the next output), and errors with their traceback (colour codes kept:
//! every notebook viewer renders them).
//! Does not own: what the model sees (`execution`, `output`), nor the notebook file (`mod.rs`).
//!
//! Invariants:
//! - A stream output is capped at `NOTEBOOK_OUTPUT_CHARS` (far above the model's cap: people
//!   scroll): head and tail kept, the marker between them names the file holding all of it.
//! - Only messages the caller routed to this cell arrive here; nothing is reordered.

use std::path::PathBuf;

use jupyter_protocol::{JupyterMessage, JupyterMessageContent, Stdio};
use serde_json::{Map, Value, json};

use crate::engine::output::{CappedStream, OutputLimits, SpillTarget};

/// Characters of one stream output the notebook keeps before the middle is cut.
pub const NOTEBOOK_OUTPUT_CHARS: usize = 1_000_000;

/// The caps of one notebook stream output: lines are never cut on their own.
const LIMITS: OutputLimits = OutputLimits {
    max_chars: NOTEBOOK_OUTPUT_CHARS,
    max_line_chars: NOTEBOOK_OUTPUT_CHARS,
};

enum Output {
    Stream {
        name: &'static str,
        text: Box<CappedStream>,
    },
    /// `display_data`, `execute_result` or `error`, as nbformat writes it.
    Rich {
        value: Value,
        display_id: Option<String>,
    },
}

/// The outputs of one cell while it runs.
pub struct CellOutputs {
    outputs: Vec<Output>,
    /// Where a stream output's whole text goes when it is cut (`<dir>/<stem>.<label>.txt`).
    spill: Option<SpillTarget>,
    streams_opened: usize,
    clear_waiting: bool,
}

impl CellOutputs {
    pub fn new(spill: Option<SpillTarget>) -> CellOutputs {
        CellOutputs {
            outputs: Vec::new(),
            spill,
            streams_opened: 0,
            clear_waiting: false,
        }
    }

    /// Takes one IOPub message of this cell.
    pub fn take(&mut self, message: &JupyterMessage) {
        let content = &message.content;
        let is_output = matches!(
            content,
            JupyterMessageContent::StreamContent(_)
                | JupyterMessageContent::ExecuteResult(_)
                | JupyterMessageContent::DisplayData(_)
                | JupyterMessageContent::ErrorOutput(_)
        );
        if is_output && std::mem::take(&mut self.clear_waiting) {
            self.outputs.clear();
        }
        match content {
            JupyterMessageContent::StreamContent(stream) => {
                let name = match stream.name {
                    Stdio::Stdout => "stdout",
                    Stdio::Stderr => "stderr",
                };
                self.push_stream(name, &stream.text);
            }
            JupyterMessageContent::ExecuteResult(result) => {
                self.outputs.push(Output::Rich {
                    value: json!({
                        "output_type": "execute_result",
                        "execution_count": result.execution_count,
                        "data": bundle(&result.data),
                        "metadata": result.metadata,
                    }),
                    display_id: None,
                });
            }
            JupyterMessageContent::DisplayData(display) => {
                self.outputs.push(Output::Rich {
                    value: json!({
                        "output_type": "display_data",
                        "data": bundle(&display.data),
                        "metadata": display.metadata,
                    }),
                    display_id: display
                        .transient
                        .as_ref()
                        .and_then(|t| t.display_id.clone()),
                });
            }
            JupyterMessageContent::UpdateDisplayData(update) => {
                let id = update.transient.display_id.as_ref();
                for output in &mut self.outputs {
                    if let Output::Rich {
                        value,
                        display_id: Some(own),
                    } = output
                        && Some(&*own) == id
                    {
                        value["data"] = bundle(&update.data);
                        value["metadata"] = Value::Object(update.metadata.clone());
                    }
                }
            }
            JupyterMessageContent::ErrorOutput(error) => {
                self.outputs.push(Output::Rich {
                    value: json!({
                        "output_type": "error",
                        "ename": error.ename,
                        "evalue": error.evalue,
                        "traceback": error.traceback,
                    }),
                    display_id: None,
                });
            }
            JupyterMessageContent::ClearOutput(clear) => {
                if clear.wait {
                    self.clear_waiting = true;
                } else {
                    self.outputs.clear();
                }
            }
            _ => {}
        }
    }

    /// Adds text to the last output when it is the same stream, else opens a new one.
    pub fn push_stream(&mut self, name: &'static str, text: &str) {
        if let Some(Output::Stream {
            name: last,
            text: capped,
        }) = self.outputs.last_mut()
            && *last == name
        {
            capped.push(text);
            return;
        }
        self.streams_opened += 1;
        let label = format!("{name}-{}", self.streams_opened);
        let mut capped = CappedStream::new(&label, LIMITS, self.spill.clone());
        capped.push(text);
        self.outputs.push(Output::Stream {
            name,
            text: Box::new(capped),
        });
    }

    /// The nbformat outputs, in order, and the files holding cut streams in full.
    pub fn finish(self) -> (Vec<Value>, Vec<PathBuf>) {
        let mut spilled = Vec::new();
        let outputs = self
            .outputs
            .into_iter()
            .map(|output| match output {
                Output::Stream { name, text } => {
                    let finished = text.finish();
                    if let Some(path) = finished
                        .truncation
                        .as_ref()
                        .and_then(|cut| cut.full_output.clone())
                    {
                        spilled.push(path);
                    }
                    json!({"output_type": "stream", "name": name, "text": finished.text})
                }
                Output::Rich { value, .. } => value,
            })
            .collect();
        (outputs, spilled)
    }
}

/// A MIME bundle as Jupyter sent it (base64 for binary types).
fn bundle(media: &jupyter_protocol::Media) -> Value {
    match serde_json::to_value(media) {
        Ok(Value::Object(map)) => Value::Object(map),
        _ => Value::Object(Map::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jupyter_protocol::{ClearOutput, StreamContent};

    fn message(content: JupyterMessageContent) -> JupyterMessage {
        JupyterMessage::new(content, None)
    }

    fn stream(name: Stdio, text: &str) -> JupyterMessage {
        message(JupyterMessageContent::StreamContent(StreamContent {
            name,
            text: text.into(),
        }))
    }

    #[test]
    fn consecutive_text_of_one_stream_is_one_output_and_order_is_kept() {
        let mut outputs = CellOutputs::new(None);
        outputs.take(&stream(Stdio::Stdout, "a\n"));
        outputs.take(&stream(Stdio::Stdout, "b\n"));
        outputs.take(&stream(Stdio::Stderr, "warn\n"));
        outputs.take(&stream(Stdio::Stdout, "c\n"));
        let (values, spilled) = outputs.finish();
        assert!(spilled.is_empty());
        let texts: Vec<(&str, &str)> = values
            .iter()
            .map(|v| (v["name"].as_str().unwrap(), v["text"].as_str().unwrap()))
            .collect();
        assert_eq!(
            texts,
            vec![
                ("stdout", "a\nb\n"),
                ("stderr", "warn\n"),
                ("stdout", "c\n")
            ]
        );
    }

    #[test]
    fn clear_output_with_wait_clears_at_the_next_output() {
        let mut outputs = CellOutputs::new(None);
        outputs.take(&stream(Stdio::Stdout, "1\n"));
        outputs.take(&message(JupyterMessageContent::ClearOutput(ClearOutput {
            wait: true,
        })));
        assert_eq!(
            outputs.outputs.len(),
            1,
            "a waiting clear keeps what is shown"
        );
        outputs.take(&stream(Stdio::Stdout, "2\n"));
        let (values, _) = outputs.finish();
        assert_eq!(values.len(), 1);
        assert_eq!(values[0]["text"], "2\n");
    }

    #[test]
    fn a_stream_over_the_limit_keeps_head_and_tail_and_names_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut outputs = CellOutputs::new(Some(SpillTarget {
            dir: dir.path().to_path_buf(),
            stem: "cell1".into(),
        }));
        let line = "x".repeat(99) + "\n";
        for _ in 0..(NOTEBOOK_OUTPUT_CHARS / 100 + 5_000) {
            outputs.push_stream("stdout", &line);
        }
        let (values, spilled) = outputs.finish();
        let text = values[0]["text"].as_str().unwrap();
        assert!(text.len() < NOTEBOOK_OUTPUT_CHARS + 1_000, "{}", text.len());
        assert_eq!(spilled.len(), 1);
        assert!(text.contains(&spilled[0].display().to_string()));
        let whole = std::fs::read_to_string(&spilled[0]).unwrap();
        assert_eq!(whole.len(), (NOTEBOOK_OUTPUT_CHARS / 100 + 5_000) * 100);
    }
}
