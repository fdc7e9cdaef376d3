//! The reference table of docs/configuration.md: every key, its flag, its variable, its
//! default and its meaning, then the variables that have no key, in one table.
//!
//! Generated from the same declarations as everything else (the clap arguments through
//! [`Keys`], the doc comments of `src/env_vars.rs`), and checked against the doc by a test
//! (`cli::config::tests`), which rewrites it with `PI_REPL_UPDATE_DOCS=1`.

use super::Keys;

/// The doc's markers around the generated table.
pub const START: &str = "<!-- reference table: generated, see src/config/reference.rs -->";
pub const END: &str = "<!-- end of the reference table -->";

/// The variables `env_vars` (the text of `src/env_vars.rs`) declares, each with its doc.
pub fn declared_variables(env_vars: &str) -> Vec<(String, String)> {
    let mut doc: Vec<&str> = Vec::new();
    let mut variables = Vec::new();
    for line in env_vars.lines() {
        let line = line.trim();
        if let Some(text) = line.strip_prefix("///") {
            doc.push(text.trim());
        } else if let Some(rest) = line.strip_prefix("pub const ") {
            let name = rest
                .split(':')
                .next()
                .unwrap_or_default()
                .trim()
                .to_string();
            variables.push((name, doc.join(" ")));
            doc.clear();
        } else {
            doc.clear();
        }
    }
    variables
}

/// The table, between its markers.
pub fn table(keys: &Keys, env_vars: &str) -> String {
    let cell = |text: &str| text.replace('|', "\\|").replace('\n', " ");
    let mut out = vec![
        START.to_string(),
        String::new(),
        "| key | flag | variable | default | meaning |".to_string(),
        "|---|---|---|---|---|".to_string(),
    ];
    for key in keys.iter() {
        let flag = if key.flag_shown {
            format!("`--{}`", key.name)
        } else {
            "(variable only)".to_string()
        };
        let variable = key
            .variable
            .as_ref()
            .map_or("—".to_string(), |name| format!("`{name}`"));
        let default = if key.default.is_empty() {
            "—".to_string()
        } else {
            format!("`{}`", key.default.join(","))
        };
        let mut meaning = cell(&key.help);
        if super::trust::guarded(&key.name).is_some() {
            meaning = format!("**guarded**: {meaning}");
        }
        if key.commands.len() < keys.reading().len() - 1 {
            meaning = format!("{meaning} ({} only)", key.commands.join(", "));
        }
        out.push(format!(
            "| `{}` | {flag} | {variable} | {default} | {meaning} |",
            key.name
        ));
    }
    for (name, doc) in declared_variables(env_vars) {
        if keys
            .iter()
            .any(|key| key.variable.as_deref() == Some(name.as_str()))
        {
            continue;
        }
        out.push(format!("| — | — | `{name}` | — | {} |", cell(&doc)));
    }
    out.push(String::new());
    out.push(END.to_string());
    out.join("\n")
}
