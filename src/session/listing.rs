//! What a session holds, read from disk without a kernel: for `pi-repl sessions`.
//!
//! Reads `session.json` and the snapshot's `manifest.json` (format: `docs/snapshot-format.md`)
//! as plain JSON, and checks each snapshot's signature with this installation's key
//! (`snapshot_check`) so refused snapshots, and those kept beside a session's own, are shown
//! with what recovers them. Nothing is unpickled: listing is not reviving.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Serialize;
use serde_json::Value;

use super::recover::{KeptSnapshot, kept_snapshots};
use super::snapshot_check::{self, SnapshotState};
use super::{SessionMeta, read_meta};
use crate::home::Home;

/// One session, summarised.
#[derive(Debug, Clone, Serialize)]
pub struct SessionSummary {
    pub key: String,
    pub dir: PathBuf,
    pub meta: Option<SessionMeta>,
    /// Bytes on disk (snapshot blobs, outputs, everything).
    pub size_bytes: u64,
    /// Seconds since it was last used.
    pub age_seconds: u64,
    /// Bindings in its snapshot; `None` when it has none (or it cannot be read).
    pub bindings: Option<usize>,
    pub saved_at: Option<String>,
    /// Its `snapshot/` as this installation's key sees it.
    pub snapshot: SnapshotState,
    /// Snapshots kept beside it (`snapshot.refused-…`, …), each as this key sees it.
    pub kept: Vec<KeptSnapshot>,
}

impl SessionSummary {
    /// True when its snapshot is refused or it keeps snapshots aside: `pi-repl sessions` says
    /// what recovers them.
    pub fn has_refused(&self) -> bool {
        !self.kept.is_empty()
            || !matches!(
                self.snapshot,
                SnapshotState::NoManifest | SnapshotState::Readable { .. }
            )
    }
}

/// One binding of a snapshot.
#[derive(Debug, Clone, Serialize)]
pub struct BindingSummary {
    pub name: String,
    pub kind: String,
    pub type_name: String,
    pub stored_bytes: u64,
    /// For an alias: the binding it is bound to.
    pub alias_of: Option<String>,
}

/// Every session under `PI_REPL_HOME/state`, most recently used first.
pub fn list(home: &Home) -> Vec<SessionSummary> {
    let Ok(entries) = std::fs::read_dir(home.state()) else {
        return Vec::new();
    };
    let key = super::read_key(&super::key_path(home)).ok();
    let mut sessions: Vec<SessionSummary> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .map(|e| summarize(&e.path(), key.as_deref()))
        .collect();
    sessions.sort_by_key(|s| s.age_seconds);
    sessions
}

/// Finds a session by its full key, or by its conversation name when that is unambiguous
/// (prefers the session of `project_dir`).
pub fn find(home: &Home, project_dir: &Path, name: &str) -> Result<SessionSummary, String> {
    let sessions = list(home);
    if let Some(exact) = sessions.iter().find(|s| s.key == name) {
        return Ok(exact.clone());
    }
    if let Ok(key) = super::session_key(project_dir, name)
        && let Some(here) = sessions.iter().find(|s| s.key == key)
    {
        return Ok(here.clone());
    }
    let named: Vec<&SessionSummary> = sessions
        .iter()
        .filter(|s| s.meta.as_ref().is_some_and(|m| m.name == name))
        .collect();
    match named.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(format!(
            "no session named {name:?} (see `pi-repl sessions`)"
        )),
        many => Err(format!(
            "{} sessions are named {name:?}; use the full key: {}",
            many.len(),
            many.iter()
                .map(|s| s.key.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

fn summarize(dir: &Path, snapshot_key: Option<&[u8]>) -> SessionSummary {
    let key = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let meta = read_meta(dir);
    let manifest = read_manifest(dir);
    let used = std::fs::metadata(dir.join("session.json"))
        .or_else(|_| std::fs::metadata(dir))
        .and_then(|m| m.modified())
        .unwrap_or(SystemTime::UNIX_EPOCH);
    SessionSummary {
        key,
        dir: dir.to_path_buf(),
        meta,
        size_bytes: disk_usage(dir),
        age_seconds: SystemTime::now()
            .duration_since(used)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        bindings: manifest
            .as_ref()
            .and_then(|m| m.get("bindings"))
            .and_then(Value::as_object)
            .map(|b| b.len()),
        saved_at: manifest
            .as_ref()
            .and_then(|m| m.get("saved_at"))
            .and_then(Value::as_str)
            .map(str::to_string),
        snapshot: snapshot_check::check(&dir.join("snapshot"), snapshot_key),
        kept: kept_snapshots(dir, snapshot_key),
    }
}

/// Bindings a snapshot could not save: (name, reason).
pub type Unsaved = Vec<(String, String)>;

/// The bindings in a session's snapshot, largest first, and what it could not save.
pub fn bindings(dir: &Path) -> Option<(Vec<BindingSummary>, Unsaved)> {
    let manifest = read_manifest(dir)?;
    let mut found: Vec<BindingSummary> = manifest
        .get("bindings")?
        .as_object()?
        .iter()
        .map(|(name, entry)| BindingSummary {
            name: name.clone(),
            kind: text(entry, "kind"),
            type_name: text(entry, "type"),
            stored_bytes: entry
                .get("stored_bytes")
                .and_then(Value::as_u64)
                .unwrap_or(0),
            alias_of: entry
                .get("alias")
                .and_then(Value::as_str)
                .map(str::to_string),
        })
        .collect();
    found.sort_by(|a, b| {
        b.stored_bytes
            .cmp(&a.stored_bytes)
            .then(a.name.cmp(&b.name))
    });
    let unsaved = manifest
        .get("unsaved")
        .and_then(Value::as_object)
        .map(|u| {
            u.iter()
                .map(|(name, why)| (name.clone(), why.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default();
    Some((found, unsaved))
}

/// The packages the session added to the kernel's environment, as `name==version`, by name
/// (the manifest's `packages`; empty before pi-repl recorded them).
pub fn packages(dir: &Path) -> Vec<String> {
    let Some(manifest) = read_manifest(dir) else {
        return Vec::new();
    };
    let Some(recorded) = manifest.get("packages").and_then(Value::as_object) else {
        return Vec::new();
    };
    recorded
        .iter()
        .map(|(key, entry)| {
            let name = entry.get("name").and_then(Value::as_str).unwrap_or(key);
            format!("{name}=={}", text(entry, "version"))
        })
        .collect()
}

fn text(entry: &Value, field: &str) -> String {
    entry
        .get(field)
        .and_then(Value::as_str)
        .unwrap_or("?")
        .to_string()
}

fn read_manifest(dir: &Path) -> Option<Value> {
    let text = std::fs::read_to_string(dir.join("snapshot").join("manifest.json")).ok()?;
    serde_json::from_str(&text).ok()
}

fn disk_usage(dir: &Path) -> u64 {
    let mut total = 0;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&current) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            match entry.metadata() {
                Ok(meta) if meta.is_dir() => pending.push(entry.path()),
                Ok(meta) => total += meta.len(),
                Err(_) => {}
            }
        }
    }
    total
}

/// `1.2 MB`, `340 B`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1000.0 && unit < UNITS.len() - 1 {
        value /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// `3 min`, `2 h`, `5 d`.
pub fn human_age(seconds: u64) -> String {
    match seconds {
        s if s < 60 => format!("{s} s"),
        s if s < 3600 => format!("{} min", s / 60),
        s if s < 86_400 => format!("{} h", s / 3600),
        s => format!("{} d", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_ages_read_well() {
        assert_eq!(human_bytes(340), "340 B");
        assert_eq!(human_bytes(1_234_567), "1.2 MB");
        assert_eq!(human_age(59), "59 s");
        assert_eq!(human_age(7200), "2 h");
    }
}
