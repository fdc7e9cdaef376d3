//! `pi-repl config`: the settings a command runs with, and where each one comes from.
//!
//! It reads the given command line (`pi-repl config exec --max-output 500`; `mcp` when none is
//! given) exactly as that command would: the same files, the same variables, the same flags,
//! through the same parse (`cli::configured`), and asks clap where each value came from. A
//! value from a file names the file and the line. Values that look like a credential are not
//! shown. `--json` prints one object for tools.

use std::ffi::OsString;

use clap::parser::ValueSource;
use serde_json::json;

use super::{Exit, Failure, values};
use crate::config::{Key, Loaded};

/// The commands whose settings can be shown (the hidden `agent` is `exec`'s).
const SHOWN: &[&str] = &["mcp", "exec", "doctor", "helpers"];

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Each value comes from a flag, else its variable, else the project file \
    (.pi/pi-repl.toml, from the working directory up to the git root), else the user file \
    (PI_REPL_CONFIG, else ~/.pi/agent/pi-repl.toml), else the default. Keys: \
    docs/configuration.md."
)]
pub struct ConfigArgs {
    /// Print one JSON object (files, settings with their sources) instead of the table.
    #[arg(long)]
    pub json: bool,

    /// The command line whose settings to show, as you would run it: `exec --max-output 500`,
    /// `mcp --cwd DIR` [default: mcp].
    #[arg(
        value_name = "COMMAND",
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub command: Vec<String>,
}

/// Where one setting's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Source {
    Flag(String),
    Variable(String),
    File {
        layer: crate::config::Layer,
        path: std::path::PathBuf,
        line: usize,
    },
    Default,
}

impl Source {
    fn kind(&self) -> &'static str {
        match self {
            Source::Flag(_) => "flag",
            Source::Variable(_) => "variable",
            Source::File { layer, .. } => layer.describe(),
            Source::Default => "default",
        }
    }

    fn describe(&self) -> String {
        match self {
            Source::Flag(flag) => format!("flag {flag}"),
            Source::Variable(name) => format!("variable {name}"),
            Source::File { layer, path, line } => {
                format!("{} {}:{line}", layer.describe(), path.display())
            }
            Source::Default => "default".into(),
        }
    }
}

/// One row: a key, its value (none: not set), where it came from.
struct Row<'a> {
    key: &'a Key,
    values: Option<Vec<String>>,
    source: Source,
}

pub async fn run(args: ConfigArgs) -> Result<Exit, Failure> {
    let (name, rest) = match args.command.split_first() {
        Some((name, rest)) => (name.clone(), rest.to_vec()),
        None => ("mcp".to_string(), Vec::new()),
    };
    if !SHOWN.contains(&name.as_str()) {
        return Err(Failure::usage(
            anyhow::anyhow!(
                "`pi-repl config` shows the settings of a command that runs a kernel, not of `{name}`"
            ),
            Some(format!(
                "name one of {} first, e.g. `pi-repl config exec --max-output 500`",
                SHOWN.join(", ")
            )),
        ));
    }
    let argv: Vec<OsString> = ["pi-repl".to_string(), name.clone()]
        .into_iter()
        .chain(rest)
        .map(OsString::from)
        .collect();
    let (command, loaded) = super::configured(&argv);
    if let Some(problem) = loaded.problems.first() {
        return Err(super::problem_failure(problem));
    }
    // The cells of `exec` are not needed to show its settings.
    let command = command.mut_subcommand(&name, |sub| {
        sub.mut_args(|arg| {
            if arg.is_positional() {
                arg.required(false)
            } else {
                arg
            }
        })
    });
    let matches = match command.clone().try_get_matches_from(&argv) {
        Ok(matches) => matches,
        Err(error) => match values::BadValue::from_clap(&error, &command, &argv) {
            Some(bad) => return Err(bad.into_failure()),
            None => error.exit(),
        },
    };
    super::requirements(&matches)?;
    let Some((_, sub_matches)) = matches.subcommand() else {
        return Err(Failure::new(anyhow::anyhow!("no command was read"), None));
    };
    let Some(sub_command) = command.find_subcommand(&name) else {
        return Err(Failure::new(anyhow::anyhow!("no command `{name}`"), None));
    };
    let keys = super::keys();
    let mut rows = Vec::new();
    for key in keys.iter().filter(|key| key.commands.contains(&name)) {
        let Some(arg) = sub_command
            .get_arguments()
            .find(|arg| arg.get_long() == Some(key.name.as_str()))
        else {
            continue;
        };
        let id = arg.get_id().as_str();
        let values = sub_matches.try_get_raw(id).ok().flatten().map(|raw| {
            raw.map(|value| value.to_string_lossy().into_owned())
                .collect::<Vec<String>>()
        });
        let source = match sub_matches.value_source(id) {
            Some(ValueSource::CommandLine) => Source::Flag(format!("--{}", key.name)),
            Some(ValueSource::EnvVariable) => {
                Source::Variable(key.variable.clone().unwrap_or_default())
            }
            _ => match loaded.value(&key.name) {
                Some(entry) => Source::File {
                    layer: entry.layer,
                    path: entry.file.clone(),
                    line: entry.line,
                },
                None => Source::Default,
            },
        };
        rows.push(Row {
            key,
            values: values.map(|values| hide_credentials(key, values)),
            source,
        });
    }
    let not_read: Vec<&crate::config::Entry> = loaded
        .entries
        .iter()
        .filter(|entry| {
            keys.get(&entry.key)
                .is_some_and(|key| !key.commands.contains(&name))
        })
        .collect();
    let cwd = super::working_dir_of(&command, &argv);
    if args.json {
        print_json(&name, &loaded, &rows, &not_read);
    } else {
        print_table(&name, &loaded, &rows, &not_read, &cwd);
    }
    Ok(Exit::Success)
}

/// `values`, or a placeholder for each one that looks like a credential (a token, a URL with
/// a password) or is a token setting's.
fn hide_credentials(key: &Key, values: Vec<String>) -> Vec<String> {
    values
        .into_iter()
        .map(|value| {
            if key.name.ends_with("token")
                || crate::kernel::secrets::classify("VALUE", &value).is_some()
            {
                "<hidden: a credential>".to_string()
            } else {
                value
            }
        })
        .collect()
}

/// A value as TOML, so a line can be copied into a file.
fn literal(key: &Key, values: &[String]) -> String {
    let one = |value: &String| {
        if value.parse::<i64>().is_ok() || value == "true" || value == "false" {
            value.clone()
        } else {
            format!("{value:?}")
        }
    };
    if key.list {
        format!(
            "[{}]",
            values.iter().map(one).collect::<Vec<_>>().join(", ")
        )
    } else {
        values.first().map(one).unwrap_or_default()
    }
}

fn print_table(
    name: &str,
    loaded: &Loaded,
    rows: &[Row<'_>],
    not_read: &[&crate::config::Entry],
    cwd: &std::path::Path,
) {
    let out = |text: String| super::stdout::line(format_args!("{text}"));
    out(format!(
        "Settings of `pi-repl {name}`: a flag wins over its variable, a variable over the \
         project file, the project file over the user file, the user file over the default."
    ));
    out(String::new());
    // The reference design's JSON file is named only when it exists.
    let shown = loaded
        .files
        .iter()
        .filter(|file| file.found || file.path.extension().is_none_or(|ext| ext != "json"));
    for file in shown {
        let state = match (file.found, file.refused) {
            (false, _) => " (not found)",
            (true, true) => " (not used: it has a problem)",
            (true, false) => "",
        };
        out(format!(
            "{:<13} {}{state}",
            file.layer.describe(),
            file.path.display()
        ));
    }
    if !loaded
        .files
        .iter()
        .any(|file| file.layer == crate::config::Layer::Project)
    {
        out(format!(
            "{:<13} none (no .pi/pi-repl.toml from {} up to the git root)",
            "project file",
            cwd.display()
        ));
    }
    out(String::new());
    let lines: Vec<(String, String)> = rows
        .iter()
        .map(|row| {
            let setting = match &row.values {
                Some(values) => format!("{} = {}", row.key.name, literal(row.key, values)),
                None => format!("{} (not set)", row.key.name),
            };
            (setting, row.source.describe())
        })
        .collect();
    let width = lines
        .iter()
        .map(|(setting, _)| setting.chars().count())
        .max()
        .unwrap_or(0)
        .min(48);
    for (setting, source) in lines {
        out(format!("{setting:<width$}  {source}"));
    }
    if !not_read.is_empty() {
        out(String::new());
        out(format!("In the files, not read by `pi-repl {name}`:"));
        for entry in not_read {
            out(format!(
                "{} ({} {}:{})",
                entry.key,
                entry.layer.describe(),
                entry.file.display(),
                entry.line
            ));
        }
    }
    for note in &loaded.notes {
        out(format!("note: {note}"));
    }
}

fn print_json(name: &str, loaded: &Loaded, rows: &[Row<'_>], not_read: &[&crate::config::Entry]) {
    let files: Vec<serde_json::Value> = loaded
        .files
        .iter()
        .map(|file| {
            json!({
                "layer": file.layer.describe(),
                "path": file.path,
                "found": file.found,
                "used": file.found && !file.refused,
            })
        })
        .collect();
    let settings: Vec<serde_json::Value> = rows
        .iter()
        .map(|row| {
            let value = match &row.values {
                None => serde_json::Value::Null,
                Some(values) if row.key.list => json!(values),
                Some(values) => json!(values.first()),
            };
            let (file, line) = match &row.source {
                Source::File { path, line, .. } => (json!(path), json!(line)),
                _ => (serde_json::Value::Null, serde_json::Value::Null),
            };
            json!({
                "key": row.key.name,
                "value": value,
                "source": row.source.kind(),
                "file": file,
                "line": line,
                "flag": format!("--{}", row.key.name),
                "flag_hidden": !row.key.flag_shown,
                "variable": row.key.variable,
                "guarded": crate::config::trust::guarded(&row.key.name).is_some(),
            })
        })
        .collect();
    let not_read: Vec<serde_json::Value> = not_read
        .iter()
        .map(|entry| {
            json!({
                "key": entry.key,
                "layer": entry.layer.describe(),
                "file": entry.file,
                "line": entry.line,
            })
        })
        .collect();
    let object = json!({
        "command": name,
        "files": files,
        "settings": settings,
        "not_read": not_read,
        "notes": loaded.notes,
    });
    super::stdout::line(format_args!("{object}"));
}

#[cfg(test)]
mod tests {
    use crate::config::reference;

    /// docs/configuration.md's table is the one the declarations give (every key, flag and
    /// variable); `PI_REPL_UPDATE_DOCS=1` rewrites it.
    #[test]
    fn the_configuration_doc_lists_every_key_flag_and_variable() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/configuration.md");
        let doc = std::fs::read_to_string(&path).expect("docs/configuration.md");
        let table = reference::table(&super::super::keys(), include_str!("../env_vars.rs"));
        let (Some(start), Some(end)) = (doc.find(reference::START), doc.find(reference::END))
        else {
            panic!("docs/configuration.md has no reference table markers");
        };
        let current = &doc[start..end + reference::END.len()];
        if current != table {
            if std::env::var_os("PI_REPL_UPDATE_DOCS").is_some() {
                let updated = doc.replacen(current, &table, 1);
                std::fs::write(&path, updated).expect("write docs/configuration.md");
            } else {
                panic!(
                    "docs/configuration.md's table is not the declarations' (run with \
                     PI_REPL_UPDATE_DOCS=1 to rewrite it):\n{table}"
                );
            }
        }
    }

    #[test]
    fn every_guarded_key_and_every_per_run_option_is_a_real_option() {
        let keys = super::super::keys();
        for (name, _) in crate::config::trust::GUARDED {
            assert!(keys.get(name).is_some(), "guarded `{name}` is not a key");
        }
        let command = <super::super::Cli as clap::CommandFactory>::command();
        for name in crate::config::keys::NOT_SETTINGS {
            let found = command
                .get_subcommands()
                .any(|sub| sub.get_arguments().any(|arg| arg.get_long() == Some(name)))
                || ["help", "version"].contains(name);
            assert!(found, "`{name}` in NOT_SETTINGS is no option");
        }
    }
}
