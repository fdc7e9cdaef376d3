//! Writing a line to stderr without `eprintln!`'s panic.
//!
//! `eprintln!` panics when stderr is closed or its reader has gone (`pi-repl exec … 2>&-`, a
//! client that closed the pipe it reads diagnostics from). pi-repl's messages on stderr are
//! never worth a crash: `stderr_line!` writes the line and drops it if stderr cannot take it.

use std::io::Write;

/// Writes one line to stderr; a write that fails is dropped.
pub fn write_line(text: std::fmt::Arguments<'_>) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_fmt(text).and_then(|()| err.write_all(b"\n"));
}

/// `eprintln!` that never panics (see the module doc).
#[macro_export]
macro_rules! stderr_line {
    ($($arg:tt)*) => {
        $crate::stderr::write_line(format_args!($($arg)*))
    };
}
