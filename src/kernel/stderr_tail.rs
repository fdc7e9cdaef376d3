//! The last lines a local kernel wrote to its stderr (`StderrTail`): drained from its pipe on a
//! task of their own, kept for error messages, and asked for since a mark (what a cell's
//! kernel death printed).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::io::AsyncBufReadExt;

/// Lines of the kernel's stderr kept for error messages.
const STDERR_LINES: usize = 40;

/// Longest stderr line kept, in characters.
const STDERR_LINE_CHARS: usize = 400;

/// The last lines a kernel wrote to its stderr.
#[derive(Debug, Clone, Default)]
pub struct StderrTail(Arc<Mutex<TailLines>>);

#[derive(Debug, Default)]
struct TailLines {
    lines: VecDeque<String>,
    /// Lines ever pushed, so a caller can ask for the lines since a mark.
    total: u64,
}

/// A position in a kernel's stderr, from `Kernel::stderr_mark`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StderrMark(u64);

impl StderrTail {
    pub(super) fn push(&self, line: &str) {
        let line: String = line.chars().take(STDERR_LINE_CHARS).collect();
        if let Ok(mut tail) = self.0.lock() {
            if tail.lines.len() == STDERR_LINES {
                tail.lines.pop_front();
            }
            tail.lines.push_back(line);
            tail.total += 1;
        }
    }

    pub fn lines(&self) -> Vec<String> {
        self.0
            .lock()
            .map(|tail| tail.lines.iter().cloned().collect())
            .unwrap_or_default()
    }

    pub(super) fn mark(&self) -> StderrMark {
        StderrMark(self.0.lock().map(|tail| tail.total).unwrap_or(0))
    }

    /// The kept lines written after `mark`.
    pub(super) fn since(&self, mark: StderrMark) -> Vec<String> {
        self.0
            .lock()
            .map(|tail| {
                let new = tail.total.saturating_sub(mark.0) as usize;
                let skip = tail.lines.len().saturating_sub(new);
                tail.lines.iter().skip(skip).cloned().collect()
            })
            .unwrap_or_default()
    }
}

pub(super) async fn drain_stderr(pipe: tokio::process::ChildStderr, tail: StderrTail) {
    let mut lines = tokio::io::BufReader::new(pipe).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::debug!(target: "pi_repl::kernel_stderr", "{line}");
        tail.push(&line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_the_last_lines_cut_to_length_and_answers_since_a_mark() {
        let tail = StderrTail::default();
        tail.push("first");
        let mark = tail.mark();
        assert_eq!(tail.since(mark), Vec::<String>::new());
        tail.push(&"x".repeat(STDERR_LINE_CHARS + 50));
        tail.push("third");
        let since = tail.since(mark);
        assert_eq!(since.len(), 2);
        assert_eq!(since[0].chars().count(), STDERR_LINE_CHARS);
        assert_eq!(since[1], "third");
        for n in 0..STDERR_LINES + 5 {
            tail.push(&format!("line {n}"));
        }
        let lines = tail.lines();
        assert_eq!(lines.len(), STDERR_LINES);
        assert_eq!(lines.last().map(String::as_str), Some("line 44"));
        // More lines than are kept were written since the mark: what is kept is all there is.
        assert_eq!(tail.since(mark).len(), STDERR_LINES);
    }
}
