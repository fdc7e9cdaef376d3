//! Installed Jupyter kernelspecs on this machine, for `--kernel NAME` without `--jupyter-url`.
//!
//! Owns: where kernelspecs are looked for (pi-repl's own Jupyter path first, then Jupyter's
//! standard ones), reading a `kernels/<name>/kernel.json`, and the error that lists what is
//! installed when a name is not.
//! Does not own: launching the kernel a kernelspec describes (`launch::spawn_kernelspec`).
//!
//! Invariant: the first directory that has a kernelspec of a name wins, as in Jupyter.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::env_vars;
use crate::home::Home;

/// A kernelspec read from `<dir>/kernel.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct Kernelspec {
    /// Its directory's name, what `--kernel` selects.
    pub name: String,
    /// The directory holding `kernel.json`.
    pub dir: PathBuf,
    /// The command; `{connection_file}` stands for the connection file's path.
    pub argv: Vec<String>,
    pub display_name: String,
    /// The language the kernelspec declares (the kernel's `kernel_info_reply` has the last word).
    pub language: String,
    /// Variables the kernelspec adds to the kernel's environment.
    pub env: HashMap<String, String>,
    /// `message`: interrupted with an `interrupt_request` on the control channel; otherwise
    /// with SIGINT (Jupyter's default, `signal`).
    pub interrupt_by_message: bool,
}

impl Kernelspec {
    /// True when the kernelspec declares a Python kernel.
    pub fn is_python(&self) -> bool {
        self.language.eq_ignore_ascii_case("python")
    }
}

/// Why `--kernel NAME` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KernelspecError {
    #[error(
        "no kernelspec named `{name}` is installed{}",
        installed_suffix(installed)
    )]
    NotFound {
        name: String,
        /// Every installed name, in search order.
        installed: Vec<String>,
        searched: Vec<PathBuf>,
    },
    #[error("the kernelspec `{name}` ({}) cannot be used: {detail}", path.display())]
    Invalid {
        name: String,
        path: PathBuf,
        detail: String,
    },
}

impl KernelspecError {
    /// Where pi-repl looked, and how to get Deno's kernel.
    pub fn hint(&self) -> String {
        match self {
            KernelspecError::NotFound { searched, .. } => format!(
                "searched {}; `pi-repl setup --deno` installs Deno's kernel as `deno`; \
                 `jupyter kernelspec list` shows Jupyter's view",
                searched
                    .iter()
                    .map(|dir| dir.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            KernelspecError::Invalid { .. } => {
                "fix or reinstall that kernelspec (its kernel.json)".to_string()
            }
        }
    }
}

fn installed_suffix(installed: &[String]) -> String {
    if installed.is_empty() {
        "; none are installed".to_string()
    } else {
        format!("; installed: {}", installed.join(", "))
    }
}

/// The `kernels` directories searched, in order: pi-repl's own (`PI_REPL_HOME/jupyter`, where
/// `pi-repl setup --deno` installs), then Jupyter's: each of `JUPYTER_PATH`, the user's data
/// directory (`JUPYTER_DATA_DIR`, else `$XDG_DATA_HOME/jupyter` or `~/.local/share/jupyter`),
/// pi-repl's venv's `share/jupyter`, and the system's (`/usr/local/share/jupyter`,
/// `/usr/share/jupyter`).
pub fn search_path(home: &Home) -> Vec<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty());
    let mut data_dirs = vec![home.jupyter()];
    if let Some(paths) = var(env_vars::JUPYTER_PATH) {
        data_dirs.extend(std::env::split_paths(&paths));
    }
    match var(env_vars::JUPYTER_DATA_DIR) {
        Some(dir) => data_dirs.push(PathBuf::from(dir)),
        None => {
            let data_home = var("XDG_DATA_HOME")
                .map(PathBuf::from)
                .or_else(|| var("HOME").map(|home| PathBuf::from(home).join(".local/share")));
            if let Some(data_home) = data_home {
                data_dirs.push(data_home.join("jupyter"));
            }
        }
    }
    data_dirs.push(home.venv().join("share/jupyter"));
    data_dirs.push(PathBuf::from("/usr/local/share/jupyter"));
    data_dirs.push(PathBuf::from("/usr/share/jupyter"));
    let mut kernels: Vec<PathBuf> = Vec::new();
    for dir in data_dirs {
        let dir = dir.join("kernels");
        if !kernels.contains(&dir) {
            kernels.push(dir);
        }
    }
    kernels
}

/// The kernelspec `name` from the first of `search` that has it.
pub fn find(name: &str, search: &[PathBuf]) -> Result<Kernelspec, KernelspecError> {
    for kernels in search {
        let dir = kernels.join(name);
        if dir.join("kernel.json").is_file() {
            return read(name, &dir);
        }
    }
    Err(KernelspecError::NotFound {
        name: name.to_string(),
        installed: installed(search),
        searched: search.to_vec(),
    })
}

/// The names of every kernelspec in `search` (each once, in search order).
pub fn installed(search: &[PathBuf]) -> Vec<String> {
    let mut names = Vec::new();
    for kernels in search {
        let Ok(entries) = std::fs::read_dir(kernels) else {
            continue;
        };
        let mut here: Vec<String> = entries
            .flatten()
            .filter(|entry| entry.path().join("kernel.json").is_file())
            .filter_map(|entry| entry.file_name().to_str().map(String::from))
            .filter(|name| !names.contains(name))
            .collect();
        here.sort();
        names.extend(here);
    }
    names
}

/// Reads `<dir>/kernel.json`.
fn read(name: &str, dir: &Path) -> Result<Kernelspec, KernelspecError> {
    let path = dir.join("kernel.json");
    let invalid = |detail: String| KernelspecError::Invalid {
        name: name.to_string(),
        path: path.clone(),
        detail,
    };
    let text = std::fs::read_to_string(&path).map_err(|error| invalid(error.to_string()))?;
    let spec: jupyter_protocol::JupyterKernelspec =
        serde_json::from_str(&text).map_err(|error| invalid(error.to_string()))?;
    if spec.argv.is_empty() {
        return Err(invalid("its argv is empty".into()));
    }
    if !spec
        .argv
        .iter()
        .any(|arg| arg.contains("{connection_file}"))
    {
        return Err(invalid(
            "its argv has no {connection_file}: the kernel would not know where to listen".into(),
        ));
    }
    Ok(Kernelspec {
        name: name.to_string(),
        dir: dir.to_path_buf(),
        argv: spec.argv,
        display_name: spec.display_name,
        language: spec.language,
        env: spec.env.unwrap_or_default(),
        interrupt_by_message: spec.interrupt_mode.as_deref() == Some("message"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_spec(kernels: &Path, name: &str, json: &str) {
        let dir = kernels.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("kernel.json"), json).unwrap();
    }

    const DENO: &str = r#"{"argv": ["deno", "jupyter", "--kernel", "--conn", "{connection_file}"],
        "display_name": "Deno", "language": "typescript", "interrupt_mode": "message",
        "env": {"NO_COLOR": "1"}}"#;

    #[test]
    fn the_first_directory_with_the_name_wins_and_its_fields_are_read() {
        let tmp = tempfile::tempdir().unwrap();
        let (first, second) = (tmp.path().join("a"), tmp.path().join("b"));
        write_spec(&first, "deno", DENO);
        write_spec(
            &second,
            "deno",
            r#"{"argv": ["other", "{connection_file}"], "display_name": "x", "language": "x"}"#,
        );
        let spec = find("deno", &[first.clone(), second]).unwrap();
        assert_eq!(spec.argv[0], "deno");
        assert_eq!(spec.dir, first.join("deno"));
        assert_eq!(spec.language, "typescript");
        assert!(spec.interrupt_by_message);
        assert!(!spec.is_python());
        assert_eq!(spec.env.get("NO_COLOR").map(String::as_str), Some("1"));
    }

    #[test]
    fn a_missing_name_lists_the_installed_ones_once() {
        let tmp = tempfile::tempdir().unwrap();
        let (first, second) = (tmp.path().join("a"), tmp.path().join("b"));
        write_spec(&first, "deno", DENO);
        write_spec(&second, "deno", DENO);
        write_spec(&second, "ir", DENO);
        // A directory without kernel.json is not a kernelspec.
        std::fs::create_dir_all(second.join("empty")).unwrap();
        let search = [first, second, tmp.path().join("missing")];
        let error = find("julia", &search).unwrap_err();
        let message = error.to_string();
        assert_eq!(
            message,
            "no kernelspec named `julia` is installed; installed: deno, ir"
        );
        assert!(
            error
                .hint()
                .contains(&tmp.path().join("missing").display().to_string())
        );
        assert!(
            find("julia", &[tmp.path().join("missing")])
                .unwrap_err()
                .to_string()
                .ends_with("none are installed")
        );
    }

    #[test]
    fn a_kernelspec_without_a_connection_file_argument_is_invalid() {
        let tmp = tempfile::tempdir().unwrap();
        write_spec(
            tmp.path(),
            "odd",
            r#"{"argv": ["kernel"], "display_name": "Odd", "language": "odd"}"#,
        );
        write_spec(tmp.path(), "broken", "{not json");
        let search = [tmp.path().to_path_buf()];
        assert!(matches!(
            find("odd", &search),
            Err(KernelspecError::Invalid { .. })
        ));
        let broken = find("broken", &search).unwrap_err().to_string();
        assert!(
            broken.contains("broken") && broken.contains("kernel.json"),
            "{broken}"
        );
    }

    #[test]
    fn pi_repls_own_jupyter_path_comes_first() {
        let home = Home::at("/tmp/pi-repl-home");
        let search = search_path(&home);
        assert_eq!(
            search[0],
            PathBuf::from("/tmp/pi-repl-home/jupyter/kernels")
        );
        assert!(search.contains(&PathBuf::from("/usr/share/jupyter/kernels")));
        assert!(search.contains(&PathBuf::from(
            "/tmp/pi-repl-home/venv/share/jupyter/kernels"
        )));
    }

    #[test]
    fn the_deno_kernelspec_setup_writes_names_the_binary_and_interrupts_by_message() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::at(tmp.path());
        let path =
            crate::python_env::deno::write_kernelspec(&home, Path::new("/opt/deno/bin/deno"))
                .unwrap();
        let spec = find("deno", &search_path(&home)).unwrap();
        assert_eq!(spec.dir, path.parent().unwrap());
        assert_eq!(spec.argv[0], "/opt/deno/bin/deno");
        assert!(spec.interrupt_by_message);
        assert_eq!(spec.language, "typescript");
    }
}
