//! `pi-repl attach NAME`: step into the live kernel of a running session as a person.
//!
//! Owns: finding the session (or one of its sub-agents' workspaces), checking that its kernel
//! is live, and printing its connection file (`<session>/kernel.json`, written by the engine's
//! `attach_file`) with how to use it, or running `jupyter console --existing` on it
//! (`--console`). The agent's queue is untouched: the kernel runs the person's cells between or
//! after the agent's, and the agent's next result names each one (`engine::visitors`).

use std::path::{Path, PathBuf};

use anyhow::Context;

use super::{Exit, Failure};
use crate::home::Home;
use crate::session::listing;

#[derive(Debug, clap::Args)]
pub struct AttachArgs {
    /// The running session's name (in this project) or its full key.
    pub name: String,

    /// A sub-agent of that session (or of one of its sub-agents) whose kernel to attach to.
    #[arg(long, value_name = "ID")]
    pub agent: Option<String>,

    /// Run `jupyter console --existing FILE` on it here (jupyter-console from PATH or from
    /// pi-repl's venv) instead of printing the file and how to use it.
    #[arg(long)]
    pub console: bool,
}

pub async fn run(args: AttachArgs) -> Result<Exit, Failure> {
    let home = Home::from_env()?;
    let here = std::env::current_dir().context("cannot read the current directory")?;
    let session = listing::find(&home, &here, &args.name)
        .map_err(|e| Failure::usage(anyhow::anyhow!(e), None))?;
    let workspace = match &args.agent {
        Some(id) => {
            crate::engine::notebook::export::agent_workspace(&session.dir, id).ok_or_else(|| {
                Failure::usage(
                    anyhow::anyhow!("session {:?} has no sub-agent {id:?}", args.name),
                    Some(format!(
                        "its sub-agents are listed under {}",
                        session.dir.join("agents").display()
                    )),
                )
            })?
        }
        None => session.dir.clone(),
    };
    let file = workspace.join(crate::engine::ATTACH_FILE);
    if !kernel_is_live(&file) {
        return Err(Failure::new(
            anyhow::anyhow!(
                "session {:?} has no live local kernel to attach to",
                args.name
            ),
            Some(format!(
                "start it (`pi-repl mcp --session {}`, or pi with --repl) and run a cell; a \
                 kernel on a Jupyter Server is reached through that server instead",
                args.name
            )),
        ));
    }
    if args.console {
        return console(&home, &file);
    }
    super::stdout::line(file.display());
    crate::stderr_line!(
        "Connect a Jupyter client to the session's live kernel with:\n  jupyter console \
         --existing {}\nWhat you run there shares the agent's namespace; the agent's next result \
         names each cell you ran. Leave with `exit` (or Ctrl-D) and answer `n` to keep the kernel \
         running (`y` would shut down the agent's kernel).",
        file.display()
    );
    Ok(Exit::Success)
}

/// True when `file` names a kernel whose heartbeat socket accepts a connection.
fn kernel_is_live(file: &Path) -> bool {
    let Ok(bytes) = std::fs::read(file) else {
        return false;
    };
    let Ok(info) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        return false;
    };
    let (Some(ip), Some(port)) = (info["ip"].as_str(), info["hb_port"].as_u64()) else {
        return false;
    };
    match info["transport"].as_str() {
        Some("ipc") => std::os::unix::net::UnixStream::connect(format!("{ip}-{port}")).is_ok(),
        _ => std::net::TcpStream::connect((ip, port as u16)).is_ok(),
    }
}

/// Runs `jupyter console --existing file` with this terminal.
fn console(home: &Home, file: &Path) -> Result<Exit, Failure> {
    let Some(jupyter) = find_jupyter(home) else {
        return Err(Failure::new(
            anyhow::anyhow!("jupyter-console is not installed here"),
            Some(format!(
                "install it (`pip install jupyter-console`), or run `pi-repl attach` without \
                 --console and connect any Jupyter client to {}",
                file.display()
            )),
        ));
    };
    let status = std::process::Command::new(&jupyter)
        .arg("console")
        .arg("--existing")
        .arg(file)
        .status()
        .with_context(|| format!("cannot run {}", jupyter.display()))?;
    Ok(if status.success() {
        Exit::Success
    } else {
        Exit::Failure
    })
}

/// A `jupyter` that has the console subcommand: on PATH, else in pi-repl's venv.
fn find_jupyter(home: &Home) -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default();
    on_path
        .into_iter()
        .chain([home.venv().join("bin")])
        .find(|dir| dir.join("jupyter-console").is_file())
        .map(|dir| dir.join("jupyter"))
        .filter(|jupyter| jupyter.is_file())
}
