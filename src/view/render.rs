//! An `Outcome` as an MCP tool result: text that reads like a notebook cell, native images,
//! and a machine-readable twin in `_meta` that clients do not show the model.
//!
//! Order of the text: the reset notice (if the workspace was rebuilt), late output of earlier
//! cells' threads, stdout, stderr, rich outputs, the result, then the error. A cell that raised, died or was aborted is a result with
//! `isError: true`; protocol errors are only for malformed requests.
//!
//! There is deliberately no `structuredContent`: Claude Code and Codex send the model the JSON of
//! `structuredContent` *instead of* the text when a result has both (`docs/traps.md`, trap 10), so
//! anything there hides what the cell printed. What a program wants beyond the text (status,
//! cell number, spill paths, image metadata, the reset report) is under `_meta`, key
//! [`META_KEY`].

use std::path::{Path, PathBuf};

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Value, json};

use super::images::{self, ImageBudget, PreparedImage};
use crate::engine::outcome::{Display, Outcome, Status};

/// The key of the machine-readable outcome in a result's `_meta`.
pub const META_KEY: &str = "pi-repl/outcome";

/// `_meta` holding `outcome` under [`META_KEY`].
pub fn meta_of(outcome: serde_json::Value) -> rmcp::model::MetaObject {
    let mut meta = rmcp::model::MetaObject::default();
    meta.0.insert(META_KEY.to_string(), outcome);
    meta
}

/// Characters of an HTML or SVG output quoted in its summary.
const SUMMARY_CHARS: usize = 600;

/// Where rich outputs of a cell are saved: `<dir>/<stem>-<n>.<ext>`.
#[derive(Debug, Clone)]
pub struct SaveTo {
    pub dir: PathBuf,
    pub stem: String,
}

/// Renders `outcome` for the model.
pub fn render(outcome: &Outcome, budget: ImageBudget, save_to: Option<&SaveTo>) -> CallToolResult {
    let mut text = Vec::<String>::new();
    let mut blocks = Vec::<ContentBlock>::new();
    let mut images_meta = Vec::<Value>::new();
    let mut image_count = 0usize;
    let mut hidden_images = Vec::<String>::new();
    let mut rich_index = 0usize;
    // The last expression's value shown in its rich form (its text/plain only names its type).
    let mut result_shown = false;

    // First, where every client keeps it: what was cut and where all of it is.
    for cut in &outcome.truncated {
        text.push(cut_pointer(cut));
    }
    if let Some(reset) = &outcome.reset {
        text.push(reset.notice());
    }
    for notice in &outcome.notices {
        text.push(format!("[pi-repl: {notice}]"));
    }
    for late in &outcome.late_output {
        let body = late.text.trim_end_matches('\n');
        text.push(format!("{}\n{body}", late.heading()));
    }
    if !outcome.stdout.is_empty() {
        text.push(outcome.stdout.trim_end_matches('\n').to_string());
    }
    if !outcome.stderr.is_empty() {
        text.push(format!(
            "[stderr]\n{}",
            outcome.stderr.trim_end_matches('\n')
        ));
    }
    let rich = outcome.displays.iter().chain(outcome.result_display.iter());
    let result_is_rich = outcome.result_display.is_some();
    for (position, display) in rich.enumerate() {
        rich_index += 1;
        let is_result = result_is_rich && position == outcome.displays.len();
        let stem = save_to.map(|s| s.dir.join(format!("{}-{rich_index}", s.stem)));
        if let Some((mime, data)) = image_of(display) {
            if image_count >= budget.max_count {
                if let Some(path) = save_raw(data, mime, stem.as_deref()) {
                    hidden_images.push(path.display().to_string());
                } else {
                    hidden_images.push(format!("image {rich_index}"));
                }
                continue;
            }
            match images::prepare(data, mime, budget.max_side, stem.as_deref()) {
                Ok(prepared) => {
                    image_count += 1;
                    text.extend(caption(image_count, &prepared));
                    images_meta.push(image_meta(&prepared));
                    blocks.push(ContentBlock::image(prepared.data.clone(), prepared.mime));
                }
                Err(error) => text.push(format!("[image output could not be shown: {error}]")),
            }
            continue;
        }
        if is_result && reads_as_plain(display) {
            continue; // its text/plain is the result, shown below
        }
        result_shown |= is_result;
        text.push(describe_display(display, stem.as_deref()));
    }
    if !hidden_images.is_empty() && budget.max_count == 0 {
        text.push(format!(
            "[{} image(s), not included here]",
            hidden_images.len()
        ));
    } else if !hidden_images.is_empty() {
        text.push(format!(
            "[{} more image(s) not shown (at most {} per call); saved: {}]",
            hidden_images.len(),
            budget.max_count,
            hidden_images.join(", ")
        ));
    }
    if outcome.displays_dropped > 0 {
        text.push(format!(
            "[{} more rich outputs were produced and not kept]",
            outcome.displays_dropped
        ));
    }
    if let Some(result) = outcome.result.as_ref().filter(|_| !result_shown) {
        text.push(result.clone());
    }
    if let Some(llm) = &outcome.llm {
        let estimated = if llm.estimated > 0 {
            " (estimated)"
        } else {
            ""
        };
        text.push(format!(
            "[llm_query: {} request(s), {} input and {} output tokens{estimated}]",
            llm.calls, llm.input_tokens, llm.output_tokens
        ));
    }
    if let Some(abort) = &outcome.abort {
        text.push(format!("[aborted: {}]", abort.reason.describe()));
    }
    if let Some(error) = &outcome.error {
        match outcome.status {
            Status::Died => {
                let mut died = format!("{}: {}", error.ename, error.evalue);
                if !error.traceback.is_empty() {
                    died.push_str("\nkernel crash report:\n");
                    died.push_str(&error.traceback.join("\n"));
                }
                text.push(died);
            }
            _ if error.traceback.is_empty() => {
                text.push(format!("{}: {}", error.ename, error.evalue))
            }
            _ => text.push(error.traceback.join("\n")),
        }
    }
    // A cell that printed nothing has no text block at all (docs/mcp.md, "A silent cell"):
    // Claude Code and Codex show the model an empty result as such, and a marker would only
    // add characters to every silent cell.
    let mut content = Vec::with_capacity(blocks.len() + 1);
    if !text.is_empty() {
        content.push(ContentBlock::text(text.join("\n")));
    }
    content.extend(blocks);

    let mut result = if matches!(outcome.status, Status::Ok) {
        CallToolResult::success(content)
    } else {
        CallToolResult::error(content)
    };
    let mut meta = rmcp::model::MetaObject::default();
    meta.0
        .insert(META_KEY.to_string(), machine_readable(outcome, images_meta));
    result.meta = Some(meta);
    result
}

/// One line saying a channel was cut, how much, and where all of it is (issue 22: a client
/// that cuts the middle of a long result cut the marker between head and tail).
fn cut_pointer(cut: &crate::engine::output::Truncation) -> String {
    let whole = match (&cut.full_output, &cut.spill_error) {
        (Some(path), _) => format!("the full output is in {}", path.display()),
        (None, Some(error)) => format!("the full output could not be saved: {error}"),
        (None, None) => "the full output was not saved".to_string(),
    };
    let lines = match cut.lines_cut {
        0 => String::new(),
        1 => ", 1 long line cut".to_string(),
        n => format!(", {n} long lines cut"),
    };
    format!(
        "[pi-repl: {} cut: {} characters, {} not shown{lines}; {whole}]",
        cut.channel, cut.total_chars, cut.omitted_chars
    )
}

/// The machine-readable outcome (the `_meta` twin of the text).
fn machine_readable(outcome: &Outcome, images: Vec<Value>) -> Value {
    let mut value = json!({
        "status": outcome.status.as_str(),
        "cell": outcome.cell,
        "duration_ms": outcome.duration_ms,
        "result": outcome.result,
        "error": outcome.error.as_ref().map(|e| json!({"ename": e.ename, "evalue": e.evalue})),
        "truncated": outcome.truncated,
        "full_output": outcome.spill_files(),
        "images": images,
    });
    if !outcome.raw_output.is_empty() {
        value["raw_output"] = json!(outcome.raw_output);
    }
    if let Some(reset) = &outcome.reset {
        value["reset"] = json!(reset);
    }
    if !outcome.notices.is_empty() {
        value["notices"] = json!(outcome.notices);
    }
    if !outcome.late_output.is_empty() {
        value["late_output"] = json!(outcome.late_output);
    }
    if let Some(abort) = &outcome.abort {
        value["abort"] = json!(abort);
    }
    if let Some(llm) = &outcome.llm {
        value["llm"] = json!(llm);
    }
    value
}

fn image_of(display: &Display) -> Option<(&'static str, &str)> {
    for mime in ["image/png", "image/jpeg"] {
        if let Some(data) = display.data.get(mime).and_then(Value::as_str) {
            return Some((
                if mime == "image/png" {
                    "image/png"
                } else {
                    "image/jpeg"
                },
                data,
            ));
        }
    }
    None
}

fn save_raw(data: &str, mime: &str, stem: Option<&Path>) -> Option<PathBuf> {
    // Saving needs the original bytes: reuse `prepare` with no size limit worth resizing for.
    let prepared = images::prepare(data, mime, u32::MAX, stem).ok()?;
    prepared.original
}

/// The line an image needs beside it, if any: the model sees the image itself, so an image
/// shown as it was needs no words (issue 22: captions were most of the text pi-repl added over
/// a notebook's own). A downscaled one says so and where its full-size original is.
fn caption(index: usize, image: &PreparedImage) -> Option<String> {
    if !image.downscaled() {
        return None;
    }
    let mut line = format!(
        "[image {index}: downscaled from {}×{} to {}×{}",
        image.original_width, image.original_height, image.width, image.height
    );
    if let Some(path) = &image.original {
        line.push_str(&format!("; original: {}", path.display()));
    }
    line.push(']');
    Some(line)
}

fn image_meta(image: &PreparedImage) -> Value {
    json!({
        "path": image.original,
        "mime": image.mime,
        "width": image.original_width,
        "height": image.original_height,
        "shown_width": image.width,
        "shown_height": image.height,
    })
}

/// Whether a rich output reads best as its `text/plain`: it has nothing else, or its plain
/// text says more than the name of its type (a DataFrame's table, an xarray's listing). A bare
/// `<IPython.core.display.HTML object>` or `<… at 0x…>` says nothing, so the richer form is
/// shown instead.
fn reads_as_plain(display: &Display) -> bool {
    let Some(plain) = display.plain_text() else {
        return false;
    };
    display.data.keys().all(|mime| mime == "text/plain") || !is_bare_repr(plain)
}

/// `<module.Class object>` or `<… at 0x…>`: one line naming a type, nothing of the value.
fn is_bare_repr(plain: &str) -> bool {
    let plain = plain.trim();
    plain.starts_with('<') && plain.ends_with('>') && !plain.contains('\n')
}

/// A non-image rich output as text: Markdown or LaTeX source (what a notebook renders), its
/// plain form when that says something (`reads_as_plain`), or the visible text of HTML, or
/// a line naming an SVG image and its saved file.
fn describe_display(display: &Display, stem: Option<&Path>) -> String {
    for source in ["text/markdown", "text/latex"] {
        if let Some(text) = display.data.get(source).and_then(Value::as_str) {
            return text.trim_end_matches('\n').to_string();
        }
    }
    if reads_as_plain(display)
        && let Some(plain) = display.plain_text()
    {
        return plain.to_string();
    }
    if let Some(svg) = display.data.get("image/svg+xml").and_then(Value::as_str) {
        let saved = stem.and_then(|s| save_text(&s.with_extension("svg"), svg));
        return format!(
            "[SVG image, {} characters{}]",
            svg.len(),
            saved
                .map(|p| format!("; saved: {}", p.display()))
                .unwrap_or_default()
        );
    }
    if let Some(html) = display.data.get("text/html").and_then(Value::as_str) {
        let (visible, cut) = text_of_html(html);
        // The whole HTML is worth a path only when its text was cut.
        let saved = stem
            .filter(|_| cut)
            .and_then(|s| save_text(&s.with_extension("html"), html));
        return match saved {
            Some(path) => format!(
                "[HTML output, its text cut to {SUMMARY_CHARS} characters; the whole is in {}]\n{visible}",
                path.display()
            ),
            None => format!("[HTML output]\n{visible}"),
        };
    }
    if let Some(plain) = display.plain_text() {
        return plain.to_string();
    }
    let mimes: Vec<&str> = display.data.keys().map(String::as_str).collect();
    format!("[{} output]", mimes.join(", "))
}

fn save_text(path: &Path, text: &str) -> Option<PathBuf> {
    if let Some(parent) = path.parent() {
        crate::fsutil::create_private_dir(parent).ok()?;
    }
    crate::fsutil::write_output(path, text.as_bytes())
        .ok()
        .map(|()| path.to_path_buf())
}

/// The visible text of an HTML fragment (no tags, styles or scripts), whitespace collapsed,
/// cut to `SUMMARY_CHARS`, and whether it was cut.
fn text_of_html(html: &str) -> (String, bool) {
    // ASCII lowercasing keeps byte offsets, so positions found in `lower` index `html` too.
    let lower = html.to_ascii_lowercase();
    let mut visible = String::with_capacity(html.len().min(1 << 16));
    let mut at = 0;
    while let Some(open) = lower[at..].find('<').map(|i| at + i) {
        visible.push_str(&html[at..open]);
        visible.push(' ');
        let closing = if lower[open..].starts_with("<style") {
            "</style>"
        } else if lower[open..].starts_with("<script") {
            "</script>"
        } else {
            ">"
        };
        at = match lower[open..].find(closing) {
            Some(end) => open + end + closing.len(),
            None => html.len(),
        };
    }
    visible.push_str(&html[at..]);
    let collapsed = visible.split_whitespace().collect::<Vec<_>>().join(" ");
    let short = crate::engine::output::prefix_chars(&collapsed, SUMMARY_CHARS);
    if short.len() < collapsed.len() {
        (format!("{short} …"), true)
    } else {
        (short.to_string(), false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::outcome::{CellError, Reset};

    fn outcome(status: Status) -> Outcome {
        let mut o = crate::engine::never_ran();
        o.status = status;
        o.abort = None;
        o.cell = 1;
        o
    }

    fn text_of(result: &CallToolResult) -> String {
        match &result.content[0] {
            ContentBlock::Text(t) => t.text.clone(),
            other => panic!("first block is not text: {other:?}"),
        }
    }

    #[test]
    fn reads_like_a_notebook_cell_in_order() {
        let mut o = outcome(Status::Error);
        o.reset = Some(Reset::because("the kernel died"));
        o.stdout = "out\n".into();
        o.stderr = "warn\n".into();
        o.error = Some(CellError {
            ename: "ValueError".into(),
            evalue: "bad".into(),
            traceback: vec!["Traceback".into(), "ValueError: bad".into()],
        });
        let result = render(&o, ImageBudget::default(), None);
        let text = text_of(&result);
        let reset = text.find("<repl_engine_reset>").unwrap();
        let out = text.find("out").unwrap();
        let warn = text.find("[stderr]\nwarn").unwrap();
        let error = text.find("ValueError: bad").unwrap();
        assert!(reset < out && out < warn && warn < error, "{text}");
        assert_eq!(result.is_error, Some(true));
        assert!(result.structured_content.is_none());
        let structured = &result.meta.as_ref().unwrap().0[META_KEY];
        assert_eq!(structured["status"], "error");
        assert_eq!(structured["error"]["ename"], "ValueError");
        assert_eq!(structured["reset"]["reason"], "the kernel died");
    }

    /// Issue 22: the pointer to a cut channel's full output comes first, where a client that
    /// cuts the middle of a long result still shows it.
    #[test]
    fn a_cut_channel_is_named_with_its_file_on_the_first_line() {
        let mut o = outcome(Status::Ok);
        o.stdout = "head\n[pi-repl: 90 characters omitted …]\ntail\n".into();
        o.truncated = vec![crate::engine::output::Truncation {
            channel: "stdout".into(),
            total_chars: 100,
            omitted_chars: 90,
            lines_cut: 0,
            full_output: Some(PathBuf::from("/o/cell-1.stdout.txt")),
            spill_error: None,
        }];
        let text = text_of(&render(&o, ImageBudget::default(), None));
        assert_eq!(
            text.lines().next().unwrap(),
            "[pi-repl: stdout cut: 100 characters, 90 not shown; the full output is in \
             /o/cell-1.stdout.txt]"
        );
        assert!(text.contains("head\n"), "{text}");
    }

    /// Issue 22: a silent cell is an empty result, not a `(no output)` marker.
    #[test]
    fn a_silent_cell_is_an_empty_result() {
        let result = render(&outcome(Status::Ok), ImageBudget::default(), None);
        assert!(result.content.is_empty(), "{:?}", result.content);
        assert_eq!(result.is_error, Some(false));
        assert_eq!(result.meta.as_ref().unwrap().0[META_KEY]["status"], "ok");
    }

    fn png(width: u32, height: u32) -> String {
        use base64::Engine as _;
        let image = image::RgbImage::from_pixel(width, height, image::Rgb([200, 100, 50]));
        let mut bytes = std::io::Cursor::new(Vec::new());
        image.write_to(&mut bytes, image::ImageFormat::Png).unwrap();
        base64::engine::general_purpose::STANDARD.encode(bytes.into_inner())
    }

    fn image_display(width: u32, height: u32) -> Display {
        Display {
            data: serde_json::from_value(json!({
                "image/png": png(width, height),
                "text/plain": "<Figure size 640x480 with 1 Axes>"
            }))
            .unwrap(),
            metadata: Default::default(),
            display_id: None,
        }
    }

    /// Issue 22: the model sees an image shown as it was; a caption would only repeat it.
    #[test]
    fn an_image_at_its_own_size_has_no_caption() {
        let tmp = tempfile::tempdir().unwrap();
        let save_to = SaveTo {
            dir: tmp.path().to_path_buf(),
            stem: "call1-cell1".into(),
        };
        let mut o = outcome(Status::Ok);
        o.displays = vec![image_display(64, 48)];
        let result = render(&o, ImageBudget::default(), Some(&save_to));
        assert_eq!(
            result.content.len(),
            1,
            "the image alone: {:?}",
            result.content
        );
        assert!(matches!(result.content[0], ContentBlock::Image(_)));
        let meta = &result.meta.as_ref().unwrap().0[META_KEY]["images"][0];
        assert_eq!(meta["width"], 64);
        assert!(
            meta["path"]
                .as_str()
                .unwrap()
                .ends_with("call1-cell1-1.png")
        );
    }

    /// Issue 22: a downscaled image says so, and where its full-size original is.
    #[test]
    fn a_downscaled_image_names_its_original() {
        let tmp = tempfile::tempdir().unwrap();
        let save_to = SaveTo {
            dir: tmp.path().to_path_buf(),
            stem: "call1-cell1".into(),
        };
        let mut o = outcome(Status::Ok);
        o.stdout = "plotted\n".into();
        o.displays = vec![image_display(64, 48), image_display(200, 100)];
        let budget = ImageBudget {
            max_side: 100,
            max_count: 4,
        };
        let result = render(&o, budget, Some(&save_to));
        let original = tmp.path().join("call1-cell1-2.png");
        assert_eq!(
            text_of(&result),
            format!(
                "plotted\n[image 2: downscaled from 200×100 to 100×50; original: {}]",
                original.display()
            )
        );
        assert!(original.is_file());
        assert_eq!(result.content.len(), 3);
    }

    fn rich(data: Value) -> Display {
        Display {
            data: serde_json::from_value(data).unwrap(),
            metadata: Default::default(),
            display_id: None,
        }
    }

    /// Issue 22: a plain text that says something is the output, even when it starts with `<`
    /// (xarray's listing); a bare type name gives way to the HTML's text, without a path when
    /// that text is whole.
    #[test]
    fn plain_text_is_shown_unless_it_only_names_a_type() {
        let listing = "<xarray.DataArray (x: 2)>\narray([1, 2])";
        let display = rich(json!({"text/plain": listing, "text/html": "<div>…</div>"}));
        assert_eq!(describe_display(&display, None), listing);
        let tmp = tempfile::tempdir().unwrap();
        let stem = tmp.path().join("c-1");
        let display = rich(json!({
            "text/plain": "<IPython.core.display.HTML object>",
            "text/html": "<b>total</b>: 3"
        }));
        assert_eq!(
            describe_display(&display, Some(&stem)),
            "[HTML output]\ntotal : 3"
        );
        assert!(!tmp.path().join("c-1.html").exists());
        let long = format!("<p>{}</p>", "word ".repeat(200));
        let display = rich(json!({"text/plain": "<Styler at 0x7f>", "text/html": long}));
        let text = describe_display(&display, Some(&stem));
        assert!(
            text.starts_with(&format!(
                "[HTML output, its text cut to 600 characters; the whole is in {}]\nword word",
                tmp.path().join("c-1.html").display()
            )),
            "{text}"
        );
    }

    /// A last expression whose plain text only names its type (`df.style`, `Markdown(...)`)
    /// reads as its rich form, once.
    #[test]
    fn a_rich_value_with_a_bare_plain_text_reads_as_its_rich_form() {
        let mut o = outcome(Status::Ok);
        o.result = Some("<IPython.core.display.Markdown object>".into());
        o.result_display = Some(rich(json!({
            "text/plain": "<IPython.core.display.Markdown object>",
            "text/markdown": "**bold**"
        })));
        assert_eq!(
            text_of(&render(&o, ImageBudget::default(), None)),
            "**bold**"
        );
        o.result = Some("   a\n0  1".into());
        o.result_display = Some(rich(
            json!({"text/plain": "   a\n0  1", "text/html": "<table/>"}),
        ));
        assert_eq!(
            text_of(&render(&o, ImageBudget::default(), None)),
            "   a\n0  1"
        );
    }

    #[test]
    fn markdown_and_latex_read_as_their_source() {
        let display = |mime: &str, text: &str| Display {
            data: serde_json::from_value(json!({
                mime: text,
                "text/plain": "<IPython.core.display.Markdown object>"
            }))
            .unwrap(),
            metadata: Default::default(),
            display_id: None,
        };
        assert_eq!(
            describe_display(&display("text/markdown", "**bold**\n"), None),
            "**bold**"
        );
        assert_eq!(
            describe_display(&display("text/latex", "$x^2$"), None),
            "$x^2$"
        );
    }

    #[test]
    fn html_is_summarised_as_text() {
        let html = "<style>p{color:red}</style><table><tr><td>a</td><td>b</td></tr></table>";
        assert_eq!(text_of_html(html), ("a b".to_string(), false));
    }
}
