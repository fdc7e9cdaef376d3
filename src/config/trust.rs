//! Guarded keys: settings a project file may not set unless the user file allows it.
//!
//! A project file comes with a repository someone else may have written; cloning it must not
//! pass your credentials to its cells, let its cells write outside it or see your processes,
//! or send what cells do to an endpoint or server it names. Those keys ([`GUARDED`]) are
//! refused from a project file, with the key, the file and the line, unless the user file
//! trusts projects with them:
//!
//! ```toml
//! # ~/.pi/agent/pi-repl.toml
//! trust-project = ["llm-model"]              # every project may set llm-model
//!
//! [project."~/src/app"]                      # the project whose root (holding .pi/) is ~/src/app
//! trust-project = ["llm-base-url", "llm-model"]   # or ["*"]: every guarded key
//! ```
//!
//! A flag or a variable always may set them: they are the user's own.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The key of the user file that lists guarded keys a project file may set.
pub const TRUST_KEY: &str = "trust-project";

/// The user file's table of per-project trust (`[project."<root>"]`).
pub const PROJECT_TABLE: &str = "project";

/// Every guarded key, and why a project may not set it by itself.
pub const GUARDED: &[(&str, &str)] = &[
    (
        "pass-credentials",
        "it passes your credentials to the project's cells",
    ),
    (
        "pass-env",
        "it passes variables that look like credentials to the project's cells",
    ),
    (
        "process-isolation",
        "turned off, the project's cells see and can signal every process of yours",
    ),
    (
        "no-process-isolation",
        "the project's cells would see and could signal every process of yours",
    ),
    (
        "allow-write",
        "it lets the project's cells write outside the project",
    ),
    (
        "llm-api",
        "it chooses the service that receives what cells send to a model",
    ),
    (
        "llm-base-url",
        "a model endpoint there receives what cells send it, with your key",
    ),
    (
        "llm-model",
        "it turns on a model endpoint that receives what cells send it, with your key",
    ),
    (
        "llm-api-key-env",
        "it chooses which of your variables is sent to a model endpoint as its key",
    ),
    (
        "jupyter-url",
        "cells, and the data they hold, would run on that server",
    ),
    (
        "jupyter-token",
        "a server's token is yours, not a project's",
    ),
    (
        "remote-snapshot-dir",
        "it chooses where on another machine your workspace is written",
    ),
    (
        "notebook",
        "it chooses a file anywhere that pi-repl writes the session's notebook to",
    ),
];

/// Why `key` is guarded, if it is.
pub fn guarded(key: &str) -> Option<&'static str> {
    GUARDED
        .iter()
        .find(|(name, _)| *name == key)
        .map(|(_, why)| *why)
}

/// What the user file allows project files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trust {
    /// Guarded keys every project may set (`*`: all).
    pub everywhere: Vec<String>,
    /// Guarded keys one project (by its root) may set.
    pub projects: BTreeMap<PathBuf, Vec<String>>,
}

impl Trust {
    /// Whether the project rooted at `root` may set `key`.
    pub fn allows(&self, root: &Path, key: &str) -> bool {
        let listed = |keys: &Vec<String>| keys.iter().any(|k| k == key || k == "*");
        listed(&self.everywhere) || self.projects.get(root).is_some_and(listed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trust_is_per_key_everywhere_or_for_one_project() {
        let mut trust = Trust {
            everywhere: vec!["llm-model".into()],
            ..Trust::default()
        };
        trust
            .projects
            .insert(PathBuf::from("/src/app"), vec!["*".into()]);
        assert!(trust.allows(Path::new("/src/other"), "llm-model"));
        assert!(!trust.allows(Path::new("/src/other"), "llm-base-url"));
        assert!(trust.allows(Path::new("/src/app"), "llm-base-url"));
    }
}
