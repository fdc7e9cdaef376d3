//! `pi-repl setup --deno`: Deno, the JavaScript/TypeScript evaluator, and its kernelspec.
//!
//! Owns: installing the pinned `deno` package from PyPI (it ships the `deno` binary) with pip
//! into `PI_REPL_HOME/deno`, and writing the `deno` kernelspec into pi-repl's own Jupyter path
//! (`PI_REPL_HOME/jupyter/kernels/deno`), where `--kernel deno` finds it first.
//! Does not own: running the kernel (`kernel::launch::spawn_kernelspec`).
//!
//! Invariants: idempotent (a marker naming the pin is written last, after the binary answered
//! `--version`; a re-run with the same pin only rewrites the kernelspec); two processes never
//! install at once (`deno.lock`); a half-done install is staged beside and never in place.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, bail};

use crate::fsutil::{create_private_dir, write_atomic};
use crate::home::Home;
use crate::python_env::venv::{lock_exclusively, progress, run_step};

/// The pinned `deno` package (the same as the tests' `python/test-requirements.txt`).
pub const DENO_PIN: &str = "deno==2.9.8";

/// File inside `PI_REPL_HOME/deno` naming the pin it was installed from.
const MARKER: &str = "pi-repl-deno.pin";

/// What `install` did.
#[derive(Debug)]
pub struct DenoReport {
    /// The `deno` binary.
    pub deno: PathBuf,
    /// Its `kernel.json`.
    pub kernelspec: PathBuf,
    /// False when the pinned Deno was already installed.
    pub installed: bool,
}

/// Where the binary lives once installed.
pub fn deno_binary(home: &Home) -> PathBuf {
    home.root().join("deno").join("bin").join("deno")
}

/// Installs the pinned Deno with `python`'s pip unless it is already there (or `force`), then
/// (re)writes the kernelspec.
pub fn install(home: &Home, python: &Path, force: bool) -> anyhow::Result<DenoReport> {
    create_private_dir(home.root())?;
    let _lock = lock_exclusively(&home.root().join("deno.lock"))?;
    let dir = home.root().join("deno");
    let deno = deno_binary(home);
    let ready = !force
        && std::fs::read_to_string(dir.join(MARKER)).is_ok_and(|pin| pin.trim() == DENO_PIN)
        && deno.is_file();
    if !ready {
        progress(&format!(
            "installing {DENO_PIN} (the Deno binary, from PyPI) into {}",
            dir.display()
        ));
        let staging = home
            .root()
            .join(format!(".deno-staging-{}", std::process::id()));
        // A staging dir of this pid left by an earlier crash, if any; none is the usual case.
        let _ = std::fs::remove_dir_all(&staging);
        let mut pip = Command::new(python);
        pip.args([
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-input",
            "--quiet",
            "--no-deps",
            "--target",
        ])
        .arg(&staging)
        .arg(DENO_PIN);
        if let Err(error) = run_step(&mut pip, "installing Deno") {
            // Best effort: the install's own error is the one to report.
            let _ = std::fs::remove_dir_all(&staging);
            return Err(error);
        }
        let staged = staging.join("bin").join("deno");
        let version = match deno_version(&staged) {
            Ok(version) => version,
            Err(error) => {
                // Best effort, as above: the binary's failure is the one to report.
                let _ = std::fs::remove_dir_all(&staging);
                return Err(error);
            }
        };
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .with_context(|| format!("cannot remove the old {}", dir.display()))?;
        }
        std::fs::rename(&staging, &dir)
            .with_context(|| format!("cannot move Deno into {}", dir.display()))?;
        write_atomic(&dir.join(MARKER), DENO_PIN.as_bytes())
            .context("cannot mark Deno as installed")?;
        progress(&format!("{version} installed"));
    }
    let kernelspec = write_kernelspec(home, &deno)?;
    Ok(DenoReport {
        deno,
        kernelspec,
        installed: !ready,
    })
}

/// The kernelspec `deno jupyter --install` would write, with the absolute binary, written
/// into pi-repl's Jupyter path; `interrupt_mode: message` because Deno's kernel ends on SIGINT
/// but stops the running cell on an `interrupt_request`. Returns the `kernel.json` written.
pub fn write_kernelspec(home: &Home, deno: &Path) -> anyhow::Result<PathBuf> {
    let dir = home.jupyter().join("kernels").join("deno");
    create_private_dir(&dir)?;
    let spec = serde_json::json!({
        "argv": [deno, "jupyter", "--kernel", "--conn", "{connection_file}"],
        "display_name": "Deno",
        "language": "typescript",
        "interrupt_mode": "message",
    });
    let path = dir.join("kernel.json");
    let text = serde_json::to_string_pretty(&spec).context("cannot encode the kernelspec")?;
    write_atomic(&path, text.as_bytes())?;
    Ok(path)
}

/// `deno --version`'s first line (`deno 2.9.8 (stable, …)`), or why the binary cannot run.
fn deno_version(deno: &Path) -> anyhow::Result<String> {
    let output = Command::new(deno)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {}", deno.display()))?;
    let text = String::from_utf8_lossy(&output.stdout);
    match text.lines().next() {
        Some(line) if output.status.success() && line.starts_with("deno ") => {
            Ok(line.split(" (").next().unwrap_or(line).to_string())
        }
        _ => bail!(
            "{} did not report its version ({})",
            deno.display(),
            output.status
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pin_matches_the_tests_requirements() {
        let requirements = include_str!("../../python/test-requirements.txt");
        assert!(
            requirements.lines().any(|line| line.trim() == DENO_PIN),
            "python/test-requirements.txt pins another deno than {DENO_PIN}"
        );
    }
}
