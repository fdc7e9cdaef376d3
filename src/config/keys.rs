//! The keys of a configuration file, generated from the command line's own declaration.
//!
//! Owns: which arguments are settings, and checking a file's value the way the flag's would
//! be checked. A key is the long name of an option of a command that reads the configuration
//! (`max-output`, `llm-base-url`), hidden flags of variable-only settings included
//! (`boot-timeout-ms`); the flag, variable, default, parser and doc are the clap argument's,
//! declared once in `cli/*_options.rs`. So a new setting is a key with nothing else to edit.
//! Not settings: the options in [`NOT_SETTINGS`], which say what to do this time (which
//! session, which directory, JSON output), not how pi-repl behaves.

use std::ffi::OsString;

/// Options of the commands that read the configuration which are not settings: they name what
/// this one run works on or prints, and a file that fixed them would be a surprise.
pub const NOT_SETTINGS: &[&str] = &[
    "help",
    "version",
    "cwd",
    "session",
    "fork-from",
    "fork-at",
    "conversation-file",
    "kernel-id",
    "json",
    "workspace",
    "agent-workspace",
    "rewind",
];

/// One key: its argument's names and doc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    /// The long flag without dashes: `max-output`.
    pub name: String,
    /// The environment variable, if the setting has one.
    pub variable: Option<String>,
    /// False for a variable-only setting (its flag is hidden).
    pub flag_shown: bool,
    /// The argument's help, first paragraph.
    pub help: String,
    /// The built-in default, as text (empty: none).
    pub default: Vec<String>,
    /// The commands that read it (`exec`, `mcp`, ...).
    pub commands: Vec<String>,
    /// Whether it takes a list (`pass-env = ["A", "B"]`).
    pub list: bool,
    /// The separator of the list in one string (`PI_REPL_PASS_ENV=A,B`).
    pub delimiter: Option<char>,
}

/// Every key of the commands that read the configuration.
#[derive(Debug, Clone)]
pub struct Keys {
    keys: Vec<Key>,
    /// The command line's definition, to check values with the arguments' own parsers.
    command: clap::Command,
    reading: Vec<String>,
}

/// A value a key's parser refused: what it takes, and an example.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub expected: String,
    pub example: Option<String>,
}

impl Keys {
    /// The keys of `command`'s subcommands named in `reading`, in declaration order.
    pub fn of(command: &clap::Command, reading: &[&str]) -> Keys {
        let mut keys: Vec<Key> = Vec::new();
        for sub in command.get_subcommands() {
            let name = sub.get_name();
            if !reading.contains(&name) {
                continue;
            }
            for arg in sub.get_arguments() {
                let Some(long) = arg.get_long() else {
                    continue;
                };
                if NOT_SETTINGS.contains(&long) {
                    continue;
                }
                if let Some(key) = keys.iter_mut().find(|key| key.name == long) {
                    key.commands.push(name.to_string());
                    continue;
                }
                keys.push(Key {
                    name: long.to_string(),
                    variable: arg.get_env().map(|env| env.to_string_lossy().into_owned()),
                    flag_shown: !arg.is_hide_set(),
                    help: arg
                        .get_help()
                        .map(|help| help.to_string())
                        .unwrap_or_default(),
                    default: arg
                        .get_default_values()
                        .iter()
                        .map(|value| value.to_string_lossy().into_owned())
                        .collect(),
                    commands: vec![name.to_string()],
                    list: matches!(arg.get_action(), clap::ArgAction::Append)
                        || arg.get_value_delimiter().is_some(),
                    delimiter: arg.get_value_delimiter(),
                });
            }
        }
        Keys {
            keys,
            command: command.clone(),
            reading: reading.iter().map(|name| name.to_string()).collect(),
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &Key> {
        self.keys.iter()
    }

    pub fn get(&self, name: &str) -> Option<&Key> {
        self.keys.iter().find(|key| key.name == name)
    }

    /// The commands that read the configuration.
    pub fn reading(&self) -> &[String] {
        &self.reading
    }

    /// The key nearest to `name`, a misspelt or mis-cased key, a flag (`--max-output`) or a
    /// variable (`PI_REPL_MAX_OUTPUT_CHARS`).
    pub fn nearest(&self, name: &str) -> Option<&str> {
        let wanted = name.trim_start_matches('-');
        if let Some(key) = self
            .keys
            .iter()
            .find(|key| key.variable.as_deref() == Some(wanted))
        {
            return Some(&key.name);
        }
        let wanted = wanted.to_ascii_lowercase().replace('_', "-");
        nearest_of(&wanted, self.keys.iter().map(|key| key.name.as_str()))
    }

    /// Checks `values` for key `name` with its argument's own parser (the one its flag and
    /// variable go through): the argument alone, with `values` as its defaults, which clap
    /// parses as it parses any value.
    pub fn check(&self, name: &str, values: &[String]) -> Result<(), Refused> {
        let Some(arg) = self
            .command
            .get_subcommands()
            .filter(|sub| self.reading.iter().any(|reading| reading == sub.get_name()))
            .find_map(|sub| sub.get_arguments().find(|arg| arg.get_long() == Some(name)))
        else {
            return Ok(());
        };
        let alone = arg
            .clone()
            .env(None)
            .required(false)
            .requires(clap::builder::Resettable::<clap::Id>::Reset)
            .conflicts_with(clap::builder::Resettable::<clap::Id>::Reset)
            .default_values(values.to_vec());
        let parsed = clap::Command::new("pi-repl")
            .no_binary_name(true)
            .arg(alone)
            .try_get_matches_from(Vec::<OsString>::new());
        match parsed {
            Ok(_) => Ok(()),
            Err(error) => {
                let (expected, example) = super::expected::expected_of(&error);
                Err(Refused { expected, example })
            }
        }
    }
}

/// The candidate closest to `wanted` by Jaro-Winkler similarity, if it is close enough to be
/// what was meant.
pub fn nearest_of<'a>(wanted: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .map(|candidate| (strsim::jaro_winkler(wanted, candidate), candidate))
        .filter(|(score, _)| *score >= 0.75)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, candidate)| candidate)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Args, CommandFactory, Parser, Subcommand};

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        command: Sub,
    }

    #[derive(Debug, Subcommand)]
    enum Sub {
        Exec(Options),
        Setup {
            #[arg(long)]
            python: Option<String>,
        },
    }

    /// A parser of ours, as `cli/values.rs` writes them (kept here: `config` is below `cli`).
    fn at_least_100(text: &str) -> Result<u64, crate::config::expected::Expected> {
        text.parse::<u64>()
            .ok()
            .filter(|value| *value >= 100)
            .ok_or_else(|| {
                crate::config::expected::Expected::new("a whole number of at least 100", "1000")
            })
    }

    #[derive(Debug, Args)]
    struct Options {
        /// Characters kept.
        #[arg(long, env = "T_MAX_OUTPUT", value_parser = at_least_100,
              default_value_t = 30000)]
        max_output: u64,
        #[arg(long)]
        session: Option<String>,
        #[arg(long, value_delimiter = ',')]
        pass_env: Vec<String>,
    }

    #[test]
    fn keys_come_from_the_commands_that_read_the_files_and_skip_per_run_options() {
        let keys = Keys::of(&Cli::command(), &["exec"]);
        let names: Vec<&str> = keys.iter().map(|key| key.name.as_str()).collect();
        assert_eq!(names, ["max-output", "pass-env"]);
        let max = keys.get("max-output").unwrap();
        assert_eq!(max.variable.as_deref(), Some("T_MAX_OUTPUT"));
        assert_eq!(max.default, ["30000"]);
        assert_eq!(max.help, "Characters kept");
        assert!(keys.get("pass-env").unwrap().list);
        assert!(
            keys.get("python").is_none(),
            "setup does not read the files"
        );
    }

    #[test]
    fn values_are_checked_by_the_flags_own_parser() {
        let keys = Keys::of(&Cli::command(), &["exec"]);
        assert_eq!(keys.check("max-output", &["8000".into()]), Ok(()));
        let refused = keys.check("max-output", &["5".into()]).unwrap_err();
        assert_eq!(refused.expected, "expected a whole number of at least 100");
        assert_eq!(refused.example.as_deref(), Some("1000"));
    }

    #[test]
    fn the_nearest_key_is_found_from_a_typo_a_flag_or_a_variable() {
        let keys = Keys::of(&Cli::command(), &["exec"]);
        assert_eq!(keys.nearest("max-ouput"), Some("max-output"));
        assert_eq!(keys.nearest("max_output"), Some("max-output"));
        assert_eq!(keys.nearest("--max-output"), Some("max-output"));
        assert_eq!(keys.nearest("T_MAX_OUTPUT"), Some("max-output"));
        assert_eq!(keys.nearest("zzzz"), None);
    }
}
