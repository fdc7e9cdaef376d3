//! How the text of a setting becomes a typed value, and the one `error:`/`hint:` for text that
//! does not.
//!
//! Owns: the value parsers every setting uses (`value_parser = values::millis`, ...), whether
//! its text comes from a flag or from its environment variable (clap's `env`), and [`BadValue`],
//! the failure a malformed value becomes. A bad value reads the same, with the same hint and
//! exit code ([`Exit::Usage`]), from a flag and from a variable; only the name differs:
//!
//! ```text
//! error: invalid value "soon" for PI_REPL_BOOT_TIMEOUT_MS: expected a whole number of milliseconds
//! hint: set it like `PI_REPL_BOOT_TIMEOUT_MS=60000`, or unset it for the default
//! ```
//!
//! Does not own: what a setting means or its default (the field that declares it, in the
//! `*_options.rs` of its command).

use std::ffi::OsStr;

use super::{Exit, Failure};
pub use crate::config::expected::Expected;
use crate::config::expected::expected_of;

/// A whole number of milliseconds (0 allowed; what 0 means is the setting's).
pub fn millis(text: &str) -> Result<u64, Expected> {
    text.trim()
        .parse::<u64>()
        .map_err(|_| Expected::new("a whole number of milliseconds", "60000"))
}

/// A whole number, 0 allowed.
pub fn whole(text: &str) -> Result<u64, Expected> {
    text.trim()
        .parse::<u64>()
        .map_err(|_| Expected::new("a whole number", "10"))
}

/// A whole number above 0.
pub fn positive(text: &str) -> Result<u64, Expected> {
    match text.trim().parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(Expected::new("a whole number above 0", "4")),
    }
}

/// A whole number of at least `min` (`--max-output`, `--image-max-side`).
pub fn at_least(min: u64) -> impl Fn(&str) -> Result<u64, Expected> + Clone + Send + Sync {
    move |text| match text.trim().parse::<u64>() {
        Ok(n) if n >= min => Ok(n),
        _ => Err(Expected::new(
            format!("a whole number of at least {min}"),
            (min * 10).to_string(),
        )),
    }
}

/// `1`, `true`, `yes`, `on` or `0`, `false`, `no`, `off` (any case).
pub fn boolean(text: &str) -> Result<bool, Expected> {
    match text.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(Expected::new("1 or 0 (or true/false, yes/no, on/off)", "1")),
    }
}

/// Text that is not blank (a name, a URL, a path).
pub fn text(text: &str) -> Result<String, Expected> {
    match text.trim() {
        "" => Err(Expected::new("a non-empty value", "NAME")),
        trimmed => Ok(trimmed.to_string()),
    }
}

/// Prepares the command line's definition for parsing, in `command` and its subcommands: an
/// argument whose variable is set but empty reads as not set (as an empty variable always has,
/// rather than as a bad value), and `--help` names each variable without its value (a variable
/// may hold a token, or a URL with credentials in it).
pub fn prepare(command: clap::Command) -> clap::Command {
    command
        .mut_args(|arg| {
            let empty = arg
                .get_env()
                .and_then(std::env::var_os)
                .is_some_and(|value| value.to_string_lossy().trim().is_empty());
            let arg = arg.hide_env_values(true);
            if empty { arg.env(None) } else { arg }
        })
        .mut_subcommands(prepare)
}

/// A malformed value of a setting, from a flag or from its environment variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadValue {
    /// The flag (`--max-output`), or the variable (`PI_REPL_MAX_OUTPUT_CHARS`) when the value
    /// came from it.
    pub from: Origin,
    /// The text as given.
    pub value: String,
    /// What the setting takes: `expected a whole number of milliseconds`, `one of: openai,
    /// anthropic`.
    pub expected: String,
    /// A valid value for the hint.
    pub example: Option<String>,
}

/// Where a bad value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// `--max-output`.
    Flag(String),
    /// `PI_REPL_MAX_OUTPUT_CHARS`, and the flag it stands for unless that flag is hidden.
    Variable { name: String, flag: Option<String> },
}

impl BadValue {
    /// The bad value behind a clap error, if it is one (a value clap or one of [`values`]'s
    /// parsers refused). `command` is the whole command line's definition and `args` the
    /// arguments as given, to tell a flag's value from its variable's.
    ///
    /// [`values`]: self
    pub fn from_clap(
        error: &clap::Error,
        command: &clap::Command,
        args: &[std::ffi::OsString],
    ) -> Option<BadValue> {
        use clap::error::{ContextKind, ContextValue, ErrorKind};
        let string = |kind| match error.get(kind) {
            Some(ContextValue::String(text)) => Some(text.clone()),
            _ => None,
        };
        let (expected, example) = match error.kind() {
            ErrorKind::ValueValidation => {
                std::error::Error::source(error)?;
                expected_of(error)
            }
            ErrorKind::InvalidValue => {
                let Some(ContextValue::Strings(_)) = error.get(ContextKind::ValidValue) else {
                    return None;
                };
                expected_of(error)
            }
            _ => return None,
        };
        let value = string(ContextKind::InvalidValue)?;
        // `--max-output <CHARS>`
        let shown = string(ContextKind::InvalidArg)?;
        let long = shown
            .strip_prefix("--")?
            .split([' ', '='])
            .next()?
            .to_string();
        let arg = find_long(command, &long)?;
        let flag = format!("--{long}");
        let given_as_flag = args
            .iter()
            .skip(1)
            .take_while(|arg| arg.as_os_str() != OsStr::new("--"))
            .filter_map(|arg| arg.to_str())
            .any(|arg| arg == flag || arg.starts_with(&format!("{flag}=")));
        let from = match arg.get_env() {
            Some(name) if !given_as_flag => Origin::Variable {
                name: name.to_string_lossy().into_owned(),
                flag: (!arg.is_hide_set()).then_some(flag),
            },
            _ => Origin::Flag(flag),
        };
        Some(BadValue {
            from,
            value,
            expected,
            example,
        })
    }

    /// The failure to report: `error:` naming the value and where it came from, `hint:` with a
    /// valid one.
    pub fn into_failure(self) -> Failure {
        let (name, hint) = match &self.from {
            Origin::Flag(flag) => (
                flag.clone(),
                match &self.example {
                    Some(example) => format!("pass it like `{flag} {example}`"),
                    None => format!("fix {flag} or leave it out"),
                },
            ),
            Origin::Variable { name, flag } => (
                match flag {
                    Some(flag) => format!("{name} (the variable of {flag})"),
                    None => name.clone(),
                },
                match &self.example {
                    Some(example) => {
                        format!("set it like `{name}={example}`, or unset it for the default")
                    }
                    None => format!("fix {name} or unset it"),
                },
            ),
        };
        Failure {
            error: anyhow::anyhow!(
                "invalid value {:?} for {name}: {}",
                self.value,
                self.expected
            ),
            hint: Some(hint),
            exit: Exit::Usage,
        }
    }
}

/// The argument `--long` of `command` or of any of its subcommands.
fn find_long<'a>(command: &'a clap::Command, long: &str) -> Option<&'a clap::Arg> {
    command
        .get_arguments()
        .find(|arg| arg.get_long() == Some(long))
        .or_else(|| {
            command
                .get_subcommands()
                .find_map(|sub| find_long(sub, long))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Command {
        #[arg(long, value_parser = millis)]
        timeout: Option<u64>,
        #[arg(long, value_parser = at_least(100))]
        max_output: Option<u64>,
        #[arg(long, value_parser = ["openai", "anthropic"])]
        api: Option<String>,
    }

    fn bad(args: &[&str]) -> BadValue {
        let args: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
        let error = Command::try_parse_from(&args).unwrap_err();
        BadValue::from_clap(&error, &<Command as clap::CommandFactory>::command(), &args).unwrap()
    }

    #[test]
    fn parsers_take_what_they_say_and_refuse_the_rest() {
        assert_eq!(millis(" 250 "), Ok(250));
        assert!(millis("soon").is_err());
        assert_eq!(positive("3"), Ok(3));
        assert!(positive("0").is_err());
        assert_eq!(at_least(100)("100"), Ok(100));
        assert_eq!(at_least(100)("99").unwrap_err().example, "1000");
        assert_eq!(boolean("Yes"), Ok(true));
        assert_eq!(boolean("off"), Ok(false));
        assert!(boolean("maybe").is_err());
        assert!(text("  ").is_err());
    }

    #[test]
    fn a_bad_flag_value_names_the_flag_and_a_valid_one() {
        let failure = bad(&["prog", "--timeout", "soon"]).into_failure();
        assert_eq!(
            failure.error.to_string(),
            "invalid value \"soon\" for --timeout: expected a whole number of milliseconds"
        );
        assert_eq!(
            failure.hint.as_deref(),
            Some("pass it like `--timeout 60000`")
        );
        assert_eq!(failure.exit, Exit::Usage);
        let failure = bad(&["prog", "--max-output=5"]).into_failure();
        assert!(
            failure.error.to_string().ends_with("at least 100"),
            "{}",
            failure.error
        );
    }

    #[test]
    fn a_parser_that_is_not_ours_still_gives_an_error_and_a_hint() {
        #[derive(Debug, Parser)]
        struct Plain {
            #[arg(long)]
            count: Option<u32>,
        }
        let args: Vec<std::ffi::OsString> =
            ["prog", "--count", "many"].iter().map(Into::into).collect();
        let error = Plain::try_parse_from(&args).unwrap_err();
        let failure =
            BadValue::from_clap(&error, &<Plain as clap::CommandFactory>::command(), &args)
                .unwrap()
                .into_failure();
        assert_eq!(
            failure.error.to_string(),
            "invalid value \"many\" for --count: invalid digit found in string"
        );
        assert_eq!(failure.hint.as_deref(), Some("fix --count or leave it out"));
    }

    #[test]
    fn a_value_outside_a_list_names_the_list() {
        let value = bad(&["prog", "--api", "gemini"]);
        assert_eq!(value.from, Origin::Flag("--api".into()));
        assert_eq!(value.expected, "expected one of: openai, anthropic");
        assert_eq!(value.example.as_deref(), Some("openai"));
    }

    #[test]
    fn a_bad_variable_value_names_the_variable_and_the_flag_it_stands_for() {
        let value = BadValue {
            from: Origin::Variable {
                name: "PI_REPL_MAX_OUTPUT_CHARS".into(),
                flag: Some("--max-output".into()),
            },
            value: "lots".into(),
            expected: "expected a whole number of at least 100".into(),
            example: Some("1000".into()),
        };
        let failure = value.into_failure();
        assert_eq!(
            failure.error.to_string(),
            "invalid value \"lots\" for PI_REPL_MAX_OUTPUT_CHARS (the variable of --max-output): \
             expected a whole number of at least 100"
        );
        assert_eq!(
            failure.hint.as_deref(),
            Some("set it like `PI_REPL_MAX_OUTPUT_CHARS=1000`, or unset it for the default")
        );
    }
}
