//! The per-session log of cells whose effects are not in a committed snapshot yet.
//!
//! Owns: one small JSON file beside a durable session's snapshot (`unsaved-cells.json` in the
//! session's directory), rewritten after every cell that changed the workspace and removed when
//! a snapshot commits. If pi-repl stops before it could save (a stop signal with no time to
//! flush, a crash, a SIGKILL), the file is still there at the next start, and the reset notice
//! names those cells instead of letting their effects vanish silently.
//!
//! Not owned: the snapshot itself (the kernel-side store), or the list kept in memory for a
//! kernel death within one run (the runner's `unsaved_cells`).
//!
//! The file is written with a rename but without fsync: it must survive the process, not the
//! machine, and it is rewritten after every cell.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The log's file name in the session directory.
const FILE_NAME: &str = "unsaved-cells.json";

/// One cell that changed the workspace after the last commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnsavedCell {
    pub cell: u64,
    /// The cell's first line, quoted as in reset notices.
    pub code: String,
}

/// The log of one session.
#[derive(Debug, Clone)]
pub struct UnsavedLog {
    path: PathBuf,
}

impl UnsavedLog {
    /// The log of the session whose snapshot directory is `snapshot_dir`.
    pub fn beside(snapshot_dir: &Path) -> UnsavedLog {
        let dir = snapshot_dir.parent().unwrap_or(snapshot_dir);
        UnsavedLog {
            path: dir.join(FILE_NAME),
        }
    }

    /// Records the cells not saved yet (all of them, oldest first).
    pub fn record(&self, cells: &[UnsavedCell]) {
        if cells.is_empty() {
            self.clear();
            return;
        }
        let Some(dir) = self.path.parent() else {
            return;
        };
        let written = serde_json::to_vec(cells)
            .map_err(std::io::Error::other)
            .and_then(|bytes| {
                let mut temp = tempfile::Builder::new()
                    .prefix(".tmp-unsaved-")
                    .tempfile_in(dir)?;
                std::io::Write::write_all(&mut temp, &bytes)?;
                temp.persist(&self.path).map_err(|e| e.error)?;
                Ok(())
            });
        if let Err(error) = written {
            tracing::warn!(%error, path = %self.path.display(), "cannot record the unsaved cells");
        }
    }

    /// Forgets the log (a snapshot committed everything in it).
    pub fn clear(&self) {
        if let Err(error) = std::fs::remove_file(&self.path)
            && error.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(%error, path = %self.path.display(), "cannot remove the unsaved-cells log");
        }
    }

    /// What an earlier run left unsaved, if anything. An unreadable log says so rather than
    /// nothing.
    pub fn left_by_earlier_run(&self) -> Option<Vec<UnsavedCell>> {
        let bytes = match std::fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return None,
            Err(error) => {
                tracing::warn!(%error, "cannot read the unsaved-cells log");
                return None;
            }
        };
        match serde_json::from_slice::<Vec<UnsavedCell>>(&bytes) {
            Ok(cells) if cells.is_empty() => None,
            Ok(cells) => Some(cells),
            Err(error) => {
                tracing::warn!(%error, "the unsaved-cells log is damaged; ignoring it");
                None
            }
        }
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

    #[test]
    fn a_log_outlives_its_writer_and_is_gone_once_cleared() {
        let dir = tempfile::tempdir().unwrap();
        let snapshot = dir.path().join("snapshot");
        std::fs::create_dir(&snapshot).unwrap();
        let log = UnsavedLog::beside(&snapshot);
        assert_eq!(log.left_by_earlier_run(), None);
        log.record(&[cell(3), cell(4)]);
        let again = UnsavedLog::beside(&snapshot);
        assert_eq!(again.left_by_earlier_run(), Some(vec![cell(3), cell(4)]));
        again.clear();
        assert_eq!(log.left_by_earlier_run(), None);
        log.record(&[cell(5)]);
        log.record(&[]);
        assert_eq!(log.left_by_earlier_run(), None);
    }

    #[test]
    fn a_damaged_log_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let snapshot = dir.path().join("snapshot");
        std::fs::write(dir.path().join(FILE_NAME), b"{not json").unwrap();
        assert_eq!(UnsavedLog::beside(&snapshot).left_by_earlier_run(), None);
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
