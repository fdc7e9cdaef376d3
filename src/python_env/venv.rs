//! `pi-repl setup`: the per-user Python environment at `PI_REPL_HOME/venv`.
//!
//! Owns: creating the venv, installing the pinned requirements (`python/requirements.lock`,
//! embedded), and deciding whether an existing venv is ready. Idempotent: a ready venv carries
//! a marker naming the lock it was built from, so a re-run is instant and a new lock rebuilds.
//!
//! Invariants: two processes never build at once (an exclusive lock on `venv.lock`); the marker
//! is written last, so a half-built venv is never "ready"; progress goes to stderr only.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::fsutil::create_private_dir;
use crate::home::Home;
use crate::python_env::embedded_package::REQUIREMENTS_LOCK;
use crate::python_env::find_on_path;

/// File inside the venv recording which lock it was built from.
const MARKER: &str = "pi-repl-requirements.hash";

/// Python modules a ready venv must import.
const REQUIRED_MODULES: &str = "ipykernel, cloudpickle, zstandard, xxhash";

/// The oldest Python the pinned requirements support (IPython 9).
const MIN_PYTHON: (u32, u32) = (3, 11);

/// The interpreter inside the venv.
pub fn venv_python(home: &Home) -> PathBuf {
    home.venv().join("bin").join("python")
}

/// True when the venv exists and was built from this binary's lock.
pub fn venv_is_ready(home: &Home) -> bool {
    let marker = home.venv().join(MARKER);
    match std::fs::read_to_string(marker) {
        Ok(recorded) => recorded.trim() == lock_hash() && venv_python(home).exists(),
        Err(_) => false,
    }
}

/// The pins worth naming in a hint: `ipykernel==…`, then the kernel-side module's wheels.
pub fn headline_requirements() -> Vec<&'static str> {
    ["ipykernel==", "cloudpickle==", "zstandard==", "xxhash=="]
        .iter()
        .filter_map(|name| {
            REQUIREMENTS_LOCK
                .lines()
                .map(str::trim)
                .find(|line| line.starts_with(name))
        })
        .collect()
}

/// The lock file's fingerprint, stable across builds and Rust releases (xxh3), so a venv built
/// by one pi-repl is recognised by the next one built from the same lock.
fn lock_hash() -> String {
    format!(
        "{:016x}",
        xxhash_rust::xxh3::xxh3_64(REQUIREMENTS_LOCK.as_bytes())
    )
}

/// What `run` did.
#[derive(Debug)]
pub struct SetupReport {
    pub python: PathBuf,
    /// False when the venv was already ready and nothing was done.
    pub built: bool,
    pub elapsed: Duration,
}

/// Makes sure the venv is ready, building it if it is missing, stale or `force` is set.
/// `base` is the interpreter that creates the venv (default: `python3` on `PATH`).
pub fn run(home: &Home, base: Option<&Path>, force: bool) -> anyhow::Result<SetupReport> {
    let started = Instant::now();
    create_private_dir(home.root())?;
    let _lock = lock_exclusively(&home.root().join("venv.lock"))?;
    if !force && venv_is_ready(home) {
        return Ok(SetupReport {
            python: venv_python(home),
            built: false,
            elapsed: started.elapsed(),
        });
    }
    let base = match base {
        Some(path) => path.to_path_buf(),
        None => find_on_path("python3").context(
            "no python3 on PATH to build the environment from\n\
             hint: install Python 3.11 or newer, or pass one with `pi-repl setup --python PATH`",
        )?,
    };
    let version = python_version(&base)?;
    if version < MIN_PYTHON {
        bail!(
            "{} is Python {}.{}; the kernel needs Python {}.{} or newer\n\
             hint: pass a newer interpreter with `pi-repl setup --python PATH`",
            base.display(),
            version.0,
            version.1,
            MIN_PYTHON.0,
            MIN_PYTHON.1
        );
    }
    let venv = home.venv();
    progress(&format!(
        "creating the Python environment in {} (Python {}.{} from {})",
        venv.display(),
        version.0,
        version.1,
        base.display()
    ));
    if venv.exists() {
        std::fs::remove_dir_all(&venv)
            .with_context(|| format!("cannot remove the old environment {}", venv.display()))?;
    }
    run_step(
        Command::new(&base).arg("-m").arg("venv").arg(&venv),
        "creating the venv",
    )?;
    let lock_file = venv.join("pi-repl-requirements.lock");
    crate::fsutil::write_atomic(&lock_file, REQUIREMENTS_LOCK.as_bytes())?;
    let pins = REQUIREMENTS_LOCK
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .count();
    progress(&format!(
        "installing {} and {} other pinned packages",
        headline_requirements().join(", "),
        pins.saturating_sub(headline_requirements().len())
    ));
    let python = venv_python(home);
    let mut pip = Command::new(&python);
    pip.args([
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--no-input",
        "-r",
    ])
    .arg(&lock_file);
    if !std::io::stderr().is_terminal() {
        pip.arg("--quiet");
    }
    run_step(&mut pip, "installing the pinned packages")?;
    run_step(
        Command::new(&python)
            .arg("-c")
            .arg(format!("import {REQUIRED_MODULES}")),
        "checking the installed packages",
    )?;
    crate::fsutil::write_atomic(&venv.join(MARKER), lock_hash().as_bytes())
        .context("cannot mark the venv as ready")?;
    progress(&format!(
        "environment ready in {:.1}s",
        started.elapsed().as_secs_f64()
    ));
    Ok(SetupReport {
        python,
        built: true,
        elapsed: started.elapsed(),
    })
}

/// One line of progress on stderr.
pub(crate) fn progress(message: &str) {
    crate::stderr_line!("pi-repl: {message}");
}

/// Runs a build step. On a terminal its output is shown live (pip draws its own progress);
/// otherwise it is captured and its tail is quoted if the step fails.
pub(crate) fn run_step(command: &mut Command, what: &str) -> anyhow::Result<()> {
    let program = command.get_program().to_string_lossy().into_owned();
    if std::io::stderr().is_terminal() {
        let status = command
            .stdin(Stdio::null())
            .stdout(std::io::stderr())
            .status()
            .with_context(|| format!("{what}: cannot run {program}"))?;
        if !status.success() {
            bail!("{what} failed ({status})\nhint: see the output above; PyPI must be reachable");
        }
        return Ok(());
    }
    let output = command
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("{what}: cannot run {program}"))?;
    if !output.status.success() {
        let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&output.stderr));
        let tail: Vec<&str> = text.lines().rev().take(20).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        bail!(
            "{what} failed ({})\n{}\nhint: PyPI must be reachable; re-run `pi-repl setup` once it is",
            output.status,
            tail.join("\n")
        );
    }
    Ok(())
}

fn python_version(python: &Path) -> anyhow::Result<(u32, u32)> {
    let output = Command::new(python)
        .args([
            "-c",
            "import sys; print(sys.version_info[0], sys.version_info[1])",
        ])
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {}", python.display()))?;
    let text = String::from_utf8_lossy(&output.stdout);
    let mut parts = text.split_whitespace().map(str::parse::<u32>);
    match (parts.next(), parts.next()) {
        (Some(Ok(major)), Some(Ok(minor))) if output.status.success() => Ok((major, minor)),
        _ => bail!("{} did not report a Python version", python.display()),
    }
}

/// Holds an exclusive `flock` on `path` until dropped.
pub(crate) fn lock_exclusively(path: &Path) -> anyhow::Result<nix::fcntl::Flock<std::fs::File>> {
    let file = crate::fsutil::open_private(path, crate::fsutil::Open::Lock)
        .with_context(|| format!("cannot open {}", path.display()))?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, errno)| anyhow::anyhow!("cannot lock {}: {errno}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_hash_is_xxh3_of_the_lock() {
        // Stable across compilers: Python's `xxhash.xxh3_64_hexdigest(b"abc")` gives the same.
        assert_eq!(
            format!("{:016x}", xxhash_rust::xxh3::xxh3_64(b"abc")),
            "78af5f94892f3950"
        );
        assert_eq!(
            lock_hash(),
            format!(
                "{:016x}",
                xxhash_rust::xxh3::xxh3_64(REQUIREMENTS_LOCK.as_bytes())
            )
        );
    }

    #[test]
    fn headline_requirements_are_pinned() {
        let names = headline_requirements();
        assert_eq!(names.len(), 4, "{names:?}");
        assert!(names.iter().all(|n| n.contains("==")));
    }

    #[test]
    fn a_venv_without_marker_is_not_ready() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::at(tmp.path());
        std::fs::create_dir_all(home.venv().join("bin")).unwrap();
        std::fs::write(venv_python(&home), "").unwrap();
        assert!(!venv_is_ready(&home));
        std::fs::write(home.venv().join(MARKER), lock_hash()).unwrap();
        assert!(venv_is_ready(&home));
        std::fs::write(home.venv().join(MARKER), "old").unwrap();
        assert!(!venv_is_ready(&home));
    }
}
