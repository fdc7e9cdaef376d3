//! The environment a kernel starts with.
//!
//! Provider credentials in the host's environment (`ANTHROPIC_API_KEY`, `GITHUB_TOKEN`, ...) are
//! not passed to the kernel unless asked: a cell, or a package it imports, should not be able to
//! read the agent's own keys by accident. Everything else is inherited.

use std::ffi::OsString;

/// Name endings that mark a variable as a credential.
const CREDENTIAL_SUFFIXES: &[&str] = &[
    "_API_KEY",
    "_APIKEY",
    "_TOKEN",
    "_SECRET",
    "_SECRET_KEY",
    "_ACCESS_KEY",
    "_PASSWORD",
    "_CREDENTIALS",
];

/// Whole names that are credentials without a telling suffix.
const CREDENTIAL_NAMES: &[&str] = &["API_KEY", "TOKEN", "SECRET", "PASSWORD"];

/// True when a variable named `name` holds a credential the kernel should not see by default.
pub fn is_credential(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    CREDENTIAL_NAMES.contains(&upper.as_str())
        || CREDENTIAL_SUFFIXES
            .iter()
            .any(|suffix| upper.ends_with(suffix))
}

/// The host's environment as the kernel should see it, with credentials removed unless
/// `pass_credentials`. Returns the kept variables and the names that were removed.
pub fn kernel_environment(
    host: impl IntoIterator<Item = (OsString, OsString)>,
    pass_credentials: bool,
) -> (Vec<(OsString, OsString)>, Vec<String>) {
    let mut kept = Vec::new();
    let mut removed = Vec::new();
    for (name, value) in host {
        let credential = name.to_str().is_some_and(is_credential);
        if credential && !pass_credentials {
            removed.push(name.to_string_lossy().into_owned());
        } else {
            kept.push((name, value));
        }
    }
    removed.sort();
    (kept, removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_keys_and_tokens_are_credentials() {
        for name in [
            "ANTHROPIC_API_KEY",
            "OPENAI_API_KEY",
            "GITHUB_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
            "hf_token",
            "API_KEY",
        ] {
            assert!(is_credential(name), "{name}");
        }
        for name in [
            "PATH",
            "HOME",
            "TOKENIZERS_PARALLELISM",
            "PYTHONPATH",
            "KEYBOARD",
        ] {
            assert!(!is_credential(name), "{name}");
        }
    }

    #[test]
    fn credentials_are_removed_unless_passed() {
        let host = vec![
            (OsString::from("PATH"), OsString::from("/bin")),
            (OsString::from("OPENAI_API_KEY"), OsString::from("sk-1")),
        ];
        let (kept, removed) = kernel_environment(host.clone(), false);
        assert_eq!(kept, vec![(OsString::from("PATH"), OsString::from("/bin"))]);
        assert_eq!(removed, vec!["OPENAI_API_KEY".to_string()]);
        let (kept, removed) = kernel_environment(host, true);
        assert_eq!(kept.len(), 2);
        assert!(removed.is_empty());
    }
}
