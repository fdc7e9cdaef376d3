//! A problem with a configuration file, as every part of reading one reports it: the file, the
//! line when known, what is wrong, and how to fix it.

use std::path::PathBuf;

/// Something wrong with a file: where, what, and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub file: PathBuf,
    pub line: Option<usize>,
    pub message: String,
    pub hint: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.file.display(), self.message),
            None => write!(f, "{}: {}", self.file.display(), self.message),
        }
    }
}
