//! What makes an environment variable a credential: every rule, in one place, each with a test.
//!
//! `classify(name, value)` says why a variable must not reach a kernel (`Why`), or `None`. The
//! reason is a rule's id, shown beside the variable's name in the first result and in
//! `pi-repl doctor`; a value is never shown, logged or kept.
//!
//! The rules, tried in this order (the first that matches is the reason):
//!
//! 1. **Known token formats** (`FORMATS`): the prefixes and shapes that issuers publish so secret
//!    scanners can find their tokens, named after gitleaks' rule ids (`github-pat`,
//!    `slack-bot-token`, `aws-access-token`, PEM private keys, JWTs, ...). They are matched
//!    anywhere in the value (`Bearer <jwt>`, a token in a URL), so the name does not matter.
//! 2. **URLs carrying a credential**: a password in the userinfo (`postgres://app:pw@db`), a
//!    key as the whole userinfo (a Sentry DSN, `https://<key>@o1.ingest.sentry.io/1`), or a query
//!    parameter named like one (`?token=`, `&sig=`, `X-Amz-Signature=`).
//! 3. **Names**: a word that says credential withholds whatever the value (`PASSWORD`, `TOKEN`,
//!    `PASS`, `PAT`, `DSN`, `COOKIE`, ...); a word that only may (`SESSION`, `PRIVATE`,
//!    `SIGNING`) withholds an opaque value (one token of 16+ key characters, not a path, a host,
//!    a list, a number or a UUID: `XDG_SESSION_ID=2`, `DBUS_SESSION_BUS_ADDRESS=unix:path=…`
//!    pass).
//! 4. **A random-looking value** whatever the name: a run of 20+ key characters that mixes upper
//!    and lower case and digits, with the entropy of random text, and not mostly lowercase words
//!    (CamelCase identifiers are). It finds 95% of random 20-character tokens, 99% from 32.
//!    Hex-only values, UUIDs and lowercase tokens pass: they are commit hashes, digests and ids
//!    (`GITHUB_SHA`, systemd's `INVOCATION_ID`) far more often than keys; a key of that shape is
//!    caught by its format or its name only.
//!
//! Why hand-written and not a crate: the crates that carry gitleaks' rule set as a library
//! (`keyspoor`, `cribra`) need a newer Rust than this project builds with, and gitleaks' own
//! rules are written for source files (a keyword, an assignment, then the token, with exact
//! lengths); an environment variable is a bare value. The prefixes are the issuers' published
//! formats, so each rule here cites the gitleaks rule it follows (`Format::follows`).
//!
//! Not owned here: which variables are passed anyway or always withheld, and the kept
//! environment (`environment`).

use std::fmt;
use std::sync::OnceLock;

use regex::{Regex, RegexSet};

/// Why a variable is withheld from the kernel. Shown with its name; never holds the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// The value holds a token of a known format (`Format::id`).
    Format(&'static str),
    /// The value is a URL carrying a credential (`URL_*` ids).
    Url(&'static str),
    /// A word of the name says credential.
    Name(&'static str),
    /// A word of the name says it may be one, and the value is opaque.
    NameAndValue(&'static str),
    /// The value looks random, like a key.
    RandomValue,
    /// pi-repl's own credential (the Jupyter Server's token, the `llm_query` endpoint's key):
    /// never passed, whatever the flags say.
    HostOwn,
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Why::Format(id) | Why::Url(id) => f.write_str(id),
            Why::Name(word) => write!(f, "name: {word}"),
            Why::NameAndValue(word) => write!(f, "name: {word}, opaque value"),
            Why::RandomValue => f.write_str("random-looking value"),
            Why::HostOwn => f.write_str("pi-repl's own"),
        }
    }
}

/// A token format an issuer publishes.
pub struct Format {
    /// Shown as the reason.
    pub id: &'static str,
    /// The gitleaks rule(s) it follows (as of gitleaks v8, `config/gitleaks.toml`).
    pub follows: &'static str,
    /// Matched anywhere in the value (Rust `regex` syntax).
    pub pattern: &'static str,
}

/// The known token formats. Lower bounds on lengths rather than gitleaks' exact ones: the
/// prefixes are what identify a token, and an issuer that lengthens its tokens keeps them.
pub const FORMATS: &[Format] = &[
    Format {
        id: "github-token",
        follows: "github-pat, github-oauth, github-app-token, github-refresh-token",
        pattern: r"\bgh[pousr]_[0-9A-Za-z]{30,}",
    },
    Format {
        id: "github-fine-grained-pat",
        follows: "github-fine-grained-pat",
        pattern: r"\bgithub_pat_[0-9A-Za-z_]{40,}",
    },
    Format {
        id: "gitlab-token",
        follows: "gitlab-pat, gitlab-ptt, gitlab-rrt, gitlab-deploy-token, gitlab-cicd-job-token",
        pattern: r"\bgl(?:pat|ptt|rt|dt|cbt|imt|oas|ft|soat|ffct|agent)-[0-9A-Za-z_-]{20,}",
    },
    Format {
        id: "stripe-key",
        follows: "stripe-access-token",
        pattern: r"\b(?:sk|rk)_(?:test|live|prod)_[0-9A-Za-z]{10,}|\bwhsec_[0-9A-Za-z+/=]{20,}",
    },
    Format {
        id: "slack-token",
        follows: "slack-bot-token, slack-user-token, slack-app-token, slack-legacy-token",
        pattern: r"\bxox[abeoprs]-[0-9A-Za-z-]{10,}|\bxapp-\d-[0-9A-Za-z-]{10,}",
    },
    Format {
        id: "slack-webhook-url",
        follows: "slack-webhook-url",
        pattern: r"hooks\.slack\.com/(?:services|workflows|triggers)/[0-9A-Za-z+/_-]{20,}",
    },
    Format {
        id: "discord-webhook-url",
        follows: "discord-api-token (webhooks: GitHub secret scanning's discord_webhook)",
        pattern: r"discord(?:app)?\.com/api/webhooks/\d+/[0-9A-Za-z_-]{20,}",
    },
    Format {
        id: "teams-webhook-url",
        follows: "microsoft-teams-webhook",
        pattern: r"\.webhook\.office\.com/webhookb2/[0-9a-f-]{20,}",
    },
    Format {
        id: "aws-access-token",
        follows: "aws-access-token",
        pattern: r"\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}\b",
    },
    Format {
        id: "private-key",
        follows: "private-key",
        pattern: r"-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----",
    },
    Format {
        id: "jwt",
        follows: "jwt",
        pattern: r"\bey[0-9A-Za-z_-]{10,}\.ey[0-9A-Za-z_-]{10,}\.[0-9A-Za-z_-]*",
    },
    Format {
        id: "1password-token",
        follows: "1password-service-account-token, 1password-secret-key",
        pattern: r"\bops_ey[0-9A-Za-z+/=_-]{20,}|\bA3-[A-Z0-9]{6}-[A-Z0-9-]{11,12}-[A-Z0-9]{5}-[A-Z0-9]{5}-[A-Z0-9]{5}\b",
    },
    Format {
        id: "openai-api-key",
        follows: "openai-api-key",
        pattern: r"\bsk-(?:proj|svcacct|admin)-[0-9A-Za-z_-]{20,}|T3BlbkFJ",
    },
    Format {
        id: "anthropic-api-key",
        follows: "anthropic-api-key, anthropic-admin-api-key",
        pattern: r"\bsk-ant-[a-z]{3,5}\d\d-[0-9A-Za-z_-]{20,}",
    },
    Format {
        id: "huggingface-access-token",
        follows: "huggingface-access-token, huggingface-organization-api-token",
        pattern: r"\b(?:hf|api_org)_[A-Za-z]{30,}\b",
    },
    Format {
        id: "npm-access-token",
        follows: "npm-access-token",
        pattern: r"\bnpm_[0-9A-Za-z]{36}\b",
    },
    Format {
        id: "pypi-upload-token",
        follows: "pypi-upload-token",
        pattern: r"\bpypi-AgEIcHlwaS5vcmc[0-9A-Za-z_-]{20,}",
    },
    Format {
        id: "gcp-api-key",
        follows: "gcp-api-key",
        pattern: r"\bAIza[0-9A-Za-z_-]{35}",
    },
    Format {
        id: "google-oauth-token",
        follows: "GitHub secret scanning's google_oauth_access_token, google_oauth_refresh_token",
        pattern: r"\bya29\.[0-9A-Za-z_-]{20,}|\b1//0[0-9A-Za-z_-]{40,}",
    },
    Format {
        id: "sendgrid-api-token",
        follows: "sendgrid-api-token",
        pattern: r"\bSG\.[0-9A-Za-z_-]{20,}\.[0-9A-Za-z_-]{20,}",
    },
    Format {
        id: "digitalocean-token",
        follows: "digitalocean-pat, digitalocean-access-token, digitalocean-refresh-token",
        pattern: r"\bdo[por]_v1_[0-9a-f]{64}\b",
    },
    Format {
        id: "shopify-token",
        follows: "shopify-access-token, shopify-custom-access-token, shopify-private-app-access-token, shopify-shared-secret",
        pattern: r"\bshp(?:at|ca|pa|ss)_[0-9a-fA-F]{32}\b",
    },
    Format {
        id: "vault-token",
        follows: "vault-service-token, vault-batch-token",
        pattern: r"\bhv[sb]\.[0-9A-Za-z_-]{24,}",
    },
    Format {
        id: "databricks-api-token",
        follows: "databricks-api-token",
        pattern: r"\bdapi[0-9a-f]{32}(?:-\d)?\b",
    },
    Format {
        id: "doppler-api-token",
        follows: "doppler-api-token",
        pattern: r"\bdp\.(?:pt|st|sa|ct|scim|audit)\.[0-9A-Za-z]{40,}",
    },
    Format {
        id: "age-secret-key",
        follows: "age-secret-key",
        pattern: r"\bAGE-SECRET-KEY-1[0-9A-Z]{58}\b",
    },
    Format {
        id: "telegram-bot-token",
        follows: "telegram-bot-api-token",
        pattern: r"\b\d{8,10}:AA[0-9A-Za-z_-]{33}\b",
    },
    Format {
        id: "connection-string-secret",
        follows: "azure-storage-account-key (connection strings: AccountKey=, Password=)",
        pattern: r"(?i)(?:^|;)\s*(?:AccountKey|SharedAccessKey|SharedAccessSignature|Password|Pwd)\s*=\s*[^;\s]",
    },
    Format {
        id: "authorization-header",
        follows: "GitHub secret scanning's http_basic_authentication_header, http_bearer_authentication_header",
        pattern: r"(?i)^\s*(?:bearer|basic|token)\s+[0-9A-Za-z._~+/=-]{16,}\s*$",
    },
];

/// The reason for a URL with a password in its userinfo.
pub const URL_PASSWORD: &str = "url-password";
/// The reason for a URL whose userinfo is a key (a Sentry DSN).
pub const URL_USERINFO_KEY: &str = "url-userinfo-key";
/// The reason for a URL with a query parameter named like a credential.
pub const URL_SECRET_PARAMETER: &str = "url-secret-parameter";

/// Query parameters that carry a credential (compared lowercase).
const SECRET_PARAMETERS: &[&str] = &[
    "token",
    "access_token",
    "auth",
    "key",
    "api_key",
    "apikey",
    "secret",
    "password",
    "sig",
    "signature",
    "x-amz-signature",
    "x-amz-security-token",
    "x-goog-signature",
];

/// Parts of a name that make it a credential wherever they appear.
const CREDENTIAL_PARTS: &[&str] = &["PASSWORD", "PASSWD", "PASSPHRASE", "SECRET", "CREDENTIAL"];

/// Words of a name (split at `_`, `-`, `.`) that make it a credential whatever its value.
const CREDENTIAL_WORDS: &[&str] = &[
    "KEY",
    "KEYS",
    "APIKEY",
    "TOKEN",
    "TOKENS",
    "AUTH",
    "AUTHORIZATION",
    "WEBHOOK",
    "PASS",
    "PAT",
    "DSN",
    "COOKIE",
    "COOKIES",
    "CREDS",
    "JWT",
    "BEARER",
];

/// A last word that makes a name of two words or more a credential (`MYSQL_PWD`; `PWD` alone
/// is the working directory).
const CREDENTIAL_LAST_WORDS: &[&str] = &["PWD"];

/// Name endings glued to a word (`OPENAIKEY`) that make it a credential.
const CREDENTIAL_ENDINGS: &[&str] = &["APIKEY", "KEY", "TOKEN"];

/// Words of a name that make it a credential when its value is opaque (`value_is_opaque`).
const MAYBE_CREDENTIAL_WORDS: &[&str] = &[
    "SESSION",
    "SESSIONID",
    "SID",
    "PRIVATE",
    "SIGNING",
    "SIGNATURE",
];

/// Names that end like a credential but are not one.
const NOT_CREDENTIALS: &[&str] = &["MONKEY", "HOTKEY", "PUBKEY", "GPG_KEY_ID_FORMAT"];

/// The shortest run of key characters `looks_random` considers.
const RANDOM_MIN_LEN: usize = 20;

/// Why `name=value` must not reach a kernel, or `None` when it may.
pub fn classify(name: &str, value: &str) -> Option<Why> {
    if let Some(id) = known_format(value) {
        return Some(Why::Format(id));
    }
    if let Some(id) = url_credential(value) {
        return Some(Why::Url(id));
    }
    if let Some(word) = credential_name(name) {
        return Some(Why::Name(word));
    }
    if let Some(word) = maybe_credential_name(name)
        && value_is_opaque(value)
    {
        return Some(Why::NameAndValue(word));
    }
    looks_random(value).then_some(Why::RandomValue)
}

/// The id of the first known format found in `value`.
pub fn known_format(value: &str) -> Option<&'static str> {
    static SET: OnceLock<RegexSet> = OnceLock::new();
    let set = SET.get_or_init(|| {
        // The patterns are constants, each compiled by a test: a failure here is a bug.
        RegexSet::new(FORMATS.iter().map(|f| f.pattern)).expect("FORMATS compile")
    });
    set.matches(value)
        .iter()
        .next()
        .map(|index| FORMATS[index].id)
}

/// True when a variable named `name` is a credential by its name alone.
pub fn is_credential_name(name: &str) -> bool {
    credential_name(name).is_some()
}

/// The word of `name` that makes it a credential whatever its value.
fn credential_name(name: &str) -> Option<&'static str> {
    let upper = name.to_ascii_uppercase();
    if NOT_CREDENTIALS.contains(&upper.as_str()) {
        return None;
    }
    if let Some(part) = CREDENTIAL_PARTS.iter().find(|part| upper.contains(*part)) {
        return Some(part);
    }
    let words: Vec<&str> = upper.split(['_', '-', '.']).collect();
    if let Some(word) = CREDENTIAL_WORDS.iter().find(|w| words.contains(w)) {
        return Some(word);
    }
    let last = words.last().copied().unwrap_or_default();
    if words.len() > 1
        && let Some(word) = CREDENTIAL_LAST_WORDS.iter().find(|w| **w == last)
    {
        return Some(word);
    }
    CREDENTIAL_ENDINGS
        .iter()
        .find(|ending| last.len() > ending.len() + 1 && last.ends_with(*ending))
        .filter(|_| !NOT_CREDENTIALS.contains(&last))
        .copied()
}

/// The word of `name` that makes it a credential if its value is opaque.
fn maybe_credential_name(name: &str) -> Option<&'static str> {
    let upper = name.to_ascii_uppercase();
    let words: Vec<&str> = upper.split(['_', '-', '.']).collect();
    MAYBE_CREDENTIAL_WORDS
        .iter()
        .find(|w| words.contains(w))
        .copied()
}

/// One token of 16+ key characters (letters, digits, `+/=_-`) that is not a path, a host name,
/// a list, a number or a UUID.
fn value_is_opaque(value: &str) -> bool {
    let value = value.trim();
    value.len() >= 16
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+/=_-".contains(c))
        && !value.starts_with('/')
        && value.chars().any(|c| c.is_ascii_alphabetic())
        && !is_uuid(value)
}

/// `8-4-4-4-12` hex digits.
fn is_uuid(value: &str) -> bool {
    let groups: Vec<&str> = value.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.chars().all(|c| c.is_ascii_hexdigit()))
}

/// The reason a URL in `value` carries a credential.
pub fn url_credential(value: &str) -> Option<&'static str> {
    let (scheme, rest) = value.trim().split_once("://")?;
    if scheme.is_empty()
        || !scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c))
    {
        return None;
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    if let Some((userinfo, _host)) = authority.rsplit_once('@') {
        match userinfo.split_once(':') {
            Some((_, password)) if !password.is_empty() => return Some(URL_PASSWORD),
            Some(_) => {}
            None if userinfo.len() >= 16
                && userinfo
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.~%".contains(c)) =>
            {
                return Some(URL_USERINFO_KEY);
            }
            None => {}
        }
    }
    let query = rest[end..].split_once('?').map(|(_, q)| q).unwrap_or("");
    let query = query.split('#').next().unwrap_or("");
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .any(|(key, value)| {
            !value.is_empty() && SECRET_PARAMETERS.contains(&key.to_ascii_lowercase().as_str())
        })
        .then_some(URL_SECRET_PARAMETER)
}

/// True when `value` holds a run of key characters that reads as random (module docs, rule 4).
pub fn looks_random(value: &str) -> bool {
    static RUN: OnceLock<Regex> = OnceLock::new();
    let run = RUN.get_or_init(|| {
        // A constant pattern: a failure here is a bug the tests catch.
        Regex::new(&format!(r"[0-9A-Za-z+/]{{{RANDOM_MIN_LEN},}}")).expect("RUN compiles")
    });
    let value = value.trim();
    if value.starts_with(['/', '~', '.']) || value.contains("://") {
        return false;
    }
    run.find_iter(value).any(|m| is_random_run(m.as_str()))
}

/// A run mixing upper and lower case and digits, with the entropy of random text of its length,
/// and less than half of it in lowercase runs of three or more letters (words: CamelCase
/// identifiers are mostly words, random text rarely).
fn is_random_run(run: &str) -> bool {
    let bytes = run.as_bytes();
    let has = |f: fn(&u8) -> bool| bytes.iter().any(f);
    if !(has(u8::is_ascii_uppercase) && has(u8::is_ascii_lowercase) && has(u8::is_ascii_digit)) {
        return false;
    }
    // 81% of log2(length) is below the entropy of 99% of random alphanumeric strings of that
    // length (measured from 20 to 64 characters); longer runs are held to 64's bar.
    let bar = 0.81 * (bytes.len().min(64) as f64).log2();
    if shannon_entropy(bytes) < bar {
        return false;
    }
    let in_words: usize = bytes
        .split(|b| !b.is_ascii_lowercase())
        .map(<[u8]>::len)
        .filter(|&len| len >= 3)
        .sum();
    in_words * 2 < bytes.len()
}

/// Bits per character.
fn shannon_entropy(bytes: &[u8]) -> f64 {
    let mut counts = [0usize; 256];
    for &b in bytes {
        counts[usize::from(b)] += 1;
    }
    let n = bytes.len() as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / n;
            -p * p.log2()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` characters of `alphabet`, spread by a fixed generator: token-shaped test values are
    /// built here, so no literal in the source looks like a live token to a scanner.
    fn chars(alphabet: &str, n: usize, seed: u64) -> String {
        let alphabet: Vec<char> = alphabet.chars().collect();
        let mut state = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                alphabet[((state >> 33) % alphabet.len() as u64) as usize]
            })
            .collect()
    }

    const ALNUM: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    const UPPER32: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    const HEX: &str = "0123456789abcdef";
    const LETTERS: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

    fn alnum(n: usize) -> String {
        chars(ALNUM, n, n as u64)
    }

    /// For each format: values it must find (alone and inside other text where that is how the
    /// token travels), and near misses it must not.
    fn examples(id: &str) -> (Vec<String>, Vec<String>) {
        let s = |v: &str| v.to_string();
        match id {
            "github-token" => (
                vec![
                    format!("ghp_{}", alnum(36)),
                    format!("gho_{}", alnum(36)),
                    format!(
                        "https://x-access-token:{}@github.com",
                        format!("ghs_{}", alnum(36))
                    ),
                ],
                vec![s("ghp_short"), format!("xghp_{}", alnum(36))],
            ),
            "github-fine-grained-pat" => (
                vec![format!("github_pat_{}_{}", alnum(22), alnum(59))],
                vec![s("github_pat_"), s("github_path_to_repo")],
            ),
            "gitlab-token" => (
                vec![
                    format!("glpat-{}", alnum(20)),
                    format!("glrt-{}", alnum(24)),
                ],
                vec![s("glpat-short"), s("gl-matrix")],
            ),
            "stripe-key" => (
                vec![
                    format!("sk_live_{}", alnum(24)),
                    format!("rk_test_{}", alnum(24)),
                    format!("whsec_{}", alnum(32)),
                ],
                vec![s("sk_live_"), s("task_live_stream")],
            ),
            "slack-token" => (
                vec![
                    format!(
                        "xoxb-{}-{}-{}",
                        chars("0123456789", 12, 1),
                        chars("0123456789", 13, 2),
                        alnum(24)
                    ),
                    format!("xoxp-{}", chars("0123456789", 12, 3)),
                    format!("xapp-1-A{}-{}", chars(UPPER32, 10, 4), alnum(20)),
                ],
                vec![s("xoxb-"), s("xbox-series")],
            ),
            "slack-webhook-url" => (
                vec![format!(
                    "https://hooks.slack.com/services/T{}/B{}/{}",
                    chars(UPPER32, 8, 5),
                    chars(UPPER32, 8, 6),
                    alnum(24)
                )],
                vec![
                    s("https://hooks.slack.com/"),
                    s("https://api.slack.com/apps"),
                ],
            ),
            "discord-webhook-url" => (
                vec![format!(
                    "https://discord.com/api/webhooks/{}/{}",
                    chars("0123456789", 18, 7),
                    alnum(68)
                )],
                vec![s("https://discord.com/api/webhooks/")],
            ),
            "teams-webhook-url" => (
                vec![format!(
                    "https://contoso.webhook.office.com/webhookb2/{}@{}",
                    chars(HEX, 32, 8),
                    chars(HEX, 32, 9)
                )],
                vec![s("https://outlook.office.com/mail")],
            ),
            "aws-access-token" => (
                vec![
                    format!("AKIA{}", chars(UPPER32, 16, 10)),
                    format!("ASIA{}", chars(UPPER32, 16, 11)),
                ],
                vec![s("AKIA"), format!("AKIA{}", chars(UPPER32, 17, 12))],
            ),
            "private-key" => (
                vec![
                    format!(
                        "-----BEGIN RSA PRIVATE KEY-----\n{}\n-----END RSA PRIVATE KEY-----\n",
                        alnum(64)
                    ),
                    s("-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn"),
                    s("-----BEGIN PGP PRIVATE KEY BLOCK-----"),
                ],
                vec![
                    s("-----BEGIN CERTIFICATE-----\nMIIB"),
                    s("-----BEGIN PUBLIC KEY-----"),
                ],
            ),
            "jwt" => (
                vec![
                    format!("eyJhbGciOiJIUzI1NiJ9.eyJ{}.{}", alnum(20), alnum(43)),
                    format!("Bearer eyJhbGciOiJub25lIn0.eyJ{}.", alnum(20)),
                ],
                vec![s("eyes.eyebrows.face"), s("ey.ey.")],
            ),
            "1password-token" => (
                vec![
                    format!("ops_eyJ{}", alnum(300)),
                    format!(
                        "A3-{}-{}-{}-{}-{}",
                        chars(UPPER32, 6, 13),
                        chars(UPPER32, 11, 14),
                        chars(UPPER32, 5, 15),
                        chars(UPPER32, 5, 16),
                        chars(UPPER32, 5, 17)
                    ),
                ],
                vec![s("ops_team"), s("A3-paper")],
            ),
            "openai-api-key" => (
                vec![
                    format!("sk-proj-{}", alnum(80)),
                    format!("sk-{}T3BlbkFJ{}", alnum(20), alnum(20)),
                ],
                vec![s("sk-proj-"), s("desk-project-plan")],
            ),
            "anthropic-api-key" => (
                vec![format!("sk-ant-api03-{}AA", alnum(93))],
                vec![s("sk-ant-"), s("task-ant-api03")],
            ),
            "huggingface-access-token" => (
                vec![format!("hf_{}", chars(LETTERS, 34, 18))],
                vec![s("hf_transfer"), s("/home/u/.cache/hf_home")],
            ),
            "npm-access-token" => (
                vec![format!("npm_{}", alnum(36))],
                vec![s("npm_config_cache"), format!("npm_{}", alnum(20))],
            ),
            "pypi-upload-token" => (
                vec![format!("pypi-AgEIcHlwaS5vcmc{}", alnum(60))],
                vec![s("pypi-simple"), s("pypi-AgEI")],
            ),
            "gcp-api-key" => (vec![format!("AIza{}", alnum(35))], vec![s("AIzaShort")]),
            "google-oauth-token" => (
                vec![format!("ya29.{}", alnum(60)), format!("1//0{}", alnum(60))],
                vec![s("ya29"), s("1//0")],
            ),
            "sendgrid-api-token" => (
                vec![format!("SG.{}.{}", alnum(22), alnum(43))],
                vec![s("SG.short.x"), s("SG.1")],
            ),
            "digitalocean-token" => (
                vec![format!("dop_v1_{}", chars(HEX, 64, 19))],
                vec![s("dop_v1_"), s("doc_v1_abc")],
            ),
            "shopify-token" => (
                vec![format!("shpat_{}", chars(HEX, 32, 20))],
                vec![s("shpat_"), s("shop_at_home")],
            ),
            "vault-token" => (
                vec![format!("hvs.{}", alnum(90))],
                vec![s("hvs.short"), s("https://vault.internal:8200")],
            ),
            "databricks-api-token" => (
                vec![format!("dapi{}", chars(HEX, 32, 21))],
                vec![s("dapi"), s("dapper")],
            ),
            "doppler-api-token" => (vec![format!("dp.pt.{}", alnum(43))], vec![s("dp.pt.short")]),
            "age-secret-key" => (
                vec![format!("AGE-SECRET-KEY-1{}", chars(UPPER32, 58, 22))],
                vec![s("AGE-SECRET-KEY-1")],
            ),
            "telegram-bot-token" => (
                vec![format!("{}:AA{}", chars("0123456789", 10, 23), alnum(33))],
                vec![s("1234567890:short"), s("10:30")],
            ),
            "connection-string-secret" => (
                vec![
                    format!(
                        "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={}==;EndpointSuffix=core.windows.net",
                        alnum(86)
                    ),
                    s("Server=db;Database=app;User Id=app;Password=hunter2;"),
                ],
                vec![s("Server=db;Database=app;Trusted_Connection=True;")],
            ),
            "authorization-header" => (
                vec![
                    format!("Bearer {}", alnum(40)),
                    format!("token {}", alnum(40)),
                ],
                vec![s("Bearer"), s("basic training for new staff")],
            ),
            other => panic!("format {other} has no examples: add them here"),
        }
    }

    /// A test per format, table-driven: each finds its examples under its own id, and none of
    /// its near misses (nor any other format) finds them. A format without examples fails.
    #[test]
    fn every_known_format_finds_its_tokens_and_not_its_near_misses() {
        for format in FORMATS {
            Regex::new(format.pattern)
                .unwrap_or_else(|e| panic!("{} does not compile: {e}", format.id));
            let (hits, misses) = examples(format.id);
            assert!(!hits.is_empty() && !misses.is_empty(), "{}", format.id);
            for hit in &hits {
                assert_eq!(
                    known_format(hit),
                    Some(format.id),
                    "{} on its example",
                    format.id
                );
            }
            for miss in &misses {
                assert_eq!(known_format(miss), None, "{} on a near miss", format.id);
            }
        }
    }

    #[test]
    fn format_ids_are_unique_and_cite_a_rule() {
        for (i, format) in FORMATS.iter().enumerate() {
            assert!(!format.follows.is_empty(), "{}", format.id);
            assert!(
                FORMATS[i + 1..].iter().all(|other| other.id != format.id),
                "{} twice",
                format.id
            );
        }
    }

    #[test]
    fn a_url_with_a_password_is_a_credential() {
        assert_eq!(
            url_credential("postgres://app:s3cret@db:5432/app"),
            Some(URL_PASSWORD)
        );
        assert_eq!(
            url_credential("https://user:pw@example.invalid/x?y=z"),
            Some(URL_PASSWORD)
        );
        assert_eq!(url_credential("https://example.invalid/a@b"), None);
        assert_eq!(url_credential("postgres://app@db/app"), None);
        assert_eq!(url_credential("user:pw@host"), None);
        assert_eq!(
            url_credential("redis://:pw@cache:6379/0"),
            Some(URL_PASSWORD)
        );
    }

    #[test]
    fn a_url_whose_userinfo_is_a_key_is_a_credential() {
        let dsn = format!(
            "https://{}@o450000.ingest.sentry.io/5000000",
            chars(HEX, 32, 30)
        );
        assert_eq!(url_credential(&dsn), Some(URL_USERINFO_KEY));
        assert_eq!(url_credential("ssh://git@github.com/org/repo.git"), None);
        assert_eq!(
            url_credential("https://deploy-user@git.example.invalid/"),
            None
        );
    }

    #[test]
    fn a_url_with_a_credential_parameter_is_a_credential() {
        let signed = format!(
            "https://bucket.s3.amazonaws.com/f?X-Amz-Credential=a&X-Amz-Signature={}",
            chars(HEX, 64, 31)
        );
        assert_eq!(url_credential(&signed), Some(URL_SECRET_PARAMETER));
        assert_eq!(
            url_credential("https://api.example.invalid/v1?api_key=abc123"),
            Some(URL_SECRET_PARAMETER)
        );
        assert_eq!(url_credential("https://pypi.org/simple?page=2"), None);
        assert_eq!(url_credential("https://example.invalid/?token="), None);
    }

    #[test]
    fn names_that_say_credential_withhold_whatever_the_value() {
        for (name, word) in [
            ("ANTHROPIC_API_KEY", "KEY"),
            ("GITHUB_TOKEN", "TOKEN"),
            ("AWS_SECRET_ACCESS_KEY", "SECRET"),
            ("PGPASSWORD", "PASSWORD"),
            ("GPG_PASSPHRASE", "PASSPHRASE"),
            ("GOOGLE_APPLICATION_CREDENTIALS", "CREDENTIAL"),
            ("GH_AUTH", "AUTH"),
            ("SLACK_WEBHOOK_URL", "WEBHOOK"),
            ("OPENAIKEY", "KEY"),
            ("hf_token", "TOKEN"),
            // Issue 23: these passed the name filter of issue 11.
            ("DB_PASS", "PASS"),
            ("GH_PAT", "PAT"),
            ("GITLAB_PAT", "PAT"),
            ("SENTRY_DSN", "DSN"),
            ("COOKIE", "COOKIE"),
            ("MYSQL_PWD", "PWD"),
            ("HTTP_AUTHORIZATION", "AUTHORIZATION"),
            ("DB_CREDS", "CREDS"),
        ] {
            assert_eq!(credential_name(name), Some(word), "{name}");
            assert_eq!(classify(name, "x"), Some(Why::Name(word)), "{name}");
        }
        for name in [
            "PATH",
            "PWD",
            "OLDPWD",
            "TOKENIZERS_PARALLELISM",
            "KEYBOARD",
            "MONKEY",
            "KEYMAP",
            "DATABASE_URL",
            "GIT_ASKPASS",
            "SSH_ASKPASS",
            "PASSENGER_APP_ENV",
            "PATTERN",
            "COMPASS_HOME",
        ] {
            assert_eq!(credential_name(name), None, "{name}");
        }
    }

    #[test]
    fn names_that_may_say_credential_withhold_an_opaque_value_only() {
        let opaque = alnum(32).to_lowercase();
        for (name, word) in [
            ("SESSION", "SESSION"),
            ("FLASK_SESSION_ID", "SESSION"),
            ("APP_PRIVATE", "PRIVATE"),
            ("RELEASE_SIGNING", "SIGNING"),
        ] {
            assert_eq!(
                classify(name, &opaque),
                Some(Why::NameAndValue(word)),
                "{name}"
            );
        }
        for (name, value) in [
            ("XDG_SESSION_ID", "2"),
            ("XDG_SESSION_TYPE", "wayland"),
            ("DESKTOP_SESSION", "ubuntu"),
            ("DBUS_SESSION_BUS_ADDRESS", "unix:path=/run/user/1000/bus"),
            (
                "SESSION_MANAGER",
                "local/host:@/tmp/.ICE-unix/1989,unix/host:/tmp/.ICE-unix/1989",
            ),
            ("WT_SESSION", "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"),
            (
                "TERM_SESSION_ID",
                "w0t0p0:0A1B2C3D-4E5F-4A6B-8C7D-9E0F1A2B3C4D",
            ),
            ("SECURITYSESSIONID", "186a4"),
            ("PRIVATE_REGISTRY", "registry.internal"),
            ("SIGNING_KEYRING_DIR", "/home/u/.gnupg"),
        ] {
            assert_eq!(classify(name, value), None, "{name}");
        }
    }

    /// Random tokens of each length, 200 per length: the share the rule finds is at least what
    /// the module docs say (95% at 20 characters, 99% from 32).
    #[test]
    fn a_random_looking_value_is_a_credential_whatever_its_name() {
        for (n, at_least) in [
            (20, 190),
            (24, 190),
            (32, 198),
            (40, 198),
            (64, 198),
            (100, 200),
        ] {
            let found = (0..200)
                .filter(|seed| looks_random(&chars(ALNUM, n, seed * 1000 + n as u64)))
                .count();
            assert!(found >= at_least, "{n} characters: {found} of 200");
        }
        assert_eq!(classify("BUILD_THING", &alnum(40)), Some(Why::RandomValue));
        let base64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        assert!(looks_random(&format!("{}==", chars(base64, 42, 40))));
    }

    #[test]
    fn ordinary_values_do_not_look_random() {
        for value in [
            "PythonFrameworkVersion312",
            "ApplicationInsightsNoStatsbeat1",
            "MyVeryLongCamelCaseName2",
            "x86_64-conda-linux-gnu",
            "exp-2024-05-ResNet50-lr3e4",
            "application.com.microsoft.VSCode.12345678.12345679",
            "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
            "/home/user/.local/share/JetBrains/Toolbox/scripts2024",
            "https://github.com/Org/RepoName2024/releases",
            "rs=0:di=01;34:ln=01;36:mh=00:pi=40;33:so=01;35:do=01;35:bd=40;33;01",
            "--max-old-space-size=8192 --enable-source-maps",
        ] {
            assert!(!looks_random(value), "{value}");
        }
        // Hex and lowercase ids (commit hashes, digests, systemd's INVOCATION_ID) pass.
        assert!(!looks_random(&chars(HEX, 40, 50)));
        assert!(!looks_random(&chars(HEX, 64, 51)));
        assert!(!looks_random(&chars(
            "abcdefghijklmnopqrstuvwxyz0123456789",
            32,
            52
        )));
    }

    #[test]
    fn the_reason_names_the_rule_and_never_holds_the_value() {
        let token = format!("ghp_{}", alnum(36));
        let why = classify("ANYTHING", &token).expect("a token");
        assert_eq!(why.to_string(), "github-token");
        assert_eq!(Why::Name("PASS").to_string(), "name: PASS");
        assert_eq!(
            classify("DB", &format!("mysql://u:{}@h/d", alnum(12))),
            Some(Why::Url(URL_PASSWORD))
        );
    }
}
