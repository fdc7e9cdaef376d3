//! Reading one configuration file into its entries, each with the line it is on.
//!
//! Owns: the file formats. A TOML file (`pi-repl.toml`) is parsed with `toml`'s spanned
//! document (`toml::de::DeTable`), so every key and value keeps its line; the reference
//! design's JSON file (`pi-repl.json`) with `serde_json`, each key's line found in the text.
//! Values become text as a flag would take it (`8000`, `true`, `http://...`); a list stays a
//! list. Does not own: what the keys mean or whether a value is valid (`keys`, `trust`).

use std::path::Path;

use toml::de::{DeTable, DeValue};

use super::problem::Problem;

/// A key of a file, where it is, and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawEntry {
    pub key: String,
    /// 1-based line of the key.
    pub line: usize,
    pub value: RawValue,
}

/// A value as read, before it is checked against its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawValue {
    /// A string, number or boolean, as text.
    One(String),
    /// An array of those.
    List(Vec<String>),
    /// A table (`[project."/path"]`), with its entries.
    Table(Vec<RawEntry>),
    /// Anything else (a date, an array of tables), named for the error.
    Other(&'static str),
}

/// The 1-based line holding byte `offset` of `text`.
pub fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset.min(text.len()))
        .unwrap_or(text)
        .matches('\n')
        .count()
        + 1
}

/// The entries of the TOML file `path` holding `text`, in the file's order.
pub fn toml_entries(path: &Path, text: &str) -> Result<Vec<RawEntry>, Problem> {
    let table = DeTable::parse(text).map_err(|error| Problem {
        file: path.to_path_buf(),
        line: error.span().map(|span| line_of(text, span.start)),
        message: format!("not valid TOML: {}", error.message().trim()),
        hint: "fix the file at that line (TOML: `key = value`, strings in quotes), or remove it"
            .into(),
    })?;
    Ok(table_entries(text, table.get_ref()))
}

fn table_entries(text: &str, table: &DeTable<'_>) -> Vec<RawEntry> {
    let mut entries: Vec<RawEntry> = table
        .iter()
        .map(|(key, value)| RawEntry {
            key: key.get_ref().to_string(),
            line: line_of(text, key.span().start),
            value: toml_value(text, value.get_ref()),
        })
        .collect();
    entries.sort_by_key(|entry| entry.line);
    entries
}

fn toml_value(text: &str, value: &DeValue<'_>) -> RawValue {
    match scalar(value) {
        Some(one) => RawValue::One(one),
        None => match value {
            DeValue::Array(items) => items
                .iter()
                .map(|item| scalar(item.get_ref()))
                .collect::<Option<Vec<String>>>()
                .map_or(RawValue::Other("a list of lists or tables"), RawValue::List),
            DeValue::Table(table) => RawValue::Table(table_entries(text, table)),
            _ => RawValue::Other("a date"),
        },
    }
}

fn scalar(value: &DeValue<'_>) -> Option<String> {
    match value {
        DeValue::String(text) => Some(text.to_string()),
        DeValue::Integer(number) => Some(
            i128::from_str_radix(number.as_str(), number.radix())
                .map_or_else(|_| number.as_str().to_string(), |n| n.to_string()),
        ),
        DeValue::Float(number) => Some(number.as_str().to_string()),
        DeValue::Boolean(flag) => Some(flag.to_string()),
        _ => None,
    }
}

/// The entries of the JSON file `path` holding `text` (an object of keys), in the file's order.
pub fn json_entries(path: &Path, text: &str) -> Result<Vec<RawEntry>, Problem> {
    let problem = |line: Option<usize>, message: String| Problem {
        file: path.to_path_buf(),
        line,
        message,
        hint: "fix the file at that line, or remove it".into(),
    };
    let value: serde_json::Value = serde_json::from_str(text)
        .map_err(|error| problem(Some(error.line()), format!("not valid JSON: {error}")))?;
    let serde_json::Value::Object(object) = value else {
        return Err(problem(Some(1), "not a JSON object of keys".into()));
    };
    let mut entries: Vec<RawEntry> = object
        .into_iter()
        .map(|(key, value)| {
            let quoted = serde_json::to_string(&key).unwrap_or_default();
            let line = text.find(&quoted).map_or(1, |offset| line_of(text, offset));
            let value = match value {
                serde_json::Value::String(text) => RawValue::One(text),
                serde_json::Value::Number(number) => RawValue::One(number.to_string()),
                serde_json::Value::Bool(flag) => RawValue::One(flag.to_string()),
                serde_json::Value::Null => RawValue::Other("null"),
                serde_json::Value::Array(_) => RawValue::Other("a list"),
                serde_json::Value::Object(_) => RawValue::Other("an object"),
            };
            RawEntry { key, line, value }
        })
        .collect();
    entries.sort_by_key(|entry| entry.line);
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toml(text: &str) -> Result<Vec<RawEntry>, Problem> {
        toml_entries(Path::new("/p.toml"), text)
    }

    #[test]
    fn toml_keys_keep_their_lines_and_values_become_flag_text() {
        let entries = toml(
            "# a comment\nmax-output = 8000\n\nllm-model = \"qwen\"\npass-env = [\"A\", \"B\"]\n\
             [project.\"/src/app\"]\ntrust-project = [\"llm-model\"]\n",
        )
        .unwrap();
        let keys: Vec<(&str, usize)> = entries.iter().map(|e| (e.key.as_str(), e.line)).collect();
        assert_eq!(
            keys,
            [
                ("max-output", 2),
                ("llm-model", 4),
                ("pass-env", 5),
                ("project", 6)
            ]
        );
        assert_eq!(entries[0].value, RawValue::One("8000".into()));
        assert_eq!(
            entries[2].value,
            RawValue::List(vec!["A".into(), "B".into()])
        );
        let RawValue::Table(projects) = &entries[3].value else {
            panic!("{:?}", entries[3].value)
        };
        let RawValue::Table(app) = &projects[0].value else {
            panic!("{projects:?}")
        };
        assert_eq!(app[0].key, "trust-project");
        assert_eq!(app[0].line, 7);
    }

    #[test]
    fn malformed_toml_names_its_line() {
        let problem = toml("max-output = 8000\nllm-model = qwen\n").unwrap_err();
        assert_eq!(problem.line, Some(2), "{problem:?}");
        assert!(problem.message.starts_with("not valid TOML"), "{problem:?}");
        let problem = toml("a = 1\na = 2\n").unwrap_err();
        assert_eq!(problem.line, Some(2), "{problem:?}");
    }

    #[test]
    fn json_keys_keep_their_lines_and_malformed_json_names_its_line() {
        let entries = json_entries(
            Path::new("/p.json"),
            "{\n  \"pythonPath\": \"/usr/bin/python3\",\n  \"timeoutMs\": 60000\n}\n",
        )
        .unwrap();
        assert_eq!(entries[0].key, "pythonPath");
        assert_eq!(entries[0].line, 2);
        assert_eq!(entries[1].value, RawValue::One("60000".into()));
        let problem = json_entries(Path::new("/p.json"), "{\n  \"timeoutMs\": ,\n}").unwrap_err();
        assert_eq!(problem.line, Some(2));
    }
}
