//! ipywidgets a cell shows, as the text a person would read off them at the end.
//!
//! Owns: the state of the widget models a cell opened (`comm_open` on target `jupyter.widget`,
//! then `comm_msg` updates, `comm_close`), and the text of a widget view
//! (`application/vnd.jupyter.widget-view+json`) from that state: a progress bar
//! (`IntProgress`, `FloatProgress`) as `description |█████     | value/max`, `HTML`/`Label`/
//! text widgets as their value (tags removed), boxes as their children (tqdm.notebook's bar is
//! an `HBox` of HTML, progress, HTML, and reads like tqdm's text bar), any other widget named
//! in one line. A widget closed before the cell ended (tqdm with `leave=False`) shows nothing,
//! as its view is gone in Jupyter too.
//! An `Output` widget captures the cell's outputs while its `msg_id` is the cell's (rich's
//! progress bars and live displays in Jupyter): they go into the widget, `clear_output` in it
//! clears only the widget, and its view becomes what it holds (text rendered as a terminal
//! shows it, images kept).
//! Does not own: which messages belong to the cell (`execution`), rendering the rest of a
//! result (`view::render`).
//!
//! There is no widget front end here, so nothing a widget does in a browser (buttons, sliders
//! being dragged) can happen; the text says what the widget was, never drops it silently.

use std::collections::HashMap;

use serde_json::{Map, Value};

/// The MIME type of a widget view.
pub const WIDGET_VIEW_MIME: &str = "application/vnd.jupyter.widget-view+json";

/// Cells in a progress bar's text.
const BAR_CELLS: usize = 10;

/// Deepest box nesting rendered (a cycle of children refers back to itself).
const MAX_DEPTH: usize = 8;

/// Characters of text kept per `Output` widget (the last ones).
const MAX_CAPTURED_CHARS: usize = 20_000;

/// Rich outputs kept per `Output` widget (the last ones).
const MAX_CAPTURED_DISPLAYS: usize = 16;

/// Widget models seen by one cell.
#[derive(Debug, Default)]
pub struct Widgets {
    models: HashMap<String, Model>,
}

#[derive(Debug, Default)]
struct Model {
    state: Map<String, Value>,
    closed: bool,
    /// What an `Output` widget captured, in order.
    outputs: Vec<Captured>,
    /// A `clear_output(wait=True)` in it waits for its next output.
    clear_waiting: bool,
}

#[derive(Debug)]
enum Captured {
    Text(String),
    Display(Map<String, Value>),
}

/// An output the cell produced while an `Output` widget captured it.
pub enum Capture<'a> {
    Stream(&'a str),
    Display(&'a Map<String, Value>),
    Clear { wait: bool },
}

/// What a widget view becomes.
#[derive(Debug, PartialEq, Eq)]
pub enum View {
    /// Its text.
    Text(String),
    /// Nothing: the widget was closed.
    Gone,
    /// What an `Output` widget holds: MIME bundles (its text as `text/plain`).
    Outputs(Vec<Map<String, Value>>),
}

impl Widgets {
    /// A `comm_open`; only `jupyter.widget` comms are widgets.
    pub fn open(&mut self, comm_id: &str, target_name: &str, data: &Map<String, Value>) {
        if target_name != "jupyter.widget" {
            return;
        }
        let state = match data.get("state") {
            Some(Value::Object(state)) => state.clone(),
            _ => Map::new(),
        };
        self.models.insert(
            comm_id.to_string(),
            Model {
                state,
                ..Model::default()
            },
        );
    }

    /// A `comm_msg`: an `update` (or `echo_update`) merges its state.
    pub fn message(&mut self, comm_id: &str, data: &Map<String, Value>) {
        let Some(model) = self.models.get_mut(comm_id) else {
            return;
        };
        let method = data.get("method").and_then(Value::as_str);
        if !matches!(method, Some("update" | "echo_update")) {
            return;
        }
        if let Some(Value::Object(state)) = data.get("state") {
            for (key, value) in state {
                model.state.insert(key.clone(), value.clone());
            }
        }
    }

    /// A `comm_close`.
    pub fn close(&mut self, comm_id: &str) {
        if let Some(model) = self.models.get_mut(comm_id) {
            model.closed = true;
        }
    }

    /// True when the cell opened any widget.
    pub fn is_empty(&self) -> bool {
        self.models.is_empty()
    }

    /// The `Output` widget capturing the outputs of request `msg_id` now, if one is.
    pub fn capturing(&self, msg_id: &str) -> Option<String> {
        self.models
            .iter()
            .find(|(_, model)| {
                !model.closed
                    && model.state.get("_model_name").and_then(Value::as_str) == Some("OutputModel")
                    && model.state.get("msg_id").and_then(Value::as_str) == Some(msg_id)
            })
            .map(|(id, _)| id.clone())
    }

    /// An output into the `Output` widget `comm_id`.
    pub fn capture(&mut self, comm_id: &str, output: Capture<'_>) {
        let Some(model) = self.models.get_mut(comm_id) else {
            return;
        };
        if let Capture::Clear { wait } = output {
            model.clear_waiting = wait;
            if !wait {
                model.outputs.clear();
            }
            return;
        }
        if std::mem::take(&mut model.clear_waiting) {
            model.outputs.clear();
        }
        match output {
            Capture::Stream(text) => {
                if let Some(Captured::Text(last)) = model.outputs.last_mut() {
                    last.push_str(text);
                    if last.len() > 2 * MAX_CAPTURED_CHARS {
                        let cut = last.len() - MAX_CAPTURED_CHARS;
                        let cut = (cut..last.len())
                            .find(|i| last.is_char_boundary(*i))
                            .unwrap_or(last.len());
                        last.drain(..cut);
                    }
                } else {
                    model.outputs.push(Captured::Text(text.to_string()));
                }
            }
            Capture::Display(data) => {
                model.outputs.push(Captured::Display(data.clone()));
                let displays = model
                    .outputs
                    .iter()
                    .filter(|o| matches!(o, Captured::Display(_)))
                    .count();
                if displays > MAX_CAPTURED_DISPLAYS
                    && let Some(first) = model
                        .outputs
                        .iter()
                        .position(|o| matches!(o, Captured::Display(_)))
                {
                    model.outputs.remove(first);
                }
            }
            Capture::Clear { .. } => {}
        }
    }

    /// What the widget view in a display bundle becomes; `None` when the bundle is not a
    /// widget view.
    pub fn view(&self, data: &Map<String, Value>) -> Option<View> {
        let view = data.get(WIDGET_VIEW_MIME)?;
        let model_id = view.get("model_id").and_then(Value::as_str).unwrap_or("");
        let repr = data
            .get("text/plain")
            .and_then(Value::as_str)
            .unwrap_or("a widget");
        Some(match self.models.get(model_id) {
            Some(model) if model.closed => View::Gone,
            Some(model)
                if model.state.get("_model_name").and_then(Value::as_str)
                    == Some("OutputModel") =>
            {
                View::Outputs(model.outputs.iter().filter_map(bundle).collect())
            }
            Some(_) => View::Text(self.text(model_id, 0, false)),
            // Opened by an earlier cell: only its description when it was shown.
            None => View::Text(format!("[widget {repr}: a notebook front end shows it]")),
        })
    }

    fn text(&self, model_id: &str, depth: usize, in_box: bool) -> String {
        let Some(model) = self.models.get(model_id) else {
            return String::new();
        };
        let state = &model.state;
        let name = state
            .get("_model_name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .trim_end_matches("Model");
        let description = string(state, "description");
        let with_description = |text: String| {
            if description.is_empty() {
                text
            } else {
                format!("{description} {text}")
            }
        };
        match name {
            "IntProgress" | "FloatProgress" => {
                let value = number(state, "value");
                let min = number(state, "min");
                let max = number(state, "max");
                let bar = bar(value - min, max - min);
                if in_box {
                    with_description(bar)
                } else {
                    with_description(format!("{bar} {}/{}", show(value), show(max)))
                }
            }
            "HTML" | "HTMLMath" => with_description(text_of_html(&string(state, "value"))),
            "Label" | "Text" | "Textarea" | "Password" | "Combobox" => {
                with_description(string(state, "value"))
            }
            "HBox" | "VBox" | "Box" | "GridBox" if depth < MAX_DEPTH => {
                let children: Vec<String> = state
                    .get("children")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .map(|child| child.trim_start_matches("IPY_MODEL_"))
                    .filter(|child| !self.models.get(*child).is_some_and(|m| m.closed))
                    .map(|child| self.text(child, depth + 1, true))
                    .filter(|text| !text.is_empty())
                    .collect();
                // A progress bar's `|` needs no space around it (tqdm's look).
                let mut joined = String::new();
                for child in children {
                    if !joined.is_empty() {
                        if name == "VBox" {
                            joined.push('\n');
                        } else if !(joined.ends_with(['|', ' ']) || child.starts_with(['|', ' '])) {
                            joined.push(' ');
                        }
                    }
                    joined.push_str(&child);
                }
                joined
            }
            "IntSlider" | "FloatSlider" | "FloatLogSlider" | "BoundedIntText"
            | "BoundedFloatText" | "IntText" | "FloatText" | "Checkbox" | "ToggleButton"
            | "Dropdown" | "RadioButtons" | "Select" | "ToggleButtons" => {
                let value = state.get("value").map(plain).unwrap_or_default();
                let value = match state.get("index").and_then(Value::as_u64) {
                    Some(i) if value.is_empty() => state
                        .get("_options_labels")
                        .and_then(|labels| labels.get(i as usize))
                        .map(plain)
                        .unwrap_or_default(),
                    _ => value,
                };
                format!("[{name} widget] {}", with_description(value))
            }
            "" => "[widget of an unknown kind]".to_string(),
            other => {
                let label = if description.is_empty() {
                    String::new()
                } else {
                    format!(" {description:?}")
                };
                format!("[{other} widget{label}: a notebook front end shows it]")
            }
        }
    }
}

/// A captured output as a MIME bundle: text rendered as a terminal shows it, a display's
/// `text/plain` without colour codes (rich's), nothing for what renders to nothing.
fn bundle(output: &Captured) -> Option<Map<String, Value>> {
    let plain = |text: &str| {
        let text =
            crate::terminal_text::render(text, crate::engine::output::DEFAULT_MAX_LINE_CHARS);
        let text = text.trim_end_matches('\n');
        (!text.trim().is_empty()).then(|| text.to_string())
    };
    match output {
        Captured::Text(text) => {
            plain(text).map(|text| Map::from_iter([("text/plain".to_string(), text.into())]))
        }
        Captured::Display(data) => {
            let mut data = data.clone();
            if let Some(text) = data.get("text/plain").and_then(Value::as_str) {
                match plain(text) {
                    Some(text) => {
                        data.insert("text/plain".into(), text.into());
                    }
                    None if data.keys().all(|k| k == "text/plain" || k == "text/html") => {
                        return None; // rich's empty refresh
                    }
                    None => {}
                }
                // Rich sends HTML beside its text: the text is what a reader needs.
                data.remove("text/html");
            }
            Some(data)
        }
    }
}

fn string(state: &Map<String, Value>, key: &str) -> String {
    state.get(key).map(plain).unwrap_or_default()
}

fn plain(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn number(state: &Map<String, Value>, key: &str) -> f64 {
    state.get(key).and_then(Value::as_f64).unwrap_or(0.0)
}

/// `12` for whole numbers, else as Python would print a float.
fn show(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

fn bar(done: f64, total: f64) -> String {
    let fraction = if total > 0.0 {
        (done / total).clamp(0.0, 1.0)
    } else {
        0.0
    };
    let full = (fraction * BAR_CELLS as f64).floor() as usize;
    format!("|{}{}|", "█".repeat(full), " ".repeat(BAR_CELLS - full))
}

/// HTML as text: tags removed, the common entities decoded.
pub fn text_of_html(html: &str) -> String {
    let mut text = String::with_capacity(html.len());
    let mut in_tag = false;
    for ch in html.chars() {
        match ch {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            c if !in_tag => text.push(c),
            _ => {}
        }
    }
    text.replace("&nbsp;", " ")
        .replace(['\u{2007}', '\u{a0}'], " ")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#x27;", "'")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => unreachable!(),
        }
    }

    fn view_of(id: &str) -> Map<String, Value> {
        map(json!({
            "text/plain": "HBox(children=(...))",
            WIDGET_VIEW_MIME: {"model_id": id, "version_major": 2, "version_minor": 0}
        }))
    }

    fn open(widgets: &mut Widgets, id: &str, state: Value) {
        widgets.open(id, "jupyter.widget", &map(json!({ "state": state })));
    }

    fn update(widgets: &mut Widgets, id: &str, state: Value) {
        widgets.message(id, &map(json!({"method": "update", "state": state})));
    }

    /// Issue 29: `tqdm.auto` with ipywidgets showed the model nothing.
    #[test]
    fn a_tqdm_notebook_bar_reads_like_tqdm_text() {
        let mut w = Widgets::default();
        open(
            &mut w,
            "l",
            json!({"_model_name": "HTMLModel", "value": ""}),
        );
        open(
            &mut w,
            "p",
            json!({"_model_name": "FloatProgressModel", "value": 0.0, "max": 200.0}),
        );
        open(
            &mut w,
            "r",
            json!({"_model_name": "HTMLModel", "value": ""}),
        );
        open(
            &mut w,
            "box",
            json!({"_model_name": "HBoxModel",
                   "children": ["IPY_MODEL_l", "IPY_MODEL_p", "IPY_MODEL_r"]}),
        );
        for n in [50, 200] {
            update(&mut w, "p", json!({"value": n}));
            update(&mut w, "l", json!({"value": format!("{}%", n / 2)}));
            update(
                &mut w,
                "r",
                json!({"value": format!(" {n}/200 [00:01&lt;00:00, 150.00it/s]")}),
            );
        }
        assert_eq!(
            w.view(&view_of("box")),
            Some(View::Text(
                "100%|██████████| 200/200 [00:01<00:00, 150.00it/s]".into()
            ))
        );
    }

    #[test]
    fn a_progress_widget_alone_says_value_and_max() {
        let mut w = Widgets::default();
        open(
            &mut w,
            "p",
            json!({"_model_name": "IntProgressModel", "value": 3, "max": 10,
                   "description": "Loading:"}),
        );
        assert_eq!(
            w.view(&view_of("p")),
            Some(View::Text("Loading: |███       | 3/10".into()))
        );
    }

    #[test]
    fn labels_html_and_unknown_widgets() {
        let mut w = Widgets::default();
        open(
            &mut w,
            "h",
            json!({"_model_name": "HTMLModel", "value": "<b>done</b> &amp; saved"}),
        );
        open(
            &mut w,
            "b",
            json!({"_model_name": "ButtonModel", "description": "Go"}),
        );
        open(
            &mut w,
            "s",
            json!({"_model_name": "IntSliderModel", "value": 7, "description": "n"}),
        );
        assert_eq!(
            w.view(&view_of("h")),
            Some(View::Text("done & saved".into()))
        );
        assert_eq!(
            w.view(&view_of("b")),
            Some(View::Text(
                "[Button widget \"Go\": a notebook front end shows it]".into()
            ))
        );
        assert_eq!(
            w.view(&view_of("s")),
            Some(View::Text("[IntSlider widget] n 7".into()))
        );
    }

    #[test]
    fn a_closed_widget_is_gone_and_an_unknown_one_is_named() {
        let mut w = Widgets::default();
        open(
            &mut w,
            "h",
            json!({"_model_name": "HTMLModel", "value": "x"}),
        );
        w.close("h");
        assert_eq!(w.view(&view_of("h")), Some(View::Gone));
        assert_eq!(
            w.view(&view_of("elsewhere")),
            Some(View::Text(
                "[widget HBox(children=(...)): a notebook front end shows it]".into()
            ))
        );
        assert_eq!(w.view(&map(json!({"text/plain": "1"}))), None);
    }

    /// rich's progress bar in Jupyter: an Output widget, cleared and redrawn inside it.
    #[test]
    fn an_output_widget_holds_what_it_captured_last() {
        let mut w = Widgets::default();
        open(
            &mut w,
            "o",
            json!({"_model_name": "OutputModel", "msg_id": ""}),
        );
        assert_eq!(w.capturing("cell"), None);
        for n in [10, 100] {
            update(&mut w, "o", json!({"msg_id": "cell"}));
            let id = w.capturing("cell").unwrap();
            w.capture(&id, Capture::Clear { wait: true });
            let frame = map(json!({
                "text/plain": format!("work \u{1b}[35m━━━\u{1b}[0m {n}%\n"),
                "text/html": "<pre>…</pre>"
            }));
            w.capture(&id, Capture::Display(&frame));
            update(&mut w, "o", json!({"msg_id": ""}));
        }
        assert_eq!(w.capturing("cell"), None);
        let view = map(json!({"text/plain": "Output()", WIDGET_VIEW_MIME: {"model_id": "o"}}));
        assert_eq!(
            w.view(&view),
            Some(View::Outputs(vec![map(
                json!({"text/plain": "work ━━━ 100%"})
            )]))
        );
    }

    #[test]
    fn other_comms_are_not_widgets() {
        let mut w = Widgets::default();
        w.open("c", "matplotlib", &map(json!({})));
        assert!(w.is_empty());
    }
}
