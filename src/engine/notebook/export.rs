//! `pi-repl sessions export`: a session's notebook after the fact.
//!
//! Owns: finding the notebook of a session's directory or of one of its sub-agents'
//! workspaces (`<dir>/agents/<id>/`, nested as deep as the agents went) and reading it whole.
//! The live notebook is the session's record of its outputs (the journal `answered.jsonl` keeps
//! only first lines, and only until a snapshot covers them), so export reads that file; it is
//! replaced atomically after every cell, so a running session's is read whole too.
//! Does not own: writing the notebook (`mod.rs`).

use std::path::{Path, PathBuf};

use anyhow::Context;

use super::SESSION_NOTEBOOK;

/// How deep sub-agents are searched for (the agents' own limit is far lower).
const MAX_AGENT_DEPTH: usize = 16;

/// The notebook of the workspace in `dir`, checked to be an nbformat 4 notebook.
pub fn read(dir: &Path) -> anyhow::Result<Vec<u8>> {
    let path = dir.join(SESSION_NOTEBOOK);
    let bytes = std::fs::read(&path).with_context(|| {
        format!(
            "this workspace has no notebook: cannot read {}",
            path.display()
        )
    })?;
    let document: serde_json::Value = serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not JSON", path.display()))?;
    if document.get("nbformat").and_then(serde_json::Value::as_u64) != Some(4) {
        anyhow::bail!("{} is not an nbformat 4 notebook", path.display());
    }
    Ok(bytes)
}

/// The workspace of sub-agent `id` anywhere under the session in `dir`.
pub fn agent_workspace(dir: &Path, id: &str) -> Option<PathBuf> {
    let mut level = vec![dir.to_path_buf()];
    for _ in 0..MAX_AGENT_DEPTH {
        let mut next = Vec::new();
        for workspace in &level {
            let agents = workspace.join("agents");
            let candidate = agents.join(id);
            if candidate.is_dir() {
                return Some(candidate);
            }
            let Ok(entries) = std::fs::read_dir(&agents) else {
                continue;
            };
            next.extend(
                entries
                    .flatten()
                    .map(|entry| entry.path())
                    .filter(|path| path.is_dir()),
            );
        }
        if next.is_empty() {
            return None;
        }
        level = next;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nested_sub_agent_is_found_and_a_missing_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let nested = dir.path().join("agents/a1/agents/b2");
        std::fs::create_dir_all(&nested).unwrap();
        assert_eq!(agent_workspace(dir.path(), "b2"), Some(nested));
        assert_eq!(agent_workspace(dir.path(), "zz"), None);
    }

    #[test]
    fn only_a_notebook_is_exported() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read(dir.path()).is_err());
        std::fs::write(dir.path().join(SESSION_NOTEBOOK), b"{\"nbformat\": 3}").unwrap();
        assert!(read(dir.path()).is_err());
        std::fs::write(
            dir.path().join(SESSION_NOTEBOOK),
            b"{\"nbformat\": 4, \"nbformat_minor\": 5, \"metadata\": {}, \"cells\": []}",
        )
        .unwrap();
        assert!(read(dir.path()).is_ok());
    }
}
