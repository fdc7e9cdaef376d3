//! Which helper files a session loads, from where, and what shadows what.
//!
//! Owns: discovery. Helper files are collected from the project's `.pi/helpers/` directories
//! (the session's working directory, then each parent up to the git root; outside a git
//! repository only the working directory's), then the global `PI_REPL_HOME/helpers/`, then the
//! default toolbox built into pi-repl. The first file seen with a given name wins, so a
//! project helper shadows a global one and a helper named like a default tool replaces it.
//! Files whose name starts with `_` are skipped. Loading them is the engine's job (one cell per
//! file, through `pi_repl_kernel.helpers.load`); the description the model sees lists exactly
//! what loaded.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Where a helper file comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Origin {
    /// A project's `.pi/helpers/` directory.
    Project { dir: PathBuf },
    /// `PI_REPL_HOME/helpers/`.
    Global,
    /// pi-repl's own default toolbox.
    Default,
}

impl Origin {
    pub fn describe(&self) -> String {
        match self {
            Origin::Project { dir } => format!("project ({})", dir.display()),
            Origin::Global => "global".to_string(),
            Origin::Default => "default toolbox".to_string(),
        }
    }
}

/// A helper file that will load.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HelperFile {
    /// The file name (`read.py`), which is what shadowing compares.
    pub name: String,
    pub path: PathBuf,
    pub origin: Origin,
    /// Files with the same name further down the search order, which this one hides.
    pub shadows: Vec<PathBuf>,
}

/// The result of a search.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Discovery {
    /// Winning files, highest priority first.
    pub files: Vec<HelperFile>,
    /// `_`-prefixed files that were skipped.
    pub skipped: Vec<PathBuf>,
}

impl Discovery {
    /// The order to load in: lowest priority first, so that a function defined by a nearer
    /// file wins when two files bind the same name.
    pub fn load_order(&self) -> Vec<PathBuf> {
        self.files.iter().rev().map(|f| f.path.clone()).collect()
    }
}

/// The project's `.pi/helpers/` directories that exist, nearest first.
pub fn project_dirs(cwd: &Path) -> Vec<PathBuf> {
    let root = git_root(cwd);
    let mut dirs = Vec::new();
    let mut current = Some(cwd);
    while let Some(dir) = current {
        let helpers = dir.join(".pi").join("helpers");
        if helpers.is_dir() {
            dirs.push(helpers);
        }
        match &root {
            Some(root) if dir != root => current = dir.parent(),
            _ => break,
        }
    }
    dirs
}

/// The nearest ancestor of `dir` (or `dir` itself) that holds `.git`.
pub fn git_root(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .find(|candidate| candidate.join(".git").exists())
        .map(Path::to_path_buf)
}

/// Finds the helper files for a session in `cwd`.
pub fn discover(cwd: &Path, global_dir: &Path, toolbox_dir: &Path) -> Discovery {
    let mut sources: Vec<(PathBuf, Origin)> = project_dirs(cwd)
        .into_iter()
        .map(|dir| (dir.clone(), Origin::Project { dir }))
        .collect();
    sources.push((global_dir.to_path_buf(), Origin::Global));
    sources.push((toolbox_dir.to_path_buf(), Origin::Default));
    let mut discovery = Discovery::default();
    for (dir, origin) in sources {
        for path in python_files(&dir) {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if name.starts_with('_') {
                discovery.skipped.push(path);
                continue;
            }
            match discovery.files.iter_mut().find(|f| f.name == name) {
                Some(winner) => winner.shadows.push(path),
                None => discovery.files.push(HelperFile {
                    name,
                    path,
                    origin: origin.clone(),
                    shadows: Vec::new(),
                }),
            }
        }
    }
    discovery
}

/// `*.py` files directly in `dir`, sorted by name (a missing dir has none).
fn python_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "py"))
        .collect();
    files.sort();
    files
}

/// What loading one helper file did (the kernel's `helpers.load` record).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadRecord {
    pub file: String,
    #[serde(default)]
    pub summary: Option<String>,
    #[serde(default)]
    pub functions: Vec<LoadedFunction>,
    #[serde(default)]
    pub error: Option<LoadError>,
}

/// One function a helper bound.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadedFunction {
    pub name: String,
    #[serde(default)]
    pub signature: Option<String>,
    #[serde(default)]
    pub summary: Option<String>,
}

/// Why a helper did not load.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadError {
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
    #[serde(default)]
    pub line: Option<u32>,
    #[serde(default)]
    pub text: String,
}

impl LoadRecord {
    /// One line for the model and for `doctor`: which file failed and why.
    pub fn failure_line(&self) -> Option<String> {
        let error = self.error.as_ref()?;
        let at = error
            .line
            .map(|l| format!(", line {l}"))
            .unwrap_or_default();
        Some(format!(
            "helper {}{at} did not load: {}: {} (its functions are not available)",
            self.file, error.kind, error.message
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    struct Tree {
        _tmp: tempfile::TempDir,
        repo: PathBuf,
        global: PathBuf,
        toolbox: PathBuf,
    }

    fn tree() -> Tree {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("outside/repo");
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        let global = tmp.path().join("home/helpers");
        let toolbox = tmp.path().join("lib/toolbox");
        for name in ["read.py", "write.py", "bash.py"] {
            write(&toolbox.join(name), "");
        }
        Tree {
            repo,
            global,
            toolbox,
            _tmp: tmp,
        }
    }

    #[test]
    fn nested_project_dirs_stop_at_the_git_root() {
        let t = tree();
        let deep = t.repo.join("pkg/sub");
        write(&deep.join(".pi/helpers/near.py"), "");
        write(&t.repo.join(".pi/helpers/root.py"), "");
        write(&t.repo.parent().unwrap().join(".pi/helpers/outside.py"), "");
        let dirs = project_dirs(&deep);
        assert_eq!(
            dirs,
            vec![deep.join(".pi/helpers"), t.repo.join(".pi/helpers")]
        );
        let found = discover(&deep, &t.global, &t.toolbox);
        let names: Vec<&str> = found.files.iter().map(|f| f.name.as_str()).collect();
        assert!(names.contains(&"near.py") && names.contains(&"root.py"));
        assert!(
            !names.contains(&"outside.py"),
            "beyond the git root: {names:?}"
        );
    }

    #[test]
    fn outside_a_git_repository_only_the_working_directory_counts() {
        let t = tree();
        let plain = t.repo.parent().unwrap().join("plain/dir");
        write(&plain.join(".pi/helpers/here.py"), "");
        write(&plain.parent().unwrap().join(".pi/helpers/above.py"), "");
        assert_eq!(project_dirs(&plain), vec![plain.join(".pi/helpers")]);
    }

    #[test]
    fn first_seen_wins_and_records_what_it_shadows() {
        let t = tree();
        write(&t.repo.join(".pi/helpers/read.py"), "");
        write(&t.global.join("read.py"), "");
        write(&t.global.join("notes.py"), "");
        write(&t.repo.join(".pi/helpers/_off.py"), "");
        write(&t.repo.join(".pi/helpers/data.txt"), "");
        let found = discover(&t.repo, &t.global, &t.toolbox);
        let read = found.files.iter().find(|f| f.name == "read.py").unwrap();
        assert_eq!(read.path, t.repo.join(".pi/helpers/read.py"));
        assert_eq!(
            read.shadows,
            vec![t.global.join("read.py"), t.toolbox.join("read.py")]
        );
        let notes = found.files.iter().find(|f| f.name == "notes.py").unwrap();
        assert_eq!(notes.origin, Origin::Global);
        let bash = found.files.iter().find(|f| f.name == "bash.py").unwrap();
        assert_eq!(bash.origin, Origin::Default);
        assert_eq!(found.skipped, vec![t.repo.join(".pi/helpers/_off.py")]);
        assert!(!found.files.iter().any(|f| f.name == "data.txt"));
        let order = found.load_order();
        assert_eq!(
            order.last(),
            Some(&t.repo.join(".pi/helpers/read.py")),
            "nearest loads last"
        );
    }

    #[test]
    fn a_failure_names_the_file_line_and_error() {
        let record = LoadRecord {
            file: "/p/.pi/helpers/x.py".into(),
            summary: None,
            functions: vec![],
            error: Some(LoadError {
                kind: "ImportError".into(),
                message: "No module named 'nope'".into(),
                line: Some(3),
                text: String::new(),
            }),
        };
        assert_eq!(
            record.failure_line().unwrap(),
            "helper /p/.pi/helpers/x.py, line 3 did not load: ImportError: No module named 'nope' (its functions are not available)"
        );
    }
}
