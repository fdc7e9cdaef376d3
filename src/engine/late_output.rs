//! Output a cell's threads print after the cell settled: kept, capped, and handed to the next
//! outcome, labelled with the cell that started the thread.
//!
//! Owns: which user cell a message's parent `msg_id` names (the last `RECENT_CELLS` cells), the
//! caps on what is kept until the next outcome, and turning it into `LateOutput` entries.
//! Does not own: labelling a thread's output with its starting cell (the kernel module's
//! `thread_output` does that) or showing it (front doors render `Outcome::late_output`).
//!
//! Invariants:
//! - Late output never joins the running cell's own stdout or stderr: it is a separate list.
//! - Each (cell, channel) is capped like a cell's channel (`OutputLimits`, spill file); at most
//!   `MAX_STREAMS` of them wait at once, and text beyond that is counted and announced.
//! - Output of requests that are not user cells (host calls) is dropped, as before.

use std::collections::VecDeque;

use jupyter_protocol::{JupyterMessage, JupyterMessageContent, Stdio};

use crate::engine::outcome::{Channel, LateOutput};
use crate::engine::output::{CappedStream, OutputLimits, SpillTarget, Truncation};

/// User cells whose `msg_id` is remembered (about 50 bytes each).
pub const RECENT_CELLS: usize = 1024;

/// (cell, channel) pairs waiting for the next outcome at once.
pub const MAX_STREAMS: usize = 16;

/// Late output waiting for the next outcome.
pub struct LateOutputs {
    limits: OutputLimits,
    /// Where cut output is spilled: a directory and a file-name prefix.
    spill: Option<(std::path::PathBuf, String)>,
    cells: VecDeque<(String, u64)>,
    waiting: Vec<(u64, Channel, CappedStream)>,
    /// Characters dropped because `MAX_STREAMS` streams were already waiting (or the kernel
    /// had no room to set them aside during a host call).
    dropped_chars: usize,
    deliveries: u64,
}

impl LateOutputs {
    pub fn new(limits: OutputLimits, spill: Option<(std::path::PathBuf, String)>) -> LateOutputs {
        LateOutputs {
            limits,
            spill,
            cells: VecDeque::new(),
            waiting: Vec::new(),
            dropped_chars: 0,
            deliveries: 0,
        }
    }

    /// Remembers that the request `msg_id` is user cell `cell`.
    pub fn remember(&mut self, msg_id: &str, cell: u64) {
        if self.cells.len() == RECENT_CELLS {
            self.cells.pop_front();
        }
        self.cells.push_back((msg_id.to_string(), cell));
    }

    fn cell_of(&self, message: &JupyterMessage) -> Option<u64> {
        let parent = message.parent_header.as_ref()?;
        self.cells
            .iter()
            .rev()
            .find(|(id, _)| *id == parent.msg_id)
            .map(|(_, cell)| *cell)
    }

    /// Takes an IOPub message no running request owns. Keeps it when it is stream output of
    /// a remembered user cell; returns whether it was kept.
    pub fn take(&mut self, message: &JupyterMessage) -> bool {
        let JupyterMessageContent::StreamContent(stream) = &message.content else {
            return false;
        };
        let Some(cell) = self.cell_of(message) else {
            return false;
        };
        let channel = match stream.name {
            Stdio::Stdout => Channel::Stdout,
            Stdio::Stderr => Channel::Stderr,
        };
        self.push(cell, channel, &stream.text);
        true
    }

    fn push(&mut self, cell: u64, channel: Channel, text: &str) {
        if let Some((_, _, capped)) = self
            .waiting
            .iter_mut()
            .find(|(c, ch, _)| *c == cell && *ch == channel)
        {
            capped.push(text);
            return;
        }
        if self.waiting.len() >= MAX_STREAMS {
            self.dropped_chars += text.chars().count();
            return;
        }
        let target = self.spill.as_ref().map(|(dir, prefix)| SpillTarget {
            dir: dir.clone(),
            stem: format!("{prefix}-cell{cell}-late{}", self.deliveries + 1),
        });
        let mut capped = CappedStream::new(channel.as_str(), self.limits, target);
        capped.push(text);
        self.waiting.push((cell, channel, capped));
    }

    /// Counts late characters that were lost before they got here; the next delivery says so.
    pub fn not_kept(&mut self, chars: usize) {
        self.dropped_chars += chars;
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty() && self.dropped_chars == 0
    }

    /// Everything kept since the last delivery, in arrival order of (cell, channel), and how
    /// each was cut.
    pub fn deliver(&mut self) -> (Vec<LateOutput>, Vec<Truncation>) {
        if self.is_empty() {
            return (Vec::new(), Vec::new());
        }
        self.deliveries += 1;
        let mut late = Vec::new();
        let mut cuts = Vec::new();
        for (cell, channel, capped) in self.waiting.drain(..) {
            let done = capped.finish();
            if let Some(mut cut) = done.truncation {
                cut.channel = format!("late {} of cell {cell}", channel.as_str());
                cuts.push(cut);
            }
            late.push(LateOutput {
                cell,
                channel,
                text: done.text,
            });
        }
        let dropped = std::mem::take(&mut self.dropped_chars);
        if dropped > 0 {
            let notice =
                format!("[pi-repl: {dropped} more characters of late output were not kept]\n");
            match late.last_mut() {
                Some(last) => {
                    if !last.text.ends_with('\n') {
                        last.text.push('\n');
                    }
                    last.text.push_str(&notice);
                }
                // Only lost text: say so under a cell-less heading.
                None => late.push(LateOutput {
                    cell: 0,
                    channel: Channel::Stderr,
                    text: notice,
                }),
            }
        }
        (late, cuts)
    }
}

#[cfg(test)]
mod tests {
    //! Recorded messages, no kernel needed.
    use super::*;
    use jupyter_protocol::{ExecuteRequest, Status, StreamContent};

    fn request() -> JupyterMessage {
        ExecuteRequest::new("x".into()).into()
    }

    #[test]
    fn stream_output_of_a_remembered_cell_is_kept_per_cell_and_channel() {
        let first = request();
        let second = request();
        let mut late = LateOutputs::new(OutputLimits::default(), None);
        late.remember(&first.header.msg_id, 3);
        late.remember(&second.header.msg_id, 4);
        assert!(late.take(&StreamContent::stdout("a\n").as_child_of(&first)));
        assert!(late.take(&StreamContent::stderr("warn\n").as_child_of(&first)));
        assert!(late.take(&StreamContent::stdout("b\n").as_child_of(&second)));
        assert!(late.take(&StreamContent::stdout("c\n").as_child_of(&first)));
        let (kept, cuts) = late.deliver();
        assert!(cuts.is_empty());
        let summary: Vec<(u64, Channel, &str)> = kept
            .iter()
            .map(|l| (l.cell, l.channel, l.text.as_str()))
            .collect();
        assert_eq!(
            summary,
            vec![
                (3, Channel::Stdout, "a\nc\n"),
                (3, Channel::Stderr, "warn\n"),
                (4, Channel::Stdout, "b\n"),
            ]
        );
        assert!(late.deliver().0.is_empty(), "delivered once");
    }

    #[test]
    fn output_of_unknown_requests_and_other_messages_is_not_kept() {
        let cell = request();
        let host_call = request();
        let mut late = LateOutputs::new(OutputLimits::default(), None);
        late.remember(&cell.header.msg_id, 1);
        assert!(!late.take(&StreamContent::stdout("host\n").as_child_of(&host_call)));
        assert!(!late.take(&Status::idle().as_child_of(&cell)));
        assert!(late.is_empty());
    }

    #[test]
    fn late_output_is_capped_and_the_cut_announced() {
        let cell = request();
        let limits = OutputLimits {
            max_chars: 100,
            max_line_chars: 4096,
        };
        let mut late = LateOutputs::new(limits, None);
        late.remember(&cell.header.msg_id, 2);
        for i in 0..100 {
            late.take(&StreamContent::stdout(&format!("line {i}\n")).as_child_of(&cell));
        }
        let (kept, cuts) = late.deliver();
        assert!(kept[0].text.starts_with("line 0\n"));
        assert!(kept[0].text.ends_with("line 99\n"));
        assert!(kept[0].text.chars().count() < 400);
        assert_eq!(cuts.len(), 1);
        assert_eq!(cuts[0].channel, "late stdout of cell 2");
    }

    #[test]
    fn text_lost_before_it_arrived_is_announced_even_alone() {
        let mut late = LateOutputs::new(OutputLimits::default(), None);
        late.not_kept(12);
        let (kept, _) = late.deliver();
        assert_eq!(kept.len(), 1);
        assert_eq!(
            kept[0].heading(),
            "[output from earlier cells after they finished]"
        );
        assert_eq!(
            kept[0].text,
            "[pi-repl: 12 more characters of late output were not kept]\n"
        );
    }

    #[test]
    fn streams_beyond_the_limit_are_counted_and_announced() {
        let mut late = LateOutputs::new(OutputLimits::default(), None);
        let requests: Vec<JupyterMessage> = (0..=MAX_STREAMS).map(|_| request()).collect();
        for (i, r) in requests.iter().enumerate() {
            late.remember(&r.header.msg_id, i as u64 + 1);
            late.take(&StreamContent::stdout("12345").as_child_of(r));
        }
        let (kept, _) = late.deliver();
        assert_eq!(kept.len(), MAX_STREAMS);
        assert!(
            kept.last()
                .unwrap()
                .text
                .ends_with("[pi-repl: 5 more characters of late output were not kept]\n")
        );
    }
}
