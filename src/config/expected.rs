//! What a setting accepts, in words, when its text is not that: the one phrasing a bad value
//! gets from a flag, a variable (`cli/values.rs`) and a configuration file (`keys.rs`).
//!
//! Owns: [`Expected`] (the error every value parser of ours returns) and reading it back out of
//! clap's error ([`expected_of`]). Does not own: the parsers (`cli/values.rs`) nor the
//! `error:`/`hint:` text around the words. It lives in `config/` because `cli/` builds on
//! `config/`, never the reverse.

/// What a setting accepts, said when its text is not that.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    /// `a whole number of milliseconds`.
    pub what: String,
    /// A valid value, for the hint: `60000`.
    pub example: String,
}

impl Expected {
    pub(crate) fn new(what: impl Into<String>, example: impl Into<String>) -> Expected {
        Expected {
            what: what.into(),
            example: example.into(),
        }
    }
}

impl std::fmt::Display for Expected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "expected {}", self.what)
    }
}

impl std::error::Error for Expected {}

/// What a value parser's error says the setting takes, and a valid value if it knows one:
/// the words of one of our parsers ([`Expected`]), the list of a fixed set of values, or the
/// words of another parser.
pub fn expected_of(error: &clap::Error) -> (String, Option<String>) {
    use clap::error::{ContextKind, ContextValue};
    if let Some(ContextValue::Strings(valid)) = error.get(ContextKind::ValidValue) {
        return (
            format!("expected one of: {}", valid.join(", ")),
            valid.first().cloned(),
        );
    }
    match std::error::Error::source(error) {
        Some(source) => match source.downcast_ref::<Expected>() {
            Some(expected) => (expected.to_string(), Some(expected.example.clone())),
            // A parser that is not one of ours: its own words, and no example.
            None => (source.to_string(), None),
        },
        None => (
            error
                .to_string()
                .trim()
                .trim_start_matches("error: ")
                .to_string(),
            None,
        ),
    }
}
