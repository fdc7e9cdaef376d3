//! A cell's stream text as a terminal would show it: progress bars are one line, their last state.
//!
//! Owns: interpreting the control characters programs write for a terminal (`\r` back to the
//! line's start, `\b` one column back, ANSI erase `ESC[K`/`ESC[2K`/`ESC[J`, cursor up/down/left/
//! right/column `ESC[nA`/`B`/`C`/`D`/`G`, as tqdm, rich, pip and Keras emit them), incrementally,
//! over text that arrives in chunks (an escape sequence may be split between two chunks).
//! Colours (`ESC[…m`), OSC titles/links and other sequences are dropped; other C0 controls are
//! dropped; `\t` is kept as a character.
//! Does not own: caps, spill files (the raw text is spilled by `output`), live streaming.
//!
//! The model: a short window of *active* lines the cursor can still reach, above them lines that
//! are *committed* (final, handed out once, in order). Before the stream ever moved the cursor up,
//! a push that ends with a line break (ordinary printing) commits every line it completed, so
//! printed lines stream with no delay; a push that ends otherwise keeps the lines it
//! completed active until the next push (tqdm's nested bar writes `\n` and its bar, flushes,
//! and only then moves back up). Once the stream moved the cursor up, the last [`WINDOW`] lines
//! above the cursor stay active (nested tqdm bars, rich live displays). The cursor never moves
//! above the active window (a terminal whose screen is that high): a move up from a chunk that
//! ended right after a line break cannot reach that line, and writes on the highest active one.
//!
//! Invariants:
//! - Memory is bounded: at most `2 * WINDOW + 1` active lines of at most `max_cols` characters
//!   each, plus the committed pieces of one push. Columns past `max_cols` are counted (the
//!   line's `width`), not kept.
//! - Committed text never changes; the committed pieces followed by [`Terminal::finish`] read
//!   exactly as the whole stream rendered at once.

use std::collections::VecDeque;

/// Active lines kept above the cursor once the stream moved the cursor up.
pub const WINDOW: usize = 32;

/// Longest escape sequence parameter kept; a longer one is dropped as garbage.
const MAX_PARAMS: usize = 32;

/// One line as the terminal shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Line {
    /// The first `max_cols` columns.
    cells: Vec<char>,
    /// Columns written, counting those past `max_cols` (≥ `cells.len()`).
    width: usize,
    /// Something was written over or erased: trailing blanks are padding, not text.
    rewritten: bool,
}

/// A finished line (or, at the very end, the unterminated last line) ready for the caps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    /// The line's kept columns.
    pub text: String,
    /// Columns past the kept ones (the line is longer than the line cap by this much).
    pub extra: usize,
    /// A line break follows.
    pub newline: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Escape {
    Ground,
    /// After `ESC`.
    Esc,
    /// After `ESC [`: parameters so far.
    Csi(String),
    /// After `ESC ]` (until BEL or `ESC \`).
    Osc,
    /// `ESC` inside an OSC string.
    OscEsc,
    /// After `ESC` and an intermediate byte (`ESC ( B`): one more byte ends it.
    EscIntermediate,
}

/// The terminal state of one stream.
#[derive(Debug, Clone)]
pub struct Terminal {
    max_cols: usize,
    lines: VecDeque<Line>,
    row: usize,
    col: usize,
    went_up: bool,
    escape: Escape,
    /// Line breaks in the current push.
    breaks: usize,
}

impl Terminal {
    /// A terminal keeping `max_cols` columns of each line (the line cap).
    pub fn new(max_cols: usize) -> Terminal {
        Terminal {
            max_cols: max_cols.max(1),
            lines: VecDeque::from([Line::default()]),
            row: 0,
            col: 0,
            went_up: false,
            escape: Escape::Ground,
            breaks: 0,
        }
    }

    /// Takes a chunk of raw text; returns the lines it made final, in order.
    pub fn push(&mut self, raw: &str) -> Vec<Piece> {
        let mut done = Vec::new();
        self.breaks = 0;
        for ch in raw.chars() {
            self.feed(ch, &mut done);
        }
        if !self.went_up {
            let keep = if raw.ends_with('\n') {
                0
            } else {
                self.breaks.min(WINDOW).min(self.row)
            };
            self.commit_above(self.row - keep, &mut done);
        }
        done
    }

    /// The active lines as they look now (the last one unterminated), `None` when empty.
    /// Lines past the line cap end with the marker the caps would add.
    pub fn active(&self) -> Option<String> {
        let end = self.visible_end();
        let mut text = String::new();
        for (i, line) in self.lines.iter().take(end).enumerate() {
            if i > 0 {
                text.push('\n');
            }
            let piece = piece(line.clone(), false);
            text.push_str(&piece.text);
            if piece.extra > 0 {
                text.push_str(&format!(
                    " … [line truncated: {} more characters]",
                    piece.extra
                ));
            }
        }
        (!text.is_empty()).then_some(text)
    }

    /// Forgets everything on the screen (Jupyter's `clear_output`): the next text starts a
    /// fresh first line. A half-read escape sequence is kept.
    pub fn clear(&mut self) {
        self.lines = VecDeque::from([Line::default()]);
        self.row = 0;
        self.col = 0;
        self.went_up = false;
    }

    /// Ends the stream: the active lines, final. The last is unterminated unless empty.
    pub fn finish(mut self) -> Vec<Piece> {
        let mut done = Vec::new();
        let n = self.lines.len();
        let end = self.visible_end();
        for (i, line) in self.lines.drain(..).take(end).enumerate() {
            done.push(piece(line, i + 1 < n));
        }
        // A last line of blanks (a bar wiped with spaces) shows nothing.
        if done
            .last()
            .is_some_and(|last| !last.newline && last.text.is_empty() && last.extra == 0)
        {
            done.pop();
        }
        done
    }

    /// The lines shown: all but an empty last line (the cursor's place after a line break).
    fn visible_end(&self) -> usize {
        let n = self.lines.len();
        if self.lines[n - 1].width == 0 {
            n - 1
        } else {
            n
        }
    }

    fn commit_above(&mut self, row: usize, done: &mut Vec<Piece>) {
        for _ in 0..row {
            if let Some(line) = self.lines.pop_front() {
                done.push(piece(line, true));
            }
        }
        self.row -= row;
    }

    fn feed(&mut self, ch: char, done: &mut Vec<Piece>) {
        match std::mem::replace(&mut self.escape, Escape::Ground) {
            Escape::Ground => self.ground(ch, done),
            Escape::Esc => match ch {
                '[' => self.escape = Escape::Csi(String::new()),
                ']' => self.escape = Escape::Osc,
                ' '..='/' => self.escape = Escape::EscIntermediate,
                _ => {} // a two-character escape (ESC 7, ESC M, …): nothing to show
            },
            Escape::EscIntermediate => {}
            Escape::Csi(mut params) => match ch {
                '0'..='?' | ' '..='/' if params.len() < MAX_PARAMS => {
                    params.push(ch);
                    self.escape = Escape::Csi(params);
                }
                '0'..='?' | ' '..='/' => {} // too long to be a real sequence: dropped
                '@'..='~' => self.csi(&params, ch),
                _ => {} // not a sequence after all: dropped
            },
            Escape::Osc => match ch {
                '\u{7}' => {}
                '\u{1b}' => self.escape = Escape::OscEsc,
                _ => self.escape = Escape::Osc,
            },
            Escape::OscEsc => {
                if ch != '\\' {
                    self.escape = Escape::Osc;
                }
            }
        }
    }

    fn ground(&mut self, ch: char, done: &mut Vec<Piece>) {
        match ch {
            '\n' => self.newline(done),
            '\r' => self.col = 0,
            '\u{8}' => self.col = self.col.saturating_sub(1),
            '\u{1b}' => self.escape = Escape::Esc,
            '\t' => self.put(ch),
            c if c.is_control() => {} // bell, form feed, NUL, DEL, C1: nothing shown
            c => self.put(c),
        }
    }

    fn newline(&mut self, done: &mut Vec<Piece>) {
        self.breaks += 1;
        self.col = 0;
        self.row += 1;
        if self.row == self.lines.len() {
            self.lines.push_back(Line::default());
        }
        let keep = WINDOW;
        if self.row > keep {
            self.commit_above(self.row - keep, done);
        }
    }

    fn put(&mut self, ch: char) {
        let max_cols = self.max_cols;
        let col = self.col;
        let line = &mut self.lines[self.row];
        if col < line.width {
            line.rewritten = true;
        }
        if col < max_cols {
            if col < line.cells.len() {
                line.cells[col] = ch;
            } else {
                line.cells.resize(col, ' ');
                line.cells.push(ch);
            }
        }
        line.width = line.width.max(col + 1);
        self.col += 1;
    }

    fn csi(&mut self, params: &str, command: char) {
        if params.starts_with(['?', '>', '<', '=']) {
            return; // private modes (hide the cursor, …)
        }
        let mut numbers = params.split(';').map(|p| p.parse::<usize>().ok());
        let first = numbers.next().flatten();
        let count = first.unwrap_or(1).max(1);
        match command {
            'A' | 'F' => {
                self.went_up = true;
                self.row = self.row.saturating_sub(count);
                if command == 'F' {
                    self.col = 0;
                }
            }
            'B' | 'E' => {
                self.row = (self.row + count).min(self.lines.len() - 1);
                if command == 'E' {
                    self.col = 0;
                }
            }
            'C' => self.col += count,
            'D' => self.col = self.col.saturating_sub(count),
            'G' => self.col = count - 1,
            'K' => self.erase_in_line(first.unwrap_or(0)),
            'J' => match first.unwrap_or(0) {
                0 => {
                    self.erase_in_line(0);
                    self.lines.truncate(self.row + 1);
                }
                1 => {
                    for line in self.lines.iter_mut().take(self.row) {
                        *line = Line::default();
                    }
                    self.erase_in_line(1);
                }
                _ => self
                    .lines
                    .iter_mut()
                    .for_each(|line| *line = Line::default()),
            },
            _ => {} // colours (`m`), scrolling regions, …: nothing to show
        }
    }

    fn erase_in_line(&mut self, mode: usize) {
        let col = self.col;
        let line = &mut self.lines[self.row];
        match mode {
            0 => {
                if col < line.width {
                    line.width = col;
                    line.cells.truncate(col);
                    line.rewritten = true;
                }
            }
            1 => {
                let end = (col + 1).min(line.cells.len());
                line.cells[..end].iter_mut().for_each(|c| *c = ' ');
                line.rewritten = true;
                if line.width <= col + 1 {
                    *line = Line::default();
                }
            }
            _ => *line = Line::default(),
        }
    }
}

fn piece(line: Line, newline: bool) -> Piece {
    let extra = line.width - line.cells.len();
    let mut text: String = line.cells.into_iter().collect();
    if line.rewritten && extra == 0 {
        text.truncate(text.trim_end_matches(' ').len());
    }
    Piece {
        extra,
        text,
        newline,
    }
}

/// `raw` rendered at once, lines past `max_cols` marked (for tests, benchmarks, and callers with
/// the whole text in hand).
pub fn render(raw: &str, max_cols: usize) -> String {
    let mut terminal = Terminal::new(max_cols);
    let mut pieces = terminal.push(raw);
    pieces.extend(terminal.finish());
    let mut text = String::new();
    for piece in pieces {
        text.push_str(&piece.text);
        if piece.extra > 0 {
            text.push_str(&format!(
                " … [line truncated: {} more characters]",
                piece.extra
            ));
        }
        if piece.newline {
            text.push('\n');
        }
    }
    text
}

/// A cell's live output for a reader that appends what it is sent to a view that understands
/// `\r`, `ESC[nA` and `ESC[J` (a person's terminal, pi's live view): final text as it comes, the
/// unfinished lines (progress bars) drawn below it and redrawn in place, so a bar costs one
/// line, not one line per update.
#[derive(Debug, Default)]
pub struct LiveDraw {
    /// The unfinished lines of stdout and stderr.
    active: [String; 2],
    /// Lines drawn below the final text (0: none).
    drawn: usize,
}

impl LiveDraw {
    /// Final text of a channel: the drawn lines erased, the text, the drawn lines again.
    pub fn output(&mut self, text: &str) -> String {
        let mut out = self.erase();
        out.push_str(text);
        out.push_str(&self.draw());
        out
    }

    /// A channel's unfinished lines changed (`stderr`: false for stdout).
    pub fn unfinished(&mut self, stderr: bool, text: &str) -> String {
        self.active[usize::from(stderr)] = text.to_string();
        let mut out = self.erase();
        out.push_str(&self.draw());
        out
    }

    /// Notes a channel's unfinished lines without drawing them (a redraw too soon after the
    /// last); the next `output` or `redraw` draws them.
    pub fn note(&mut self, stderr: bool, text: &str) {
        self.active[usize::from(stderr)] = text.to_string();
    }

    /// The drawn lines replaced by the current ones.
    pub fn redraw(&mut self) -> String {
        let mut out = self.erase();
        out.push_str(&self.draw());
        out
    }

    /// `clear_output()`: everything shown so far goes (`ESC[2J`, which pi's view reads as
    /// "clear all").
    pub fn cleared(&mut self) -> String {
        self.active = Default::default();
        self.drawn = 0;
        "\u{1b}[2J".to_string()
    }

    /// What erases the drawn lines (before text that is not the cell's, or its final text).
    pub fn erase(&mut self) -> String {
        let drawn = std::mem::take(&mut self.drawn);
        match drawn {
            0 => String::new(),
            1 => "\r\u{1b}[J".to_string(),
            n => format!("\u{1b}[{}A\r\u{1b}[J", n - 1),
        }
    }

    /// What draws the unfinished lines (after `erase`).
    pub fn draw(&mut self) -> String {
        let lines: Vec<&str> = self
            .active
            .iter()
            .filter(|text| !text.is_empty())
            .map(String::as_str)
            .collect();
        let text = lines.join("\n");
        self.drawn = if text.is_empty() {
            0
        } else {
            text.split('\n').count()
        };
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(raw: &str) -> String {
        render(raw, 4096)
    }

    /// Every way of cutting `raw` into two chunks renders as the whole does.
    fn same_in_chunks(raw: &str) {
        same_in_chunks_except_after_breaks(raw, false);
    }

    /// The same, except (when `moves_up`) cuts right after a line break: a move up in the
    /// next chunk cannot reach that line (the module's documented limit).
    fn same_in_chunks_except_after_breaks(raw: &str, moves_up: bool) {
        let whole = shown(raw);
        let chars: Vec<char> = raw.chars().collect();
        for cut in 0..=chars.len() {
            if moves_up && cut > 0 && chars[cut - 1] == '\n' {
                continue;
            }
            let (a, b): (String, String) =
                (chars[..cut].iter().collect(), chars[cut..].iter().collect());
            let mut terminal = Terminal::new(4096);
            let mut text = String::new();
            for piece in terminal.push(&a).into_iter().chain(terminal.push(&b)) {
                text.push_str(&piece.text);
                if piece.newline {
                    text.push('\n');
                }
            }
            for piece in terminal.finish() {
                text.push_str(&piece.text);
                if piece.newline {
                    text.push('\n');
                }
            }
            assert_eq!(text, whole, "cut at {cut} of {raw:?}");
        }
    }

    #[test]
    fn plain_text_passes_unchanged() {
        assert_eq!(shown("hello\nworld\n"), "hello\nworld\n");
        assert_eq!(shown("no newline"), "no newline");
        assert_eq!(shown("a\n\n\nb"), "a\n\n\nb");
        assert_eq!(shown("\n"), "\n");
        assert_eq!(shown(""), "");
        assert_eq!(shown("tab\there\n"), "tab\there\n");
    }

    /// Issue 29: 300 `\r` updates came back as 4 303 characters.
    #[test]
    fn carriage_return_progress_is_its_last_state() {
        let raw: String = (0..300).map(|i| format!("\rprogress {i}/300")).collect();
        assert_eq!(shown(&raw), "progress 299/300");
        assert_eq!(shown(&format!("{raw}\ndone\n")), "progress 299/300\ndone\n");
    }

    #[test]
    fn carriage_return_overwrites_without_erasing_the_rest() {
        assert_eq!(shown("abcdef\rXY"), "XYcdef");
        assert_eq!(shown("abcdef\rXY\n"), "XYcdef\n");
    }

    #[test]
    fn crlf_is_a_newline() {
        assert_eq!(shown("one\r\ntwo\r\n"), "one\ntwo\n");
        same_in_chunks("one\r\ntwo\r\n");
    }

    #[test]
    fn backspace_steps_back_and_the_next_character_overwrites() {
        assert_eq!(shown("abc\u{8}\u{8}XY"), "aXY");
        assert_eq!(shown("\u{8}\u{8}a"), "a");
        // Keras: the old bar erased by as many backspaces as it was wide, then `\r`.
        let bar = |n: usize| format!("{n}/5 [{}{}]", "=".repeat(n), ".".repeat(5 - n));
        let mut raw = String::new();
        let mut previous = 0;
        for n in 1..=5 {
            raw.push_str(&"\u{8}".repeat(previous));
            raw.push('\r');
            let b = bar(n);
            previous = b.len();
            raw.push_str(&b);
        }
        raw.push('\n');
        assert_eq!(shown(&raw), "5/5 [=====]\n");
    }

    #[test]
    fn erase_in_line() {
        assert_eq!(shown("abcdef\r\u{1b}[Kxy"), "xy");
        assert_eq!(shown("abcdef\u{1b}[3D\u{1b}[K"), "abc");
        assert_eq!(shown("abcdef\u{1b}[2Kxy"), "      xy");
        assert_eq!(shown("abcdef\r\u{1b}[2Kxy"), "xy");
        assert_eq!(shown("abcdef\u{1b}[3D\u{1b}[1K"), "    ef");
    }

    #[test]
    fn colours_titles_and_private_modes_are_dropped() {
        assert_eq!(shown("\u{1b}[31mred\u{1b}[0m\n"), "red\n");
        assert_eq!(shown("\u{1b}]0;title\u{7}x"), "x");
        assert_eq!(
            shown("\u{1b}]8;;http://a\u{1b}\\link\u{1b}]8;;\u{1b}\\"),
            "link"
        );
        assert_eq!(
            shown("\u{1b}[?25lhidden cursor\u{1b}[?25h"),
            "hidden cursor"
        );
        assert_eq!(shown("bell\u{7}\u{0}\u{7f}"), "bell");
        assert_eq!(shown("\u{1b}(Bx"), "x");
        same_in_chunks("\u{1b}[31mred\u{1b}[0m\n\u{1b}]0;t\u{7}x\u{1b}[2K\ry");
    }

    /// tqdm's nested bars: the inner bar one line down (`\n`), then back up (`ESC[A`).
    #[test]
    fn cursor_up_rewrites_a_line_above() {
        let mut raw = String::new();
        for outer in 0..3 {
            raw.push_str(&format!("\router {outer}/3"));
            for inner in 0..=4 {
                raw.push_str(&format!("\n\rinner {inner}/4\u{1b}[A"));
            }
        }
        raw.push_str("\router 3/3");
        raw.push_str("\n\r\u{1b}[K\u{1b}[A"); // the inner bar cleared (leave=False)
        raw.push('\n');
        assert_eq!(shown(&raw), "outer 3/3\n");
        same_in_chunks_except_after_breaks(&raw, true);
        // As tqdm flushes them: the break and the inner bar, then the move up with the next.
        let mut terminal = Terminal::new(100);
        let mut text = String::new();
        for chunk in ["\router 0/3", "\n\rinner 0/4", "\u{1b}[A\router 1/3"] {
            for piece in terminal.push(chunk) {
                text.push_str(&piece.text);
                text.push('\n');
            }
        }
        assert_eq!(text, "");
        assert_eq!(terminal.active().as_deref(), Some("outer 1/3\ninner 0/4"));
    }

    /// rich/pip in a terminal: erase the live lines upward, then draw again.
    #[test]
    fn erase_and_go_up_redraws_a_block() {
        let frame = |n: usize| format!("task a {n}%\ntask b {n}%");
        let mut raw = frame(0);
        for n in 1..=3 {
            raw.push_str("\r\u{1b}[2K\u{1b}[1A\u{1b}[2K");
            raw.push_str(&frame(n * 10));
        }
        raw.push('\n');
        assert_eq!(shown(&raw), "task a 30%\ntask b 30%\n");
        same_in_chunks_except_after_breaks(&raw, true);
    }

    #[test]
    fn the_cursor_never_goes_above_the_window() {
        assert_eq!(shown("a\nb\u{1b}[5Ax"), "ax\nb");
        let many = "line\n".repeat(100);
        let text = shown(&format!("{many}\u{1b}[100AX"));
        // It stops at the first active line, WINDOW lines above.
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 100);
        assert_eq!(lines[100 - WINDOW], "Xine");
        assert_eq!(lines.iter().filter(|l| **l == "line").count(), 99);
    }

    #[test]
    fn cursor_down_right_and_column() {
        assert_eq!(shown("a\nb\u{1b}[A\u{1b}[Bc"), "a\nbc");
        assert_eq!(shown("ab\u{1b}[3Cc"), "ab   c");
        assert_eq!(shown("abcdef\u{1b}[3GX"), "abXdef");
    }

    #[test]
    fn ordinary_lines_are_final_at_once() {
        let mut terminal = Terminal::new(4096);
        let pieces = terminal.push("one\ntwo\n");
        assert_eq!(
            pieces,
            vec![
                Piece {
                    text: "one".into(),
                    extra: 0,
                    newline: true
                },
                Piece {
                    text: "two".into(),
                    extra: 0,
                    newline: true
                }
            ]
        );
        assert!(terminal.push("thr").is_empty());
        assert_eq!(terminal.active().as_deref(), Some("thr"));
        assert!(terminal.push("\rTHREE").is_empty());
        assert_eq!(terminal.active().as_deref(), Some("THREE"));
        let last = terminal.finish();
        assert_eq!(last.len(), 1);
        assert_eq!(last[0].text, "THREE");
        assert!(!last[0].newline);
        // A push that ends inside a line keeps the lines it completed until the next push.
        let mut terminal = Terminal::new(4096);
        assert!(terminal.push("a\nb").is_empty());
        assert_eq!(terminal.active().as_deref(), Some("a\nb"));
        assert_eq!(terminal.push("c\n").len(), 2);
    }

    #[test]
    fn an_empty_line_after_the_last_break_is_not_a_line() {
        let mut terminal = Terminal::new(10);
        let pieces = terminal.push("x\n");
        assert_eq!(pieces.len(), 1);
        assert_eq!(terminal.active(), None);
        assert!(terminal.finish().is_empty());
    }

    #[test]
    fn long_lines_keep_their_columns_and_count_the_rest() {
        let mut terminal = Terminal::new(5);
        let pieces = terminal.push(&format!("{}\n", "x".repeat(12)));
        assert_eq!(
            pieces,
            vec![Piece {
                text: "xxxxx".into(),
                extra: 7,
                newline: true
            }]
        );
        // A long bar rewritten shorter is short.
        assert_eq!(
            render(&format!("{}\r\u{1b}[Kabc", "y".repeat(20)), 5),
            "abc"
        );
        assert_eq!(
            render(&"y".repeat(8), 5),
            "yyyyy … [line truncated: 3 more characters]"
        );
    }

    #[test]
    fn memory_stays_bounded_under_a_flood_of_updates() {
        let mut terminal = Terminal::new(100);
        for i in 0..10_000 {
            terminal.push(&format!("\r{}{i}", "z".repeat(500)));
            terminal.push("\u{1b}[A\n");
            assert!(terminal.lines.len() <= 2 * WINDOW + 1);
            assert!(terminal.lines.iter().all(|l| l.cells.len() <= 100));
        }
    }

    #[test]
    fn clear_starts_a_fresh_screen() {
        let mut terminal = Terminal::new(100);
        terminal.push("epoch 1\npartial");
        terminal.clear();
        terminal.push("epoch 2\n");
        assert_eq!(terminal.active(), None);
    }

    /// What pi's live view receives for a progress bar and prints around it reads, once
    /// rendered, as the cell's output so far with the bar in its current state.
    #[test]
    fn live_draw_keeps_the_bar_below_the_final_text() {
        let mut live = LiveDraw::default();
        let mut sent = String::new();
        for i in 0..=10 {
            sent.push_str(&live.unfinished(true, &format!("{}%", i * 10)));
            if i == 5 {
                sent.push_str(&live.output("half way\n"));
            }
        }
        assert_eq!(shown(&sent), "half way\n100%");
        sent.push_str(&live.unfinished(false, "out a\nout b"));
        assert_eq!(shown(&sent), "half way\nout a\nout b\n100%");
        sent.push_str(&live.unfinished(true, ""));
        sent.push_str(&live.erase());
        sent.push_str("the end\n");
        assert_eq!(shown(&sent), "half way\nthe end\n");
        assert!(
            sent.len() < 400,
            "updates replace each other: {} bytes",
            sent.len()
        );
    }

    #[test]
    fn split_escape_sequences_and_multibyte_text() {
        same_in_chunks("é🙂\r\u{1b}[2Kabc\u{1b}[1Ad\n█▉▊\n");
        same_in_chunks("10%|█         | 1/10\r 20%|██        | 2/10\r100%|██████████| 10/10\n");
    }
}
