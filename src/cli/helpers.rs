//! `pi-repl helpers`: which helper files a session in a directory would load, from where, and
//! what shadows what, with each function's signature, read without starting a kernel.

use std::path::Path;
use std::process::Stdio;

use anyhow::Context;

use super::engine_options::acquire_interpreter;
use super::{Exit, Failure};
use crate::helpers::{Discovery, LoadRecord, discover};
use crate::home::Home;
use crate::python_env::embedded_package;

#[derive(Debug, clap::Args)]
pub struct HelpersArgs {
    /// The session's working directory [default: the current directory].
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<std::path::PathBuf>,

    #[command(flatten)]
    pub python: super::engine_options::PythonOption,

    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub auto_setup: super::engine_options::AutoSetup,
}

pub async fn run(args: HelpersArgs) -> Result<Exit, Failure> {
    let home = Home::from_env()?;
    let cwd = match &args.cwd {
        Some(dir) => std::path::absolute(dir).context("cannot resolve --cwd")?,
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let module_dir = embedded_package::ensure_unpacked(&home)?;
    let found = discover(
        &cwd,
        &home.helpers(),
        &embedded_package::toolbox_dir(&module_dir),
    );
    let python = acquire_interpreter(&args.python, args.auto_setup, &home).await?;
    let described = describe_statically(&python.path, &module_dir, &found).await?;
    if args.json {
        let json = serde_json::json!({"files": found.files, "skipped": found.skipped, "described": described});
        super::stdout::line(format_args!(
            "{}",
            serde_json::to_string_pretty(&json).context("cannot encode")?
        ));
        return Ok(Exit::Success);
    }
    super::stdout::write(&render(&found, &described));
    Ok(Exit::Success)
}

/// Reads each winning file's summary and signatures with the kernel module's own static
/// reader (`helpers.describe_file`: the AST, nothing executed).
pub async fn describe_statically(
    python: &Path,
    module_dir: &Path,
    found: &Discovery,
) -> anyhow::Result<Vec<LoadRecord>> {
    let program = "import json, sys\n\
                   sys.path.insert(0, sys.argv[1])\n\
                   from pi_repl_kernel.helpers import describe_file\n\
                   print(json.dumps([describe_file(p) for p in sys.argv[2:]]))";
    let output = tokio::process::Command::new(python)
        .arg("-c")
        .arg(program)
        .arg(module_dir)
        .args(found.files.iter().map(|f| &f.path))
        .stdin(Stdio::null())
        .output()
        .await
        .with_context(|| format!("cannot run {}", python.display()))?;
    if !output.status.success() {
        anyhow::bail!(
            "reading the helper files failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    serde_json::from_slice(&output.stdout).context("the helper descriptions are not JSON")
}

fn render(found: &Discovery, described: &[LoadRecord]) -> String {
    let mut text = String::new();
    for (file, record) in found.files.iter().zip(described) {
        text.push_str(&format!(
            "{}  [{}]  {}\n",
            file.name,
            file.origin.describe(),
            file.path.display()
        ));
        if let Some(summary) = &record.summary {
            text.push_str(&format!("    {summary}\n"));
        }
        for function in &record.functions {
            text.push_str(&format!(
                "    {}{}\n",
                function.name,
                function.signature.as_deref().unwrap_or("")
            ));
        }
        if let Some(error) = &record.error {
            text.push_str(&format!(
                "    cannot be read: {}: {}\n",
                error.kind, error.message
            ));
        }
        for hidden in &file.shadows {
            text.push_str(&format!("    shadows {}\n", hidden.display()));
        }
    }
    for skipped in &found.skipped {
        text.push_str(&format!(
            "skipped (name starts with _): {}\n",
            skipped.display()
        ));
    }
    text
}
