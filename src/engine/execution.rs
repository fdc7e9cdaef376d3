//! The life of one cell as a pure state machine: Jupyter messages in, events and a record out.
//!
//! Owns: routing by `parent_header.msg_id`, the settle rule, and every output semantic
//! (streams, results, displays, `update_display_data`, `clear_output`, widgets, errors, and
//! the pager text of the `execute_reply`, which `obj?`, `obj??` and `%prun` send instead of
//! output).
//! Does not own: sockets, time or recovery (the engine feeds messages in and decides what an
//! ending means); caps live in `output`.
//!
//! Invariants:
//! - A cell is settled only when both its `execute_reply` and the IOPub `idle` status for it
//!   have arrived (a small reply can overtake a large output).
//! - Messages for other requests are ignored, so late output of an earlier cell is never
//!   attributed to this one (the engine's `late_output` collects it).
//! - Pager text is stdout of the cell, after what the cell printed, without colour codes; so
//!   is code a magic meant for the next cell (`%load`), under `NEXT_INPUT_HEADING`.
//! - A traceback keeps its blank lines: frames joined by newlines read as Jupyter shows them.
//! - Streams read as a terminal shows them (`terminal_text`): a progress bar is its last state.
//! - `clear_output()` clears as Jupyter does: the streams and rich outputs shown so far (not
//!   the error, nor the value); with `wait=True`, when the next output arrives (so a loop that
//!   clears and prints leaves its last print, and a clear with nothing after it clears nothing).
//!   The record counts the calls and the outputs they removed.
//! - A widget view is replaced by its text from the widgets' last state (`widgets`).

use std::collections::HashMap;

use jupyter_protocol::{
    ExecutionState, ExpressionResult, JupyterMessage, JupyterMessageContent, Payload, ReplyStatus,
    Stdio,
};
use serde_json::{Map, Value};

use crate::engine::live_view::LiveView;
use crate::engine::outcome::{CellError, CellEvent, Channel, Display};
use crate::engine::output::{CappedStream, CappedText, OutputLimits, SpillTarget};
use crate::engine::widgets::{Capture, View, Widgets};

/// Rich outputs kept per cell; later ones are counted, not kept.
pub const MAX_DISPLAYS: usize = 64;

/// What introduces code a magic (`%load`) meant for the next cell, which is shown instead.
pub const NEXT_INPUT_HEADING: &str =
    "[pi-repl: this code was meant for the next cell; it has not run]";

/// A cell in flight.
pub struct CellRun {
    msg_id: String,
    stdout: CappedStream,
    stderr: CappedStream,
    limits: OutputLimits,
    spill: Option<SpillTarget>,
    result: Option<Display>,
    displays: Vec<Display>,
    displays_dropped: usize,
    error: Option<CellError>,
    reply: Option<ReplyStatus>,
    execution_count: Option<u64>,
    expressions: HashMap<String, String>,
    idle: bool,
    /// A `clear_output(wait=True)` waits for the next output.
    clear_waiting: bool,
    cleared: Cleared,
    widgets: Widgets,
    /// The cell's live view, when one is published (`published`): its streams keep their text
    /// there, and what else is shown live is told to it.
    live: Option<LiveView>,
}

/// What `clear_output()` removed from a cell.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cleared {
    /// Clears that took effect.
    pub clears: usize,
    /// Outputs they removed, counted as Jupyter keeps them (each stream once, each display).
    pub outputs: usize,
}

impl Cleared {
    /// One line for the result, when anything was removed.
    pub fn notice(&self) -> Option<String> {
        (self.outputs > 0).then(|| {
            format!(
                "clear_output() ran {} time(s) and removed {} earlier output(s), as in Jupyter; what follows is what was left",
                self.clears, self.outputs
            )
        })
    }
}

/// Everything a finished cell produced, before the engine decides what its ending means.
#[derive(Debug)]
pub struct CellRecord {
    pub stdout: CappedText,
    pub stderr: CappedText,
    /// The value of the trailing expression, capped like a channel.
    pub result: Option<CappedText>,
    pub result_display: Option<Display>,
    pub displays: Vec<Display>,
    pub displays_dropped: usize,
    pub error: Option<CellError>,
    /// Truncation of the traceback, when it was cut.
    pub traceback: Option<CappedText>,
    /// The `execute_reply` status, if the reply arrived.
    pub reply: Option<ReplyStatus>,
    /// The kernel's number for this cell (`In[N]`), from the reply.
    pub execution_count: Option<u64>,
    /// `text/plain` of each user expression that evaluated without error.
    pub expressions: HashMap<String, String>,
    /// What `clear_output()` removed.
    pub cleared: Cleared,
}

impl CellRun {
    pub fn new(msg_id: String, limits: OutputLimits, spill: Option<SpillTarget>) -> CellRun {
        CellRun {
            stdout: CappedStream::terminal("stdout", limits, spill.clone()),
            stderr: CappedStream::terminal("stderr", limits, spill.clone()),
            msg_id,
            limits,
            spill,
            result: None,
            displays: Vec::new(),
            displays_dropped: 0,
            error: None,
            reply: None,
            execution_count: None,
            expressions: HashMap::new(),
            idle: false,
            clear_waiting: false,
            cleared: Cleared::default(),
            widgets: Widgets::default(),
            live: None,
        }
    }

    /// Publishes the cell's output as it comes in `view` (`live_view`): its streams keep their
    /// shown text there, and its unfinished lines, caps reached, rich outputs and clears are
    /// told to it. Called before any message.
    pub fn published(mut self, view: LiveView) -> CellRun {
        let limits = self.limits;
        let spill = self.spill.clone();
        self.stdout = CappedStream::terminal("stdout", limits, spill.clone())
            .published(view.clone(), Channel::Stdout);
        self.stderr = CappedStream::terminal("stderr", limits, spill)
            .published(view.clone(), Channel::Stderr);
        self.live = Some(view);
        self
    }

    pub fn msg_id(&self) -> &str {
        &self.msg_id
    }

    /// True when `message` is a reply to, or output of, this request.
    pub fn owns(&self, message: &JupyterMessage) -> bool {
        self.is_ours(message)
    }

    fn is_ours(&self, message: &JupyterMessage) -> bool {
        message
            .parent_header
            .as_ref()
            .is_some_and(|parent| parent.msg_id == self.msg_id)
    }

    /// Takes an IOPub message; returns what should be streamed now.
    pub fn on_iopub(&mut self, message: &JupyterMessage) -> Vec<CellEvent> {
        if !self.is_ours(message) {
            return Vec::new();
        }
        let mut events = Vec::new();
        if let Some(widget) = self.widgets.capturing(&self.msg_id) {
            let captured = match &message.content {
                JupyterMessageContent::StreamContent(stream) => Some(Capture::Stream(&stream.text)),
                JupyterMessageContent::DisplayData(display) => {
                    let data = media_bundle(&display.data);
                    self.widgets.capture(&widget, Capture::Display(&data));
                    return events;
                }
                JupyterMessageContent::ClearOutput(clear) => {
                    Some(Capture::Clear { wait: clear.wait })
                }
                _ => None,
            };
            if let Some(captured) = captured {
                self.widgets.capture(&widget, captured);
                return events;
            }
        }
        let is_output = matches!(
            &message.content,
            JupyterMessageContent::StreamContent(_)
                | JupyterMessageContent::ExecuteResult(_)
                | JupyterMessageContent::DisplayData(_)
                | JupyterMessageContent::ErrorOutput(_)
        );
        if is_output && std::mem::take(&mut self.clear_waiting) {
            self.clear(&mut events);
        }
        match &message.content {
            JupyterMessageContent::StreamContent(stream) => {
                let (channel, capped) = match stream.name {
                    Stdio::Stdout => (Channel::Stdout, &mut self.stdout),
                    Stdio::Stderr => (Channel::Stderr, &mut self.stderr),
                };
                push_stream(capped, channel, &stream.text, &mut events, &self.live);
            }
            JupyterMessageContent::ExecuteResult(result) => {
                self.result = Some(Display {
                    data: media_bundle(&result.data),
                    metadata: result.metadata.clone(),
                    display_id: None,
                });
            }
            JupyterMessageContent::DisplayData(display) => {
                let display = Display {
                    data: media_bundle(&display.data),
                    metadata: display.metadata.clone(),
                    display_id: display
                        .transient
                        .as_ref()
                        .and_then(|t| t.display_id.clone()),
                };
                if let Some(view) = &self.live {
                    let kinds: Vec<&str> = display.data.keys().map(String::as_str).collect();
                    view.rich(&kinds.join(", "));
                }
                if self.displays.len() < MAX_DISPLAYS {
                    self.displays.push(display.clone());
                } else {
                    self.displays_dropped += 1;
                }
                events.push(CellEvent::Display(display));
            }
            JupyterMessageContent::UpdateDisplayData(update) => {
                if let Some(id) = &update.transient.display_id {
                    for display in &mut self.displays {
                        if display.display_id.as_deref() == Some(id.as_str()) {
                            display.data = media_bundle(&update.data);
                            display.metadata = update.metadata.clone();
                        }
                    }
                }
            }
            JupyterMessageContent::ClearOutput(clear) => {
                if clear.wait {
                    self.clear_waiting = true;
                } else {
                    self.clear_waiting = false;
                    self.clear(&mut events);
                }
            }
            JupyterMessageContent::CommOpen(open) => {
                self.widgets
                    .open(&open.comm_id.0, &open.target_name, &open.data);
            }
            JupyterMessageContent::CommMsg(comm) => {
                self.widgets.message(&comm.comm_id.0, &comm.data)
            }
            JupyterMessageContent::CommClose(close) => self.widgets.close(&close.comm_id.0),
            JupyterMessageContent::ErrorOutput(error) => {
                self.error = Some(plain_error(&error.ename, &error.evalue, &error.traceback));
            }
            JupyterMessageContent::Status(status)
                if status.execution_state == ExecutionState::Idle =>
            {
                self.idle = true;
            }
            _ => {}
        }
        events
    }

    /// Jupyter's `clear_output()`: the streams and rich outputs so far are gone.
    fn clear(&mut self, events: &mut Vec<CellEvent>) {
        let outputs = usize::from(!self.stdout.is_empty())
            + usize::from(!self.stderr.is_empty())
            + self.displays.len()
            + self.displays_dropped;
        self.stdout.clear();
        self.stderr.clear();
        self.displays.clear();
        self.displays_dropped = 0;
        self.cleared.clears += 1;
        self.cleared.outputs += outputs;
        if let Some(view) = &self.live {
            view.clear();
        }
        events.push(CellEvent::Cleared);
    }

    /// Takes a shell reply; returns what should be streamed now (pager text). Anything but
    /// this cell's `execute_reply` is ignored.
    pub fn on_shell_reply(&mut self, message: &JupyterMessage) -> Vec<CellEvent> {
        let mut events = Vec::new();
        if !self.is_ours(message) {
            return events;
        }
        let JupyterMessageContent::ExecuteReply(reply) = &message.content else {
            return events;
        };
        self.reply = Some(reply.status.clone());
        self.execution_count = Some(reply.execution_count.0 as u64);
        for payload in &reply.payload {
            let text = match payload {
                Payload::Page { data, .. } => media_bundle(data)
                    .get("text/plain")
                    .and_then(Value::as_str)
                    .map(strip_ansi),
                // `%load`, `%recall`: Jupyter would put this code in the next cell.
                Payload::SetNextInput { text, .. } => Some(format!("{NEXT_INPUT_HEADING}\n{text}")),
                _ => None,
            };
            if let Some(mut text) = text {
                if !text.ends_with('\n') {
                    text.push('\n');
                }
                push_stream(
                    &mut self.stdout,
                    Channel::Stdout,
                    &text,
                    &mut events,
                    &self.live,
                );
            }
        }
        for (name, result) in reply.user_expressions.iter().flatten() {
            if let ExpressionResult::Ok { data, .. } = result
                && let Some(text) = media_bundle(data).get("text/plain").and_then(Value::as_str)
            {
                self.expressions.insert(name.clone(), text.to_string());
            }
        }
        if reply.status == ReplyStatus::Error
            && self.error.is_none()
            && let Some(error) = &reply.error
        {
            self.error = Some(plain_error(&error.ename, &error.evalue, &error.traceback));
        }
        events
    }

    pub fn has_reply(&self) -> bool {
        self.reply.is_some()
    }

    pub fn is_idle(&self) -> bool {
        self.idle
    }

    /// Both the reply and the idle status have arrived.
    pub fn is_settled(&self) -> bool {
        self.has_reply() && self.idle
    }

    /// Total characters printed so far (both channels).
    pub fn printed_chars(&self) -> usize {
        self.stdout.total_chars() + self.stderr.total_chars()
    }

    /// Closes the streams and returns what the cell produced.
    pub fn finish(self) -> CellRecord {
        let result = self
            .result
            .as_ref()
            .and_then(Display::plain_text)
            .map(|text| {
                let mut capped = CappedStream::new("result", self.limits, self.spill.clone());
                capped.push(text);
                capped.finish()
            });
        let mut traceback = None;
        let error = self.error.map(|mut error| {
            let joined = error.traceback.join("\n");
            let mut capped = CappedStream::new("traceback", self.limits, self.spill.clone());
            capped.push(&joined);
            let done = capped.finish();
            if done.truncation.is_some() {
                error.traceback = done.text.lines().map(str::to_string).collect();
                traceback = Some(done);
            }
            error
        });
        let widgets = self.widgets;
        let displays = self
            .displays
            .into_iter()
            .flat_map(|mut display| match widgets.view(&display.data) {
                None => vec![display],
                Some(View::Gone) => Vec::new(),
                Some(View::Text(text)) => {
                    display.data = Map::from_iter([("text/plain".to_string(), Value::from(text))]);
                    vec![display]
                }
                Some(View::Outputs(bundles)) => bundles
                    .into_iter()
                    .map(|data| Display {
                        data,
                        metadata: Map::new(),
                        display_id: None,
                    })
                    .collect(),
            })
            .filter_map(plain_as_shown)
            .collect();
        let stdout = self.stdout.finish();
        let stderr = self.stderr.finish();
        if let Some(view) = &self.live {
            view.streams_ended();
        }
        CellRecord {
            stdout,
            stderr,
            result,
            result_display: self.result.filter(Display::is_rich),
            displays,
            displays_dropped: self.displays_dropped,
            error,
            traceback,
            reply: self.reply,
            execution_count: self.execution_count,
            expressions: self.expressions,
            cleared: self.cleared,
        }
    }
}

/// A display's `text/plain` as a terminal shows it (rich's has colour codes); `None` for a
/// display that shows nothing (rich's empty frame: blank text beside HTML).
fn plain_as_shown(mut display: Display) -> Option<Display> {
    let Some(plain) = display.plain_text() else {
        return Some(display);
    };
    if plain.trim().is_empty()
        && display
            .data
            .keys()
            .all(|k| k == "text/plain" || k == "text/html")
    {
        return None;
    }
    if plain.contains(['\u{1b}', '\r', '\u{8}']) {
        let shown =
            crate::terminal_text::render(plain, crate::engine::output::DEFAULT_MAX_LINE_CHARS);
        let shown = shown.trim_end_matches('\n').to_string();
        display.data.insert("text/plain".into(), Value::from(shown));
    }
    Some(display)
}

/// Pushes stream text through its cap, collecting what to stream live (a published stream
/// has put its final text in the view already; the rest is told to the view here).
fn push_stream(
    capped: &mut CappedStream,
    channel: Channel,
    text: &str,
    events: &mut Vec<CellEvent>,
    live: &Option<LiveView>,
) {
    let pushed = capped.push(text);
    if let Some(text) = pushed.live {
        events.push(CellEvent::Output { channel, text });
    }
    if pushed.started_truncating {
        if let Some(view) = live {
            view.over_cap(channel);
        }
        events.push(CellEvent::Truncating { channel });
    }
    if let Some(text) = pushed.active {
        if let Some(view) = live {
            view.unfinished(channel, &text);
        }
        events.push(CellEvent::Unfinished { channel, text });
    }
}

fn media_bundle(media: &jupyter_protocol::Media) -> Map<String, Value> {
    match serde_json::to_value(media) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    }
}

/// An exception with colour codes removed from every part. The traceback is one entry per
/// line of Jupyter's rendering (its frames joined by newlines), blank lines included; only
/// blank lines at the very end are dropped.
pub fn plain_error(ename: &str, evalue: &str, traceback: &[String]) -> CellError {
    let mut lines: Vec<String> = traceback
        .iter()
        .flat_map(|frame| {
            strip_ansi(frame)
                .split('\n')
                .map(|line| line.strip_suffix('\r').unwrap_or(line).to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    while lines.last().is_some_and(|line| line.trim().is_empty()) {
        lines.pop();
    }
    CellError {
        ename: strip_ansi(ename),
        evalue: strip_ansi(evalue),
        traceback: lines,
    }
}

/// `text` without ANSI escape sequences (colours).
pub fn strip_ansi(text: &str) -> String {
    String::from_utf8_lossy(&strip_ansi_escapes::strip(text)).into_owned()
}

#[cfg(test)]
mod tests {
    //! Recorded message sequences, no kernel needed.
    use super::*;
    use jupyter_protocol::{
        ClearOutput, DisplayData, ErrorOutput, ExecuteReply, ExecuteRequest, ExecuteResult,
        ExecutionCount, Media, MediaType, Payload, ReplyError, Status, StreamContent, Transient,
        UpdateDisplayData,
    };

    fn request() -> JupyterMessage {
        ExecuteRequest::new("x".into()).into()
    }

    fn run_for(request: &JupyterMessage) -> CellRun {
        CellRun::new(request.header.msg_id.clone(), OutputLimits::default(), None)
    }

    fn ok_reply(request: &JupyterMessage) -> JupyterMessage {
        ExecuteReply {
            status: ReplyStatus::Ok,
            ..Default::default()
        }
        .as_child_of(request)
    }

    #[test]
    fn settles_only_after_reply_and_idle_in_either_order() {
        let req = request();
        let mut run = run_for(&req);
        run.on_iopub(&Status::busy().as_child_of(&req));
        assert!(run.on_shell_reply(&ok_reply(&req)).is_empty());
        assert!(run.has_reply());
        assert!(!run.is_settled(), "reply alone must not settle");
        run.on_iopub(&Status::idle().as_child_of(&req));
        assert!(run.is_settled());

        let mut run = run_for(&req);
        run.on_iopub(&StreamContent::stdout("late\n").as_child_of(&req));
        run.on_iopub(&Status::idle().as_child_of(&req));
        assert!(!run.is_settled(), "idle alone must not settle");
        run.on_shell_reply(&ok_reply(&req));
        assert!(run.is_settled());
        assert_eq!(run.finish().stdout.text, "late\n");
    }

    #[test]
    fn output_of_another_request_is_ignored() {
        let req = request();
        let other = request();
        let mut run = run_for(&req);
        assert!(
            run.on_iopub(&StreamContent::stdout("not mine").as_child_of(&other))
                .is_empty()
        );
        run.on_iopub(&Status::idle().as_child_of(&other));
        run.on_shell_reply(&ok_reply(&other));
        assert!(!run.has_reply());
        assert!(!run.is_idle());
        assert_eq!(run.finish().stdout.text, "");
    }

    #[test]
    fn stdout_and_stderr_are_kept_apart_and_streamed() {
        let req = request();
        let mut run = run_for(&req);
        let events = run.on_iopub(&StreamContent::stdout("out\n").as_child_of(&req));
        assert_eq!(
            events,
            vec![CellEvent::Output {
                channel: Channel::Stdout,
                text: "out\n".into()
            }]
        );
        run.on_iopub(&StreamContent::stderr("err\n").as_child_of(&req));
        let record = run.finish();
        assert_eq!(record.stdout.text, "out\n");
        assert_eq!(record.stderr.text, "err\n");
    }

    #[test]
    fn result_text_and_rich_bundle() {
        let req = request();
        let mut run = run_for(&req);
        run.on_iopub(
            &ExecuteResult::new(
                ExecutionCount::new(1),
                Media::new(vec![MediaType::Plain("42".into())]),
            )
            .as_child_of(&req),
        );
        let record = run.finish();
        assert_eq!(record.result.unwrap().text, "42");
        assert!(
            record.result_display.is_none(),
            "plain text only is not rich"
        );

        let mut run = run_for(&req);
        run.on_iopub(
            &ExecuteResult::new(
                ExecutionCount::new(1),
                Media::new(vec![
                    MediaType::Plain("<Image>".into()),
                    MediaType::Png("iVBORw0KGgo=".into()),
                ]),
            )
            .as_child_of(&req),
        );
        let record = run.finish();
        let rich = record.result_display.unwrap();
        assert_eq!(rich.data["image/png"], "iVBORw0KGgo=");
    }

    #[test]
    fn errors_lose_their_colour_codes() {
        let req = request();
        let mut run = run_for(&req);
        run.on_iopub(
            &ErrorOutput {
                ename: "ValueError".into(),
                evalue: "\u{1b}[0;31mbad\u{1b}[0m".into(),
                traceback: vec![
                    "\u{1b}[0;31m---------\u{1b}[0m".into(),
                    "\u{1b}[0;32mFile x\u{1b}[0m\nline two".into(),
                ],
            }
            .as_child_of(&req),
        );
        let record = run.finish();
        let error = record.error.unwrap();
        assert_eq!(error.evalue, "bad");
        assert_eq!(error.traceback, vec!["---------", "File x", "line two"]);
    }

    #[test]
    fn pager_text_of_the_reply_is_stdout_after_what_the_cell_printed() {
        // issue 9: `len?` and `%prun` sent their text as a pager payload, which was dropped.
        let req = request();
        let mut run = run_for(&req);
        run.on_iopub(&StreamContent::stdout("printed\n").as_child_of(&req));
        let reply = ExecuteReply {
            status: ReplyStatus::Ok,
            execution_count: ExecutionCount::new(7),
            payload: vec![Payload::Page {
                data: Media::new(vec![
                    MediaType::Plain("\u{1b}[0;31mSignature:\u{1b}[0m len(obj, /)".into()),
                    MediaType::Html("<pre>len</pre>".into()),
                ]),
                start: 0,
            }],
            ..Default::default()
        };
        let events = run.on_shell_reply(&reply.as_child_of(&req));
        assert_eq!(
            events,
            vec![CellEvent::Output {
                channel: Channel::Stdout,
                text: "Signature: len(obj, /)\n".into()
            }]
        );
        let record = run.finish();
        assert_eq!(record.stdout.text, "printed\nSignature: len(obj, /)\n");
        assert_eq!(record.execution_count, Some(7));
    }

    #[test]
    fn code_meant_for_the_next_cell_is_shown_and_said_not_to_have_run() {
        let req = request();
        let mut run = run_for(&req);
        let reply = ExecuteReply {
            payload: vec![Payload::SetNextInput {
                text: "# %load x.py\nx = 1".into(),
                replace: true,
            }],
            ..Default::default()
        };
        run.on_shell_reply(&reply.as_child_of(&req));
        assert_eq!(
            run.finish().stdout.text,
            format!("{NEXT_INPUT_HEADING}\n# %load x.py\nx = 1\n")
        );
    }

    #[test]
    fn a_traceback_keeps_its_blank_lines() {
        // issue 9: frames end with a newline; Jupyter joins them with another, so a blank line
        // separates frames. Splitting with `lines()` lost it.
        let req = request();
        let mut run = run_for(&req);
        run.on_iopub(
            &ErrorOutput {
                ename: "ZeroDivisionError".into(),
                evalue: "division by zero".into(),
                traceback: vec![
                    "-----".into(),
                    "Cell In[3], line 5\n      2 \n----> 5 f()\n".into(),
                    "Cell In[2], line 2, in f()\n----> 2 1/0\n".into(),
                    "ZeroDivisionError: division by zero".into(),
                ],
            }
            .as_child_of(&req),
        );
        let error = run.finish().error.unwrap();
        assert_eq!(
            error.traceback.join("\n"),
            "-----\nCell In[3], line 5\n      2 \n----> 5 f()\n\nCell In[2], line 2, in f()\n\
             ----> 2 1/0\n\nZeroDivisionError: division by zero"
        );
    }

    #[test]
    fn reply_error_is_used_when_iopub_error_was_lost() {
        let req = request();
        let mut run = run_for(&req);
        run.on_shell_reply(
            &ExecuteReply {
                status: ReplyStatus::Error,
                error: Some(Box::new(ReplyError {
                    ename: "KeyboardInterrupt".into(),
                    evalue: "".into(),
                    traceback: vec![],
                })),
                ..Default::default()
            }
            .as_child_of(&req),
        );
        let record = run.finish();
        assert_eq!(record.reply, Some(ReplyStatus::Error));
        assert_eq!(record.error.unwrap().ename, "KeyboardInterrupt");
    }

    #[test]
    fn displays_update_by_id_and_clear() {
        let req = request();
        let mut run = run_for(&req);
        let mut first = DisplayData::new(Media::new(vec![MediaType::Plain("10%".into())]));
        first.transient = Some(Transient {
            display_id: Some("bar".into()),
        });
        let events = run.on_iopub(&first.as_child_of(&req));
        assert!(matches!(events[0], CellEvent::Display(_)));
        run.on_iopub(
            &UpdateDisplayData::new(Media::new(vec![MediaType::Plain("90%".into())]), "bar")
                .as_child_of(&req),
        );
        let snapshot: Vec<_> = run
            .displays
            .iter()
            .map(|d| d.plain_text().unwrap().to_string())
            .collect();
        assert_eq!(snapshot, vec!["90%"]);
        run.on_iopub(&ClearOutput { wait: false }.as_child_of(&req));
        assert!(run.finish().displays.is_empty());
    }

    /// Issue 29: `clear_output(wait=True); print(f"epoch {i}")` kept every epoch.
    #[test]
    fn clear_output_with_wait_leaves_the_last_print_as_jupyter_does() {
        let req = request();
        let mut run = run_for(&req);
        run.on_iopub(&StreamContent::stdout("header\n").as_child_of(&req));
        for i in 0..5 {
            run.on_iopub(&ClearOutput { wait: true }.as_child_of(&req));
            run.on_iopub(
                &DisplayData::new(Media::new(vec![MediaType::Png("iVBORw0KGgo=".into())]))
                    .as_child_of(&req),
            );
            let events =
                run.on_iopub(&StreamContent::stdout(&format!("epoch {i}\n")).as_child_of(&req));
            assert!(
                !events.contains(&CellEvent::Cleared),
                "the clear came with the image"
            );
        }
        // A clear with nothing after it clears nothing.
        run.on_iopub(&ClearOutput { wait: true }.as_child_of(&req));
        let record = run.finish();
        assert_eq!(record.stdout.text, "epoch 4\n");
        assert_eq!(record.displays.len(), 1);
        assert_eq!(record.cleared.clears, 5);
        // header; then four times an image and stdout.
        assert_eq!(record.cleared.outputs, 1 + 4 * 2);
        assert!(
            record
                .cleared
                .notice()
                .unwrap()
                .contains("removed 9 earlier output(s)")
        );
    }

    #[test]
    fn clear_output_without_wait_clears_at_once_but_keeps_the_error() {
        let req = request();
        let mut run = run_for(&req);
        run.on_iopub(&StreamContent::stderr("warning\n").as_child_of(&req));
        let events = run.on_iopub(&ClearOutput { wait: false }.as_child_of(&req));
        assert_eq!(events, vec![CellEvent::Cleared]);
        run.on_iopub(
            &ErrorOutput {
                ename: "ValueError".into(),
                evalue: "bad".into(),
                traceback: vec![],
            }
            .as_child_of(&req),
        );
        let record = run.finish();
        assert_eq!(record.stderr.text, "");
        assert_eq!(record.error.unwrap().ename, "ValueError");
    }

    #[test]
    fn a_progress_bar_streams_as_its_unfinished_state() {
        let req = request();
        let mut run = run_for(&req);
        let events = run.on_iopub(&StreamContent::stderr("\r 50%|#####     |").as_child_of(&req));
        assert_eq!(
            events,
            vec![CellEvent::Unfinished {
                channel: Channel::Stderr,
                text: " 50%|#####     |".into()
            }]
        );
        run.on_iopub(&StreamContent::stderr("\r100%|##########|\n").as_child_of(&req));
        assert_eq!(run.finish().stderr.text, "100%|##########|\n");
    }

    /// Issue 24: a published run keeps its streams' text in the view (one copy, read while it
    /// runs), and tells the view its bar, its cap, its rich outputs and its clears in order.
    #[test]
    fn a_published_run_keeps_its_text_in_its_live_view() {
        use crate::engine::live_view::{LiveView, Seen};
        let req = request();
        let view = LiveView::default();
        let limits = OutputLimits {
            max_chars: 40,
            max_line_chars: 100,
        };
        let mut run = CellRun::new(req.header.msg_id.clone(), limits, None).published(view.clone());
        let mut cursor = view.cursor(true);
        let mut told = Vec::new();
        let mut read = |view: &LiveView, told: &mut Vec<String>| {
            view.read(&mut cursor, true, |seen| {
                told.push(match seen {
                    Seen::Text { channel, text } => format!("{}:{text}", channel.as_str()),
                    other => format!("{other:?}"),
                })
            })
        };
        run.on_iopub(&StreamContent::stdout("one\n").as_child_of(&req));
        run.on_iopub(&StreamContent::stderr("\r 50%").as_child_of(&req));
        read(&view, &mut told);
        assert_eq!(told, vec!["stdout:one\n", r#"Unfinished(["", " 50%"])"#]);
        assert_eq!(view.so_far(), ["one\n".to_string(), " 50%".to_string()]);
        told.clear();
        run.on_iopub(&ClearOutput { wait: false }.as_child_of(&req));
        run.on_iopub(&StreamContent::stdout("two\n").as_child_of(&req));
        run.on_iopub(&StreamContent::stdout(&format!("{}\n", "x".repeat(60))).as_child_of(&req));
        read(&view, &mut told);
        assert_eq!(told[0], "Cleared");
        assert_eq!(told[1], "stdout:two\n");
        assert!(told.contains(&"OverCap(Stdout)".to_string()), "{told:?}");
        assert!(view.went_over_cap(Channel::Stdout));
        let live = view.so_far()[0].clone();
        assert_eq!(
            live.chars().count(),
            40,
            "the view holds the head under the cap: {live:?}"
        );
        let record = run.finish();
        assert!(record.stdout.truncation.is_some());
        assert!(record.stdout.text.starts_with("two\n"));
    }

    /// Issue 29: a widget progress bar (tqdm.auto with ipywidgets) showed the model nothing.
    #[test]
    fn a_widget_view_becomes_the_text_of_its_last_state() {
        let req = request();
        let mut run = run_for(&req);
        let open = jupyter_protocol::CommOpen {
            comm_id: jupyter_protocol::CommId("p".into()),
            target_name: "jupyter.widget".into(),
            data: serde_json::from_value(serde_json::json!({"state": {
                "_model_name": "IntProgressModel", "value": 0, "max": 4, "description": "load"
            }}))
            .unwrap(),
            target_module: None,
        };
        run.on_iopub(&open.as_child_of(&req));
        let view: Map<String, Value> = serde_json::from_value(serde_json::json!({
            "text/plain": "IntProgress(value=0, max=4)",
            crate::engine::widgets::WIDGET_VIEW_MIME: {"model_id": "p"}
        }))
        .unwrap();
        let mut display = DisplayData::new(Media::new(vec![MediaType::Plain("x".into())]));
        display.data = serde_json::from_value(Value::Object(view)).unwrap();
        run.on_iopub(&display.as_child_of(&req));
        let update = jupyter_protocol::CommMsg {
            comm_id: jupyter_protocol::CommId("p".into()),
            data: serde_json::from_value(
                serde_json::json!({"method": "update", "state": {"value": 4}}),
            )
            .unwrap(),
        };
        run.on_iopub(&update.as_child_of(&req));
        let record = run.finish();
        assert_eq!(
            record.displays[0].plain_text(),
            Some("load |██████████| 4/4")
        );
        assert_eq!(record.displays[0].data.len(), 1);
    }

    #[test]
    fn displays_beyond_the_limit_are_counted() {
        let req = request();
        let mut run = run_for(&req);
        for i in 0..(MAX_DISPLAYS + 3) {
            run.on_iopub(
                &DisplayData::new(Media::new(vec![MediaType::Plain(i.to_string())]))
                    .as_child_of(&req),
            );
        }
        let record = run.finish();
        assert_eq!(record.displays.len(), MAX_DISPLAYS);
        assert_eq!(record.displays_dropped, 3);
    }
}
