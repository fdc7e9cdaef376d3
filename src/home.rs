//! The fixed layout under `PI_REPL_HOME` (default `~/.pi/agent/pi-repl`).
//!
//! ```text
//! venv/      the interpreter with ipykernel and the kernel-side module's wheels
//! helpers/   global helpers
//! state/     one directory per session
//! outputs/   full output of truncated cells in ephemeral workspaces
//! lib/       the kernel-side Python module, unpacked from this binary (one dir per version)
//! ipython/   IPYTHONDIR for kernels, so a user's IPython profile does not leak into cells
//! jupyter/   pi-repl's own Jupyter path: kernels/<name>/kernel.json for --kernel NAME
//! deno/      the Deno binary `setup --deno` installs (bin/deno)
//! ```
//!
//! Every path pi-repl writes is derived from here, so `PI_REPL_HOME` relocates all of it.
//! Directories are created 0700 on first use.

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::env_vars;

/// The root of pi-repl's files and the named places inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Home {
    root: PathBuf,
}

impl Home {
    /// `PI_REPL_HOME` if set, else `~/.pi/agent/pi-repl`.
    pub fn from_env() -> anyhow::Result<Home> {
        if let Some(root) = std::env::var_os(env_vars::PI_REPL_HOME).filter(|v| !v.is_empty()) {
            return Ok(Home::at(absolute(Path::new(&root))?));
        }
        let user_home = std::env::home_dir()
            .filter(|p| !p.as_os_str().is_empty())
            .context("cannot find your home directory; set PI_REPL_HOME to where pi-repl may keep its files")?;
        Ok(Home::at(
            user_home.join(".pi").join("agent").join("pi-repl"),
        ))
    }

    /// A home rooted at `root` (used by tests and by `from_env`).
    pub fn at(root: impl Into<PathBuf>) -> Home {
        Home { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn venv(&self) -> PathBuf {
        self.root.join("venv")
    }

    pub fn helpers(&self) -> PathBuf {
        self.root.join("helpers")
    }

    pub fn state(&self) -> PathBuf {
        self.root.join("state")
    }

    pub fn outputs(&self) -> PathBuf {
        self.root.join("outputs")
    }

    pub fn lib(&self) -> PathBuf {
        self.root.join("lib")
    }

    pub fn ipython(&self) -> PathBuf {
        self.root.join("ipython")
    }

    /// pi-repl's own Jupyter data directory: `kernels/<name>/kernel.json` here are found by
    /// `--kernel NAME` before Jupyter's standard paths (`pi-repl setup --deno` installs here).
    pub fn jupyter(&self) -> PathBuf {
        self.root.join("jupyter")
    }
}

fn absolute(path: &Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(path).with_context(|| format!("cannot resolve {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_lives_under_the_root() {
        let home = Home::at("/x/home");
        for path in [
            home.venv(),
            home.helpers(),
            home.state(),
            home.outputs(),
            home.lib(),
            home.ipython(),
        ] {
            assert!(path.starts_with("/x/home"), "{path:?}");
        }
    }

    #[test]
    fn private_dirs_are_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b");
        crate::fsutil::create_private_dir(&dir).unwrap();
        for created in [tmp.path().join("a"), dir] {
            let mode = std::fs::metadata(&created).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o700, "{}", created.display());
        }
    }
}
