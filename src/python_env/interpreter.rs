//! Which Python runs the kernel.
//!
//! Order: `--python` (or `PI_REPL_PYTHON`, read by the CLI with its flag), then the Python environment this binary was
//! installed into (a `pip install pi-repl` / `uvx pi-repl` wheel puts `pi-repl` in a venv's
//! `bin/` next to its `python`, and the wheel's dependencies put ipykernel there), then the
//! per-user venv, then `python3` on `PATH`.
//! A `.venv` in the working directory is never picked implicitly: a stray venv without
//! ipykernel would kill every kernel. Whether the chosen interpreter can really run the kernel
//! is learnt when it boots (the launcher exits with a dedicated status), so resolution costs
//! no extra process on the happy path.

use std::path::{Path, PathBuf};

use crate::env_vars;
use crate::home::Home;
use crate::python_env::{find_on_path, is_executable, venv};

/// Where the chosen interpreter came from; error hints depend on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `--python`.
    Flag,
    /// `PI_REPL_PYTHON`.
    EnvVar,
    /// The venv this binary was installed into by its wheel (`bin/python` beside `pi-repl`).
    Installed,
    /// `PI_REPL_HOME/venv`, made by `pi-repl setup`.
    Venv,
    /// `python3` found on `PATH`.
    Path,
}

/// A Python interpreter and why it was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interpreter {
    pub path: PathBuf,
    pub source: Source,
}

impl Interpreter {
    /// How to name this interpreter in a message, e.g. "--python /usr/bin/python3".
    pub fn describe(&self) -> String {
        let path = self.path.display();
        match self.source {
            Source::Flag => format!("--python {path}"),
            Source::EnvVar => format!("{}={path}", env_vars::PI_REPL_PYTHON),
            Source::Installed => format!("the environment pi-repl is installed in ({path})"),
            Source::Venv => format!("pi-repl's venv ({path})"),
            Source::Path => format!("python3 on PATH ({path})"),
        }
    }

    /// The fix for "this interpreter has no ipykernel", as a command to run.
    pub fn missing_kernel_hint(&self) -> String {
        match self.source {
            Source::Flag | Source::EnvVar => format!(
                "install the kernel into it with `{} -m pip install {}`, or drop {} to use \
                 pi-repl's own environment (`pi-repl setup`)",
                self.path.display(),
                venv::headline_requirements().join(" "),
                if self.source == Source::Flag {
                    "--python".to_string()
                } else {
                    env_vars::PI_REPL_PYTHON.to_string()
                }
            ),
            Source::Installed => format!(
                "reinstall pi-repl into it (its wheel requires the kernel's packages), or install \
                 them with `{} -m pip install {}`",
                self.path.display(),
                venv::headline_requirements().join(" ")
            ),
            Source::Venv => {
                "the environment is damaged; rebuild it with `pi-repl setup --force`".to_string()
            }
            Source::Path => {
                "run `pi-repl setup` to create pi-repl's own Python environment".to_string()
            }
        }
    }
}

/// The outcome of looking for an interpreter without creating anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    Found(Interpreter),
    /// Nothing explicit and no ready venv: setup should run. `fallback` is `python3` on `PATH`,
    /// if there is one, for when setup cannot.
    NeedsSetup {
        fallback: Option<Interpreter>,
    },
}

/// Errors a user can fix by naming a different interpreter.
#[derive(Debug, thiserror::Error)]
pub enum InterpreterError {
    #[error("{described} does not exist or is not executable")]
    NotFound { described: String },
}

/// Looks for the interpreter in the documented order. `named` is the one the user named, with
/// where they named it (`--python` or `PI_REPL_PYTHON`, both read with the command line).
pub fn resolve(
    named: Option<(&Path, Source)>,
    home: &Home,
) -> Result<Resolution, InterpreterError> {
    if let Some((path, source)) = named {
        return explicit(path, source).map(Resolution::Found);
    }
    if let Some(path) = std::env::current_exe()
        .ok()
        .and_then(|exe| installed_environment_python(&exe))
    {
        return Ok(Resolution::Found(Interpreter {
            path,
            source: Source::Installed,
        }));
    }
    if venv::venv_is_ready(home) {
        return Ok(Resolution::Found(Interpreter {
            path: venv::venv_python(home),
            source: Source::Venv,
        }));
    }
    let fallback = find_on_path("python3").map(|path| Interpreter {
        path,
        source: Source::Path,
    });
    Ok(Resolution::NeedsSetup { fallback })
}

fn explicit(path: &Path, source: Source) -> Result<Interpreter, InterpreterError> {
    let described = match source {
        Source::Flag => format!("--python {}", path.display()),
        _ => format!("{}={}", env_vars::PI_REPL_PYTHON, path.display()),
    };
    let found = if path.components().count() == 1 {
        find_on_path(path.as_os_str().to_str().unwrap_or_default())
    } else if is_executable(path) {
        Some(path.to_path_buf())
    } else {
        None
    };
    found
        .map(|path| Interpreter { path, source })
        .ok_or(InterpreterError::NotFound { described })
}

/// The interpreter of the venv `exe` sits in: `exe` is `<venv>/bin/pi-repl`, `<venv>/pyvenv.cfg`
/// exists and `<venv>/bin/python` is executable. That is where a wheel install (pip, uv, pipx,
/// uvx) puts the binary, next to the kernel packages the wheel requires. A binary anywhere else
/// (`~/.cargo/bin`, a system `bin/`) has none: a system Python is never picked this way.
pub fn installed_environment_python(exe: &Path) -> Option<PathBuf> {
    let bin = exe.parent()?;
    let venv = bin.parent()?;
    let python = bin.join("python");
    (venv.join("pyvenv.cfg").is_file() && is_executable(&python)).then_some(python)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_flag_interpreter_is_an_error_naming_the_flag() {
        let home = Home::at("/nonexistent-home");
        let error = resolve(Some((Path::new("/no/such/python"), Source::Flag)), &home).unwrap_err();
        assert_eq!(
            error.to_string(),
            "--python /no/such/python does not exist or is not executable"
        );
        let error =
            resolve(Some((Path::new("/no/such/python"), Source::EnvVar)), &home).unwrap_err();
        assert_eq!(
            error.to_string(),
            "PI_REPL_PYTHON=/no/such/python does not exist or is not executable"
        );
    }

    #[test]
    fn a_binary_in_a_venv_uses_that_venvs_python() {
        let tmp = tempfile::tempdir().unwrap();
        let bin = tmp.path().join("venv/bin");
        std::fs::create_dir_all(&bin).unwrap();
        let python = bin.join("python");
        std::fs::write(&python, "").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
        let exe = bin.join("pi-repl");
        // Without pyvenv.cfg this is just some bin/ directory: not an installed environment.
        assert_eq!(installed_environment_python(&exe), None);
        std::fs::write(tmp.path().join("venv/pyvenv.cfg"), "home = /usr/bin\n").unwrap();
        assert_eq!(installed_environment_python(&exe), Some(python));
    }

    #[test]
    fn a_cwd_venv_is_never_chosen() {
        let tmp = tempfile::tempdir().unwrap();
        let venv_python = tmp.path().join(".venv/bin/python3");
        std::fs::create_dir_all(venv_python.parent().unwrap()).unwrap();
        std::fs::write(&venv_python, "").unwrap();
        let home = Home::at(tmp.path().join("home"));
        match resolve(None, &home).unwrap() {
            Resolution::NeedsSetup { fallback } => {
                if let Some(found) = fallback {
                    assert!(!found.path.starts_with(tmp.path()), "{found:?}");
                }
            }
            Resolution::Found(found) => {
                // Only PI_REPL_PYTHON (set by the caller's environment) can explain this.
                assert_eq!(found.source, Source::EnvVar);
            }
        }
    }

    #[test]
    fn the_hint_for_an_explicit_interpreter_names_pip_and_the_flag() {
        let interpreter = Interpreter {
            path: PathBuf::from("/opt/py/bin/python"),
            source: Source::Flag,
        };
        let hint = interpreter.missing_kernel_hint();
        assert!(
            hint.contains("/opt/py/bin/python -m pip install ipykernel=="),
            "{hint}"
        );
        assert!(hint.contains("drop --python"), "{hint}");
    }
}
