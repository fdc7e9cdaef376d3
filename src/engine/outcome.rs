//! What a cell returns: the `Outcome`, and the events streamed while it runs.
//!
//! Owns: the shapes every front door (CLI, MCP) reads, and the reset notice text.
//! A user's exception is data here (`status: error`), never a Rust error.

use std::path::PathBuf;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::engine::output::Truncation;

/// How a cell ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Ran to the end.
    Ok,
    /// Raised an exception; the namespace is intact.
    Error,
    /// Stopped by an abort (cancel, `--timeout`, silence watchdog, Ctrl-C).
    Aborted,
    /// The kernel process died while the cell ran; its namespace is gone.
    Died,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Error => "error",
            Status::Aborted => "aborted",
            Status::Died => "died",
        }
    }
}

/// A raised exception, tracebacks without colour codes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CellError {
    pub ename: String,
    pub evalue: String,
    pub traceback: Vec<String>,
}

/// A rich output (`display_data`, or the MIME bundle of the result).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Display {
    /// MIME type → data (base64 for binary types, as Jupyter sends them).
    pub data: Map<String, Value>,
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub metadata: Map<String, Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub display_id: Option<String>,
}

impl Display {
    /// The `text/plain` form, if the bundle has one.
    pub fn plain_text(&self) -> Option<&str> {
        self.data.get("text/plain").and_then(Value::as_str)
    }

    /// True when the bundle carries more than plain text (an image, HTML, ...).
    pub fn is_rich(&self) -> bool {
        self.data.keys().any(|mime| mime != "text/plain")
    }
}

/// Why an abort was requested.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum AbortReason {
    /// The caller cancelled (Ctrl-C, MCP cancellation).
    Cancelled,
    /// The cell's own time limit passed.
    Timeout { after_ms: u64 },
    /// The silence watchdog fired: no output for this long.
    Silent { after_ms: u64 },
    /// pi-repl is shutting down.
    Shutdown,
}

impl AbortReason {
    pub fn describe(&self) -> String {
        match self {
            AbortReason::Cancelled => "the call was cancelled".to_string(),
            AbortReason::Timeout { after_ms } => {
                format!("the cell's time limit ({} ms) passed", after_ms)
            }
            AbortReason::Silent { after_ms } => {
                format!(
                    "the cell printed nothing for {} ms (silence watchdog)",
                    after_ms
                )
            }
            AbortReason::Shutdown => "pi-repl is shutting down".to_string(),
        }
    }
}

/// What an abort did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Abort {
    #[serde(flatten)]
    pub reason: AbortReason,
    /// The cell ignored the interrupt for the whole grace period and its kernel was killed.
    pub kernel_killed: bool,
    /// Processes the cell had started that outlived the interrupt and were ended.
    pub processes_ended: usize,
}

/// A binding a revive could not bring back, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Lost {
    pub name: String,
    pub why: String,
}

/// A package the session added that the revived workspace's environment lacks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MissingPackage {
    /// `name==version`, as the install command takes it.
    pub pin: String,
    /// Bindings whose revive failed for want of it.
    pub needed_by: Vec<String>,
}

/// What a revive did about the packages the session added (issue 28).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SessionPackages {
    /// `name==version` of each one installed again before the bindings came back.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reinstalled: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<MissingPackage>,
    /// Why the missing ones were not installed: switched off, or the installer's error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_installed_because: Option<String>,
}

impl SessionPackages {
    fn lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if !self.reinstalled.is_empty() {
            lines.push(format!(
                "Packages this session had installed were missing from the environment and were \
                 reinstalled first: {}.",
                self.reinstalled.join(", ")
            ));
        }
        if !self.missing.is_empty() {
            let missing: Vec<String> = self
                .missing
                .iter()
                .map(|package| match &package.needed_by[..] {
                    [] => package.pin.clone(),
                    needed => format!("{} (needed by {})", package.pin, needed.join(", ")),
                })
                .collect();
            let pins: Vec<&str> = self.missing.iter().map(|p| p.pin.as_str()).collect();
            let because = self
                .not_installed_because
                .as_deref()
                .map(|why| format!(", not reinstalled because {why}"))
                .unwrap_or_default();
            lines.push(format!(
                "Packages this session had installed are missing from the environment{because}: \
                 {}. Install them with `%pip install {}`, then re-create the bindings that \
                 needed them.",
                missing.join("; "),
                pins.join(" ")
            ));
        }
        lines
    }
}

/// The workspace was rebuilt before this cell: why, what came back, what was lost.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Reset {
    /// Why the previous kernel is gone, in one sentence.
    pub reason: String,
    /// Whether this session keeps snapshots (an ephemeral workspace has nothing to revive).
    pub durable: bool,
    /// When the snapshot that was revived was saved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub saved_at: Option<String>,
    /// Names revived from the snapshot.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub revived: Vec<String>,
    /// Names still being revived in the background.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<String>,
    /// Names that could not be saved or revived.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub lost: Vec<Lost>,
    /// Work done after the last snapshot, which is gone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unsaved_changes: Option<String>,
    /// The session's packages the environment lacked: reinstalled or named.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub packages: Option<Box<SessionPackages>>,
}

/// Names listed in a notice before "and N more".
const LISTED_NAMES: usize = 40;

impl Reset {
    /// A reset of an ephemeral workspace (or one with nothing saved yet).
    pub fn because(reason: impl Into<String>) -> Reset {
        Reset {
            reason: reason.into(),
            ..Reset::default()
        }
    }

    /// The block that opens the first result after a reset.
    pub fn notice(&self) -> String {
        let mut lines = vec![
            "<repl_engine_reset>".to_string(),
            format!("The Python workspace was rebuilt: {}.", self.reason),
        ];
        if let Some(packages) = &self.packages {
            lines.extend(packages.lines());
        }
        if !self.revived.is_empty() {
            let when = self
                .saved_at
                .as_deref()
                .map(|t| format!(" saved at {t}"))
                .unwrap_or_default();
            lines.push(format!(
                "Revived from the snapshot{when}: {}.",
                list(&self.revived)
            ));
        }
        if !self.pending.is_empty() {
            lines.push(format!(
                "Still being revived in the background: {} (a cell that names one waits until \
                 it is loaded).",
                list(&self.pending)
            ));
        }
        if !self.lost.is_empty() {
            let lost: Vec<String> = self
                .lost
                .iter()
                .map(|l| format!("{} ({})", l.name, l.why))
                .collect();
            lines.push(format!("Lost: {}.", lost.join("; ")));
        }
        if let Some(changes) = &self.unsaved_changes {
            lines.push(format!("Not in the snapshot, so gone: {changes}."));
        }
        lines.push(if self.durable && !self.revived.is_empty() {
            "Anything not listed as revived is gone; check before relying on earlier state."
                .to_string()
        } else {
            "Everything defined before (variables, functions, imports) is gone; re-create what \
             you need before using it."
                .to_string()
        });
        lines.push("</repl_engine_reset>".to_string());
        lines.join("\n")
    }
}

fn list(names: &[String]) -> String {
    if names.len() <= LISTED_NAMES {
        return names.join(", ");
    }
    format!(
        "{} and {} more",
        names[..LISTED_NAMES].join(", "),
        names.len() - LISTED_NAMES
    )
}

/// Everything a cell produced.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    pub status: Status,
    /// This cell's number in the engine's life (1, 2, ...).
    pub cell: u64,
    pub stdout: String,
    pub stderr: String,
    /// `text/plain` of the trailing expression's value.
    pub result: Option<String>,
    /// The full MIME bundle of the value, when it has more than plain text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result_display: Option<Display>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub displays: Vec<Display>,
    /// Rich outputs beyond the per-cell limit, not kept.
    #[serde(skip_serializing_if = "is_zero")]
    pub displays_dropped: usize,
    pub error: Option<CellError>,
    pub duration_ms: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub truncated: Vec<Truncation>,
    /// Files holding output as printed where rendering it as a terminal does (progress bars
    /// redrawn in place) made it fit, so nothing was cut (`output::CappedText::raw_file`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub raw_output: Vec<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub abort: Option<Abort>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reset: Option<Reset>,
    /// What the workspace has to tell: a helper that did not load, ...
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<String>,
    /// Output earlier cells' threads printed after those cells settled (or while this one
    /// ran), labelled with the cell that started the thread; never part of `stdout`/`stderr`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub late_output: Vec<LateOutput>,
    /// Model requests the cell made (`llm_query`), when it made any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub llm: Option<crate::llm::ledger::Usage>,
    /// Printed after live-streamed stdout so a terminal ends where `stdout` ends.
    #[serde(skip)]
    pub stdout_remainder: String,
    #[serde(skip)]
    pub stderr_remainder: String,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Outcome {
    /// Files holding full output that was cut from this outcome.
    pub fn spill_files(&self) -> Vec<PathBuf> {
        self.truncated
            .iter()
            .filter_map(|t| t.full_output.clone())
            .collect()
    }
}

/// Text an earlier cell's thread printed after that cell settled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LateOutput {
    /// The cell that started the thread (0: not known, for a notice that text was lost).
    pub cell: u64,
    pub channel: Channel,
    /// Capped like a cell's channel.
    pub text: String,
}

impl LateOutput {
    /// The line that introduces this text wherever it is shown.
    pub fn heading(&self) -> String {
        if self.cell == 0 {
            return "[output from earlier cells after they finished]".to_string();
        }
        match self.channel {
            Channel::Stdout => format!("[output from cell {} after it finished]", self.cell),
            Channel::Stderr => format!("[stderr from cell {} after it finished]", self.cell),
        }
    }
}

/// Output channels a cell streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Channel {
    Stdout,
    Stderr,
}

impl Channel {
    pub fn as_str(self) -> &'static str {
        match self {
            Channel::Stdout => "stdout",
            Channel::Stderr => "stderr",
        }
    }
}

/// Something a running cell did, delivered as it happens.
#[derive(Debug, Clone, PartialEq)]
pub enum CellEvent {
    /// The cell left the queue and is running; `reset` is set when it runs in a rebuilt
    /// workspace (the same notice is in the outcome).
    Started {
        cell: u64,
        reset: Option<Reset>,
        notices: Vec<String>,
    },
    /// Text on stdout or stderr (per-line capped; stops at the channel cap).
    Output { channel: Channel, text: String },
    /// The channel passed its cap; the rest is summarised in the outcome.
    Truncating { channel: Channel },
    /// The channel's unfinished last line(s) as they look now, replacing the previous ones of
    /// that channel (a progress bar's current state; empty when none is left). Later text may
    /// still rewrite them; once final they arrive as `Output`.
    Unfinished { channel: Channel, text: String },
    /// `clear_output()` took effect: what was shown of the cell so far is gone, as in Jupyter.
    Cleared,
    /// A rich output.
    Display(Display),
}
