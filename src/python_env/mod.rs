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
//! the other way round.

pub mod deno;
pub mod embedded_package;
pub mod interpreter;
pub mod venv;
