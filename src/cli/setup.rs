//! `pi-repl setup`: create or update the per-user Python environment.

use std::path::PathBuf;

use anyhow::Context;

use super::{Exit, Failure};
use crate::home::Home;

#[derive(Debug, clap::Args)]
pub struct SetupArgs {
    /// Interpreter to build the environment from [default: python3 on PATH].
    #[arg(long, value_name = "PATH")]
    pub python: Option<PathBuf>,

    /// Rebuild even if the environment is already up to date.
    #[arg(long)]
    pub force: bool,
}

/// Prints the environment's interpreter path on stdout; progress goes to stderr.
pub async fn run(args: SetupArgs) -> Result<Exit, Failure> {
    let home = Home::from_env()?;
    let report = tokio::task::spawn_blocking(move || {
        crate::setup::run(&home, args.python.as_deref(), args.force)
    })
    .await
    .context("the setup task failed")?
    .map_err(|error| Failure::new(error, None))?;
    if !report.built {
        crate::stderr_line!("pi-repl: the environment is already up to date");
    }
    super::stdout::line(format_args!("{}", report.python.display()));
    Ok(Exit::Success)
}
