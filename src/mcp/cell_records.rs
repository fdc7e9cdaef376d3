//! The cells of a durable session that outlived their calls, on disk: one JSON record per cell
//! in `<session>/cells/`, so a cell that ended while nobody was asking is still reported, and
//! still collectable, after `pi-repl mcp` restarts.
//!
//! Owns: the record format, writing it atomically, reading what an earlier server left (a cell
//! it left queued or running did not survive its kernel: it reads as `lost`), keeping the last
//! [`KEPT_RECORDS`], and the session's cell numbering (`numbering.json`), so a new server goes
//! on from the last number instead of reusing it.
//! Does not own: what a record means to a call (`cell_book`).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Records kept; older ones are removed as new ones are written.
pub const KEPT_RECORDS: usize = 100;

const NUMBERING: &str = "numbering.json";

/// Where a cell stood when its record was last written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordState {
    Queued,
    Running,
    /// It ended; `status` says how.
    Ended,
    /// The server that ran it stopped first; the cell ended with its kernel.
    Lost,
}

/// One cell that outlived its call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellRecord {
    pub cell: u64,
    /// Its first line, quoted.
    pub code: String,
    pub state: RecordState,
    /// How it ended (`ok`, `error`, `aborted`, `died`, `lost`), once it has.
    #[serde(default)]
    pub status: Option<String>,
    pub submitted_at: String,
    #[serde(default)]
    pub ended_at: Option<String>,
    #[serde(default)]
    pub duration_ms: Option<u64>,
    /// Its outcome as the model reads it, once ended; before that, its output so far.
    #[serde(default)]
    pub text: String,
    #[serde(default)]
    pub is_error: bool,
    /// The file holding its whole outcome as text.
    #[serde(default)]
    pub output_file: Option<PathBuf>,
    /// A call has returned its outcome.
    #[serde(default)]
    pub collected: bool,
    /// A result has carried the notice that it ended.
    #[serde(default)]
    pub reported: bool,
    /// The pi-repl process that ran it.
    pub server_pid: u32,
}

#[derive(Debug, Serialize, Deserialize)]
struct Numbering {
    last: u64,
}

/// The records directory of one durable session.
#[derive(Debug, Clone)]
pub struct CellRecords {
    dir: PathBuf,
}

impl CellRecords {
    /// The records of the session whose directory is `session_dir`.
    pub fn beside(session_dir: &Path) -> CellRecords {
        CellRecords {
            dir: session_dir.join("cells"),
        }
    }

    fn path_of(&self, cell: u64) -> PathBuf {
        self.dir.join(format!("{cell}.json"))
    }

    /// Writes `record` (atomically); a failure is logged, never fatal: the cell still runs and
    /// this server still reports it.
    pub fn write(&self, record: &CellRecord) {
        let written = crate::fsutil::create_private_dir(&self.dir).and_then(|()| {
            let bytes = serde_json::to_vec_pretty(record)?;
            crate::fsutil::write_atomic(&self.path_of(record.cell), &bytes)
        });
        if let Err(error) = written {
            tracing::warn!(cell = record.cell, %error, "could not write the cell's record");
        }
        self.prune();
    }

    /// The record of cell `cell`, if there is a readable one.
    pub fn read(&self, cell: u64) -> Option<CellRecord> {
        let bytes = std::fs::read(self.path_of(cell)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Every readable record, by cell number, read by a server as it starts (it holds the
    /// session's lock, so no other server of the session runs). A cell left queued or running
    /// is rewritten as lost: it ended with an earlier server's kernel. That server's pid is
    /// not consulted: a restarted container gives the new server the same pid.
    pub fn load(&self) -> Vec<CellRecord> {
        let mut records: Vec<CellRecord> = self
            .numbers()
            .into_iter()
            .filter_map(|cell| self.read(cell))
            .collect();
        for record in &mut records {
            if matches!(record.state, RecordState::Queued | RecordState::Running) {
                let was = if record.state == RecordState::Queued {
                    "queued"
                } else {
                    "running"
                };
                record.state = RecordState::Lost;
                record.status = Some("lost".into());
                record.ended_at = Some(now());
                let so_far = record.text.trim_end();
                let said = if so_far.is_empty() {
                    String::new()
                } else {
                    format!("\nIts output as last seen:\n{so_far}")
                };
                record.text = format!(
                    "[pi-repl stopped while cell {} was {}; the cell ended with its kernel and \
                     its effects are not in the workspace]{said}",
                    record.cell, was,
                );
                record.is_error = true;
                self.write(record);
            }
        }
        records
    }

    /// The last cell number this session gave, from the numbering file or the records.
    pub fn last_number(&self) -> u64 {
        let numbered = std::fs::read(self.dir.join(NUMBERING))
            .ok()
            .and_then(|bytes| serde_json::from_slice::<Numbering>(&bytes).ok())
            .map_or(0, |n| n.last);
        let recorded = self.numbers().into_iter().max().unwrap_or(0);
        numbered.max(recorded)
    }

    /// Notes that cell `last` was given its number. Replaced atomically but not synced: it must
    /// survive the process, and after a machine crash the journal of answered cells (synced)
    /// still numbers a new server past every answered cell (`engine::journal_floor`).
    pub fn note_number(&self, last: u64) {
        let written = serde_json::to_vec(&Numbering { last })
            .map_err(anyhow::Error::from)
            .and_then(|bytes| crate::fsutil::write_output(&self.dir.join(NUMBERING), &bytes));
        if let Err(error) = written {
            tracing::warn!(%error, "could not write the session's cell numbering");
        }
    }

    fn numbers(&self) -> Vec<u64> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut numbers: Vec<u64> = entries
            .filter_map(Result::ok)
            .filter_map(|entry| {
                let name = entry.file_name().into_string().ok()?;
                name.strip_suffix(".json")?.parse().ok()
            })
            .collect();
        numbers.sort_unstable();
        numbers
    }

    fn prune(&self) {
        let numbers = self.numbers();
        let excess = numbers.len().saturating_sub(KEPT_RECORDS);
        for cell in &numbers[..excess] {
            let _ = std::fs::remove_file(self.path_of(*cell));
        }
    }
}

/// The time now, as records write it.
pub fn now() -> String {
    chrono::Local::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(cell: u64, state: RecordState, server_pid: u32) -> CellRecord {
        CellRecord {
            cell,
            code: "`train()`".into(),
            state,
            status: None,
            submitted_at: now(),
            ended_at: None,
            duration_ms: None,
            text: "epoch 1\n".into(),
            is_error: false,
            output_file: None,
            collected: false,
            reported: false,
            server_pid,
        }
    }

    #[test]
    fn a_cell_an_earlier_server_left_running_reads_as_lost_with_its_output_so_far() {
        let dir = tempfile::tempdir().unwrap();
        let records = CellRecords::beside(dir.path());
        records.write(&record(4, RecordState::Running, u32::MAX));
        // An earlier server that had this very pid (a restarted container).
        records.write(&record(5, RecordState::Queued, std::process::id()));
        records.write(&record(6, RecordState::Ended, u32::MAX));
        let loaded = records.load();
        assert_eq!(loaded.len(), 3);
        assert_eq!(loaded[0].state, RecordState::Lost);
        assert!(
            loaded[0]
                .text
                .contains("pi-repl stopped while cell 4 was running")
        );
        assert!(loaded[0].text.ends_with("epoch 1"), "{}", loaded[0].text);
        assert_eq!(
            records.read(4).unwrap().state,
            RecordState::Lost,
            "rewritten"
        );
        assert_eq!(loaded[1].state, RecordState::Lost, "whatever its pid");
        assert!(
            loaded[1]
                .text
                .contains("pi-repl stopped while cell 5 was queued")
        );
        assert_eq!(loaded[2].state, RecordState::Ended, "an ended cell stays");
    }

    #[test]
    fn numbering_goes_on_from_the_file_or_the_highest_record() {
        let dir = tempfile::tempdir().unwrap();
        let records = CellRecords::beside(dir.path());
        assert_eq!(records.last_number(), 0);
        records.note_number(12);
        assert_eq!(records.last_number(), 12);
        records.write(&record(30, RecordState::Ended, 1));
        assert_eq!(records.last_number(), 30);
    }

    #[test]
    fn only_the_last_records_are_kept_and_a_damaged_one_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let records = CellRecords::beside(dir.path());
        for cell in 1..=(KEPT_RECORDS as u64 + 5) {
            records.write(&record(cell, RecordState::Ended, 1));
        }
        std::fs::write(records.path_of(KEPT_RECORDS as u64 + 5), b"{not json").unwrap();
        let loaded = records.load();
        assert_eq!(loaded.len(), KEPT_RECORDS - 1);
        assert_eq!(loaded[0].cell, 6);
    }
}
