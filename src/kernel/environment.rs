//! The environment a kernel starts with.
//!
//! Credentials in the host's environment (`ANTHROPIC_API_KEY`, `GH_PAT=ghp_…`, `DB_PASS`,
//! `DATABASE_URL=postgres://user:secret@db/app`, a PEM private key in any variable, ...) are not
//! passed to the kernel unless asked: a cell, or a package it imports, should not be able to read
//! the agent's own keys by accident and print them into the agent's context. Everything else is
//! inherited. `--pass-credentials` passes them all; `--pass-env NAME` passes one by name; the
//! host's own keys (`withhold`) are never passed.
//!
//! What counts as a credential is decided per variable, by its name and its value, in one place:
//! `secrets` (docs/security.md says why that and not an allowlist). This module applies it and
//! says what it held back: names and rule ids only (`Withheld`), never a value.

use std::ffi::OsString;

use super::secrets::{self, Why};

/// A variable kept out of the kernel, and the rule that kept it out. Holds no value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Withheld {
    pub name: String,
    pub why: Why,
}

impl std::fmt::Display for Withheld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name, self.why)
    }
}

/// True when a variable named `name` holds a credential by its name alone (its value decides
/// more: `secrets::classify`).
pub fn is_credential(name: &str) -> bool {
    secrets::is_credential_name(name)
}

/// The host's environment as the kernel should see it: credentials removed unless
/// `pass_credentials`, except the names in `pass`; the names in `withhold` removed always.
/// Returns the kept variables and what was removed (sorted by name).
pub fn kernel_environment(
    host: impl IntoIterator<Item = (OsString, OsString)>,
    pass_credentials: bool,
    pass: &[String],
    withhold: &[String],
) -> (Vec<(OsString, OsString)>, Vec<Withheld>) {
    let mut kept = Vec::new();
    let mut removed = Vec::new();
    for (name, value) in host {
        let text = name.to_string_lossy();
        let why = if withhold.iter().any(|w| w.as_str() == text) {
            Some(Why::HostOwn)
        } else if pass_credentials || pass.iter().any(|p| p.as_str() == text) {
            None
        } else {
            secrets::classify(&text, &value.to_string_lossy())
        };
        match why {
            Some(why) => removed.push(Withheld {
                name: text.into_owned(),
                why,
            }),
            None => kept.push((name, value)),
        }
    }
    removed.sort_by(|a, b| a.name.cmp(&b.name));
    (kept, removed)
}

/// The notice the first result carries when credentials were held back (not pi-repl's own keys,
/// which are never passed and need no explaining): how many, which (names and rules), and how
/// to pass one.
pub fn withheld_notice(withheld: &[Withheld]) -> Option<String> {
    let shown: Vec<String> = withheld
        .iter()
        .filter(|w| w.why != Why::HostOwn)
        .map(Withheld::to_string)
        .collect();
    if shown.is_empty() {
        return None;
    }
    let (count, were) = match shown.len() {
        1 => ("1 variable".to_string(), "looks like a credential and was"),
        n => (format!("{n} variables"), "look like credentials and were"),
    };
    Some(format!(
        "{count} of pi-repl's environment {were} withheld from the kernel (os.environ \
         does not have them): {}. Pass one with --pass-env NAME (or PI_REPL_PASS_ENV=NAME,...), \
         all with --pass-credentials; `pi-repl doctor` lists them.",
        shown.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(withheld: &[Withheld]) -> Vec<&str> {
        withheld.iter().map(|w| w.name.as_str()).collect()
    }

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
        assert_eq!(names(&removed), ["OPENAI_API_KEY"]);
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
        assert_eq!(
            removed,
            vec![Withheld {
                name: "ENDPOINT_PASS".to_string(),
                why: Why::HostOwn
            }]
        );
    }

    #[test]
    fn a_url_with_a_password_is_a_credential_whatever_its_name() {
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
        assert_eq!(names(&removed), ["DATABASE_URL"]);
        assert_eq!(kept.len(), 1);
    }

    /// A developer's ordinary environment (tests/data/developer-environment.env).
    fn developer_environment() -> Vec<(OsString, OsString)> {
        include_str!("../../tests/data/developer-environment.env")
            .lines()
            .filter(|line| !line.starts_with('#') && !line.is_empty())
            .map(|line| {
                let (name, value) = line.split_once('=').expect("NAME=value");
                (OsString::from(name), OsString::from(value))
            })
            .collect()
    }

    /// Issue 23's twelve credentials, and more, under names that mostly say nothing. Built
    /// here from repeated characters, so no literal looks like a live token.
    fn credentials() -> Vec<(&'static str, String)> {
        let a = |n: usize| "aB3".repeat(n).chars().take(n).collect::<String>();
        let random = "Xq7LmP2vR9sT4wK8zN1bC6dF3gH5jY0u";
        vec![
            ("GH_PAT", format!("ghp_{}", a(36))),
            ("GITLAB_PAT", format!("glpat-{}", a(20))),
            ("DB_PASS", "correct horse battery staple".to_string()),
            ("STRIPE_SK", format!("sk_live_{}", a(24))),
            (
                "SENTRY_DSN",
                format!(
                    "https://{}@o450000.ingest.sentry.io/5000000",
                    "0f".repeat(16)
                ),
            ),
            ("OP_SERVICE_ACCOUNT", format!("ops_eyJ{}", a(300))),
            ("COOKIE", format!("session={}", a(40))),
            (
                "SIGNER",
                format!(
                    "-----BEGIN EC PRIVATE KEY-----\n{}\n-----END EC PRIVATE KEY-----\n",
                    a(64)
                ),
            ),
            (
                "ALERTS",
                format!("https://hooks.slack.com/services/T0000/B0000/{}", a(24)),
            ),
            (
                "BOT",
                format!("xoxb-{}-{}-{}", "1".repeat(12), "2".repeat(13), a(24)),
            ),
            (
                "AWS_ID",
                format!(
                    "ASIA{}",
                    "QZ7".repeat(6).chars().take(16).collect::<String>()
                ),
            ),
            (
                "WAREHOUSE",
                "postgres://analyst:hunter2@db.internal/warehouse".to_string(),
            ),
            // Beyond the twelve.
            ("ANTHROPIC_API_KEY", format!("sk-ant-api03-{}AA", a(93))),
            ("HF_TOKEN", format!("hf_{}", "aBc".repeat(12))),
            (
                "LAST_RESPONSE",
                format!("Bearer eyJhbGciOiJIUzI1NiJ9.eyJ{}.{}", a(20), a(43)),
            ),
            ("BUILD_CACHE", random.to_string()),
            ("APP_SESSION", a(32)),
        ]
    }

    /// Issue 23: 11 of these 12 credentials reached the cell. Against a realistic developer
    /// environment, every credential is withheld and every ordinary variable kept but two that
    /// the name rules hold back on purpose (an agent socket and a `KEY`-named variable).
    #[test]
    fn a_developer_environment_keeps_its_ordinary_variables_and_none_of_its_credentials() {
        let ordinary = developer_environment();
        let secrets = credentials();
        let mut host = ordinary.clone();
        host.extend(
            secrets
                .iter()
                .map(|(name, value)| (OsString::from(name), OsString::from(value))),
        );
        let (kept, removed) = kernel_environment(host, false, &[], &[]);
        for (name, _) in &secrets {
            assert!(names(&removed).contains(name), "{name} was passed");
        }
        let held_back_ordinary: Vec<&str> = names(&removed)
            .into_iter()
            .filter(|name| !secrets.iter().any(|(secret, _)| secret == name))
            .collect();
        assert_eq!(
            held_back_ordinary,
            ["SSH_AUTH_SOCK", "STARSHIP_SESSION_KEY"]
        );
        assert_eq!(kept.len(), ordinary.len() - 2);

        let (_, removed) = kernel_environment(
            credentials()
                .into_iter()
                .map(|(name, value)| (OsString::from(name), OsString::from(value))),
            false,
            &["GH_PAT".to_string()],
            &[],
        );
        assert!(!names(&removed).contains(&"GH_PAT"), "--pass-env passes it");
    }

    #[test]
    fn the_notice_names_what_was_withheld_and_how_to_pass_it_but_no_value() {
        let (_, removed) = kernel_environment(
            credentials()
                .into_iter()
                .map(|(name, value)| (OsString::from(name), OsString::from(value))),
            false,
            &[],
            &["PI_REPL_LLM_API_KEY".to_string()],
        );
        let notice = withheld_notice(&removed).expect("a notice");
        assert!(
            notice.starts_with("17 variables of pi-repl's environment"),
            "{notice}"
        );
        assert!(notice.contains("GH_PAT (github-token)"), "{notice}");
        assert!(notice.contains("DB_PASS (name: PASS)"), "{notice}");
        assert!(notice.contains("--pass-env NAME"), "{notice}");
        for (_, value) in credentials() {
            let head: String = value.chars().take(12).collect();
            assert!(
                !notice.contains(&value) && !notice.contains(&head),
                "{notice}"
            );
        }
        let only_own = [Withheld {
            name: "PI_REPL_LLM_API_KEY".to_string(),
            why: Why::HostOwn,
        }];
        assert_eq!(withheld_notice(&only_own), None);
    }
}
