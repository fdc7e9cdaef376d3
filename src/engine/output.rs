//! Output caps: per channel and per line, head and tail kept, the full text spilled to a file.
//!
//! Owns: turning a stream of raw text into (a) text that may be shown live, (b) the capped text
//! a cell returns, and (c) a spill file holding everything once anything was cut.
//! A cell's stdout and stderr are rendered as a terminal shows them first (`terminal_text`:
//! a progress bar is one line, its last state); the caps apply to that rendered text, and the
//! spill file holds the raw text, control characters and all. Its unfinished last line(s),
//! which later text may still rewrite, are shown live apart (`Pushed::active`).
//!
//! Invariants:
//! - Memory is bounded by the limits, whatever the volume: at most `max_chars` of head and
//!   `max_chars / 2` of tail are held, plus one chunk in flight.
//! - Every cut is announced in the text: a cut line ends with a marker giving how much was cut,
//!   and a cut channel has a marker between head and tail naming the spill file.
//! - Nothing is lost: once any cut happens, the raw text from the very first character is in
//!   the spill file (or the marker says why it could not be written). Raw text over the cap
//!   that its rendering made fit (a progress bar redrawn 10 000 times) is kept there too
//!   (`raw_file`), with no marker in the text: the model sees the bar's last state. Text a `clear` removed is
//!   gone from the returned text, as in Jupyter, and stays in the spill file.
//! - What was streamed live followed by `live_remainder` reads like `text`: the live part is
//!   the first `max_chars` shown characters, the remainder bridges to the same tail.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::engine::live_view::LiveView;
use crate::engine::outcome::Channel;
use crate::fsutil::create_private_dir;
use crate::terminal_text::{Piece, Terminal};

/// Default characters of one channel a cell returns.
pub const DEFAULT_MAX_CHARS: usize = 30_000;

/// Longest line returned; longer lines are cut with a marker.
pub const DEFAULT_MAX_LINE_CHARS: usize = 4_096;

/// The caps applied to each channel of a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputLimits {
    pub max_chars: usize,
    pub max_line_chars: usize,
}

impl Default for OutputLimits {
    fn default() -> Self {
        OutputLimits {
            max_chars: DEFAULT_MAX_CHARS,
            max_line_chars: DEFAULT_MAX_LINE_CHARS,
        }
    }
}

/// Where a cell's full output goes if it is cut: `<dir>/<stem>.<label>.txt`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpillTarget {
    pub dir: PathBuf,
    pub stem: String,
}

impl SpillTarget {
    pub fn path(&self, label: &str) -> PathBuf {
        self.dir.join(format!("{}.{label}.txt", self.stem))
    }
}

/// How one channel was cut.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Truncation {
    /// `stdout`, `stderr`, `result` or `traceback`.
    pub channel: String,
    /// Characters the cell produced on this channel.
    pub total_chars: usize,
    /// Characters left out of the returned text (middle of the channel and cut line ends).
    pub omitted_chars: usize,
    /// Lines cut at the per-line limit.
    pub lines_cut: usize,
    /// The file holding the full output, when it could be written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub full_output: Option<PathBuf>,
    /// Why the full output could not be written, if it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spill_error: Option<String>,
}

/// A finished channel.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CappedText {
    /// What the cell returns: all of it, or head + marker + tail.
    pub text: String,
    /// What to print after the live-streamed text so the reader ends where `text` ends.
    pub live_remainder: String,
    pub truncation: Option<Truncation>,
    /// The file holding the text as printed, when nothing was cut but the raw text was over the
    /// cap and its rendering (a redrawn progress bar, `\r`) is what made it fit.
    pub raw_file: Option<PathBuf>,
}

/// What a push makes visible now.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Pushed {
    /// Text to stream live, if any.
    pub live: Option<String>,
    /// True on the push that first exceeded the channel cap (announce it once).
    pub started_truncating: bool,
    /// The unfinished last line(s) as they look now, when they changed (empty: none left).
    /// Later text may still rewrite them; once final they arrive in `live`.
    pub active: Option<String>,
}

/// Where a channel's shown text under its cap is kept: in the stream, or in the cell's live
/// view (published: the view's readers share the one copy).
enum Kept {
    Own(String),
    Published(LiveView, Channel),
}

impl Kept {
    fn push_str(&mut self, text: &str) {
        match self {
            Kept::Own(kept) => kept.push_str(text),
            Kept::Published(view, channel) => view.push_text(*channel, text),
        }
    }

    /// Forgets the text. A published one is cleared by the view's own clear (both channels
    /// and their order at once, `LiveView::clear`).
    fn clear(&mut self) {
        if let Kept::Own(kept) = self {
            kept.clear();
        }
    }

    fn with<R>(&self, read: impl FnOnce(&str) -> R) -> R {
        match self {
            Kept::Own(kept) => read(kept),
            Kept::Published(view, channel) => view.with_text(*channel, read),
        }
    }

    /// The text, for the outcome: taken from the stream, or copied from the view (whose
    /// readers may still be reading it).
    fn take(&mut self) -> String {
        match self {
            Kept::Own(kept) => std::mem::take(kept),
            Kept::Published(view, channel) => view.with_text(*channel, str::to_string),
        }
    }
}

struct Spill {
    path: PathBuf,
    writer: Option<std::io::BufWriter<std::fs::File>>,
    error: Option<String>,
}

/// One channel of output under caps.
pub struct CappedStream {
    label: String,
    limits: OutputLimits,
    target: Option<SpillTarget>,
    /// Shown text while it fits in `max_chars`; frozen once the channel overflows.
    kept: Kept,
    kept_chars: usize,
    overflowed: bool,
    /// Last shown characters once overflowed (between `tail_budget` and twice that).
    tail: String,
    tail_chars: usize,
    shown_total: usize,
    raw_total: usize,
    line_chars: usize,
    line_overflow: usize,
    lines_cut: usize,
    line_omitted: usize,
    spill: Option<Spill>,
    /// The raw text while no spill file is open (it seeds the file when one opens).
    raw_head: String,
    /// Characters of the raw text since its last line break.
    raw_line: usize,
    /// Renders control characters (stdout and stderr of a cell); `None` keeps text as is.
    terminal: Option<Terminal>,
    /// The active text last reported.
    last_active: String,
}

impl CappedStream {
    /// A channel a terminal would show: its text rendered (`\r`, `\b`, ANSI erase and cursor
    /// moves) before the caps.
    pub fn terminal(label: &str, limits: OutputLimits, target: Option<SpillTarget>) -> Self {
        let mut stream = CappedStream::new(label, limits, target);
        stream.terminal = Some(Terminal::new(stream.limits.max_line_chars));
        stream
    }

    pub fn new(label: &str, limits: OutputLimits, target: Option<SpillTarget>) -> CappedStream {
        CappedStream {
            label: label.to_string(),
            limits: OutputLimits {
                max_chars: limits.max_chars.max(2),
                max_line_chars: limits.max_line_chars.max(1),
            },
            target,
            kept: Kept::Own(String::new()),
            kept_chars: 0,
            overflowed: false,
            tail: String::new(),
            tail_chars: 0,
            shown_total: 0,
            raw_total: 0,
            line_chars: 0,
            line_overflow: 0,
            lines_cut: 0,
            line_omitted: 0,
            spill: None,
            raw_head: String::new(),
            raw_line: 0,
            terminal: None,
            last_active: String::new(),
        }
    }

    /// Keeps the shown text in a cell's live view (`channel` of it) instead of in the stream:
    /// readers of the view see it as it grows and nobody copies it. Called before any push.
    pub fn published(mut self, view: LiveView, channel: Channel) -> CappedStream {
        self.kept = Kept::Published(view, channel);
        self
    }

    fn head_budget(&self) -> usize {
        self.limits.max_chars / 2
    }

    fn tail_budget(&self) -> usize {
        self.limits.max_chars - self.head_budget()
    }

    /// True when nothing is shown (nothing printed, or all of it cleared).
    pub fn is_empty(&self) -> bool {
        self.shown_total == 0 && self.last_active.is_empty()
    }

    /// Characters received so far.
    pub fn total_chars(&self) -> usize {
        self.raw_total
    }

    /// Takes a piece of raw output.
    pub fn push(&mut self, raw: &str) -> Pushed {
        if raw.is_empty() {
            return Pushed::default();
        }
        let raw_chars = raw.chars().count();
        if self.spill.is_none() && self.may_cut(raw, raw_chars) {
            self.open_spill();
        }
        match &mut self.spill {
            Some(spill) => spill.write(raw),
            None => self.raw_head.push_str(raw),
        }
        self.raw_total += raw_chars;
        self.raw_line = match raw.rfind('\n') {
            Some(i) => raw[i + 1..].chars().count(),
            None => self.raw_line + raw_chars,
        };
        let Some(terminal) = &mut self.terminal else {
            let shown = self.cap_lines(raw);
            return self.append_shown(&shown);
        };
        let pieces = terminal.push(raw);
        let active = terminal.active().unwrap_or_default();
        let shown = self.cap_pieces(pieces);
        let mut pushed = self.append_shown(&shown);
        if active != self.last_active {
            pushed.active = Some(active.clone());
            self.last_active = active;
        }
        pushed
    }

    /// Forgets the text shown so far (Jupyter's `clear_output`): what comes next starts the
    /// channel afresh. The raw text stays in the spill file, if one is open.
    pub fn clear(&mut self) {
        if let Some(terminal) = &mut self.terminal {
            terminal.clear();
        }
        self.kept.clear();
        self.kept_chars = 0;
        self.overflowed = false;
        self.tail.clear();
        self.tail_chars = 0;
        self.shown_total = 0;
        self.line_chars = 0;
        self.line_overflow = 0;
        self.lines_cut = 0;
        self.line_omitted = 0;
        self.last_active.clear();
    }

    /// True when this chunk could cut a line or overflow the channel (cheap, conservative:
    /// counted on the raw text, which is never shorter than what it renders to).
    fn may_cut(&self, raw: &str, raw_chars: usize) -> bool {
        if self.raw_total + raw_chars > self.limits.max_chars {
            return true;
        }
        let mut line = self.raw_line;
        for piece in raw.split_inclusive('\n') {
            line += piece.chars().count();
            if line > self.limits.max_line_chars + 1 {
                return true;
            }
            if piece.ends_with('\n') {
                line = 0;
            }
        }
        false
    }

    fn open_spill(&mut self) {
        let Some(target) = &self.target else {
            return;
        };
        let path = target.path(&self.label);
        let opened = create_private_dir(&target.dir)
            .map_err(|e| format!("{e:#}"))
            .and_then(|()| open_private(&path).map_err(|e| e.to_string()));
        let mut spill = match opened {
            Ok(file) => Spill {
                path,
                writer: Some(std::io::BufWriter::new(file)),
                error: None,
            },
            Err(error) => Spill {
                path,
                writer: None,
                error: Some(error),
            },
        };
        spill.write(&std::mem::take(&mut self.raw_head));
        self.spill = Some(spill);
    }

    /// Applies the per-line cap to a raw chunk, returning the text to show.
    fn cap_lines(&mut self, raw: &str) -> String {
        let mut shown = String::with_capacity(raw.len().min(self.limits.max_chars + 64));
        for piece in raw.split_inclusive('\n') {
            let (content, newline) = match piece.strip_suffix('\n') {
                Some(content) => (content, true),
                None => (piece, false),
            };
            self.cap_piece(content, 0, newline, &mut shown);
        }
        shown
    }

    /// Applies the per-line cap to rendered lines, returning the text to show.
    fn cap_pieces(&mut self, pieces: Vec<Piece>) -> String {
        let mut shown = String::new();
        for piece in pieces {
            self.cap_piece(&piece.text, piece.extra, piece.newline, &mut shown);
        }
        shown
    }

    /// One piece of a line: `content`, then `extra` characters already left out of it.
    fn cap_piece(&mut self, content: &str, extra: usize, newline: bool, shown: &mut String) {
        let chars = content.chars().count() + extra;
        let allowance = self.limits.max_line_chars.saturating_sub(self.line_chars);
        if chars <= allowance {
            shown.push_str(content);
        } else {
            shown.push_str(prefix_chars(content, allowance));
            self.line_overflow += chars - allowance;
        }
        self.line_chars += chars;
        if newline {
            if self.line_overflow > 0 {
                shown.push_str(&self.close_cut_line());
            }
            shown.push('\n');
            self.line_chars = 0;
        }
    }

    fn close_cut_line(&mut self) -> String {
        let cut = std::mem::take(&mut self.line_overflow);
        self.lines_cut += 1;
        self.line_omitted += cut;
        format!(" … [line truncated: {cut} more characters]")
    }

    /// Adds shown text under the channel cap.
    fn append_shown(&mut self, shown: &str) -> Pushed {
        if shown.is_empty() {
            return Pushed::default();
        }
        let chars = shown.chars().count();
        self.shown_total += chars;
        if self.overflowed {
            self.push_tail(shown, chars);
            return Pushed::default();
        }
        let room = self.limits.max_chars - self.kept_chars;
        if chars <= room {
            self.kept.push_str(shown);
            self.kept_chars += chars;
            return Pushed {
                live: Some(shown.to_string()),
                ..Pushed::default()
            };
        }
        let fits = prefix_chars(shown, room);
        let rest = &shown[fits.len()..];
        self.kept.push_str(fits);
        self.kept_chars += room;
        self.overflowed = true;
        let tail_budget = self.tail_budget();
        let seed = self
            .kept
            .with(|kept| suffix_chars(kept, tail_budget).to_string());
        self.tail_chars = seed.chars().count();
        self.tail = seed;
        self.push_tail(rest, chars - room);
        Pushed {
            live: (!fits.is_empty()).then(|| fits.to_string()),
            started_truncating: true,
            active: None,
        }
    }

    fn push_tail(&mut self, text: &str, chars: usize) {
        self.tail.push_str(text);
        self.tail_chars += chars;
        let budget = self.tail_budget();
        if self.tail_chars > 2 * budget {
            let drop = self.tail_chars - budget;
            let cut = byte_offset_of_char(&self.tail, drop);
            self.tail.drain(..cut);
            self.tail_chars = budget;
        }
    }

    /// Ends the channel.
    pub fn finish(mut self) -> CappedText {
        let mut remainder = String::new();
        if let Some(terminal) = self.terminal.take() {
            let shown = self.cap_pieces(terminal.finish());
            if let Some(live) = self.append_shown(&shown).live {
                remainder.push_str(&live);
            }
        }
        if self.line_overflow > 0 {
            let marker = self.close_cut_line();
            if let Some(live) = self.append_shown(&marker).live {
                remainder.push_str(&live);
            }
        }
        let spill = self.spill.take().map(Spill::close);
        let cut = self.overflowed || self.lines_cut > 0;
        let mut raw_file = None;
        let (full_output, spill_error) = match (&spill, cut) {
            (Some((path, None)), true) => (Some(path.clone()), None),
            (Some((_, Some(error))), true) => (None, Some(error.clone())),
            (Some((path, None)), false) if self.raw_total > self.shown_total => {
                // The raw text would have been cut, and rendering it as a terminal shows it
                // (progress bars redrawn in place) made it fit: the file keeps it as printed.
                raw_file = Some(path.clone());
                (None, None)
            }
            (Some((path, _)), false) => {
                // Opened on suspicion but nothing was cut or redrawn: the file adds nothing.
                let _ = std::fs::remove_file(path);
                (None, None)
            }
            (None, true) => (None, Some("no output directory is configured".to_string())),
            (None, false) => (None, None),
        };
        let where_full = match (&full_output, &spill_error) {
            (Some(path), _) => format!("the full output is in {}", path.display()),
            (None, Some(error)) => format!("the full output could not be saved: {error}"),
            (None, None) => String::new(),
        };
        let mut text;
        let mut omitted = self.line_omitted;
        if self.overflowed {
            let kept = self.kept.take();
            let head = whole_lines_head(prefix_chars(&kept, self.head_budget()), self.snap_bound());
            let tail = whole_lines_tail(
                suffix_chars(&self.tail, self.tail_budget()),
                self.snap_bound(),
            );
            let head_chars = head.chars().count();
            let tail_chars = tail.chars().count();
            let middle = self.shown_total - head_chars - tail_chars;
            omitted += middle;
            text = String::with_capacity(head.len() + tail.len() + 200);
            text.push_str(head);
            text.push_str(&self.marker_after(
                head,
                &format!(
                    "{middle} characters omitted from the middle of {} ({} in all); {where_full}",
                    self.label, self.raw_total
                ),
            ));
            text.push_str(tail);
            // The live part is the first `kept_chars` shown characters; what follows it must
            // end as `text` does.
            let tail_start = self.shown_total - tail_chars;
            if tail_start > self.kept_chars {
                remainder.push_str(&self.marker_after(
                    &kept,
                    &format!(
                        "{} characters omitted; {where_full}",
                        tail_start - self.kept_chars
                    ),
                ));
                remainder.push_str(tail);
            } else {
                remainder.push_str(suffix_chars(tail, self.shown_total - self.kept_chars));
            }
        } else {
            text = self.kept.take();
        }
        if self.lines_cut > 0 && !self.overflowed {
            let footer = self.marker(&format!(
                "{} long line(s) of {} cut at {} characters; {where_full}",
                self.lines_cut, self.label, self.limits.max_line_chars
            ));
            text.push_str(&footer);
            remainder.push_str(&footer);
        }
        let truncation = cut.then(|| Truncation {
            channel: self.label.clone(),
            total_chars: self.raw_total,
            omitted_chars: omitted,
            lines_cut: self.lines_cut,
            full_output,
            spill_error,
        });
        CappedText {
            text,
            live_remainder: remainder,
            truncation,
            raw_file,
        }
    }

    fn marker(&self, body: &str) -> String {
        format!("\n[pi-repl: {body}]\n")
    }

    /// The marker on a line of its own after `before` (no empty line when `before` ends one).
    fn marker_after(&self, before: &str, body: &str) -> String {
        let marker = self.marker(body);
        if before.is_empty() || before.ends_with('\n') {
            marker[1..].to_string()
        } else {
            marker
        }
    }

    /// How far a cut moves to reach a line boundary: a tenth of the head's budget, so a cut
    /// keeps whole lines unless the lines are very long.
    fn snap_bound(&self) -> usize {
        (self.head_budget() / 10).max(1)
    }
}

impl Spill {
    fn write(&mut self, text: &str) {
        if let Some(writer) = &mut self.writer
            && let Err(error) = writer.write_all(text.as_bytes())
        {
            self.error = Some(error.to_string());
            self.writer = None;
        }
    }

    /// Flushes the file. A spill that failed (a full disk) is removed rather than left as a
    /// partial file that looks complete.
    fn close(mut self) -> (PathBuf, Option<String>) {
        if let Some(mut writer) = self.writer.take()
            && let Err(error) = writer.flush()
        {
            self.error = Some(error.to_string());
        }
        if self.error.is_some()
            && let Err(error) = std::fs::remove_file(&self.path)
            && error.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(%error, path = %self.path.display(), "cannot remove a partial spill file");
        }
        (self.path, self.error)
    }
}

fn open_private(path: &Path) -> std::io::Result<std::fs::File> {
    crate::fsutil::open_private(path, crate::fsutil::Open::Truncate)
}

/// `head` up to its last line break, when that drops at most `bound` characters (else all of
/// it: one very long line is cut inside).
pub fn whole_lines_head(head: &str, bound: usize) -> &str {
    match head.rfind('\n') {
        Some(i) if head[i + 1..].chars().count() <= bound => &head[..=i],
        _ => head,
    }
}

/// `tail` from just after its first line break, when that drops at most `bound` characters.
pub fn whole_lines_tail(tail: &str, bound: usize) -> &str {
    match tail.find('\n') {
        Some(i) if tail[..=i].chars().count() <= bound && i + 1 < tail.len() => &tail[i + 1..],
        _ => tail,
    }
}

/// The first `n` characters of `s`.
pub fn prefix_chars(s: &str, n: usize) -> &str {
    &s[..byte_offset_of_char(s, n)]
}

/// The last `n` characters of `s`.
pub fn suffix_chars(s: &str, n: usize) -> &str {
    let total = s.chars().count();
    &s[byte_offset_of_char(s, total.saturating_sub(n))..]
}

fn byte_offset_of_char(s: &str, n: usize) -> usize {
    s.char_indices().nth(n).map_or(s.len(), |(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_chars: usize, max_line_chars: usize) -> OutputLimits {
        OutputLimits {
            max_chars,
            max_line_chars,
        }
    }

    fn stream(max_chars: usize, max_line: usize, dir: &Path) -> CappedStream {
        CappedStream::new(
            "stdout",
            limits(max_chars, max_line),
            Some(SpillTarget {
                dir: dir.to_path_buf(),
                stem: "cell-1".into(),
            }),
        )
    }

    #[test]
    fn small_output_passes_whole_and_spills_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = stream(100, 50, tmp.path());
        assert_eq!(s.push("hello\n").live.as_deref(), Some("hello\n"));
        let done = s.finish();
        assert_eq!(done.text, "hello\n");
        assert_eq!(done.live_remainder, "");
        assert!(done.truncation.is_none());
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_flood_keeps_head_and_tail_and_spills_everything() {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = stream(100, 1000, tmp.path());
        let mut raw = String::new();
        let mut started = 0;
        for i in 0..1000 {
            let line = format!("line {i}\n");
            raw.push_str(&line);
            if s.push(&line).started_truncating {
                started += 1;
            }
        }
        assert_eq!(started, 1);
        let done = s.finish();
        assert!(done.text.starts_with("line 0\nline 1\n"), "{}", done.text);
        assert!(done.text.ends_with("line 999\n"), "{}", done.text);
        assert!(
            done.text
                .contains("characters omitted from the middle of stdout")
        );
        let truncation = done.truncation.unwrap();
        let path = truncation.full_output.unwrap();
        assert!(done.text.contains(&path.display().to_string()));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), raw);
        assert_eq!(truncation.total_chars, raw.chars().count());
    }

    /// Issue 22: the head ended and the tail began in the middle of a line.
    #[test]
    fn a_cut_channel_keeps_whole_lines_on_both_sides_of_the_marker() {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = stream(1000, 4096, tmp.path());
        for i in 0..500 {
            s.push(&format!("line {i:03} of the flood\n"));
        }
        let done = s.finish();
        let (head, rest) = done.text.split_once("[pi-repl: ").unwrap();
        let (_, tail) = rest.split_once("]\n").unwrap();
        assert!(head.ends_with("of the flood\n"), "{head:?}");
        assert!(head.lines().all(|l| l.starts_with("line ")), "{head:?}");
        assert!(tail.starts_with("line "), "{tail:?}");
        assert!(tail.ends_with("line 499 of the flood\n"), "{tail:?}");
        let omitted = done.truncation.unwrap().omitted_chars;
        assert_eq!(
            omitted,
            500 * "line 000 of the flood\n".len() - head.len() - tail.len()
        );
    }

    #[test]
    fn live_text_then_remainder_ends_like_the_returned_text() {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = stream(100, 1000, tmp.path());
        let mut live = String::new();
        for i in 0..300 {
            if let Some(text) = s.push(&format!("{i:04}\n")).live {
                live.push_str(&text);
            }
        }
        assert_eq!(live.chars().count(), 100);
        let done = s.finish();
        let tail = suffix_chars(&done.text, 50);
        assert!(done.live_remainder.ends_with(tail));
        assert!(done.live_remainder.contains("characters omitted"));
    }

    #[test]
    fn long_lines_are_cut_with_a_count_and_spilled() {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = stream(10_000, 10, tmp.path());
        s.push("short\n");
        s.push(&"x".repeat(25));
        s.push(&"y".repeat(5));
        s.push("\nend\n");
        let done = s.finish();
        assert!(
            done.text
                .starts_with("short\nxxxxxxxxxx … [line truncated: 20 more characters]\nend\n"),
            "{}",
            done.text
        );
        assert!(
            done.text
                .contains("1 long line(s) of stdout cut at 10 characters")
        );
        let path = done
            .truncation
            .as_ref()
            .unwrap()
            .full_output
            .clone()
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(path).unwrap(),
            format!("short\n{}{}\nend\n", "x".repeat(25), "y".repeat(5))
        );
    }

    #[test]
    fn an_unterminated_long_line_is_closed_at_finish() {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = stream(10_000, 4, tmp.path());
        s.push("abcdefgh");
        let done = s.finish();
        assert!(
            done.text
                .starts_with("abcd … [line truncated: 4 more characters]")
        );
        assert!(done.live_remainder.starts_with(" … [line truncated"));
    }

    #[test]
    fn multibyte_text_is_cut_on_character_boundaries() {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = stream(10, 1000, tmp.path());
        for _ in 0..20 {
            s.push("é🙂");
        }
        let done = s.finish();
        assert!(done.text.starts_with("é🙂é🙂é"));
        assert!(done.text.ends_with("🙂é🙂é🙂"));
    }

    #[test]
    fn memory_stays_bounded_under_a_huge_volume() {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = stream(1000, 4096, tmp.path());
        let chunk = "0123456789abcdef\n".repeat(4000);
        for _ in 0..200 {
            s.push(&chunk);
            assert!(s.kept.with(str::len) <= 1000);
            assert!(s.tail.len() <= 2 * 500 + chunk.len());
        }
        assert_eq!(s.total_chars(), chunk.len() * 200);
    }

    /// Issue 11: a spill that failed on a full disk left its partial file behind.
    #[test]
    fn a_spill_that_fails_to_write_is_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("cell-stdout.txt");
        std::fs::write(&path, b"partial").unwrap();
        // /dev/full fails every write with ENOSPC, as a full disk does.
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let mut spill = Spill {
            path: path.clone(),
            writer: Some(std::io::BufWriter::with_capacity(4, full)),
            error: None,
        };
        spill.write(&"x".repeat(64));
        let (_, error) = spill.close();
        assert!(error.is_some_and(|e| e.contains("No space left")));
        assert!(!path.exists());
    }

    fn terminal(max_chars: usize, max_line: usize, dir: &Path) -> CappedStream {
        CappedStream::terminal(
            "stderr",
            limits(max_chars, max_line),
            Some(SpillTarget {
                dir: dir.to_path_buf(),
                stem: "cell-1".into(),
            }),
        )
    }

    /// Issue 29: 200 tqdm updates on one line went past the 4 096-character line cap, so the
    /// line was cut and the model never saw the bar's last state.
    #[test]
    fn a_progress_bar_is_its_last_state_and_is_not_cut() {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = terminal(30_000, 4096, tmp.path());
        let mut active = Vec::new();
        for i in 0..=200 {
            let pushed = s.push(&format!(
                "\r{:3}%|{:<10}| {i}/200",
                i / 2,
                "█".repeat(i / 20)
            ));
            assert_eq!(pushed.live, None, "nothing is final while the bar is drawn");
            active.extend(pushed.active);
        }
        assert_eq!(active.len(), 201);
        assert_eq!(active.last().unwrap(), "100%|██████████| 200/200");
        let done = s.finish();
        assert_eq!(done.text, "100%|██████████| 200/200");
        assert_eq!(done.live_remainder, "100%|██████████| 200/200");
        assert!(done.truncation.is_none());
        // The raw line went past the per-line cap, so the text as printed is kept (issue 29).
        let raw = std::fs::read_to_string(done.raw_file.as_ref().expect("the raw file")).unwrap();
        assert_eq!(raw.matches('\r').count(), 201);
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_short_redrawn_line_keeps_no_file() {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = terminal(30_000, 4096, tmp.path());
        for i in 0..=20 {
            s.push(&format!("\rstep {i}"));
        }
        let done = s.finish();
        assert_eq!(done.text, "step 20");
        assert!(done.raw_file.is_none() && done.truncation.is_none());
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
    }

    #[test]
    fn caps_apply_to_the_rendered_text_and_the_spill_holds_the_raw() {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = terminal(200, 4096, tmp.path());
        let mut raw = String::new();
        for i in 0..100 {
            let chunk = format!("\rstep {i}\u{1b}[K\rstep {i} done\n");
            raw.push_str(&chunk);
            s.push(&chunk);
        }
        let done = s.finish();
        assert!(
            done.text.starts_with("step 0 done\nstep 1 done\n"),
            "{}",
            done.text
        );
        assert!(done.text.ends_with("step 99 done\n"), "{}", done.text);
        let cut = done.truncation.unwrap();
        assert_eq!(cut.total_chars, raw.chars().count());
        let spilled = std::fs::read_to_string(cut.full_output.unwrap()).unwrap();
        assert_eq!(
            spilled, raw,
            "the spill file holds the raw text, escapes and all"
        );
    }

    #[test]
    fn a_long_rendered_line_is_cut_even_when_it_arrived_in_small_chunks() {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = terminal(10_000, 10, tmp.path());
        for _ in 0..5 {
            s.push("abcdefgh");
        }
        let done = s.finish();
        assert!(
            done.text
                .starts_with("abcdefghab … [line truncated: 30 more characters]"),
            "{}",
            done.text
        );
        assert!(done.truncation.unwrap().full_output.is_some());
    }

    #[test]
    fn clear_forgets_the_shown_text() {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = terminal(1000, 100, tmp.path());
        s.push("epoch 1\n");
        s.clear();
        assert_eq!(s.push("epoch 2\n").live.as_deref(), Some("epoch 2\n"));
        let done = s.finish();
        assert_eq!(done.text, "epoch 2\n");
        assert_eq!(done.live_remainder, "");
    }

    #[test]
    fn without_a_spill_dir_the_marker_says_so() {
        let mut s = CappedStream::new("stderr", limits(10, 100), None);
        s.push(&"z".repeat(50));
        let done = s.finish();
        assert!(done.text.contains("the full output could not be saved"));
    }
}
