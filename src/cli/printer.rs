//! How `pi-repl exec` shows a cell to a person: live output as it comes, then the end.
//!
//! Cell stdout and the result go to stdout; stderr, tracebacks and pi-repl's notes to stderr.
//! Late output of an earlier cell's threads comes first, each piece under a heading on stderr
//! (`[output from cell 3 after it finished]`) and its text on its own channel.
//! A progress bar (a channel's unfinished line) is drawn in place on stderr when stderr is a
//! terminal, and erased before the final text; its last state is printed with the rest at the
//! end whatever stdout is.

use std::io::{IsTerminal, Write};

use super::stdout;
use crate::engine::outcome::{CellEvent, Channel, Display, Outcome, Status};

/// Prints one cell's live events and its outcome.
#[derive(Default)]
pub struct Printer {
    /// The unfinished lines drawn on stderr (a terminal), if any.
    live: crate::terminal_text::LiveDraw,
}

impl Printer {
    /// Erases the drawn unfinished lines (before other text).
    fn erase(&mut self) {
        write_to(Channel::Stderr, &self.live.erase());
    }

    /// Draws the unfinished lines again (after other text).
    fn draw(&mut self) {
        write_to(Channel::Stderr, &self.live.draw());
    }

    pub fn event(&mut self, event: CellEvent) {
        match event {
            CellEvent::Started { reset, notices, .. } => {
                if let Some(reset) = reset {
                    crate::stderr_line!("{}", reset.notice());
                }
                for notice in notices {
                    crate::stderr_line!("pi-repl: {notice}");
                }
            }
            CellEvent::Output { channel, text } => {
                self.erase();
                write_to(channel, &text);
                self.draw();
            }
            CellEvent::Truncating { channel } => {
                self.erase();
                write_to(
                    channel,
                    &format!(
                        "\n[pi-repl: {} is over its limit; the end is shown when the cell finishes]\n",
                        channel.as_str()
                    ),
                );
                self.draw();
            }
            CellEvent::Unfinished { channel, text } => {
                if std::io::stderr().is_terminal() {
                    let drawing = self.live.unfinished(channel == Channel::Stderr, &text);
                    write_to(Channel::Stderr, &drawing);
                }
            }
            // Printed text cannot be taken back from a terminal; the result has what is left.
            CellEvent::Cleared => {
                self.erase();
                self.live = Default::default();
            }
            CellEvent::Display(display) => {
                self.erase();
                stdout::line(describe_display(&display));
                self.draw();
            }
        }
    }

    pub fn outcome(&mut self, outcome: &Outcome) {
        self.erase();
        for late in &outcome.late_output {
            write_to(Channel::Stderr, &format!("{}\n", late.heading()));
            write_to(late.channel, &late.text);
            if !late.text.ends_with('\n') {
                write_to(late.channel, "\n");
            }
        }
        write_to(Channel::Stdout, &outcome.stdout_remainder);
        write_to(Channel::Stderr, &outcome.stderr_remainder);
        if let Some(result) = &outcome.result {
            stdout::line(result);
        }
        if outcome.displays_dropped > 0 {
            crate::stderr_line!(
                "[pi-repl: {} more rich outputs were not kept]",
                outcome.displays_dropped
            );
        }
        if let Some(abort) = &outcome.abort {
            crate::stderr_line!("[aborted: {}]", abort.reason.describe());
        }
        if let Some(error) = &outcome.error {
            match outcome.status {
                Status::Died => {
                    crate::stderr_line!("error: {}: {}", error.ename, error.evalue);
                    if !error.traceback.is_empty() {
                        crate::stderr_line!("kernel stderr:\n  {}", error.traceback.join("\n  "));
                    }
                }
                _ if error.traceback.is_empty() => {
                    crate::stderr_line!("{}: {}", error.ename, error.evalue)
                }
                _ => crate::stderr_line!("{}", error.traceback.join("\n")),
            }
        }
        // Nothing useful can be done if the terminal is gone.
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
    }
}

fn write_to(channel: Channel, text: &str) {
    if text.is_empty() {
        return;
    }
    match channel {
        // A closed pipe (`| head`) marks stdout closed; `exec` then stops.
        Channel::Stdout => stdout::write(text),
        Channel::Stderr => {
            let mut err = std::io::stderr().lock();
            // Nothing useful can be done if the terminal is gone.
            let _ = err.write_all(text.as_bytes()).and_then(|()| err.flush());
        }
    }
}

/// A rich output as one line: its text form, or what kind of output it is.
fn describe_display(display: &Display) -> String {
    let rich: Vec<&str> = display
        .data
        .keys()
        .map(String::as_str)
        .filter(|mime| *mime != "text/plain")
        .collect();
    match (display.plain_text(), rich.is_empty()) {
        (Some(text), true) => text.to_string(),
        (Some(text), false) => format!("{text} [{}]", rich.join(", ")),
        (None, _) => format!("[{} output]", rich.join(", ")),
    }
}
