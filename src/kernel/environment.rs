//! The environment a kernel starts with.
//!
//! Credentials in the host's environment (`ANTHROPIC_API_KEY`, `GITHUB_TOKEN`, `PGPASSWORD`,
//! `DATABASE_URL=postgres://user:secret@db/app`, ...) are not passed to the kernel unless asked:
//! a cell, or a package it imports, should not be able to read the agent's own keys by accident.
//! Everything else is inherited. `--pass-credentials` passes them all; `--pass-env NAME` passes
//! one by name.
//!
//! What counts as a credential (docs/security.md):
//! - a name containing `PASSWORD`, `PASSWD`, `SECRET` or `CREDENTIAL` anywhere;
//! - a name with a `KEY`, `KEYS`, `APIKEY`, `TOKEN`, `TOKENS`, `AUTH` or `WEBHOOK` word (words are
//!   split at `_`, `-` and `.`: `AWS_ACCESS_KEY_ID`, `OPENAI_KEY`, `HF_TOKEN`, but not
//!   `KEYBOARD` or `TOKENIZERS_PARALLELISM`), or ending in `KEY`/`TOKEN` glued to a word
//!   (`OPENAIKEY`, `GHTOKEN`);
//! - a value that is a URL with a password in it (`scheme://user:password@host`).

use std::ffi::OsString;

/// Parts of a name that make it a credential wherever they appear.
const CREDENTIAL_PARTS: &[&str] = &["PASSWORD", "PASSWD", "SECRET", "CREDENTIAL"];

/// Words of a name (split at `_`, `-`, `.`) that make it a credential.
const CREDENTIAL_WORDS: &[&str] = &[
    "KEY", "KEYS", "APIKEY", "TOKEN", "TOKENS", "AUTH", "WEBHOOK",
];

/// Name endings glued to a word (`OPENAIKEY`) that make it a credential.
const CREDENTIAL_ENDINGS: &[&str] = &["APIKEY", "KEY", "TOKEN"];

/// Names that end like a credential but are not one.
const NOT_CREDENTIALS: &[&str] = &["MONKEY", "HOTKEY", "PUBKEY", "GPG_KEY_ID_FORMAT"];

/// True when a variable named `name` holds a credential the kernel should not see by default.
pub fn is_credential(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    if NOT_CREDENTIALS.contains(&upper.as_str()) {
        return false;
    }
    CREDENTIAL_PARTS.iter().any(|part| upper.contains(part))
        || upper
            .split(['_', '-', '.'])
            .any(|word| CREDENTIAL_WORDS.contains(&word))
        || upper
            .split(['_', '-', '.'])
            .next_back()
            .is_some_and(|last| {
                CREDENTIAL_ENDINGS
                    .iter()
                    .any(|ending| last.len() > ending.len() + 1 && last.ends_with(ending))
                    && !NOT_CREDENTIALS.contains(&last)
            })
}

/// True when `value` is a URL carrying a password (`scheme://user:password@host...`).
pub fn has_url_password(value: &str) -> bool {
    let Some((_, rest)) = value.split_once("://") else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    match authority.rsplit_once('@') {
        Some((userinfo, _host)) => userinfo
            .split_once(':')
            .is_some_and(|(_, pw)| !pw.is_empty()),
        None => false,
    }
}

/// The host's environment as the kernel should see it: credentials removed unless
/// `pass_credentials`, except the names in `pass`; the names in `withhold` removed always.
/// Returns the kept variables and the names that were removed.
pub fn kernel_environment(
    host: impl IntoIterator<Item = (OsString, OsString)>,
    pass_credentials: bool,
    pass: &[String],
    withhold: &[String],
) -> (Vec<(OsString, OsString)>, Vec<String>) {
    let mut kept = Vec::new();
    let mut removed = Vec::new();
    for (name, value) in host {
        let text = name.to_string_lossy();
        let credential = is_credential(&text) || value.to_str().is_some_and(has_url_password);
        let passed = pass_credentials || pass.iter().any(|p| p.as_str() == text);
        let withheld = withhold.iter().any(|w| w.as_str() == text);
        if withheld || (credential && !passed) {
            removed.push(text.into_owned());
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
            // Issue 11: these passed the old suffix filter.
            "PGPASSWORD",
            "AWS_ACCESS_KEY_ID",
            "SLACK_WEBHOOK_URL",
            "AZURE_OPENAI_KEY",
            "OPENAI_KEY",
            "OPENAIKEY",
            "MYSQL_PWD_SECRET",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "GH_AUTH",
        ] {
            assert!(is_credential(name), "{name}");
        }
        for name in [
            "PATH",
            "HOME",
            "TOKENIZERS_PARALLELISM",
            "PYTHONPATH",
            "KEYBOARD",
            "MONKEY",
            "TOKENIZERS",
            "KEYMAP",
            "DATABASE_URL",
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
        let (kept, removed) = kernel_environment(host.clone(), false, &[], &[]);
        assert_eq!(kept, vec![(OsString::from("PATH"), OsString::from("/bin"))]);
        assert_eq!(removed, vec!["OPENAI_API_KEY".to_string()]);
        let (kept, removed) = kernel_environment(host.clone(), true, &[], &[]);
        assert_eq!(kept.len(), 2);
        assert!(removed.is_empty());
        let (kept, removed) = kernel_environment(host, false, &["OPENAI_API_KEY".to_string()], &[]);
        assert_eq!(kept.len(), 2);
        assert!(removed.is_empty());
    }

    #[test]
    fn a_withheld_name_is_removed_even_when_credentials_are_passed() {
        let host = vec![
            (OsString::from("MY_MODEL_SECRET"), OsString::from("k")),
            (OsString::from("ENDPOINT_PASS"), OsString::from("k2")),
        ];
        let withhold = ["ENDPOINT_PASS".to_string()];
        let (kept, removed) = kernel_environment(host, true, &withhold, &withhold);
        assert_eq!(kept.len(), 1, "only the other credential, passed");
        assert_eq!(removed, vec!["ENDPOINT_PASS".to_string()]);
    }

    #[test]
    fn a_url_with_a_password_is_a_credential_whatever_its_name() {
        assert!(has_url_password("postgres://app:s3cret@db:5432/app"));
        assert!(has_url_password("https://user:pw@example.invalid/x?y=z"));
        assert!(!has_url_password("https://example.invalid/a@b"));
        assert!(!has_url_password("postgres://app@db/app"));
        assert!(!has_url_password("user:pw@host"));
        let host = vec![
            (
                OsString::from("DATABASE_URL"),
                OsString::from("postgres://a:b@db/x"),
            ),
            (
                OsString::from("HOMEPAGE"),
                OsString::from("https://example.invalid"),
            ),
        ];
        let (kept, removed) = kernel_environment(host, false, &[], &[]);
        assert_eq!(removed, vec!["DATABASE_URL".to_string()]);
        assert_eq!(kept.len(), 1);
    }
}
