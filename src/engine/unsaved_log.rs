//! The journal of answered cells: a durable session's record of every cell whose answer left,
//! read against what the committed snapshot holds.
//!
//! Owns: one append-only file in the session's directory (`answered.jsonl`), a JSON line per
//! answered cell that may have changed the workspace (`{"cell": N, "code": "`x = 1`"}`), and a
//! line when a result named lost cells (`{"told_through": N}`). A line is appended and synced
//! (`fdatasync`) before the answer it records leaves; nothing removes a line but a commit that
//! covers it. Which cells a committed snapshot holds is the manifest's `cells` (`through`: every
//! answered cell up to it, except `missing`: cells a dead kernel lost before they were named),
//! written by the save that committed it (`docs/snapshot-format.md`). So whatever stops pi-repl,
//! the next start names exactly the answered cells whose state is neither in the snapshot nor
//! already named: `uncovered`.
//!
//! The file is emptied (truncated, not rewritten) once everything in it is covered. An older
//! pi-repl's `unsaved-cells.json` is read once and removed.
//!
//! Not owned: the snapshot itself (the kernel-side store), when lines are appended and the
//! journal compacted (`save_schedule`), or the list kept in memory for a kernel death within
//! one run (also `save_schedule`'s).

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The journal's file name in the session directory.
const FILE_NAME: &str = "answered.jsonl";

/// An older pi-repl's list of unsaved cells (rewritten after every cell, never synced).
const LEGACY_NAME: &str = "unsaved-cells.json";

/// One answered cell that may have changed the workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnsavedCell {
    pub cell: u64,
    /// The cell's first line, quoted as in reset notices.
    pub code: String,
}

/// Which answered cells a committed snapshot holds (the manifest's `cells`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Coverage {
    /// Every answered cell up to this one, except `missing`.
    #[serde(default)]
    pub through: u64,
    /// Answered cells up to `through` whose state the snapshot does not hold (a dead kernel lost
    /// them, and no delivered result has named them yet).
    #[serde(default)]
    pub missing: Vec<u64>,
}

impl Coverage {
    fn holds(&self, cell: u64) -> bool {
        cell <= self.through && !self.missing.contains(&cell)
    }
}

/// One line of the journal.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
enum Line {
    Answered(UnsavedCell),
    Told { told_through: u64 },
}

/// The journal of one session.
#[derive(Debug, Clone)]
pub struct UnsavedLog {
    path: PathBuf,
    legacy: PathBuf,
}

impl UnsavedLog {
    /// The journal of the session whose snapshot directory is `snapshot_dir`.
    pub fn beside(snapshot_dir: &Path) -> UnsavedLog {
        let dir = snapshot_dir.parent().unwrap_or(snapshot_dir);
        UnsavedLog {
            path: dir.join(FILE_NAME),
            legacy: dir.join(LEGACY_NAME),
        }
    }

    /// Appends `cell` (if any) and `told_through` (if any) in one synced write: the answer they
    /// record leaves after this returns.
    pub fn append(&self, cell: Option<&UnsavedCell>, told_through: Option<u64>) {
        let mut bytes = Vec::new();
        let lines = told_through
            .map(|told_through| Line::Told { told_through })
            .into_iter()
            .chain(cell.cloned().map(Line::Answered));
        for line in lines {
            if serde_json::to_writer(&mut bytes, &line).is_ok() {
                bytes.push(b'\n');
            }
        }
        if bytes.is_empty() {
            return;
        }
        let written = crate::fsutil::open_private(&self.path, crate::fsutil::Open::Append)
            .and_then(|mut file| {
                file.write_all(&bytes)?;
                file.sync_data()
            });
        if let Err(error) = written {
            tracing::warn!(%error, path = %self.path.display(), "cannot journal an answered cell");
        }
    }

    /// The answered cells whose state `coverage` does not hold and no delivered result named,
    /// oldest first (an older pi-repl's list included). An unreadable line is skipped.
    pub fn uncovered(&self, coverage: &Coverage) -> Vec<UnsavedCell> {
        let mut told = 0;
        let mut cells: Vec<UnsavedCell> = Vec::new();
        for line in self.lines() {
            match line {
                Line::Answered(cell) => cells.push(cell),
                Line::Told { told_through } => told = told.max(told_through),
            }
        }
        let mut seen = BTreeSet::new();
        let mut uncovered: Vec<UnsavedCell> = self
            .legacy_cells()
            .into_iter()
            .chain(cells)
            .filter(|cell| cell.cell > told && !coverage.holds(cell.cell))
            .filter(|cell| seen.insert(cell.cell))
            .collect();
        uncovered.sort_by_key(|cell| cell.cell);
        uncovered
    }

    /// Empties the journal when `coverage` holds (or results named) every cell in it; an older
    /// pi-repl's list goes too. Truncating costs no rename, and only happens after a commit. One
    /// line stays: the cell numbers so far (`last_cell`), so a later run numbers on past them.
    pub fn compact(&self, coverage: &Coverage) {
        if !self.uncovered(coverage).is_empty() {
            return;
        }
        let last = self.last_cell().max(coverage.through);
        self.clear();
        if last > 0 {
            self.append(None, Some(last));
        }
    }

    /// The highest cell number the journal knows (0 for none): a new engine of the session
    /// numbers its cells after it, so a number never means two cells.
    pub fn last_cell(&self) -> u64 {
        self.lines()
            .iter()
            .map(|line| match line {
                Line::Answered(cell) => cell.cell,
                Line::Told { told_through } => *told_through,
            })
            .max()
            .unwrap_or(0)
    }

    /// Forgets everything (the caller knows every cell in it is covered or named).
    pub fn clear(&self) {
        match std::fs::OpenOptions::new().write(true).open(&self.path) {
            Ok(file) => {
                if let Err(error) = file.set_len(0) {
                    tracing::warn!(%error, "cannot empty the journal of answered cells");
                }
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => tracing::warn!(%error, "cannot empty the journal of answered cells"),
        }
        if let Err(error) = std::fs::remove_file(&self.legacy)
            && error.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(%error, "cannot remove the old unsaved-cells list");
        }
    }

    fn lines(&self) -> Vec<Line> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
            Err(error) => {
                tracing::warn!(%error, "cannot read the journal of answered cells");
                return Vec::new();
            }
        };
        text.lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    fn legacy_cells(&self) -> Vec<UnsavedCell> {
        std::fs::read(&self.legacy)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<Vec<UnsavedCell>>(&bytes).ok())
            .unwrap_or_default()
    }
}

/// "the changes made by cell 3 (`x = 1`) and the 2 cells after it", or `None` for no cells.
pub fn describe(cells: &[UnsavedCell]) -> Option<String> {
    let first = cells.first()?;
    Some(if cells.len() == 1 {
        format!("the changes made by cell {} ({})", first.cell, first.code)
    } else {
        format!(
            "the changes made by cell {} ({}) and the {} cells after it",
            first.cell,
            first.code,
            cells.len() - 1
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(n: u64) -> UnsavedCell {
        UnsavedCell {
            cell: n,
            code: format!("`x = {n}`"),
        }
    }

    fn journal() -> (tempfile::TempDir, UnsavedLog) {
        let dir = tempfile::tempdir().unwrap();
        let snapshot = dir.path().join("snapshot");
        std::fs::create_dir(&snapshot).unwrap();
        let log = UnsavedLog::beside(&snapshot);
        (dir, log)
    }

    fn through(n: u64) -> Coverage {
        Coverage {
            through: n,
            missing: Vec::new(),
        }
    }

    /// Issue 21: a line outlives its writer and is gone only once a commit covers it.
    #[test]
    fn an_answered_cell_stays_until_a_commit_covers_it() {
        let (_dir, log) = journal();
        assert_eq!(log.uncovered(&through(0)), vec![]);
        log.append(Some(&cell(3)), None);
        log.append(Some(&cell(4)), None);
        let again = UnsavedLog::beside(&_dir.path().join("snapshot"));
        assert_eq!(again.uncovered(&through(0)), vec![cell(3), cell(4)]);
        assert_eq!(again.uncovered(&through(3)), vec![cell(4)]);
        again.compact(&through(3));
        assert_eq!(log.uncovered(&through(3)), vec![cell(4)], "not all covered");
        again.compact(&through(4));
        assert_eq!(log.uncovered(&through(0)), vec![]);
        assert_eq!(
            log.last_cell(),
            4,
            "the numbering goes on past a compaction"
        );
    }

    /// Issue 21: a cell a dead kernel lost is not covered by a later commit until a result named
    /// it; once named, it is not named again.
    #[test]
    fn a_lost_cell_is_named_until_a_result_tells_it() {
        let (_dir, log) = journal();
        log.append(Some(&cell(2)), None);
        log.append(Some(&cell(3)), None);
        let lost = Coverage {
            through: 5,
            missing: vec![3],
        };
        assert_eq!(log.uncovered(&lost), vec![cell(3)]);
        log.append(Some(&cell(6)), Some(3));
        assert_eq!(log.uncovered(&lost), vec![cell(6)]);
        assert_eq!(log.uncovered(&through(6)), vec![]);
    }

    #[test]
    fn an_older_list_is_read_once_and_a_damaged_line_skipped() {
        let (dir, log) = journal();
        std::fs::write(
            dir.path().join(LEGACY_NAME),
            serde_json::to_vec(&[cell(1)]).unwrap(),
        )
        .unwrap();
        std::fs::write(dir.path().join(FILE_NAME), b"{not json\n").unwrap();
        log.append(Some(&cell(2)), None);
        assert_eq!(log.uncovered(&through(0)), vec![cell(1), cell(2)]);
        log.clear();
        assert_eq!(log.uncovered(&through(0)), vec![]);
    }

    #[test]
    fn describes_one_or_many_cells() {
        assert_eq!(describe(&[]), None);
        assert_eq!(
            describe(&[cell(2)]).unwrap(),
            "the changes made by cell 2 (`x = 2`)"
        );
        assert_eq!(
            describe(&[cell(2), cell(3), cell(4)]).unwrap(),
            "the changes made by cell 2 (`x = 2`) and the 2 cells after it"
        );
    }
}
