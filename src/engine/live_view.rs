//! A running cell's output as the engine keeps it, published for whoever shows it while it runs.
//!
//! Owns: one cell's live state behind a lock: the final text of stdout and stderr so far (the
//! very text the engine's capped streams keep, `output::CappedStream` writes into it, so no
//! reader keeps a copy), the unfinished last lines (a progress bar's state now), which channels
//! went over their cap, the rich outputs' kinds, whether and how it started, and the order in
//! which all of that happened since the last `clear_output()`, as ranges of the text (no text of
//! its own). Readers hold a [`Cursor`] each and are told of changes through a `watch`.
//! Does not own: caps (`output`), what a reader makes of it (the MCP server's progress and
//! pending answers, `mcp::cell_book`), the outcome (a cell's end is the `Outcome`).
//!
//! Invariants:
//! - Memory is what the engine keeps anyway: the text is bounded by the channel caps, the order
//!   by one small entry per piece of text under the caps, per rich output and per cap reached;
//!   a progress bar's updates replace each other.
//! - `clear_output()` starts the view afresh (a new generation); a reader behind it is told it
//!   was cleared, then reads the new text.
//! - A reader never sees text that is not final: the unfinished lines are apart.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use tokio::sync::watch;

use crate::engine::outcome::{Channel, Reset};

/// One cell's live view. Cheap to clone: clones share it.
#[derive(Clone)]
pub struct LiveView {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<LiveState>,
    changed: watch::Sender<u64>,
}

/// How a cell started, as the view tells it.
#[derive(Debug, Clone, Default)]
pub struct Start {
    pub at: Option<Instant>,
    /// The workspace was rebuilt before the cell ran.
    pub reset: Option<Reset>,
}

#[derive(Default)]
struct LiveState {
    start: Start,
    /// The final text of each channel since the last clear (stdout, stderr), up to its cap.
    text: [String; 2],
    unfinished: [String; 2],
    /// Bumped whenever an unfinished line changes.
    unfinished_version: u64,
    /// `unfinished_version` as the last clear left it (the lines empty): a reader told of
    /// the clear has nothing older to draw.
    unfinished_at_clear: u64,
    /// A channel went over its cap: what follows is in the outcome, not here.
    over_cap: [bool; 2],
    rich: usize,
    /// Clears so far; the order below is this generation's.
    generation: u64,
    order: Vec<Piece>,
}

/// One thing that happened, in order; text by its range in its channel.
#[derive(Debug, Clone)]
enum Piece {
    Text { channel: Channel, end: usize },
    OverCap(Channel),
    Rich(Arc<str>),
}

/// A reader's place in a view.
#[derive(Debug, Clone, Default)]
pub struct Cursor {
    generation: u64,
    /// Pieces of this generation already read.
    pieces: usize,
    /// Where each channel's text read so far ends.
    read: [usize; 2],
    unfinished_version: u64,
}

/// What a reader is told, in order.
#[derive(Debug, PartialEq, Eq)]
pub enum Seen<'a> {
    /// `clear_output()` took effect since the reader's last look: what was shown is gone.
    Cleared,
    Text {
        channel: Channel,
        text: &'a str,
    },
    /// The channel went over its cap here; its end comes with the outcome.
    OverCap(Channel),
    /// A rich output of these MIME types.
    Rich(&'a str),
    /// The unfinished lines changed since the reader's last look; they are now these
    /// (stdout's, stderr's; empty: none).
    Unfinished([&'a str; 2]),
}

fn index(channel: Channel) -> usize {
    match channel {
        Channel::Stdout => 0,
        Channel::Stderr => 1,
    }
}

impl Default for LiveView {
    fn default() -> Self {
        LiveView {
            shared: Arc::new(Shared {
                state: Mutex::new(LiveState::default()),
                changed: watch::Sender::new(0),
            }),
        }
    }
}

impl LiveView {
    fn lock(&self) -> MutexGuard<'_, LiveState> {
        // A panic while holding the lock leaves plain text behind; keep serving it.
        self.shared
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn changed(&self) {
        self.shared.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Changes of the view, for a reader to wait on.
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.shared.changed.subscribe()
    }

    // ---- written by the engine ----

    /// The cell left the queue and runs now.
    pub fn start(&self, reset: Option<Reset>) {
        self.lock().start = Start {
            at: Some(Instant::now()),
            reset,
        };
        self.changed();
    }

    /// Final text of `channel`, under its cap.
    pub fn push_text(&self, channel: Channel, text: &str) {
        if text.is_empty() {
            return;
        }
        {
            let mut state = self.lock();
            let kept = &mut state.text[index(channel)];
            kept.push_str(text);
            let end = kept.len();
            state.order.push(Piece::Text { channel, end });
        }
        self.changed();
    }

    /// `channel` went over its cap.
    pub fn over_cap(&self, channel: Channel) {
        {
            let mut state = self.lock();
            state.over_cap[index(channel)] = true;
            state.order.push(Piece::OverCap(channel));
        }
        self.changed();
    }

    /// The unfinished lines of `channel` are now `text` (empty: none).
    pub fn unfinished(&self, channel: Channel, text: &str) {
        {
            let mut state = self.lock();
            let slot = &mut state.unfinished[index(channel)];
            slot.clear();
            slot.push_str(text);
            state.unfinished_version += 1;
        }
        self.changed();
    }

    /// A rich output of these MIME types (`image/png, text/plain`).
    pub fn rich(&self, kinds: &str) {
        {
            let mut state = self.lock();
            state.rich += 1;
            state.order.push(Piece::Rich(Arc::from(kinds)));
        }
        self.changed();
    }

    /// `clear_output()` took effect: everything shown so far is gone.
    pub fn clear(&self) {
        {
            let mut state = self.lock();
            state.text = Default::default();
            state.unfinished = Default::default();
            state.unfinished_version += 1;
            state.unfinished_at_clear = state.unfinished_version;
            state.over_cap = [false; 2];
            state.rich = 0;
            state.order.clear();
            state.generation += 1;
        }
        self.changed();
    }

    /// The cell's streams ended: their unfinished lines became final text (or nothing).
    pub fn streams_ended(&self) {
        {
            let mut state = self.lock();
            if state.unfinished.iter().all(String::is_empty) {
                return;
            }
            state.unfinished = Default::default();
            state.unfinished_version += 1;
        }
        self.changed();
    }

    /// Runs `read` over a channel's text (the capped stream's own reads).
    pub fn with_text<R>(&self, channel: Channel, read: impl FnOnce(&str) -> R) -> R {
        read(&self.lock().text[index(channel)])
    }

    // ---- read by whoever shows the cell ----

    /// How the cell started, if it has.
    pub fn started(&self) -> Option<Start> {
        let state = self.lock();
        state.start.at.is_some().then(|| state.start.clone())
    }

    /// Rich outputs since the last clear.
    pub fn rich_count(&self) -> usize {
        self.lock().rich
    }

    /// Whether `channel` went over its cap (its live text is then not the start of the
    /// outcome's, which keeps a head and a tail).
    pub fn went_over_cap(&self, channel: Channel) -> bool {
        self.lock().over_cap[index(channel)]
    }

    /// A cursor at the start of the view as it is now (what a reader that has shown nothing
    /// has to read), or at its end (`from_start` false: only what comes next).
    pub fn cursor(&self, from_start: bool) -> Cursor {
        if from_start {
            return Cursor::default();
        }
        let state = self.lock();
        Cursor {
            generation: state.generation,
            pieces: state.order.len(),
            read: [state.text[0].len(), state.text[1].len()],
            unfinished_version: state.unfinished_version,
        }
    }

    /// Hands `seen` everything after `cursor`, in order, and moves the cursor on. Unfinished
    /// lines come last, once, when they changed and `redraw` allows (a reader throttles
    /// redraws of a progress bar; a line that ended, empty now, is always told).
    pub fn read(&self, cursor: &mut Cursor, redraw: bool, mut seen: impl FnMut(Seen<'_>)) {
        let state = self.lock();
        if cursor.generation != state.generation {
            seen(Seen::Cleared);
            *cursor = Cursor {
                generation: state.generation,
                unfinished_version: state.unfinished_at_clear,
                ..Cursor::default()
            };
        }
        for piece in state.order.iter().skip(cursor.pieces) {
            match piece {
                Piece::Text { channel, end } => {
                    let at = index(*channel);
                    let text = state.text[at]
                        .get(cursor.read[at]..*end)
                        .unwrap_or_default();
                    cursor.read[at] = *end;
                    seen(Seen::Text {
                        channel: *channel,
                        text,
                    });
                }
                Piece::OverCap(channel) => seen(Seen::OverCap(*channel)),
                Piece::Rich(kinds) => seen(Seen::Rich(kinds)),
            }
        }
        cursor.pieces = state.order.len();
        if cursor.unfinished_version != state.unfinished_version {
            let ended = state.unfinished.iter().all(String::is_empty);
            if redraw || ended {
                cursor.unfinished_version = state.unfinished_version;
                seen(Seen::Unfinished([
                    state.unfinished[0].as_str(),
                    state.unfinished[1].as_str(),
                ]));
            }
        }
    }

    /// The text of each channel after the cursor, with the unfinished lines as they are now
    /// (not counted as read: their final state comes later); moves the cursor past the final
    /// text. What a look at a running cell shows.
    pub fn take_new(&self, cursor: &mut Cursor) -> [String; 2] {
        let state = self.lock();
        if cursor.generation != state.generation {
            *cursor = Cursor {
                generation: state.generation,
                ..Cursor::default()
            };
        }
        let new = [0, 1].map(|at| {
            let text = &state.text[at];
            format!(
                "{}{}",
                text.get(cursor.read[at]..).unwrap_or_default(),
                state.unfinished[at]
            )
        });
        cursor.read = [state.text[0].len(), state.text[1].len()];
        cursor.pieces = state.order.len();
        new
    }

    /// Everything so far, each channel's final text then its unfinished lines.
    pub fn so_far(&self) -> [String; 2] {
        self.take_new(&mut Cursor::default())
    }
}

impl Cursor {
    /// How much of `channel`'s final text the reader has had, in bytes of this generation's
    /// text (0 after a clear it has not read yet).
    pub fn read_of(&self, view: &LiveView, channel: Channel) -> usize {
        if view.lock().generation != self.generation {
            return 0;
        }
        self.read[index(channel)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn everything(view: &LiveView, cursor: &mut Cursor, redraw: bool) -> Vec<String> {
        let mut told = Vec::new();
        view.read(cursor, redraw, |seen| told.push(format!("{seen:?}")));
        told
    }

    #[test]
    fn a_reader_reads_each_piece_once_and_in_order() {
        let view = LiveView::default();
        let mut cursor = view.cursor(true);
        view.push_text(Channel::Stdout, "a\n");
        view.push_text(Channel::Stderr, "warn\n");
        view.push_text(Channel::Stdout, "b\n");
        assert_eq!(
            everything(&view, &mut cursor, true),
            vec![
                r#"Text { channel: Stdout, text: "a\n" }"#,
                r#"Text { channel: Stderr, text: "warn\n" }"#,
                r#"Text { channel: Stdout, text: "b\n" }"#,
            ]
        );
        assert!(everything(&view, &mut cursor, true).is_empty());
        view.rich("image/png, text/plain");
        view.over_cap(Channel::Stdout);
        assert_eq!(
            everything(&view, &mut cursor, true),
            vec![r#"Rich("image/png, text/plain")"#, "OverCap(Stdout)"]
        );
        assert!(view.went_over_cap(Channel::Stdout));
        assert_eq!(view.rich_count(), 1);
    }

    #[test]
    fn a_late_reader_starts_where_the_view_is() {
        let view = LiveView::default();
        view.push_text(Channel::Stdout, "before\n");
        let mut late = view.cursor(false);
        view.push_text(Channel::Stdout, "after\n");
        assert_eq!(
            everything(&view, &mut late, true),
            vec![r#"Text { channel: Stdout, text: "after\n" }"#]
        );
        assert_eq!(
            late.read_of(&view, Channel::Stdout),
            "before\nafter\n".len()
        );
    }

    #[test]
    fn a_bar_is_told_once_per_look_and_its_end_whatever_the_throttle() {
        let view = LiveView::default();
        let mut cursor = view.cursor(true);
        view.unfinished(Channel::Stderr, " 1/3");
        view.unfinished(Channel::Stderr, " 2/3");
        assert_eq!(
            everything(&view, &mut cursor, true),
            vec![r#"Unfinished(["", " 2/3"])"#]
        );
        view.unfinished(Channel::Stderr, " 3/3");
        assert!(
            everything(&view, &mut cursor, false).is_empty(),
            "a throttled redraw waits"
        );
        view.push_text(Channel::Stderr, " 3/3\n");
        view.unfinished(Channel::Stderr, "");
        assert_eq!(
            everything(&view, &mut cursor, false),
            vec![
                r#"Text { channel: Stderr, text: " 3/3\n" }"#,
                r#"Unfinished(["", ""])"#
            ]
        );
    }

    #[test]
    fn a_clear_starts_a_new_generation_and_the_reader_is_told() {
        let view = LiveView::default();
        let mut cursor = view.cursor(true);
        view.push_text(Channel::Stdout, "old\n");
        assert_eq!(everything(&view, &mut cursor, true).len(), 1);
        view.clear();
        view.push_text(Channel::Stdout, "new\n");
        assert_eq!(cursor.read_of(&view, Channel::Stdout), 0);
        assert_eq!(
            everything(&view, &mut cursor, true),
            vec!["Cleared", r#"Text { channel: Stdout, text: "new\n" }"#]
        );
        assert_eq!(view.so_far(), ["new\n".to_string(), String::new()]);
    }

    #[test]
    fn a_look_takes_the_new_text_and_shows_the_bar_without_counting_it() {
        let view = LiveView::default();
        let mut cursor = view.cursor(true);
        view.push_text(Channel::Stdout, "one\n");
        view.unfinished(Channel::Stdout, "50%");
        assert_eq!(view.take_new(&mut cursor)[0], "one\n50%");
        view.push_text(Channel::Stdout, "two\n");
        view.unfinished(Channel::Stdout, "");
        assert_eq!(view.take_new(&mut cursor)[0], "two\n");
    }
}
