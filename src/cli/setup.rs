//! `pi-repl setup`: create or update the per-user Python environment.

use std::path::PathBuf;

use anyhow::Context;

use super::{Exit, Failure};
use crate::home::Home;
use crate::python_env::interpreter::Resolution;

#[derive(Debug, clap::Args)]
pub struct SetupArgs {
    /// Interpreter to build the environment from [default: python3 on PATH].
    #[arg(long, value_name = "PATH")]
    pub python: Option<PathBuf>,

    /// Rebuild even if the environment is already up to date.
    #[arg(long)]
    pub force: bool,

    /// Install Deno (pinned, from PyPI) and its `deno` kernelspec into pi-repl's own Jupyter
    /// path instead, for `--kernel deno` (JavaScript/TypeScript cells); prints the deno binary.
    #[arg(long)]
    pub deno: bool,
}

/// Prints the environment's interpreter path on stdout; progress goes to stderr.
pub async fn run(args: SetupArgs) -> Result<Exit, Failure> {
    let home = Home::from_env()?;
    if args.deno {
        return deno(args, home).await;
    }
    let report = tokio::task::spawn_blocking(move || {
        crate::python_env::venv::run(&home, args.python.as_deref(), args.force)
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

/// `setup --deno`: pip needs a Python, not pi-repl's environment: `--python`, else the one
/// kernels would run on (the environment pi-repl is installed in, its venv), else `python3` on
/// PATH.
async fn deno(args: SetupArgs, home: Home) -> Result<Exit, Failure> {
    let named = args
        .python
        .as_deref()
        .map(|path| (path, crate::python_env::interpreter::Source::Flag));
    let python = match crate::python_env::interpreter::resolve(named, &home) {
        Ok(Resolution::Found(found)) => found.path,
        Ok(Resolution::NeedsSetup {
            fallback: Some(python3),
        }) => python3.path,
        Ok(Resolution::NeedsSetup { fallback: None }) => {
            return Err(Failure::new(
                anyhow::anyhow!("no Python to run pip with (Deno is installed from PyPI)"),
                Some("pass one with `pi-repl setup --deno --python PATH`".into()),
            ));
        }
        Err(error) => return Err(Failure::new(anyhow::Error::from(error), None)),
    };
    let report = tokio::task::spawn_blocking(move || {
        crate::python_env::deno::install(&home, &python, args.force)
    })
    .await
    .context("the setup task failed")?
    .map_err(|error| Failure::new(error, None))?;
    if !report.installed {
        crate::stderr_line!(
            "pi-repl: {} is already installed",
            crate::python_env::deno::DENO_PIN
        );
    }
    crate::stderr_line!(
        "pi-repl: kernelspec `deno` in {}; run cells with `pi-repl exec --kernel deno CODE` \
         or `pi-repl mcp --kernel deno`",
        report.kernelspec.display()
    );
    super::stdout::line(format_args!("{}", report.deno.display()));
    Ok(Exit::Success)
}
