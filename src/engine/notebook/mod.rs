//! The session as a notebook for people: an nbformat 4.5 `.ipynb` the engine rewrites after
//! every cell ([docs/notebook.md](../../docs/notebook.md)).
//!
//! Owns: the notebook document (kernelspec metadata, code cells with their source, execution
//! count and outputs, markdown cells for resets and sub-agents), marking cells that did not end
//! well (aborted, cancelled before they ran, lost to a dead kernel, never run), and writing the
//! file atomically (temp file, rename: a reader sees the last whole notebook). A notebook
//! already at the path (the same durable session started before) is continued.
//! Does not own: which messages belong to a cell (the engine routes them) nor what the model
//! sees; `outputs` turns one cell's messages into nbformat outputs.
//!
//! Invariants:
//! - After every cell the file is a whole nbformat 4.5 notebook (cell ids unique, `^[a-zA-Z0-9-_]+$`).
//! - Every cell the engine was given is in it, in the order the engine took them.
//! - Images are kept as the kernel sent them (original size); streams are capped at
//!   `outputs::NOTEBOOK_OUTPUT_CHARS`, the cut naming the file that holds the whole.

pub mod export;
pub mod outputs;

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

pub use outputs::CellOutputs;

use crate::engine::outcome::{Outcome, Status};

/// The default file name of a durable session's notebook, in the session's directory.
pub const SESSION_NOTEBOOK: &str = "notebook.ipynb";

/// Which kernel the notebook says it ran on (what a viewer or nbclient starts to re-run it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelInfo {
    pub name: String,
    pub display_name: String,
    pub language: String,
}

impl Default for KernelInfo {
    fn default() -> Self {
        KernelInfo {
            name: "python3".into(),
            display_name: "Python 3 (ipykernel)".into(),
            language: "python".into(),
        }
    }
}

/// A sub-agent a cell started, linked from the parent's notebook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentLink {
    pub id: String,
    pub task: String,
    /// The child's own notebook.
    pub notebook: PathBuf,
}

/// The live notebook of one engine.
pub struct Notebook {
    path: PathBuf,
    /// Each cell as it appears in the file (pretty-printed, indented for the `cells` array):
    /// serialized once, when it is added, so a rewrite costs a copy, not a re-encoding.
    cells: Vec<String>,
    metadata: Value,
}

impl Notebook {
    /// The notebook at `path`: the one there continued when it is a notebook, else a new one
    /// (an unreadable file is moved aside to `<path>.unreadable-<unix time>`, never overwritten).
    pub fn open(path: &Path, kernel: &KernelInfo) -> Notebook {
        let metadata = json!({
            "kernelspec": {
                "name": kernel.name,
                "display_name": kernel.display_name,
                "language": kernel.language,
            },
            "language_info": {"name": kernel.language},
            "pi_repl": {"version": env!("CARGO_PKG_VERSION")},
        });
        let cells = match std::fs::read(path) {
            Ok(bytes) => match read_cells(&bytes) {
                Some(cells) => cells.iter().map(render_cell).collect(),
                None => {
                    set_aside(path);
                    Vec::new()
                }
            },
            Err(_) => Vec::new(),
        };
        Notebook {
            path: path.to_path_buf(),
            cells,
            metadata,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Adds a cell that ran (or was meant to): the reset notice before it, the code cell with
    /// its outputs and how it ended, and a link to each sub-agent it started.
    pub fn record(
        &mut self,
        code: &str,
        outcome: &Outcome,
        outputs: Option<CellOutputs>,
        agents: &[AgentLink],
    ) {
        if let Some(reset) = &outcome.reset {
            let notice = reset.notice();
            let body: Vec<&str> = notice
                .lines()
                .filter(|line| !line.starts_with("<repl_engine_reset") && !line.starts_with("</"))
                .collect();
            self.markdown(
                "reset",
                format!(
                    "**pi-repl: the workspace was rebuilt before cell {}.**\n\n{}",
                    outcome.cell,
                    body.join("\n\n")
                ),
                json!({"pi_repl": {"kind": "reset"}}),
            );
        }
        let (mut values, spilled) = match outputs {
            Some(outputs) => outputs.finish(),
            None => (Vec::new(), Vec::new()),
        };
        for late in &outcome.late_output {
            values.push(json!({
                "output_type": "stream",
                "name": late.channel.as_str(),
                "text": format!("{}\n{}", late.heading(), late.text),
            }));
        }
        if let Some(note) = ending_note(outcome) {
            values.push(json!({"output_type": "stream", "name": "stderr", "text": note}));
        }
        let mut about = json!({
            "cell": outcome.cell,
            "status": outcome.status.as_str(),
            "duration_ms": outcome.duration_ms,
        });
        if let Some(abort) = &outcome.abort {
            about["abort"] = json!(abort);
        }
        if !outcome.notices.is_empty() {
            about["notices"] = json!(outcome.notices);
        }
        if !spilled.is_empty() {
            about["full_outputs"] = json!(spilled);
        }
        let ran = outcome.duration_ms > 0 || outcome.status != Status::Aborted;
        self.code(code, ran.then_some(outcome.cell), values, about);
        for agent in agents {
            let task = agent.task.lines().next().unwrap_or_default();
            self.markdown(
                "agent",
                format!(
                    "**Sub-agent `{}`**, started by cell {}: {}\n\nIts notebook: [{}]({})",
                    agent.id,
                    outcome.cell,
                    task,
                    agent.notebook.display(),
                    link_target(&self.path, &agent.notebook),
                ),
                json!({"pi_repl": {"kind": "agent", "id": agent.id, "notebook": agent.notebook}}),
            );
        }
    }

    /// Adds a cell the engine could not run at all (its kernel could not start, ...).
    pub fn record_not_run(&mut self, number: u64, code: &str, why: &str) {
        let note = format!("[pi-repl: this cell did not run: {why}]\n");
        self.code(
            code,
            None,
            vec![json!({"output_type": "stream", "name": "stderr", "text": note})],
            json!({"cell": number, "status": "not_run", "why": why}),
        );
    }

    fn code(&mut self, code: &str, count: Option<u64>, outputs: Vec<Value>, about: Value) {
        let id = self.next_id("cell");
        self.cells.push(render_cell(&json!({
            "cell_type": "code",
            "id": id,
            "metadata": {"pi_repl": about},
            "execution_count": count,
            "source": code,
            "outputs": outputs,
        })));
    }

    fn markdown(&mut self, kind: &str, source: String, metadata: Value) {
        let id = self.next_id(kind);
        self.cells.push(render_cell(&json!({
            "cell_type": "markdown",
            "id": id,
            "metadata": metadata,
            "source": source,
        })));
    }

    /// An id unique in this notebook: its kind and its position.
    fn next_id(&self, kind: &str) -> String {
        format!("{kind}-{}", self.cells.len() + 1)
    }

    /// The whole notebook as nbformat writes it (one-space indent).
    pub fn to_bytes(&self) -> Vec<u8> {
        let size: usize = self.cells.iter().map(|cell| cell.len() + 2).sum();
        let mut bytes = Vec::with_capacity(size + 1024);
        bytes.extend_from_slice(b"{\n \"cells\": [");
        for (i, cell) in self.cells.iter().enumerate() {
            bytes.extend_from_slice(if i == 0 { b"\n" } else { b",\n" });
            bytes.extend_from_slice(cell.as_bytes());
        }
        if !self.cells.is_empty() {
            bytes.extend_from_slice(b"\n ");
        }
        bytes.extend_from_slice(b"],\n \"metadata\": ");
        bytes.extend_from_slice(
            indented(&pretty(&self.metadata), " ")
                .trim_start()
                .as_bytes(),
        );
        bytes.extend_from_slice(b",\n \"nbformat\": 4,\n \"nbformat_minor\": 5\n}\n");
        bytes
    }
}

/// `value` as nbformat writes JSON: one space per level.
fn pretty(value: &Value) -> String {
    let mut bytes = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b" ");
    let mut serializer = serde_json::Serializer::with_formatter(&mut bytes, formatter);
    // Serializing a `Value` into memory cannot fail.
    let _ = serde::Serialize::serialize(value, &mut serializer);
    String::from_utf8(bytes).unwrap_or_default()
}

/// Every line of `text` after `prefix` (JSON strings escape their newlines, so a line break
/// is always between tokens).
fn indented(text: &str, prefix: &str) -> String {
    text.lines()
        .map(|line| format!("{prefix}{line}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// One cell as it sits in the `cells` array.
fn render_cell(cell: &Value) -> String {
    indented(&pretty(cell), "  ")
}

/// Writes `bytes` to `path` atomically (temp file beside it, renamed over it), creating its
/// directory (0700) when missing. Not synced: a notebook is an output for people, and an fsync
/// of the file and its directory cost ~30 ms a cell here (`fsutil::write_output`).
pub fn write(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    crate::fsutil::write_output(path, bytes)
}

/// The line that tells a reader how a cell ended, when it did not end by itself.
fn ending_note(outcome: &Outcome) -> Option<String> {
    match outcome.status {
        Status::Ok | Status::Error => None,
        Status::Aborted if outcome.duration_ms == 0 && outcome.abort.is_some() => {
            Some("[pi-repl: this cell was cancelled before it ran]\n".into())
        }
        Status::Aborted => {
            let why = outcome
                .abort
                .as_ref()
                .map(|abort| {
                    let mut why = abort.reason.describe();
                    if abort.kernel_killed {
                        why.push_str("; the kernel was killed");
                    }
                    why
                })
                .unwrap_or_else(|| "aborted".into());
            Some(format!("[pi-repl: this cell was aborted: {why}]\n"))
        }
        Status::Died => {
            let why = outcome
                .error
                .as_ref()
                .map(|error| error.evalue.clone())
                .unwrap_or_else(|| "the kernel died".into());
            Some(format!(
                "[pi-repl: the kernel died while this cell ran: {why}]\n"
            ))
        }
    }
}

/// `target` relative to the notebook's directory when it is inside it, else as it is.
fn link_target(notebook: &Path, target: &Path) -> String {
    notebook
        .parent()
        .and_then(|dir| target.strip_prefix(dir).ok())
        .unwrap_or(target)
        .display()
        .to_string()
}

fn read_cells(bytes: &[u8]) -> Option<Vec<Value>> {
    let document: Value = serde_json::from_slice(bytes).ok()?;
    if document.get("nbformat")?.as_u64()? != 4 {
        return None;
    }
    document.get("cells")?.as_array().cloned()
}

fn set_aside(path: &Path) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let aside = PathBuf::from(format!("{}.unreadable-{now}", path.display()));
    match std::fs::rename(path, &aside) {
        Ok(()) => tracing::warn!(
            aside = %aside.display(),
            "the notebook file was not a notebook; moved it aside and started a new one"
        ),
        Err(error) => tracing::warn!(%error, "cannot move an unreadable notebook aside"),
    }
}

/// The sub-agents whose records in `agents_dir` name `cell` as the cell that started them.
pub fn agents_started_by(agents_dir: &Path, cell: u64) -> Vec<AgentLink> {
    let Ok(entries) = std::fs::read_dir(agents_dir) else {
        return Vec::new();
    };
    let mut links: Vec<AgentLink> = entries
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .filter_map(|path| crate::agents::record::Record::read(&path))
        .filter(|record| record.parent_cell == cell)
        .map(|record| AgentLink {
            notebook: agents_dir.join(&record.id).join(SESSION_NOTEBOOK),
            id: record.id,
            task: record.task,
        })
        .collect();
    links.sort_by(|a, b| a.id.cmp(&b.id));
    links
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::never_ran;

    fn ok(cell: u64) -> Outcome {
        Outcome {
            status: Status::Ok,
            cell,
            duration_ms: 3,
            abort: None,
            ..never_ran()
        }
    }

    #[test]
    fn ids_are_unique_and_a_reset_comes_before_its_cell() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("n.ipynb");
        let mut notebook = Notebook::open(&path, &KernelInfo::default());
        notebook.record("1", &ok(1), None, &[]);
        let mut second = ok(2);
        second.reset = Some(crate::engine::outcome::Reset::because("the kernel died"));
        notebook.record("2", &second, None, &[]);
        let document: Value = serde_json::from_slice(&notebook.to_bytes()).unwrap();
        let cells = document["cells"].as_array().unwrap();
        let kinds: Vec<&str> = cells
            .iter()
            .map(|c| c["cell_type"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["code", "markdown", "code"]);
        assert!(
            cells[1]["source"]
                .as_str()
                .unwrap()
                .contains("the kernel died")
        );
        let ids: std::collections::BTreeSet<&str> =
            cells.iter().map(|c| c["id"].as_str().unwrap()).collect();
        assert_eq!(ids.len(), 3);
    }

    #[test]
    fn a_notebook_at_the_path_is_continued_and_garbage_is_set_aside() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("n.ipynb");
        let mut notebook = Notebook::open(&path, &KernelInfo::default());
        notebook.record("1", &ok(1), None, &[]);
        write(&path, &notebook.to_bytes()).unwrap();
        let mut again = Notebook::open(&path, &KernelInfo::default());
        again.record("2", &ok(2), None, &[]);
        let document: Value = serde_json::from_slice(&again.to_bytes()).unwrap();
        assert_eq!(document["cells"].as_array().unwrap().len(), 2);
        assert_eq!(document["cells"][1]["id"], "cell-2");

        std::fs::write(&path, b"not json").unwrap();
        let fresh = Notebook::open(&path, &KernelInfo::default());
        assert!(fresh.cells.is_empty());
        let aside = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().contains(".unreadable-"));
        assert!(aside, "the unreadable file is kept beside");
    }

    #[test]
    fn cells_that_did_not_end_by_themselves_say_so() {
        let dir = tempfile::tempdir().unwrap();
        let mut notebook = Notebook::open(&dir.path().join("n.ipynb"), &KernelInfo::default());
        let cancelled = Outcome {
            cell: 1,
            ..never_ran()
        };
        notebook.record("queued()", &cancelled, None, &[]);
        notebook.record_not_run(2, "x", "the kernel could not start");
        let document: Value = serde_json::from_slice(&notebook.to_bytes()).unwrap();
        let cells = document["cells"].as_array().unwrap();
        assert_eq!(cells[0]["execution_count"], Value::Null);
        assert!(
            cells[0]["outputs"][0]["text"]
                .as_str()
                .unwrap()
                .contains("cancelled before it ran")
        );
        assert_eq!(cells[1]["metadata"]["pi_repl"]["status"], "not_run");
    }
}
