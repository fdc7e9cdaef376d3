//! Whether this installation can read a snapshot, told from its manifest without a kernel.
//!
//! Owns: the host's reading of a manifest's format, version and signature, in the kernel-side
//! store's order (`python/pi_repl_kernel/snapshot/manifest.py`, `docs/snapshot-format.md`):
//! parse, format name, version, HMAC-SHA256 over the canonical JSON of the manifest without its
//! `signature`. Used by `pi-repl sessions` to show refused snapshots and by `sessions recover`
//! to pick one this key reads. Does not own: the schema of the entries, blobs, or reviving;
//! nothing is unpickled here, and a `Readable` answer is not a revive (the kernel checks again).

use std::path::Path;

use serde::Serialize;
use serde_json::Value;

/// The manifest's `format`.
const FORMAT: &str = "pi-repl-snapshot";

/// Every format version this pi-repl reads (`snapshot.manifest.READABLE_VERSIONS`).
const READABLE_VERSIONS: &[u64] = &[1, 2, 3];

/// What a snapshot directory holds, as this installation's key sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SnapshotState {
    /// No manifest (nothing saved, or blobs that belong to no snapshot).
    NoManifest,
    /// Signed with this key, in a format this pi-repl reads.
    Readable { saved_at: Option<String> },
    /// Not signed with this key: written with another key (or altered).
    OtherKey,
    /// Written by a newer pi-repl.
    Newer { version: u64 },
    /// Never readable: corrupt, truncated, another format.
    Damaged { why: String },
    /// The key is unusable, so the signature could not be checked.
    Unchecked,
}

impl SnapshotState {
    /// One phrase for a listing: "signed with another key", ...
    pub fn describe(&self) -> String {
        match self {
            SnapshotState::NoManifest => "has no manifest".into(),
            SnapshotState::Readable { saved_at } => match saved_at {
                Some(at) => format!("is readable with this key (saved at {at})"),
                None => "is readable with this key".into(),
            },
            SnapshotState::OtherKey => {
                "is signed with another key (or was altered after it was signed)".into()
            }
            SnapshotState::Newer { version } => {
                format!("was written by a newer pi-repl (format {version})")
            }
            SnapshotState::Damaged { why } => format!("is damaged ({why})"),
            SnapshotState::Unchecked => "cannot be checked (the snapshot key is unusable)".into(),
        }
    }
}

/// Checks the snapshot in `snapshot_dir` against `key` (`None`: the key is unusable).
pub fn check(snapshot_dir: &Path, key: Option<&[u8]>) -> SnapshotState {
    let data = match std::fs::read(snapshot_dir.join("manifest.json")) {
        Ok(data) => data,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return SnapshotState::NoManifest;
        }
        Err(error) => {
            return SnapshotState::Damaged {
                why: format!("its manifest cannot be read: {error}"),
            };
        }
    };
    let manifest = match serde_json::from_slice::<Value>(&data) {
        Ok(Value::Object(manifest)) => manifest,
        Ok(_) => {
            return SnapshotState::Damaged {
                why: "its manifest is not a JSON object".into(),
            };
        }
        Err(error) => {
            return SnapshotState::Damaged {
                why: format!("its manifest is truncated or corrupt: {error}"),
            };
        }
    };
    if manifest.get("format").and_then(Value::as_str) != Some(FORMAT) {
        return SnapshotState::Damaged {
            why: format!("its manifest is not a {FORMAT} manifest"),
        };
    }
    let Some(version) = manifest.get("version").and_then(Value::as_u64) else {
        return SnapshotState::Damaged {
            why: "its manifest has no valid format version".into(),
        };
    };
    let newest = READABLE_VERSIONS.iter().copied().max().unwrap_or(1);
    if version > newest {
        return SnapshotState::Newer { version };
    }
    if !READABLE_VERSIONS.contains(&version) {
        return SnapshotState::Damaged {
            why: format!("format {version} is not read by this pi-repl"),
        };
    }
    let Some(key) = key else {
        return SnapshotState::Unchecked;
    };
    let signature = manifest
        .get("signature")
        .and_then(Value::as_str)
        .and_then(decode_hex);
    let mut body = manifest.clone();
    body.remove("signature");
    let mut canonical = String::new();
    canonical_json(&Value::Object(body), &mut canonical);
    let hmac_key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key);
    match signature {
        Some(tag) if ring::hmac::verify(&hmac_key, canonical.as_bytes(), &tag).is_ok() => {
            SnapshotState::Readable {
                saved_at: manifest
                    .get("saved_at")
                    .and_then(Value::as_str)
                    .map(str::to_string),
            }
        }
        _ => SnapshotState::OtherKey,
    }
}

/// The bytes the signature covers (`snapshot.manifest.canonical_bytes`): keys sorted by code
/// point, separators `,` and `:`, no whitespace, non-ASCII written as itself. Strings and
/// numbers are written as serde_json writes them, which matches Python's `json.dumps` for what
/// a manifest holds (no floats).
fn canonical_json(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (index, key) in keys.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                canonical_json(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                canonical_json(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(text.get(at..at + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host reads exactly the versions the kernel side reads: a format bump on one side
    /// only would list a readable snapshot as "newer".
    #[test]
    fn the_readable_versions_are_the_kernel_sides() {
        let source = include_str!("../../python/pi_repl_kernel/snapshot/manifest.py");
        let line = source
            .lines()
            .find(|line| line.starts_with("READABLE_VERSIONS = "))
            .expect("snapshot_manifest.READABLE_VERSIONS");
        let listed: Vec<u64> = line
            .trim_start_matches("READABLE_VERSIONS = ")
            .trim_matches(|c| c == '(' || c == ')')
            .split(',')
            .filter_map(|v| v.trim().parse().ok())
            .collect();
        assert_eq!(listed, READABLE_VERSIONS);
    }

    /// A manifest signed by the kernel-side store (`snapshot.manifest.write`, Python) with the
    /// key `00 01 … 1f`: non-ASCII, escapes and nesting, so the canonical bytes must match
    /// Python's exactly.
    const SIGNED_BY_PYTHON: &str = r#"{
 "bindings": {
  "caf\u00e9": {"kind": "value", "type": "builtins.str", "note": "tab\there \"q\" \u0001 ünï"}
 },
 "format": "pi-repl-snapshot",
 "saved_at": "2026-01-02T03:04:05.678Z",
 "signature": "SIGNATURE",
 "unsaved": {},
 "version": 1,
 "z": [1, -2, true, null, {"b": 1, "a": 2}]
}"#;

    fn key() -> Vec<u8> {
        (0u8..32).collect()
    }

    fn write(dir: &Path, text: &str) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("manifest.json"), text).unwrap();
    }

    /// Issue 21: `pi-repl sessions` tells a refused snapshot from a readable one, so the host
    /// must reproduce the kernel's signature byte for byte.
    #[test]
    fn a_manifest_signed_by_the_kernel_side_store_reads_as_readable_here() {
        let tmp = tempfile::tempdir().unwrap();
        let manifest = SIGNED_BY_PYTHON.replace("SIGNATURE", PYTHON_SIGNATURE);
        write(tmp.path(), &manifest);
        assert_eq!(
            check(tmp.path(), Some(&key())),
            SnapshotState::Readable {
                saved_at: Some("2026-01-02T03:04:05.678Z".into())
            }
        );
        let other: Vec<u8> = (1u8..33).collect();
        assert_eq!(check(tmp.path(), Some(&other)), SnapshotState::OtherKey);
        assert_eq!(check(tmp.path(), None), SnapshotState::Unchecked);
        write(
            tmp.path(),
            &manifest.replace("builtins.str", "builtins.int"),
        );
        assert_eq!(check(tmp.path(), Some(&key())), SnapshotState::OtherKey);
    }

    #[test]
    fn damaged_newer_and_absent_manifests_are_told_apart() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(check(tmp.path(), Some(&key())), SnapshotState::NoManifest);
        write(tmp.path(), "{ not json");
        assert!(matches!(
            check(tmp.path(), Some(&key())),
            SnapshotState::Damaged { .. }
        ));
        write(
            tmp.path(),
            r#"{"format": "pi-repl-snapshot", "version": 7}"#,
        );
        assert_eq!(
            check(tmp.path(), Some(&key())),
            SnapshotState::Newer { version: 7 }
        );
        write(tmp.path(), r#"{"format": "other", "version": 1}"#);
        assert!(matches!(
            check(tmp.path(), Some(&key())),
            SnapshotState::Damaged { .. }
        ));
    }

    /// `hmac.new(bytes(range(32)), canonical_bytes(body), sha256).hexdigest()` in Python, for
    /// the manifest above without its signature.
    const PYTHON_SIGNATURE: &str =
        "78b316a71bb91925817c5fec5ae26f7743833039bc0ef6b5b340ea6ea1fb1fbf";
}
