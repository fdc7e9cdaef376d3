//! The connection file a person attaches to the live kernel with (`pi-repl attach`,
//! `jupyter console --existing FILE`): `<session>/kernel.json`, as Jupyter writes one.
//!
//! Owns: writing it (0600, atomically, in the session's 0700 directory) when a local kernel is
//! ready, and removing it when the engine stops. The file holds the kernel's key; it lives as
//! long as that kernel: a kernel that dies takes its sockets with it, and the next kernel's file
//! replaces it. After a host killed outright the file names a kernel that died with the host
//! (its lifeline), whose sockets are gone; `pi-repl attach` refuses a session that is not running.
//! Does not own: the kernel's own connection file (deleted once the kernel read it, `kernel`).

use std::path::Path;

use serde_json::json;

use crate::kernel::Kernel;

/// The file's name in the session's directory.
pub const ATTACH_FILE: &str = "kernel.json";

/// Writes `path` for `kernel`; a kernel other clients cannot reach (remote) removes it.
pub fn write(path: &Path, kernel: &Kernel) {
    let Some(connection) = kernel.connection_info() else {
        remove(path);
        return;
    };
    let mut value = match serde_json::to_value(connection) {
        Ok(value) => value,
        Err(error) => {
            tracing::warn!(%error, "cannot encode the kernel's connection info");
            return;
        }
    };
    // jupyter_client starts no kernel for an existing one; the name only labels it.
    if value.get("kernel_name").is_none_or(|name| name.is_null()) {
        value["kernel_name"] = json!("python3");
    }
    let bytes = serde_json::to_vec_pretty(&value).unwrap_or_default();
    if let Err(error) = crate::fsutil::write_atomic(path, &bytes) {
        tracing::warn!(error = %format!("{error:#}"), "cannot write the attach file");
    }
}

/// Removes the file (the engine stops, the kernel is gone).
pub fn remove(path: &Path) {
    if let Err(error) = std::fs::remove_file(path)
        && error.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(%error, "cannot remove the attach file");
    }
}
