//! The states of a session's answered cells that a rewind can return to, as the host lists
//! them (`pi-repl sessions show`) without a kernel.
//!
//! The kernel side keeps them (`pi_repl_kernel/snapshot/kept_states.py`, `docs/rewind.md`):
//! `snapshot/states/<N>.json` is a copy of the signed manifest committed for the state right
//! after answered cell N, and `snapshot/states/<N>.same` holds the number of the cell whose
//! state cell N left (it changed nothing). This module only reads the names (and follows the
//! `.same` links) and names the manifest a fork at a cell starts from (`--fork-at`); a rewind,
//! or the revive of such a fork, checks the manifest's signature before it uses it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The answered cells whose state is kept under `snapshot_dir`, ascending.
pub fn kept(snapshot_dir: &Path) -> Vec<u64> {
    let index = StateIndex::read(snapshot_dir);
    let mut cells: BTreeSet<u64> = index.manifests.clone();
    cells.extend(
        index
            .same
            .keys()
            .copied()
            .filter(|&cell| index.resolve(cell).is_some()),
    );
    cells.into_iter().collect()
}

/// The kept manifest of the state right after answered cell `cell` (following `.same` links),
/// if that state is kept: what a fork at that cell starts from (`--fork-at`).
pub fn manifest_of(snapshot_dir: &Path, cell: u64) -> Option<std::path::PathBuf> {
    let found = StateIndex::read(snapshot_dir).resolve(cell)?;
    Some(snapshot_dir.join("states").join(format!("{found}.json")))
}

/// The names under `states/`: the cells with a manifest, and the `.same` links.
struct StateIndex {
    manifests: BTreeSet<u64>,
    same: BTreeMap<u64, u64>,
}

impl StateIndex {
    fn read(snapshot_dir: &Path) -> StateIndex {
        let mut index = StateIndex {
            manifests: BTreeSet::new(),
            same: BTreeMap::new(),
        };
        let Ok(entries) = std::fs::read_dir(snapshot_dir.join("states")) else {
            return index;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if let Some(cell) = number(name, ".json") {
                index.manifests.insert(cell);
            } else if let Some(cell) = number(name, ".same") {
                let target = std::fs::read_to_string(entry.path())
                    .ok()
                    .and_then(|text| text.trim().parse::<u64>().ok());
                if let Some(target) = target {
                    index.same.insert(cell, target);
                }
            }
        }
        index
    }

    /// The cell whose manifest holds `cell`'s state (itself, or where its links end).
    fn resolve(&self, mut cell: u64) -> Option<u64> {
        let mut seen = BTreeSet::new();
        while seen.insert(cell) {
            if self.manifests.contains(&cell) {
                return Some(cell);
            }
            cell = *self.same.get(&cell)?;
        }
        None
    }
}

/// `[1, 2, 3, 5]` as `1-3, 5`.
pub fn ranges(cells: &[u64]) -> String {
    let mut parts = Vec::new();
    let mut run: Option<(u64, u64)> = None;
    for &cell in cells {
        run = match run {
            Some((start, end)) if cell == end + 1 => Some((start, cell)),
            Some(done) => {
                parts.push(done);
                Some((cell, cell))
            }
            None => Some((cell, cell)),
        };
    }
    parts.extend(run);
    parts
        .iter()
        .map(|&(start, end)| {
            if start == end {
                start.to_string()
            } else {
                format!("{start}-{end}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn number(name: &str, suffix: &str) -> Option<u64> {
    let stem = name.strip_suffix(suffix)?;
    if stem.is_empty() || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_states_are_the_manifests_and_the_links_that_reach_one() {
        let dir = tempfile::tempdir().unwrap();
        let states = dir.path().join("states");
        std::fs::create_dir(&states).unwrap();
        for name in ["1.json", "2.json", "5.json", ".6.json.tmp-1", "x.json"] {
            std::fs::write(states.join(name), "{}").unwrap();
        }
        std::fs::write(states.join("3.same"), "2").unwrap();
        std::fs::write(states.join("4.same"), "3").unwrap();
        std::fs::write(states.join("7.same"), "6").unwrap(); // its state is not kept
        assert_eq!(kept(dir.path()), [1, 2, 3, 4, 5]);
        assert_eq!(ranges(&kept(dir.path())), "1-5");
        assert_eq!(ranges(&[1, 3, 4, 9]), "1, 3-4, 9");
        assert!(kept(&dir.path().join("missing")).is_empty());
        assert_eq!(manifest_of(dir.path(), 4), Some(states.join("2.json")));
        assert_eq!(manifest_of(dir.path(), 5), Some(states.join("5.json")));
        assert_eq!(manifest_of(dir.path(), 7), None);
        assert_eq!(manifest_of(dir.path(), 6), None);
    }
}
