//! Configuration files: every setting from one file per user and one per project.
//!
//! Owns: finding the files (`files`), reading them with each key's line (`read`), the keys,
//! generated from the command line's own declaration (`keys`: a key is a setting's long flag),
//! guarded keys and the user's trust (`trust`), and handing the values to the command line as
//! its arguments' defaults ([`apply`]). So the order is clap's own: a flag, else its variable,
//! else the default, which is the project file's value, else the user file's, else the
//! built-in one. A missing file is nothing; a malformed file, an unknown key, a bad value or a
//! guarded key in a project file is a [`Problem`] naming the file, the line and the key (the
//! nearest valid one), which the front door reports as `error:` + `hint:` with exit code 2
//! (`pi-repl doctor` lists them instead, and runs without the files that have one).
//!
//! The reference table of docs/configuration.md is generated from the same declarations
//! (`reference`).
//!
//! Does not own: what a setting means (its argument in `cli/*_options.rs`), or showing where
//! each value came from (`cli/config.rs`, `pi-repl config`).

pub mod expected;
pub mod files;
pub mod keys;
mod problem;
pub mod read;
pub mod reference;
pub mod trust;

use std::path::{Path, PathBuf};

pub use keys::{Key, Keys};
pub use problem::Problem;
use read::{RawEntry, RawValue};
pub use trust::Trust;

/// Which file a value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Layer {
    User,
    Project,
}

impl Layer {
    pub fn describe(self) -> &'static str {
        match self {
            Layer::User => "user file",
            Layer::Project => "project file",
        }
    }
}

/// A setting's value from a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub key: String,
    /// As a flag would take it (one, or several for a list).
    pub values: Vec<String>,
    pub layer: Layer,
    pub file: PathBuf,
    pub line: usize,
}

/// A file that was looked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRead {
    pub path: PathBuf,
    pub layer: Layer,
    pub found: bool,
    /// Read, but not used: it has a problem.
    pub refused: bool,
}

/// The files read for one command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Loaded {
    pub files: Vec<FileRead>,
    /// Values, user files first; a later entry of a key wins.
    pub entries: Vec<Entry>,
    pub problems: Vec<Problem>,
    /// Keys read but not applied (the reference design's keys pi-repl has no use for).
    pub notes: Vec<String>,
    pub trust: Trust,
}

impl Loaded {
    /// The value of `key` in force from the files: the project file's, else the user file's.
    pub fn value(&self, key: &str) -> Option<&Entry> {
        self.entries.iter().rev().find(|entry| entry.key == key)
    }
}

/// The reference design's JSON keys: the key each one is read as, or why it is not read.
pub const REFERENCE_JSON_KEYS: &[(&str, Result<&str, &str>)] = &[
    ("pythonPath", Ok("python")),
    ("timeoutMs", Ok("timeout")),
    (
        "toolboxDir",
        Err(
            "not read: put helper files in PI_REPL_HOME/helpers/ (they add to the default toolbox, \
             a file named like a default tool replaces it)",
        ),
    ),
    (
        "snapshotDebounceMs",
        Err(
            "not read: pi-repl saves the state an answer reports before the answer leaves, with no debounce",
        ),
    ),
];

/// Reads the user's files and the project file for `cwd`.
pub fn load(keys: &Keys, cwd: &Path) -> Loaded {
    let mut loaded = Loaded::default();
    let user = files::user_files();
    if let Some(path) = &user.json {
        read_file(&mut loaded, keys, path, Layer::User, Format::ReferenceJson);
    }
    if let Some(path) = &user.toml {
        read_file(&mut loaded, keys, path, Layer::User, Format::Toml);
    }
    if let Some(path) = files::project_file(cwd) {
        read_file(&mut loaded, keys, &path, Layer::Project, Format::Toml);
    }
    loaded
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Toml,
    ReferenceJson,
}

fn read_file(loaded: &mut Loaded, keys: &Keys, path: &Path, layer: Layer, format: Format) {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        // Not there, or behind a directory this process may not enter (another user's home,
        // as for a process started with another uid but the same HOME): nothing to read. A file
        // that exists and cannot be read is an error below.
        Err(error)
            if error.kind() == std::io::ErrorKind::NotFound
                || (error.kind() == std::io::ErrorKind::PermissionDenied
                    && std::fs::symlink_metadata(path).is_err()) =>
        {
            loaded.files.push(FileRead {
                path: path.to_path_buf(),
                layer,
                found: false,
                refused: false,
            });
            return;
        }
        Err(error) => {
            refuse(
                loaded,
                path,
                layer,
                vec![Problem {
                    file: path.to_path_buf(),
                    line: None,
                    message: format!("cannot be read: {error}"),
                    hint: "make it readable, or remove it".into(),
                }],
            );
            return;
        }
    };
    let raw = match format {
        Format::Toml => read::toml_entries(path, &text),
        Format::ReferenceJson => read::json_entries(path, &text),
    };
    let raw = match raw {
        Ok(raw) => raw,
        Err(problem) => return refuse(loaded, path, layer, vec![problem]),
    };
    let mut file = FileReading {
        keys,
        path,
        layer,
        entries: Vec::new(),
        problems: Vec::new(),
        notes: Vec::new(),
        trust: Trust::default(),
    };
    for entry in raw {
        match format {
            Format::Toml => file.toml_entry(entry, &loaded.trust),
            Format::ReferenceJson => file.json_entry(entry),
        }
    }
    if !file.problems.is_empty() {
        let problems = std::mem::take(&mut file.problems);
        return refuse(loaded, path, layer, problems);
    }
    loaded.files.push(FileRead {
        path: path.to_path_buf(),
        layer,
        found: true,
        refused: false,
    });
    loaded.entries.append(&mut file.entries);
    loaded.notes.append(&mut file.notes);
    loaded.trust.everywhere.append(&mut file.trust.everywhere);
    loaded.trust.projects.append(&mut file.trust.projects);
}

fn refuse(loaded: &mut Loaded, path: &Path, layer: Layer, mut problems: Vec<Problem>) {
    loaded.files.push(FileRead {
        path: path.to_path_buf(),
        layer,
        found: true,
        refused: true,
    });
    loaded.problems.append(&mut problems);
}

/// One file being read.
struct FileReading<'a> {
    keys: &'a Keys,
    path: &'a Path,
    layer: Layer,
    entries: Vec<Entry>,
    problems: Vec<Problem>,
    notes: Vec<String>,
    trust: Trust,
}

impl FileReading<'_> {
    fn problem(&mut self, line: usize, message: String, hint: String) {
        self.problems.push(Problem {
            file: self.path.to_path_buf(),
            line: Some(line),
            message,
            hint,
        });
    }

    fn user_file_hint(&self) -> String {
        match files::user_files().toml {
            Some(path) => format!("your user file {}", path.display()),
            None => "your user file".into(),
        }
    }

    fn toml_entry(&mut self, entry: RawEntry, trust: &Trust) {
        match entry.key.as_str() {
            trust::TRUST_KEY | trust::PROJECT_TABLE if self.layer == Layer::Project => {
                let hint = format!(
                    "a project cannot trust itself: move it to {}",
                    self.user_file_hint()
                );
                self.problem(
                    entry.line,
                    format!("`{}` is read from the user file only", entry.key),
                    hint,
                );
            }
            trust::TRUST_KEY => {
                if let Some(keys) = self.trust_list(&entry) {
                    self.trust.everywhere.extend(keys);
                }
            }
            trust::PROJECT_TABLE => self.project_tables(&entry),
            _ => self.setting(entry, trust),
        }
    }

    /// `[project."<root>"]` tables: each holds `trust-project` only.
    fn project_tables(&mut self, entry: &RawEntry) {
        let RawValue::Table(projects) = &entry.value else {
            return self.problem(
                entry.line,
                format!("`{}` is a table of projects", trust::PROJECT_TABLE),
                format!(
                    "write it as [{}.\"/path/to/project\"] with {} = [\"KEY\", ...] under it",
                    trust::PROJECT_TABLE,
                    trust::TRUST_KEY
                ),
            );
        };
        for project in projects {
            let RawValue::Table(inner) = &project.value else {
                self.problem(
                    project.line,
                    format!("`{}.{}` is not a table", trust::PROJECT_TABLE, project.key),
                    format!(
                        "write it as [{}.\"{}\"] with {} = [\"KEY\", ...] under it",
                        trust::PROJECT_TABLE,
                        project.key,
                        trust::TRUST_KEY
                    ),
                );
                continue;
            };
            let root = files::expand(&project.key);
            if !root.is_absolute() {
                self.problem(
                    project.line,
                    format!("project `{}` is not an absolute path", project.key),
                    "name the project's root directory (the one holding .pi/) from / or ~/".into(),
                );
                continue;
            }
            for item in inner {
                if item.key != trust::TRUST_KEY {
                    self.problem(
                        item.line,
                        format!("unknown key `{}` in a project table", item.key),
                        format!(
                            "a [{}.\"...\"] table holds `{}` only; settings go in the project's own .pi/pi-repl.toml",
                            trust::PROJECT_TABLE,
                            trust::TRUST_KEY
                        ),
                    );
                    continue;
                }
                if let Some(keys) = self.trust_list(item) {
                    self.trust
                        .projects
                        .entry(root.clone())
                        .or_default()
                        .extend(keys);
                }
            }
        }
    }

    /// A `trust-project` list: guarded keys, or `*`.
    fn trust_list(&mut self, entry: &RawEntry) -> Option<Vec<String>> {
        let names = match &entry.value {
            RawValue::List(names) => names.clone(),
            RawValue::One(name) => vec![name.clone()],
            _ => {
                self.problem(
                    entry.line,
                    format!("`{}` is a list of guarded keys", trust::TRUST_KEY),
                    format!("write it like {} = [\"llm-base-url\"]", trust::TRUST_KEY),
                );
                return None;
            }
        };
        let mut good = Vec::new();
        for name in names {
            if name == "*" || trust::guarded(&name).is_some() {
                good.push(name);
                continue;
            }
            let guarded_names = trust::GUARDED.iter().map(|(key, _)| *key);
            let hint = match keys::nearest_of(&name, guarded_names) {
                Some(near) => format!(
                    "did you mean `{near}`? The guarded keys are listed in docs/configuration.md"
                ),
                None if self.keys.get(&name).is_some() => format!(
                    "`{name}` is not guarded: a project file may set it without trust; remove it from the list"
                ),
                None => "list guarded keys only (docs/configuration.md), or \"*\" for all of them"
                    .into(),
            };
            self.problem(
                entry.line,
                format!(
                    "`{}` names `{name}`, which is not a guarded key",
                    trust::TRUST_KEY
                ),
                hint,
            );
        }
        Some(good)
    }

    fn setting(&mut self, entry: RawEntry, trust: &Trust) {
        let Some(key) = self.keys.get(&entry.key) else {
            let hint = match self.keys.nearest(&entry.key) {
                Some(near) => format!(
                    "did you mean `{near}`? `pi-repl config` and docs/configuration.md list every key"
                ),
                None => "`pi-repl config` and docs/configuration.md list every key".into(),
            };
            return self.problem(entry.line, format!("unknown key `{}`", entry.key), hint);
        };
        let values = match &entry.value {
            RawValue::One(value) => match key.delimiter {
                Some(delimiter) => value.split(delimiter).map(String::from).collect(),
                None => vec![value.clone()],
            },
            RawValue::List(values) if key.list => values.clone(),
            RawValue::List(_) => {
                return self.problem(
                    entry.line,
                    format!("`{}` takes one value, not a list", entry.key),
                    format!("write it like {} = {}", entry.key, example(key)),
                );
            }
            RawValue::Table(_) | RawValue::Other(_) => {
                let what = match &entry.value {
                    RawValue::Other(what) => what,
                    _ => "a table",
                };
                return self.problem(
                    entry.line,
                    format!("`{}` is {what}, which no setting takes", entry.key),
                    format!("write it like {} = {}", entry.key, example(key)),
                );
            }
        };
        if let Err(refused) = self.keys.check(&entry.key, &values) {
            let shown = values.join(", ");
            let hint = match &refused.example {
                Some(valid) => format!("write it like {} = {}", entry.key, toml_literal(valid)),
                None => format!("fix `{}` or remove it", entry.key),
            };
            return self.problem(
                entry.line,
                format!(
                    "invalid value {shown:?} for `{}`: {}",
                    entry.key, refused.expected
                ),
                hint,
            );
        }
        if self.layer == Layer::Project
            && let Some(why) = trust::guarded(&entry.key)
        {
            let root = files::project_root(self.path);
            if !trust.allows(&root, &entry.key) {
                let flag = format!("--{}", entry.key);
                let yourself = match &key.variable {
                    Some(variable) if key.flag_shown => format!("{flag} or {variable}"),
                    Some(variable) => variable.clone(),
                    None => flag,
                };
                let hint = format!(
                    "if you trust this project with it, add to {}:\n  [{}.\"{}\"]\n  {} = [\"{}\"]\nor set it yourself with {yourself}",
                    self.user_file_hint(),
                    trust::PROJECT_TABLE,
                    root.display(),
                    trust::TRUST_KEY,
                    entry.key
                );
                return self.problem(
                    entry.line,
                    format!(
                        "`{}` is not taken from a project file unless you trust the project: {why}",
                        entry.key
                    ),
                    hint,
                );
            }
        }
        self.entries.push(Entry {
            key: entry.key,
            values,
            layer: self.layer,
            file: self.path.to_path_buf(),
            line: entry.line,
        });
    }

    fn json_entry(&mut self, entry: RawEntry) {
        let Some((_, read_as)) = REFERENCE_JSON_KEYS
            .iter()
            .find(|(name, _)| *name == entry.key)
        else {
            let names = REFERENCE_JSON_KEYS.iter().map(|(name, _)| *name);
            let hint = match keys::nearest_of(&entry.key, names) {
                Some(near) => format!("did you mean `{near}`? Or move your settings to pi-repl.toml (docs/configuration.md)"),
                None => "this file takes the reference design's keys (pythonPath, timeoutMs, toolboxDir, snapshotDebounceMs); put other settings in pi-repl.toml (docs/configuration.md)".into(),
            };
            return self.problem(entry.line, format!("unknown key `{}`", entry.key), hint);
        };
        match read_as {
            Ok(key) => {
                let key = key.to_string();
                self.setting(
                    RawEntry {
                        key,
                        line: entry.line,
                        value: entry.value,
                    },
                    &Trust::default(),
                );
            }
            Err(why) => self.notes.push(format!(
                "{}:{}: `{}` is {why}",
                self.path.display(),
                entry.line,
                entry.key
            )),
        }
    }
}

/// A valid value of `key` as TOML, for a hint.
fn example(key: &Key) -> String {
    let one = key.default.first().cloned().unwrap_or_else(|| "...".into());
    if key.list {
        format!("[{}]", toml_literal(&one))
    } else {
        toml_literal(&one)
    }
}

/// `text` as a TOML value: a number or boolean as is, anything else quoted.
fn toml_literal(text: &str) -> String {
    if text.parse::<i64>().is_ok() || text == "true" || text == "false" {
        text.to_string()
    } else {
        format!("{text:?}")
    }
}

/// The command line's definition with the files' values as the defaults of the arguments
/// they set, in the commands that read the configuration.
pub fn apply(command: clap::Command, loaded: &Loaded, keys: &Keys) -> clap::Command {
    let reading = keys.reading().to_vec();
    command.mut_subcommands(move |sub| {
        if !reading.iter().any(|name| name == sub.get_name()) {
            return sub;
        }
        sub.mut_args(|arg| {
            let entry = arg
                .get_long()
                .filter(|long| !keys::NOT_SETTINGS.contains(long))
                .and_then(|long| loaded.value(long));
            match entry {
                Some(entry) => arg.default_values(entry.values.clone()),
                None => arg,
            }
        })
    })
}
