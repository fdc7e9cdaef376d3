//! Where the configuration files are.
//!
//! Owns: the user file (`$PI_REPL_CONFIG`, else `~/.pi/agent/pi-repl.toml`, beside the default
//! `PI_REPL_HOME`, whatever `PI_REPL_HOME` is), the reference design's user file
//! (`~/.pi/agent/pi-repl.json`, or `$PI_REPL_CONFIG` when it names a `.json` file), and the
//! project file: the nearest `.pi/pi-repl.toml` from the working directory up to the git root
//! (outside a git repository, the working directory's only, as for `.pi/helpers/`).

use std::path::{Path, PathBuf};

use crate::env_vars;

/// The user's files: the TOML file, and the reference design's JSON file read below it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserFiles {
    pub toml: Option<PathBuf>,
    pub json: Option<PathBuf>,
}

/// The user's files from this process's environment.
pub fn user_files() -> UserFiles {
    let named = std::env::var_os(env_vars::PI_REPL_CONFIG)
        .filter(|value| !value.to_string_lossy().trim().is_empty())
        .map(PathBuf::from);
    user_files_from(named, std::env::home_dir())
}

fn user_files_from(named: Option<PathBuf>, home: Option<PathBuf>) -> UserFiles {
    if let Some(path) = named {
        let path = std::path::absolute(&path).unwrap_or(path);
        return if path.extension().is_some_and(|ext| ext == "json") {
            UserFiles {
                toml: None,
                json: Some(path),
            }
        } else {
            UserFiles {
                toml: Some(path),
                json: None,
            }
        };
    }
    let agent = home
        .filter(|home| !home.as_os_str().is_empty())
        .map(|home| home.join(".pi").join("agent"));
    UserFiles {
        toml: agent.as_ref().map(|dir| dir.join("pi-repl.toml")),
        json: agent.map(|dir| dir.join("pi-repl.json")),
    }
}

/// The project file for `cwd`: the nearest `.pi/pi-repl.toml` up to the git root.
pub fn project_file(cwd: &Path) -> Option<PathBuf> {
    let root = crate::helpers::git_root(cwd);
    let mut current = Some(cwd);
    while let Some(dir) = current {
        let file = dir.join(".pi").join("pi-repl.toml");
        if file.is_file() {
            return Some(file);
        }
        match &root {
            Some(root) if dir != root => current = dir.parent(),
            _ => break,
        }
    }
    None
}

/// The project a project file belongs to: the directory holding its `.pi/`.
pub fn project_root(file: &Path) -> PathBuf {
    let root = file
        .parent()
        .and_then(Path::parent)
        .unwrap_or(file)
        .to_path_buf();
    root.canonicalize().unwrap_or(root)
}

/// `path` with a leading `~/` read as the home directory, made absolute and, when it exists,
/// canonical (how a `[project."..."]` table names a project).
pub fn expand(path: &str) -> PathBuf {
    let path = match (path.strip_prefix("~/"), std::env::home_dir()) {
        (Some(rest), Some(home)) => home.join(rest),
        _ if path == "~" => std::env::home_dir().unwrap_or_else(|| PathBuf::from(path)),
        _ => PathBuf::from(path),
    };
    path.canonicalize().unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_file_is_beside_the_default_home_unless_a_variable_names_one() {
        let files = user_files_from(None, Some("/home/u".into()));
        assert_eq!(
            files.toml.as_deref(),
            Some(Path::new("/home/u/.pi/agent/pi-repl.toml"))
        );
        assert_eq!(
            files.json.as_deref(),
            Some(Path::new("/home/u/.pi/agent/pi-repl.json"))
        );
        let named = user_files_from(Some("/etc/p.toml".into()), Some("/home/u".into()));
        assert_eq!(named.toml.as_deref(), Some(Path::new("/etc/p.toml")));
        assert_eq!(named.json, None);
        let json = user_files_from(Some("/etc/p.json".into()), None);
        assert_eq!(json.json.as_deref(), Some(Path::new("/etc/p.json")));
        assert_eq!(json.toml, None);
    }

    #[test]
    fn the_project_file_is_the_nearest_up_to_the_git_root() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        let deep = repo.join("a").join("b");
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        // Above the git root: never read.
        std::fs::create_dir_all(dir.path().join(".pi")).unwrap();
        std::fs::write(dir.path().join(".pi/pi-repl.toml"), "").unwrap();
        assert_eq!(project_file(&deep), None);
        std::fs::create_dir_all(repo.join(".pi")).unwrap();
        std::fs::write(repo.join(".pi/pi-repl.toml"), "").unwrap();
        assert_eq!(project_file(&deep), Some(repo.join(".pi/pi-repl.toml")));
        std::fs::create_dir_all(repo.join("a/.pi")).unwrap();
        std::fs::write(repo.join("a/.pi/pi-repl.toml"), "").unwrap();
        assert_eq!(project_file(&deep), Some(repo.join("a/.pi/pi-repl.toml")));
        assert_eq!(
            project_root(&repo.join("a/.pi/pi-repl.toml")),
            repo.join("a").canonicalize().unwrap()
        );
    }
}
