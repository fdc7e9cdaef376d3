//! Flags that choose the session a command works in.

use std::path::{Path, PathBuf};

use super::Failure;
use crate::home::Home;
use crate::session::{self, KEEP_SESSIONS, Session, SessionRequest};

#[derive(Debug, Clone, Default, clap::Args)]
pub struct SessionOptions {
    /// Work in the named, durable session (saved and revived); without it the workspace is
    /// ephemeral and saves nothing.
    #[arg(long, value_name = "NAME")]
    pub session: Option<String>,

    /// On the session's first start, copy this session's last snapshot into it (the parent is
    /// untouched).
    #[arg(long, value_name = "PARENT", requires = "session")]
    pub fork_from: Option<String>,

    /// With --fork-from: start from the state the parent kept right after its answered cell
    /// CELL (the one `execute {"rewind": CELL}` returns to) instead of its last snapshot; when
    /// that state is no longer kept, the last snapshot, and the first result says so.
    #[arg(long, value_name = "CELL", requires = "fork_from", value_parser = clap::value_parser!(u64).range(1..))]
    pub fork_at: Option<u64>,

    /// The conversation file this session belongs to; when it is deleted, the session's state
    /// is swept.
    #[arg(long, value_name = "PATH", requires = "session")]
    pub conversation_file: Option<PathBuf>,
}

impl SessionOptions {
    /// Opens the session (and prunes old ones when it is a named session).
    pub fn open(&self, home: &Home, project_dir: &Path) -> Result<Session, Failure> {
        let request = SessionRequest {
            name: self.session.clone(),
            fork_from: self.fork_from.clone(),
            fork_at: self.fork_at,
            conversation_file: self.conversation_file.clone(),
        };
        let opened = session::open(home, project_dir, &request).map_err(|error| {
            let hint = error
                .to_string()
                .contains("in use")
                .then(|| "stop the other pi-repl, or use another --session name".to_string());
            Failure::new(error, hint)
        })?;
        if !opened.is_ephemeral() {
            let report = session::prune(home, Some(&opened.key), KEEP_SESSIONS);
            for (key, reason) in report.removed {
                tracing::info!(%key, %reason, "removed an old session");
            }
        }
        Ok(opened)
    }
}
