//! Writing to a stdout whose reader may have gone (`pi-repl exec … | head`).
//!
//! A closed pipe is neither an error nor a panic (as `println!` would make it): the first write
//! that fails with a broken pipe marks stdout closed, later writes are dropped, and `closed()`
//! is cancelled so a command can stop the work whose output nobody reads. The command then
//! ends quietly with `Exit::StdoutClosed` (141), what a shell reports for a writer ended by a closed pipe
//! (`yes | head`: 128 + SIGPIPE).

use std::io::Write;
use std::sync::OnceLock;

use tokio_util::sync::CancellationToken;

fn token() -> &'static CancellationToken {
    static CLOSED: OnceLock<CancellationToken> = OnceLock::new();
    CLOSED.get_or_init(CancellationToken::new)
}

/// Cancelled once stdout's reader has gone.
pub fn closed() -> CancellationToken {
    token().clone()
}

/// True once stdout's reader has gone.
pub fn is_closed() -> bool {
    token().is_cancelled()
}

/// Writes `text` to stdout and flushes. A broken pipe marks stdout closed; other errors (a
/// full disk behind a redirect) are dropped too, since no output of pi-repl's is worth failing
/// a run for, but they do not close stdout.
pub fn write(text: &str) {
    if text.is_empty() || is_closed() {
        return;
    }
    let mut out = std::io::stdout().lock();
    if let Err(error) = out.write_all(text.as_bytes()).and_then(|()| out.flush())
        && error.kind() == std::io::ErrorKind::BrokenPipe
    {
        token().cancel();
    }
}

/// Writes `text` and a newline to stdout (`println!` without the panic).
pub fn line(text: impl std::fmt::Display) {
    write(&format!("{text}\n"));
}
