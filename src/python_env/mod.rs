//! What a kernel needs on this machine before it can start: which interpreter runs it, the
//! per-user venv `pi-repl setup` builds, the kernel-side Python package embedded in this binary,
//! and Deno with its kernelspec (`pi-repl setup --deno`).
//!
//! Owns: `interpreter` (which Python: flag, variable, the venv a wheel installed pi-repl into,
//! the per-user venv, `python3`), `venv` (the pinned per-user venv at `PI_REPL_HOME/venv`:
//! building it, whether it is ready), `embedded_package` (the `pi_repl_kernel` files and their
//! unpacking under `PI_REPL_HOME/lib`), `deno` (the pinned `deno` package and its kernelspec).
//! Deno lives here, not in `kernel/`, because it is built the same way as the venv (a pinned
//! package from PyPI installed with pip under `PI_REPL_HOME`, the same lock and progress steps):
//! one place says what is installed and how. Does not own: starting a kernel with any of it
//! (`kernel/`), nor the `setup` command's text (`cli/setup.rs`).
//!
//! Invariant: nothing here starts a kernel or depends on one; `kernel/` uses this module, never
//! the other way round. Inside, `interpreter` asks `venv` whether it is ready; both look up
//! `PATH` with [`find_on_path`], which lives here so neither needs the other for it.

pub mod deno;
pub mod embedded_package;
pub mod interpreter;
pub mod venv;

use std::path::{Path, PathBuf};

/// The first executable called `name` on `PATH`.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

/// Whether `path` is a file with an execute bit.
pub fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}
